"""Prediction and evaluation for any Pyro model: the observed sites are found from a trace,
predicted under the guide's draws, and scored by their own ``log_prob``.

A :class:`~pyrozoo.models.BayesianNeuralNetwork` predicts through its
:class:`~pyrozoo.models.Likelihood`; every other model (a function ``model(x, y=None)``, a
``PyroModule`` with ``PyroSample`` weights, a plate with ``subsample_size``) comes here from
:func:`~pyrozoo.inference.predict`, :func:`~pyrozoo.inference.posterior_samples` and
:func:`~pyrozoo.inference.evaluate`. For each of ``S`` posterior draws (a guide trace, or row
``s`` of ``samples``) the model is traced at the test inputs and, for each observed site, the
distribution it gives each example is read off the trace: its draw, mean and variance
(classification: its class probabilities), and, given the targets, ``log p(y_i | theta_s)``.
The test log-likelihood is then the mean over examples of ``log (1/S) sum_s p(y_i | theta_s)``
(summed over the observed sites of an example), whatever the site's distribution: a Poisson,
Student-t or mixture likelihood is scored by its own density.

Examples are the members of the model's data plate: the vectorised plate whose size is the
number of test inputs (``len(x)``). A model that subsamples itself (``pyro.plate("data",
len(x), subsample_size=B)``) is run on every example once, in chunks of ``B``
(:func:`~pyrozoo.poutine.subsample_indices`).
"""

import inspect
import math
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.util import site_is_subsample

from pyrozoo import metrics
from pyrozoo.distributions.util import innermost
from pyrozoo.inference.trace_checks import is_enumerated
from pyrozoo.models.likelihoods import PosteriorPredictive
from pyrozoo.poutine.subsample import subsample_indices
from pyrozoo.utils import evaluation_mode, rng_states_kept

#: distributions whose value is a class label (scored as classification)
_CLASS_PROBS = (torch.distributions.Categorical, torch.distributions.Bernoulli)


def signature(model) -> Optional[inspect.Signature]:
    """The signature a model is called with (a module's ``forward``'s), ``None`` when unknown."""
    try:
        return inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model)
    except (TypeError, ValueError):
        return None


#: names a model's third argument has when it takes a minibatch's indices
_INDEX_NAMES = ("idx", "indices", "index", "subsample_idx")


def subsample_parameter(model) -> Optional[str]:
    """The parameter through which ``model`` takes a minibatch's indices (the minibatch
    contract: the caller passes the batch and its indices, as
    :class:`~pyrozoo.models.BayesianNeuralNetwork` does): ``"subsample"`` where it has one,
    else a third positional parameter that is required or named as indices are
    (``model(x, y, idx)``, ``model(x, y=None, idx=None)``); ``None`` otherwise."""
    sig = signature(model)
    if sig is None:
        return None
    if "subsample" in sig.parameters:
        return "subsample"
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 and positional[2].kind is not inspect.Parameter.POSITIONAL_ONLY:
        third = positional[2]
        if third.default is inspect.Parameter.empty or third.name in _INDEX_NAMES:
            return third.name
    return None


def accepts_subsample(model) -> bool:
    """Whether ``model`` takes a minibatch's indices (:func:`subsample_parameter`)."""
    return subsample_parameter(model) is not None


def init_to_sample_or_network(site):
    """A prior sample, or the network's own value where the prior is improper and cannot be
    sampled (log-uniform, ARD): tracing a model to learn its structure must not fail there."""
    from pyro.infer.autoguide.initialization import init_to_sample

    from pyrozoo.guides.initialization import cannot_be_sampled, init_to_network

    if cannot_be_sampled(site["fn"]):
        return init_to_network(site, fallback=init_to_sample)
    return init_to_sample(site)


@contextmanager
def side_effect_free(model):
    """A block that leaves no trace of itself: the random streams as they were (later draws
    stay what they were without it), a module's state too (batch-norm statistics: eval mode
    meanwhile), and its sites hidden from the handlers outside."""
    with rng_states_kept(), ExitStack() as stack:
        if isinstance(model, torch.nn.Module):
            stack.enter_context(evaluation_mode(model))
        stack.enter_context(poutine.block())
        yield


