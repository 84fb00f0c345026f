r"""The von Mises–Fisher distribution on the unit sphere, and the uniform distribution on it.

:math:`\mathrm{vMF}(x \mid \mu, \kappa) = C_d(\kappa)\, e^{\kappa \mu^\top x}` on
:math:`S^{d-1} \subset \mathbb R^d`, with
:math:`C_d(\kappa) = \kappa^{d/2-1} / ((2\pi)^{d/2} I_{d/2-1}(\kappa))` (Oh et al. 2020, eq. 4).
Its special functions come from :mod:`pyrozoo.distributions.special`; its KL divergences
(vMF‖vMF, vMF‖uniform, uniform‖vMF) are registered in :mod:`pyrozoo.distributions.kl`.

For large :math:`\kappa`, :math:`\log C_d(\kappa) \approx -\kappa` and :math:`A_d(\kappa) \approx 1`, and the
log-density, the entropy and the KLs are small differences of such terms. They are therefore
written with :math:`\log C_d(\kappa) + \kappa` (:func:`vmf_log_normalizer_plus_concentration`, from the
exponentially scaled Bessel function) and :math:`1 - A_d(\kappa)`
(:func:`vmf_mean_resultant_length_complement`), each computed without cancellation, e.g.
:math:`H = -(\log C + \kappa) + \kappa (1 - A)`: accurate (relative :math:`10^{-13}` or better
against mpmath) and finite, with finite gradients, for every positive finite :math:`\kappa` in
float64 (up to :math:`1.8 \cdot 10^{308}`) and float32.
"""

import math
import numbers
from typing import Optional

import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution, constraints
from pyro.distributions.score_parts import ScoreParts
from torch.distributions.utils import lazy_property

from pyrozoo.distributions.constraints import positive_finite
from pyrozoo.distributions.special import (
    bessel_iv_ratio,
    bessel_iv_ratio_complement,
    bessel_iv_ratio_derivative,
    log_bessel_iv_div_pow,
    log_bessel_ive_div_pow,
)
from pyrozoo.distributions.util import check_shape, sum_rightmost

#: a sampler that has not accepted every proposal after this many rounds is broken
_MAX_REJECTION_ROUNDS = 10_000
#: after this many rounds (for valid parameters a chance below 1e-26 per element: acceptance is at
#: least about 0.7 and every round makes two or more proposals) the caller's ``on_stall`` diagnoses
#: the elements still pending, e.g. an invalid parameter that slipped past validation
_STALL_ROUNDS = 25


def _compact(t: torch.Tensor) -> torch.Tensor:
    """A 0-d view of ``t`` when ``t`` is one value broadcast to a shape, so that per-layer
    concentrations expanded over the rows of a layer are evaluated once."""
    if t.dim() > 0 and all(s == 0 for s in t.stride()):
        return t.as_strided((), ())
    return t


def _first_accepted(n: int, tries: int, draw, device, on_stall=None) -> torch.Tensor:
    """``n`` values from a vectorised rejection sampler.

    ``draw(index, k, tries)`` returns proposals and acceptance flags of shape ``(k, tries)`` for
    the ``k`` elements in ``index`` (``None``: all ``n``). Each element takes its first accepted
    proposal; elements with none are redrawn. Several proposals per element and round keep
    the number of rounds (each a handful of tensor operations) at about one for small ``n``.
    ``on_stall(index)``, if given, is called once with the elements still pending after
    ``_STALL_ROUNDS`` rounds (it may raise a more specific error than the generic one).
    """
    out = None
    pending = None
    for round_ in range(_MAX_REJECTION_ROUNDS):
        if round_ == _STALL_ROUNDS and on_stall is not None:
            on_stall(pending)
        k = n if pending is None else pending.numel()
        values, accept = draw(pending, k, tries)
        accepted = accept.any(-1)
        chosen = values.gather(-1, accept.to(torch.uint8).argmax(-1, keepdim=True)).squeeze(-1)
        if pending is None:
            out = chosen
            pending = (~accepted).nonzero().flatten()
        else:
            out[pending[accepted]] = chosen[accepted]
            pending = pending[~accepted]
        if pending.numel() == 0:
            return out
    raise RuntimeError("rejection sampler did not terminate")  # pragma: no cover


