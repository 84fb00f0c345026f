"""Likelihoods: the observation site, the data plate and prediction aggregation.

A likelihood is called inside the model with the network's output. It opens the data
plate with the dataset size, so a minibatch of ``n`` out of ``N`` examples is scaled by
``N / n`` and the ELBO (or log-joint) estimated from a minibatch is unbiased for the full
data one. After inference it turns per-sample network outputs into a posterior
predictive: mean, standard deviation, samples and the per-example log predictive density.
"""

import math
from dataclasses import dataclass
from typing import Optional, Union

import pyro
import pyro.distributions as dist
import torch

from pyrozoo.data.validation import check_class_labels
from pyrozoo.distributions.util import distribution_to
from pyrozoo.utils import deprecated_aliases


@dataclass
class PosteriorPredictive:
    """Monte Carlo summary of a posterior predictive distribution.

    :ivar mean: predictive mean (regression: of ``y``; classification: of the class probabilities).
    :ivar std: predictive standard deviation (regression: total, epistemic + aleatoric;
        classification: across posterior samples of the class probabilities).
    :ivar samples: ``(S, n, ...)`` draws (regression: of ``y``; classification: class probabilities).
    """

    mean: torch.Tensor
    std: torch.Tensor
    samples: torch.Tensor


class Likelihood:
    """Base class. Subclasses define :meth:`predictive_distribution` and aggregation.

    :param int dataset_size: number of training examples ``N``; the data plate scales a
        batch of ``n`` examples by ``N / n``. ``None`` means "the batch is the whole data set".
    :param str name: name of the observation site.
    :param str plate_name: name of the data plate.
    """

    def __init__(self, dataset_size: Optional[int] = None, *, name: str = "obs", plate_name: str = "data"):
        if dataset_size is not None and (not isinstance(dataset_size, int) or dataset_size <= 0):
            raise ValueError(f"dataset_size must be a positive int or None, got {dataset_size!r}")
        self.dataset_size = dataset_size
        self.name = name
        self.plate_name = plate_name
        self._arange_cache = None

    # -- inside the model ----------------------------------------------------------------
    def __call__(self, predictions: torch.Tensor, obs: Optional[torch.Tensor] = None, subsample: Optional[torch.Tensor] = None):
        """Observes ``obs`` (or samples it when ``None``) under the data plate.

        :param predictions: network output for a batch, leading dimension ``n``.
        :param obs: targets for the batch, or ``None`` to sample them.
        :param subsample: indices of the batch in the data set (only their number matters
            for the scaling; pass them when other sites are local to the data plate).
        """
        if predictions.dim() == 0:
            raise ValueError("predictions must have a leading batch dimension")
        n = predictions.shape[0]
        if obs is not None:
            obs = self.check_obs(predictions, obs)
        latents = {k: pyro.sample(name, prior) for k, (name, prior) in self.latent_sites(predictions).items()}
        # Predicting (obs=None) for more points than the training set has is fine: the
        # N/n scaling only matters when observing.
        scaled = obs is not None or self.dataset_size is None or n <= self.dataset_size
        with self.plate(n, subsample, predictions.device) if scaled else pyro.plate(self.plate_name, n):
            return pyro.sample(self.name, self.predictive_distribution(predictions, **latents), obs=obs)

    def scaled_log_likelihood(self, predictions: torch.Tensor, obs: torch.Tensor, latents: dict) -> torch.Tensor:
        """``(N / n) sum_i log p(y_i | f_i)``: what the observation site contributes to an
        ELBO or log-joint (the same quantity Pyro computes from the site under the plate)."""
        n = predictions.shape[0]
        obs = self.check_obs(predictions, obs)
        lp = self.predictive_distribution(predictions, **latents).log_prob(obs).sum()
        N = self.dataset_size
        if N is None:
            return lp
        if n > N:
            raise ValueError(f"batch of {n} examples is larger than dataset_size={N}")
        return lp * (N / n)

    def plate(self, n: int, subsample: Optional[torch.Tensor] = None, device=None) -> pyro.plate:
        N = self.dataset_size
        if N is None:
            if subsample is not None and len(subsample) != n:
                raise ValueError(f"subsample has {len(subsample)} indices for a batch of {n}")
            return pyro.plate(self.plate_name, n)
        if n > N:
            raise ValueError(f"batch of {n} examples is larger than dataset_size={N}")
        if subsample is None:
            # Without explicit indices Pyro would draw a random permutation of N every step;
            # only the count matters for scaling, so hand it a cached arange instead.
            cache = self._arange_cache
            if cache is None or cache.shape[0] < n or cache.device != torch.device(device or "cpu"):
                cache = self._arange_cache = torch.arange(max(n, 1), device=device)
            subsample = cache[:n]
        elif len(subsample) != n:
            raise ValueError(f"subsample has {len(subsample)} indices for a batch of {n}")
        return pyro.plate(self.plate_name, N, subsample=subsample)

    def latent_sites(self, predictions: torch.Tensor) -> dict:
        """The likelihood's own global latent variables (e.g. a noise precision):
        ``{keyword of predictive_distribution: (site name, prior)}``."""
        return {}

    def check_obs(self, predictions: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return obs

    def predictive_distribution(self, predictions: torch.Tensor, **latents) -> dist.Distribution:
        """Distribution of the targets given network outputs; batch shape ``(n,)``."""
        raise NotImplementedError

    # -- after inference -----------------------------------------------------------------
    def aggregate(self, prediction_samples: torch.Tensor, latent_samples: Optional[dict] = None) -> PosteriorPredictive:
        """Summarises ``(S, n, ...)`` network outputs drawn under the posterior."""
        raise NotImplementedError

    def log_predictive(self, prediction_samples: torch.Tensor, obs: torch.Tensor, latent_samples: Optional[dict] = None) -> torch.Tensor:
        """Per-example ``log (1/S) sum_s p(y | x, w_s)``, shape ``(n,)``."""
        latent_samples = latent_samples or {}
        S = prediction_samples.shape[0]
        lps = []
        for s in range(S):
            latents = {k: v[s] for k, v in latent_samples.items()}
            obs_s = self.check_obs(prediction_samples[s], obs)
            lps.append(self.predictive_distribution(prediction_samples[s], **latents).log_prob(obs_s))
        return torch.logsumexp(torch.stack(lps), 0) - math.log(S)


def _is_nonnegative(support) -> bool:
    lower = getattr(support, "lower_bound", None)
    return support.event_dim == 0 and isinstance(lower, (int, float)) and lower >= 0


class GaussianLikelihood(Likelihood):
    """Homoscedastic Gaussian regression, ``y ~ N(f(x), 1/precision)``.

    :param precision: the noise precision: a positive float (fixed), or a distribution with
        positive support, which makes it a global latent site ``"noise_precision"`` with that
        prior (the UCI protocol uses a Gamma prior; a guide then infers it).
    """

    PRECISION_SITE = "noise_precision"

    def __init__(self, dataset_size: Optional[int] = None, precision: Union[float, dist.Distribution] = 1.0, **kwargs):
        super().__init__(dataset_size, **kwargs)
        if isinstance(precision, torch.distributions.Distribution):
            if precision.batch_shape != () or precision.event_shape != ():
                raise ValueError("the precision prior must be univariate (empty batch and event shape)")
            if not _is_nonnegative(precision.support):
                raise ValueError(f"the precision prior must have positive support, got {precision.support}")
            self.precision_prior = precision
            self.precision = None
        else:
            precision = float(precision)
            if not (precision > 0 and math.isfinite(precision)):
                raise ValueError(f"precision must be positive and finite, got {precision}")
            self.precision_prior = None
            self.precision = precision
        self._prior_cache = {}

    def latent_sites(self, predictions):
        if self.precision_prior is None:
            return {}
        key = (predictions.device, predictions.dtype)
        prior = self._prior_cache.get(key)
        if prior is None:
            prior = self._prior_cache[key] = distribution_to(self.precision_prior, *key)
        return {"precision": (self.PRECISION_SITE, prior)}

    def check_obs(self, predictions, obs):
        if obs.shape != predictions.shape:
            if predictions.dim() == 2 and predictions.shape[1] == 1 and obs.shape == predictions.shape[:1]:
                return obs.unsqueeze(-1)
            raise ValueError(
                f"Gaussian likelihood: targets of shape {tuple(obs.shape)} do not match network output "
                f"of shape {tuple(predictions.shape)}"
            )
        return obs

    def predictive_distribution(self, predictions, precision=None):
        if precision is None:
            precision = self.precision
        scale = precision ** -0.5 if isinstance(precision, float) else precision.rsqrt()
        if torch.is_tensor(scale) and scale.dim() > 0:
            # broadcasting over the batch: one precision per leading sample dimension
            scale = scale.reshape(scale.shape + (1,) * (predictions.dim() - scale.dim()))
        return dist.Normal(predictions, scale).to_event(predictions.dim() - 1)

    def _noise_variance(self, latent_samples, S, like):
        if self.precision_prior is None:
            return torch.full((S,), 1.0 / self.precision, dtype=like.dtype, device=like.device)
        return 1.0 / latent_samples["precision"].reshape(S)

    def aggregate(self, prediction_samples, latent_samples=None):
        S = prediction_samples.shape[0]
        noise_var = self._noise_variance(latent_samples or {}, S, prediction_samples)
        shape = (S,) + (1,) * (prediction_samples.dim() - 1)
        mean = prediction_samples.mean(0)
        epistemic = prediction_samples.var(0, unbiased=False) if S > 1 else torch.zeros_like(mean)
        std = (epistemic + noise_var.mean()).sqrt()
        samples = prediction_samples + noise_var.sqrt().reshape(shape) * torch.randn_like(prediction_samples)
        return PosteriorPredictive(mean, std, samples)

    def log_predictive(self, prediction_samples, obs, latent_samples=None):
        S = prediction_samples.shape[0]
        obs = self.check_obs(prediction_samples[0], obs)
        noise_var = self._noise_variance(latent_samples or {}, S, prediction_samples)
        shape = (S,) + (1,) * (prediction_samples.dim() - 1)
        lp = dist.Normal(prediction_samples, noise_var.sqrt().reshape(shape)).log_prob(obs.unsqueeze(0))
        lp = lp.reshape(S, lp.shape[1], -1).sum(-1)
        return torch.logsumexp(lp, 0) - math.log(S)

    def predictive_cdf(self, prediction_samples, obs, latent_samples=None):
        """``F(y) = (1/S) sum_s Phi((y - f_s) sqrt(tau_s))``: the posterior predictive CDF
        (an equal-weight mixture over the draws) at the observed targets, shape ``(n, ...)``
        (the probability integral transform, for calibration checks)."""
        S = prediction_samples.shape[0]
        obs = self.check_obs(prediction_samples[0], obs)
        noise_var = self._noise_variance(latent_samples or {}, S, prediction_samples)
        shape = (S,) + (1,) * (prediction_samples.dim() - 1)
        return dist.Normal(prediction_samples, noise_var.sqrt().reshape(shape)).cdf(obs.unsqueeze(0)).mean(0)


class CategoricalLikelihood(Likelihood):
    """Classification: ``y ~ Categorical(logits=f(x))``; targets are integer class labels."""

    def check_obs(self, predictions, obs):
        if predictions.dim() < 2:
            raise ValueError(f"Categorical likelihood expects logits of shape (n, classes), got {tuple(predictions.shape)}")
        if obs.shape != predictions.shape[:-1]:
            raise ValueError(
                f"Categorical likelihood: labels of shape {tuple(obs.shape)} do not match logits of shape "
                f"{tuple(predictions.shape)} (expected labels of shape {tuple(predictions.shape[:-1])})"
            )
        if obs.is_floating_point() or obs.is_complex() or obs.dtype == torch.bool:
            raise TypeError(f"Categorical likelihood: labels must be an integer tensor, got {obs.dtype}")
        return obs

    def check_labels(self, obs: torch.Tensor, num_classes: int) -> None:
        """Raises unless ``obs`` are integer class labels in ``[0, num_classes - 1]``
        (``num_classes``: the last dimension of the network output), naming the labels found
        outside that range. It reads the labels back from the device, so it runs once per
        data set (:func:`~pyrozoo.inference.evaluate`, :meth:`log_predictive`), not in the
        observation site that every training step calls, which checks shape and dtype only."""
        check_class_labels("Categorical likelihood: the labels", obs, num_classes)

    def predictive_distribution(self, predictions):
        return dist.Categorical(logits=predictions).to_event(predictions.dim() - 2)

    def aggregate(self, prediction_samples, latent_samples=None):
        probs = prediction_samples.softmax(-1)
        std = probs.std(0, unbiased=False) if probs.shape[0] > 1 else torch.zeros_like(probs[0])
        return PosteriorPredictive(probs.mean(0), std, probs)

    def log_predictive(self, prediction_samples, obs, latent_samples=None):
        S = prediction_samples.shape[0]
        obs = self.check_obs(prediction_samples[0], obs)
        self.check_labels(obs, prediction_samples.shape[-1])  # gather would index out of range
        logp = prediction_samples.log_softmax(-1)
        lp = logp.gather(-1, obs.unsqueeze(0).expand(S, *obs.shape).unsqueeze(-1)).squeeze(-1)
        return torch.logsumexp(lp, 0) - math.log(S)

__getattr__ = deprecated_aliases("pyrozoo.models.likelihoods", {"Gaussian": lambda: GaussianLikelihood, "Categorical": lambda: CategoricalLikelihood})
