"""Predictive uncertainty split into its aleatoric and epistemic parts.

For posterior draws ``w_s`` (``s = 1..S``, from a guide or a sampler) the predictive
distribution is the equal-weight mixture ``p(y | x) = (1/S) sum_s p(y | x, w_s)``. Its
uncertainty splits into the part the noise of the data causes whatever the weights
(aleatoric) and the part that comes from not knowing the weights (epistemic), as in
Depeweg et al., "Decomposition of Uncertainty in Bayesian Deep Learning for Efficient and
Risk-sensitive Learning" (ICML 2018):

* classification, by entropy (in nats), with ``p_s = p(y | x, w_s)`` and ``p = (1/S) sum_s p_s``::

      H[p]  =  (1/S) sum_s H[p_s]  +  (1/S) sum_s KL(p_s || p)
      total =  aleatoric           +  epistemic (the mutual information I[y; w | x] >= 0)

* regression with a Gaussian likelihood ``y ~ N(f_s(x), sigma_s^2)``, by variance (the law
  of total variance for the mixture)::

      Var[y] =  (1/S) sum_s sigma_s^2  +  (1/S) sum_s (f_s - (1/S) sum_r f_r)^2
      total  =  aleatoric              +  epistemic

:func:`classification_uncertainty` and :func:`regression_uncertainty` work on sample
tensors; :func:`uncertainty` draws them from a model and its guide (or stored samples) and
picks the split that fits the model's likelihood.
"""

import math
from numbers import Real
from typing import Dict, Optional, Union

import torch

from pyrozoo.inference.prediction import _likelihood_latents, _site_draws, posterior_samples
from pyrozoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood

__all__ = ["classification_uncertainty", "regression_uncertainty", "uncertainty"]


def _split(total: torch.Tensor, aleatoric: torch.Tensor, epistemic: torch.Tensor) -> Dict[str, torch.Tensor]:
    return {"total": total, "aleatoric": aleatoric, "epistemic": epistemic}


def classification_uncertainty(probs: torch.Tensor, *, logits: bool = False) -> Dict[str, torch.Tensor]:
    """Entropy decomposition of a classifier's posterior predictive, per example, in nats.

    :param probs: ``(S, n, K)`` class probabilities, one row of ``K`` per posterior draw
        ``s`` and example (any batch shape between ``S`` and ``K`` works: ``(S, ..., K)``);
        with ``logits=True``, unnormalised log-probabilities (the network's output under
        a :class:`~pyrozoo.models.CategoricalLikelihood` likelihood), normalised here by a log-softmax.
    :returns:
        ``{"total", "aleatoric", "epistemic"}``, each of shape ``(n,)`` (``probs.shape[1:-1]``)::

            total     = H[p]               = -sum_k p_k log p_k,      p = (1/S) sum_s p_s
            aleatoric = (1/S) sum_s H[p_s]   (expected entropy)
            epistemic = (1/S) sum_s KL(p_s || p)   (mutual information between y and the weights)

    so ``total = aleatoric + epistemic`` (Depeweg et al. 2018). ``0 log 0`` counts as 0: a
    one-hot ``p_s`` has entropy 0. The epistemic part is computed as the mean KL divergence
    (not as the difference of two entropies), so it stays accurate when it is small, and is
    clamped at 0 against rounding.
    """
    if not torch.is_tensor(probs) or probs.dim() < 2:
        raise ValueError(f"classification_uncertainty: expected a tensor of shape (S, n, K), got {getattr(probs, 'shape', type(probs).__name__)}")
    if not probs.is_floating_point():
        probs = probs.to(torch.get_default_dtype())
    S = probs.shape[0]
    if logits:
        log_p = probs.log_softmax(-1)
        p = log_p.exp()
        log_mean = torch.logsumexp(log_p, 0) - math.log(S)
        mean = log_mean.exp()
        plogp = p * log_p  # finite: log_p > -inf for finite logits
        total = -(mean * log_mean).sum(-1)
        cross = p * log_mean.unsqueeze(0)
    else:
        if (probs < 0).any() or not torch.allclose(probs.sum(-1), torch.ones((), dtype=probs.dtype, device=probs.device), atol=1e-4):
            raise ValueError("classification_uncertainty: probs must be nonnegative and sum to 1 over the last dimension (class probabilities); for network outputs (logits) pass logits=True")
        mean = probs.mean(0)
        plogp = torch.xlogy(probs, probs)  # 0 log 0 = 0
        total = -torch.xlogy(mean, mean).sum(-1)
        cross = torch.xlogy(probs, mean.unsqueeze(0))  # p_s > 0 implies mean > 0
    aleatoric = -plogp.sum(-1).mean(0)
    epistemic = (plogp - cross).sum(-1).mean(0).clamp_min(0.0)
    return _split(total, aleatoric, epistemic)


