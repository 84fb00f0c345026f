"""Bit precision of weights from their posterior variance (Louizos et al. 2017, sec. 4.1).

A weight whose posterior variance is ``v`` need not be stored more precisely than its
uncertainty. Following the authors' code (``compression.py``), the significand of layer
``l`` gets

.. math::  t_l = \\Big\\lceil \\operatorname{mean}_{w \\in l}\\, \\#\\{t \\in 1..23 : 2^{-t} > 2 v_w\\} \\Big\\rceil

bits (the unit round-off ``2^-t`` is kept above twice the variance), the exponent
``\\lceil \\log_2(\\log_2 m + 1) + 1 \\rceil`` bits for the largest magnitude ``m`` of the
posterior means (with ``log_2 m`` floored at 1 here, so magnitudes below 2 need no special
case), and a weight costs ``1 + exponent + t_l`` bits (sign, exponent, significand).
"""

import math
from typing import Dict, Optional, Sequence

import torch

FLOAT32_SIGNIFICAND_BITS = 23


def significand_bits(variances: torch.Tensor, max_bits: int = FLOAT32_SIGNIFICAND_BITS) -> int:
    """``t_l`` of the kept weights of one layer from their posterior variances."""
    v = variances.detach().flatten().double()
    if v.numel() == 0:
        return 0
    if (v < 0).any() or torch.isnan(v).any():
        raise ValueError("posterior variances must be non-negative")
    t = torch.arange(1, max_bits + 1, dtype=torch.float64, device=v.device)
    counts = (2.0 ** (-t)[None, :] > 2 * v[:, None]).sum(1).double()
    return int(math.ceil(float(counts.mean())))


def exponent_bits(max_magnitude: float) -> int:
    """Exponent bits ``ceil(log2(max(log2 m, 1) + 1) + 1)`` for the largest magnitude ``m``
    of a layer's posterior means (see the module's docstring)."""
    if not (max_magnitude >= 0 and math.isfinite(max_magnitude)):
        raise ValueError(f"max_magnitude must be finite and non-negative, got {max_magnitude}")
    return int(math.ceil(math.log2(max(math.log2(max(max_magnitude, 1e-300)), 1.0) + 1.0) + 1.0))


def round_to_bits(w: torch.Tensor, bits: int, exponent: Optional[int] = None, max_magnitude: Optional[float] = None) -> torch.Tensor:
    """``w`` rounded to a binary floating-point format with ``bits`` significand bits.

    Without ``exponent`` the exponent of every entry is kept as it is. With ``exponent``
    bits and the largest magnitude ``max_magnitude`` the format is the one
    :func:`compression_with_precision` charges ``1 + exponent + bits`` bits for: the
    ``2^exponent`` exponent codes cover the binades ending at ``max_magnitude``'s, the
    lowest code kept for zero and gradual underflow (as IEEE 754's subnormals), so
    magnitudes below the smallest normal binade are rounded on that binade's absolute grid
    and small enough ones become 0.
    """
    if bits < 0:
        raise ValueError(f"bits must be >= 0, got {bits}")
    mantissa, e = torch.frexp(w)  # w = mantissa * 2^e, |mantissa| in [0.5, 1)
    if exponent is None:
        scale = 2.0 ** (bits + 1)
        return torch.ldexp(torch.round(mantissa * scale) / scale, e)
    if exponent < 1:
        raise ValueError(f"exponent must be >= 1 bit, got {exponent}")
    if max_magnitude is None or not (math.isfinite(max_magnitude) and max_magnitude > 0):
        raise ValueError(f"a bounded exponent needs a finite positive max_magnitude, got {max_magnitude!r}")
    top = math.frexp(max_magnitude)[1]
    lowest_normal = top - (2**exponent - 2)
    step = torch.ldexp(torch.ones_like(w), e.clamp_min(lowest_normal) - (bits + 1))
    return torch.round(w / step) * step


def bits_per_layer(means: Dict[str, torch.Tensor], variances: Dict[str, torch.Tensor], masks: Dict[str, torch.Tensor]) -> Dict[str, int]:
    """Significand bits per layer of the kept weights."""
    return {name: significand_bits(variances[name][masks[name]]) for name in means}


def compression_with_precision(kept: Dict[str, int], bits: Dict[str, int], exponent: int, total_weights: int, in_bits: int = 32) -> float:
    """``in_bits * |W| / sum_l kept_l (1 + exponent + t_l)`` (the "after precision
    reduction" ratio of Louizos et al., Table 2)."""
    out_bits = sum(kept[name] * (1 + exponent + bits[name]) for name in kept)
    return in_bits * total_weights / out_bits if out_bits else math.inf


def format_bits(bits: Sequence[int]) -> str:
    """Significand bits per layer as the tables print them, e.g. ``"7-5-6"``."""
    return "-".join(str(b) for b in bits)