@torch.no_grad()
def probe_trace(model, *args, **kwargs):
    """One trace of ``model`` to read its structure (its plates, observed sites), without
    gradients and :func:`side_effect_free`, improper priors at the network's values
    (:func:`init_to_sample_or_network`). A plate asked for a larger subsample than it has
    members (``subsample_size`` above ``len(x)``, which Pyro refuses) is named with the fix,
    and so is a failure on inputs of another dtype than torch's default, the dtype of priors
    built from Python numbers (``dist.Normal(0., 1.)``), where torch would stop inside a layer.
    """
    x = args[0] if args else None
    with side_effect_free(model):
        try:
            return poutine.trace(InitMessenger(init_to_sample_or_network)(model)).get_trace(*args, **kwargs)
        except RuntimeError as error:
            default = torch.get_default_dtype()
            if not (torch.is_tensor(x) and x.is_floating_point() and x.dtype != default):
                raise
            given, name = str(x.dtype).replace("torch.", ""), str(default).replace("torch.", "")
            raise TypeError(
                f"the model failed on inputs of dtype {given}, while its priors built from Python numbers are {name} "
                f"(torch's default dtype): convert the data (x.to(torch.{name})), or build the model in {given} "
                f"({str(error).splitlines()[0]})") from error
        except ValueError as error:
            if "subsample_size does not match len(subsample)" not in str(error):
                raise
            n = len(args[0]) if args and hasattr(args[0], "__len__") else "the"
            raise ValueError(
                f"the model's data plate asks for a larger subsample than the {n} inputs hold, which Pyro refuses "
                "(its plate's subsample_size exceeds len(x)): write pyro.plate('data', len(x), subsample_size=min(B, len(x)))"
            ) from None


@dataclass
class DataPlate:
    """The model's data plate at ``n`` test inputs: its name and, for a model that subsamples
    itself, the size of its subsample (``None``: the plate holds every example)."""

    name: Optional[str]
    subsample_size: Optional[int] = None
    #: latent sites marked for enumeration (``config_enumerate``), all inside this plate
    enumerated: tuple = ()
    #: the deepest nesting of vectorised plates in the model (enumeration goes left of it)
    nesting: int = 0


def data_plate(trace, n: int) -> DataPlate:
    """The vectorised plate of ``trace`` whose (full) size is ``n``, the number of inputs,
    with the latent sites marked for enumeration. An enumerated site outside that plate
    couples the examples (its sum is over all of them at once), so it is refused: a test
    log-likelihood per example does not exist for it."""
    sites = [(k, site) for k, site in trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site)]
    plate = DataPlate(None)
    for _, site in sites:
        for frame in site["cond_indep_stack"]:
            full = frame.full_size if frame.full_size is not None else frame.size
            if frame.vectorized and full == n:
                plate = DataPlate(frame.name, frame.size if frame.size < full else None)
                break
        if plate.name is not None:
            break
    enumerated = tuple(k for k, site in sites if not site["is_observed"] and is_enumerated(site))
    outside = [k for k, site in sites if k in enumerated and not any(f.vectorized and f.name == plate.name for f in site["cond_indep_stack"])]
    if outside:
        raise ValueError(
            f"the model enumerates {outside} outside its data plate: such a discrete latent is shared by all the examples, so "
            "their log-likelihoods do not split per example; give it a guide (it is then drawn like any latent), or score "
            "the whole data set with pyro.infer.TraceEnum_ELBO")
    plate.enumerated = enumerated
    plate.nesting = max((sum(f.vectorized for f in site["cond_indep_stack"]) for _, site in sites), default=0)
    return plate


def model_call(model, x: torch.Tensor, y: Optional[torch.Tensor] = None, idx: Optional[torch.Tensor] = None):
    """``(args, kwargs)`` of ``model`` on inputs ``x`` (and targets ``y``): ``model(x)`` or
    ``model(x, y)``, with ``subsample=idx`` for a model that takes it (or its own name for
    the indices, :func:`subsample_parameter`)."""
    args = (x,) if y is None else (x, y)
    name = subsample_parameter(model)
    if name is not None:
        return args if y is not None else (x, None), {name: torch.arange(len(x), device=x.device) if idx is None else idx}
    return args, {}


