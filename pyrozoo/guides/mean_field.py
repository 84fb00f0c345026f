"""The mean-field Normal guide."""

import math
from typing import Callable, Optional

import torch
from torch import nn

from pyrozoo.guides.base import normal_on_support, SitewiseGuide
from pyrozoo.guides.arguments import check_real
from pyrozoo.guides.initialization import init_to_network


class MeanFieldNormalGuide(SitewiseGuide):
    r"""Fully factorised Gaussian posterior over every latent site of a model.

    Each site gets ``q(z) = N(loc, scale^2)`` in unconstrained space, pushed to the site's
    support (real sites: ``Normal``, so closed-form KLs and the local-reparameterization /
    flipout handlers apply; positive sites: ``LogNormal``). The scale is stored as its log;
    with ``max_scale`` it is clipped from above, which keeps early training from drowning
    the signal in weight noise (Graves 2011; Blundell et al. 2015).

    Sites on the unit sphere (the directions of
    :class:`~pyrozoo.models.RadialDirectionalPrior`) are refused when the guide is set up,
    naming :class:`~pyrozoo.guides.RadialDirectionalGuide`: no bijection maps the sphere to
    R^d, and a Normal projected onto it has no density to score against the prior: Pyro's
    ``ProjectedNormal`` (unit covariance) has one for dimensions 2 to 4 only, a mean-field
    (diagonal) one none in closed form, while a direction has a layer's fan-in as its
    dimension. Against the log-uniform prior of :class:`~pyrozoo.models.LogUniformPrior`,
    ``N(loc, scale^2)`` is Sparse VD's additive parameterisation and the registered KL applies
    (``log alpha = 2 log scale - log loc^2``).

    :param model: the Pyro model.
    :param init_loc_fn: ``site -> initial value``; by default the network's own parameter
        values (so the guide starts at the network's initialisation) or the prior median.
    :param float init_scale: initial posterior standard deviation (unconstrained space).
    :param float max_scale: optional upper bound on the posterior standard deviation.
    :param hide: names of latent sites this guide leaves alone.

    Example::

        model = BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(dataset_size=60000))
        guide = MeanFieldNormalGuide(model, init_scale=1e-3)
        svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), ClosedFormKL_ELBO())
    """

    def __init__(
        self,
        model,
        *,
        init_loc_fn: Callable = init_to_network,
        init_scale: float = 1e-3,
        max_scale: Optional[float] = None,
        hide=(),
        create_plates=None,
    ):
        owner = type(self).__name__
        init_scale = check_real(owner, "init_scale", init_scale, positive=True)
        if max_scale is not None:
            max_scale = check_real(owner, "max_scale", max_scale, positive=True)
            if init_scale > max_scale:
                raise ValueError(f"{owner}: init_scale={init_scale} exceeds max_scale={max_scale}")
        super().__init__(model, init_loc_fn=init_loc_fn, hide=hide, create_plates=create_plates)
        self.init_scale = init_scale
        self.max_scale = max_scale
        self.locs = nn.ParameterDict()
        self.log_scales = nn.ParameterDict()

    def _init_site(self, info, unconstrained_init):
        self.locs[info.key] = nn.Parameter(unconstrained_init)
        self.log_scales[info.key] = nn.Parameter(torch.full_like(unconstrained_init, math.log(self.init_scale)))

    def loc_and_log_scale(self, name: str, plates=None):
        """Unconstrained location and log standard deviation of site ``name`` (differentiable)."""
        info = self._sites[name]
        # _modules lookups skip PyroModule.__getattr__, which would re-register every
        # parameter with the param store per site; forward() registers them once per call.
        loc = self._modules["locs"][info.key]
        log_scale = self._modules["log_scales"][info.key]
        if self.max_scale is not None:
            log_scale = log_scale.clamp(max=math.log(self.max_scale))
        if plates is not None and info.plate_dims:
            loc = self._subsample(info, loc, plates)
            log_scale = self._subsample(info, log_scale, plates)
        return loc, log_scale

    def forward(self, *args, **kwargs):
        if self.prototype_trace is not None:
            self.locs, self.log_scales  # registers all parameters with Pyro's param store, once
        return super().forward(*args, **kwargs)

    def posterior(self, name, plates=None):
        loc, log_scale = self.loc_and_log_scale(name, plates)
        return normal_on_support(loc, log_scale, self._sites[name])

    @torch.no_grad()
    def median(self, *args, **kwargs):
        """Posterior median of every site (constrained), e.g. for deterministic evaluation."""
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        return {name: info.transform(self.locs[info.key]).detach() for name, info in self._sites.items()}
