"""One guide over every latent site of a model, made of guides that each cover a part of it.

A zoo guide fits the sites its family is for: a dropout guide global real weights, the
radial-directional guide weights with a sphere-valued direction, Bayesian compression the
group scales of its prior. A model written by a user usually has other sites too (a noise
scale, a hierarchical variance); hiding them from the guide (``hide=[...]``) leaves them at
draws from their prior, which the objectives warn about
(:class:`~pyrozoo.inference.PriorDrawnSiteWarning`). Pyro composes guides with an
:class:`~pyro.infer.autoguide.AutoGuideList` of guides over blocked models;
:class:`CompositeGuide` builds that list from the model's trace, so that it is one line::

    guide = CompositeGuide(model, SparseVariationalDropoutGuide)      # the rest: MeanFieldNormalGuide
    guide = CompositeGuide(model, RadialDirectionalGuide, rest=AutoNormal)

Each latent site goes to the first of the given guides that can cover it
(:meth:`~pyrozoo.guides.SitewiseGuide.refusal`), and every site none of them covers to
``rest``.
"""

from typing import Callable, Dict, List

from pyro import poutine
from pyro.infer.autoguide import AutoGuideList

from pyrozoo.guides.base import ModelUnderHandlers, SitewiseGuide, model_under
from pyrozoo.guides.arguments import check_callable
from pyrozoo.guides.initialization import _InitUnsampleable, init_to_network
from pyrozoo.guides.mean_field import MeanFieldNormalGuide


class CompositeGuide(ModelUnderHandlers, AutoGuideList):
    """An :class:`~pyro.infer.autoguide.AutoGuideList` whose parts are chosen by which sites
    each guide can cover, when it first sees the model's arguments.

    :param callable model: the Pyro model.
    :param guides: zoo guide classes (:class:`~pyrozoo.guides.SitewiseGuide` subclasses), or
        callables ``(model, hide=...) -> SitewiseGuide`` such as
        ``functools.partial(SparseVariationalDropoutGuide, threshold=2.0)``, in order of
        preference.
    :param rest: ``model -> guide`` for the sites none of ``guides`` covers, given the model
        blocked to those sites (:class:`~pyrozoo.guides.MeanFieldNormalGuide` by default; any
        Pyro AutoGuide class works).
    :ivar dict assignment: ``{site: the class name of the part that covers it}``, once set up.
    """

    def __init__(self, model, *guides: Callable, rest: Callable = MeanFieldNormalGuide):
        check_callable("CompositeGuide", "model", model)
        if not guides:
            raise ValueError("CompositeGuide needs at least one guide to split the sites with, e.g. CompositeGuide(model, SparseVariationalDropoutGuide)")
        for g in guides:
            check_callable("CompositeGuide", "each guide", g)
        check_callable("CompositeGuide", "rest", rest)
        super().__init__(model)
        self._makers = guides
        self._rest = rest
        self.assignment: Dict[str, str] = {}

    def _setup_prototype(self, *args, **kwargs):
        # improper priors (log-uniform) cannot be drawn: those sites are traced at their
        # initial values, as a SitewiseGuide traces them
        with model_under(self, _InitUnsampleable(init_to_network)):
            super()._setup_prototype(*args, **kwargs)
        model = self.model
        sites = dict(self.prototype_trace.iter_stochastic_nodes())
        remaining = dict(sites)
        for make in self._makers:
            probe = make(model)
            if not isinstance(probe, SitewiseGuide):
                raise TypeError(f"CompositeGuide: each guide must be a zoo guide (a SitewiseGuide) that says which sites it covers; "
                                f"got {type(probe).__name__}: pass Pyro's AutoGuides as rest=")
            mine: List[str] = [name for name, site in remaining.items() if probe.refusal(name, site) is None]
            if not mine:
                continue
            part = make(model, hide=[name for name in sites if name not in mine])
            self.append(part)
            for name in mine:
                remaining.pop(name)
                self.assignment[name] = type(part).__name__
        if remaining:
            part = self._rest(poutine.block(model, expose=list(remaining)))
            self.append(part)
            self.assignment.update({name: type(part).__name__ for name in remaining})

    def median(self, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        return super().median(*args, **kwargs)

    def quantiles(self, quantiles, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        return super().quantiles(quantiles, *args, **kwargs)


__all__ = ["CompositeGuide"]
