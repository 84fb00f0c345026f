"""Closed-form KL divergences, registered with ``torch.distributions.kl.register_kl``.

Every registration lives in this one module so that the dispatch table is easy to audit.
Objectives (:class:`pyrozoo.inference.ClosedFormKL_ELBO`, Pyro's ``TraceMeanField_ELBO``)
find these through ``kl_divergence`` and fall back to Monte Carlo where none is registered.
"""

import math

import pyro.distributions as dist
import torch
from torch.autograd.function import once_differentiable
from torch.distributions import register_kl

from pyrozoo.distributions.log_scale_normal import LogScaleNormal


def _compact(t: torch.Tensor) -> torch.Tensor:
    """A 0-d view of ``t`` when ``t`` is one value broadcast to a shape (all strides 0).

    Priors are usually one scalar expanded to a weight's shape; elementwise maths on the
    0-d view broadcasts for free instead of touching every entry.
    """
    if t.dim() > 0 and all(s == 0 for s in t.stride()):
        return t.as_strided((), ())
    return t


def _sum_to(x: torch.Tensor, shape) -> torch.Tensor:
    """Sums a broadcast gradient back to ``shape``."""
    if x.shape == shape:
        return x
    lead = x.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and x.shape[lead + i] != 1]
    return x.sum(dims, keepdim=True).reshape(shape) if dims else x.reshape(shape)


def _scaled_grad(grad: torch.Tensor, factor: torch.Tensor, shape) -> torch.Tensor:
    """``grad * factor`` summed to ``shape``; stays a free broadcast view when both are constant."""
    g = _compact(grad)
    if g.dim() == 0 and factor.dim() == 0:
        return (g * factor).expand(shape)
    return _sum_to(grad * factor, shape)


class _NormalKL(torch.autograd.Function):
    r"""Elementwise ``KL(N(mq, vq) || N(mp, sp^2)) = (vq + (mq - mp)^2) / (2 sp^2) - log_sq + log sp - 1/2``.

    Inputs are ``mq, log_sq, vq = exp(2 log_sq), mp, sp``; the gradient is written out
    (``d/dmq = (mq - mp) / sp^2``, ``d/dvq = 1 / (2 sp^2)``, ``d/dlog_sq = -1``,
    ``d/dsp = 1/sp - (vq + (mq - mp)^2) / sp^3``). On weight-sized tensors autograd's
    version of torch's rule spends most of its time allocating intermediates and taking
    ``log(scale)``, which made the KL cost as much as the layer's matrix products.
    """

    @staticmethod
    def forward(ctx, mq, log_sq, vq, mp, sp):
        sp_c = _compact(sp)
        inv_var_p = (sp_c * sp_c).reciprocal()
        diff = mq - _compact(mp)
        # out-of-place first: the prior may broadcast q to a larger shape
        kl = (diff * diff + vq) * (0.5 * inv_var_p) - log_sq + (sp_c.log() - 0.5)
        ctx.save_for_backward(diff, vq, sp_c, inv_var_p)
        ctx.shapes = (mq.shape, log_sq.shape, vq.shape, mp.shape, sp.shape)
        return kl

    @staticmethod
    def backward(ctx, grad):
        diff, vq, sp_c, inv_var_p = ctx.saved_tensors
        mq_shape, log_sq_shape, vq_shape, mp_shape, sp_shape = ctx.shapes
        need_mq, need_log_sq, need_vq, need_mp, need_sp = ctx.needs_input_grad
        grads = [None] * 5
        if need_mq or need_mp:
            g_diff = grad * diff * inv_var_p
            if need_mq:
                grads[0] = _sum_to(g_diff, mq_shape)
            if need_mp:
                grads[3] = _sum_to(-g_diff, mp_shape)
        if need_log_sq:
            grads[1] = _scaled_grad(grad, -torch.ones((), dtype=grad.dtype, device=grad.device), log_sq_shape)
        if need_vq:
            grads[2] = _scaled_grad(grad, 0.5 * inv_var_p, vq_shape)
        if need_sp:
            grads[4] = _sum_to(grad * (1.0 - (diff * diff + vq) * inv_var_p) / sp_c, sp_shape)
        return tuple(grads)


