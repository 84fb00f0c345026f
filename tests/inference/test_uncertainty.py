"""Aleatoric/epistemic decomposition of predictive uncertainty, on cases whose split is known."""

import math

import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive

from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import SampleGuide, classification_uncertainty, posterior_samples, predict, regression_uncertainty, uncertainty
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, NormalPrior

F64 = torch.float64


def _identity_holds(u, atol=1e-6):
    assert torch.allclose(u["total"], u["aleatoric"] + u["epistemic"], atol=atol)
    assert (u["epistemic"] >= 0).all() and (u["aleatoric"] >= 0).all()


# -- classification ------------------------------------------------------------------------------


def test_identical_samples_have_no_epistemic_part(device):
    p = torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]], dtype=F64, device=device)
    u = classification_uncertainty(p.expand(4, 2, 3))
    entropy = -torch.xlogy(p, p).sum(-1)
    assert torch.allclose(u["total"], entropy) and torch.allclose(u["aleatoric"], entropy)
    assert torch.equal(u["epistemic"], torch.zeros(2, dtype=F64, device=device))
    assert u["total"][1] == 0  # 0 log 0 = 0: a one-hot prediction has no entropy


def test_disagreeing_one_hot_samples_are_all_epistemic(device):
    probs = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]], dtype=F64, device=device)  # (S=2, n=1, K=2)
    u = classification_uncertainty(probs)
    assert u["aleatoric"].item() == 0
    assert u["total"].item() == pytest.approx(math.log(2)) and u["epistemic"].item() == pytest.approx(math.log(2))
    # three one-hot draws over three classes, two of them agreeing: entropy of (2/3, 1/3, 0)
    probs = torch.eye(3, dtype=F64, device=device)[[0, 0, 1]].unsqueeze(1)
    u = classification_uncertainty(probs)
    expected = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    assert u["aleatoric"].item() == 0 and u["epistemic"].item() == pytest.approx(expected) and u["total"].item() == pytest.approx(expected)


def test_logits_give_the_split_of_their_softmax(device):
    logits = torch.randn(5, 7, 4, dtype=F64, device=device)
    from_logits, from_probs = classification_uncertainty(logits, logits=True), classification_uncertainty(logits.softmax(-1))
    for key in ("total", "aleatoric", "epistemic"):
        assert torch.allclose(from_logits[key], from_probs[key], atol=1e-12)
    # extreme logits: one-hot to machine precision, still finite
    u = classification_uncertainty(torch.tensor([[[1e4, -1e4]], [[-1e4, 1e4]]], dtype=F64, device=device), logits=True)
    assert torch.isfinite(u["total"]).all() and u["epistemic"].item() == pytest.approx(math.log(2))


def test_probabilities_are_checked():
    with pytest.raises(ValueError, match="logits=True"):
        classification_uncertainty(torch.randn(3, 2, 4))
    with pytest.raises(ValueError, match=r"\(S, n, K\)"):
        classification_uncertainty(torch.ones(4))


@pytest.mark.parametrize("seed", range(5))
def test_identity_and_nonnegative_mutual_information_on_random_inputs(seed, device):
    g = torch.Generator().manual_seed(seed)
    S, n, K = 1 + seed * 3, 11, 2 + seed
    # sharp and flat, with exact zeros in some rows
    logits = (torch.randn(S, n, K, generator=g, dtype=F64) * (1 + 3 * seed)).to(device)
    probs = logits.softmax(-1)
    probs[..., 0] = torch.where(torch.rand(S, n, generator=g).to(device) < 0.3, 0.0, probs[..., 0].double())
    probs = probs / probs.sum(-1, keepdim=True)
    for u in (classification_uncertainty(probs), classification_uncertainty(logits, logits=True)):
        _identity_holds(u)
        assert (u["total"] <= math.log(K) + 1e-9).all()
        assert u["total"].shape == (n,)


# -- regression ----------------------------------------------------------------------------------


def test_regression_with_known_noise_and_known_mean_variance(device):
    # four draws of the mean: per example offsets +-1 and +-3 around c, so the (1/S) variance is 5
    offsets = torch.tensor([1.0, -1.0, 3.0, -3.0], dtype=F64, device=device)
    centres = torch.tensor([0.0, 2.0, -7.5], dtype=F64, device=device)
    means = (centres[None, :] + offsets[:, None]).unsqueeze(-1)  # (4, 3, 1)
    sigma = 0.5
    u = regression_uncertainty(means, sigma**2)
    assert u["aleatoric"].shape == (3, 1)
    assert torch.allclose(u["aleatoric"], torch.full((3, 1), 0.25, dtype=F64, device=device))
    assert torch.allclose(u["epistemic"], torch.full((3, 1), 5.0, dtype=F64, device=device))
    assert torch.allclose(u["total"], torch.full((3, 1), 5.25, dtype=F64, device=device))
    # noise per draw (S,): the aleatoric part is its mean
    u = regression_uncertainty(means, torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=F64, device=device))
    assert torch.allclose(u["aleatoric"], torch.full((3, 1), 3.0, dtype=F64, device=device))
    assert torch.allclose(u["total"], torch.full((3, 1), 8.0, dtype=F64, device=device))


