"""Posterior predictions: samples, predictive summaries and evaluation metrics."""

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
from pyro.infer import Predictive
from pyro.infer.autoguide.initialization import InitMessenger, init_to_sample

from pyrozoo import metrics
from pyrozoo.models.likelihoods import Categorical, Gaussian, PosteriorPredictive


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


def _init_to_sample_or_network(site):
    """A prior sample, or the network's own value where the prior is improper and cannot be
    sampled (log-uniform, ARD): ``Predictive`` runs the model once unconditioned to learn
    its sites' shapes. Sites the guide covers are then overwritten by its draws."""
    try:
        return init_to_sample(site)
    except NotImplementedError:
        from pyrozoo.guides.base import init_to_network

        return init_to_network(site, fallback=init_to_sample)


@torch.no_grad()
def posterior_samples(model, guide, x: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, *, samples: Optional[Dict[str, torch.Tensor]] = None) -> Dict[str, torch.Tensor]:
    """Network outputs (``"_RETURN"``, shape ``(S, n, ...)``) and the likelihood's latent
    variables under ``num_samples`` draws from the guide, via Pyro's ``Predictive``.

    With ``batch_size``, ``x`` is processed in chunks that share one set of posterior
    draws of the guide's (global) latent variables, so memory stays bounded and the chunks
    together are exactly one prediction per draw.

    :param samples: instead of drawing from ``guide``, condition on these values of the
        latent sites (each with a leading sample dimension), e.g.
        ``{k: v[None] for k, v in guide.median().items()}`` for the posterior-median network.
    """
    if num_samples < 1:
        raise ValueError("num_samples must be >= 1")
    names = _latent_names(model, x)
    model_fn = InitMessenger(_init_to_sample_or_network)(model)
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
def predict(model, guide, x: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, *, samples: Optional[Dict[str, torch.Tensor]] = None) -> PosteriorPredictive:
    """Posterior predictive mean, standard deviation and samples (see
    :class:`~pyrozoo.models.PosteriorPredictive`) from the model's likelihood
    (``samples``: fixed latent values instead of guide draws, see :func:`posterior_samples`)."""
    samples = posterior_samples(model, guide, x, num_samples, batch_size, samples=samples)
    return model.likelihood.aggregate(samples["_RETURN"], _likelihood_latents(model, samples, x))


def _likelihood_latents(model, samples, x) -> dict:
    return {key: samples[name] for key, (name, _) in model.likelihood.latent_sites(x[:1]).items()}


@torch.no_grad()
def evaluate(model, guide, x: torch.Tensor, y: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, y_scale: float = 1.0, y_shift: float = 0.0, *, samples: Optional[Dict[str, torch.Tensor]] = None) -> Dict[str, float]:
    """Test metrics from ``num_samples`` posterior draws.

    Regression (:class:`~pyrozoo.models.Gaussian`): ``rmse`` and ``test_ll`` (mean per
    example of ``log (1/S) sum_s N(y | f_s, 1/tau_s)``), in original units when the targets
    were standardised as ``(y - y_shift) / y_scale``. Classification: ``accuracy``,
    ``error`` (percent), ``test_ll`` and ``ece``. ``samples``: fixed latent values instead
    of guide draws (see :func:`posterior_samples`). Inside :func:`record_predictive` it
    also records the predictive quantities calibration needs.
    """
    samples = posterior_samples(model, guide, x, num_samples, batch_size, samples=samples)
    f = samples["_RETURN"]
    latents = _likelihood_latents(model, samples, x)
    likelihood = model.likelihood
    log_pred = likelihood.log_predictive(f, y, latents)
    if isinstance(likelihood, Gaussian):
        mean = likelihood.aggregate(f, latents).mean
        y_col = likelihood.check_obs(mean, y)
        if _RECORDERS:
            _record(PredictiveRecord("regression", pit=likelihood.predictive_cdf(f, y_col, latents).detach().cpu()))
        return {
            "rmse": metrics.rmse(mean * y_scale + y_shift, y_col * y_scale + y_shift),
            # the Jacobian of the standardisation, once per scalar target of an example
            "test_ll": float(log_pred.mean()) - math.log(float(y_scale)) * math.prod(y_col.shape[1:]),
        }
    if isinstance(likelihood, Categorical):
        probs = likelihood.aggregate(f, latents).mean
        acc = metrics.accuracy(probs, y)
        if _RECORDERS:
            _record(PredictiveRecord("classification", probs=probs.detach().cpu(), labels=y.detach().cpu()))
        return {"accuracy": acc, "error": 100.0 * (1.0 - acc), "test_ll": float(log_pred.mean()), "ece": metrics.expected_calibration_error(probs, y)}
    return {"test_ll": float(log_pred.mean())}
