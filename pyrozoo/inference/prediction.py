"""Posterior predictions: samples, predictive summaries and evaluation metrics."""

import math
import operator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import pyro
import torch
from pyro import poutine
from pyro.infer import Predictive
from pyro.infer.autoguide import AutoGuideList
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.util import site_is_subsample

from pyrozoo import metrics
from pyrozoo.data.validation import check_finite, check_nonempty, check_positive_finite
from pyrozoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood, PosteriorPredictive
from pyrozoo.distributions.util import innermost
from pyrozoo.inference.site_predictive import init_to_sample_or_network, side_effect_free


@dataclass
class PredictiveRecord:
    """What one :func:`evaluate` call predicted, for calibration analyses.

    Regression: ``pit``, the posterior predictive CDF at each test target (probability
    integral transform; invariant under the affine map back to original units).
    Classification: ``probs`` (posterior-averaged class probabilities) and ``labels``.
    Tensors are detached and on the CPU.
    """

    kind: str  # "regression" or "classification"
    pit: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    labels: Optional[torch.Tensor] = None
    #: ``x -> (S, n, ...)`` network outputs of the same posterior at other inputs (a guide's
    #: fresh draws, a sampler's same samples), for out-of-distribution and shift analyses
    outputs_at: Optional[Callable[[torch.Tensor], torch.Tensor]] = None


_RECORDERS: List[list] = []


@contextmanager
def record_predictive():
    """Collects a :class:`PredictiveRecord` from every :func:`evaluate` call in the block::

        with record_predictive() as records:
            run_split("sgld", split, config)   # any method that evaluates through evaluate()
        coverage = metrics.interval_coverage(records[-1].pit, [0.5, 0.9])

    Methods need no code of their own for this: the predictive quantities are computed only
    while a recorder is active, and ``evaluate``'s return value is unchanged.
    """
    records: list = []
    _RECORDERS.append(records)
    try:
        yield records
    finally:
        # by identity: two recorders holding equal records compare equal as lists
        del _RECORDERS[next(i for i, r in enumerate(_RECORDERS) if r is records)]


def _record(record: PredictiveRecord) -> None:
    for records in _RECORDERS:
        records.append(record)


def _latent_names(model, x) -> list:
    likelihood = getattr(model, "likelihood", None)
    if likelihood is None:
        return []
    return [name for name, _ in likelihood.latent_sites(x[:1]).values()]


@torch.no_grad()
def posterior_samples(model, guide, x: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, *, samples: Optional[Dict[str, torch.Tensor]] = None, obs=None) -> Dict[str, torch.Tensor]:
    """Network outputs (``"_RETURN"``, shape ``(S, n, ...)``) and the likelihood's latent
    variables under ``num_samples`` draws from the guide, via Pyro's ``Predictive``.

    With ``batch_size``, ``x`` is processed in chunks that share one set of posterior
    draws of the guide's (global) latent variables, so memory stays bounded and the chunks
    together are exactly one prediction per draw.

    :param samples: instead of drawing from ``guide``, condition on these values of the
        latent sites (each with a leading sample dimension), e.g.
        ``{k: v[None] for k, v in guide.median().items()}`` for the posterior-median network.

    Before sampling, the inputs are checked (a non-empty tensor without NaN/inf) and so is
    the posterior against the model (:func:`check_posterior_matches_model`): a guide or
    ``samples`` fitted to another model raise a ``ValueError`` instead of predicting.

    Any other Pyro model (``model(x, y=None)``, a ``PyroModule``): ``{site: (S, n, ...)}``,
    the predictive draws of its observed sites (``obs``: their names; default: the sites
    the guide was fitted to observe, :mod:`pyrozoo.inference.site_predictive`).
    """
    _check_arguments("posterior_samples", x, num_samples, batch_size)
    if _has_no_likelihood(model):
        sites = _site_draws("posterior_samples", model, guide, x, num_samples, batch_size, samples, obs=obs)
        return {name: d.stacked("values") for name, d in sites.items()}
    check_posterior_matches_model(model, guide, x, samples=samples)
    return _posterior_samples(model, guide, x, num_samples, batch_size, samples)