def _standard_gamma(alpha: float, n: int, device) -> torch.Tensor:
    """``n`` draws from Gamma(alpha, 1) in float64 by Marsaglia & Tsang (2000), vectorised.

    torch's own Gamma/Beta samplers draw about one variate per microsecond on a CPU, which
    would make the (scalar!) rejection step cost more than the d-dimensional tangent; this
    costs a few Gaussian and uniform draws per variate. ``alpha < 1`` uses the boost
    ``Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha)``.
    """
    boost = alpha < 1.0
    a = alpha + 1.0 if boost else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)

    def draw(index, k, tries):
        z = torch.randn(k, tries, dtype=torch.float64, device=device)
        v = 1.0 + c * z
        ok = v > 0
        v3 = torch.where(ok, v, 1.0) ** 3
        log_u = torch.rand(k, tries, dtype=torch.float64, device=device).log()
        return d * v3, ok & (log_u < 0.5 * z * z + d - d * v3 + d * v3.log())

    out = _first_accepted(n, 3 if n <= 4096 else 2, draw, device)
    if boost:
        out = out * torch.rand(n, dtype=torch.float64, device=device).pow(1.0 / alpha)
    return out


def _symmetric_beta(alpha: float, shape, device) -> torch.Tensor:
    """Draws from Beta(alpha, alpha) of ``shape`` in float64, as G1 / (G1 + G2)."""
    n = math.prod(shape)
    g = _standard_gamma(alpha, 2 * n, device)
    return (g[:n] / (g[:n] + g[n:])).reshape(shape)


def log_sphere_area(dim: int) -> float:
    r""":math:`\log |S^{d-1}| = \log 2 + \tfrac d2 \log \pi - \log\Gamma(\tfrac d2)` for the unit sphere in :math:`\mathbb R^d`."""
    return math.log(2.0) + 0.5 * dim * math.log(math.pi) - math.lgamma(0.5 * dim)


def vmf_log_normalizer(dim: int, concentration: torch.Tensor) -> torch.Tensor:
    r""":math:`\log C_d(\kappa) = -\tfrac d2 \log 2\pi - \log(I_{d/2-1}(\kappa) / \kappa^{d/2-1})`,
    with the exact derivative :math:`-A_d(\kappa)` (no cancellation as :math:`\kappa \to 0`)."""
    kappa = torch.as_tensor(concentration)
    # the two terms are each ~d log d and cancel for small kappa: added in float64
    out = -0.5 * dim * math.log(2.0 * math.pi) - log_bessel_iv_div_pow(0.5 * dim - 1.0, kappa.to(torch.float64))
    return out.to(kappa.dtype) if kappa.is_floating_point() else out


def vmf_log_normalizer_plus_concentration(dim: int, concentration: torch.Tensor) -> torch.Tensor:
    r""":math:`\log C_d(\kappa) + \kappa = -\tfrac d2 \log 2\pi - (\log(I_{d/2-1}(\kappa) / \kappa^{d/2-1}) - \kappa)`,
    the log-density at the mode, from the exponentially scaled Bessel function (no term of size
    :math:`\kappa` is formed: about :math:`\tfrac{d-1}{2} \log(\kappa / 2\pi)` for large :math:`\kappa`), with the exact
    derivative :math:`1 - A_d(\kappa)` (no cancellation either). Computed as
    :math:`-\log|S^{d-1}| - g(\kappa)` with :math:`g` the normalized scaled function (0 at :math:`\kappa = 0`,
    ``log_bessel_ive_div_pow(..., normalized=True)``)."""
    kappa = torch.as_tensor(concentration)
    # log C = -log|S^{d-1}| - log(Gamma(d/2) (2/kappa)^(d/2-1) I_{d/2-1}(kappa)), the latter 0 at kappa = 0
    # (so that -log|S| is the only term of size d log d, and differences at small kappa are exact)
    out = -log_sphere_area(dim) - log_bessel_ive_div_pow(0.5 * dim - 1.0, kappa.to(torch.float64), normalized=True)
    return out.to(kappa.dtype) if kappa.is_floating_point() else out


