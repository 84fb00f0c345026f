"""What a baseline exposes so that it is scored like the zoo's methods.

The zoo's methods predict through :func:`pyrozoo.inference.predict` / ``evaluate``: ``S``
posterior draws give network outputs ``f`` of shape ``(S, n, ...)`` at the test inputs (and
draws of the likelihood's latent variables, e.g. the Gaussian noise precision), and the
model's likelihood turns them into the predictive mixture ``(1/S) sum_s p(y | f_s, tau_s)``.
A baseline trained outside Pyro (Laplace, IVON, a deep ensemble) provides the same two
things, :meth:`Baseline.sample_outputs` and a :attr:`Baseline.likelihood` of
:mod:`pyrozoo.models` (used for its predictive only), and is then predicted, evaluated
(:func:`pyrozoo.inference.prediction.evaluate_outputs`: the same metrics and calibration
records as ``evaluate``) and split into aleatoric and epistemic uncertainty by the same code.
"""

from typing import Dict, Tuple

import torch

from pyrozoo.data.validation import check_finite, check_nonempty
from pyrozoo.inference.prediction import evaluate_outputs
from pyrozoo.inference.uncertainty_decomposition import classification_uncertainty, regression_uncertainty
from pyrozoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood, Likelihood, PosteriorPredictive

__all__ = ["Baseline", "check_likelihood"]


def check_likelihood(likelihood) -> Likelihood:
    """``likelihood`` if it is a :class:`~pyrozoo.models.GaussianLikelihood` or :class:`~pyrozoo.models.CategoricalLikelihood`, else a clear error."""
    if not isinstance(likelihood, (GaussianLikelihood, CategoricalLikelihood)):
        raise TypeError(
            f"baselines support a Gaussian (regression) or Categorical (classification) likelihood from pyrozoo.models, got {type(likelihood).__name__}"
        )
    return likelihood


class Baseline:
    """A posterior predictive from outside Pyro. Subclasses set :attr:`likelihood` and implement
    :meth:`sample_outputs`; the rest is shared.

    :ivar likelihood: the observation model (:class:`~pyrozoo.models.GaussianLikelihood` with a fixed
        precision or a precision prior, whose draws :meth:`sample_outputs` returns, or
        :class:`~pyrozoo.models.CategoricalLikelihood`).
    """

    likelihood: Likelihood

    def sample_outputs(self, x: torch.Tensor, num_samples: int = 100) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """``(f, latents)``: network outputs ``f`` of shape ``(S, n, ...)`` at ``x`` under ``S``
        posterior draws (logits for a classifier, the mean of ``y`` for a regression), and the
        likelihood's latent values per draw (``{"precision": (S,)}`` for a Gaussian whose noise
        precision is learned; ``{}`` otherwise)."""
        raise NotImplementedError

    def _draws(self, caller: str, x: torch.Tensor, num_samples: int):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"{caller}: num_samples must be an int >= 1, got {num_samples!r}")
        if not torch.is_tensor(x):
            raise TypeError(f"{caller}: x must be a tensor, got {type(x).__name__}")
        check_nonempty(f"{caller}: x", x, f"there is nothing to predict; pass at least one input row to {caller}")
        check_finite(f"{caller}: x", x)
        with torch.no_grad():
            f, latents = self.sample_outputs(x, num_samples)
        return f.detach(), {k: v.detach() for k, v in latents.items()}

    def predict(self, x: torch.Tensor, num_samples: int = 100) -> PosteriorPredictive:
        """Predictive mean, standard deviation and samples, as :func:`pyrozoo.inference.predict` returns them."""
        f, latents = self._draws("predict", x, num_samples)
        return self.likelihood.aggregate(f, latents)

    def evaluate(self, x: torch.Tensor, y: torch.Tensor, num_samples: int = 100, y_scale: float = 1.0, y_shift: float = 0.0) -> Dict[str, float]:
        """The metrics of :func:`pyrozoo.inference.evaluate` (``rmse`` and ``test_ll`` in the
        original units of targets standardised as ``(y - y_shift) / y_scale``; ``accuracy``,
        ``error``, ``test_ll`` and ``ece`` for a classifier), recorded for calibration inside
        :func:`~pyrozoo.inference.prediction.record_predictive` like the zoo's methods."""
        f, latents = self._draws("evaluate", x, num_samples)
        if not torch.is_tensor(y) or len(y) != len(x):
            raise ValueError(f"evaluate: pass one target per input row (x has {len(x)} rows, y {len(y) if torch.is_tensor(y) else type(y).__name__})")
        return evaluate_outputs(self.likelihood, f, y, latents, y_scale, y_shift, outputs_at=lambda x_other: self._draws("outputs_at", x_other, num_samples)[0])

    def uncertainty(self, x: torch.Tensor, num_samples: int = 100) -> Dict[str, torch.Tensor]:
        """Total, aleatoric and epistemic uncertainty per example, as :func:`pyrozoo.inference.uncertainty`
        splits it: entropies in nats (classifier) or variances in the output's units (regression)."""
        f, latents = self._draws("uncertainty", x, num_samples)
        if isinstance(self.likelihood, CategoricalLikelihood):
            return classification_uncertainty(f, logits=True)
        if "precision" in latents:
            noise = 1.0 / latents["precision"].reshape(f.shape[0]).to(f.dtype)
        else:
            noise = 1.0 / self.likelihood.precision
        return regression_uncertainty(f, noise)