def _has_no_likelihood(model) -> bool:
    """Any Pyro model but a :class:`~pyrozoo.models.BayesianNeuralNetwork` (or another model
    with a pyrozoo :class:`~pyrozoo.models.Likelihood`): predicted through its observed sites
    (:mod:`pyrozoo.inference.site_predictive`)."""
    return getattr(model, "likelihood", None) is None


def _site_draws(caller, model, guide, x, num_samples, batch_size, samples, *, y=None, obs=None):
    """The general path: which sites to predict, the posterior checked against the model
    without them, then their draws at ``x`` (and, given ``y``, their log-densities)."""
    from pyrozoo.inference import site_predictive as sp

    if guide is not None and samples is None and getattr(guide, "prototype_trace", True) is None:
        raise ValueError(
            f"{caller}: the guide ({type(guide).__name__}) has not been fitted to this model yet (it sets itself up on its first "
            "call): fit it first, e.g. fit(model, guide, (x, y), ...) or SVI, so that it knows which sites the model observes")
    names = sp.observed_names(model, guide, x, y, obs=obs, samples=samples)
    if not names:
        raise ValueError(f"{caller}: the model observes no site at these inputs, so there is nothing to predict; name the observed site(s) with obs=[...]")
    args, kwargs = sp.model_call(model, x)
    plate = sp.data_plate(sp.probe_trace(model, *args, **kwargs), len(x))  # read once: the check and the draws need it
    check_posterior_matches_model(model, guide, x, samples=samples, observed=names, rows=len(x) if plate.subsample_size else 2)
    return sp.draw_sites(model, guide, x, names, num_samples, y=y, samples=samples, batch_size=batch_size, plate=plate)


def _posterior_samples(model, guide, x, num_samples, batch_size, samples):
    names = _latent_names(model, x)
    model_fn = InitMessenger(init_to_sample_or_network)(model)
    if samples is not None:
        draws = samples
    elif not batch_size or batch_size >= len(x):
        return Predictive(model_fn, guide=guide, num_samples=num_samples, return_sites=["_RETURN", *names])(x)
    else:
        draws = Predictive(guide, num_samples=num_samples)(x[:batch_size])
    batch_size = batch_size or len(x)
    outputs = [
        Predictive(model_fn, posterior_samples=draws, return_sites=["_RETURN"])(chunk)["_RETURN"]
        for chunk in torch.split(x, batch_size)
    ]
    return {"_RETURN": torch.cat(outputs, 1), **{name: draws[name] for name in names}}


@torch.no_grad()
def predict(model, guide, x: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, *, samples: Optional[Dict[str, torch.Tensor]] = None, obs=None) -> PosteriorPredictive:
    """Posterior predictive mean, standard deviation and samples (see
    :class:`~pyrozoo.models.PosteriorPredictive`) from the model's likelihood
    (``samples``: fixed latent values instead of guide draws, see :func:`posterior_samples`,
    which also lists the checks of the inputs and the posterior).

    Any other Pyro model: the same summary of its observed site (``obs``), read off the
    site's own distribution under each draw (classification sites: class probabilities;
    others: mean and total standard deviation); a dict of them for several observed sites."""
    _check_arguments("predict", x, num_samples, batch_size)
    if _has_no_likelihood(model):
        from pyrozoo.inference.site_predictive import predictive_summary

        sites = _site_draws("predict", model, guide, x, num_samples, batch_size, samples, obs=obs)
        summaries = {name: predictive_summary(d) for name, d in sites.items()}
        return next(iter(summaries.values())) if len(summaries) == 1 else summaries
    check_posterior_matches_model(model, guide, x, samples=samples)
    samples = _posterior_samples(model, guide, x, num_samples, batch_size, samples)
    return model.likelihood.aggregate(samples["_RETURN"], _likelihood_latents(model, samples, x))


def _likelihood_latents(model, samples, x) -> dict:
    return {key: samples[name] for key, (name, _) in model.likelihood.latent_sites(x[:1]).items()}


