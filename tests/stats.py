"""Tolerances derived from sample sizes, shared by the statistical tests."""

import math

from scipy import stats


def z_bound(num_comparisons: int = 1, false_failure_rate: float = 1e-6) -> float:
    """Two-sided normal quantile so that ``num_comparisons`` independent checks fail by
    chance with total probability ``false_failure_rate`` (Bonferroni)."""
    return float(stats.norm.isf(false_failure_rate / (2 * max(num_comparisons, 1))))


def mean_tolerance(variance, num_samples: int, num_comparisons: int = 1):
    """Bound on ``|sample mean - true mean|`` for ``num_samples`` i.i.d. draws."""
    return z_bound(num_comparisons) * (variance / num_samples) ** 0.5


def gaussian_variance_rel_tolerance(num_samples: int, num_comparisons: int = 1) -> float:
    """Bound on ``|sample variance / true variance - 1|`` for Gaussian draws (sd of the
    ratio is ``sqrt(2 / (n - 1))``)."""
    return z_bound(num_comparisons) * math.sqrt(2.0 / (num_samples - 1))
