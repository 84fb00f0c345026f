"""A Normal with a shared (group) scale written non-centred, and its summed KL to a
zero-mean Normal with a group scale.

Bayesian compression's weight posterior is ``w = z * w~`` with ``q(w~) = N(mu~, sigma~^2)``
and the group scale ``z`` shared by every weight of a group (Louizos, Ullrich & Welling 2017,
sec. 3-4); the prior is ``N(0, z^2)``. Written as one Normal ``N(z mu~, z^2 sigma~^2)`` against
the prior's Normal, the registered elementwise KL (:mod:`pyrozoo.distributions.kl`) forms and
differentiates ``(z^2 sigma~^2 + z^2 mu~^2) / (2 z^2)`` weight by weight, about thirty
weight-sized kernels per layer and step; on LeNet-300-100 on a CPU this KL cost more than the
layer's matrix products. With the group scales kept apart, the summed KL needs per group only
``Q_g = sum mu~^2`` and ``V_g = sum sigma~^2``:

.. math::

    \\sum_w \\mathrm{KL} = \\sum_g \\Big[\\frac{z_g^2 Q_g + \\bar z_g^2 V_g}{2 s_g^2}
        + n_g (\\log s_g - \\log \\bar z_g)\\Big] - \\tfrac12 \\sum_w \\log \\tilde\\sigma^2 - \\frac n2

(``s_g`` the prior's scale, ``\\bar z = max(|z|, floor)`` the posterior's, ``n_g`` weights per
group), which is ``KL(N(mu~, sigma~^2) || N(0, 1))`` summed when ``s = |z|``: three
reductions, and the gradients ``2 gQ mu~`` and ``gV sigma~^2``. The compression priors
emit the weight's prior as a :class:`GroupScaleNormal`, which keeps ``s`` unexpanded.

The summed-KL rules are registered here, beside the distributions whose intermediates they
read (``register_summed_kl``); the reference elementwise rules stay in
:mod:`pyrozoo.distributions.kl`.
"""

import torch
from pyro.distributions import Normal
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions.utils import lazy_property

from pyrozoo.distributions.kl import register_summed_kl
from pyrozoo.distributions.log_scale_normal import LogScaleNormal

#: smallest group scale |z| used in the posterior's variance and log scale (shared with the guide's reference computation)
SCALE_FLOOR = 1e-16


class _Noncentred(torch.autograd.Function):
    r"""``(loc, variance, Q, V, S)`` of :class:`NoncentredNormal`: ``loc = z mu~``, ``variance =
    zbar^2 exp(log sigma~^2)`` and, with ``with_kl``, ``Q = sum mu~^2`` and ``V = sum sigma~^2``
    over the weights of each group (``dims``, kept) and ``S = sum log sigma~^2``; else empty.

    The gradient is written out: ``d/dmu~ = g_loc z + 2 g_Q mu~``, ``d/dlog sigma~^2 =
    sigma~^2 (g_var zbar^2 + g_V) + g_S``, and ``z``, ``zbar^2`` receive the group sums of
    ``g_loc mu~`` and ``g_var sigma~^2``.
    """

    @staticmethod
    def forward(ctx, z, zbar2, mu, log_var, dims, with_kl):
        ctx.set_materialize_grads(False)
        var = log_var.exp()
        loc = z * mu
        variance = zbar2 * var
        if with_kl:
            sum_sq = torch.linalg.vector_norm(mu, dim=dims, keepdim=True).square() if dims else mu * mu
            sum_var = var.sum(dims, keepdim=True) if dims else var.clone()
            sum_log_var = log_var.sum()
        else:
            sum_sq = sum_var = sum_log_var = mu.new_empty(0)
            ctx.mark_non_differentiable(sum_sq)
        ctx.save_for_backward(z, zbar2, mu, var)
        return loc, variance, sum_sq, sum_var, sum_log_var

    @staticmethod
    def backward(ctx, g_loc, g_variance, g_sq, g_var, g_log):
        z, zbar2, mu, var = ctx.saved_tensors
        need_z, need_zbar2, need_mu, need_log_var = ctx.needs_input_grad[:4]
        g_z = g_zbar2 = g_mu = g_log_var = None
        if g_loc is not None:
            if need_z:
                g_z = (g_loc * mu).sum_to_size(z.shape)
            if need_mu:
                g_mu = g_loc * z
        if g_sq is not None and need_mu:
            g_mu = mu * (2 * g_sq) if g_mu is None else g_mu.addcmul_(mu, 2 * g_sq)
        if g_variance is not None:
            if need_zbar2:
                g_zbar2 = (g_variance * var).sum_to_size(zbar2.shape)
            if need_log_var:
                g_log_var = g_variance * zbar2
        if need_log_var:
            # d var / d log var = var; S adds g_S to every entry
            if g_var is not None:
                g_log_var = g_var.expand(var.shape) if g_log_var is None else g_log_var.add_(g_var)
            if g_log_var is not None:
                g_log_var = g_log_var * var if g_log is None else torch.addcmul(g_log.expand(var.shape), g_log_var, var)
            elif g_log is not None:
                g_log_var = g_log.expand(var.shape)
        return g_z, g_zbar2, g_mu, g_log_var, None, None