@torch.no_grad()
def evaluate(model, guide, x: torch.Tensor, y: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, y_scale: float = 1.0, y_shift: float = 0.0, *, samples: Optional[Dict[str, torch.Tensor]] = None, obs=None) -> Dict[str, float]:
    """Test metrics from ``num_samples`` posterior draws.

    Regression (:class:`~pyrozoo.models.GaussianLikelihood`): ``rmse`` and ``test_ll`` (mean per
    example of ``log (1/S) sum_s N(y | f_s, 1/tau_s)``), in original units when the targets
    were standardised as ``(y - y_shift) / y_scale``. Classification: ``accuracy``,
    ``error`` (percent), ``test_ll`` and ``ece``. ``samples``: fixed latent values instead
    of guide draws (see :func:`posterior_samples`). Inside :func:`record_predictive` it
    also records the predictive quantities calibration needs.

    Bad input raises before any sampling: NaN/inf or an empty test set in ``x`` or ``y``,
    inputs and targets of different lengths, a ``y_scale`` that is not positive and finite,
    class labels outside ``[0, K - 1]`` for a network with ``K`` outputs, and a guide (or
    ``samples``) fitted to a different model (see :func:`check_posterior_matches_model`).

    Any other Pyro model, called as ``model(x, y)``: ``test_ll`` is the mean over examples
    of ``log (1/S) sum_s p(y_i | theta_s)`` from its observed sites' own ``log_prob`` (a
    Poisson, Student-t or mixture likelihood is scored by its density), with ``rmse`` for
    real-valued or count sites and ``accuracy``, ``error`` and ``ece`` for Categorical and
    Bernoulli ones (:func:`pyrozoo.inference.site_predictive.site_metrics`).
    """
    _check_arguments("evaluate", x, num_samples, batch_size)
    _check_targets(x, y)
    check_positive_finite("evaluate: y_scale", y_scale, "it is the standard deviation the targets were divided by when standardised as (y - y_shift) / y_scale; "
                          "pass the training targets' (nonzero) standard deviation, or 1.0 for targets in original units")
    if not math.isfinite(float(y_shift)):  # (a non-number fails here as it did below)
        raise ValueError(f"evaluate: y_shift must be finite, got {float(y_shift)} (the mean the targets were standardised with, or 0.0)")
    if _has_no_likelihood(model):
        from pyrozoo.inference.site_predictive import site_metrics

        sites = _site_draws("evaluate", model, guide, x, num_samples, batch_size, samples, y=y, obs=obs)
        return site_metrics(sites, y_scale, y_shift)
    likelihood = model.likelihood
    output = check_posterior_matches_model(model, guide, x, samples=samples)
    if isinstance(likelihood, CategoricalLikelihood) and torch.is_tensor(output) and output.dim() >= 1:
        likelihood.check_labels(y, output.shape[-1])
    draws = _posterior_samples(model, guide, x, num_samples, batch_size, samples)

    def outputs_at(x_other):
        return _posterior_samples(model, guide, x_other, num_samples, batch_size, samples)["_RETURN"]

    return evaluate_outputs(likelihood, draws["_RETURN"], y, _likelihood_latents(model, draws, x), y_scale, y_shift, outputs_at=outputs_at)


