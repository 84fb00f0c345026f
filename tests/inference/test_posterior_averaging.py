"""Online step-size-weighted averaging of predictions equals the explicit weighted mean
over stored samples, in probability and in log space."""

import math

import pytest
import torch
from torch import nn

from pyrozoo.inference.posterior_averaging import StepSizeWeightedAverage, ensemble_probs
from pyrozoo.inference.sample_storage import InMemorySamples, SampleGuide
from pyrozoo.inference.sgmcmc import SGLD, model_output
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.inference import evaluate
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior


def test_online_average_of_a_run_equals_the_weighted_mean_of_its_samples(device):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).to(device)
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(60))
    x = torch.randn(60, 4, device=device)
    y = torch.randint(0, 3, (60,), device=device)
    x_test = torch.randn(25, 4, device=device)
    average = StepSizeWeightedAverage()
    log_average = StepSizeWeightedAverage(log_space=True)
    weights = []
    sink = InMemorySamples()

    def on_sample(sampler, k, weight):
        logits = model_output(model, sampler.values(), x_test)
        average.update(logits.softmax(-1), weight)
        log_average.update(logits.log_softmax(-1), weight)
        weights.append(weight)

    # a decaying step size makes the weights unequal
    SGLD(model, lr=PolynomialDecay(1e-2, 0.55)).run((x, y), num_steps=40, batch_size=20, burn_in=10, thin=3, sink=sink, on_sample=on_sample, progress=False)
    samples = sink.load()
    probs = torch.stack([model_output(model, {n: v[i].to(device) for n, v in samples.items()}, x_test).softmax(-1) for i in range(len(sink))])
    w = torch.tensor(weights, device=device, dtype=probs.dtype)
    explicit = (w[:, None, None] * probs).sum(0) / w.sum()
    assert len(weights) == 10 and len(set(weights)) == 10
    assert torch.allclose(average.value, explicit, atol=1e-6)
    assert torch.allclose(log_average.value, explicit.log(), atol=1e-5)
    # the unweighted average over stored samples is what evaluate() computes through SampleGuide
    metrics = evaluate(model, SampleGuide(samples, device=device), x_test, torch.zeros(25, dtype=torch.long, device=device), num_samples=len(sink))
    assert metrics["test_ll"] == pytest.approx(float(probs.mean(0)[:, 0].log().mean()), rel=1e-5)


def test_average_rejects_bad_weights_and_shapes():
    avg = StepSizeWeightedAverage()
    with pytest.raises(ValueError, match="weight"):
        avg.update(torch.ones(3), 0.0)
    with pytest.raises(ValueError, match="weight"):
        avg.update(torch.ones(3), math.nan)
    avg.update(torch.ones(3), 1.0)
    with pytest.raises(ValueError, match="shape"):
        avg.update(torch.ones(4), 1.0)
    with pytest.raises(RuntimeError, match="no sample"):
        StepSizeWeightedAverage().value


def test_average_state_round_trip():
    a = StepSizeWeightedAverage()
    a.update(torch.tensor([1.0, 3.0]), 2.0)
    b = StepSizeWeightedAverage()
    b.load_state_dict(a.state_dict())
    a.update(torch.tensor([4.0, 0.0]), 1.0)
    b.update(torch.tensor([4.0, 0.0]), 1.0)
    assert torch.allclose(a.value, b.value) and torch.allclose(a.value, torch.tensor([2.0, 2.0]))


def _members(device, dtype, num=3, n=40, classes=5):
    g = torch.Generator().manual_seed(7)
    return [torch.randn(n, classes, generator=g, dtype=dtype).mul(3).log_softmax(-1).to(device) for _ in range(num)]


def test_linear_pool_is_the_weighted_mean_of_probabilities(device, dtype):
    members, weights = _members(device, dtype), [0.5, 2.0, 1.5]
    expected = sum(w * lp.exp() for w, lp in zip(weights, members)) / sum(weights)
    torch.testing.assert_close(ensemble_probs(members, weights), expected)
    # equal weights by default
    torch.testing.assert_close(ensemble_probs(members), torch.stack(members).exp().mean(0))


def test_log_pool_is_the_normalised_geometric_mean_and_ranks_as_the_summed_log_probabilities(device, dtype):
    members, weights = _members(device, dtype), [0.5, 2.0, 1.5]
    geometric = torch.stack([lp.exp() ** (w / sum(weights)) for w, lp in zip(weights, members)]).prod(0)
    pooled = ensemble_probs(members, weights, pool="log")
    torch.testing.assert_close(pooled, geometric / geometric.sum(-1, keepdim=True))
    torch.testing.assert_close(pooled.sum(-1), torch.ones(40, device=device, dtype=dtype))
    # with equal weights the class it picks is that of sum_s log p_s (Deng et al.'s ensemble)
    assert torch.equal(ensemble_probs(members, pool="log").argmax(-1), torch.stack(members).sum(0).argmax(-1))
    # one member: both pools return its probabilities
    for pool in ("linear", "log"):
        torch.testing.assert_close(ensemble_probs(members[:1], pool=pool), members[0].exp())


def test_ensemble_rejects_bad_arguments():
    members = _members("cpu", torch.float32)
    with pytest.raises(ValueError, match="pool"):
        ensemble_probs(members, pool="max")
    with pytest.raises(ValueError, match="at least one"):
        ensemble_probs([])
    with pytest.raises(ValueError, match="2 weights for 3"):
        ensemble_probs(members, [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        ensemble_probs(members, [1.0, 0.0, 1.0])
