"""Magnitude pruning inside a sampler: the sparsity follows s_k = S (1 - D^(k / period)),
the pruned entries are the smallest, and the persistent mask is monotone."""

import math

import pytest
import torch
from torch import nn

from pyrozoo.inference.pruning import MagnitudePruning, layer_sparsity_for_overall, sparsity_of
from pyrozoo.inference.sgmcmc import SGHMC
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior


def classifier(device):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(10, 30), nn.ReLU(), nn.Linear(30, 4)).to(device)
    return BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(200))


def data(device):
    g = torch.Generator().manual_seed(1)
    return torch.randn(200, 10, generator=g).to(device), torch.randint(0, 4, (200,), generator=g).to(device)


@pytest.mark.parametrize("persistent_mask", [False, True], ids=["code-parity", "monotone"])
def test_sparsity_follows_the_schedule(persistent_mask, device):
    model = classifier(device)
    pruning = MagnitudePruning(["0.weight", "2.weight"], target=0.8, decay=0.9, period=2.0, persistent_mask=persistent_mask)
    sampler = SGHMC(model, lr=1e-4, momentum=0.9, adaptations=[pruning])
    x, y = data(device)
    previous_zeros = None
    for k in range(1, 31):
        sampler.step(x[:50], y[:50], torch.arange(50, device=device))
        values = sampler.values()
        s = 0.8 * (1 - 0.9 ** (k / 2.0))
        assert pruning.sparsity(k) == pytest.approx(s)
        for name in ("0.weight", "2.weight"):
            w = values[name]
            expected = math.floor(s * w.numel())
            assert int((w == 0).sum()) == expected
        assert bool((values["0.bias"] != 0).all())
        zeros = values["0.weight"] == 0
        if persistent_mask and previous_zeros is not None:
            assert bool((zeros | ~previous_zeros).all())  # once pruned, always pruned
            assert bool((sampler.momentum("0.weight")[zeros] == 0).all())
        previous_zeros = zeros


def test_pruned_entries_are_the_smallest_magnitudes():
    model = classifier("cpu")
    pruning = MagnitudePruning(["0.weight"], target=0.5, decay=0.5, period=1.0)
    sampler = SGHMC(model, lr=1e-5, momentum=0.0, adaptations=[])
    x, y = data("cpu")
    sampler.setup(x[:50], y[:50], torch.arange(50))
    before = sampler.unconstrained("0.weight").detach().clone()
    with torch.no_grad():
        pruning.setup(sampler, None)
        pruning.update(sampler, None, 1)
    after = sampler.unconstrained("0.weight")
    pruned = after == 0
    assert int(pruned.sum()) == math.floor(0.25 * before.numel())
    assert before.abs()[pruned].max() < before.abs()[~pruned].min()
    assert torch.equal(after[~pruned], before[~pruned])


def test_overall_target_conversion():
    assert layer_sparsity_for_overall(0.9, 272474, 267264) == pytest.approx(0.9 * 272474 / 267264)
    with pytest.raises(ValueError, match="not below 1"):
        layer_sparsity_for_overall(0.99, 200, 100)
    assert sparsity_of({"a": torch.tensor([0.0, 1.0]), "b": torch.zeros(2)}) == 0.75


@pytest.mark.parametrize("kwargs, match", [({"target": 1.0}, "target"), ({"decay": 1.0}, "decay"), ({"period": 0}, "period"), ({"names": []}, "names")])
def test_invalid_arguments_raise(kwargs, match):
    args = {"names": ["0.weight"], "target": 0.5, **kwargs}
    with pytest.raises(ValueError, match=match):
        MagnitudePruning(args.pop("names"), **args)


def test_unknown_site_is_a_clear_error():
    model = classifier("cpu")
    sampler = SGHMC(model, lr=1e-4, adaptations=[MagnitudePruning(["conv9.weight"], target=0.5)])
    x, y = data("cpu")
    with pytest.raises(KeyError, match="conv9.weight"):
        sampler.step(x[:50], y[:50], torch.arange(50))
