"""Means over seeds or splits with their standard errors, and Student-t quantiles for the 95 %
intervals of the results (the claims ledger's, the seed spreads', the controlled experiments'),
without scipy, which the core install leaves out.

Kept apart from :mod:`zoo_protocols.claims` so a result computed with an interval depends on this
module alone, not on the ledger's claim declarations, which change far more often."""

import math
from typing import Optional, Tuple

import pandas as pd

#: two-sided 95 % quantiles of Student's t, t_{0.975, df}, df = 1..30
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


def t_quantile_975(df: Optional[int]) -> float:
    """t_{0.975, df}: the table for df <= 30, beyond it the Cornish-Fisher expansion in 1/df
    (error below 1e-4); ``None`` (a very large or unknown df) gives the normal 1.96."""
    if df is None:
        return _Z975
    if df < 1:
        raise ValueError(f"a t-interval needs at least 1 degree of freedom, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def mean_se(values) -> Tuple[float, float, int]:
    """Mean, standard error of the mean (the sample standard deviation, ddof 1, over sqrt(n);
    NaN for fewer than two values) and count of ``values``: one per seed, split or paired
    difference."""
    values = pd.Series(values, dtype=float)
    n = len(values)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan, n