@register_kl(LogScaleNormal, dist.Normal)
def _kl_logscalenormal_normal(q, p):
    return _NormalKL.apply(q.loc, q.log_scale, q.variance, p.loc, p.scale)


@register_kl(LogScaleNormal, LogScaleNormal)
def _kl_logscalenormal_logscalenormal(q, p):
    return _NormalKL.apply(q.loc, q.log_scale, q.variance, p.loc, p.scale)


_HALF_LOG_2PI_E = 0.5 * (1.0 + math.log(2 * math.pi))


@register_kl(torch.distributions.LogNormal, torch.distributions.Gamma)
def _kl_lognormal_gamma(q, p):
    r"""``KL(LogNormal(mu, s^2) || Gamma(a, rate r))``
    ``= log Gamma(a) - a log r - a mu + r exp(mu + s^2/2) - log s - (1 + log 2 pi) / 2``
    (Louizos et al. 2017, appendix; the half-Cauchy scales of BC-GHS and RDP)."""
    mu, s = q.loc, q.scale
    a, r = p.concentration, p.rate
    return torch.lgamma(a) - a * torch.log(r) - a * mu + r * torch.exp(mu + 0.5 * s * s) - torch.log(s) - _HALF_LOG_2PI_E


@register_kl(torch.distributions.LogNormal, torch.distributions.InverseGamma)
def _kl_lognormal_inverse_gamma(q, p):
    r"""``KL(LogNormal(mu, s^2) || InverseGamma(a, scale b))``
    ``= log Gamma(a) - a log b + a mu + b exp(-mu + s^2/2) - log s - (1 + log 2 pi) / 2``.

    The inverse gamma's density is proportional to ``x^(-a-1) exp(-b / x)``; torch and Pyro
    call ``b`` its ``rate``. (The RDP reference code's version of this and the previous KL is
    off by ``log(pi) / 2``.)"""
    mu, s = q.loc, q.scale
    a, b = p.concentration, p.rate
    return torch.lgamma(a) - a * torch.log(b) + a * mu + b * torch.exp(-mu + 0.5 * s * s) - torch.log(s) - _HALF_LOG_2PI_E


# ---------------------------------------------------------------------------------------
# Summed KLs: KL(q || p) summed over all entries, for objectives that only need the total.
# ---------------------------------------------------------------------------------------

_SUMMED_KL = {}


def register_summed_kl(type_q, type_p):
    """Registers ``fn(q, p) -> scalar or None``: ``KL(q || p)`` summed over every entry of the
    *base* distributions (``Independent`` wrappers removed), or ``None`` when ``fn`` cannot
    handle these particular parameters. Used by :class:`~pyrozoo.inference.ClosedFormKL_ELBO`
    to avoid materialising weight-sized elementwise KL tensors."""

    def decorator(fn):
        _SUMMED_KL[(type_q, type_p)] = fn
        return fn

    return decorator


def _unwrap_independent(d):
    while isinstance(d, torch.distributions.Independent):
        d = d.base_dist
    return d


def summed_kl(q, p):
    """``KL(q || p)`` summed over all entries as a 0-d tensor, or ``None`` if no summed rule applies."""
    q, p = _unwrap_independent(q), _unwrap_independent(p)
    fn = _SUMMED_KL.get((type(q), type(p)))
    return None if fn is None else fn(q, p)