class NoncentredNormal(LogScaleNormal):
    r"""``N(z mu~, zbar^2 sigma~^2)`` with ``zbar = max(|z|, floor)``: a weight ``w = z w~``
    whose non-centred part is ``w~ ~ N(mu~, sigma~^2)`` (Louizos et al. 2017, sec. 4), with
    ``z`` shared across a group of weights (it broadcasts to ``mu~``).

    A :class:`~pyrozoo.distributions.LogScaleNormal` with ``log_scale = log zbar + log
    sigma~^2 / 2`` (computed only when asked for: local reparameterization reads the mean and
    ``variance``), so every rule for Normals applies. With ``with_kl`` the per-group sums of
    its KL to a zero-mean Normal prior with a scale constant over the same groups are
    computed with it, and its summed KL is the grouped formula of the module docstring;
    otherwise (or for any other prior) the registered elementwise rule applies.

    :param group_scale: ``z``, broadcastable to ``base_loc``.
    :param base_loc: ``mu~``.
    :param base_log_var: ``log sigma~^2``, the shape of ``base_loc``.
    :param bool with_kl: compute the per-group sums for the KL.
    """

    def __init__(self, group_scale, base_loc, base_log_var, with_kl=False, validate_args=None):
        if base_loc.shape != base_log_var.shape:
            raise ValueError(f"NoncentredNormal: base_loc {tuple(base_loc.shape)} and base_log_var {tuple(base_log_var.shape)} must have one shape")
        if group_scale.dim() > base_loc.dim() or torch.broadcast_shapes(group_scale.shape, base_loc.shape) != base_loc.shape:
            raise ValueError(f"NoncentredNormal: group_scale of shape {tuple(group_scale.shape)} does not broadcast to the weights' shape {tuple(base_loc.shape)}")
        z = group_scale.reshape((1,) * (base_loc.dim() - group_scale.dim()) + tuple(group_scale.shape))
        self.group_scale, self.base_log_var = z, base_log_var
        self.scale_floored = z.abs().clamp_min(SCALE_FLOOR)
        dims = [i for i, (a, b) in enumerate(zip(z.shape, base_loc.shape)) if a == 1 and b != 1]
        self.loc, variance, *sums = _Noncentred.apply(z, self.scale_floored * self.scale_floored, base_loc, base_log_var, dims, bool(with_kl))
        self.__dict__["variance"] = variance
        self._kl_sums = sums if with_kl else None
        TorchDistribution.__init__(self, base_loc.shape, validate_args=validate_args)

    @lazy_property
    def log_scale(self):
        return self.scale_floored.log() + 0.5 * self.base_log_var

    def expand(self, batch_shape, _instance=None):
        # an expanded copy is an ordinary LogScaleNormal (the grouped KL is of this shape only)
        plain = LogScaleNormal(self.loc, self.log_scale, validate_args=False)
        plain.__dict__["variance"] = self.variance
        plain._validate_args = self._validate_args
        return plain.expand(batch_shape, _instance)


