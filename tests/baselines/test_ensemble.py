"""Deep ensembles: the mixture's uncertainty split against the members' known outputs."""

import math

import pyro.distributions as dist
import pytest
import torch
from torch import nn

from pyrozoo.baselines import DeepEnsemble
from pyrozoo.baselines.training import NoisePrecision
from pyrozoo.inference.prediction import record_predictive
from pyrozoo.models import MLP, CategoricalLikelihood, GaussianLikelihood
from tests.baselines.conftest import LIKELIHOOD_CASES, targets_for


def _linear(weight: float, bias: float, width: int = 1) -> nn.Module:
    """``x -> weight * x[:, :1] + bias`` on every one of ``width`` outputs."""
    net = nn.Linear(2, width)
    with torch.no_grad():
        net.weight.zero_()
        net.weight[:, 0] = weight
        net.bias.fill_(bias)
    return net


def _noise(likelihood, precision: float) -> NoisePrecision:
    noise = NoisePrecision(likelihood)
    with torch.no_grad():
        noise.log_precision.fill_(math.log(precision))
    return noise


X = torch.tensor([[-1.0, 0.0], [0.0, 5.0], [2.0, -3.0]])


def test_identical_members_have_no_epistemic_variance():
    likelihood = GaussianLikelihood(10, precision=dist.Gamma(2.0, 2.0))
    ensemble = DeepEnsemble.from_members([_linear(0.7, 0.2) for _ in range(4)], likelihood, [_noise(likelihood, 4.0) for _ in range(4)])
    split = ensemble.uncertainty(X)
    assert torch.equal(split["epistemic"], torch.zeros(3, 1))
    torch.testing.assert_close(split["aleatoric"], torch.full((3, 1), 0.25))
    torch.testing.assert_close(split["total"], split["aleatoric"])


def test_epistemic_variance_is_the_members_spread_and_aleatoric_their_mean_noise():
    likelihood = GaussianLikelihood(10, precision=dist.Gamma(2.0, 2.0))
    weights, biases, precisions = [1.0, -0.5, 2.0], [0.0, 1.0, -1.0], [1.0, 4.0, 0.5]
    ensemble = DeepEnsemble.from_members([_linear(w, b) for w, b in zip(weights, biases)], likelihood, [_noise(likelihood, p) for p in precisions])
    outputs = torch.tensor([[w * x + b for w, b in zip(weights, biases)] for x in X[:, 0].tolist()])  # (n, M)
    split = ensemble.uncertainty(X)
    torch.testing.assert_close(split["epistemic"][:, 0], outputs.var(1, unbiased=False))
    torch.testing.assert_close(split["aleatoric"][:, 0], torch.full((3,), sum(1 / p for p in precisions) / 3))
    # the predictive is the equal-weight mixture: its mean, and its log density at a target
    predictive = ensemble.predict(X)
    torch.testing.assert_close(predictive.mean[:, 0], outputs.mean(1))
    y = torch.tensor([0.5, -1.0, 2.0])
    with record_predictive() as records:
        result = ensemble.evaluate(X, y)
    densities = torch.stack([torch.distributions.Normal(outputs[:, m], p**-0.5).log_prob(y).exp() for m, p in enumerate(precisions)], 1)
    assert result["test_ll"] == pytest.approx(float(densities.mean(1).log().mean()), rel=1e-5)
    assert result["rmse"] == pytest.approx(float((outputs.mean(1) - y).pow(2).mean().sqrt()), rel=1e-5)
    (record,) = records
    assert record.kind == "regression" and record.pit.shape == (3, 1)
    torch.testing.assert_close(record.outputs_at(X[:1]), outputs[:1].T[:, :, None])


def test_classifier_members_that_agree_or_disagree():
    """Two members certain of different classes: the mutual information is log 2; the same member twice: 0."""
    likelihood = CategoricalLikelihood(10)
    certain = [_linear(0.0, 0.0, 2), _linear(0.0, 0.0, 2)]
    with torch.no_grad():
        certain[0].bias.copy_(torch.tensor([30.0, -30.0]))
        certain[1].bias.copy_(torch.tensor([-30.0, 30.0]))
    split = DeepEnsemble.from_members(certain, likelihood).uncertainty(X)
    torch.testing.assert_close(split["epistemic"], torch.full((3,), math.log(2)))
    torch.testing.assert_close(split["aleatoric"], torch.zeros(3), atol=1e-10, rtol=0)
    same = DeepEnsemble.from_members([certain[0], certain[0]], likelihood).uncertainty(X)
    assert torch.equal(same["epistemic"], torch.zeros(3))


@pytest.mark.parametrize("make_likelihood, width", LIKELIHOOD_CASES)
def test_fit_trains_independently_initialised_members(make_likelihood, width):
    x = torch.linspace(-2, 2, 24)[:, None]
    likelihood = make_likelihood(len(x))
    y = targets_for(likelihood, x)
    ensemble = DeepEnsemble(lambda: MLP(1, [8], width), likelihood, num_members=3).fit(x, y, epochs=15, batch_size=8, lr=1e-2, seed=5)
    first_layers = [net[0].weight.detach() for net in ensemble.members]
    assert not torch.equal(first_layers[0], first_layers[1]) and not torch.equal(first_layers[1], first_layers[2])
    f, latents = ensemble.sample_outputs(x)
    assert f.shape == (3, len(x), width)
    if getattr(likelihood, "precision_prior", None) is not None:
        assert latents["precision"].shape == (3,) and (latents["precision"] > 0).all()
    else:
        assert latents == {}
    assert (ensemble.uncertainty(x)["epistemic"] > 0).all()


def test_an_untrained_ensemble_and_bad_sizes_are_errors():
    with pytest.raises(RuntimeError, match="fit"):
        DeepEnsemble(lambda: MLP(1, [2], 1), CategoricalLikelihood(3)).sample_outputs(X)
    with pytest.raises(ValueError, match="num_members"):
        DeepEnsemble(lambda: MLP(1, [2], 1), CategoricalLikelihood(3), num_members=0)
    with pytest.raises(TypeError, match="Gaussian"):
        DeepEnsemble(lambda: MLP(1, [2], 1), object())
