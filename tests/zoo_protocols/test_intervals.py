"""zoo_protocols.intervals: the scipy-free t quantiles agree with scipy's wherever they are used; a
mean's standard error is the sample sd over sqrt(n)."""

import math

import numpy as np
import pandas as pd
import pytest

from zoo_protocols.intervals import mean_se, t_quantile_975


@pytest.fixture
def stats():
    return pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("df", [*range(1, 41), 45, 60, 90, 120, 250, 1000, 10**6])
def test_t_quantile_matches_scipy(stats, df):
    # the table has three decimals; the expansion beyond df = 30 is within 1e-4
    assert t_quantile_975(df) == pytest.approx(float(stats.t.ppf(0.975, df)), abs=6e-4)


def test_an_unknown_df_gives_the_normal_quantile(stats):
    assert t_quantile_975(None) == pytest.approx(float(stats.norm.ppf(0.975)), abs=1e-6)


@pytest.mark.parametrize("df", [0, -3])
def test_fewer_than_one_degree_of_freedom_is_refused(df):
    with pytest.raises(ValueError, match="at least 1 degree of freedom"):
        t_quantile_975(df)


@pytest.mark.parametrize("convert", [list, np.array, pd.Series, lambda v: pd.Series(v, index=[10, 3, 7, 1])])
def test_mean_se_is_the_sample_sd_over_root_n_whatever_holds_the_values(convert):
    mean, se, n = mean_se(convert([1.0, 2.0, 3.0, 6.0]))
    # deviations -2, -1, 0, 3: sum of squares 14, ddof 1
    assert (mean, n) == (3.0, 4) and se == pytest.approx(math.sqrt(14 / 3) / 2, rel=1e-15)


def test_the_standard_error_of_many_means_matches_their_spread():
    """4000 samples of 25 normals with sd 2: the sd of their means is 2 / 5 within 3 % (its Monte
    Carlo error is 1.1 %), and so is their mean s.e. within 2 % (E[s] = 0.99 sd at n = 25)."""
    rng = np.random.default_rng(0)
    draws = [mean_se(rng.normal(1.0, 2.0, size=25)) for _ in range(4000)]
    means, ses = np.array([d[0] for d in draws]), np.array([d[1] for d in draws])
    assert np.std(means, ddof=1) == pytest.approx(0.4, rel=0.03) and np.mean(ses) == pytest.approx(0.4, rel=0.02)


@pytest.mark.parametrize("values", [[2.5], []])
def test_fewer_than_two_values_have_no_standard_error(values):
    mean, se, n = mean_se(values)
    assert math.isnan(se) and n == len(values) and (mean == 2.5 if values else math.isnan(mean))
