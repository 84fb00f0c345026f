"""The UCI protocol runner: a run is reproducible from its seed, whatever ran before it."""

import pytest
import torch

from zoo_protocols.config import RunConfig
from zoo_protocols.uci import run_split


@pytest.mark.parametrize("method", ["map", "bbb"])
def test_a_run_is_determined_by_its_seed(method, boston_split):
    config = RunConfig(epochs=2, batch_size=64, num_samples=5, progress=False, seed=3)
    first = run_split(method, boston_split, config)
    torch.rand(1000)  # whatever the process drew in between (another run, a plot, ...)
    again = run_split(method, boston_split, config)
    assert (again["rmse"], again["test_ll"]) == (first["rmse"], first["test_ll"])
    other = run_split(method, boston_split, RunConfig(epochs=2, batch_size=64, num_samples=5, progress=False, seed=4))
    assert other["rmse"] != first["rmse"]
