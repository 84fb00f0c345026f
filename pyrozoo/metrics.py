"""Evaluation metrics for regression and classification.

* Against the data: :func:`rmse`, :func:`accuracy`, :func:`expected_calibration_error`,
  :func:`reliability_diagram`, :func:`interval_coverage` (from PIT values) and
  :func:`interval_coverage_from_samples`.
* Against a reference posterior (e.g. long-run HMC), as in the NeurIPS 2021 approximate-inference
  competition (Izmailov et al. 2021, "What are Bayesian neural network posteriors really like?";
  Wilson et al. 2022, "Evaluating approximate inference in Bayesian deep learning"): the
  predictive :func:`agreement` and :func:`total_variation` for classifiers, the predictive
  :func:`wasserstein2_predictive` (or :func:`wasserstein2_gaussian` from moments) for regression,
  and :func:`posterior_moment_errors` against a conjugate model's exact posterior.
* Out-of-distribution detection: :func:`auroc` of any score, and :func:`ood_auroc` of a part of
  the predictive uncertainty split (entropy or mutual information) that
  :mod:`pyrozoo.inference.uncertainty_decomposition` computes. This module imports nothing from the rest of
  the package (``pyrozoo.inference`` imports it), so it takes that split as its input.
"""

import functools
import math
from typing import Dict, Mapping, Sequence, Tuple, Union

import torch

__all__ = [
    "rmse",
    "accuracy",
    "expected_calibration_error",
    "reliability_diagram",
    "log_mean_exp",
    "interval_coverage",
    "pit_from_samples",
    "interval_coverage_from_samples",
    "agreement",
    "total_variation",
    "wasserstein2_predictive",
    "wasserstein2_gaussian",
    "posterior_moment_errors",
    "auroc",
    "ood_auroc",
]


def rmse(mean: torch.Tensor, y: torch.Tensor) -> float:
    """Root mean squared error of point predictions (``mean`` of another shape with as many
    entries, e.g. ``(n, 1)`` against ``(n,)``, is compared elementwise)."""
    if y.numel() == 0:
        raise ValueError(f"rmse: no targets (y has shape {tuple(y.shape)}): there is nothing to score")
    if mean.shape != y.shape:
        if mean.numel() != y.numel():
            raise ValueError(f"rmse: predictions of shape {tuple(mean.shape)} do not match targets of shape {tuple(y.shape)}: pass one prediction per target")
        mean = mean.reshape(y.shape)
    return float(((mean - y) ** 2).mean().sqrt())


