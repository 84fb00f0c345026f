"""Evaluation metrics for regression and classification."""

import math

import torch


def rmse(mean: torch.Tensor, y: torch.Tensor) -> float:
    """Root mean squared error of point predictions."""
    if mean.shape != y.shape:
        mean = mean.reshape(y.shape)
    return float(((mean - y) ** 2).mean().sqrt())


def accuracy(probs: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of examples whose most probable class is the label."""
    return float((probs.argmax(-1) == y).float().mean())


def expected_calibration_error(probs: torch.Tensor, y: torch.Tensor, num_bins: int = 15) -> float:
    """ECE (Guo et al. 2017): confidence-weighted gap between accuracy and confidence over
    ``num_bins`` equal-width confidence bins."""
    if num_bins < 1:
        raise ValueError("num_bins must be >= 1")
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