@dataclass
class SiteDraws:
    """One observed site's predictive quantities under ``S`` draws, each ``(S, n, ...)``."""

    name: str
    kind: str  # "classification" or "regression"
    values: List[torch.Tensor] = field(default_factory=list)
    means: List[torch.Tensor] = field(default_factory=list)
    variances: List[torch.Tensor] = field(default_factory=list)
    probs: List[torch.Tensor] = field(default_factory=list)
    log_probs: List[torch.Tensor] = field(default_factory=list)
    event_size: int = 1
    real: bool = False

    def stacked(self, what: str) -> Optional[torch.Tensor]:
        parts = getattr(self, what)
        return torch.stack(parts) if parts else None


def _per_example(t: torch.Tensor, dim: int, event_dim: int, reduce: bool) -> torch.Tensor:
    """``t`` (batch shape, then ``event_dim`` event dims) with the data dim ``dim`` (negative,
    counted in the batch shape) first; ``reduce``: summed over every other dim."""
    t = t.movedim(dim - event_dim, 0)
    return t.reshape(len(t), -1).sum(-1) if reduce else t


def _chunks(n: int, size: Optional[int], batch_size: Optional[int], device) -> List[tuple]:
    """``(indices, new)`` chunks covering ``range(n)`` in order, ``new`` the number of leading
    members not visited before. With ``size`` (a self-subsampling plate's), each chunk has
    exactly ``size`` members, the last one filled from the start."""
    order = torch.arange(n, device=device)
    step = size or batch_size or n
    out = []
    for start in range(0, n, step):
        chunk = order[start:start + step]
        new = len(chunk)
        if size and new < size:
            chunk = torch.cat([chunk, order[: size - new]])
        out.append((chunk, new))
    return out


def observed_names(model, guide, x: torch.Tensor, y: Optional[torch.Tensor] = None, obs=None, samples: Optional[dict] = None) -> tuple:
    """The sites to predict: ``obs`` (a name or names) when given; else, with targets ``y``,
    the sites the model observes when called as ``model(x, y)``; else those the guide saw
    observed when it was fitted (:attr:`~pyrozoo.guides.SitewiseGuide.observed_sites`); else
    the model's sample sites that neither the guide nor ``samples`` provide."""
    if obs is not None:
        names = (obs,) if isinstance(obs, str) else tuple(obs)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"obs must name the observed site(s), e.g. obs='y' or obs=['y'], got {obs!r}")
        return names
    if y is not None:
        args, kwargs = model_call(model, x, y)
        trace = probe_trace(model, *args, **kwargs)
        return tuple(k for k, site in trace.nodes.items() if site["type"] == "sample" and site["is_observed"] and not site_is_subsample(site))
    parts = list(guide) if isinstance(guide, torch.nn.ModuleList) else [guide]
    seen = tuple(dict.fromkeys(n for part in parts for n in getattr(part, "observed_sites", ())))
    if seen:
        return seen
    args, kwargs = model_call(model, x)
    trace = probe_trace(model, *args, **kwargs)
    if samples is not None:
        provided = set(samples)
    elif guide is None:
        provided = set()
    else:
        guide_trace = probe_trace(guide, *((x,) if not accepts_subsample(guide) else model_call(guide, x)[0]))
        provided = {k for k, site in guide_trace.nodes.items() if site["type"] == "sample"}
    return tuple(k for k, site in trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site) and k not in provided)


