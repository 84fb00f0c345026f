r"""The von Mises–Fisher distribution on the unit sphere, and the uniform distribution on it.

:math:`\mathrm{vMF}(x \mid \mu, \kappa) = C_d(\kappa)\, e^{\kappa \mu^\top x}` on
:math:`S^{d-1} \subset \mathbb R^d`, with
:math:`C_d(\kappa) = \kappa^{d/2-1} / ((2\pi)^{d/2} I_{d/2-1}(\kappa))` (Oh et al. 2020, eq. 4).
Its special functions come from :mod:`pyrozoo.ops.special`; its KL divergences
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
from torch.autograd.function import once_differentiable
from torch.distributions.utils import lazy_property

from pyrozoo.distributions.constraints import positive_finite
from pyrozoo.ops.special import (
    bessel_iv_ratio,
    bessel_iv_ratio_complement,
    bessel_iv_ratio_derivative,
    log_bessel_iv_div_pow,
    log_bessel_ive_div_pow,
)
from pyrozoo.distributions.util import check_shape, sum_rightmost

#: a sampler that has not accepted a proposal for every row after this many rounds is broken
_MAX_REJECTION_ROUNDS = 10_000
#: after this many rounds (for valid parameters a chance below 1e-38: every round after the first
#: fills its pool, or accepts a pending row's proposal, with probability above 0.97) the rows
#: still pending are diagnosed, e.g. an invalid concentration that slipped past validation
_STALL_ROUNDS = 25
#: lower bounds on the acceptance probability of Wood's sampler over every kappa, from d on:
#: it decreases in kappa towards 0.6577 (d = 2), 0.6796 (3), 0.6882 (4), 0.6955 (6), 0.7006
#: (10), 0.7059 (50) and 1/sqrt(2) (quadrature; ~0.71-0.74 at RDP's concentrations)
_MIN_ACCEPTANCE = ((2, 0.655), (3, 0.677), (4, 0.686), (6, 0.693), (10, 0.698), (50, 0.703))
#: rows that share their concentration draw from one pool of proposals, sized so that it holds
#: enough accepted ones unless the number accepted falls this many standard deviations short of
#: its mean at the acceptance's lower bound (a chance of at most ~2.3%, reached in the limit of
#: large kappa; 1e-7 to 1.5% at RDP's layer shapes and concentrations): one round, i.e. one pass
#: of tensor operations and one host synchronisation, nearly always, and a small second pool
#: otherwise
_POOL_MARGIN_SD = 2.0
#: the tangent direction is projected twice below this dimension (see ``VonMisesFisher.rsample``):
#: a Gaussian within angle 0.1 of the mean, where one projection's rounding shows at ~1e-6 in
#: float32, has probability about 0.1^(d-1), 1e-7 from here on (and 1e-14 for an angle of 0.01)
_REPROJECT_BELOW_DIM = 8
#: proposals per row and round when each row has its own concentration, in the first round for
#: batches of up to ``_SMALL_BATCH`` rows and for larger ones, and in later rounds (rows still
#: pending: at acceptance 0.7, 9% after two proposals, 0.07% after six, 0.35^8 ~ 2e-4 at most
#: after a later round)
_TRIES, _SMALL_BATCH, _LARGE_TRIES, _LATER_TRIES = 6, 128, 2, 8


def _min_acceptance(dim: int) -> float:
    """The lower bound of ``_MIN_ACCEPTANCE`` for dimension ``dim``."""
    return max(p for d, p in _MIN_ACCEPTANCE if d <= dim)


def _pool_size(needed: int, dim: int) -> int:
    """Proposals that hold ``needed`` accepted ones unless their number falls ``_POOL_MARGIN_SD``
    standard deviations short at acceptance ``_min_acceptance(dim)``: the smallest N with
    N p - z sqrt(N p (1 - p)) >= needed."""
    p, z = _min_acceptance(dim), _POOL_MARGIN_SD
    zs = z * math.sqrt(p * (1.0 - p))
    root = (zs + math.sqrt(zs * zs + 4.0 * p * needed)) / (2.0 * p)
    return math.ceil(root * root)


def _compact(t: torch.Tensor) -> torch.Tensor:
    """A 0-d view of ``t`` when ``t`` is one value broadcast to a shape, so that per-layer
    concentrations expanded over the rows of a layer are evaluated once."""
    if t.dim() > 0 and not any(t.stride()):
        return t.as_strided((), ())
    return t


def _symmetric_beta(alpha: float, shape, device):
    """``(eps, 1 - eps)`` for draws ``eps`` from Beta(alpha, alpha) of ``shape`` in float64: G1 / (G1 + G2)
    and G2 / (G1 + G2) of two Gamma(alpha) variates (each without cancellation near 0), from
    torch's Dirichlet sampler (one operation, ~0.1 us a draw on a CPU, as torch's Beta
    distribution draws)."""
    return torch._sample_dirichlet(torch.full(shape + (2,), alpha, dtype=torch.float64, device=device)).unbind(-1)


def _first_accepted(eps: torch.Tensor, accept: torch.Tensor):
    """``(value, any)`` of proposals ``(rows, tries)``: each row's first proposal with ``accept``
    (shape ``(rows, 1)``) and whether it has one (shape ``(rows,)``)."""
    first = accept.to(torch.uint8).argmax(-1, keepdim=True)
    return eps.gather(-1, first), accept.any(-1)


class _WoodConstants:
    r"""The functions of :math:`\kappa` that Wood's sampler needs (:math:`m = d - 1`), for a Python
    float (a CPU concentration shared by all rows: no tensor operations, and fused ones on the
    proposals) or a tensor (0-d, or one value per row of shape ``(rows, 1)``; on an accelerator
    reading the value would synchronise), without overflow up to the largest float, from
    :math:`D = \kappa/2 + \sqrt{\kappa^2/4 + m^2/16}` and Wood's :math:`b = (m/4) / D = m / (2\kappa + \sqrt{4\kappa^2 + m^2})`:

    * ``b``, ``one_minus_b`` and ``two_b``;
    * the log-acceptance's ``slope`` :math:`2b\kappa = (m/2) \kappa / D` (never of size :math:`\kappa`) and
      ``intercept`` :math:`2b\kappa / (1 + b) + m \log((1 + b)/2)`;
    * ``sqrt_2b`` :math:`\sqrt{2b} = \sqrt{m / (2D)}`, which is not subnormal where :math:`b` is
      (:math:`\kappa \gtrsim 10^{307}`).
    """

    def __init__(self, dim: int, kappa):
        m = dim - 1.0
        self.m = m
        self.fused = isinstance(kappa, float)
        if self.fused:
            den = 0.5 * kappa + math.hypot(0.5 * kappa, 0.25 * m)
            b = 0.25 * m / den
            self.slope = 0.5 * m * (kappa / den)
            self.intercept = self.slope / (1.0 + b) + m * (math.log1p(b) - math.log(2.0))
            self.sqrt_2b = math.sqrt(0.5 * m / den)
        else:
            den = 0.5 * kappa + torch.hypot(0.5 * kappa, torch.full_like(kappa, 0.25 * m))
            b = 0.25 * m / den
            self.slope = 0.5 * m * (kappa / den)
            self.intercept = self.slope / (1.0 + b) + m * (torch.log1p(b) - math.log(2.0))
            self.sqrt_2b = (0.5 * m / den).sqrt()
        self.b, self.one_minus_b, self.two_b = b, 1.0 - b, 2.0 * b
        self.per_row = torch.is_tensor(b) and b.dim() > 0

    def rows(self, index: torch.Tensor) -> "_WoodConstants":
        """These constants for the rows ``index`` of the batch (a float or 0-d tensor serves all rows)."""
        if not self.per_row:
            return self
        out = _WoodConstants.__new__(_WoodConstants)
        out.m, out.fused, out.per_row = self.m, self.fused, self.per_row
        for name in ("b", "one_minus_b", "two_b", "slope", "intercept", "sqrt_2b"):
            setattr(out, name, getattr(self, name)[index])
        return out

    def accept(self, eps: torch.Tensor, one_minus_eps: torch.Tensor):
        r"""``(rho, accepted)`` of proposals ``eps``: :math:`\rho = \varepsilon / q` with
        :math:`q = 1 - (1 - b)\varepsilon = (1 - \varepsilon) + b \varepsilon` (which gives :math:`w = 1 - 2b\rho`), and Wood's acceptance test
        :math:`\log u \le \kappa (w - x_0) + m \log((1 - x_0 w) / (1 - x_0^2))`, :math:`x_0 = (1 - b)/(1 + b)`.
        With :math:`\kappa (1 - x_0) = 2b\kappa / (1 + b)` and :math:`1 - x_0 w = (1 - x_0)(1 + (1 - b)\rho)` its
        right side is ``intercept`` :math:`-\,2b\kappa\rho - m \log q`: no term of size :math:`\kappa`, and no
        cancellation when :math:`\kappa \gg d`."""
        log_u = torch.rand_like(eps).log_()
        if self.fused:  # the same terms in fewer operations
            q = torch.add(one_minus_eps, eps, alpha=self.b)
            rho = eps / q
            return rho, log_u.sub_(self.intercept) <= torch.add(torch.xlogy(-self.m, q), rho, alpha=-self.slope)
        q = one_minus_eps + self.b * eps
        rho = eps / q
        return rho, log_u <= self.intercept - self.slope * rho - self.m * q.log()

    def w_and_sin(self, rho: torch.Tensor):
        r""":math:`w = 1 - 2b\rho` and :math:`\sqrt{1 - w^2} = \sqrt{(1 - w)(1 + w)} = \sqrt{2b}\, \sqrt{\rho\, (2 - (1 - w))}`,
        both without cancellation."""
        one_minus_w = rho * self.two_b
        if self.fused and self.b > 1e-250:  # (1 - w)(1 + w) itself, as 1 - w is not subnormal
            return torch.rsub(one_minus_w, 1.0), torch.rsub(one_minus_w, 2.0).mul_(one_minus_w).sqrt_()
        sin = (rho * torch.rsub(one_minus_w, 2.0)).sqrt_()
        return torch.rsub(one_minus_w, 1.0), sin.mul_(self.sqrt_2b) if self.fused else sin * self.sqrt_2b

    def proposal(self, rho: torch.Tensor) -> torch.Tensor:
        r"""The proposal :math:`\varepsilon = \rho / (1 + (1 - b)\rho)` of ``rho``."""
        return rho / (1.0 + self.one_minus_b * rho)


class _WoodTransform(torch.autograd.Function):
    r"""``(w, sin)`` of accepted proposals (:meth:`_WoodConstants.w_and_sin`) with their
    exact pathwise derivatives in :math:`\kappa` at fixed :math:`\varepsilon`, in closed form: with
    :math:`h = \sqrt{\kappa^2 + m^2/4}`, :math:`db/d\kappa = -b/h` and :math:`dw/db = -\sin^2 / (2b)`, so
    :math:`dw/d\kappa = \sin^2 / (2h)` and :math:`d\sin/d\kappa = -w \sin / (2h)`. One node in the
    graph instead of a dozen per-row operations (and their backward)."""

    @staticmethod
    def forward(ctx, kappa, rho, constants):
        w, sin = constants.w_and_sin(rho)
        ctx.m = constants.m
        ctx.save_for_backward(kappa, w, sin)
        return w, sin

    @staticmethod
    def backward(ctx, grad_w, grad_sin):
        kappa, w, sin = ctx.saved_tensors
        kappa64 = kappa.to(torch.float64)
        # 1 / (2h) = (1/4) / hypot(kappa/2, m/4): no overflow at the largest floats
        inv_2h = 0.25 / torch.hypot(0.5 * kappa64, torch.full_like(kappa64, 0.25 * ctx.m))
        grad = (sin * (grad_w * sin - grad_sin * w)) * inv_2h
        return grad.sum_to_size(kappa.shape).to(kappa.dtype), None, None


class _ReflectedTangent(torch.autograd.Function):
    r"""``x = w mu + a g`` for a Gaussian ``g`` projected orthogonal to ``mu`` and ``a = sin / |g|``,
    with the pathwise gradient in ``mu`` of the Householder reparameterisation at this sample.

    Wood's sampler places the tangent direction with the reflection :math:`H` that maps
    :math:`\sigma e_1` to :math:`\mu` (:math:`\sigma = -\mathrm{sign}(\mu_1)`, -1 at 0; :math:`u = \sigma e_1 - \mu`,
    :math:`|u|^2 = 2(1 - \sigma\mu_1) \ge 2`): :math:`x = w\mu + s\,Hv` with :math:`v \perp e_1` uniform. For fixed
    :math:`(w, s, v)`, with :math:`t = s\,Hv` and :math:`\beta = 2 s\, v^\top\mu / |u|^2 = \sigma t_1 / (1 - \sigma\mu_1)`,
    :math:`x = s v + (w - \beta)\mu + \sigma\beta e_1`, whose vector-Jacobian product in :math:`\mu` is
    :math:`(w - \beta)\,G + c\,(t + \beta\mu)` with :math:`c = (\sigma G_1 - G^\top\mu) / (1 - \sigma\mu_1)`. Every sample
    is :math:`x = w\mu + s\,Hv` for exactly one :math:`v`, distributed as Wood's, whatever unit tangent
    draw made it, so this is Wood's (and this module's earlier) loc-gradient estimator, while the
    forward pass takes the cheaper projection of a Gaussian (:meth:`VonMisesFisher.rsample`). The
    gradients in ``w`` (:math:`G^\top\mu`) and ``a`` (:math:`G^\top g`) are those of the sum.
    """

    @staticmethod
    def forward(ctx, loc, w, a, g):
        ctx.save_for_backward(loc, w, a, g)
        return (g * a).addcmul_(w, loc)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        loc, w, a, g = ctx.saved_tensors
        grad_dot_loc = (grad * loc).sum(-1, keepdim=True)
        grad_loc = grad_w = grad_a = None
        if ctx.needs_input_grad[0]:
            mu1 = loc.narrow(-1, 0, 1)
            sigma = torch.where(mu1 < 0, 1.0, -1.0)
            one_minus_sigma_mu1 = torch.rsub(sigma * mu1, 1.0)
            beta = sigma * a * g.narrow(-1, 0, 1) / one_minus_sigma_mu1
            c = (sigma * grad.narrow(-1, 0, 1) - grad_dot_loc) / one_minus_sigma_mu1
            grad_loc = ((w - beta) * grad).addcmul_(c * a, g).addcmul_(c * beta, loc).sum_to_size(loc.shape)
        if ctx.needs_input_grad[1]:
            grad_w = grad_dot_loc.sum_to_size(w.shape)
        if ctx.needs_input_grad[2]:
            grad_a = (grad * g).sum(-1, keepdim=True).sum_to_size(a.shape)
        return grad_loc, grad_w, grad_a, None


def _diagnose_stall(kappa) -> None:
    """Raise for an invalid concentration among those of rows still pending after ``_STALL_ROUNDS``
    rounds: only reached with validation off, where a NaN acceptance probability never accepts
    and the generic error would come after ``_MAX_REJECTION_ROUNDS`` rounds."""
    bad = ~((kappa > 0) & (kappa < math.inf))
    if bool(bad.any()):
        raise ValueError(
            f"VonMisesFisher: the concentration must be positive and finite to sample, got {kappa[bad].flatten()[0].item()} "
            "(construct with validate_args=True to have it refused at construction)"
        )


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


def _rowwise_dot(g: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
    """``(g * loc).sum(-1, keepdim=True)`` for ``g`` of shape ``sample + batch + (d,)`` and ``loc``
    of shape ``batch + (d,)``: a matrix-vector product when the batch is empty; otherwise the
    elementwise product and sum, which on a CPU is several times faster than ``bmm`` or
    ``einsum`` of one row per batch element (36 vs 7 us at 50 x 500, 480 vs 80 us at 800 x 500)."""
    if loc.dim() == 1:
        return (g @ loc).unsqueeze(-1)
    return (g * loc).sum(-1, keepdim=True)


class VonMisesFisher(TorchDistribution):
    r"""von Mises–Fisher distribution :math:`C_d(\kappa) e^{\kappa \mu^\top x}` on :math:`S^{d-1}`
    (Oh et al. 2020, eq. 4), reparameterizable in any dimension :math:`d \ge 2`.

    **Sampling** (:meth:`rsample`): Wood's (1994) rejection sampler for :math:`w = \mu^\top x`,
    in a form without cancellation (:math:`b = m / (2\kappa + \sqrt{4\kappa^2 + m^2})`,
    :math:`m = d - 1`; :math:`1 - w = 2b\varepsilon / (1 - (1 - b)\varepsilon)`; the acceptance
    test rearranged around :math:`x_0 = (1-b)/(1+b)`), in float64, for all rows at once: rows
    that share their concentration (a layer's) take the accepted proposals of one pool, sized
    from the acceptance's lower bound (~0.66 for every :math:`d, \kappa`) so that one round of
    tensor operations nearly always suffices; rows with their own concentrations make several
    proposals each and keep their first accepted one. Then :math:`x = w\mu + \sqrt{1 - w^2}\, u` with the
    tangent direction :math:`u` the normalised projection of a Gaussian orthogonal to :math:`\mu`
    (no special case near any pole; at a pole the tangent coordinates are exact for any
    concentration). A draw of a batch of rows is a few dozen tensor operations and one host
    synchronisation.

    **Gradients**: pathwise for ``loc``, those of Wood's Householder reflection taking
    :math:`\mp e_1` to :math:`\mu` (with the sign chosen so that the reflection vector never
    degenerates) at the drawn sample, in closed form (``_ReflectedTangent``), and for ``concentration``
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
        comes from :func:`~pyrozoo.ops.special.bessel_iv_ratio_derivative`, and only its
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

    def _accepted_proposals(self, constants: _WoodConstants, n: int, device, kappa: torch.Tensor) -> torch.Tensor:
        r"""For each of ``n`` rows an accepted Beta((d-1)/2, (d-1)/2) proposal :math:`\varepsilon` of
        Wood's sampler, all rows at once, as :math:`\rho = \varepsilon / (1 - (1 - b)\varepsilon)` (float64,
        shape ``(n, 1)``; :meth:`_WoodConstants.accept`).

        Rows that share their concentration share a pool of proposals (``_pool_size``): accepted
        proposals of i.i.d. trials are i.i.d. draws of the target, whichever rows take them, so
        the k-th row takes the k-th accepted one; a pool that falls short (rarely) is topped up.
        Rows with their own concentrations make ``_TRIES`` proposals each and keep their first
        accepted one; the few rows with none make more.
        """
        alpha = 0.5 * constants.m
        if constants.per_row:
            return self._accepted_per_row(constants, n, alpha, device, kappa)
        rho, accept = constants.accept(*_symmetric_beta(alpha, (_pool_size(n, self.dim),), device))
        accepted = rho.masked_select(accept)  # the draw's one host synchronisation
        if len(accepted) >= n:
            return accepted[:n, None]
        pieces, needed = [accepted], n - len(accepted)
        for round_ in range(1, _MAX_REJECTION_ROUNDS):
            if round_ == _STALL_ROUNDS:
                _diagnose_stall(kappa.detach())
            rho, accept = constants.accept(*_symmetric_beta(alpha, (_pool_size(needed, self.dim),), device))
            accepted = rho.masked_select(accept)
            if len(accepted) >= needed:
                return torch.cat(pieces + [accepted[:needed]]).view(n, 1)
            pieces.append(accepted)
            needed -= len(accepted)
        raise RuntimeError("rejection sampler did not terminate")  # pragma: no cover

    @staticmethod
    def _accepted_per_row(constants: _WoodConstants, n: int, alpha: float, device, kappa: torch.Tensor) -> torch.Tensor:
        out, done = _first_accepted(*constants.accept(*_symmetric_beta(alpha, (n, _TRIES if n <= _SMALL_BATCH else _LARGE_TRIES), device)))
        if bool(done.all()):  # the draw's one host synchronisation, unless rows are still pending
            return out
        pending = (~done).nonzero().flatten()
        for round_ in range(_MAX_REJECTION_ROUNDS):
            if round_ == _STALL_ROUNDS:
                _diagnose_stall(kappa.detach()[pending])
            value, done = _first_accepted(*constants.rows(pending).accept(*_symmetric_beta(alpha, (pending.numel(), _LATER_TRIES), device)))
            out[pending[done]] = value[done]
            pending = pending[~done]
            if pending.numel() == 0:
                return out
        raise RuntimeError("rejection sampler did not terminate")  # pragma: no cover

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
        # (the small tensor operations of a layer's draw cost microseconds each on a CPU, so this
        # path avoids any that it can: see benchmarks/vmf_sampling.py)
        shape = self._extended_shape(sample_shape)
        rows = shape[:-1]
        loc = self.loc
        dtype, device = loc.dtype, loc.device
        # One concentration shared by all rows (a layer's) is a 0-d tensor, and on a CPU a float:
        # Wood's constants are then Python numbers, not a dozen tensor operations.
        kappa = _compact(self.concentration)
        if kappa.dim():
            kappa = kappa.expand(rows).reshape(-1, 1)
        constants = _WoodConstants(shape[-1], kappa.item() if kappa.dim() == 0 and kappa.is_cpu else kappa.detach().to(torch.float64))
        rho = self._accepted_proposals(constants, math.prod(rows), device, kappa)  # (constants and draws: no autograd)
        w, sin = _WoodTransform.apply(kappa, rho, constants) if kappa.requires_grad else constants.w_and_sin(rho)
        w, sin = w.to(dtype=dtype), sin.to(dtype=dtype)
        if len(rows) != 1:
            w, sin = w.view(rows + (1,)), sin.view(rows + (1,))

        # x = w mu + sin u, u uniform on the unit sphere of the tangent space of mu: the projection
        # t = g - (g'mu) mu of a standard Gaussian, normalised (fewer operations than Wood's
        # reflection, and exact at the poles: the tangent coordinates are products, not
        # differences, so a spread far below an ulp of 1 survives any concentration there); the
        # gradient in loc is that of the reflection (_ReflectedTangent). For small d, g may lie
        # close to mu, where the rounding of g'mu leaves a component along mu that is not small
        # next to |t|: a second projection removes it (Kahan's "twice is enough", Parlett 1980).
        # (the projection works in place on g)
        mu = loc.detach()
        g = torch.randn(*shape, dtype=dtype, device=device)
        g.addcmul_(_rowwise_dot(g, mu), mu, value=-1.0)
        if shape[-1] < _REPROJECT_BELOW_DIM:
            g.addcmul_(_rowwise_dot(g, mu), mu, value=-1.0)
        a = sin / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
        x = _ReflectedTangent.apply(loc, w, a, g) if loc.requires_grad else (g * a).addcmul_(w, loc)
        self._sample_cache = (x, (rho, constants))  # the proposals, made by _proposal_of when needed
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
            rho, constants = cached_eps
            return constants.proposal(rho).view(value.shape[:-1])
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