def regression_uncertainty(means: torch.Tensor, noise_variances: Union[torch.Tensor, float]) -> Dict[str, torch.Tensor]:
    """Variance decomposition of a Gaussian regression's posterior predictive, per example
    and output dimension.

    :param means: ``(S, n, ...)`` network outputs ``f_s(x)``, the mean of ``y`` under draw ``s``.
    :param noise_variances: the observation-noise variance ``sigma_s^2 = 1 / tau_s``: a number
        (fixed noise), a tensor of shape ``(S,)`` (one per draw, e.g. a latent noise
        precision's draws inverted; a 1-D tensor of length ``S`` is always read this way), or
        one that broadcasts to ``means`` (heteroscedastic noise).
    :returns:
        ``{"total", "aleatoric", "epistemic"}``, each of shape ``means.shape[1:]``::

            aleatoric = (1/S) sum_s sigma_s^2                      (expected noise variance)
            epistemic = (1/S) sum_s (f_s - f_bar)^2, f_bar = (1/S) sum_s f_s   (variance of the mean)
            total     = aleatoric + epistemic                      (variance of the predictive mixture)

    (Depeweg et al. 2018; the divisor is ``S``, as in :meth:`~pyrozoo.models.GaussianLikelihood.aggregate`).
    Variances are in the units of the network's output: for targets standardised as
    ``(y - shift) / scale`` multiply by ``scale**2``.
    """
    if not torch.is_tensor(means) or means.dim() < 2:
        raise ValueError(f"regression_uncertainty: expected means of shape (S, n, ...), got {getattr(means, 'shape', type(means).__name__)}")
    if not means.is_floating_point():
        means = means.to(torch.get_default_dtype())
    S = means.shape[0]
    if isinstance(noise_variances, Real):
        noise = torch.as_tensor(float(noise_variances), dtype=means.dtype, device=means.device)
    elif torch.is_tensor(noise_variances):
        noise = noise_variances.to(dtype=means.dtype, device=means.device)
        if noise.dim() == 1 and noise.shape[0] == S:
            noise = noise.reshape((S,) + (1,) * (means.dim() - 1))
    else:
        raise TypeError(f"regression_uncertainty: noise_variances must be a number or a tensor, got {type(noise_variances).__name__}")
    if (noise < 0).any():
        raise ValueError("regression_uncertainty: noise_variances must be nonnegative (variances sigma^2 = 1 / precision, not precisions or log-variances)")
    try:
        noise = noise.expand(means.shape)
    except RuntimeError:
        raise ValueError(f"regression_uncertainty: noise_variances of shape {tuple(noise_variances.shape)} fit neither (S,) = ({S},) nor the means' shape {tuple(means.shape)}") from None
    aleatoric = noise.mean(0)
    epistemic = means.var(0, unbiased=False) if S > 1 else torch.zeros_like(means[0])
    return _split(aleatoric + epistemic, aleatoric, epistemic)