def _summed_normal_kl(mp, sp, posteriors):
    """``(kl, 1 / sp^2, [mq - mp, ...])``: the forward reductions of the summed Normal KL
    (:class:`_SummedNormalKL`) over ``(mq, log_sq, vq)`` triples; no weight-sized intermediate
    but the centred means (the locations themselves when ``mp`` is ``None``, i.e. 0)."""
    inv_var_p = (sp * sp).reciprocal()
    sum_v = sum_sq = sum_log = 0.0
    n = 0
    centred = []
    for mq, log_sq, vq in posteriors:
        c = mq if mp is None else mq - mp
        centred.append(c)
        sum_v = sum_v + vq.sum()
        sum_sq = sum_sq + torch.linalg.vector_norm(c).square()
        sum_log = sum_log + log_sq.sum()
        n += mq.numel()
    return (sum_v + sum_sq) * (0.5 * inv_var_p) - sum_log + n * (sp.log() - 0.5), inv_var_p, centred


class _SummedNormalKL(torch.autograd.Function):
    r"""``sum KL(N(mq, vq) || N(mp, sp^2))`` over all entries of one or more posteriors
    that share one scalar prior ``(mp, sp)``:

    ``(sum vq + ||mq - mp||^2) / (2 sp^2) - sum log_sq + n (log sp - 1/2)``.

    Called as ``apply(mp, sp, mq_1, log_sq_1, vq_1, mq_2, ...)``. Forward: reductions only,
    no weight-sized intermediate. Backward, written out: ``d/dmq = (mq - mp) / sp^2`` (the
    only weight-sized result), ``d/dvq = 1 / (2 sp^2)`` and ``d/dlog_sq = -1`` as free
    broadcast views. One autograd node for a whole network instead of several per layer.
    The prior's parameters are constants.
    """

    @staticmethod
    def forward(ctx, mp, sp, *tensors):
        kl, inv_var_p, centred = _summed_normal_kl(mp, sp, zip(tensors[0::3], tensors[1::3], tensors[2::3]))
        ctx.save_for_backward(inv_var_p, *centred)
        ctx.shapes = [(t.shape, v.shape) for t, v in zip(tensors[1::3], tensors[2::3])]
        return kl

    @staticmethod
    def backward(ctx, grad):
        inv_var_p, *centred = ctx.saved_tensors
        needs = ctx.needs_input_grad[2:]
        g = grad * inv_var_p
        grads = [None, None]
        for i, (c, (log_sq_shape, vq_shape)) in enumerate(zip(centred, ctx.shapes)):
            need_mq, need_log_sq, need_vq = needs[3 * i : 3 * i + 3]
            grads.append(c * g if need_mq else None)
            grads.append((-grad).expand(log_sq_shape) if need_log_sq else None)
            grads.append((0.5 * g).expand(vq_shape) if need_vq else None)
        return tuple(grads)