class GroupScaleNormal(Normal):
    """``N(0, s^2)`` over a weight tensor of shape ``batch_shape`` whose scale ``s`` is shared
    by groups of weights (it broadcasts to ``batch_shape``): the Normal of the group-scale
    priors of Bayesian compression, which keeps ``s`` unexpanded so that the grouped KL of
    :class:`NoncentredNormal` reads it directly (on any device).

    :param group_scale: ``s > 0``, broadcastable to ``batch_shape``.
    :param batch_shape: the weight's shape.
    """

    def __init__(self, group_scale, batch_shape, validate_args=None):
        batch_shape = torch.Size(batch_shape)
        self.group_scale = group_scale
        zero = torch.zeros((), dtype=group_scale.dtype, device=group_scale.device)
        super().__init__(zero.expand(batch_shape), group_scale.expand(batch_shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        # expanding adds leading (sample) dimensions: an ordinary Normal
        return Normal(self.loc, self.scale, validate_args=False).expand(batch_shape, _instance)


def _grouped_kl(q, scale):
    """The grouped KL of ``q`` to ``N(0, scale^2)``, ``scale`` broadcastable to ``q``'s shape and
    constant over ``q``'s groups; ``None`` when it is not."""
    z = q.group_scale
    scale = scale.reshape((1,) * (z.dim() - scale.dim()) + tuple(scale.shape)) if scale.dim() < z.dim() else scale
    if scale.dim() != z.dim() or any(a != 1 and a != b for a, b in zip(scale.shape, z.shape)):
        return None  # the prior's scale varies within one of the posterior's groups
    sum_sq, sum_var, sum_log_var = q._kl_sums
    zbar = q.scale_floored
    n = q.batch_shape.numel()
    quadratic = ((z * z) * sum_sq + (zbar * zbar) * sum_var) * (scale * scale).reciprocal()
    log_ratio = (scale.log() - zbar.log()).expand(sum_sq.shape)
    return 0.5 * quadratic.sum() + (n // sum_sq.numel()) * log_ratio.sum() - 0.5 * sum_log_var - 0.5 * n


@register_summed_kl(NoncentredNormal, GroupScaleNormal)
def _summed_kl_noncentred_group_scale(q, p):
    """The grouped KL (module docstring) to the prior of Bayesian compression."""
    if q._kl_sums is None or p.batch_shape != q.batch_shape:
        return None
    return _grouped_kl(q, p.group_scale)


def _distinct(t: torch.Tensor) -> torch.Tensor:
    """The view of ``t`` without its broadcast (stride-0) dimensions, kept with size 1."""
    return t[tuple(slice(None) if stride or size == 1 else slice(0, 1) for size, stride in zip(t.shape, t.stride()))]


@register_summed_kl(NoncentredNormal, Normal)
def _summed_kl_noncentred_normal(q, p):
    """The grouped KL to a zero-mean Normal of ``q``'s shape whose scale is constant over
    ``q``'s groups; ``None`` (the elementwise rule) otherwise. (Slicing the prior's expanded
    scale costs a weight-sized gradient buffer: :class:`GroupScaleNormal` avoids it.)"""
    if q._kl_sums is None or p.batch_shape != q.batch_shape:
        return None
    loc = _distinct(p.loc)
    # a mean known to be zero without a host synchronisation: a constant on the CPU
    if loc.numel() != 1 or loc.requires_grad or loc.device.type != "cpu" or bool(loc.reshape(()) != 0):
        return None
    return _grouped_kl(q, _distinct(p.scale))
