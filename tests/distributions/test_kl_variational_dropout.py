"""KL divergences of Normal posteriors to the log-uniform and ARD priors."""

import math

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from scipy import integrate, stats
from torch.distributions import kl_divergence

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.distributions.ard import ARDNormal
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.kl import LOG_ALPHA_CLIP, kl_log_uniform_from_log_alpha, summed_kl
from pyrozoo.distributions.log_uniform import LogUniformImproper
from tests.stats import mean_tolerance

LOG_ALPHA_GRID = [-8.0, -6.0, -4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0, 6.0, 8.0]
#: the sigmoid fit's accuracy target (nats per weight)
APPROXIMATION_TOLERANCE = 0.02
#: the constant that makes KL(N(theta, alpha theta^2) || LogU) -> 0 as alpha -> infinity:
#: -1/2 log alpha + E log|1 + sqrt(alpha) z| -> E log|z| = -(gamma + log 2) / 2
KL_CONSTANT = (np.euler_gamma + math.log(2)) / 2


def test_log_uniform_kl_matches_monte_carlo_over_alpha_grid(device):
    """KL up to the improper prior's constant: ``-1/2 log alpha + E_{eps ~ N(1, alpha)} log|eps| + C``
    (thesis eq. 7), estimated with 10^6 draws per alpha; the approximation (eq. 8) must be
    within 0.02 nats plus the Monte Carlo error."""
    g = torch.Generator(device=device).manual_seed(0)
    S = 1_000_000
    z = torch.randn(S, generator=g, dtype=torch.float64, device=device)
    la = torch.tensor(LOG_ALPHA_GRID, dtype=torch.float64, device=device)
    approx = kl_log_uniform_from_log_alpha(la)
    for i, l in enumerate(LOG_ALPHA_GRID):
        log_eps = (1.0 + math.exp(l / 2) * z).abs().log()
        mc = -0.5 * l + log_eps.mean() + KL_CONSTANT
        tol = APPROXIMATION_TOLERANCE + mean_tolerance(log_eps.var(), S, len(LOG_ALPHA_GRID))
        assert abs(float(approx[i] - mc)) <= tol, (l, float(approx[i]), float(mc))


@pytest.mark.parametrize("log_alpha", [-3.0, 0.5, 5.0])
def test_log_uniform_kl_matches_quadrature(log_alpha):
    """An independent check of the same quantity by quadrature (the log singularity at
    ``eps = 0`` given to ``quad`` as a break point)."""
    s = math.exp(log_alpha / 2)
    f = lambda z: np.log(abs(1 + s * z)) * stats.norm.pdf(z)  # noqa: E731
    expectation = sum(integrate.quad(f, a, b, limit=200)[0] for a, b in [(-np.inf, -1 / s), (-1 / s, np.inf)])
    exact = -0.5 * log_alpha + expectation + KL_CONSTANT
    assert abs(float(kl_log_uniform_from_log_alpha(torch.tensor(log_alpha, dtype=torch.float64))) - exact) <= APPROXIMATION_TOLERANCE