def test_regression_identical_samples_and_heteroscedastic_noise(device):
    means = torch.randn(1, 6, 2, dtype=F64, device=device).expand(5, 6, 2)
    noise = torch.rand(5, 6, 2, dtype=F64, device=device)
    u = regression_uncertainty(means, noise)
    assert torch.equal(u["epistemic"], torch.zeros(6, 2, dtype=F64, device=device))
    assert torch.allclose(u["total"], noise.mean(0)) and torch.allclose(u["aleatoric"], noise.mean(0))


def test_regression_total_is_the_variance_of_the_predictive_mixture(device):
    g = torch.Generator().manual_seed(0)
    means = torch.randn(7, 9, 3, generator=g, dtype=F64).to(device)
    noise = torch.rand(7, generator=g, dtype=F64).to(device) + 0.1
    u = regression_uncertainty(means, noise)
    _identity_holds(u)
    second_moment = (noise[:, None, None] + means**2).mean(0)
    assert torch.allclose(u["total"], second_moment - means.mean(0) ** 2, atol=1e-12)


def test_regression_noise_is_checked():
    with pytest.raises(ValueError, match="nonnegative"):
        regression_uncertainty(torch.randn(3, 4, 1), -1.0)
    with pytest.raises(ValueError, match="fit neither"):
        regression_uncertainty(torch.randn(3, 4, 1), torch.ones(5))


# -- end to end ----------------------------------------------------------------------------------


def _classifier(device):
    model = BayesianNeuralNetwork(MLP(5, [8], 3).to(device), NormalPrior(1.0), CategoricalLikelihood(40))
    x, y = torch.randn(20, 5, device=device), torch.randint(0, 3, (20,), device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    return model, guide, x


def _regressor(device, precision, outputs=1):
    model = BayesianNeuralNetwork(MLP(5, [8], outputs).to(device), NormalPrior(1.0), GaussianLikelihood(40, precision=precision))
    x, y = torch.randn(20, 5, device=device), torch.randn(20, outputs, device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    return model, guide, x


def test_end_to_end_classification(device):
    model, guide, x = _classifier(device)
    u = uncertainty(model, guide, x, num_samples=30)
    assert set(u) == {"total", "aleatoric", "epistemic"}
    assert all(v.shape == (20,) and v.device == x.device for v in u.values())
    _identity_holds(u, atol=1e-5)
    assert (u["epistemic"] > 0).all()  # the mean-field draws disagree
    # the total is the entropy of predict's posterior-averaged probabilities (same draws)
    torch.manual_seed(1)
    u = uncertainty(model, guide, x, num_samples=30)
    torch.manual_seed(1)
    probs = predict(model, guide, x, num_samples=30).mean
    assert torch.allclose(u["total"], -torch.xlogy(probs, probs).sum(-1), atol=1e-5)


@pytest.mark.parametrize("precision", [dist.Gamma(2.0, 2.0), 4.0], ids=["gamma-latent", "fixed"])
def test_end_to_end_regression(precision, device):
    model, guide, x = _regressor(device, precision)
    torch.manual_seed(1)
    u = uncertainty(model, guide, x, num_samples=30, batch_size=7)
    assert all(v.shape == (20, 1) and v.device == x.device for v in u.values())
    _identity_holds(u, atol=1e-5)
    torch.manual_seed(1)
    draws = posterior_samples(model, guide, x, num_samples=30, batch_size=7)
    if isinstance(precision, float):
        assert torch.allclose(u["aleatoric"], torch.full_like(u["aleatoric"], 1 / precision))
    else:
        assert torch.allclose(u["aleatoric"], (1 / draws["noise_precision"]).mean().expand(20, 1))
    # the same total standard deviation as predict's summary
    torch.manual_seed(1)
    pred = predict(model, guide, x, num_samples=30, batch_size=7)
    assert torch.allclose(u["total"].sqrt(), pred.std, rtol=1e-5)


def test_multi_output_regression_is_per_dimension(device):
    model, guide, x = _regressor(device, dist.Gamma(2.0, 2.0), outputs=2)
    u = uncertainty(model, guide, x, num_samples=10)
    assert all(v.shape == (20, 2) for v in u.values())
    _identity_holds(u, atol=1e-5)


@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_stored_draws_as_samples_or_sample_guide(kind, device):
    model, guide, x = _classifier(device) if kind == "classification" else _regressor(device, dist.Gamma(2.0, 2.0))
    stored = dict(Predictive(guide, num_samples=6)(x))
    a = uncertainty(model, guide, x, samples=stored)
    b = uncertainty(model, SampleGuide(stored), x, num_samples=6)
    shape = (20,) if kind == "classification" else (20, 1)
    for key in ("total", "aleatoric", "epistemic"):
        assert a[key].shape == shape
        assert torch.allclose(a[key], b[key], atol=1e-6)
    _identity_holds(a, atol=1e-5)
    if kind == "regression":
        assert torch.allclose(a["aleatoric"], (1 / stored["noise_precision"]).mean().expand(20, 1))


def test_other_likelihoods_are_refused():
    class Other:
        likelihood = object()

    with pytest.raises(TypeError, match="Categorical or a Gaussian"):
        uncertainty(Other(), None, torch.randn(3, 2))