class _SummedNormalKLWithVariances(torch.autograd.Function):
    r"""The summed KL of :class:`_SummedNormalKL` that also computes the posteriors' variances
    ``vq = exp(2 log_sq)`` and returns them for the rest of the objective (the local
    reparameterization's variance product, Kingma et al. 2015, eq. 6).

    Called as ``apply(mp, sp, mq_1, log_sq_1, mq_2, log_sq_2, ...)``; returns
    ``(kl, vq_1, vq_2, ...)``. Owning ``vq`` lets the backward pass write each ``log_sq``
    gradient in one expression, ``2 vq (g_vq + g / (2 sp^2)) - g`` with ``g_vq`` the gradient
    that reaches ``vq`` from elsewhere, where autograd's chain (the KL's and the layer's
    gradients summed at ``vq``, ``exp``'s and ``2 *``'s backward, the sum with the KL's
    ``-1`` at ``log_sq``) makes five passes over every weight-sized tensor and allocates four
    intermediates. Values are those of ``_SummedNormalKL`` on ``(2 log_sq).exp()`` bit for bit;
    gradients agree to rounding.
    """

    @staticmethod
    def forward(ctx, mp, sp, *tensors):
        locs, log_scales = tensors[0::2], tensors[1::2]
        # (2 * log_sq).exp(), without the intermediate
        variances = [torch.mul(log_sq, 2).exp_() for log_sq in log_scales]
        kl, inv_var_p, centred = _summed_normal_kl(mp, sp, zip(locs, log_scales, variances))
        ctx.num = len(variances)
        ctx.save_for_backward(inv_var_p, *centred, *variances)
        ctx.set_materialize_grads(False)  # an unused variance gets None, not a weight-sized zero
        return (kl, *variances)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, *grad_variances):
        inv_var_p, *rest = ctx.saved_tensors
        centred, variances = rest[: ctx.num], rest[ctx.num :]
        needs = ctx.needs_input_grad[2:]
        if grad is None:
            grad = torch.zeros((), dtype=inv_var_p.dtype, device=inv_var_p.device)
        g = grad * inv_var_p
        grads = [None, None]
        for i, (c, vq, g_vq) in enumerate(zip(centred, variances, grad_variances)):
            need_mq, need_log_sq = needs[2 * i : 2 * i + 2]
            grads.append(c * g if need_mq else None)
            if need_log_sq:
                # d/dlog_sq = vq g / sp^2 - g + 2 vq g_vq  (g_vq None: vq unused). Not one
                # addcmul with 0-d tensor operands: that takes TensorIterator's unvectorized loop.
                grad_log_sq = torch.mul(vq, g).sub_(grad)
                if g_vq is not None:
                    grad_log_sq.addcmul_(vq, g_vq, value=2)
                grads.append(grad_log_sq)
            else:
                grads.append(None)
        return tuple(grads)


def _compact_prior_and_key(p):
    """``((mp or None when it is 0, sp), key)`` for a prior with one location and scale
    broadcast over its entries (0-d tensors, and a hashable key of their values that groups
    equal priors), else ``None``; cached on the (immutable) prior, once: ``float`` of a device
    tensor is a host synchronisation."""
    cached = p.__dict__.get("_pyrozoo_compact")
    if cached is None:
        mp, sp = _compact(p.loc), _compact(p.scale)
        if mp.dim() or sp.dim() or mp.requires_grad or sp.requires_grad:
            cached = False
        else:
            is_zero = mp.device.type == "cpu" and bool(mp == 0)
            prior = (None if is_zero else mp, sp)
            cached = (prior, (None if prior[0] is None else float(mp), float(sp), sp.dtype, sp.device))
        p.__dict__["_pyrozoo_compact"] = cached
    return cached or None


@register_summed_kl(LogScaleNormal, dist.Normal)
def _summed_kl_logscalenormal_normal(q, p):
    """Summed KL of a LogScaleNormal posterior to a Normal prior with one broadcast
    ``(loc, scale)``; ``None`` (use the elementwise rule) for any other prior."""
    compact = _compact_prior_and_key(p)
    if compact is None or q.loc.shape != q.batch_shape or q.log_scale.shape != q.batch_shape:
        return None
    return _SummedNormalKL.apply(*compact[0], q.loc, q.log_scale, q.variance)


