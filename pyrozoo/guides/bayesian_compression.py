"""The guide of Bayesian compression: group-scale posteriors and non-centred weight posteriors."""

from typing import Callable, Dict, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.noncentred_normal import SCALE_FLOOR, NoncentredNormal
from pyrozoo.guides.base import SitewiseGuide
from pyrozoo.guides.arguments import check_bounds, check_real
from pyrozoo.guides.initialization import init_to_network


class BayesianCompressionGuide(SitewiseGuide):
    r"""Posterior of a :class:`~pyrozoo.models.compression_priors.GroupScalePrior` model
    (Louizos, Ullrich & Welling 2017, sec. 3-4).

    * **Group scales.** Real scale sites (BC-GNJ's ``z``) get ``q(z_g) = N(mu_g, sigma_g^2)``, a
      :class:`~pyrozoo.distributions.DropoutNormal` with ``log alpha_g = log sigma_g^2 - log
      mu_g^2`` (not clipped unless ``log_alpha_bounds`` is given), so the log-uniform KL applies
      (eq. 13).
      Positive scale sites (BC-GHS's Gamma and inverse-Gamma factors) get log-normal
      posteriors (eq. 11), with the closed-form KLs registered for LogNormal||Gamma and
      LogNormal||InverseGamma.
    * **Weights, non-centred.** ``w = z * w~`` with ``q(w~) = N(mu~, sigma~^2)``, i.e. the weight
      site is ``q(w | z) = N(z mu~, z^2 sigma~^2)`` given the sampled group scale. Its KL to
      the prior ``N(0, z^2)`` equals ``KL(N(mu~, sigma~^2) || N(0, 1))`` for every ``z``, and
      the weight site is Normal, so local reparameterization applies. The group scales are
      sampled once per model call, so under local reparameterization a minibatch shares one
      draw of ``z`` while the weight noise given ``z`` is per example; the authors' layers draw
      ``z`` per example as well (their ``LinearGroupNJ``), which removes the covariance of the
      minibatch gradient that the shared ``z`` leaves in. Same expectation, more variance.

    :param model: a BayesianNeuralNetwork whose prior is a GroupScalePrior.
    :param float init_log_sigma2: initial log-variance of the weights ``w~`` and of BC-GNJ's ``z``
        (the authors' code: -9).
    :param float init_log_scale: initial log standard deviation of the log-normal scale posteriors.
    :param log_alpha_bounds: optional clip range of BC-GNJ's group ``log alpha``; by default it is
        not clipped, as in the authors' code (``get_log_dropout_rates``: ``z_logvar - log(z_mu^2 +
        1e-8)``). A clip must contain the initial ``log alpha = init_log_sigma2 - log z0^2``
        (``z0 = 1``): below the lower bound the clipped KL is constant, its gradient zero, and the
        KL never pulls ``log alpha`` up — with Sparse VD's ``(-8, 8)`` and the authors' -9 the
        group scales stayed at their initial value and nothing was pruned.
    """

    def __init__(
        self,
        model,
        *,
        init_log_sigma2: float = -9.0,
        init_log_scale: float = -3.0,
        log_alpha_bounds: Optional[Tuple[float, float]] = None,
        init_loc_fn: Callable = init_to_network,
        create_plates=None,
    ):
        owner = type(self).__name__
        init_log_sigma2 = check_real(owner, "init_log_sigma2", init_log_sigma2)
        init_log_scale = check_real(owner, "init_log_scale", init_log_scale)
        if log_alpha_bounds is not None:
            log_alpha_bounds = check_bounds(owner, "log_alpha_bounds", log_alpha_bounds)
        prior = getattr(model, "prior", None)
        if not hasattr(prior, "scale_factors"):
            raise TypeError("BayesianCompressionGuide needs a model whose prior is a GroupScalePrior (BC-GNJ or BC-GHS)")
        super().__init__(model, init_loc_fn=init_loc_fn, create_plates=create_plates)
        self.init_log_sigma2 = float(init_log_sigma2)
        self.init_log_scale = float(init_log_scale)
        self.log_alpha_bounds = log_alpha_bounds
        self.locs = nn.ParameterDict()
        self.log_sigma2 = nn.ParameterDict()
        self.log_scales = nn.ParameterDict()
        self._weight_of_scale: Dict[str, str] = {}
        self._values: Dict[str, torch.Tensor] = {}

    #: weight posteriors as :class:`~pyrozoo.distributions.noncentred_normal.NoncentredNormal`,
    #: whose KL to the prior ``N(0, z^2)`` is summed per group; ``False`` gives the reference
    #: computation they are tested and timed against (a ``LogScaleNormal`` and the registered
    #: elementwise Normal KL): the same numbers to rounding, at a higher cost per step on a CPU.
    #: On CUDA the reference is used either way: there kernel launches, not memory traffic, set
    #: the cost, and the fused node's extra launches made the step slower (H200, LeNet-300-100,
    #: batch 100: BC-GNJ 9.2 against 8.0 ms, BC-GHS 16.7 against 16.0 ms; benchmarks/step_overhead.py)
    fused = True

    @property
    def prior(self):
        return self.model.prior

    # -- construction -------------------------------------------------------------------
    def _setup_prototype(self, *args, **kwargs):
        # the log-uniform scale prior cannot be sampled: trace the model at the initial values
        with self._model_at_init_values():
            super()._setup_prototype(*args, **kwargs)
        grouped = self.prior.grouped_weights
        self.weight_names = [name for name in self._sites if name in grouped]
        for weight in self.weight_names:
            for site, _ in self.prior.scale_factors(weight):
                self._weight_of_scale[site] = weight
        if self.log_alpha_bounds is not None:
            low, high = self.log_alpha_bounds
            for site in self._weight_of_scale:
                if self._sites[site].family == "real":
                    log_alpha = self.init_log_sigma2 - (self.locs[self._sites[site].key].detach() ** 2 + SCALE_FLOOR).log()
                    if not bool(((log_alpha > low) & (log_alpha < high)).all()):
                        raise ValueError(
                            f"the initial log alpha of {site!r} (in [{float(log_alpha.min()):.3g}, {float(log_alpha.max()):.3g}]) lies outside "
                            f"log_alpha_bounds ({low}, {high}): the clipped KL would have no gradient there"
                        )
        missing = [name for name in self._sites if name not in self._weight_of_scale and name not in self.weight_names]
        if missing:
            raise ValueError(f"sites {missing} are neither group scales nor weights of the GroupScalePrior")

    #: Bayesian compression's scales and weights are global
    global_sites_only = True

    def _init_site(self, info, unconstrained_init):
        key = info.key
        if info.family == "positive":
            self.locs[key] = nn.Parameter(unconstrained_init)
            self.log_scales[key] = nn.Parameter(torch.full_like(unconstrained_init, self.init_log_scale))
        elif info.family == "real":
            self.locs[key] = nn.Parameter(unconstrained_init)
            self.log_sigma2[key] = nn.Parameter(torch.full_like(unconstrained_init, self.init_log_sigma2))
        else:
            raise ValueError(f"site {info.name!r} has support {info.support}; expected real or positive")

    def _init_weights_noncentred(self):
        """Divides the weights' initial means by the initial group scale (w~ = w / z)."""
        with torch.no_grad():
            init_values = {name: self._init_value(name) for name in self._sites}
            for weight in self.weight_names:
                scale = self.prior.weight_scale(weight, init_values)
                key = self._sites[weight].key
                self.locs[key].div_(scale.abs().clamp_min(SCALE_FLOOR))

    def _init_value(self, name):
        info = self._sites[name]
        if info.family == "positive":
            return self.locs[info.key].exp()
        return self.locs[info.key]

    def forward(self, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
            self._init_weights_noncentred()
        self.locs, self.log_sigma2, self.log_scales  # registers all parameters with Pyro's param store, once
        values = {}
        for name in self._sites:
            values[name] = pyro.sample(name, self._posterior(name, values))
        self._values = values
        return values

    # -- distributions --------------------------------------------------------------------
    def _scale_posterior(self, name):
        info = self._sites[name]
        key = info.key
        loc = self._modules["locs"][key]
        if info.family == "positive":
            return dist.LogNormal(loc, self._modules["log_scales"][key].exp()).to_event(info.event_dim)
        log_sigma2 = self._modules["log_sigma2"][key]
        log_alpha = log_sigma2 - (loc * loc + SCALE_FLOOR).log()
        if self.log_alpha_bounds is not None:
            log_alpha = log_alpha.clamp(*self.log_alpha_bounds)
        return DropoutNormal(loc, 0.5 * log_sigma2, log_alpha).to_event(info.event_dim)

    def _weight_posterior(self, name, values):
        info = self._sites[name]
        key = info.key
        scale = self.prior.weight_scale(name, values)
        mu, log_sigma2 = self._modules["locs"][key], self._modules["log_sigma2"][key]
        if self.fused and not mu.is_cuda:
            return NoncentredNormal(scale, mu, log_sigma2, with_kl=torch.is_grad_enabled()).to_event(info.event_dim)
        return LogScaleNormal(scale * mu, scale.abs().clamp_min(SCALE_FLOOR).log() + 0.5 * log_sigma2).to_event(info.event_dim)

    def _posterior(self, name, values):
        if name in self._weight_of_scale:
            return self._scale_posterior(name)
        return self._weight_posterior(name, values)

    def posterior(self, name, plates=None):
        """The posterior of a scale site, or of a weight site given the scales that
        :meth:`forward` drew last."""
        return self._posterior(name, self._values)

    def conditional_posterior(self, name, values):
        """The posterior of a scale site, or of a weight site given its scales in ``values``:
        with :meth:`direct_sites` (inherited) this lets an objective draw the sites in order
        without running :meth:`forward` (:mod:`pyrozoo.inference.direct`)."""
        return self._posterior(name, values)

    # -- summaries --------------------------------------------------------------------------------
    @torch.no_grad()
    def group_scale_moments(self, weight: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(E[z_g], Var[z_g])`` per group of ``weight`` under the posterior (for BC-GHS, ``z`` is
        a product of powers of log-normals, hence log-normal: ``log z ~ N(sum p_i m_i, sum p_i^2 s_i^2)``)."""
        factors = self.prior.scale_factors(weight)
        infos = [self._sites[site] for site, _ in factors]
        if all(info.family == "positive" for info in infos):
            m = v = 0.0
            for (site, power), info in zip(factors, infos):
                m = m + power * self.locs[info.key]
                v = v + power**2 * (2 * self.log_scales[info.key]).exp()
            m, v = torch.as_tensor(m), torch.as_tensor(v)
            mean = (m + 0.5 * v).exp()
            var = torch.expm1(v) * (2 * m + v).exp()
        elif len(factors) == 1 and factors[0][1] == 1.0:
            info = infos[0]
            mean = self.locs[info.key].clone()
            var = self.log_sigma2[info.key].exp()
        else:
            raise NotImplementedError("moments of a mixed product of real and positive scale factors")
        G = self.prior.num_groups(weight)
        return mean.expand(G).clone(), var.expand(G).clone()

    @torch.no_grad()
    def group_log_alpha(self, weight: str) -> torch.Tensor:
        """``log(Var[z_g] / E[z_g]^2)`` per group: the log dropout rate of BC-GNJ's ``q(z)``
        (eq. 13) and, for BC-GHS's log-normal ``z``, ``log(exp(sigma_z^2) - 1)``."""
        mean, var = self.group_scale_moments(weight)
        return var.log() - (mean * mean).clamp_min(torch.finfo(mean.dtype).tiny).log()

    @torch.no_grad()
    def weight_moments(self, weight: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Marginal posterior mean and variance of every weight: ``E w = E z mu~`` and
        ``Var w = E[z]^2 s~^2 + Var[z] mu~^2 + Var[z] s~^2`` (``z`` and ``w~`` independent)."""
        key = self._sites[weight].key
        mu, s2 = self.locs[key], self.log_sigma2[key].exp()
        ez, vz = self.group_scale_moments(weight)
        shape = self.prior.group_shape(weight)
        ez, vz = ez.reshape(shape), vz.reshape(shape)
        return ez * mu, ez * ez * s2 + vz * mu * mu + vz * s2
