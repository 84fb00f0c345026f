r"""Modified Bessel functions of the first kind for directional statistics.

* :func:`log_bessel_iv` — :math:`\log I_\nu(x)` for every order :math:`\nu \ge 0` and
  argument :math:`x \ge 0`, without overflow or underflow (``log I`` runs from about
  :math:`-10^6` to :math:`10^6` on the range the von Mises–Fisher distribution needs);
* :func:`log_bessel_iv_div_pow` — :math:`\log(I_\nu(x) / x^\nu)`, smooth down to
  :math:`x = 0`; the von Mises–Fisher log-normaliser is built on it;
* :func:`bessel_iv_ratio` — :math:`R_\nu(x) = I_\nu(x) / I_{\nu-1}(x)`; the mean resultant
  length of a vMF on :math:`S^{d-1}` is :math:`A_d(\kappa) = R_{d/2}(\kappa)`;
* :func:`bessel_iv_ratio_bounds` — the Ruiz-Antolín–Segura (2016) bounds on that ratio
  (Theorems 4 and 5 of their paper; eqs. 13, 28 and 29 of Oh et al., "Radial and
  Directional Posteriors for Bayesian Neural Networks"); the midpoint of the Theorem-5
  pair is RDP's approximation (their eqs. 32–33) and is available as
  ``bessel_iv_ratio(..., method="midpoint")``.

Method. For orders :math:`\nu \ge \nu_0 = 20` the uniform asymptotic (Debye) expansion
DLMF 10.41.3 with 13 terms is used; written with :math:`S = \sqrt{\nu^2 + x^2}` and
:math:`p = \nu / S` it reads

.. math::

    \log \frac{I_\nu(x)}{x^\nu} = S - \nu \log(\nu + S) - \tfrac12 \log(2\pi S)
        + \log \sum_{k=0}^{12} \frac{U_k(p)}{\nu^k},

whose truncation error is below :math:`5 \cdot 10^{-16}` for :math:`\nu \ge 20` uniformly
in :math:`x`. The Debye polynomials :math:`U_k` are generated exactly (rational
arithmetic) from the recursion DLMF 10.41.10. For the ratio at large order the
difference of two such expansions is rearranged so that nothing of size :math:`\nu`
cancels. For orders below :math:`\nu_0` the ratio :math:`q_m = R_m(x) / x` of an order
above :math:`\nu_0` seeds the backward recurrence :math:`q_m = 1 / (2m + x^2 q_{m+1})`
(DLMF 10.29.1; the Gauss continued fraction evaluated from an accurate tail), which is
stable because :math:`I_\nu` is the recessive solution, and

.. math::

    \log \frac{I_\nu(x)}{x^\nu} = \log \frac{I_M(x)}{x^M} + \sum_{m=\nu+1}^{M} \log\big(2m + x^2 q_{m+1}\big).

Every term is positive, so nothing cancels; :math:`x = 0` needs no special case.

Precision and devices. Inputs are promoted to float64 internally and results are
returned in the inputs' dtype: these functions act on concentration-sized tensors (one
value per layer or per row), never on weight-sized ones, so float64 costs nothing that
matters and makes float32 results correctly rounded. Everything is plain torch, so it runs
wherever the tensors live (CPU or CUDA).

Derivatives (with respect to ``x``; the order gets none):
:math:`\partial_x \log(I_\nu/x^\nu) = R_{\nu+1}(x)` and
:math:`\partial_x R_\nu = 1 - R_\nu^2 - (2\nu - 1) R_\nu / x`, both exact. The log-Bessel
functions are twice differentiable; the ratio once.
"""

import math
from fractions import Fraction
from typing import Tuple, Union

import torch

Number = Union[int, float]
TensorLike = Union[torch.Tensor, Number]