def summed_kl_total(pairs, *, provide_variances: bool = False):
    """``sum_i sum KL(q_i || p_i)`` for a list of ``(q, p)`` pairs, evaluated with one autograd
    node per group of LogScaleNormal posteriors that share a scalar Normal prior.

    With ``provide_variances``, posteriors whose ``variance`` has not been evaluated yet get it
    from the same node (:class:`_SummedNormalKLWithVariances`, cached on the posterior as its
    ``variance``), so that later users of ``q.variance`` (the local-reparameterization handler)
    share one backward expression with the KL. Call it before anything reads those variances.

    Returns ``(total, rest)``: the summed KL of the pairs it handled (0-d tensor, or ``0.0``
    when none) and the pairs it left for other rules, in their original order.
    """
    groups, rest = {}, []
    for q, p in pairs:
        qb, pb = _unwrap_independent(q), _unwrap_independent(p)
        compact = _compact_prior_and_key(pb) if type(qb) is LogScaleNormal and type(pb) is dist.Normal else None
        if compact is None or qb.loc.shape != qb.batch_shape or qb.log_scale.shape != qb.batch_shape:
            rest.append((q, p))
            continue
        prior, key = compact
        group = groups.setdefault(key, (prior, [], []))
        if provide_variances and "variance" not in qb.__dict__:
            group[2].append(qb)
        else:
            group[1].extend((qb.loc, qb.log_scale, qb.variance))
    total = 0.0
    for prior, tensors, fresh in groups.values():
        if tensors:
            total = total + _SummedNormalKL.apply(*prior, *tensors)
        if fresh:
            kl, *variances = _SummedNormalKLWithVariances.apply(*prior, *(t for qb in fresh for t in (qb.loc, qb.log_scale)))
            for qb, vq in zip(fresh, variances):
                qb.__dict__["variance"] = vq  # the lazy property's cache
            total = total + kl
    return total, rest


# ---------------------------------------------------------------------------------------
# Variational dropout: Normal posteriors against the log-uniform and ARD priors
# (Molchanov et al. 2017; Neklyudov et al. 2019; Molchanov 2022, eqs. 7-8).
# ---------------------------------------------------------------------------------------

from pyrozoo.distributions.ard import ARDNormal  # noqa: E402
from pyrozoo.distributions.dropout_normal import DropoutNormal  # noqa: E402
from pyrozoo.distributions.log_uniform import LogUniformImproper  # noqa: E402

#: coefficients of the sigmoid approximation of the thesis' eq. 8
LOG_UNIFORM_KL_K1, LOG_UNIFORM_KL_K2, LOG_UNIFORM_KL_K3 = 0.63576, 1.87320, 1.48695
#: range to which log alpha is clipped when it is derived from a plain Normal's loc and scale
LOG_ALPHA_CLIP = (-8.0, 8.0)


def log_alpha_of(q) -> torch.Tensor:
    """``log alpha = log(sigma^2 / mu^2)`` of a Normal: carried by a :class:`DropoutNormal`,
    else computed and clipped to :data:`LOG_ALPHA_CLIP` (Molchanov et al.'s code; a mean of
    exactly zero gives the upper bound)."""
    if isinstance(q, DropoutNormal):
        return q.log_alpha
    log_var = 2 * q.log_scale if isinstance(q, LogScaleNormal) else 2 * q.scale.log()
    tiny = torch.finfo(q.loc.dtype).tiny
    return (log_var - (q.loc * q.loc).clamp_min(tiny).log()).clamp(*LOG_ALPHA_CLIP)


class _LogUniformKL(torch.autograd.Function):
    """Elementwise ``k1 - k1 sigmoid(k2 + k3 l) + log(1 + exp(-l)) / 2`` with the derivative
    ``-k1 k3 s (1 - s) - sigmoid(-l) / 2`` (``s = sigmoid(k2 + k3 l)``) computed in the same
    pass: on weight-sized tensors autograd's chain of ten small kernels cost more than the
    layer's matrix products."""

    @staticmethod
    def forward(ctx, log_alpha):
        # log(1 + exp(-l)) = max(-l, 0) + log1p(exp(-|l|)): finite for any l, 0 at l = +inf
        softplus = torch.exp(-log_alpha.abs()).log1p_().add_(torch.relu(-log_alpha))
        s = torch.sigmoid(LOG_UNIFORM_KL_K2 + LOG_UNIFORM_KL_K3 * log_alpha)
        kl = softplus.mul_(0.5).sub_(s * LOG_UNIFORM_KL_K1).add_(LOG_UNIFORM_KL_K1)
        if ctx.needs_input_grad[0]:
            # sigmoid(-l) = e / (1 + e) = 1 / (1 + exp(l)), written to stay finite for large |l|
            sig_neg = torch.sigmoid(-log_alpha)
            ctx.save_for_backward(s.mul_(s.neg().add_(1.0)).mul_(-LOG_UNIFORM_KL_K1 * LOG_UNIFORM_KL_K3).sub_(sig_neg.mul_(0.5)))
        return kl

    @staticmethod
    def backward(ctx, grad):
        (derivative,) = ctx.saved_tensors
        return grad * derivative


