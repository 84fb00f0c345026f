"""MAP training of plain networks: the zoo's MAP objective, with closed-form optima to meet."""

import math

import pyro.distributions as dist
import pytest
import torch

from pyrozoo.baselines.training import NoisePrecision, negative_log_joint, run_epochs, train_map
from pyrozoo.models import MLP, CategoricalLikelihood, GaussianLikelihood
from tests.baselines.conftest import two_clusters

#: full-batch Adam steps of the linear fits, the learning rate decaying from 0.1 to 0.001
EPOCHS = 300


def _ridge(x, y, precision, prior_scale):
    """The MAP weights ``(w, b)`` of ``y ~ N(w x + b, 1/precision)`` under ``N(0, prior_scale^2)``."""
    phi = torch.cat([x, torch.ones_like(x)], 1).double()
    A = precision * phi.T @ phi + torch.eye(2, dtype=torch.float64) / prior_scale**2
    return torch.linalg.solve(A, precision * phi.T @ y.double())


def _fit_linear(likelihood, x, y, prior_scale):
    torch.manual_seed(0)
    net = MLP(1, [], 1).double()
    noise = train_map(net, likelihood, x.double(), y.double(), epochs=EPOCHS, batch_size=len(x), lr=0.1, lr_schedule=lambda e: 0.01 ** (e / EPOCHS), prior_scale=prior_scale)
    theta = torch.cat([net[0].weight.reshape(1), net[0].bias.reshape(1)]).detach()
    return theta, noise


def test_map_of_a_linear_model_with_fixed_noise_is_ridge_regression():
    x, y = two_clusters(30)
    theta, noise = _fit_linear(GaussianLikelihood(30, precision=4.0), x, y, prior_scale=0.5)
    assert noise.latents() == {}
    torch.testing.assert_close(theta, _ridge(x, y, 4.0, 0.5), atol=1e-4, rtol=1e-4)


def test_map_of_the_noise_precision_meets_its_stationary_point():
    """Joint MAP in (weights, tau) under tau ~ Gamma(a, b), no Jacobian: tau = (N/2 + a - 1) / (b + RSS/2)
    with the weights the ridge solution at that tau (solved here by fixed-point iteration)."""
    a, b, s = 3.0, 2.0, 1.0
    x, y = two_clusters(30)
    theta, noise = _fit_linear(GaussianLikelihood(30, precision=dist.Gamma(a, b)), x, y, prior_scale=s)
    tau = 1.0
    phi = torch.cat([x, torch.ones_like(x)], 1).double()
    for _ in range(200):
        w = _ridge(x, y, tau, s)
        rss = float(((y.double() - phi @ w) ** 2).sum())
        tau = (30 / 2 + a - 1) / (b + rss / 2)
    assert float(noise.latents()["precision"].detach()) == pytest.approx(tau, rel=1e-3)
    torch.testing.assert_close(theta, _ridge(x, y, tau, s), atol=1e-4, rtol=1e-4)


def test_negative_log_joint_is_the_scaled_minibatch_log_likelihood_plus_priors():
    x, y = two_clusters(10)
    net = MLP(1, [4], 1)
    likelihood = GaussianLikelihood(100, precision=dist.Gamma(6.0, 6.0))
    noise = NoisePrecision(likelihood)
    tau = float(noise.latents()["precision"].detach())
    assert tau == pytest.approx(1.0)  # the prior mean
    f = net(x)
    loss = negative_log_joint(likelihood, f, y, noise, 100, list(net.parameters()), prior_scale=2.0)
    log_lik = torch.distributions.Normal(f[:, 0], tau**-0.5).log_prob(y).mean() * 100
    weights = sum((p**2).sum() for p in net.parameters()) / (2 * 4.0)
    expected = -log_lik + weights - torch.distributions.Gamma(6.0, 6.0).log_prob(torch.tensor(tau))
    torch.testing.assert_close(loss, expected)
    # no prior: maximum likelihood
    nll = negative_log_joint(CategoricalLikelihood(10), torch.zeros(4, 3), torch.tensor([0, 1, 2, 0]), NoisePrecision(CategoricalLikelihood(10)), 10, prior_scale=None)
    assert float(nll) == pytest.approx(10 * math.log(3))


def test_run_epochs_takes_one_step_per_minibatch_and_stops_on_divergence():
    x, y = torch.randn(10, 2), torch.randn(10)
    calls = []

    def step(xb, yb):
        calls.append(len(xb))
        return torch.tensor(1.0)

    history = run_epochs(step, x, y, epochs=3, batch_size=4)
    assert calls == [4, 4, 2] * 3 and history == [1.0, 1.0, 1.0]
    with pytest.raises(FloatingPointError, match="epoch 0"):
        run_epochs(lambda xb, yb: torch.tensor(float("nan")), x, y, epochs=2, batch_size=4)
    with pytest.raises(ValueError, match="epochs"):
        run_epochs(step, x, y, epochs=0, batch_size=4)
