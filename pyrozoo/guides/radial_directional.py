r"""The radial-directional posterior (RDP) of Oh, Adamczewski & Park (2020).

:class:`RadialDirectionalGuide` is the variational family of eqs. 9–10 (and 16–17 for double
grouping) for a model whose latent sites are positive (radial factors), real (biases and
ungrouped weights) or on the unit sphere (directions):

* **radial factors** (Gamma and inverse-Gamma sites of the half-Cauchy radii): log-normal
  posteriors, ``LogNormal(mu, sigma^2)`` (eq. 9), whose KLs to Gamma and inverse-Gamma
  priors are closed-form (registered in :mod:`pyrozoo.distributions.kl`);
* **directions** (sites on a sphere, e.g. :class:`~pyrozoo.distributions.VonMisesFisher` or
  uniform priors): ``vMF(loc_g, kappa)`` for every group ``g`` of a site, with **one
  concentration per site**, i.e. shared by all rows (or columns) of a layer (eqs. 5–6; "the
  concentration parameter is shared across all the rows in each layer"). The location is
  stored unnormalised and normalised on every call, so it stays on the sphere without a
  projection step after each update;
* **prior mean directions** (sphere sites named in a direction site's
  ``infer["pyrozoo_location_site"]``, see :mod:`pyrozoo.models.radial_directional`): a point
  mass at the posterior's own (normalised) location, so ``KL(q(u) || p(u | mu))`` is RDP's
  same-mean vMF KL;
* **real sites**: mean-field Normals (:class:`~pyrozoo.distributions.LogScaleNormal`).

All parameters start at the network's own weights (through the prior's initial values), the
concentrations at the value whose expected cosine to the mean is ``1 - init_direction_epsilon``.
"""

import math
from typing import Callable, Dict, Optional

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.poutine.util import site_is_subsample
from torch import nn

from pyrozoo.distributions import VonMisesFisher
from pyrozoo.distributions.von_mises_fisher import vmf_concentration
from pyrozoo.guides.base import _base_constraint, param_key
from pyrozoo.guides.arguments import check_bool, check_real
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.guides.mean_field import MeanFieldNormalGuide
from pyrozoo.models.radial_directional import LOCATION_SITE_KEY


def _is_sphere(fn) -> bool:
    return _base_constraint(fn.support) is constraints.sphere