@torch.no_grad()
def evaluate_outputs(likelihood, f: torch.Tensor, y: torch.Tensor, latents: Optional[dict] = None, y_scale: float = 1.0, y_shift: float = 0.0, *, outputs_at: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> Dict[str, float]:
    """:func:`evaluate`'s metrics (and, inside :func:`record_predictive`, its record) from
    network outputs ``f`` of shape ``(S, n, ...)`` under ``S`` posterior draws and the
    likelihood's latent draws ``latents`` (e.g. ``{"precision": (S,)}``), so that a
    predictive from outside Pyro (``pyrozoo.baselines``) is scored by the same code.
    ``outputs_at`` (optional, recorded): ``x -> (S, n, ...)`` outputs of the same posterior
    at other inputs."""
    latents = latents or {}
    log_pred = likelihood.log_predictive(f, y, latents)
    if isinstance(likelihood, GaussianLikelihood):
        mean = likelihood.aggregate(f, latents).mean
        y_col = likelihood.check_obs(mean, y)
        if _RECORDERS:
            _record(PredictiveRecord("regression", pit=likelihood.predictive_cdf(f, y_col, latents).detach().cpu(), outputs_at=outputs_at))
        return {
            "rmse": metrics.rmse(mean * y_scale + y_shift, y_col * y_scale + y_shift),
            # the Jacobian of the standardisation, once per scalar target of an example
            "test_ll": float(log_pred.mean()) - math.log(float(y_scale)) * math.prod(y_col.shape[1:]),
        }
    if isinstance(likelihood, CategoricalLikelihood):
        probs = likelihood.aggregate(f, latents).mean
        acc = metrics.accuracy(probs, y)
        if _RECORDERS:
            _record(PredictiveRecord("classification", probs=probs.detach().cpu(), labels=y.detach().cpu(), outputs_at=outputs_at))
        return {"accuracy": acc, "error": 100.0 * (1.0 - acc), "test_ll": float(log_pred.mean()), "ece": metrics.expected_calibration_error(probs, y)}
    return {"test_ll": float(log_pred.mean())}


# -- checks --------------------------------------------------------------------------------------


def _check_arguments(caller: str, x, num_samples, batch_size) -> None:
    if not _is_int(num_samples) or num_samples < 1:
        raise ValueError(f"{caller}: num_samples must be an int >= 1, got {num_samples!r}")
    if batch_size is not None and (not _is_int(batch_size) or batch_size < 0):
        raise ValueError(f"{caller}: batch_size must be a positive int (or None or 0 for one batch), got {batch_size!r}")
    _check_data(caller, "x", x, "the inputs")


def _is_int(value) -> bool:
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _check_targets(x, y) -> None:
    _check_data("evaluate", "y", y, "the targets")
    if len(y) != len(x):
        raise ValueError(f"evaluate: x and y have different numbers of examples ({len(x)} inputs, {len(y)} targets); pass one target per input row")


def _check_data(caller: str, name: str, tensor, what: str) -> None:
    if not torch.is_tensor(tensor):
        raise TypeError(f"{caller}: {name} must be a tensor, got {type(tensor).__name__}")
    check_nonempty(f"{caller}: {name}", tensor, f"the test set needs at least one example; {caller} has nothing to predict")
    try:
        check_finite(f"{caller}: {name}", tensor)
    except ValueError as error:
        raise ValueError(f"{error}; {what} must be finite: drop or impute the rows with missing or infinite values first") from None


def _guide_hidden_sites(guide) -> Optional[set]:
    """Names a pyrozoo guide leaves to the prior on purpose (``hide=``), or ``None`` when the
    guide does not say which sites it covers (a plain Pyro guide: it may leave any site out)."""
    from pyrozoo.guides.base import SitewiseGuide

    if isinstance(guide, SitewiseGuide):
        parts = [guide]
    elif isinstance(guide, AutoGuideList):
        parts = list(guide)
        if not parts or not all(isinstance(part, SitewiseGuide) for part in parts):
            return None
    else:
        return None
    hidden = set()
    for part in parts:
        hidden |= part.hidden_sites
        # sites the guide's own model observed (e.g. an obs site named by the user's model)
        # are sampled when predicting, but are no latent variable the guide should cover
        if part.prototype_trace is not None:
            hidden |= {name for name, site in part.prototype_trace.nodes.items() if site["type"] == "sample" and site["is_observed"]}
    return hidden


def _is_global(site, data_plate: Optional[str]) -> bool:
    """A site whose shape does not depend on the number of examples: outside the data plate
    (outside every vectorised plate when the model names none)."""
    frames = [frame for frame in site["cond_indep_stack"] if frame.vectorized]
    if data_plate is None:
        return not frames
    return all(frame.name != data_plate for frame in frames)


def _fits(value_shape: torch.Size, site) -> bool:
    """Whether a value of ``value_shape`` is one of the site's distribution (batch + event
    shape); a batch part that broadcasts to the site's without enlarging it is allowed."""
    fn = site["fn"]
    expected = fn.batch_shape + fn.event_shape
    if value_shape == expected:
        return True
    event_dim = len(fn.event_shape)
    if event_dim and value_shape[len(value_shape) - event_dim:] != fn.event_shape:
        return False
    try:
        return torch.broadcast_shapes(value_shape, expected) == expected
    except RuntimeError:
        return False


def check_training_labels(model, x: torch.Tensor, y: torch.Tensor) -> None:
    """For a classification model (a :class:`~pyrozoo.models.CategoricalLikelihood` likelihood): raises
    unless ``y`` are labels in ``[0, K - 1]``, ``K`` the width of the network output on
    ``x[:2]`` (one run of the model that leaves the random streams and modules as they were).
    Once per data set: an out-of-range label would otherwise fail inside a step, as an
    index error (a device-side assert on CUDA) or a support error under validation."""
    likelihood = getattr(model, "likelihood", None)
    if not isinstance(likelihood, CategoricalLikelihood):
        return
    with side_effect_free(model), torch.no_grad():
        output = InitMessenger(init_to_sample_or_network)(model)(x[:2])  # (improper priors are not drawn from)
    if torch.is_tensor(output) and output.dim() >= 1:
        likelihood.check_labels(y, output.shape[-1])


def _check_point_estimates(model) -> None:
    """A :class:`~pyrozoo.models.BayesianNeuralNetwork` reads its point-estimate parameters
    from Pyro's param store by name: values fitted for another network of the same name
    would be used (or fail deep in the network) unless caught here."""
    names = getattr(model, "deterministic_parameter_names", None)
    net, prefix = getattr(model, "net", None), getattr(model, "name", None)
    if not names or not isinstance(net, torch.nn.Module) or not isinstance(prefix, str):
        return
    store = pyro.get_param_store()
    params = dict(net.named_parameters())
    for name in names:
        key = f"{prefix}.{name}"
        if key in store and name in params and store[key].shape != params[name].shape:
            raise ValueError(
                f"the param store holds {key!r} of shape {tuple(store[key].shape)} but the model's parameter has shape "
                f"{tuple(params[name].shape)}: the store's point estimates were fitted to a different model; evaluate "
                f"the model they belong to, or clear them (pyro.clear_param_store()) or give this model another name="
            )


def _check_unsampleable_sites_covered(model_sites: dict, values: dict, source: Optional[str]) -> None:
    """Prediction draws every latent site the posterior does not provide from its prior:
    refused for priors that cannot be sampled (the improper log-uniform, ARD), where
    ``Predictive`` would otherwise silently use the network's own values at those sites.
    ``source``: what provides ``values`` (``None``: no guide and no samples)."""
    from pyrozoo.guides.initialization import cannot_be_sampled

    improper = [
        f"{name!r} ({type(innermost(site['fn'])).__name__})"
        for name, site in model_sites.items()
        if not site["is_observed"] and name not in values and cannot_be_sampled(site["fn"])
    ]
    if not improper:
        return
    what = "no guide and no samples were given" if source is None else f"{source} does not provide them"
    raise ValueError(
        f"the prior of {', '.join(improper)} is improper (or defined only through a KL) and cannot be sampled, and "
        f"{what}, so the prediction would have to draw them from it: pass the guide fitted to the model, covering "
        "those sites (predict(model, guide, x); pyro.infer.Predictive(model, guide=guide, ...)), or posterior "
        "samples of them (samples=...; Predictive(model, posterior_samples=...))"
    )


def _check_rows(model, x, likelihood, rows: int):
    """``(head, args, kwargs)``: the first ``rows`` rows of ``x`` the check traces the model
    on, and the call. A pyrozoo likelihood's model takes ``model(head)``; any other model is
    called as prediction calls it (:func:`~pyrozoo.inference.site_predictive.model_call`)."""
    from pyrozoo.inference.site_predictive import model_call

    head = x[: min(len(x), rows)]
    if likelihood is not None:
        return head, (head,), {}
    return (head, *model_call(model, head))


@torch.no_grad()
def check_posterior_matches_model(model, guide, x: torch.Tensor, *, samples: Optional[Dict[str, torch.Tensor]] = None, observed: Sequence[str] = (), rows: int = 2):
    """Raises ``ValueError`` when the posterior does not belong to ``model``: a guide (or
    ``samples``, or a :class:`~pyrozoo.inference.SampleGuide`'s stored samples) fitted to
    another model, e.g. a network of another width. Pyro would replay such values into the
    model without complaint and predict with the guide's network.

    Once per call, on the first two rows of ``x``: the model is traced as ``Predictive``
    traces it (prior draws, network values where the prior is improper), the guide once
    (a stored sample is read, not drawn), and every latent site is compared: one the guide
    samples that the model lacks, a value whose shape is not the model site's (batch +
    event shape; compared for global sites, whose shape does not depend on ``x``), and, for
    pyrozoo's site-wise guides, a model site the guide neither covers nor hides; and a site
    whose prior cannot be sampled (the improper log-uniform, ARD) that no guide or samples
    provide, as prediction would have to draw it from that prior. The random
    streams and the modules' state are left as they were.

    ``observed``: sites of a model without a pyrozoo likelihood that are its observations
    (predicted, not covered by the posterior); ``rows``: how many rows of ``x`` to trace on
    (a model that subsamples itself needs at least its subsample's size: Pyro refuses fewer).

    :returns: the model's output on those rows (its last dimension is a classifier's
        number of classes), or ``None`` where the model returns no tensor.
    """
    from pyrozoo.inference.sample_storage import SampleGuide

    likelihood = getattr(model, "likelihood", None)
    obs_name = getattr(likelihood, "name", None)
    data_plate = getattr(likelihood, "plate_name", None)
    from pyrozoo.inference.calling import check_data_matches_model

    check_data_matches_model(model, x, "prediction")
    model_fn = InitMessenger(init_to_sample_or_network)(model)
    _check_point_estimates(model)
    with side_effect_free(model):
        head, model_args, model_kwargs = _check_rows(model, x, likelihood, rows)
        # (the model's own errors on x, e.g. a wrong number of features, surface as they are)
        model_trace = poutine.trace(model_fn).get_trace(*model_args, **model_kwargs)
        if samples is not None or isinstance(guide, SampleGuide):
            stored = samples if samples is not None else guide.samples
            source = "the posterior samples" if samples is not None else "the SampleGuide's samples"
            values = {name: v.shape[1:] for name, v in stored.items() if torch.is_tensor(v) and v.dim() >= 1}
            hidden = None  # samplers record the sites they sample: others are left to the prior
        elif guide is None or getattr(guide, "prototype_trace", True) is None:
            # no guide (Predictive draws from the prior), or an autoguide not set up yet:
            # Predictive sets it up on this very model, so its sites are the model's by
            # construction (and setting it up here, on two rows, would change it)
            values, hidden, source = {}, None, "the guide"
        else:
            source = f"the guide ({type(guide).__name__})"
            try:
                guide_trace = poutine.trace(guide).get_trace(head)
            except RuntimeError as error:
                if isinstance(error, getattr(torch, "OutOfMemoryError", ())):
                    raise
                raise ValueError(f"{source} failed on the first rows of x ({error}); was it fitted to this model?") from error
            values = {
                name: site["value"].shape
                for name, site in guide_trace.nodes.items()
                if site["type"] == "sample" and not site_is_subsample(site) and not site["infer"].get("is_auxiliary") and torch.is_tensor(site["value"])
            }
            hidden = _guide_hidden_sites(guide)
    model_sites = {name: site for name, site in model_trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site)}
    redo = "sample this model anew" if source.endswith("samples") else "fit a new guide to this one"
    advice = f"it was fitted to a different model (another architecture or prior?): predict with the model it was fitted to, or {redo}"
    extra = [name for name in values if name not in model_sites]
    if extra:
        latent = [n for n, site in model_sites.items() if not site["is_observed"] and n != obs_name]
        raise ValueError(f"the model does not sample the latent site(s) {extra} of {source} (the model's latent sites: {latent}): {advice}")
    for name, shape in values.items():
        site = model_sites[name]
        if name == obs_name or name in observed or site["is_observed"] or not _is_global(site, data_plate):
            continue
        if not _fits(shape, site):
            expected = tuple(site["fn"].batch_shape + site["fn"].event_shape)
            raise ValueError(f"site {name!r} has shape {tuple(shape)} in {source} but {expected} in the model: {advice}")
    if hidden is not None:
        missing = [name for name, site in model_sites.items() if not site["is_observed"] and name != obs_name and name not in observed and name not in values and name not in hidden]
        if missing:
            raise ValueError(
                f"the model samples latent site(s) {missing} that {source} does not cover: {advice} "
                f"(a site left to the prior on purpose belongs in the guide's hide=[...])"
            )
    if guide is None or samples is not None or isinstance(guide, SampleGuide) or getattr(guide, "prototype_trace", True) is not None:
        # (a guide not set up yet covers the model's sites by construction, see above)
        _check_unsampleable_sites_covered(model_sites, values, None if guide is None and samples is None else source)
    return model_trace.nodes["_RETURN"]["value"]
