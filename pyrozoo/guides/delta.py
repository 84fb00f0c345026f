"""The Delta (MAP) guide."""

from typing import Callable

import pyro.distributions as dist
from torch import nn

from pyrozoo.guides.base import SitewiseGuide
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.models.improper import check_point_estimate


class DeltaGuide(SitewiseGuide):
    """Point-mass posterior at a learned value per latent site: with an ELBO this is MAP.

    With :class:`~pyrozoo.inference.ClosedFormKL_ELBO` (or Pyro's ``Trace_ELBO``) the loss
    is ``-log p(D | w) - log p(w)`` at the point ``w``, optimised in the site's
    unconstrained space and mapped back to its support.

    Priors under which MAP does not exist are refused when the guide is set up (its first
    call), with the guide to use instead: the log-uniform prior of
    :class:`~pyrozoo.models.LogUniformPrior` and of
    :class:`~pyrozoo.models.GroupNormalJeffreysPrior`'s group scales, and the ARD prior
    (:func:`~pyrozoo.models.improper.check_point_estimate`).
    """

    def __init__(self, model, *, init_loc_fn: Callable = init_to_network, hide=(), create_plates=None):
        super().__init__(model, init_loc_fn=init_loc_fn, hide=hide, create_plates=create_plates)
        self.locs = nn.ParameterDict()

    def _check_site(self, name, fn):
        check_point_estimate(type(self).__name__, name, fn)

    def _init_site(self, info, unconstrained_init):
        self.locs[info.key] = nn.Parameter(unconstrained_init)

    def forward(self, *args, **kwargs):
        if self.prototype_trace is not None:
            self.locs  # registers all parameters with Pyro's param store, once per call
        return super().forward(*args, **kwargs)

    def posterior(self, name, plates=None):
        info = self._sites[name]
        loc = self._modules["locs"][info.key]
        if plates is not None and info.plate_dims:
            loc = self._subsample(info, loc, plates)
        return dist.Delta(info.transform(loc), event_dim=info.event_dim)

    def median(self, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        return {name: info.transform(self.locs[info.key]).detach() for name, info in self._sites.items()}