def test_log_uniform_kl_limits_and_gradient():
    la = torch.linspace(-12, 12, 49, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(kl_log_uniform_from_log_alpha, (la,))
    kl = kl_log_uniform_from_log_alpha(la)
    assert (kl > 0).all() and (kl.diff() < 0).all()  # decreasing in alpha
    assert float(kl_log_uniform_from_log_alpha(torch.tensor(math.inf))) == 0.0  # zero-mean layers


def _normal_pair(kind, g, prior):
    loc = torch.randn(4, 5, generator=g, dtype=torch.float64)
    log_scale = torch.randn(4, 5, generator=g, dtype=torch.float64) - 1
    p = prior((4, 5))
    if kind == "Normal":
        return dist.Normal(loc, log_scale.exp()), p, loc, log_scale
    if kind == "LogScaleNormal":
        return LogScaleNormal(loc, log_scale), p, loc, log_scale
    log_alpha = (2 * log_scale - (loc * loc).log()).clamp(*LOG_ALPHA_CLIP)
    return DropoutNormal(loc, log_scale, log_alpha), p, loc, log_scale


@pytest.mark.parametrize("kind", ["Normal", "LogScaleNormal", "DropoutNormal"])
@pytest.mark.parametrize("prior", [LogUniformImproper, ARDNormal], ids=lambda c: c.__name__)
def test_rules_agree_across_normal_types_and_summed_form(kind, prior):
    g = torch.Generator().manual_seed(0)
    q, p, loc, log_scale = _normal_pair(kind, g, prior)
    kl = kl_divergence(q, p)
    assert kl.shape == (4, 5)
    log_alpha = (2 * log_scale - (loc * loc).log()).clamp(*LOG_ALPHA_CLIP)
    expected = kl_log_uniform_from_log_alpha(log_alpha) if prior is LogUniformImproper else 0.5 * torch.log1p(torch.exp(-log_alpha))
    torch.testing.assert_close(kl, expected)
    torch.testing.assert_close(summed_kl(q.to_event(2), p.to_event(2)), kl.sum())
    torch.testing.assert_close(kl_divergence(q.to_event(2), p.to_event(2)), kl.sum())


def test_ard_kl_is_the_empirical_bayes_gaussian_kl():
    """``1/2 log(1 + 1/alpha) = min over lambda of KL(N(mu, sigma^2) || N(0, lambda^2))``."""
    g = torch.Generator().manual_seed(2)
    # |log alpha| < 8, so the clip of a plain Normal's log alpha is inactive
    mu = (torch.rand(50, generator=g, dtype=torch.float64) * 1.8 + 0.2) * torch.randn(50, generator=g, dtype=torch.float64).sign()
    sigma = torch.rand(50, generator=g, dtype=torch.float64) * 0.9 + 0.1
    q = dist.Normal(mu, sigma)
    optimum = kl_divergence(q, dist.Normal(torch.zeros_like(mu), (mu * mu + sigma * sigma).sqrt()))
    torch.testing.assert_close(kl_divergence(q, ARDNormal((50,))), optimum)
    for factor in (0.5, 2.0):  # any other prior variance is worse
        other = kl_divergence(q, dist.Normal(torch.zeros_like(mu), factor * (mu * mu + sigma * sigma).sqrt()))
        assert (other > optimum).all()


@pytest.mark.parametrize("alpha_shape", [(4, 1), (1, 1)], ids=["neuron", "layer"])
def test_shared_log_alpha_summed_kl_counts_every_weight(alpha_shape, device):
    """A rate shared by k weights contributes k times its KL (Neklyudov et al.'s layer KL)."""
    g = torch.Generator().manual_seed(3)
    loc = torch.randn(4, 5, generator=g).to(device)
    log_alpha = torch.randn(alpha_shape, generator=g).to(device).requires_grad_()
    q = DropoutNormal(loc, torch.zeros_like(loc), log_alpha).to_event(2)
    for prior in (LogUniformImproper, ARDNormal):
        total = summed_kl(q, prior((4, 5)).to_event(2))
        reference = kl_divergence(q.base_dist, prior((4, 5))).sum()
        torch.testing.assert_close(total, reference)
        (grad,) = torch.autograd.grad(total, log_alpha)
        (grad_ref,) = torch.autograd.grad(reference, log_alpha)
        torch.testing.assert_close(grad, grad_ref)


def test_log_alpha_of_plain_normal_is_clipped():
    q = dist.Normal(torch.tensor([0.0, 1.0, 1.0]), torch.tensor([1.0, 1e-6, 1e6]))
    kl = kl_divergence(q, LogUniformImproper((3,)))
    expected = kl_log_uniform_from_log_alpha(torch.tensor([LOG_ALPHA_CLIP[1], LOG_ALPHA_CLIP[0], LOG_ALPHA_CLIP[1]]))
    torch.testing.assert_close(kl, expected)