def vmf_mean_resultant_length(dim: int, concentration: torch.Tensor) -> torch.Tensor:
    r""":math:`A_d(\kappa) = I_{d/2}(\kappa) / I_{d/2-1}(\kappa) = \mathbb E[\mu^\top x]`."""
    return bessel_iv_ratio(0.5 * dim, concentration)


def vmf_mean_resultant_length_complement(dim: int, concentration: torch.Tensor) -> torch.Tensor:
    r""":math:`1 - A_d(\kappa) = \mathbb E[1 - \mu^\top x]`, accurate where :math:`A_d \approx 1` (about
    :math:`(d-1) / (2\kappa)` for large :math:`\kappa`)."""
    return bessel_iv_ratio_complement(0.5 * dim, concentration)


def vmf_concentration(dim: int, mean_resultant_length, *, dtype=None, device=None) -> torch.Tensor:
    r"""The concentration :math:`\kappa` with :math:`A_d(\kappa) = \rho` (exact, by bisection in
    :math:`\log\kappa` on the Bessel ratio).

    With :math:`\rho = 1 - \varepsilon` this is what RDP's ``ml_kappa(d, eps)`` approximates by
    :math:`(\max(4, d) - 3)(1 - \varepsilon) / (1 - (1 - \varepsilon)^2)`: the prior and initial
    concentrations at which a direction's expected cosine to its mean is :math:`1 - \varepsilon`.
    """
    if not (isinstance(dim, int) and dim >= 2):
        raise ValueError(f"vmf_concentration: dim must be an int >= 2, got {dim!r}")
    rho = torch.as_tensor(mean_resultant_length, dtype=torch.float64, device=device)
    if not bool(((rho > 0) & (rho < 1)).all()):
        raise ValueError(f"vmf_concentration: the mean resultant length must lie in (0, 1), got {mean_resultant_length!r}")
    lo = torch.full_like(rho, -40.0)
    hi = torch.full_like(rho, 40.0)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        above = vmf_mean_resultant_length(dim, mid.exp()) > rho
        hi = torch.where(above, mid, hi)
        lo = torch.where(above, lo, mid)
    out = (0.5 * (lo + hi)).exp()
    return out.to(dtype or torch.get_default_dtype())


class _IndependentKeepingScore(dist.Independent):
    """``Independent`` that keeps its base distribution's score-function term.

    Pyro's ``Independent`` falls back to the default ``score_parts``, which treats a
    distribution with ``has_rsample`` as fully reparameterized and drops the term; a
    ``VonMisesFisher(...).to_event(n)`` would lose its rejection-sampling correction.
    """

    def score_parts(self, value):
        log_prob, score, entropy = self.base_dist.score_parts(value)
        n = self.reinterpreted_batch_ndims

        def total(t):
            return sum_rightmost(t, n) if torch.is_tensor(t) and t.dim() else t

        return ScoreParts(total(log_prob), total(score), total(entropy))

    def to_event(self, reinterpreted_batch_ndims=None):
        if reinterpreted_batch_ndims is None:
            reinterpreted_batch_ndims = len(self.batch_shape)
        if reinterpreted_batch_ndims == 0:
            return self
        return _IndependentKeepingScore(self.base_dist, self.reinterpreted_batch_ndims + reinterpreted_batch_ndims)


def _rowwise_dot(g: torch.Tensor, loc: torch.Tensor, sample_dims: int) -> torch.Tensor:
    """``(g * loc).sum(-1, keepdim=True)`` for ``g`` of shape ``sample + batch + (d,)`` and ``loc``
    of shape ``batch + (d,)``, without materialising the product (a matrix-vector product when
    the batch is empty, a batched one when there is no sample dimension)."""
    d = g.shape[-1]
    if loc.dim() == 1:
        return (g @ loc).unsqueeze(-1)
    if sample_dims == 0 and loc.is_contiguous():
        out = torch.bmm(g.reshape(-1, 1, d), loc.reshape(-1, d, 1))
        return out.reshape(g.shape[:-1] + (1,))
    return torch.einsum("...i,...i->...", g, loc).unsqueeze(-1)


