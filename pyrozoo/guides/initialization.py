"""Where a guide's parameters and a sampler's chain start: the network's own values where the
model gave them, else an initialisation that works for priors which cannot be sampled (as
Pyro's ``pyro.infer.autoguide.initialization`` strategies do for the others)."""

from typing import Callable

import pyro.distributions as dist
import torch
from pyro.distributions.transforms import biject_to
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median

from pyrozoo.distributions import ARDNormal, LogUniformImproper, SSGLExpectedLogDensity
from pyrozoo.distributions.util import innermost
from pyrozoo.models.priors import INIT_VALUE_KEY


#: distributions with a log-density but no ``sample``: improper priors and unnormalised
#: log-densities (the EM expectation of the spike-and-slab prior)
UNSAMPLEABLE = (LogUniformImproper, ARDNormal, SSGLExpectedLogDensity, dist.ImproperUniform)

#: half-width of the box in unconstrained space where an unsampleable site without a network
#: value starts (Pyro's ``init_to_uniform`` uses the same radius)
UNSAMPLEABLE_INIT_RADIUS = 2.0


def cannot_be_sampled(fn) -> bool:
    """Whether the distribution ``fn`` (under any ``Independent``/``Expanded``/``Masked``
    wrappers) is one of :data:`UNSAMPLEABLE`, decided without drawing (so the random streams
    stay as they were)."""
    return isinstance(innermost(fn), UNSAMPLEABLE)


#: sd of the start of the sparse weights of SG-MCMC-SA (a site drawn from the SSGL expectation
#: with no network value): the authors' R code draws beta ~ N(0, 0.1^2) per coordinate
#: (shared/notes/sgmcmc-sa.md). A start of order one puts p >> n weights' residual into sigma:
#: at n = 100, p = 200 a uniform (-2, 2) start sent sigma to 7 and every inclusion probability
#: to 0 (the spike-only fixed point) on every seed, where this start selects the signals.
SSGL_INIT_SCALE = 0.1


def _init_sparse_weights(site: dict) -> torch.Tensor:
    fn = site["fn"]
    sigma = innermost(fn).sigma  # the prior's state: its dtype and device
    return SSGL_INIT_SCALE * torch.randn(fn.batch_shape + fn.event_shape, dtype=sigma.dtype, device=sigma.device)


def _init_uniform_unconstrained(site: dict) -> torch.Tensor:
    # A prior that cannot be sampled has no median to start from; like Pyro's init_to_uniform,
    # start uniformly in (-2, 2) on the unconstrained scale (away from the log-uniform's pole at 0
    # with probability 1). The shape comes from the distribution, as drawing is not possible.
    fn = site["fn"]
    transform = biject_to(fn.support)
    shape = fn.batch_shape + fn.event_shape
    like = site["infer"].get(INIT_VALUE_KEY)
    dtype = torch.get_default_dtype() if like is None else like.dtype
    unconstrained_shape = transform.inverse_shape(shape)
    u = (torch.rand(unconstrained_shape, dtype=dtype) * 2 - 1) * UNSAMPLEABLE_INIT_RADIUS
    return transform(u)


def init_to_network(site: dict, fallback: Callable = init_to_median) -> torch.Tensor:
    """Initial value of a site: the network's own parameter value where the model gave one
    (``site["infer"]["pyrozoo_init_value"]``, set by :class:`~pyrozoo.models.priors.Prior`),
    else ``fallback(site)`` (the prior median by default); for a site whose prior cannot be
    sampled (:func:`cannot_be_sampled`, e.g. a log-uniform weight of a plain Pyro model) a
    uniform draw in ``(-2, 2)`` on the unconstrained scale instead, as it has no median; for
    the sparse weights of SG-MCMC-SA (the SSGL expectation) a draw from
    ``N(0, SSGL_INIT_SCALE^2)`` (see :data:`SSGL_INIT_SCALE`)."""
    value = site["infer"].get(INIT_VALUE_KEY)
    if value is not None:
        return value.detach().clone()
    if isinstance(innermost(site["fn"]), SSGLExpectedLogDensity):
        return _init_sparse_weights(site)
    if cannot_be_sampled(site["fn"]):
        return _init_uniform_unconstrained(site)
    return fallback(site)


class _InitUnsampleable(InitMessenger):
    """``InitMessenger`` for the sites whose prior cannot be sampled only: every other site is
    drawn as without it, so a model with proper priors consumes the same random numbers."""

    def _pyro_sample(self, msg):
        if msg["value"] is None and cannot_be_sampled(msg["fn"]):
            super()._pyro_sample(msg)


__all__ = ["UNSAMPLEABLE", "UNSAMPLEABLE_INIT_RADIUS", "SSGL_INIT_SCALE", "cannot_be_sampled", "init_to_network"]
