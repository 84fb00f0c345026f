"""Evaluation metrics for regression and classification."""

import math

import torch


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
