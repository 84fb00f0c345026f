"""Sparse VD's additive posterior with its log-uniform KL evaluated from shared intermediates.

The additive parameterisation of Molchanov, Ashukha & Vetrov (2017, sec. 4.2) keeps
``(theta, log sigma^2)`` per weight and derives ``log alpha = clip(log sigma^2 - log theta^2)``.
One training step needs, per weight, the mean, the variance (local reparameterization) and
``KL(q || LogU)`` as a function of ``log alpha`` (eq. 14, the sigmoid approximation). Computed
as independent pieces (a posterior, then the registered KL reading ``log alpha``) these cost
about sixty weight-sized kernels per layer: on LeNet-300-100 on a CPU, several times the
layer's matrix products. Here one autograd function returns the posterior and the summed
KL together, sharing ``theta^2``, ``sigma^2`` and ``theta / theta^2``; ``1/alpha`` comes from
a division instead of an ``exp``; the clip and train-time masks are applied with
``hardtanh_backward`` (one pass, no boolean tensor: on a CPU a comparison or ``where`` over a
weight tensor costs as much as a transcendental); and one written-out backward pass carries
the gradients of the mean, the variance and the KL to ``(theta, log sigma^2)``: about
twenty-five weight-sized kernels per layer and step in all.

The values equal :class:`~pyrozoo.distributions.DropoutNormal` built by the reference
computation (``_AdditivePosterior`` of :mod:`pyrozoo.guides.variational_dropout` and the KL
of :mod:`pyrozoo.distributions.kl`) to rounding: ``log alpha`` and the mean are bitwise the
same, so pruning decisions are too. The summed-KL rule is registered here, beside the
distribution whose intermediates it reads; the reference rules stay in
:mod:`pyrozoo.distributions.kl`.
"""

import math

import torch

from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions.utils import lazy_property

from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.kl import LOG_UNIFORM_KL_K1, LOG_UNIFORM_KL_K2, LOG_UNIFORM_KL_K3, kl_log_uniform_from_log_alpha, register_summed_kl
from pyrozoo.distributions.log_uniform import LogUniformImproper

# keeps log(theta^2) finite at theta = 0 (where log alpha then hits its upper clip); shared
# with the reference computation (the guide's _AdditivePosterior), so log alpha is bitwise the same
THETA2_FLOOR = 1e-32

_mask_inside = torch.ops.aten.hardtanh_backward  # (g, x, low, high) -> g where low < x < high, else 0


class _AdditiveDropout(torch.autograd.Function):
    r"""``(loc, log_var, variance, log_alpha, kl)`` from ``(theta, log sigma^2)``.

    ``log alpha = clip(raw, low, high)`` with ``raw = log sigma^2 - log theta^2``;
    ``log var = log sigma^2 + (log alpha - raw)``, which is ``log sigma^2`` exactly inside the
    clip and ``clip + log theta^2`` outside it; ``loc = theta 1[log alpha < threshold]`` with
    ``train_clip`` (the mask is a constant). With ``with_kl``, ``kl`` is the summed
    log-uniform KL (eq. 14 as registered in :mod:`pyrozoo.distributions.kl`, with ``k1 - k1
    sigmoid(x) = k1 sigmoid(-x)``): ``sum_i k1 sigmoid(-(k2 + k3 l_i)) + softplus(-l_i) / 2``,
    from ``exp(-l) = theta^2 / var`` (``var = alpha theta^2``, also outside the clip) and
    ``sigmoid(-l) = e / (1 + e)``; else an empty tensor.

    Backward: with ``g_l`` the total gradient on ``log alpha`` (its own output's plus the KL's
    ``g_kl dKL/dl``, ``dKL/dl = -k1 k3 s (1 - s) - sigmoid(-l) / 2``, ``s = sigmoid(-(k2 + k3
    l))``) and ``g_v`` the one on ``log var``: inside the clip both move with ``log sigma^2``
    and ``log alpha`` with ``-log theta^2``; outside, ``log alpha`` is constant and ``log var``
    moves with ``log theta^2``, so ``g_log_sigma2 = 1[inside] (g_l + g_v)`` and ``g_theta =
    (2 theta / theta^2) (g_v - g_log_sigma2)`` plus the masked gradient of the mean.
    """

    @staticmethod
    def forward(ctx, theta, log_sigma2, low, high, threshold, train_clip, with_kl):
        ctx.set_materialize_grads(False)
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        theta2 = (theta * theta).add_(THETA2_FLOOR)
        raw = log_sigma2 - theta2.log()
        log_alpha = raw.clamp(low, high)
        log_var = (log_alpha - raw).add_(log_sigma2)
        variance = log_var.exp()
        loc = _mask_inside(theta, log_alpha, -math.inf, threshold) if train_clip else theta.detach().clone()
        # theta / theta^2 (the 2 of d log theta^2 / d theta is applied in backward)
        ratio = torch.div(theta, theta2) if need_grad else None
        kl_derivative = None
        if with_kl:
            inv_alpha = theta2.div_(variance)
            sig_neg = inv_alpha / inv_alpha.add(1.0) if need_grad else None
            s = torch.rsub(log_alpha, -LOG_UNIFORM_KL_K2, alpha=LOG_UNIFORM_KL_K3).sigmoid_()  # sigmoid(-k2 - k3 l)
            kl = inv_alpha.log1p_().sum() * 0.5 + s.sum() * LOG_UNIFORM_KL_K1
            if need_grad:
                # -2 dKL/dl = 2 k1 k3 s (1 - s) + sigmoid(-l)
                kl_derivative = torch.add(sig_neg, s.addcmul_(s, s, value=-1.0), alpha=2 * LOG_UNIFORM_KL_K1 * LOG_UNIFORM_KL_K3)
        else:
            kl = theta.new_empty(0)
            ctx.mark_non_differentiable(kl)
        ctx.bounds = (low, high, threshold, train_clip)
        ctx.save_for_backward(raw, log_alpha, variance, ratio, kl_derivative)
        return loc, log_var, variance, log_alpha, kl

    @staticmethod
    def backward(ctx, g_loc, g_log_var, g_variance, g_log_alpha, g_kl):
        raw, log_alpha, variance, ratio, kl_derivative = ctx.saved_tensors
        low, high, threshold, train_clip = ctx.bounds
        gv = g_log_var
        if g_variance is not None:
            gv = g_variance * variance if gv is None else torch.addcmul(gv, g_variance, variance)
        total = gv
        if g_log_alpha is not None:
            total = g_log_alpha if total is None else total + g_log_alpha
        if g_kl is not None and kl_derivative is not None:
            g_kl_half = g_kl * -0.5
            total = kl_derivative * g_kl_half if total is None else torch.addcmul(total, kl_derivative, g_kl_half)
        g_mean = None
        if g_loc is not None:
            g_mean = _mask_inside(g_loc, log_alpha, -math.inf, threshold) if train_clip else g_loc
        if total is None:
            return g_mean, None, None, None, None, None, None
        g_log_sigma2 = _mask_inside(total, raw, low, high)
        outside = g_log_sigma2.neg() if gv is None else gv - g_log_sigma2
        g_theta = outside.mul_(ratio).mul_(2.0) if g_mean is None else torch.addcmul(g_mean, outside, ratio, value=2.0)
        return g_theta, g_log_sigma2, None, None, None, None, None


