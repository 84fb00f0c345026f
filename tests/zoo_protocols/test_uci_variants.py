"""The UCI runners assembled from existing pieces (Monte Carlo / closed-form ELBO without local
reparameterization, DSIVI, sparse VD) run on a standard split and learn something."""

import math

import pytest

from zoo_protocols.config import RunConfig
from zoo_protocols.uci import available_methods, run_split

METHODS = ["mfvi-mc", "mfvi-cf", "dsivi", "sparse-vd"]


def test_methods_are_registered():
    assert set(METHODS) <= set(available_methods())


@pytest.mark.parametrize("method", METHODS)
def test_quick_run_beats_the_mean_predictor(method, boston_split):
    result = run_split(method, boston_split, RunConfig(epochs=10, batch_size=32, num_samples=10))
    assert math.isfinite(result["rmse"]) and math.isfinite(result["test_ll"])
    baseline = float((boston_split.to_original_units(boston_split.y_test) - boston_split.y_mean).square().mean().sqrt())
    assert 0 < result["rmse"] < baseline