@torch.no_grad()
def draw_sites(model, guide, x: torch.Tensor, names: Sequence[str], num_samples: int, y: Optional[torch.Tensor] = None,
               samples: Optional[Dict[str, torch.Tensor]] = None, batch_size: Optional[int] = None, plate: Optional[DataPlate] = None) -> Dict[str, SiteDraws]:
    """The observed sites ``names`` at inputs ``x`` under ``num_samples`` posterior draws
    (the guide's, or every row of ``samples``, less any draws of the observed sites themselves
    and ``_RETURN``, as ``Predictive`` returns them); with targets ``y``, their per-example
    ``log_prob`` too. ``batch_size``: inputs per model call (a self-subsampling plate's own
    size wins), the draws shared by the chunks. ``plate``: the model's :func:`data_plate` at
    ``x``, when the caller has read it already."""
    n = len(x)
    if plate is None:
        args, kwargs = model_call(model, x)
        plate = data_plate(probe_trace(model, *args, **kwargs), n)
    if plate.name is None:
        raise ValueError(
            f"the model has no plate over the {n} inputs, so its observed site(s) {list(names)} cannot be scored per example: "
            f"wrap the observation in `with pyro.plate('data', len(x)):` (Pyro's idiom), or score with Predictive yourself")
    chunks = _chunks(n, plate.subsample_size, batch_size, x.device)
    out: Dict[str, SiteDraws] = {}
    if samples is not None:
        # (Predictive's output holds the observed sites' draws too: those are predictions, not the posterior)
        samples = {k: v for k, v in samples.items() if k not in names and k != "_RETURN"}
        # every row is a draw, as Predictive(posterior_samples=...) reads them (num_samples is the guide's)
        rows = {len(v) for v in samples.values()}
        if len(rows) > 1:
            raise ValueError(f"samples= holds different numbers of draws per site ({ {k: len(v) for k, v in samples.items()} }): give every site the same leading sample dimension")
        num_samples = rows.pop() if rows else num_samples
    for s in range(num_samples):
        if samples is not None:
            run = poutine.condition(model, data={k: v[s] for k, v in samples.items()})
        else:
            args, kwargs = model_call(guide, x) if accepts_subsample(guide) else ((x,), {})
            guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
            local = [k for k, site in guide_trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site)
                     and any(f.vectorized and f.name == plate.name for f in site["cond_indep_stack"])]
            if local:
                raise ValueError(
                    f"the guide samples {local} per example (inside the data plate {plate.name!r}): such local latent variables "
                    "belong to the training examples, so there is nothing to draw for new inputs; predict the training "
                    "inputs with pyro.infer.Predictive, or make those sites global")
            run = poutine.replay(model, trace=guide_trace)
        parts: Dict[str, dict] = {name: {} for name in names}
        for chunk, new in chunks:
            if plate.subsample_size:  # the whole data in, the plate on this chunk
                args, kwargs = model_call(model, x, y)
                on_chunk = subsample_indices({plate.name: chunk})
            else:
                args, kwargs = model_call(model, x[chunk], None if y is None else y[chunk])
                on_chunk = nullcontext()
            with on_chunk:
                trace = poutine.trace(run).get_trace(*args, **kwargs)
            keep = slice(0, new)
            scored = y is not None and not plate.enumerated
            for name in names:
                _read_site(trace, name, plate.name, parts[name], keep, scored, out)
            if y is not None and plate.enumerated:
                with poutine.enum(first_available_dim=-1 - plate.nesting), on_chunk:
                    enum_trace = poutine.trace(run).get_trace(*args, **kwargs)
                marginal = _marginal_log_probs(enum_trace, names, plate)
                for i, name in enumerate(names):  # the examples' joint marginal, counted once
                    parts[name].setdefault("log_probs", []).append((marginal if i == 0 else torch.zeros_like(marginal))[keep])
        for name in names:
            for what, pieces in parts[name].items():
                getattr(out[name], what).append(torch.cat(pieces))
    return out


def _marginal_log_probs(trace, names: Sequence[str], plate: DataPlate) -> torch.Tensor:
    """Per example, ``log sum_z p(z) p(y | z, theta)`` over the enumerated sites ``z`` of an
    enumerated trace: their and the observed sites' ``log_prob`` added (broadcast over the
    enumeration dims, left of the plates) and the enumeration dims log-sum-exp'ed away."""
    total = 0.0
    for name in tuple(plate.enumerated) + tuple(names):
        site = trace.nodes[name]
        total = total + site["fn"].log_prob(site["value"])
    total = torch.as_tensor(total)
    enum_dims = total.dim() - plate.nesting
    if enum_dims > 0:
        total = torch.logsumexp(total.reshape((-1,) + total.shape[enum_dims:]), 0)
    frame = next(f for f in trace.nodes[names[0]]["cond_indep_stack"] if f.vectorized and f.name == plate.name)
    return _per_example(total, frame.dim, 0, reduce=True)


