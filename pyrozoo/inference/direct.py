"""Direct evaluation: how a model and a guide declare that an objective may evaluate them
without Pyro traces.

An objective normally runs the guide and the model under Pyro's effect handlers and reads
the densities off their traces. For a model that can list its latent sites and evaluate its
likelihood given their values, and a guide whose sites are independent draws from
per-site posteriors, the same estimator is a handful of method calls, without running the
effect stack once per site (the speed-up is largest for small networks). The model and
the guide declare this by implementing the protocols below; objectives use nothing else
about them (no class checks, no internals), and any model or guide that does not implement
them, or whose methods answer ``None``, takes the trace-based path.

* :class:`DirectModel` (implemented by :class:`~pyrozoo.models.BayesianNeuralNetwork`):
  ``split_args``, ``latent_sites`` and ``log_likelihood``; :class:`DirectParticlesModel`
  adds ``log_likelihood_particles`` and ``dataset_size`` for the importance-weighted
  objectives, which evaluate ``K`` particles at once.
* :class:`DirectGuide` (implemented by :class:`~pyrozoo.guides.SitewiseGuide`):
  ``direct_sites(model)`` and ``posterior(name)``; :class:`ConditionalDirectGuide` (implemented
  by :class:`~pyrozoo.guides.BayesianCompressionGuide`) whose sites depend on the values drawn
  before them, ``conditional_posterior(name, values)`` instead.

Sites are drawn in the model's order. A model's prior of a site may be a function of the
values drawn before it (a weight's ``N(0, z^2)`` given its group scale ``z``), and so may a
guide's posterior: an objective that can evaluate such sites one at a time in order (the
closed-form-KL ELBO) reads them with :func:`prior_given` and :func:`posterior_given`; one
that needs independent sites (the ``K``-particle bounds) checks :func:`independent_sites` and
otherwise takes the trace-based path.

Which effect handlers are active around the call is the other half of the decision (a
direct evaluation bypasses them); :func:`pyrozoo.poutine.stack.active_handlers` answers it.
"""

from typing import Callable, Collection, Dict, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import torch
from torch.distributions import Distribution

#: ``(x, y, subsample)``: the inputs, observed targets and subsample indices of a call
DirectArguments = Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]

#: a prior given the values of the sites drawn before it, keyed by site name
ConditionalPrior = Callable[[Dict[str, torch.Tensor]], Distribution]


@runtime_checkable
class DirectModel(Protocol):
    """A model whose call an objective may evaluate without Pyro traces."""

    def split_args(self, *args, **kwargs) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
        """``(x, y, subsample)`` from the arguments a call of the model takes (``y`` is
        ``None`` when nothing is observed); a ``TypeError`` when they do not fit."""

    def latent_sites(self, x: torch.Tensor) -> Optional[Sequence[Tuple[str, Union[Distribution, ConditionalPrior]]]]:
        """``[(site name, prior)]`` of every latent site a call at inputs ``x`` samples, in
        the order it samples them, each prior a distribution or a function of the values of
        the sites before it (``{name: value} -> distribution``), or ``None`` when the model
        cannot list them so (the trace-based path then applies)."""

    def log_likelihood(self, values: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, subsample: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The scaled log-likelihood (a 0-d tensor) of ``y`` given a value for every latent
        site (keyed by site name): what the observed sites of a trace would sum to."""


@runtime_checkable
class DirectParticlesModel(DirectModel, Protocol):
    """A :class:`DirectModel` that also evaluates ``K`` particles at once."""

    #: the number of examples in the full data set (``None``: every call sees all of it)
    dataset_size: Optional[int]

    def log_likelihood_particles(self, values: Dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, subsample: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(K,)`` scaled log-likelihoods, one per particle, of values with a leading particle dim."""


@runtime_checkable
class DirectGuide(Protocol):
    """A guide whose sites an objective may draw without Pyro traces."""

    def direct_sites(self, model) -> Optional[Collection[str]]:
        """The names of the latent sites this guide samples when it is a guide of ``model``,
        each a draw from :meth:`posterior` with no effect but the draw (no plates), or ``None``
        when that does not hold (not a set-up guide of this very model, plated sites)."""

    def posterior(self, name: str) -> Distribution:
        """The guide's distribution of site ``name``."""


@runtime_checkable
class ConditionalDirectGuide(DirectGuide, Protocol):
    """A :class:`DirectGuide` whose posteriors depend on the values of the sites drawn
    before them in the same call."""

    def conditional_posterior(self, name: str, values: Dict[str, torch.Tensor]) -> Distribution:
        """The guide's distribution of site ``name`` given ``values`` of the sites before it."""


_MODEL_METHODS = ("latent_sites", "log_likelihood")


def _has_methods(obj, names) -> bool:
    # getattr rather than isinstance(obj, <runtime-checkable Protocol>): the check runs on
    # every step, and a protocol check costs microseconds
    return all(getattr(obj, name, None) is not None for name in names)


def direct_arguments(model, guide, args, kwargs) -> Optional[Tuple[Collection[str], torch.Tensor, torch.Tensor, Optional[torch.Tensor]]]:
    """``(guide's site names, x, y, subsample)`` when a call ``(model, guide, *args, **kwargs)``
    can be evaluated without Pyro traces, else ``None``: the model and guide implement
    :class:`DirectModel` and :class:`DirectGuide`, the guide declares its sites for this model,
    and the call observes targets. (Which handlers may be active is for each caller to
    decide, with :func:`pyrozoo.poutine.stack.active_handlers`.)"""
    split_args = getattr(model, "split_args", None)
    direct_sites = getattr(guide, "direct_sites", None)
    if split_args is None or direct_sites is None or not _has_methods(model, _MODEL_METHODS) or getattr(guide, "posterior", None) is None:
        return None
    names = direct_sites(model)
    if names is None:
        return None
    try:
        x, y, subsample = split_args(*args, **kwargs)
    except TypeError:
        return None
    return None if y is None else (names, x, y, subsample)


def direct_latent_sites(model, names: Collection[str], x) -> Optional[List[Tuple[str, Distribution]]]:
    """The model's ``(name, prior)`` latent sites at inputs ``x`` when the guide's sites
    ``names`` are exactly those, else ``None`` (the trace-based path then applies)."""
    sites = model.latent_sites(x)
    if sites is None or len(sites) != len(names) or any(name not in names for name, _ in sites):
        return None
    return sites


def prior_given(prior, values: Dict[str, torch.Tensor]) -> Distribution:
    """A site's prior from :meth:`DirectModel.latent_sites` given the values drawn before it."""
    return prior if isinstance(prior, Distribution) else prior(values)


def posterior_given(guide, name: str, values: Dict[str, torch.Tensor]) -> Distribution:
    """The guide's distribution of site ``name`` given the values drawn before it."""
    conditional = getattr(guide, "conditional_posterior", None)
    return guide.posterior(name) if conditional is None else conditional(name, values)


def independent_sites(guide, sites) -> bool:
    """Whether every prior of ``sites`` and every posterior of ``guide`` is independent of the
    other sites' values (what an objective that draws the sites all at once needs)."""
    return getattr(guide, "conditional_posterior", None) is None and all(isinstance(prior, Distribution) for _, prior in sites)