def kl_log_uniform_from_log_alpha(log_alpha: torch.Tensor) -> torch.Tensor:
    r"""``KL(N(theta, alpha theta^2) || LogU) ~ k1 - k1 sigmoid(k2 + k3 log alpha) + 1/2 log(1 + 1/alpha)``
    (the negative of the thesis' eq. 8 with the constant ``-k1`` of Molchanov et al.'s code,
    so that the KL tends to 0 as alpha -> infinity), elementwise."""
    return _LogUniformKL.apply(log_alpha)


def kl_ard_from_log_alpha(log_alpha: torch.Tensor) -> torch.Tensor:
    """``KL(N(mu, sigma^2) || N(0, mu^2 + sigma^2)) = 1/2 log(1 + 1/alpha)``, elementwise."""
    return 0.5 * torch.nn.functional.softplus(-log_alpha)


def _broadcast_sum(fn, t: torch.Tensor) -> torch.Tensor:
    """``fn(t).sum()`` evaluated on the distinct entries of a broadcast ``t`` (shared dropout
    rates of a layer or a neuron) and multiplied by how often each one repeats."""
    index = [slice(None) if stride or size == 1 else slice(0, 1) for size, stride in zip(t.shape, t.stride())]
    distinct = t[tuple(index)]
    return fn(distinct).sum() * (t.numel() // max(distinct.numel(), 1))


@register_kl(dist.Normal, LogUniformImproper)
def _kl_normal_log_uniform(q, p):
    return kl_log_uniform_from_log_alpha(log_alpha_of(q)).expand(torch.broadcast_shapes(q.batch_shape, p.batch_shape))


@register_kl(dist.Normal, ARDNormal)
def _kl_normal_ard(q, p):
    return kl_ard_from_log_alpha(log_alpha_of(q)).expand(torch.broadcast_shapes(q.batch_shape, p.batch_shape))


def _summed_log_uniform(q, p):
    if q.batch_shape != p.batch_shape:
        return None
    return _broadcast_sum(kl_log_uniform_from_log_alpha, log_alpha_of(q))


def _summed_ard(q, p):
    if q.batch_shape != p.batch_shape:
        return None
    return _broadcast_sum(kl_ard_from_log_alpha, log_alpha_of(q))


for _q_type in (dist.Normal, torch.distributions.Normal, LogScaleNormal, DropoutNormal):
    register_summed_kl(_q_type, LogUniformImproper)(_summed_log_uniform)
    register_summed_kl(_q_type, ARDNormal)(_summed_ard)


# -- von Mises-Fisher and the uniform distribution on the sphere (issue 3) -------------------
from pyrozoo.ops.special import bessel_iv_ratio_and_complement, log_bessel_ive_div_pow  # noqa: E402
from pyrozoo.distributions.von_mises_fisher import (  # noqa: E402
    HypersphericalUniform,
    VonMisesFisher,
    log_sphere_area,
    vmf_log_normalizer,
    vmf_mean_resultant_length_complement,
)


def _vmf_log_bessel(dim: int, kappa: torch.Tensor) -> torch.Tensor:
    r""":math:`g(\kappa) = \log C_d(0) - \log C_d(\kappa) - \kappa
    = \log(\Gamma(d/2) (2/\kappa)^{d/2-1} I_{d/2-1}(\kappa)) - \kappa` (float64): 0 at :math:`\kappa = 0`,
    about :math:`-\kappa` for small and :math:`-\tfrac{d-1}{2}\log\kappa` for large :math:`\kappa`, with the
    derivative :math:`-(1 - A_d(\kappa))`. The vMF KLs are small combinations of it: neither the
    terms of size :math:`\kappa` of the textbook forms nor the constant :math:`\log |S^{d-1}|` (of size
    :math:`d \log d`) are formed, so they keep their relative accuracy from :math:`\kappa \to 0` (where
    KL(vMF || uniform) is about :math:`\kappa^2 / (2d)`) to the largest float64."""
    return log_bessel_ive_div_pow(0.5 * dim - 1.0, kappa, normalized=True)


def _check_same_sphere(q, p):
    if q.event_shape != p.event_shape:
        raise ValueError(f"KL between distributions on spheres of different dimension: {tuple(q.event_shape)} and {tuple(p.event_shape)}")


@register_kl(VonMisesFisher, VonMisesFisher)
def _kl_vmf_vmf(q, p):
    r"""``log C_d(kq) - log C_d(kp) + A_d(kq) (kq - kp mu_p' mu_q)`` (Oh et al. 2020, eq. 12 and
    supplementary Sec. 4; with mu_p = mu_q it depends on the concentrations only). Written with
    ``1 - mu_p' mu_q = |mu_p - mu_q|^2 / 2``, so it is exactly that for equal means, and the
    special-function part, in float64, as ``g(kp) - g(kq) - (1 - A(kq)) (kq - kp)``
    (:func:`_vmf_log_bessel`; ``log C(k) + k = log C(0) - g(k)``), whose terms are not much larger
    than the result (the textbook form's are ~kappa each and cancel)."""
    _check_same_sphere(q, p)
    d = q.dim
    # (a concentration shared by a layer is one value broadcast over its rows: evaluated once)
    kq = _compact(q.concentration).to(torch.float64)
    kp = _compact(p.concentration).to(torch.float64)
    a, w = bessel_iv_ratio_and_complement(0.5 * d, kq)  # A_d(kq), 1 - A_d(kq)
    part = _vmf_log_bessel(d, kp) - _vmf_log_bessel(d, kq) - w * (kq - kp)
    half_sq_dist = 0.5 * (q.loc - p.loc).square().sum(-1)
    return part.to(q.loc.dtype) + (a * kp).to(q.loc.dtype) * half_sq_dist


@register_kl(VonMisesFisher, HypersphericalUniform)
def _kl_vmf_uniform(q, p):
    r"""``kappa A_d(kappa) + log C_d(kappa) + log |S^{d-1}|`` (RDP's ``KL_vMF_Unif``), in float64 as
    ``-(g(kappa) + kappa (1 - A))`` (:func:`_vmf_log_bessel`), which forms no term of size kappa
    and no constant of size d log d."""
    _check_same_sphere(q, p)
    k = _compact(q.concentration).to(torch.float64)
    kl = -(_vmf_log_bessel(q.dim, k) + k * vmf_mean_resultant_length_complement(q.dim, k))
    return kl.to(q.loc.dtype).expand(torch.broadcast_shapes(q.batch_shape, p.batch_shape))


@register_kl(HypersphericalUniform, VonMisesFisher)
def _kl_uniform_vmf(q, p):
    r"""``-log |S^{d-1}| - log C_d(kappa)`` (the uniform's mean of ``mu' x`` is 0)."""
    _check_same_sphere(q, p)
    kl = -log_sphere_area(p.dim) - vmf_log_normalizer(p.dim, _compact(p.concentration).to(torch.float64))
    return kl.to(p.loc.dtype).expand(torch.broadcast_shapes(q.batch_shape, p.batch_shape))


@register_kl(HypersphericalUniform, HypersphericalUniform)
def _kl_uniform_uniform(q, p):
    _check_same_sphere(q, p)
    return torch.zeros(torch.broadcast_shapes(q.batch_shape, p.batch_shape), dtype=q._dtype, device=q._device)
