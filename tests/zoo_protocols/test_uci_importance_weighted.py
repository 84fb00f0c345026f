"""The registered importance-weighted UCI methods (the "Sagar 2020 (results withdrawn)" entry)
run on a standard split, honour their settings and report metrics in the original units."""

import math

import pytest

from zoo_protocols.config import RunConfig
from zoo_protocols.uci import available_methods, run_split

METHODS = ["iwae", "renyi", "esbo"]


def test_methods_are_registered_and_labelled():
    methods = available_methods()
    assert set(METHODS) <= set(methods)
    assert "withdrawn" in methods["esbo"].description and "not a bound" in methods["esbo"].description


@pytest.mark.parametrize("method", METHODS)
def test_quick_run_reports_original_unit_metrics(method, boston_split):
    result = run_split(method, boston_split, RunConfig(quick=True, num_samples=10, extra={"num_particles": 4}))
    assert math.isfinite(result["rmse"]) and math.isfinite(result["test_ll"])
    # a model that learnt something beats predicting the training mean, in the target's units (thousands of dollars)
    baseline = float((boston_split.to_original_units(boston_split.y_test) - boston_split.y_mean).square().mean().sqrt())
    assert 0 < result["rmse"] < baseline
    assert 1 <= result["train_ess"] <= 4


def test_settings_reach_the_objective(boston_split):
    with pytest.raises(ValueError, match="ELBO"):
        run_split("renyi", boston_split, RunConfig(quick=True, extra={"alpha": 1.0}))
    result = run_split("iwae", boston_split, RunConfig(quick=True, epochs=3, num_samples=5, extra={"num_particles": 2, "n_hidden": 10}))
    assert result["steps"] == 3 and 1 <= result["train_ess"] <= 2 and 1 <= result["predict_ess"] <= 2
    with pytest.warns(UserWarning, match="subsampled"):
        result = run_split("esbo", boston_split, RunConfig(quick=True, epochs=2, batch_size=100, num_samples=5, extra={"num_particles": 2}))
    assert result["steps"] == 2 * math.ceil(len(boston_split.y_train) / 100)  # minibatches: N/S-scaled weights, as in Sagar's step 2
