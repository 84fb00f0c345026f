"""recipes.intervals: the scipy-free t quantiles agree with scipy's wherever they are used."""

import pytest

from recipes.intervals import t_quantile_975

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize("df", [*range(1, 41), 45, 60, 90, 120, 250, 1000, 10**6])
def test_t_quantile_matches_scipy(df):
    # the table has three decimals; the expansion beyond df = 30 is within 1e-4
    assert t_quantile_975(df) == pytest.approx(float(stats.t.ppf(0.975, df)), abs=6e-4)


def test_an_unknown_df_gives_the_normal_quantile():
    assert t_quantile_975(None) == pytest.approx(float(stats.norm.ppf(0.975)), abs=1e-6)


@pytest.mark.parametrize("df", [0, -3])
def test_fewer_than_one_degree_of_freedom_is_refused(df):
    with pytest.raises(ValueError, match="at least 1 degree of freedom"):
        t_quantile_975(df)