#: Orders from which the uniform asymptotic expansion is used directly.
UAE_MIN_ORDER = 20.0
#: Number of terms U_0..U_{K-1} of the uniform asymptotic expansion.
UAE_TERMS = 13

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _debye_coefficients(num_terms: int):
    r"""Coefficients ``c[k][j]`` with :math:`U_k(p) = p^k \sum_j c_{kj} p^{2j}` (DLMF 10.41.10:
    :math:`U_{k+1} = \tfrac12 p^2 (1 - p^2) U_k' + \tfrac18 \int_0^p (1 - 5t^2) U_k(t)\,dt`),
    computed in exact rational arithmetic."""
    polys = [{0: Fraction(1)}]  # power of p -> coefficient
    for _ in range(num_terms - 1):
        u = polys[-1]
        nxt = {}
        for e, c in u.items():
            if e > 0:  # (p^2 - p^4) / 2 * d/dp
                nxt[e + 1] = nxt.get(e + 1, 0) + Fraction(e, 2) * c
                nxt[e + 3] = nxt.get(e + 3, 0) - Fraction(e, 2) * c
            # (1/8) * integral of (1 - 5 t^2) t^e
            nxt[e + 1] = nxt.get(e + 1, 0) + c / (8 * (e + 1))
            nxt[e + 3] = nxt.get(e + 3, 0) - 5 * c / (8 * (e + 3))
        polys.append({e: c for e, c in nxt.items() if c != 0})
    coefficients = []
    for k, u in enumerate(polys):
        if any((e - k) % 2 or e < k for e in u):
            raise AssertionError("Debye polynomial with unexpected powers")  # pragma: no cover
        degree = max(u) if u else k
        coefficients.append([float(u.get(k + 2 * j, 0)) for j in range((degree - k) // 2 + 1)])
    return coefficients


_DEBYE = _debye_coefficients(UAE_TERMS)


class _TensorOps:
    """Elementwise operations on float64 tensors."""

    hypot = staticmethod(torch.hypot)
    log = staticmethod(torch.log)
    log1p = staticmethod(torch.log1p)
    exp = staticmethod(torch.exp)
    lgamma = staticmethod(torch.lgamma)
    where = staticmethod(torch.where)

    @staticmethod
    def steps(nu, top: float):
        steps = torch.ceil(top - nu).clamp(min=0.0)
        return steps, int(steps.max()) if steps.numel() else 0

    @staticmethod
    def any(mask) -> bool:
        return bool(mask.any())


class _ScalarOps:
    """The same operations on Python floats: one shared concentration (the common case in a
    layer) costs microseconds instead of a few hundred tensor dispatches."""

    hypot = staticmethod(math.hypot)
    log = staticmethod(math.log)
    log1p = staticmethod(math.log1p)
    exp = staticmethod(math.exp)
    lgamma = staticmethod(math.lgamma)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b

    @staticmethod
    def steps(nu, top: float):
        steps = max(0.0, float(math.ceil(top - nu)))
        return steps, int(steps)

    @staticmethod
    def any(mask) -> bool:
        return bool(mask)


def _debye_series_log(p, inv_nu, ops):
    r""":math:`\log \sum_k U_k(p) \nu^{-k}` by Horner's scheme in :math:`t = p/\nu` and :math:`p^2`."""
    q = p * p
    t = p * inv_nu
    acc = 0.0
    for coeffs in reversed(_DEBYE[1:]):
        poly = coeffs[-1]
        for c in reversed(coeffs[:-1]):
            poly = poly * q + c
        acc = (acc + poly) * t
    return ops.log1p(acc)


def _uae_log_iv_div_pow(nu, x, ops):
    """log(I_nu(x) / x^nu) for nu >= UAE_MIN_ORDER (float64)."""
    s = ops.hypot(nu, x)
    return s - nu * ops.log(nu + s) - 0.5 * ops.log(s) - _HALF_LOG_2PI + _debye_series_log(nu / s, 1.0 / nu, ops)


def _uae_log_ratio_div_x(nu, x, ops):
    """log(R_nu(x) / x) for nu - 1 >= UAE_MIN_ORDER (float64): the difference of two
    expansions, rearranged so that no term of size nu cancels."""
    s_hi = ops.hypot(nu, x)
    s_lo = ops.hypot(nu - 1.0, x)
    delta = (2.0 * nu - 1.0) / (s_hi + s_lo)  # = s_hi - s_lo
    out = delta - ops.log(nu + s_hi) - (nu - 1.0) * ops.log1p((1.0 + delta) / (nu - 1.0 + s_lo))
    out = out - 0.5 * ops.log1p(delta / s_lo)
    return out + _debye_series_log(nu / s_hi, 1.0 / nu, ops) - _debye_series_log((nu - 1.0) / s_lo, 1.0 / (nu - 1.0), ops)


def _ratio_div_x(nu, x, ops):
    """q_nu = R_nu(x) / x for nu > 0 (float64)."""
    steps, n_max = ops.steps(nu, UAE_MIN_ORDER + 1.0)
    top = nu + steps  # top - 1 >= UAE_MIN_ORDER
    q = ops.exp(_uae_log_ratio_div_x(top, x, ops))
    x2 = x * x
    for k in range(1, n_max + 1):
        q = ops.where(steps >= k, 1.0 / (2.0 * (top - k) + x2 * q), q)
    return q


def _series_log_iv_div_pow(nu, x, ops):
    """log(I_nu(x) / x^nu) from the power series (DLMF 10.25.2), for x^2 <= nu + 1 (float64).

    There every term is at most a quarter of the previous one, so 20 terms are exact to
    rounding, and ``log1p`` keeps tiny values of ``log I_0(x) ~ x^2 / 4`` relatively accurate.
    """
    z = 0.25 * x * x
    term = 1.0
    total = 0.0
    for k in range(1, 21):
        term = term * z / (k * (nu + k))
        total = total + term
    return ops.log1p(total) - nu * math.log(2.0) - ops.lgamma(nu + 1.0)


def _log_iv_div_pow(nu, x, ops):
    """log(I_nu(x) / x^nu) for nu >= 0 (float64)."""
    steps, n_max = ops.steps(nu, UAE_MIN_ORDER)
    top = nu + steps  # >= UAE_MIN_ORDER
    out = _uae_log_iv_div_pow(top, x, ops)
    if n_max == 0:
        return out
    q = ops.exp(_uae_log_ratio_div_x(top + 1.0, x, ops))  # q_{top+1}
    x2 = x * x
    for k in range(0, n_max):
        active = steps > k  # adds log(1 / q_m) = log(2m + x^2 q_{m+1}) for m = top - k > nu
        denom = 2.0 * (top - k) + x2 * q
        out = ops.where(active, out + ops.log(denom), out)
        q = ops.where(active, 1.0 / denom, q)
    # Below the expansion's range the recurrence adds up logs of size ~log(2m) that cancel
    # against the expansion at the top order; for small arguments the series has no such
    # cancellation (it matters where log I is close to 0, e.g. log I_0(x) ~ x^2 / 4).
    small = (steps > 0) & (x2 <= nu + 1.0)
    if ops.any(small):
        out = ops.where(small, _series_log_iv_div_pow(nu, ops.where(small, x, 0.0 * x), ops), out)
    return out


# ---------------------------------------------------------------------------------------
# argument handling
# ---------------------------------------------------------------------------------------

_INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _prepare(nu: TensorLike, x: TensorLike, name: str, min_order: float, strict: bool):
    """Validated ``(nu, x, x_float, dtype)``.

    With one value of ``nu`` and of ``x`` (a concentration shared by a layer), ``nu`` and
    ``x_float`` are Python floats; otherwise ``nu`` is a float64 tensor broadcast with ``x``
    and ``x_float`` is ``None``. ``x`` is a tensor of the result dtype (the promoted floating
    dtype of the tensor arguments, else the default dtype).
    """
    tensors = [t for t in (nu, x) if torch.is_tensor(t)]
    for t in tensors:
        if not (t.is_floating_point() or t.dtype in _INTEGER_DTYPES):
            raise TypeError(f"{name}: arguments must be real numbers, got a tensor of dtype {t.dtype}")
    floats = [t.dtype for t in tensors if t.is_floating_point()]
    dtype = floats[0] if floats else torch.get_default_dtype()
    for d in floats[1:]:
        dtype = torch.promote_types(dtype, d)
    device = tensors[0].device if tensors else torch.device("cpu")
    for t in tensors[1:]:
        if t.device != device and t.dim() > 0:
            raise ValueError(f"{name}: arguments are on different devices ({device} and {t.device})")
    if torch.is_tensor(nu) and nu.requires_grad:
        raise ValueError(f"{name} has no derivative with respect to the order nu; pass nu without requires_grad")
    x_t = x if torch.is_tensor(x) else torch.as_tensor(x, dtype=dtype, device=device)
    if x_t.dtype != dtype:
        x_t = x_t.to(dtype)
    rel = ">" if strict else ">="
    if (not torch.is_tensor(nu) or nu.numel() == 1) and x_t.numel() == 1:
        nu_f, x_f = float(nu), float(x_t.detach())
        if not (math.isfinite(nu_f) and (nu_f > min_order if strict else nu_f >= min_order)):
            raise ValueError(f"{name}: the order nu must be finite and {rel} {min_order:g}, got {nu_f}")
        if not (math.isfinite(x_f) and x_f >= 0):
            raise ValueError(f"{name}: the argument x must be finite and >= 0, got {x_f}")
        if torch.is_tensor(nu) and nu.dim() > x_t.dim():
            x_t = x_t.reshape(nu.shape)
        return nu_f, x_t, x_f, dtype
    nu64 = torch.as_tensor(nu, dtype=torch.float64, device=device).detach()
    nu64, x_t = torch.broadcast_tensors(nu64, x_t)
    bad_nu = ~torch.isfinite(nu64) | ((nu64 <= min_order) if strict else (nu64 < min_order))
    if bool(bad_nu.any()):
        raise ValueError(f"{name}: the order nu must be finite and {rel} {min_order:g}, got {nu64[bad_nu].flatten()[0].item()}")
    bad_x = ~torch.isfinite(x_t) | (x_t < 0)
    if bool(bad_x.any()):
        raise ValueError(f"{name}: the argument x must be finite and >= 0, got {x_t[bad_x].flatten()[0].item()}")
    return nu64, x_t, None, dtype


class _LogBesselIv(torch.autograd.Function):
    """log I_nu(x) (``divide_power=False``) or log(I_nu(x) / x^nu), evaluated in float64."""

    @staticmethod
    def forward(ctx, nu, x, x_float, dtype, divide_power):
        ctx.nu, ctx.divide_power = nu, divide_power
        ctx.save_for_backward(x)
        if x_float is not None:
            value = _log_iv_div_pow(nu, x_float, _ScalarOps)
            if not divide_power and nu != 0:
                value = value + nu * math.log(x_float) if x_float > 0 else -math.inf
            return torch.full(x.shape, value, dtype=dtype, device=x.device)
        x64 = x.detach().to(torch.float64)
        out = _log_iv_div_pow(nu, x64, _TensorOps)
        if not divide_power:
            out = out + torch.xlogy(nu, x64)  # added in float64: the two parts may cancel
        return out.to(dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        nu = ctx.nu
        # d/dx log(I_nu / x^nu) = I_{nu+1} / I_nu  (differentiable: log I is twice differentiable)
        derivative = bessel_iv_ratio(nu + 1.0, x)
        if not ctx.divide_power:
            if torch.is_tensor(nu):
                nu = nu.to(x.dtype)
                derivative = derivative + torch.where(nu == 0, torch.zeros_like(x), nu / x)
            elif nu != 0:
                derivative = derivative + nu / x
        return None, grad * derivative, None, None, None


class _BesselIvRatio(torch.autograd.Function):
    @staticmethod
    def forward(ctx, nu, x, x_float, dtype):
        if x_float is not None:
            q = _ratio_div_x(nu, x_float, _ScalarOps)
            ratio = x_float * q
            # R' = 1 - R^2 - (2 nu - 1) R / x, written with q = R / x so that x = 0 is fine
            ctx.save_for_backward(torch.full(x.shape, 1.0 - ratio * ratio - (2.0 * nu - 1.0) * q, dtype=dtype, device=x.device))
            return torch.full(x.shape, ratio, dtype=dtype, device=x.device)
        x64 = x.detach().to(torch.float64)
        q = _ratio_div_x(nu, x64, _TensorOps)
        ratio = x64 * q
        ctx.save_for_backward((1.0 - ratio * ratio - (2.0 * nu - 1.0) * q).to(dtype))
        return ratio.to(dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (derivative,) = ctx.saved_tensors
        return None, grad * derivative, None, None


def log_bessel_iv_div_pow(nu: TensorLike, x: TensorLike) -> torch.Tensor:
    r""":math:`\log(I_\nu(x) / x^\nu)` for :math:`\nu \ge 0`, :math:`x \ge 0` (at :math:`x = 0`:
    :math:`-\nu \log 2 - \log\Gamma(\nu + 1)`).

    Differentiable in ``x`` with the exact derivative :math:`I_{\nu+1}(x)/I_\nu(x)`, which has no
    cancellation as :math:`x \to 0` (unlike the derivative of :math:`\log I_\nu(x)`, where
    :math:`\nu/x` would cancel). Broadcasts ``nu`` and ``x``; see the module docstring for the method.
    """
    nu, x, x_float, dtype = _prepare(nu, x, "log_bessel_iv_div_pow", 0.0, strict=False)
    return _LogBesselIv.apply(nu, x, x_float, dtype, True)


def log_bessel_iv(nu: TensorLike, x: TensorLike) -> torch.Tensor:
    r""":math:`\log I_\nu(x)` for :math:`\nu \ge 0`, :math:`x \ge 0`
    (:math:`-\infty` at :math:`x = 0` for :math:`\nu > 0`; 0 for :math:`\nu = 0`).

    Against mpmath on :math:`\nu \in [0, 5 \cdot 10^4]`, :math:`x \in [10^{-4}, 10^6]`: float64 errors
    below :math:`5 \cdot 10^{-13} \max(1, |\log I_\nu|)` (relative error below :math:`2 \cdot 10^{-11}`
    even where :math:`\log I_\nu` is close to 0); float32 results are the float64 ones rounded.
    Differentiable in ``x``: :math:`\partial_x \log I_\nu = R_{\nu+1}(x) + \nu / x`.
    """
    nu, x, x_float, dtype = _prepare(nu, x, "log_bessel_iv", 0.0, strict=False)
    return _LogBesselIv.apply(nu, x, x_float, dtype, False)


def bessel_iv_ratio(nu: TensorLike, x: TensorLike, method: str = "exact") -> torch.Tensor:
    r"""The ratio :math:`R_\nu(x) = I_\nu(x) / I_{\nu-1}(x)` for :math:`\nu > 0`, :math:`x \ge 0`.

    For a von Mises–Fisher distribution on :math:`S^{d-1}`, :math:`A_d(\kappa) = R_{d/2}(\kappa)`
    is the mean resultant length :math:`\mathbb E[\mu^\top x]`.

    :param method: ``"exact"`` (uniform asymptotic expansion and backward recurrence; relative
        error below :math:`10^{-14}` in float64 against mpmath), or ``"midpoint"``, the average of the
        Ruiz-Antolín–Segura Theorem-5 bounds that RDP uses (Oh et al., eqs. 32–33): no special
        functions, relative error :math:`\approx 1.4 \cdot 10^{-5} (100/d)^2` for :math:`d \gtrsim 10`
        (up to about 7% at :math:`d = 2` and 2.5% at :math:`d = 3`), differentiated by autograd
        through the bound formulas.
    Differentiable in ``x`` (``"exact"``: :math:`R' = 1 - R^2 - (2\nu - 1) R / x`).
    """
    if method not in ("exact", "midpoint"):
        raise ValueError(f"bessel_iv_ratio: method must be 'exact' or 'midpoint', got {method!r}")
    if method == "midpoint":
        lower, upper = bessel_iv_ratio_bounds(nu, x, theorem=5)
        return 0.5 * (lower + upper)
    nu, x, x_float, dtype = _prepare(nu, x, "bessel_iv_ratio", 0.0, strict=True)
    return _BesselIvRatio.apply(nu, x, x_float, dtype)


def bessel_iv_ratio_bounds(nu: TensorLike, x: TensorLike, theorem: int = 5) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Lower and upper bounds on :math:`R_\nu(x) = I_\nu(x)/I_{\nu-1}(x)` for :math:`\nu \ge 1`
    (i.e. :math:`A_d` for :math:`d \ge 2`), after Ruiz-Antolín & Segura (2016).

    * ``theorem=5`` (RDP's eq. 13 / eq. 29): :math:`B_2 \le R_\nu \le B_0` with
      :math:`B_\alpha = x / (\delta_\alpha + \sqrt{\delta_\alpha^2 + x^2})`,
      :math:`\delta_\alpha = \nu - \tfrac12 + \lambda_\alpha / (2\sqrt{\lambda_\alpha^2 + x^2})`,
      :math:`\lambda_\alpha = \nu + (\alpha - 1)/2`. Both are exact to first order as
      :math:`x \to 0` and :math:`x \to \infty`; the relative width is largest near
      :math:`x \approx \nu` and falls like :math:`\nu^{-2}`.
    * ``theorem=4`` (Amos type, RDP's eq. 28):
      :math:`x / (\nu - \tfrac12 + \sqrt{(\nu + \tfrac12)^2 + x^2}) \le R_\nu \le x / (\nu - 1 + \sqrt{(\nu + 1)^2 + x^2})`.

    Computed in the inputs' dtype with plain torch operations (differentiable by autograd).
    """
    if theorem not in (4, 5):
        raise ValueError(f"bessel_iv_ratio_bounds: theorem must be 4 or 5, got {theorem!r}")
    nu, x_t, _, dtype = _prepare(nu, x, "bessel_iv_ratio_bounds", 1.0, strict=False)
    nu_t = torch.as_tensor(nu, device=x_t.device).to(dtype)
    if theorem == 4:
        lower = x_t / (nu_t - 0.5 + torch.hypot(nu_t + 0.5, x_t))
        upper = x_t / (nu_t - 1.0 + torch.hypot(nu_t + 1.0, x_t))
        return lower, upper

    def bound(alpha):
        lam = nu_t + 0.5 * (alpha - 1.0)
        delta = nu_t - 0.5 + lam / (2.0 * torch.hypot(lam, x_t))
        return x_t / (delta + torch.hypot(delta, x_t))

    return bound(2.0), bound(0.0)
