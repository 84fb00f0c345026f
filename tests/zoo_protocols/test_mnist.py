"""The MNIST protocol's registry and its methods: each learns above chance within a few steps."""

import math

import pytest
import torch

from zoo_protocols.config import RunConfig
from zoo_protocols.mnist import available_methods, load_mnist_data, run_mnist

METHODS = ["map", "mfvi", "mfvi-mc", "sparse-vd", "sgld", "sghmc"]


@pytest.fixture(scope="module")
def small_mnist():
    try:
        return load_mnist_data(train_size=1000, test_size=300)
    except FileNotFoundError:
        pytest.skip("MNIST data not available")


def test_registry():
    assert set(METHODS) <= set(available_methods())
    with pytest.raises(ValueError, match="unknown MNIST method"):
        run_mnist("no-such-method", None, RunConfig())


@pytest.mark.parametrize("method", METHODS)
def test_learns_above_chance(method, small_mnist):
    # on 1000 images the log-uniform prior's KL outweighs the data once fully weighted, so
    # sparse VD keeps the KL warm-up running for the whole (short) run here
    extra = {"warmup_fraction": 1.0} if method == "sparse-vd" else {}
    result = run_mnist(method, small_mnist, RunConfig(epochs=5, batch_size=50, num_samples=5, hidden=(32,), extra=extra))
    # chance is 90% error; 300 test images put its 4.5-sigma band above 82%
    assert 0 <= result["error"] < 80
    assert math.isfinite(result["test_ll"]) and result["test_ll"] > -math.log(10)


def test_a_run_is_determined_by_its_seed(small_mnist):
    config = RunConfig(epochs=1, batch_size=100, num_samples=2, hidden=(16,), seed=1)
    first = run_mnist("mfvi", small_mnist, config)
    torch.rand(1000)
    again = run_mnist("mfvi", small_mnist, config)
    assert (again["error"], again["test_ll"]) == (first["error"], first["test_ll"])