class RadialDirectionalGuide(MeanFieldNormalGuide):
    r"""Log-normal radii, von Mises–Fisher directions with a shared concentration per site, and
    mean-field Normals elsewhere (see the module docstring).

    :param model: a Pyro model, typically a :class:`~pyrozoo.models.BayesianNeuralNetwork` with
        a :class:`~pyrozoo.models.RadialDirectionalPrior`.
    :param float init_scale: initial standard deviation of the log-normal and Normal posteriors
        (in log space for the log-normals).
    :param float init_direction_epsilon: initial concentrations :math:`\kappa` such that
        :math:`A_d(\kappa) = 1 - \epsilon` (RDP's code starts at 0.005–0.1).
    :param bool gradient_correction: include the rejection-sampling correction of the
        concentration gradient (see :class:`~pyrozoo.distributions.VonMisesFisher`).
    :param float max_scale: optional upper bound of the Normal / log-normal standard deviations.
    :param hide: names of latent sites this guide leaves alone.
    """

    def __init__(
        self,
        model,
        *,
        init_scale: float = 1e-3,
        init_direction_epsilon: float = 0.05,
        gradient_correction: bool = True,
        max_scale: Optional[float] = None,
        init_loc_fn: Callable = init_to_network,
        hide=(),
        create_plates=None,
    ):
        owner = type(self).__name__
        init_direction_epsilon = check_real(owner, "init_direction_epsilon", init_direction_epsilon, low=0.0, high=1.0)
        gradient_correction = check_bool(owner, "gradient_correction", gradient_correction)
        super().__init__(model, init_loc_fn=init_loc_fn, init_scale=init_scale, max_scale=max_scale, hide=hide, create_plates=create_plates)
        self.init_direction_epsilon = init_direction_epsilon
        self.gradient_correction = gradient_correction
        self.direction_locs = nn.ParameterDict()
        self.log_concentrations = nn.ParameterDict()
        #: direction sites, in model order: {site name: event_dim}
        self._directions: Dict[str, int] = {}
        #: prior mean-direction sites -> the direction site whose location they share
        self._tied: Dict[str, str] = {}
        self._order = []

    # -- construction -------------------------------------------------------------------------
    #: the radial-directional factorisation is of global weights
    global_sites_only = True

    def _setup_prototype(self, *args, **kwargs):
        # Sphere-valued sites have no bijection from R^n, which the site-wise base class needs;
        # they are hidden from it and given vMF / point-mass posteriors here.
        trace = poutine.block(poutine.trace(self.model).get_trace)(*args, **kwargs)
        spheres = {
            name
            for name, site in trace.iter_stochastic_nodes()
            if not site_is_subsample(site) and _is_sphere(site["fn"]) and name not in self._hide
        }
        user_hide = self._hide
        self._hide = user_hide | spheres
        try:
            super()._setup_prototype(*args, **kwargs)
        finally:
            self._hide = user_hide
        self._directions, self._tied, self._order = {}, {}, []
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if name in user_hide or site_is_subsample(site):
                continue
            self._order.append(name)
            location_site = site["infer"].get(LOCATION_SITE_KEY)
            if location_site is not None:
                if location_site not in spheres:
                    raise ValueError(f"site {name!r} names {location_site!r} as its mean direction, which is not a sphere-valued site")
                self._tied[location_site] = name
        plated = [name for name, info in self._sites.items() if info.plate_dims]
        plated += [name for name in spheres if any(f.vectorized for f in self.prototype_trace.nodes[name]["cond_indep_stack"])]
        if plated:
            raise ValueError(
                f"RadialDirectionalGuide cannot cover {sorted(plated)}: they lie inside a plate, and its posteriors are for global "
                f"sites; a von Mises-Fisher site in a plate has no zoo guide, and real or positive ones go under MeanFieldNormalGuide: "
                f"CompositeGuide(model, RadialDirectionalGuide, rest=MeanFieldNormalGuide) (pyrozoo.guides)")
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if name in spheres and name not in self._tied:
                self._init_direction(name, site)

    def _init_direction(self, name, site):
        fn = site["fn"]
        init = torch.as_tensor(self.init_loc_fn(site)).to(site["value"])
        if init.shape != site["value"].shape:
            init = init.expand(site["value"].shape)
        if init.dim() < 1 or init.shape[-1] < 2:
            raise ValueError(f"direction site {name!r} has shape {tuple(init.shape)}; expected (..., d) with d >= 2")
        key = param_key(name)
        dim = init.shape[-1]
        kappa0 = vmf_concentration(dim, 1.0 - self.init_direction_epsilon, dtype=torch.float64)
        self.direction_locs[key] = nn.Parameter((init / torch.linalg.vector_norm(init, dim=-1, keepdim=True)).detach().clone())
        self.log_concentrations[key] = nn.Parameter(torch.log(kappa0).to(dtype=init.dtype, device=init.device))
        self._directions[name] = fn.event_dim

    # -- per call ------------------------------------------------------------------------------
    def direction_parameters(self, name: str):
        """``(normalised location (..., d), concentration)`` of direction site ``name`` (differentiable)."""
        key = param_key(name)
        loc = self._modules["direction_locs"][key]
        return loc / torch.linalg.vector_norm(loc, dim=-1, keepdim=True), self._modules["log_concentrations"][key].exp()

    def posterior(self, name, plates=None):
        if name in self._directions:
            loc, kappa = self.direction_parameters(name)
            return VonMisesFisher(loc, kappa, gradient_correction=self.gradient_correction).to_event(self._directions[name] - 1)
        if name in self._tied:
            child = self._tied[name]
            loc, _ = self.direction_parameters(child)
            return dist.Delta(loc, event_dim=self._directions[child])
        return super().posterior(name, plates)

    def direct_sites(self, model):
        """``None``: :meth:`forward` samples the direction sites too, which the site-wise base
        class does not cover, so objectives run this guide rather than draw from :meth:`posterior`."""
        return None

    def forward(self, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        # registers all parameters with Pyro's param store, once per call
        self.locs, self.log_scales, self.direction_locs, self.log_concentrations
        return {name: pyro.sample(name, self.posterior(name)) for name in self._order}

    # -- summaries -----------------------------------------------------------------------------
    @torch.no_grad()
    def median(self, *args, **kwargs):
        """Posterior medians of the radial and real sites, and the mean directions (the vMF's mode)."""
        out = super().median(*args, **kwargs)
        for name in self._directions:
            out[name] = self.direction_parameters(name)[0].detach()
        for name, child in self._tied.items():
            out[name] = out[child]
        return out

    @torch.no_grad()
    def log_normal_parameters(self, name: str):
        """``(mu, sigma)`` of the log-normal posterior of a positive site."""
        info = self._sites[name]
        log_scale = self.log_scales[info.key]
        if self.max_scale is not None:
            log_scale = log_scale.clamp(max=math.log(self.max_scale))
        return self.locs[info.key].detach(), log_scale.exp().detach()

    @property
    def direction_sites(self):
        return list(self._directions)
