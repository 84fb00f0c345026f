"""Synthetic problems with known answers: the conjugate linear regression's exact posterior
and evidence, the orthogonal design, and the 1-d toy problem."""

import math

import pytest
import torch

from pyrozoo.data import linear_regression, toy_regression_1d
from tests.stats import gaussian_variance_rel_tolerance, mean_tolerance, z_bound

PROBLEMS = [
    dict(n=40, d=3, noise_scale=0.5, prior_scale=1.0),
    dict(n=12, d=5, noise_scale=2.0, prior_scale=0.3, seed=4),
    dict(n=64, d=4, noise_scale=0.2, prior_scale=2.0, orthogonal=True, seed=1),
]


@pytest.fixture(params=PROBLEMS, ids=["basic", "wide-noisy", "orthogonal"])
def problem(request):
    return linear_regression(**request.param)


def test_shapes_and_dtype(dtype):
    p = linear_regression(n=20, d=3, dtype=dtype)
    assert p.x.shape == (20, 3) and p.y.shape == (20,) and p.true_weight.shape == (3,)
    assert p.x.dtype == p.y.dtype == dtype
    mean, cov = p.posterior()
    assert mean.shape == (3,) and cov.shape == (3, 3) and mean.dtype == dtype


def test_posterior_satisfies_the_normal_equations(problem):
    """(X^T X / s^2 + I / t^2) m = X^T y / s^2 and the covariance inverts that matrix."""
    p = problem
    mean, cov = p.posterior()
    d = p.x.shape[1]
    precision = p.x.T @ p.x / p.noise_scale**2 + torch.eye(d, dtype=p.x.dtype) / p.prior_scale**2
    torch.testing.assert_close(precision @ mean, p.x.T @ p.y / p.noise_scale**2)
    torch.testing.assert_close(precision @ cov, torch.eye(d, dtype=p.x.dtype))
    torch.testing.assert_close(cov, cov.T)
    assert (torch.linalg.eigvalsh(cov) > 0).all()


def test_posterior_is_the_stationary_point_of_the_log_joint(problem):
    """The posterior mean is where the gradient of log p(y | w) + log p(w) vanishes."""
    p = problem
    mean, _ = p.posterior()
    w = mean.clone().requires_grad_()
    log_joint = torch.distributions.Normal(p.x @ w, p.noise_scale).log_prob(p.y).sum()
    log_joint = log_joint + torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), p.prior_scale).log_prob(w).sum()
    (grad,) = torch.autograd.grad(log_joint, w)
    assert grad.abs().max() < 1e-8 * (1 + p.x.abs().max() ** 2 * len(p.y))


def test_orthogonal_design():
    p = linear_regression(n=64, d=4, orthogonal=True, seed=2)
    gram = p.x.T @ p.x
    torch.testing.assert_close(gram, 64 * torch.eye(4, dtype=p.x.dtype))
    _, cov = p.posterior()
    torch.testing.assert_close(cov, torch.diag(torch.diagonal(cov)), atol=1e-12, rtol=0)
    # and a generic design is not orthogonal
    q = linear_regression(n=64, d=4, seed=2)
    off = q.x.T @ q.x - torch.diag(torch.diagonal(q.x.T @ q.x))
    assert off.abs().max() > 1.0


def test_bayes_rule_identity(problem):
    """log p(y|w) + log p(w) - log p(w|y) = log p(y) for every w: posterior and evidence agree."""
    p = problem
    mean, cov = p.posterior()
    posterior = torch.distributions.MultivariateNormal(mean, cov)
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        w = mean + torch.randn(mean.shape, generator=g, dtype=mean.dtype) * 2
        log_lik = torch.distributions.Normal(p.x @ w, p.noise_scale).log_prob(p.y).sum()
        log_prior = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), p.prior_scale).log_prob(w).sum()
        torch.testing.assert_close(log_lik + log_prior - posterior.log_prob(w), p.log_evidence())


def test_log_evidence_against_monte_carlo():
    """Importance sampling of p(y) = E_q[p(y|w) p(w) / q(w)] with a proposal twice as wide as
    the posterior; tolerance from the weights' standard error (delta method on the log)."""
    p = linear_regression(n=15, d=2, noise_scale=0.7, prior_scale=1.5, seed=3)
    mean, cov = p.posterior()
    proposal = torch.distributions.MultivariateNormal(mean, 4 * cov)
    S = 20000
    w = proposal.sample((S,))
    log_lik = torch.distributions.Normal(w @ p.x.T, p.noise_scale).log_prob(p.y).sum(-1)
    log_prior = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), p.prior_scale).log_prob(w).sum(-1)
    log_w = log_lik + log_prior - proposal.log_prob(w)
    shift = log_w.max()
    weights = (log_w - shift).exp()
    estimate = weights.mean().log() + shift
    rel_se = weights.std() / (weights.mean() * math.sqrt(S))
    assert abs(float(estimate - p.log_evidence())) < z_bound() * float(rel_se)


def test_noise_has_the_stated_scale():
    p = linear_regression(n=20000, d=2, noise_scale=0.3, seed=5)
    residual = p.y - p.x @ p.true_weight
    assert abs(float(residual.mean())) < mean_tolerance(0.09, len(residual))
    assert abs(float(residual.var()) / 0.09 - 1) < gaussian_variance_rel_tolerance(len(residual))


def test_reproducible_from_the_seed():
    a, b, c = linear_regression(seed=7), linear_regression(seed=7), linear_regression(seed=8)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
    assert not torch.equal(a.y, c.y)


def test_toy_regression_1d(dtype):
    x, y = toy_regression_1d(n=64, noise_scale=0.1, dtype=dtype)
    assert x.shape == y.shape == (64, 1) and x.dtype == y.dtype == dtype
    # two clusters with a gap in (-0.5, 0.5), where the model should be uncertain
    assert ((x >= -2.0) & (x <= -0.5) | (x >= 0.5) & (x <= 2.0)).all()
    assert ((x < 0).sum(), (x > 0).sum()) == (32, 32)
    residual = (y - torch.sin(3 * x)).double()
    assert abs(float(residual.std()) - 0.1) < 0.1 * gaussian_variance_rel_tolerance(64)
