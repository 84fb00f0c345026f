"""The Laplace baseline (laplace-torch): exact on a linear model, and uncertain away from the data."""

import math

import pytest
import torch
from torch import nn

pytest.importorskip("laplace")

from pyrozoo.baselines import LaplaceBaseline, train_map  # noqa: E402
from pyrozoo.baselines.laplace import HESSIANS, SUBSETS  # noqa: E402
from pyrozoo.models import MLP, CategoricalLikelihood, GaussianLikelihood  # noqa: E402
from tests.baselines.conftest import two_clusters  # noqa: E402

#: every (subset of weights, Hessian structure) the baseline offers
CASES = [pytest.param(subset, hessian, id=f"{subset}-{hessian}") for subset in SUBSETS for hessian in HESSIANS]

#: draws of the predictive per test input: the sample variance's relative error is about sqrt(2 / S)
DRAWS = 20000


def _features(x):
    """The linear model's features ``(x, 1)``."""
    return torch.cat([x, torch.ones_like(x)], 1).double()


@pytest.mark.parametrize("subset, hessian", CASES)
def test_linear_model_variance_is_the_exact_gauss_newton_posterior(subset, hessian):
    """For a linear model with Gaussian noise (precision tau) the generalised Gauss-Newton
    matrix is the Hessian, tau Phi^T Phi, and KFAC of a one-output layer is exact; the
    diagonal approximation keeps its diagonal. With prior precision lam the output variance
    at x* is phi*^T P^-1 phi*, P = tau Phi^T Phi + lam I (or its diagonal). The features
    phi = (x, 1) are the layer's inputs (no bias parameter: laplace-torch gives a bias its own
    Kronecker block), behind an identity so that the layer is a last layer of the network."""
    tau, lam = 4.0, 2.0
    x, y = two_clusters(30)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Identity(), nn.Linear(2, 1, bias=False)).double()
    phi = _features(x)
    baseline = LaplaceBaseline(net, GaussianLikelihood(30, precision=tau), subset=subset, hessian=hessian, prior_precision=lam, tune_prior="none")
    baseline.fit(phi, y.double())
    precision = tau * phi.T @ phi
    precision = precision + lam * torch.eye(2, dtype=torch.float64)
    if hessian == "diag":
        precision = torch.diag(torch.diag(precision))
    x_star = torch.tensor([[-4.0], [-1.5], [0.0], [1.5], [4.0]], dtype=torch.float64)
    phi_star = _features(x_star)
    exact = (phi_star @ torch.linalg.solve(precision, phi_star.T)).diagonal()
    split = baseline.uncertainty(phi_star, num_samples=DRAWS)
    tolerance = 5 * math.sqrt(2 / DRAWS)
    torch.testing.assert_close(split["epistemic"][:, 0], exact, rtol=tolerance, atol=0)
    torch.testing.assert_close(split["aleatoric"][:, 0], torch.full((5,), 1 / tau, dtype=torch.float64))
    # the predictive mean is the network's output at the MAP weights
    mean = baseline.predict(phi_star, num_samples=DRAWS).mean
    torch.testing.assert_close(mean, net(phi_star).detach(), atol=5 * math.sqrt(float(exact.max()) / DRAWS), rtol=0)


@pytest.mark.parametrize("subset, hessian", CASES)
def test_variance_grows_away_from_the_data(subset, hessian):
    """A ReLU network fitted to inputs in [-2, -1] and [1, 2]: the epistemic variance of the
    linearised predictive grows with the distance from the data, on both sides."""
    x, y = two_clusters(40)
    likelihood = GaussianLikelihood(40, precision=25.0)
    torch.manual_seed(1)
    net = MLP(1, [16], 1)
    noise = train_map(net, likelihood, x, y, epochs=100, batch_size=40, lr=2e-2)
    baseline = LaplaceBaseline(net, likelihood, noise, subset=subset, hessian=hessian).fit(x, y)
    assert baseline.fitted_prior_precision is not None
    far = torch.tensor([[-8.0], [-4.0], [4.0], [8.0]])
    variance = baseline.uncertainty(torch.cat([x, far]), num_samples=2000)["epistemic"][:, 0]
    on_data, (v_m8, v_m4, v_4, v_8) = variance[: len(x)], variance[len(x):]
    assert v_m4 > 2 * on_data.max() and v_4 > 2 * on_data.max()
    assert v_m8 > 2 * v_m4 and v_8 > 2 * v_4


def test_classification_with_sampled_networks_and_learned_noise_regression():
    x = torch.linspace(-2, 2, 30)[:, None]
    labels = (x[:, 0] > 0).long() + (x[:, 0] > 1).long()
    torch.manual_seed(0)
    net = MLP(1, [8], 3)
    noise = train_map(net, CategoricalLikelihood(30), x, labels, epochs=30, batch_size=10, lr=1e-2)
    baseline = LaplaceBaseline(net, CategoricalLikelihood(30), noise, subset="all", hessian="diag", pred_type="nn").fit(x, labels)
    f, latents = baseline.sample_outputs(x, 7)
    assert f.shape == (7, 30, 3) and latents == {}
    result = baseline.evaluate(x, labels, 50)
    assert 0 <= result["error"] <= 100 and result["test_ll"] < 0
    # after sampling, the network is back at its MAP weights
    f_map = net(x)
    torch.testing.assert_close(f_map, MLP.forward(net, x))


def test_bad_settings_are_named():
    net, likelihood = MLP(1, [4], 1), GaussianLikelihood(10, precision=1.0)
    with pytest.raises(ValueError, match="pred_type='nn' needs subset='all'"):
        LaplaceBaseline(net, likelihood, subset="last_layer", pred_type="nn")
    with pytest.raises(ValueError, match="subset"):
        LaplaceBaseline(net, likelihood, subset="first_layer")
    with pytest.raises(ValueError, match="hessian"):
        LaplaceBaseline(net, likelihood, hessian="full")
    with pytest.raises(RuntimeError, match="fit"):
        LaplaceBaseline(net, likelihood).sample_outputs(torch.zeros(2, 1))