def _read_site(trace, name: str, plate_name: str, part: dict, keep, scored: bool, out: Dict[str, SiteDraws]) -> None:
    if name not in trace.nodes:
        raise ValueError(f"the model has no sample site {name!r} at these inputs (its sites: {[k for k, s in trace.nodes.items() if s['type'] == 'sample']})")
    site = trace.nodes[name]
    fn = site["fn"]
    frames = [f for f in site["cond_indep_stack"] if f.vectorized and f.name == plate_name]
    if not frames:
        raise ValueError(f"site {name!r} lies outside the data plate {plate_name!r}: it cannot be predicted per example; put it inside the plate")
    dim, event_dim = frames[0].dim, fn.event_dim
    base = innermost(fn)
    kind = "classification" if isinstance(base, _CLASS_PROBS) else "regression"
    if name not in out:
        support = fn.support
        real = support in (constraints.real, constraints.real_vector) or getattr(support, "base_constraint", None) is constraints.real
        out[name] = SiteDraws(name, kind, event_size=int(math.prod(fn.event_shape)), real=real)

    def add(what, tensor, reduce=False):
        part.setdefault(what, []).append(_per_example(tensor, dim, event_dim if what != "probs" else event_dim + 1, reduce)[keep])

    add("values", site["value"])
    if kind == "classification":
        probs = base.probs if isinstance(base, torch.distributions.Categorical) else torch.stack([1 - base.probs, base.probs], -1)
        add("probs", probs.expand(fn.batch_shape + probs.shape[-1:]))
    else:
        try:
            add("means", fn.mean.expand(fn.batch_shape + fn.event_shape))
            add("variances", fn.variance.expand(fn.batch_shape + fn.event_shape))
        except (NotImplementedError, AttributeError):
            pass
    if scored:
        add("log_probs", fn.log_prob(site["value"]), reduce=True)


def predictive_summary(draws: SiteDraws) -> PosteriorPredictive:
    """:class:`~pyrozoo.models.PosteriorPredictive` of one site, as the likelihoods give it:
    classification, the class probabilities' mean, spread over draws and draws; regression,
    the predictive mean, the total standard deviation (expected variance + variance of the
    means) and the site's predictive draws."""
    if draws.kind == "classification":
        probs = draws.stacked("probs")
        return PosteriorPredictive(probs.mean(0), probs.std(0) if len(probs) > 1 else torch.zeros_like(probs[0]), probs)
    values = draws.stacked("values")
    means = draws.stacked("means")
    if means is None:  # a distribution without a closed-form mean: from its draws
        return PosteriorPredictive(values.float().mean(0), values.float().std(0), values)
    variances = draws.stacked("variances")
    total = variances.mean(0) + (means.var(0, unbiased=False) if len(means) > 1 else 0.0)
    return PosteriorPredictive(means.mean(0), total.sqrt(), values)


def site_metrics(sites: Dict[str, SiteDraws], y_scale: float = 1.0, y_shift: float = 0.0, y: Optional[torch.Tensor] = None) -> Dict[str, float]:
    """``test_ll``: mean over examples of ``log (1/S) sum_s prod_sites p(y_i | theta_s)``
    (minus ``log y_scale`` per real-valued target, so it is in original units); for each
    site, ``rmse`` (regression) or ``accuracy``, ``error`` (percent) and ``ece``
    (classification), prefixed by the site's name when there are several."""
    log_p = sum(d.stacked("log_probs") for d in sites.values())
    num = log_p.shape[0]
    jacobian = sum(d.event_size for d in sites.values() if d.real) * math.log(float(y_scale))
    out = {"test_ll": float((torch.logsumexp(log_p, 0) - math.log(num)).mean()) - jacobian}
    for name, d in sites.items():
        prefix = "" if len(sites) == 1 else f"{name}_"
        target = d.values[0]  # the observed value, the same in every draw
        summary = predictive_summary(d)
        if d.kind == "classification":
            probs = summary.mean
            labels = target.long()
            acc = metrics.accuracy(probs, labels)
            out.update({f"{prefix}accuracy": acc, f"{prefix}error": 100.0 * (1.0 - acc), f"{prefix}ece": metrics.expected_calibration_error(probs, labels)})
        else:
            mean = summary.mean.to(target.dtype) if target.is_floating_point() else summary.mean
            out[f"{prefix}rmse"] = metrics.rmse(mean * y_scale + y_shift, target.to(mean.dtype) * y_scale + y_shift)
    return out


__all__ = ["accepts_subsample", "subsample_parameter", "data_plate", "draw_sites", "model_call", "observed_names", "predictive_summary", "site_metrics", "DataPlate", "SiteDraws"]