class AdditiveDropoutNormal(DropoutNormal):
    r"""The Sparse VD posterior ``N(theta, sigma^2)`` of one weight tensor built from its
    parameters ``(theta, log sigma^2)`` (Molchanov et al. 2017, sec. 4.2), a
    :class:`~pyrozoo.distributions.DropoutNormal` (``log_alpha`` clipped to ``(low, high)``).
    With ``with_kl`` its summed KL to :class:`~pyrozoo.distributions.LogUniformImproper` is
    computed with the posterior and shares its backward pass (see the module docstring);
    pass it when that KL will be taken, e.g. while training against a log-uniform prior.
    Otherwise the KL is the registered one of :mod:`pyrozoo.distributions.kl` (from
    ``log_alpha``).

    :param theta: the means ``theta`` (a parameter tensor).
    :param log_sigma2: ``log sigma^2``, same shape.
    :param float low, high: clip range of ``log alpha``.
    :param float threshold: with ``train_clip``, the mean of weights with ``log alpha >=
        threshold`` is zero (the variance and KL still use ``theta``).
    :param bool train_clip: apply that mask.
    :param bool with_kl: compute the summed log-uniform KL with the posterior.
    """

    def __init__(self, theta, log_sigma2, low, high, threshold, train_clip, with_kl=True, validate_args=None):
        if theta.shape != log_sigma2.shape:
            raise ValueError(f"AdditiveDropoutNormal: theta {tuple(theta.shape)} and log_sigma2 {tuple(log_sigma2.shape)} must have one shape")
        loc, log_var, variance, log_alpha, kl = _AdditiveDropout.apply(theta, log_sigma2, low, high, threshold, train_clip, bool(with_kl))
        self.loc, self.log_alpha, self._log_var = loc, log_alpha, log_var
        self.__dict__["variance"] = variance  # LogScaleNormal's lazy exp(2 log_scale), already computed
        self._kl = kl if with_kl else None
        TorchDistribution.__init__(self, loc.shape, validate_args=validate_args)

    @lazy_property
    def log_scale(self):
        # only the variance enters local reparameterization and the KL: halve log var on demand
        return 0.5 * self._log_var

    def expand(self, batch_shape, _instance=None):
        # an expanded copy is an ordinary DropoutNormal (the summed KL is of this shape only)
        plain = DropoutNormal(self.loc, self.log_scale, self.log_alpha, validate_args=False)
        plain.__dict__["variance"] = self.variance
        plain._validate_args = self._validate_args
        return plain.expand(batch_shape, _instance)


@register_summed_kl(AdditiveDropoutNormal, LogUniformImproper)
def _summed_kl_additive_log_uniform(q, p):
    """The KL computed with the posterior, else the registered one from ``log alpha`` summed."""
    if q.batch_shape != p.batch_shape:
        return None
    return q._kl if q._kl is not None else kl_log_uniform_from_log_alpha(q.log_alpha).sum()
