"""Gaussian (variational) dropout posteriors: Sparse VD and the parameterisations of variance networks."""

import math
from typing import Callable, Dict, Optional, Tuple

import torch
from torch import nn

from pyrozoo.distributions.additive_dropout import THETA2_FLOOR, AdditiveDropoutNormal
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.guides.base import SitewiseGuide
from pyrozoo.guides.arguments import check_bool, check_bounds, check_real
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.models.improper import placeholder_prior
from pyrozoo.utils import with_parameters

#: the parameterisations of the thesis' eq. 11 / Table 2
PARAMETERIZATIONS = ("additive", "weight", "neuron", "layer", "zero-mean")


class _AdditivePosterior(torch.autograd.Function):
    r"""``(loc, log_scale, variance, log_alpha)`` of the additive parameterisation from
    ``(theta, log sigma^2)`` in one pass, with the gradient written out.

    ``log alpha = clip(log sigma^2 - log theta^2)``; the variance is ``sigma^2`` where the clip
    is inactive and ``alpha_clip theta^2`` where it is active; ``loc = theta * 1[log alpha <
    threshold]`` with ``train_clip`` (the mask is a constant). Autograd's version of this
    chain launched about twenty weight-sized kernels per layer and step, several times the
    cost of LeNet-300-100's matrix products on a CPU.
    """

    @staticmethod
    def forward(ctx, theta, log_sigma2, low, high, threshold, train_clip):
        ctx.set_materialize_grads(False)
        theta2 = theta * theta + THETA2_FLOOR
        log_theta2 = theta2.log()
        raw = log_sigma2 - log_theta2
        inside = (raw > low) & (raw < high)
        log_alpha = raw.clamp_(low, high)
        log_var = torch.where(inside, log_sigma2, log_alpha + log_theta2)
        variance = log_var.exp()
        log_scale = log_var.mul_(0.5)
        keep = log_alpha < threshold if train_clip else None
        loc = theta * keep if train_clip else theta.detach().clone()
        ctx.train_clip = train_clip
        ctx.save_for_backward(theta, theta2, inside, variance, keep)
        return loc, log_scale, variance, log_alpha

    @staticmethod
    def backward(ctx, g_loc, g_log_scale, g_variance, g_log_alpha):
        theta, theta2, inside, variance, keep = ctx.saved_tensors
        g_log_var = None
        if g_log_scale is not None:
            g_log_var = 0.5 * g_log_scale
        if g_variance is not None:
            g_log_var = g_variance * variance if g_log_var is None else g_log_var + g_variance * variance
        zero = torch.zeros((), dtype=theta.dtype, device=theta.device)
        g_la = g_log_alpha if g_log_alpha is not None else zero
        g_lv = g_log_var if g_log_var is not None else zero
        # inside the clip: d(log alpha) = d(log sigma^2) - 2 theta/theta^2 dtheta, d(log var) = d(log sigma^2);
        # outside: log alpha is constant and d(log var) = 2 theta/theta^2 dtheta
        g_log_sigma2 = torch.where(inside, g_la + g_lv, zero)
        g_theta = torch.where(inside, -g_la, g_lv).mul_(2 * theta / theta2)
        if g_loc is not None:
            g_theta = g_theta + (g_loc * keep if ctx.train_clip else g_loc)
        if g_log_sigma2.shape != inside.shape:
            g_log_sigma2 = g_log_sigma2.expand(inside.shape)
        if g_theta.shape != theta.shape:
            g_theta = g_theta.expand(theta.shape)
        return g_theta, g_log_sigma2, None, None, None, None