@torch.no_grad()
def uncertainty(model, guide, x: torch.Tensor, num_samples: int = 100, batch_size: Optional[int] = None, *, samples: Optional[Dict[str, torch.Tensor]] = None, obs: Optional[str] = None) -> Dict[str, torch.Tensor]:
    """Total, aleatoric and epistemic predictive uncertainty of ``model`` at ``x``, per example.

    The posterior draws come from :func:`~pyrozoo.inference.posterior_samples` (same
    arguments and checks): ``num_samples`` draws from ``guide`` (any guide, or a sampler's
    stored draws wrapped in :class:`~pyrozoo.inference.SampleGuide`), or the latent values
    in ``samples`` (each with a leading sample dimension, e.g. a sampler's stored draws);
    ``batch_size`` predicts ``x`` in chunks that share one set of draws.

    * :class:`~pyrozoo.models.CategoricalLikelihood` likelihood: :func:`classification_uncertainty` of
      the network's logits; entropies in nats, each of shape ``(n,)``.
    * :class:`~pyrozoo.models.GaussianLikelihood` likelihood: :func:`regression_uncertainty` of the
      network outputs, with noise variance ``1 / tau`` from the fixed precision or from the
      draws of the latent ``"noise_precision"`` site; variances (in the network's output
      units) of shape ``(n, ...)``, the output's shape.
    * any other Pyro model (no pyrozoo likelihood): the split of its observed site (``obs``
      names it where the model observes several), from the distribution the site gives each
      example under each draw (:mod:`~pyrozoo.inference.site_predictive`): a Categorical or
      Bernoulli site by entropy (:func:`classification_uncertainty` of its class
      probabilities), any site whose distribution has a mean and a variance (Normal, Poisson,
      Student-t, ...) by the law of total variance (:func:`regression_uncertainty` of its
      means and variances: the aleatoric part is the expected variance of the site).

    :returns: ``{"total", "aleatoric", "epistemic"}`` of tensors on ``x``'s device
        (``pandas.DataFrame({k: v.cpu().numpy() for k, v in result.items()})`` makes a
        table of one-dimensional ones).
    """
    likelihood = getattr(model, "likelihood", None)
    if likelihood is None:
        return _site_uncertainty(model, guide, x, num_samples, batch_size, samples, obs)
    if not isinstance(likelihood, (CategoricalLikelihood, GaussianLikelihood)):
        raise TypeError(f"uncertainty: the model's likelihood must be a Categorical or a Gaussian, got {type(likelihood).__name__}; for other likelihoods use classification_uncertainty / regression_uncertainty on posterior_samples(...)")
    draws = posterior_samples(model, guide, x, num_samples, batch_size, samples=samples)
    f = draws["_RETURN"]
    if isinstance(likelihood, CategoricalLikelihood):
        return classification_uncertainty(f, logits=True)
    S = f.shape[0]
    if likelihood.precision_prior is None:
        noise = 1.0 / likelihood.precision
    else:
        precision = _likelihood_latents(model, draws, x)["precision"]
        noise = 1.0 / precision.reshape(S).to(dtype=f.dtype)
    return regression_uncertainty(f, noise)


def _site_uncertainty(model, guide, x, num_samples, batch_size, samples, obs) -> Dict[str, torch.Tensor]:
    from pyrozoo.inference import site_predictive as sp

    args, kwargs = sp.model_call(model, x)
    enumerated = sp.data_plate(sp.probe_trace(model, *args, **kwargs), len(x)).enumerated
    if enumerated:
        # each draw would fix the enumerated sites, and their spread would count as epistemic
        raise NotImplementedError(
            f"uncertainty: the model enumerates {list(enumerated)}, whose spread is part of the noise of the data (aleatoric), "
            "which a draw-by-draw split would count as epistemic; write the observation's marginal in the model "
            "(e.g. dist.MixtureSameFamily), whose mean and variance the split then reads")
    sites = _site_draws("uncertainty", model, guide, x, num_samples, batch_size, samples, obs=obs)
    if len(sites) != 1:
        raise ValueError(f"uncertainty: the model observes {sorted(sites)}: name the one to split with obs='...'")
    (draws,) = sites.values()
    if draws.kind == "classification":
        return classification_uncertainty(draws.stacked("probs"))
    means = draws.stacked("means")
    if means is None:
        raise TypeError(
            f"uncertainty: the distribution of site {draws.name!r} has no closed-form mean and variance to split; "
            f"split its draws yourself (posterior_samples(...)[{draws.name!r}])")
    return regression_uncertainty(means, draws.stacked("variances"))
