"""The registered UCI SG-MCMC methods run on a standard split and report metrics in the
original target units."""

import math

import pytest
import torch

from pyrozoo.experiments.uci import UCIRunConfig, available_methods, run_split

METHODS = ["sgld", "sghmc", "sgld-sa", "sghmc-sa"]


def test_methods_are_registered():
    assert set(METHODS) <= set(available_methods())


@pytest.mark.parametrize("method", METHODS)
def test_quick_run_reports_original_unit_metrics(method, boston_split):
    result = run_split(method, boston_split, UCIRunConfig(quick=True, num_samples=10))
    assert math.isfinite(result["rmse"]) and math.isfinite(result["test_ll"])
    # a model that learnt something beats predicting the training mean, in the target's units (thousands of dollars)
    baseline = float((boston_split.to_original_units(boston_split.y_test) - boston_split.y_mean).square().mean().sqrt())
    assert 0 < result["rmse"] < baseline
    assert result["samples"] == 10


def test_overrides_reach_the_sampler(boston_split):
    with pytest.raises(ValueError, match="step size"):
        run_split("sgld", boston_split, UCIRunConfig(quick=True, lr=-1.0))
    result = run_split("sghmc-sa", boston_split, UCIRunConfig(quick=True, num_samples=5, extra={"anneal": 1.003}, dtype=torch.float64))
    assert math.isfinite(result["rmse"])