class VariationalDropoutGuide(SitewiseGuide):
    r"""Gaussian dropout posteriors ``q(w) = N(mu, alpha mu^2)`` over every (real) latent site.

    The parameterisations of the thesis' eq. 11 (Neklyudov et al. 2019, Table 2):

    ============  ===============================  ====================================
    name          ``q(w_ij)``                      parameters
    ============  ===============================  ====================================
    zero-mean     ``N(0, sigma_ij^2)``             signed ``sigma`` (alpha = infinity)
    layer         ``N(mu_ij, alpha mu_ij^2)``      ``mu``, one ``log alpha`` per layer
    neuron        ``N(mu_ij, alpha_j mu_ij^2)``    ``mu``, ``log alpha`` per output unit
    weight        ``N(mu_ij, alpha_ij mu_ij^2)``   ``mu``, ``log alpha`` per weight
    additive      ``N(mu_ij, sigma_ij^2)``         ``mu``, ``log sigma^2`` per weight
    ============  ===============================  ====================================

    The additive one is Sparse VD's (Molchanov et al. 2017, sec. 4.2): ``w = theta + sigma
    eps`` with independent ``(theta, log sigma^2)`` and ``log alpha = log sigma^2 - log
    theta^2``, which keeps the gradient of ``theta`` free of the dropout noise.
    ``log alpha`` is clipped to ``log_alpha_bounds`` in the variance and in the KL (the
    gradient vanishes outside), except for the zero-mean layers, whose alpha is infinite.

    Zero-mean layers learn ``sigma`` itself (sign irrelevant), initialised to the network's
    initial weights, as the variance layers of Neklyudov et al.'s code. Keep the output
    layer out of a zero-mean guide (leave it to a point estimate, as the authors do, or give
    it a mean): with zero-mean output weights the logits' mean is the bias whatever the
    input, and by Jensen's inequality the expected cross-entropy is at least that of a
    network that ignores its input, so training ends at chance whatever the hidden layers
    do. The prior's selection leaves it out (selector keyword ``hide_modules=[<output
    layer>]``).

    Each site's distribution is a :class:`~pyrozoo.distributions.DropoutNormal` (a Normal
    carrying ``log alpha``), so the local-reparameterization and flipout handlers apply
    and the KLs against :class:`~pyrozoo.models.LogUniformPrior` and
    :class:`~pyrozoo.models.ARDPrior` are the registered closed forms.

    With ``train_clip``, the mean of the weights with ``log alpha >= threshold`` is zero
    while their variance and KL still use ``theta`` (``train_clip`` of Molchanov et al.'s
    code): the network trains as it will be pruned.

    :param model: the Pyro model (e.g. a :class:`~pyrozoo.models.BayesianNeuralNetwork`).
    :param str parameterization: one of :data:`PARAMETERIZATIONS`.
    :param float init_log_sigma2: initial ``log sigma^2`` (additive).
    :param float init_log_alpha: initial ``log alpha`` (layer, neuron, weight).
    :param log_alpha_bounds: ``(low, high)`` clip range of ``log alpha``.
    :param bool train_clip: zero the mean of weights above ``threshold`` while training.
    :param float threshold: pruning threshold on ``log alpha`` (Molchanov et al.: 3).
    :param init_loc_fn: initial means (default: the network's own parameter values).
    """

    def __init__(
        self,
        model,
        *,
        parameterization: str = "additive",
        init_log_sigma2: float = -10.0,
        init_log_alpha: float = -5.0,
        log_alpha_bounds: Tuple[float, float] = (-8.0, 8.0),
        train_clip: bool = False,
        threshold: float = 3.0,
        init_loc_fn: Callable = init_to_network,
        hide=(),
        create_plates=None,
    ):
        owner = type(self).__name__
        if not isinstance(parameterization, str) or parameterization not in PARAMETERIZATIONS:
            raise ValueError(f"{owner}: parameterization must be one of {PARAMETERIZATIONS}, got {parameterization!r}")
        init_log_sigma2 = check_real(owner, "init_log_sigma2", init_log_sigma2)
        init_log_alpha = check_real(owner, "init_log_alpha", init_log_alpha)
        low, high = check_bounds(owner, "log_alpha_bounds", log_alpha_bounds)
        train_clip = check_bool(owner, "train_clip", train_clip)
        threshold = check_real(owner, "threshold", threshold)
        if not low < threshold < high:
            raise ValueError(f"the log alpha threshold {threshold} must lie inside log_alpha_bounds ({low}, {high}); outside them it prunes nothing or everything")
        if parameterization != "additive" and not low <= init_log_alpha <= high:
            raise ValueError(f"init_log_alpha={init_log_alpha} lies outside log_alpha_bounds ({low}, {high})")
        if train_clip and parameterization == "zero-mean":
            raise ValueError("train_clip has no meaning for zero-mean layers (their mean is 0)")
        super().__init__(model, init_loc_fn=init_loc_fn, hide=hide, create_plates=create_plates)
        self.parameterization = parameterization
        self.init_log_sigma2 = init_log_sigma2
        self.init_log_alpha = init_log_alpha
        self.log_alpha_bounds = (low, high)
        self.train_clip = bool(train_clip)
        self.threshold = threshold
        self.locs = nn.ParameterDict()
        self.log_sigma2 = nn.ParameterDict()
        self.log_alphas = nn.ParameterDict()
        self.scales = nn.ParameterDict()

    #: the additive posterior as an :class:`~pyrozoo.distributions.additive_dropout.AdditiveDropoutNormal`,
    #: whose KL to the log-uniform prior shares the posterior's intermediates; ``False`` gives
    #: the reference computation it is tested and timed against (:class:`_AdditivePosterior`,
    #: then the registered KL of :mod:`pyrozoo.distributions.kl` from ``log alpha``): the same
    #: numbers to rounding, about twice the cost per step on a CPU
    fused = True

    # -- construction -------------------------------------------------------------------
    def _setup_prototype(self, *args, **kwargs):
        # improper priors (log-uniform, ARD) cannot be sampled: trace the model at the initial values
        with self._model_at_init_values():
            super()._setup_prototype(*args, **kwargs)

    #: dropout posteriors are for global real-valued weights
    families = ("real",)
    global_sites_only = True

    def _init_site(self, info, unconstrained_init):
        init = unconstrained_init
        key = info.key
        if self.parameterization == "zero-mean":
            # variance layers start with the network's initial weights as (signed) scales; an
            # exactly zero scale would never move (d sigma^2 / d sigma = 0), so those start at
            # exp(init_log_sigma2 / 2)
            floor = torch.full_like(init, math.exp(0.5 * self.init_log_sigma2))
            self.scales[key] = nn.Parameter(torch.where(init == 0, floor, init))
            return
        self.locs[key] = nn.Parameter(init)
        if self.parameterization == "additive":
            self.log_sigma2[key] = nn.Parameter(torch.full_like(init, self.init_log_sigma2))
        else:
            shape = {
                "weight": init.shape,
                "neuron": init.shape[:1] + (1,) * (init.dim() - 1),
                "layer": (1,) * init.dim(),
            }[self.parameterization]
            self.log_alphas[key] = nn.Parameter(torch.full(shape, self.init_log_alpha, dtype=init.dtype, device=init.device))

    # -- per call -----------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        if self.prototype_trace is not None:
            self.locs, self.log_sigma2, self.log_alphas, self.scales  # registers all parameters with Pyro's param store, once
        return super().forward(*args, **kwargs)

    def _parameters_of(self, name: str):
        """``(mean theta or None, clipped log alpha, log variance)`` of site ``name``, differentiable."""
        key = self._sites[name].key
        modules = self._modules
        if self.parameterization == "zero-mean":
            scale = modules["scales"][key]
            log_var = (scale * scale).clamp_min(torch.finfo(scale.dtype).tiny).log()
            return None, torch.full((), math.inf, dtype=log_var.dtype, device=log_var.device).expand(log_var.shape), log_var
        theta = modules["locs"][key]
        log_theta2 = (theta * theta + THETA2_FLOOR).log()
        if self.parameterization == "additive":
            log_alpha = (modules["log_sigma2"][key] - log_theta2).clamp(*self.log_alpha_bounds)
        else:
            log_alpha = modules["log_alphas"][key].clamp(*self.log_alpha_bounds)
        return theta, log_alpha, log_alpha + log_theta2

    def posterior(self, name, plates=None):
        if self.parameterization == "additive" and self.fused:
            key = self._sites[name].key
            modules = self._modules
            with_kl = torch.is_grad_enabled() and self._log_uniform_site(name)
            q = AdditiveDropoutNormal(modules["locs"][key], modules["log_sigma2"][key], *self.log_alpha_bounds, self.threshold, self.train_clip, with_kl)
            return q.to_event(self._sites[name].event_dim)
        if self.parameterization == "additive":
            key = self._sites[name].key
            loc, log_scale, variance, log_alpha = _AdditivePosterior.apply(
                self._modules["locs"][key], self._modules["log_sigma2"][key], *self.log_alpha_bounds, self.threshold, self.train_clip
            )
            q = DropoutNormal(loc, log_scale, log_alpha)
            q.__dict__["variance"] = variance  # LogScaleNormal's lazily cached exp(2 log_scale), already computed
            return q.to_event(self._sites[name].event_dim)
        theta, log_alpha, log_var = self._parameters_of(name)
        if theta is None:
            loc = log_var.new_zeros(()).expand(log_var.shape)
        elif self.train_clip:
            loc = theta * (log_alpha < self.threshold)
        else:
            loc = theta
        return DropoutNormal(loc, 0.5 * log_var, log_alpha).to_event(self._sites[name].event_dim)

    def _log_uniform_site(self, name: str) -> bool:
        """Whether the model's prior of site ``name`` is the log-uniform one (its KL is then
        computed with the posterior while training)."""
        known = self.__dict__.setdefault("_log_uniform_sites", {})
        if name not in known:
            known[name] = isinstance(placeholder_prior(self.prototype_trace.nodes[name]["fn"]), LogUniformImproper)
        return known[name]

    # -- inspection and pruning ---------------------------------------------------------------
    @torch.no_grad()
    def log_alpha(self, name: str) -> torch.Tensor:
        """The clipped ``log alpha`` of site ``name``, broadcast to the site's shape."""
        theta, log_alpha, log_var = self._parameters_of(name)
        return log_alpha.expand(log_var.shape).clone()

    @torch.no_grad()
    def means(self, masked: bool = False, threshold: Optional[float] = None) -> Dict[str, torch.Tensor]:
        """Posterior means ``theta`` of every site (0 for zero-mean layers); with ``masked``,
        those with ``log alpha >= threshold`` set to zero (the pruned mean network)."""
        masks = self.keep_masks(threshold) if masked else {}
        out = {}
        for name in self.sites():
            theta, _, log_var = self._parameters_of(name)
            mean = torch.zeros_like(log_var) if theta is None else theta.detach().clone()
            if name in masks:
                mean = mean * masks[name]
            out[name] = mean
        return out

    @torch.no_grad()
    def keep_masks(self, threshold: Optional[float] = None) -> Dict[str, torch.Tensor]:
        """``{site: log alpha < threshold}`` (True = kept); Molchanov et al. prune at 3."""
        t = self.threshold if threshold is None else check_real(type(self).__name__, "threshold", threshold)
        return {name: self.log_alpha(name) < t for name in self.sites()}

    def mean_network(self, net: Optional[nn.Module] = None, masked: bool = False, threshold: Optional[float] = None) -> nn.Module:
        """A deterministic copy of the model's network (``model.net`` unless ``net`` is given)
        with the random parameters replaced by their posterior means: mean propagation, or,
        with ``masked``, the pruned network of Sparse VD (the means of pruned weights are
        zero; :func:`pyrozoo.compression.to_sparse` then stores only the kept ones)."""
        net = net if net is not None else self.model.net
        means = self.means(masked=masked, threshold=threshold)
        return with_parameters(net, means)


class SparseVariationalDropoutGuide(VariationalDropoutGuide):
    """Sparse variational dropout (Molchanov, Ashukha & Vetrov 2017): the additive
    parameterisation with ``log sigma^2`` initialised to -10, ``log alpha`` clipped to
    [-8, 8], the train-time clip mask and pruning at ``log alpha > 3`` (the settings of the
    authors' LeNet scripts). See :class:`VariationalDropoutGuide` for the arguments."""

    def __init__(self, model, *, init_log_sigma2: float = -10.0, log_alpha_bounds=(-8.0, 8.0), train_clip: bool = True, threshold: float = 3.0, **kwargs):
        if "parameterization" in kwargs and kwargs["parameterization"] != "additive":
            raise ValueError("SparseVariationalDropoutGuide uses the additive parameterization; use VariationalDropoutGuide for others")
        kwargs.pop("parameterization", None)
        super().__init__(model, parameterization="additive", init_log_sigma2=init_log_sigma2, log_alpha_bounds=log_alpha_bounds, train_clip=train_clip, threshold=threshold, **kwargs)
