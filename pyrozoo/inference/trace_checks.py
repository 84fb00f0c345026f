"""What every zoo objective and sampler checks on a model trace before it scores it.

Pyro's ``Trace_ELBO`` refuses an observation whose ``log_prob`` does not have its plates'
shape (:func:`pyro.util.check_site_shape`, under validation); an objective that skipped the
check would broadcast a ``(N, 1)`` target against an ``(N,)`` mean to an ``(N, N)``
log-likelihood and train on it without a word. The zoo's objectives also meet two kinds of
latent site that the model draws itself, because the guide does not cover them:

* a discrete site marked for enumeration (``config_enumerate``, ``infer={"enumerate":
  "parallel"}``), which the user meant to be summed out. Only ``TraceEnum_ELBO`` sums it
  out; every other objective would draw it from its prior at each step and score the
  rest of the model at that draw, which is a different model. It is refused, naming
  ``TraceEnum_ELBO``.
* any other site (a site hidden from the guide with ``hide=[...]``): it stays at draws from
  its prior, is never learned, and a reader of the results would take it for inferred. It
  is allowed (a model may mean it) but warned about once per site with
  :class:`PriorDrawnSiteWarning`, naming the composition that covers it
  (:class:`~pyrozoo.guides.CompositeGuide`).
"""

import warnings
from typing import Iterator, Optional, Set, Tuple

from pyro.poutine.util import site_is_subsample
from pyro.util import check_site_shape

#: the values of ``site["infer"]["enumerate"]`` that ask for summation
ENUMERATED = ("parallel", "sequential")


class PriorDrawnSiteWarning(UserWarning):
    """A latent site of the model that the guide does not cover: the objective leaves it at
    draws from its prior (it is not inferred)."""


def _model_only_latents(model_trace, guide_trace) -> Iterator[Tuple[str, dict]]:
    for name, site in model_trace.nodes.items():
        if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site) and name not in guide_trace.nodes:
            yield name, site


def is_enumerated(site: dict) -> bool:
    """Whether a sample site asks to be summed out (``config_enumerate`` marked it)."""
    return (site.get("infer") or {}).get("enumerate") in ENUMERATED


def refuse_enumerated(owner: str, name: str, site: dict, hint: str = "") -> None:
    """Raises for the enumerated site ``name``: ``owner`` cannot sum it out."""
    if is_enumerated(site):
        raise NotImplementedError(
            f"{owner} cannot sum out the enumerated discrete site {name!r} (config_enumerate marked it): it would draw it "
            f"from its prior at every step instead, which is another model. Train with pyro.infer.TraceEnum_ELBO"
            f"(max_plate_nesting=...), which sums it out{hint}")


def check_model_sites(owner: str, model_trace, guide_trace, warned: Optional[Set[str]] = None) -> None:
    """Refuses enumerated sites the guide leaves to the model (:func:`refuse_enumerated`) and
    warns once per name (recorded in ``warned``) about every other latent site it leaves to
    the model's prior."""
    for name, site in _model_only_latents(model_trace, guide_trace):
        refuse_enumerated(owner, name, site, "; or marginalise it in the model (e.g. dist.MixtureSameFamily)")
        if warned is not None and name in warned:
            continue
        if warned is not None:
            warned.add(name)
        warnings.warn(
            f"latent site {name!r} is in the model but not in the guide: {owner} leaves it at draws from its prior at every "
            "step, so it is not inferred (a site hidden with hide=[...] is not learned; an observation the call did not "
            "give data for is drawn, not scored: pass the data). Cover it with a guide, e.g. "
            "pyrozoo.guides.CompositeGuide(model, YourGuide) puts the sites YourGuide cannot cover under MeanFieldNormalGuide; "
            "or block it in the model (poutine.block) if drawing it from its prior is meant",
            PriorDrawnSiteWarning, stacklevel=4)


def check_observed_shapes(trace, max_plate_nesting=float("inf")) -> None:
    """Pyro's site-shape check of every observed site of ``trace`` (on its ``log_prob``,
    computed where the trace has none, without storing it): a ``log_prob`` wider than its
    plates raises, naming the fixes."""
    for site in trace.nodes.values():
        if site["type"] == "sample" and site["is_observed"] and not site_is_subsample(site):
            check_site_shape(site if "log_prob" in site else {**site, "log_prob": site["fn"].log_prob(site["value"])}, max_plate_nesting)


__all__ = ["ENUMERATED", "PriorDrawnSiteWarning", "check_model_sites", "check_observed_shapes", "is_enumerated", "refuse_enumerated"]