def accuracy(probs: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of examples whose most probable class is the label."""
    _check_classification("accuracy", probs, y)
    return float((probs.argmax(-1) == y).float().mean())


def expected_calibration_error(probs: torch.Tensor, y: torch.Tensor, num_bins: int = 15) -> float:
    """ECE (Guo et al. 2017): confidence-weighted gap between accuracy and confidence over
    ``num_bins`` equal-width confidence bins."""
    if num_bins < 1:
        raise ValueError("num_bins must be >= 1")
    _check_classification("expected_calibration_error", probs, y)
    confidence, predicted = probs.max(-1)
    correct = (predicted == y).float()
    bins = torch.clamp((confidence * num_bins).long(), max=num_bins - 1)
    ece = torch.zeros((), dtype=probs.dtype, device=probs.device)
    n = len(y)
    for b in range(num_bins):
        in_bin = bins == b
        count = int(in_bin.sum())
        if count:
            ece += count / n * (correct[in_bin].mean() - confidence[in_bin].mean()).abs()
    return float(ece)


def log_mean_exp(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """``log(mean(exp(x)))`` along ``dim``, stably."""
    return torch.logsumexp(x, dim) - math.log(x.shape[dim])


def interval_coverage(pit: torch.Tensor, levels) -> torch.Tensor:
    """Empirical coverage of central predictive intervals at the nominal ``levels``.

    ``pit`` holds the probability integral transforms ``F(y_i)`` of the observed targets
    under their predictive CDFs. The central interval of probability ``p`` is
    ``[F^{-1}((1 - p)/2), F^{-1}((1 + p)/2)]``, so it contains ``y_i`` exactly when
    ``|F(y_i) - 1/2| <= p/2``; no quantile of the (mixture) predictive is needed. Coverage
    is non-decreasing in the level; for a calibrated predictive it equals the level in
    expectation (the PIT is then uniform).
    """
    levels = torch.as_tensor(levels, dtype=pit.dtype, device=pit.device)
    if (~((levels >= 0) & (levels <= 1))).any():  # NaN fails both comparisons
        raise ValueError(f"nominal levels must lie in [0, 1], got {levels.tolist()}")
    if pit.numel() == 0:
        raise ValueError("interval_coverage: no probability integral transforms (pit is empty): there is nothing to score")
    distance = (pit.reshape(-1) - 0.5).abs()
    return (distance[None, :] <= levels.reshape(-1, 1) / 2).to(pit.dtype).mean(-1)


def reliability_diagram(probs: torch.Tensor, y: torch.Tensor, num_bins: int = 15):
    """Per equal-width confidence bin: mean confidence, accuracy and count (empty bins
    have NaN confidence and accuracy). The bins are those of
    :func:`expected_calibration_error`, which is the count-weighted mean gap between the two."""
    if num_bins < 1:
        raise ValueError("num_bins must be >= 1")
    _check_classification("reliability_diagram", probs, y)
    confidence, predicted = probs.max(-1)
    correct = (predicted == y).to(probs.dtype)
    bins = torch.clamp((confidence * num_bins).long(), max=num_bins - 1)
    count = torch.bincount(bins, minlength=num_bins).to(probs.dtype)
    conf_sum = torch.zeros(num_bins, dtype=probs.dtype, device=probs.device).index_add_(0, bins, confidence)
    acc_sum = torch.zeros(num_bins, dtype=probs.dtype, device=probs.device).index_add_(0, bins, correct)
    return conf_sum / count, acc_sum / count, count


def _check_classification(caller: str, probs: torch.Tensor, y: torch.Tensor) -> None:
    """``probs`` of shape ``(..., K)`` and one label in ``[0, K - 1]`` per row of it."""
    if probs.dim() < 1 or probs.shape[:-1] != y.shape:
        raise ValueError(
            f"{caller}: class probabilities of shape {tuple(probs.shape)} and labels of shape {tuple(y.shape)} do not match "
            f"(expected labels of shape {tuple(probs.shape[:-1])}: one per row of probabilities)"
        )
    if y.numel() == 0:
        raise ValueError(f"{caller}: no examples (the labels are empty): there is nothing to score")
    num_classes = probs.shape[-1]
    low, high = float(y.min()), float(y.max())
    if low < 0 or high > num_classes - 1:
        raise ValueError(f"{caller}: labels range over [{low:g}, {high:g}], outside the {num_classes} classes 0..{num_classes - 1} of the probabilities")


# --- predictive intervals from samples ---------------------------------------------------


def pit_from_samples(samples: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Probability integral transforms of the targets under the empirical predictive distributions
    of ``samples``.

    :param samples: ``(S, *y.shape)`` draws of the predictive distribution of each target, the
        sample dimension first (as :func:`~pyrozoo.inference.posterior_samples` stacks them):
        draws of ``y`` itself, observation noise included, not of the network's mean.
    :param y: the observed targets.
    :returns: the empirical CDF at each target with ties counted half,
        ``(#{s: samples[s] < y} + #{s: samples[s] == y} / 2) / S``, of shape ``y.shape``. A
        target that equals every draw gets 1/2: it is the centre of its (point-mass) predictive.
    """
    samples, y = _check_samples_and_targets("pit_from_samples", samples, y)
    below = (samples < y).sum(0).to(samples.dtype)
    tied = (samples == y).sum(0).to(samples.dtype)
    return (below + 0.5 * tied) / samples.shape[0]


def interval_coverage_from_samples(samples: torch.Tensor, y: torch.Tensor, levels) -> torch.Tensor:
    """Empirical coverage of the central intervals of the empirical predictive distributions at
    the nominal ``levels``: :func:`interval_coverage` of :func:`pit_from_samples`.

    A target lies in the central interval of probability ``p`` of its ``S`` draws when its PIT
    is within ``p/2`` of ``1/2``. For draws and target independent from the same continuous
    predictive the PIT is ``k/S`` with ``k`` uniform on ``0..S``, so the expected coverage is
    ``#{k: |k/S - 1/2| <= p/2} / (S + 1)``, within ``(1 + p) / (S + 1)`` of ``p``.

    :param samples: ``(S, *y.shape)`` predictive draws, sample dimension first (see :func:`pit_from_samples`).
    :returns: one coverage per level, of shape ``(len(levels),)``.
    """
    return interval_coverage(pit_from_samples(samples, y), levels)


# --- against a reference posterior: classification ----------------------------------------


def agreement(probs: torch.Tensor, reference_probs: torch.Tensor) -> float:
    """Fraction of test points at which the predictive distribution and the reference one
    (e.g. HMC's) have the same most probable class: the agreement of the NeurIPS 2021
    approximate-inference competition (Izmailov et al. 2021; Wilson et al. 2022). 1 is best.

    :param probs: ``(n, K)`` (or ``(..., K)``) posterior-averaged class probabilities at the
        test points (logits give the same answer: only the argmax counts). A tie for the most
        probable class goes to its lowest index, here and in the reference.
    :param reference_probs: the reference predictive's, of the same shape.
    """
    _check_predictive_pair("agreement", probs, reference_probs)
    return float((probs.argmax(-1) == reference_probs.argmax(-1)).to(torch.float64).mean())


def total_variation(probs: torch.Tensor, reference_probs: torch.Tensor) -> float:
    """Mean over test points of the total variation distance between the predictive
    distribution ``p`` and the reference one ``q``, ``(1/2) sum_k |p_k - q_k|``, as in the
    NeurIPS 2021 approximate-inference competition (Izmailov et al. 2021; Wilson et al. 2022).
    In ``[0, 1]``; 0 is best.

    :param probs: ``(n, K)`` (or ``(..., K)``) posterior-averaged class probabilities at the
        test points: nonnegative, summing to 1 over ``K``.
    :param reference_probs: the reference predictive's, of the same shape.
    """
    _check_predictive_pair("total_variation", probs, reference_probs)
    for name, p in (("probs", probs), ("reference_probs", reference_probs)):
        if not p.is_floating_point() or (p < 0).any() or not torch.allclose(p.sum(-1), torch.ones((), dtype=p.dtype, device=p.device), atol=1e-4):
            raise ValueError(f"total_variation: {name} must be class probabilities, nonnegative and summing to 1 over the last dimension; for network outputs (logits) pass their softmax")
    return float(0.5 * (probs - reference_probs).abs().sum(-1).to(torch.float64).mean())


def _check_predictive_pair(caller: str, probs: torch.Tensor, reference_probs: torch.Tensor) -> None:
    if not (torch.is_tensor(probs) and torch.is_tensor(reference_probs)):
        raise TypeError(f"{caller}: pass two tensors of class probabilities, got {type(probs).__name__} and {type(reference_probs).__name__}")
    if probs.dim() < 1 or probs.shape != reference_probs.shape:
        raise ValueError(
            f"{caller}: predictive probabilities of shape {tuple(probs.shape)} and reference probabilities of shape {tuple(reference_probs.shape)} "
            "do not match: pass both as (n, K), the posterior-averaged class probabilities at the same n test points "
            "(per-draw probabilities of shape (S, n, K) are averaged over S first)"
        )
    if probs.numel() == 0:
        raise ValueError(f"{caller}: no test points (the probabilities of shape {tuple(probs.shape)} are empty): there is nothing to score")


# --- against a reference posterior: regression --------------------------------------------


def wasserstein2_predictive(samples: torch.Tensor, reference_samples: torch.Tensor, *, per_point: bool = False) -> Union[float, torch.Tensor]:
    """Mean over test points of the 2-Wasserstein distance between the empirical predictive
    distribution of ``samples`` and that of ``reference_samples`` (e.g. HMC's).

    In one dimension the optimal coupling pairs equal quantiles, so
    ``W2(P, Q)^2 = int_0^1 (F_P^{-1}(u) - F_Q^{-1}(u))^2 du``. The quantile function of ``S``
    draws is the step function equal to the ``i``-th smallest draw on ``((i-1)/S, i/S]``; with
    as many draws on both sides this gives the mean squared difference of the sorted draws.
    With ``S != R`` both quantile functions are evaluated on the common grid of their
    breakpoints ``{i/S} U {j/R}``, on each cell of which both are constant, so the result is
    still exact (the optimal-transport distance between the two sets of equally weighted draws),
    not an interpolation.

    The reported number averages the per-point distance ``W2`` (not ``W2^2``) over test points,
    as the NeurIPS 2021 approximate-inference competition averages its regression distance
    over test inputs (Wilson et al. 2022). Its scoring script computed that per-point
    distance with ``scipy.stats.wasserstein_distance``, which is ``W1``; numbers from it are
    not comparable with these.

    :param samples: ``(S, ...)`` predictive draws of the approximate posterior, the sample
        dimension first (as :func:`~pyrozoo.inference.posterior_samples` stacks them); every
        entry of the trailing shape is one test point (the competition's files hold
        ``(n, S)``: transpose them).
    :param reference_samples: ``(R, ...)`` draws of the reference predictive at the same test points.
    :param per_point: return the tensor of per-point distances (shape ``samples.shape[1:]``)
        instead of their mean.
    """
    x, y = _check_predictive_samples("wasserstein2_predictive", samples, reference_samples)
    x, y = x.sort(0).values, y.sort(0).values
    S, R = x.shape[0], y.shape[0]
    # breakpoints i/S and j/R, in integer units of 1/lcm(S, R) so that equal ones merge exactly
    per_x, per_y = R // math.gcd(S, R), S // math.gcd(S, R)
    ends = torch.cat([torch.arange(1, S + 1) * per_x, torch.arange(1, R + 1) * per_y]).unique()
    widths = torch.diff(ends, prepend=ends.new_zeros(1))
    # the cell ending at ``end`` lies in the step ((i-1)/S, i/S] with i = ceil(end / per_x)
    ix = ((ends + per_x - 1) // per_x - 1).to(x.device)
    iy = ((ends + per_y - 1) // per_y - 1).to(x.device)
    weights = (widths.to(torch.float64) / (S * per_x)).to(dtype=x.dtype, device=x.device).reshape((-1,) + (1,) * (x.dim() - 1))
    w2 = (weights * (x[ix] - y[iy]) ** 2).sum(0).sqrt()
    return w2 if per_point else float(w2.to(torch.float64).mean())


def wasserstein2_gaussian(mean1, std1, mean2, std2, *, per_point: bool = False) -> Union[float, torch.Tensor]:
    """Mean over test points of the 2-Wasserstein distance between the 1-D Gaussians
    ``N(mean1, std1^2)`` and ``N(mean2, std2^2)``: ``W2^2 = (mean1 - mean2)^2 + (std1 - std2)^2``
    (the quantile functions are ``mean + std * Phi^{-1}(u)``).

    For predictives stored as moments (e.g. the mean and the square root of the total variance
    of :func:`~pyrozoo.inference.regression_uncertainty`). It is the distance between the
    Gaussians with those moments: a mixture predictive that is not Gaussian can be farther
    from the reference (compare :func:`wasserstein2_predictive` of draws). Arguments broadcast
    against each other; every entry of the broadcast shape is one test point.

    :param per_point: return the tensor of per-point distances instead of their mean.
    """
    device = next((t.device for t in (mean1, std1, mean2, std2) if torch.is_tensor(t)), None)
    tensors = [torch.as_tensor(t, device=device) for t in (mean1, std1, mean2, std2)]
    floating = [t.dtype for t in tensors if t.is_floating_point()]
    dtype = functools.reduce(torch.promote_types, floating) if floating else torch.get_default_dtype()
    try:
        mean1, std1, mean2, std2 = torch.broadcast_tensors(*[t.to(dtype) for t in tensors])
    except RuntimeError:
        shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
        raise ValueError(f"wasserstein2_gaussian: means and standard deviations of shapes {shapes} do not broadcast: pass one (mean, std) pair per test point on each side") from None
    if mean1.numel() == 0:
        raise ValueError("wasserstein2_gaussian: no test points (the moments are empty): there is nothing to score")
    if (~(std1 >= 0)).any() or (~(std2 >= 0)).any():
        raise ValueError("wasserstein2_gaussian: standard deviations must be nonnegative (pass std = sqrt(variance), not a variance's logarithm)")
    w2 = torch.hypot(mean1 - mean2, std1 - std2)
    return w2 if per_point else float(w2.to(torch.float64).mean())


def _check_predictive_samples(caller: str, samples: torch.Tensor, reference_samples: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two sets of draws ``(S, ...)`` and ``(R, ...)`` at the same test points, in one floating dtype."""
    if not (torch.is_tensor(samples) and torch.is_tensor(reference_samples)):
        raise TypeError(f"{caller}: pass two tensors of predictive draws, got {type(samples).__name__} and {type(reference_samples).__name__}")
    if samples.dim() < 1 or reference_samples.dim() < 1 or samples.shape[1:] != reference_samples.shape[1:]:
        raise ValueError(
            f"{caller}: draws of shape {tuple(samples.shape)} and reference draws of shape {tuple(reference_samples.shape)} do not match: "
            "pass both with the sample dimension first, (S, n) and (R, n) for the same n test points (the numbers of draws may differ; "
            "arrays laid out (n, S) must be transposed)"
        )
    if samples.shape[0] == 0 or reference_samples.shape[0] == 0 or samples[0].numel() == 0:
        raise ValueError(f"{caller}: no draws or no test points (shapes {tuple(samples.shape)} and {tuple(reference_samples.shape)}): there is nothing to compare")
    dtype = torch.promote_types(samples.dtype, reference_samples.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    samples, reference_samples = samples.to(dtype), reference_samples.to(dtype=dtype, device=samples.device)
    if not (torch.isfinite(samples).all() and torch.isfinite(reference_samples).all()):
        raise ValueError(f"{caller}: the draws contain NaN or infinite values: a distance between them is undefined")
    return samples, reference_samples


def _check_samples_and_targets(caller: str, samples: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    if not (torch.is_tensor(samples) and torch.is_tensor(y)):
        raise TypeError(f"{caller}: pass tensors of predictive draws and targets, got {type(samples).__name__} and {type(y).__name__}")
    if samples.dim() != y.dim() + 1 or samples.shape[1:] != y.shape:
        raise ValueError(
            f"{caller}: draws of shape {tuple(samples.shape)} do not match targets of shape {tuple(y.shape)}: "
            f"pass the draws as (S, {', '.join(str(d) for d in y.shape)}), the sample dimension first and then the targets' shape"
        )
    if samples.shape[0] == 0 or y.numel() == 0:
        raise ValueError(f"{caller}: no draws or no targets (shapes {tuple(samples.shape)} and {tuple(y.shape)}): there is nothing to score")
    if not samples.is_floating_point():
        samples = samples.to(torch.get_default_dtype())
    return samples, y.to(device=samples.device)


# --- against an exact posterior (conjugate models) -----------------------------------------


def posterior_moment_errors(samples_or_mean_cov, exact_mean: torch.Tensor, exact_cov: torch.Tensor) -> Dict[str, float]:
    """Relative errors of an approximate posterior's mean and covariance against the exact
    posterior of a conjugate model (e.g. Bayesian linear regression with known noise)::

        mean: ||m - m*||_2 / ||m*||_2        cov: ||C - C*||_F / ||C*||_F

    (``||.||_F`` the Frobenius norm, which for a vector is the Euclidean one).

    :param samples_or_mean_cov: either posterior draws of shape ``(S, D)``, ``S >= 2``, whose
        sample mean and covariance (divisor ``S - 1``) are compared, so that ``S`` exact draws
        give errors of order ``1/sqrt(S)``, not 0; or a pair ``(mean, cov)`` of shapes ``(D,)``
        and ``(D, D)`` (e.g. a Gaussian guide's ``loc`` and ``scale_tril @ scale_tril.T``).
    :param exact_mean: the exact posterior's ``(D,)`` mean.
    :param exact_cov: the exact posterior's ``(D, D)`` covariance.
    :returns: ``{"mean": ..., "cov": ...}``. The errors are relative, so undefined for an exact
        mean of zero (compare ``m`` itself then); that case raises.
    """
    caller = "posterior_moment_errors"
    if torch.is_tensor(samples_or_mean_cov):
        draws = samples_or_mean_cov
        if draws.dim() != 2 or draws.shape[0] < 2:
            raise ValueError(f"{caller}: draws of shape {tuple(draws.shape)}: pass at least two draws as (S, D) (one variable: samples[:, None]), or a pair (mean, cov)")
        if not draws.is_floating_point():
            draws = draws.to(torch.get_default_dtype())
        mean, cov = draws.mean(0), torch.cov(draws.T).reshape(draws.shape[1], draws.shape[1])
    elif isinstance(samples_or_mean_cov, Sequence) and len(samples_or_mean_cov) == 2 and all(torch.is_tensor(t) for t in samples_or_mean_cov):
        mean, cov = samples_or_mean_cov
    else:
        raise TypeError(f"{caller}: pass draws (a tensor of shape (S, D)) or a pair (mean, cov) of tensors, got {type(samples_or_mean_cov).__name__}")
    if not (torch.is_tensor(exact_mean) and torch.is_tensor(exact_cov)) or exact_mean.dim() != 1 or exact_cov.shape != (exact_mean.shape[0],) * 2:
        raise ValueError(
            f"{caller}: the exact posterior's mean of shape {tuple(getattr(exact_mean, 'shape', ()))} and covariance of shape "
            f"{tuple(getattr(exact_cov, 'shape', ()))} do not fit: pass a (D,) mean and a (D, D) covariance"
        )
    D = exact_mean.shape[0]
    if mean.shape != (D,) or cov.shape != (D, D):
        raise ValueError(f"{caller}: the approximation's mean of shape {tuple(mean.shape)} and covariance of shape {tuple(cov.shape)} do not match the exact "
                         f"posterior's dimension D = {D}: pass a ({D},) mean and a ({D}, {D}) covariance, or draws of shape (S, {D})")
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in (mean, cov, exact_mean, exact_cov)) else torch.float32
    mean, cov = mean.to(dtype), cov.to(dtype)
    exact_mean, exact_cov = exact_mean.to(dtype=dtype, device=mean.device), exact_cov.to(dtype=dtype, device=mean.device)
    scale_mean, scale_cov = torch.linalg.vector_norm(exact_mean), torch.linalg.matrix_norm(exact_cov)
    if not (scale_mean > 0 and scale_cov > 0):
        raise ValueError(f"{caller}: the exact mean (norm {float(scale_mean):g}) and covariance (norm {float(scale_cov):g}) must be nonzero and finite: a relative error is undefined otherwise")
    return {
        "mean": float(torch.linalg.vector_norm(mean - exact_mean) / scale_mean),
        "cov": float(torch.linalg.matrix_norm(cov - exact_cov) / scale_cov),
    }


# --- out-of-distribution detection --------------------------------------------------------


def auroc(scores_in: torch.Tensor, scores_out: torch.Tensor) -> float:
    """Area under the ROC curve of telling out-of-distribution inputs from in-distribution ones
    by a score that is meant to be higher out of distribution: the probability that a random
    OOD input scores higher than a random in-distribution one, a tie counting half (the
    Mann-Whitney statistic over ``n_in * n_out``). 1: perfectly separated; 0.5: no better than chance.

    Computed exactly from the mid-ranks of the pooled scores, in integer arithmetic (twice a
    mid-rank is an integer), so it neither builds the ``n_in x n_out`` comparison nor loses
    precision for large sets.

    :param scores_in: the scores (any shape, flattened) of the in-distribution inputs, e.g.
        their predictive entropies (:func:`ood_auroc` takes them from an uncertainty split).
    :param scores_out: the scores of the out-of-distribution inputs.
    """
    if not (torch.is_tensor(scores_in) and torch.is_tensor(scores_out)):
        raise TypeError(f"auroc: pass two tensors of scores, got {type(scores_in).__name__} and {type(scores_out).__name__}")
    a, b = scores_in.reshape(-1), scores_out.reshape(-1).to(scores_in.device)
    n_in, n_out = a.numel(), b.numel()
    if n_in == 0 or n_out == 0:
        raise ValueError(f"auroc: {n_in} in-distribution and {n_out} out-of-distribution scores: both sets need at least one")
    dtype = torch.promote_types(a.dtype, b.dtype)
    pooled = torch.cat([a.to(dtype), b.to(dtype)])
    if pooled.is_floating_point() and torch.isnan(pooled).any():
        raise ValueError("auroc: the scores contain NaN, which has no rank: drop or replace those inputs")
    _, group, counts = torch.unique(pooled, sorted=True, return_inverse=True, return_counts=True)
    last = counts.cumsum(0)  # 1-based rank of each group's last member
    twice_midrank = 2 * last - counts + 1
    twice_u = int(twice_midrank[group[n_in:]].sum()) - n_out * (n_out + 1)
    return twice_u / (2 * n_in * n_out)


#: ``ood_auroc``'s names for a classifier's parts of the uncertainty split
_SCORE_ALIASES = {"entropy": "total", "mutual_information": "epistemic"}


def ood_auroc(in_uncertainty: Mapping[str, torch.Tensor], out_uncertainty: Mapping[str, torch.Tensor], score: str = "entropy") -> float:
    """:func:`auroc` of telling OOD inputs from in-distribution ones by one part of the
    predictive uncertainty (higher: more likely OOD).

    :param in_uncertainty: the ``{"total", "aleatoric", "epistemic"}`` split at the
        in-distribution inputs, as :func:`~pyrozoo.inference.classification_uncertainty`,
        :func:`~pyrozoo.inference.regression_uncertainty` or :func:`~pyrozoo.inference.uncertainty`
        returns it, e.g. ``ood_auroc(classification_uncertainty(probs_in), classification_uncertainty(probs_out), "mutual_information")``
        with per-draw probabilities of shape ``(S, n, K)``.
    :param out_uncertainty: the split at the out-of-distribution inputs.
    :param score: ``"entropy"`` (the predictive entropy, the split's ``"total"``: Hendrycks &
        Gimpel 2017 use the related maximum probability), ``"mutual_information"`` (between the
        label and the weights, the split's ``"epistemic"``: Smith & Gal 2018), or any key of the
        split (``"total"``, ``"aleatoric"``, ``"epistemic"``; for a regression split, variances).
    """
    key = _SCORE_ALIASES.get(score, score)
    for name, split in (("in_uncertainty", in_uncertainty), ("out_uncertainty", out_uncertainty)):
        if not isinstance(split, Mapping):
            raise TypeError(
                f"ood_auroc: {name} must be an uncertainty split (the dict that classification_uncertainty(probs) returns), got {type(split).__name__}; "
                "for scores you already have, call auroc(scores_in, scores_out)"
            )
        if key not in split:
            raise ValueError(f"ood_auroc: score {score!r} is not a part of the split {name} (parts: {sorted(split)}); pass one of {sorted(_SCORE_ALIASES)} or a part's name")
    return auroc(in_uncertainty[key], out_uncertainty[key])
