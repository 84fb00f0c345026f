"""Group pruning of Bayesian compression: thresholds on the group scales' log dropout rates.

Louizos et al. (2017, sec. 5) remove group ``g`` of a layer (an input feature of a linear
layer, an output channel of a convolution) when the log dropout rate of its scale,
``log alpha_g = log(Var[z_g] / E[z_g]^2)``, exceeds a threshold chosen per layer from the
(bimodal) histogram of ``log alpha`` (their code uses -2.8, -3 and -5 for the three layers
of LeNet-300-100). Weight masks are the group masks broadcast over the weights; the units
this leaves without outgoing weights are removed by
:func:`pyrozoo.compression.remove_pruned_units`.
"""

import math
from typing import Dict, Sequence, Union

import torch

Thresholds = Union[float, Sequence[float], Dict[str, float], str]


def otsu_threshold(values: torch.Tensor) -> float:
    """The cut between the two modes of ``values`` that maximises the between-class variance
    (Otsu 1979), searched over midpoints of the sorted values; ``+inf`` for fewer than two values."""
    v = values.detach().flatten().double().sort().values
    n = v.numel()
    if n < 2:
        return math.inf
    csum = v.cumsum(0)
    k = torch.arange(1, n, dtype=v.dtype)
    mean_low = csum[:-1] / k
    mean_high = (csum[-1] - csum[:-1]) / (n - k)
    between = k * (n - k) * (mean_high - mean_low) ** 2
    i = int(between.argmax())
    return float(0.5 * (v[i] + v[i + 1]))


def resolve_thresholds(weights: Sequence[str], thresholds: Thresholds, log_alphas: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """``{weight: threshold}`` from one number, a list in layer order, a dict, or ``"auto"`` (Otsu per layer)."""
    weights = list(weights)
    if isinstance(thresholds, str):
        if thresholds != "auto":
            raise ValueError(f"thresholds must be a number, a list, a dict or 'auto', got {thresholds!r}")
        return {w: otsu_threshold(log_alphas[w]) for w in weights}
    if isinstance(thresholds, dict):
        missing = set(weights) - set(thresholds)
        if missing:
            raise KeyError(f"no threshold for {sorted(missing)}")
        out = {w: float(thresholds[w]) for w in weights}
    elif isinstance(thresholds, (int, float)):
        out = {w: float(thresholds) for w in weights}
    else:
        values = list(thresholds)
        if len(values) != len(weights):
            raise ValueError(f"{len(values)} thresholds for {len(weights)} layers ({weights})")
        out = {w: float(t) for w, t in zip(weights, values)}
    for w, t in out.items():
        if math.isnan(t):
            raise ValueError(f"threshold of {w!r} is NaN")
    return out


def group_masks(guide, thresholds: Thresholds = -3.0) -> Dict[str, torch.Tensor]:
    """``{weight: bool mask of its groups}`` (True = kept: ``log alpha_g < threshold``) for a
    :class:`~pyrozoo.guides.BayesianCompressionGuide`."""
    log_alphas = {w: guide.group_log_alpha(w) for w in guide.weight_names}
    resolved = resolve_thresholds(guide.weight_names, thresholds, log_alphas)
    return {w: log_alphas[w] < resolved[w] for w in guide.weight_names}


def weight_masks(prior, masks: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Group masks broadcast to the weights' shapes (a pruned group removes all its weights)."""
    out = {}
    for w, m in masks.items():
        out[w] = m.reshape(prior.group_shape(w)).expand(prior.weight_shape(w)).clone()
    return out