class VonMisesFisher(TorchDistribution):
    r"""von Mises–Fisher distribution :math:`C_d(\kappa) e^{\kappa \mu^\top x}` on :math:`S^{d-1}`
    (Oh et al. 2020, eq. 4), reparameterizable in any dimension :math:`d \ge 2`.

    **Sampling** (:meth:`rsample`): Wood's (1994) rejection sampler for :math:`w = \mu^\top x`,
    in a form without cancellation (:math:`b = m / (2\kappa + \sqrt{4\kappa^2 + m^2})`,
    :math:`m = d - 1`; :math:`1 - w = 2b\varepsilon / (1 - (1 - b)\varepsilon)`; the acceptance
    test rearranged around :math:`x_0 = (1-b)/(1+b)`), in float64, vectorised over every
    sample and batch element (several proposals per element and round, the first accepted one
    kept, still-rejected elements redrawn; acceptance is at least about 0.7 for every
    :math:`d, \kappa`); a Gaussian tangent direction; and an exact
    Householder reflection taking :math:`\mp e_1` to :math:`\mu`, with the sign chosen so that
    the reflection vector never degenerates (no special case for :math:`\mu \approx \pm e_1`).

    **Gradients**: pathwise for ``loc`` (through the reflection) and for ``concentration``
    (through :math:`w(\varepsilon, \kappa)` with the accepted proposal :math:`\varepsilon` held
    fixed). The pathwise κ-gradient alone is biased (−13% at :math:`d=5, \kappa=2`); with
    ``gradient_correction=True`` (default) :meth:`score_parts` supplies the rejection-sampling
    correction of Naesseth et al. (2017) (Davidson et al. 2018, App. D; RDP's supplementary
    eqs. 20–21) as a score-function term
    :math:`\ell(\varepsilon, \kappa) = \log C_d(\kappa) + \kappa w + \tfrac{d-1}{2}\log b - (d-1)\log(1 - (1-b)\varepsilon)`,
    the log-density of the accepted proposal up to terms free of :math:`\kappa`. Pyro's
    ``Trace_ELBO`` and pyrozoo's ``ClosedFormKL_ELBO`` multiply it by the (detached) downstream
    cost, which makes the κ-gradient unbiased.

    :param torch.Tensor loc: mean direction(s), shape ``batch_shape + (d,)``, unit norm.
    :param concentration: :math:`0 < \kappa < \infty`, broadcastable to ``batch_shape`` (e.g. one
        value shared by all rows of a layer).
    :param bool gradient_correction: include the rejection-sampling correction in
        :meth:`score_parts`.

    **Validation.** With ``validate_args`` (Pyro's and torch's default) a ``loc`` off the unit
    sphere and a concentration that is not positive and finite (``inf``, NaN, ``0``) are a
    ``ValueError`` at construction that names the parameter. A concentration given as a Python
    number is checked even without ``validate_args``: that check needs no device
    synchronisation, which checking a (CUDA) tensor on every construction would. A tensor
    concentration that slips through with validation off fails at the first ``rsample`` with
    a ``ValueError`` naming it (instead of a sampler that never accepts).
    """

    arg_constraints = {"loc": constraints.sphere, "concentration": positive_finite}
    support = constraints.sphere
    has_rsample = True

    def __init__(self, loc: torch.Tensor, concentration, *, gradient_correction: bool = True, validate_args: Optional[bool] = None):
        if not torch.is_tensor(loc) or not loc.is_floating_point():
            raise TypeError(f"VonMisesFisher: loc must be a floating-point tensor, got {type(loc).__name__}")
        if loc.dim() < 1 or loc.shape[-1] < 2:
            raise ValueError(f"VonMisesFisher: loc must have shape batch_shape + (d,) with d >= 2, got {tuple(loc.shape)}")
        if not torch.is_tensor(concentration):
            if isinstance(concentration, numbers.Real) and not 0 < concentration < math.inf:
                raise ValueError(f"VonMisesFisher: the concentration must be positive and finite, got {concentration!r}")
            concentration = torch.as_tensor(concentration, dtype=loc.dtype, device=loc.device)
        elif concentration.dtype != loc.dtype:
            concentration = concentration.to(loc.dtype)
        try:
            batch_shape = torch.broadcast_shapes(loc.shape[:-1], concentration.shape)
        except RuntimeError:
            raise ValueError(
                f"VonMisesFisher: concentration of shape {tuple(concentration.shape)} does not broadcast with the "
                f"batch shape {tuple(loc.shape[:-1])} of loc (the last dimension of loc, {loc.shape[-1]}, is the event)"
            ) from None
        dim = loc.shape[-1]
        self.loc = loc.expand(batch_shape + (dim,))
        self.concentration = concentration.expand(batch_shape)
        self.gradient_correction = bool(gradient_correction)
        self._sample_cache = (None, None)
        super().__init__(batch_shape, torch.Size([dim]), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(VonMisesFisher, _instance)
        batch_shape = torch.Size(batch_shape)
        new.loc = self.loc.expand(batch_shape + self.event_shape)
        new.concentration = self.concentration.expand(batch_shape)
        new.gradient_correction = self.gradient_correction
        new._sample_cache = (None, None)
        super(VonMisesFisher, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def dim(self) -> int:
        """``d``, the dimension of the ambient space (samples lie on :math:`S^{d-1}`)."""
        return self.event_shape[0]

    # -- special functions of the concentration --------------------------------------------
    @lazy_property
    def log_normalizer(self) -> torch.Tensor:
        r""":math:`\log C_d(\kappa)`, shape ``batch_shape``."""
        return vmf_log_normalizer(self.dim, _compact(self.concentration)).expand(self.batch_shape)

    @lazy_property
    def mean_resultant_length(self) -> torch.Tensor:
        r""":math:`A_d(\kappa) = \mathbb E[\mu^\top x]`, shape ``batch_shape``."""
        return vmf_mean_resultant_length(self.dim, _compact(self.concentration)).expand(self.batch_shape)

    @lazy_property
    def _log_normalizer_plus_concentration(self) -> torch.Tensor:
        # log C_d(kappa) ~ -kappa for large kappa: the sum is never formed as such (it would
        # lose everything beyond kappa ~ 1e13), but from the exponentially scaled Bessel function
        kappa = _compact(self.concentration).to(torch.float64)
        return vmf_log_normalizer_plus_concentration(self.dim, kappa).to(self.loc.dtype).expand(self.batch_shape)

    @property
    def mean(self) -> torch.Tensor:
        return self.mean_resultant_length.unsqueeze(-1) * self.loc

    @property
    def mode(self) -> torch.Tensor:
        return self.loc

    @property
    def variance(self) -> torch.Tensor:
        r"""Per-coordinate variance: :math:`E[x x^\top] = (A/\kappa) I + (1 - d A / \kappa) \mu\mu^\top`, so
        :math:`\mathrm{Var}[x_i] = A/\kappa + (A' - A/\kappa)\mu_i^2` with
        :math:`A' = 1 - A^2 - (d-1)A/\kappa`, whose terms cancel for large :math:`\kappa`: its value
        comes from :func:`~pyrozoo.distributions.special.bessel_iv_ratio_derivative`, and only its
        gradient (where :math:`\kappa` requires one) from the closed form."""
        kappa = _compact(self.concentration).to(torch.float64)
        a = vmf_mean_resultant_length(self.dim, kappa)
        a_over_k = a / kappa
        a_prime = bessel_iv_ratio_derivative(self.dim / 2.0, kappa.detach())
        if kappa.requires_grad:
            closed_form = 1.0 - a * a - (self.dim - 1.0) * a_over_k
            a_prime = a_prime + (closed_form - closed_form.detach())
        a_over_k = a_over_k.to(self.loc.dtype).expand(self.batch_shape).unsqueeze(-1)
        a_prime = a_prime.to(self.loc.dtype).expand(self.batch_shape).unsqueeze(-1)
        return a_over_k + (a_prime - a_over_k) * self.loc.square()

    def entropy(self) -> torch.Tensor:
        # -log C - kappa A = -(log C + kappa) + kappa (1 - A): the terms of size kappa are never
        # formed (and the autograd sum -(1 - A) + (1 - A) - kappa A' cancels exactly)
        kappa = _compact(self.concentration).to(torch.float64)
        h = kappa * vmf_mean_resultant_length_complement(self.dim, kappa) - vmf_log_normalizer_plus_concentration(self.dim, kappa)
        return h.to(self.loc.dtype).expand(self.batch_shape)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        # kappa mu'x = kappa - (kappa/2) |x - mu|^2 on the sphere: with (log C + kappa) formed in
        # float64 and |x - mu| free of cancellation, a large kappa does not wipe out float32
        half_sq_dist = 0.5 * (value - self.loc).square().sum(-1)
        return self._log_normalizer_plus_concentration - self.concentration * half_sq_dist

    # -- sampling ------------------------------------------------------------------------
    def _wood_b(self, kappa64: torch.Tensor):
        r"""``(b, D)``: Wood's :math:`b = m / (2\kappa + \sqrt{4\kappa^2 + m^2})` (:math:`m = d - 1`) and
        :math:`D = m / (4b) = \kappa/2 + \sqrt{\kappa^2/4 + m^2/16}`, which never overflows (D <= kappa).

        Near the largest float64 :math:`b` is subnormal and the local derivatives of
        :math:`\sqrt b`, :math:`\log b` and :math:`\kappa b` overflow (inf times 0 in autograd), so those
        are formed from D instead: :math:`\sqrt{m/4} / \sqrt D`, :math:`\log(m/4) - \log D`,
        :math:`(m/4)\, \kappa / D`."""
        quarter_m = 0.25 * (self.dim - 1.0)
        half = 0.5 * kappa64
        den = half + torch.hypot(half, torch.full_like(kappa64, quarter_m))
        return quarter_m / den, den

    def _accepted_proposals(self, kappa64: torch.Tensor) -> torch.Tensor:
        """Accepted Beta((d-1)/2, (d-1)/2) proposals epsilon of Wood's sampler, one per entry of ``kappa64`` (float64, no grad)."""
        m = self.dim - 1.0
        flat_kappa = kappa64.reshape(-1)
        b, den = self._wood_b(flat_kappa)
        # log acceptance: kappa (w - x0) + m log((1 - x0 w) / (1 - x0^2)), with x0 = (1 - b)/(1 + b),
        # written in epsilon so that nothing of size kappa or m cancels when kappa >> d
        log_half_1pb = torch.log1p(b) - math.log(2.0)
        scale = (0.5 * m) * (flat_kappa / den) / (1.0 + b)  # 2 b kappa / (1 + b)
        device = kappa64.device

        def draw(index, k, tries):
            bp, sp, lp = (b, scale, log_half_1pb) if index is None else (b[index], scale[index], log_half_1pb[index])
            bp, sp, lp = bp.unsqueeze(-1), sp.unsqueeze(-1), lp.unsqueeze(-1)
            e = _symmetric_beta(0.5 * m, (k, tries), device)
            denom = 1.0 - (1.0 - bp) * e
            log_accept = sp * (1.0 - 2.0 * e) / denom + m * (lp + torch.log1p((1.0 - bp) * e / denom))
            return e, torch.rand(k, tries, dtype=torch.float64, device=device).log() <= log_accept

        def on_stall(index):
            # only reached with invalid concentrations (validation off): a NaN acceptance
            # probability never accepts, and the generic error would come after 10^4 rounds
            kappa = flat_kappa[index]
            bad = ~((kappa > 0) & (kappa < math.inf))
            if bool(bad.any()):
                raise ValueError(
                    f"VonMisesFisher: the concentration must be positive and finite to sample, got {kappa[bad][0].item()} "
                    "(construct with validate_args=True to have it refused at construction)"
                )

        # Acceptance is at least about 0.7: with 8 proposals an element needs a second round with
        # probability < 1e-4, so a batch of rows (RDP's draw) takes one round; for large batches
        # fewer proposals waste less and the extra rounds are cheap next to the tangent.
        n = flat_kappa.numel()
        return _first_accepted(n, 8 if n <= 512 else (4 if n <= 4096 else 2), draw, device, on_stall).reshape(kappa64.shape)

    def _w_and_sin(self, kappa: torch.Tensor, eps: torch.Tensor):
        r"""``(w, sqrt(1 - w^2), b, denom, D)`` in float64 as differentiable functions of ``kappa`` at
        fixed ``eps`` (``denom = 1 - (1 - b) eps``, ``D`` as in :meth:`_wood_b`)."""
        b, den = self._wood_b(kappa.to(torch.float64))
        denom = 1.0 - (1.0 - b) * eps
        w = 1.0 - 2.0 * b * eps / denom
        sqrt_b = math.sqrt(0.25 * (self.dim - 1.0)) / den.sqrt()
        sin = 2.0 * sqrt_b * (eps * (1.0 - eps)).sqrt() / denom
        return w, sin, b, denom, den

    def rsample(self, sample_shape=torch.Size()) -> torch.Tensor:
        sample_shape = torch.Size(sample_shape)
        shape = self._extended_shape(sample_shape)
        kappa = self.concentration.expand(shape[:-1])
        with torch.no_grad():
            eps = self._accepted_proposals(kappa.detach().to(torch.float64))
        w64, sin64, _, _, _ = self._w_and_sin(kappa, eps)
        dtype = self.loc.dtype
        w = w64.to(dtype).unsqueeze(-1)
        sin = sin64.to(dtype).unsqueeze(-1)

        # Tangent direction: a Gaussian in coordinates 2..d, normalised. x' = (sigma w, sin v)
        # sits around sigma e1 with sigma = -sign(mu_1); the reflection H = I - 2 v v'/|v|^2,
        # v = sigma e1 - mu, maps sigma e1 to mu and |v|^2 = 2 + 2|mu_1| >= 2.
        g = torch.randn(shape, dtype=dtype, device=self.loc.device)
        g[..., 0] = 0.0
        a = sin / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
        loc = self.loc
        mu1 = loc[..., :1]
        sigma = torch.where(mu1 >= 0, -1.0, 1.0).to(dtype)
        loc_sq = (loc * loc).sum(-1, keepdim=True)
        vv = loc_sq - 2.0 * sigma * mu1 + 1.0
        g_dot_loc = _rowwise_dot(g, loc, len(sample_shape))
        c = 2.0 * (w * (1.0 - sigma * mu1) - a * g_dot_loc) / vv
        # x = H x' = a g + c mu + sigma (w - c) e1, assembled in place on one new tensor, with
        # w - c = (w (|mu|^2 - 1) + 2 a g'mu) / vv: formed as w - c it cancels (c ~ w) and loses
        # tangent components below an ulp of 1, i.e. all of them along mu for kappa >~ 1e30
        x = g * a
        x.addcmul_(c, loc)
        x[..., :1] += sigma * ((w * (loc_sq - 1.0) + 2.0 * a * g_dot_loc) / vv)
        self._sample_cache = (x, eps)
        return x

    def to_event(self, reinterpreted_batch_ndims=None):
        # an Independent that keeps the score-function term of score_parts (Pyro's drops it)
        if reinterpreted_batch_ndims is None:
            reinterpreted_batch_ndims = len(self.batch_shape)
        if reinterpreted_batch_ndims == 0:
            return self
        return _IndependentKeepingScore(self, reinterpreted_batch_ndims)

    # -- the rejection-sampling gradient correction ----------------------------------------
    def _proposal_of(self, value: torch.Tensor) -> torch.Tensor:
        cached_x, cached_eps = self._sample_cache
        if value is cached_x:
            return cached_eps
        # recover epsilon = h^{-1}(w): 1 - w = |x - mu|^2 / 2 without cancellation
        with torch.no_grad():
            t = 0.5 * (value - self.loc).to(torch.float64).square().sum(-1)
            b = self._wood_b(self.concentration.detach().to(torch.float64))[0].expand(t.shape)
            return t / (2.0 * b + (1.0 - b) * t)

    def score_parts(self, value: torch.Tensor) -> ScoreParts:
        log_prob = self.log_prob(value)
        if not self.gradient_correction:
            return ScoreParts(log_prob=log_prob, score_function=0, entropy_term=log_prob)
        eps = self._proposal_of(value)
        kappa = self.concentration.expand(eps.shape)
        _, _, _, denom, den = self._w_and_sin(kappa, eps)
        dm1 = self.dim - 1.0
        # log C + kappa w = (log C + kappa) - kappa (1 - w), kappa (1 - w) = 2 kappa b eps / denom with
        # kappa b = (m/4) kappa / D: no term of size kappa (nor a gradient that overflows)
        log_c_plus_kappa = vmf_log_normalizer_plus_concentration(self.dim, _compact(kappa).to(torch.float64)).expand(eps.shape)
        score = log_c_plus_kappa - (0.5 * dm1) * (kappa.to(torch.float64) / den) * eps / denom
        score = score + 0.5 * dm1 * (math.log(0.25 * dm1) - torch.log(den)) - dm1 * torch.log(denom)
        return ScoreParts(log_prob=log_prob, score_function=score.to(log_prob.dtype), entropy_term=log_prob)


class HypersphericalUniform(TorchDistribution):
    r"""The uniform distribution on :math:`S^{d-1} \subset \mathbb R^d`, density
    :math:`1/|S^{d-1}|` with :math:`|S^{d-1}| = 2\pi^{d/2} / \Gamma(d/2)`.

    :param int dim: ``d``, the dimension of the ambient space.
    :param batch_shape: batch shape.
    :param dtype, device: of samples and densities.
    """

    arg_constraints = {}
    support = constraints.sphere
    has_rsample = True  # samples do not depend on any parameter

    def __init__(self, dim: int, batch_shape=torch.Size(), *, dtype=None, device=None, validate_args: Optional[bool] = None):
        if isinstance(dim, bool) or not (isinstance(dim, int) and dim >= 2):
            raise ValueError(f"HypersphericalUniform: dim must be an int >= 2, got {dim!r}")
        batch_shape = check_shape("HypersphericalUniform", "batch_shape", batch_shape)
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"HypersphericalUniform: dtype must be a floating-point torch.dtype, got {dtype!r}")
        self._dtype = dtype or torch.get_default_dtype()
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        super().__init__(batch_shape, torch.Size([dim]), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(HypersphericalUniform, _instance)
        new._dtype, new._device = self._dtype, self._device
        super(HypersphericalUniform, new).__init__(torch.Size(batch_shape), self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def dim(self) -> int:
        return self.event_shape[0]

    @property
    def mean(self) -> torch.Tensor:
        return torch.zeros(self.batch_shape + self.event_shape, dtype=self._dtype, device=self._device)

    def entropy(self) -> torch.Tensor:
        return torch.full(self.batch_shape, log_sphere_area(self.dim), dtype=self._dtype, device=self._device)

    def rsample(self, sample_shape=torch.Size()) -> torch.Tensor:
        g = torch.randn(self._extended_shape(sample_shape), dtype=self._dtype, device=self._device)
        return g / torch.linalg.vector_norm(g, dim=-1, keepdim=True)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        shape = torch.broadcast_shapes(value.shape[:-1], self.batch_shape)
        return torch.full(shape, -log_sphere_area(self.dim), dtype=value.dtype, device=value.device)
