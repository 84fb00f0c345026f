"""ClosedFormKL_ELBO: the analytic ELBO in expectation, minibatch unbiasedness, and
agreement of the direct and trace-based evaluations."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO

from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import ClosedFormKL_ELBO
from pyrozoo.poutine import flipout, latent_scale, local_reparameterization
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn
from tests.stats import z_bound

HANDLERS = {"none": None, "local": local_reparameterization, "flipout": flipout}


def analytic_elbo(problem, loc, scale):
    """E_q[log p(y | X, w)] - KL(q || p) for q = N(loc, diag(scale^2)), Bayesian linear regression."""
    x, y, s2 = problem.x, problem.y, problem.noise_scale**2
    resid = y - x @ loc
    expected_sq = resid.square() + (x.square() @ scale.square())
    loglik = (-0.5 * math.log(2 * math.pi * s2) - expected_sq / (2 * s2)).sum()
    p2 = problem.prior_scale**2
    kl = (0.5 * (scale.square() / p2 + loc.square() / p2 - 1) - torch.log(scale) + 0.5 * math.log(p2)).sum()
    return loglik - kl


@pytest.mark.parametrize("handler", list(HANDLERS))
def test_estimate_is_unbiased_for_the_analytic_elbo(handler, device):
    problem = conjugate_problem(orthogonal=False)
    x, y = problem.x.to(device), problem.y.to(device)
    model = linear_regression_model(problem, device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.3)
    guide(x, y)
    loc, log_scale = guide.loc_and_log_scale("weight")
    exact = analytic_elbo(problem, loc.detach().cpu().reshape(-1), log_scale.detach().exp().cpu().reshape(-1))
    elbo = ClosedFormKL_ELBO()
    S = 2000
    draws = []
    with torch.no_grad():
        for _ in range(S):
            if HANDLERS[handler] is None:
                draws.append(-elbo.differentiable_loss(model, guide, x, y))
            else:
                with HANDLERS[handler]():
                    draws.append(-elbo.differentiable_loss(model, guide, x, y))
    draws = torch.stack(draws).cpu()
    assert abs(draws.mean() - exact) < z_bound() * draws.std() / S**0.5 + 1e-9


def test_minibatch_losses_average_to_the_full_data_loss():
    """With the N/n plate scale, the mean minibatch loss over a partition of the data equals
    the full-data loss (exactly, for a deterministic guide)."""
    problem = conjugate_problem(n=60)
    N = len(problem.y)
    model = linear_regression_model(problem, dataset_size=N)
    guide = DeltaGuide(model)
    guide(problem.x, problem.y)
    elbo = ClosedFormKL_ELBO()
    full = elbo.loss(model, guide, problem.x, problem.y)
    perm = torch.randperm(N)
    for n in (6, 15, 20):
        parts = [elbo.loss(model, guide, problem.x[idx], problem.y[idx], idx) for idx in perm.split(n)]
        assert sum(parts) / len(parts) == pytest.approx(full, rel=1e-10)


@pytest.mark.parametrize("handler", list(HANDLERS))
@pytest.mark.parametrize("prior", ["normal", "mixture"])
@pytest.mark.parametrize("scale", [1.0, 0.3])
def test_direct_and_trace_evaluations_agree(handler, prior, scale, device):
    """Same random numbers, same value and gradients, whichever path evaluates the ELBO."""
    torch.manual_seed(0)
    x, y = torch.randn(20, 5, device=device), torch.randn(20, 1, device=device)
    model = small_bnn(prior=prior, device=device)
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    results = []
    for fuse in (True, False):
        elbo = ClosedFormKL_ELBO(fuse=fuse)
        pyro.set_rng_seed(3)
        with latent_scale(scale):
            if HANDLERS[handler] is None:
                loss = elbo.differentiable_loss(model, guide, x, y)
            else:
                with HANDLERS[handler]():
                    loss = elbo.differentiable_loss(model, guide, x, y)
        results.append((loss, torch.autograd.grad(loss, list(guide.parameters()))))
    (l1, g1), (l2, g2) = results
    assert torch.allclose(l1, l2, rtol=1e-5)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_direct_path_is_used_only_without_foreign_handlers():
    x, y = torch.randn(10, 5), torch.randn(10, 1)
    model = small_bnn()
    guide = MeanFieldNormalGuide(model)
    guide(x, y)
    elbo = ClosedFormKL_ELBO()
    assert elbo._direct_plan(model, guide, (x, y), {}) is not None
    with pyro.poutine.trace(param_only=True):
        assert elbo._direct_plan(model, guide, (x, y), {}) is None
    assert ClosedFormKL_ELBO(fuse=False)._direct_plan(model, guide, (x, y), {}) is None
    assert elbo._direct_plan(model, guide, (x,), {}) is None  # nothing observed


@pytest.mark.parametrize("reference", [Trace_ELBO, TraceMeanField_ELBO])
def test_matches_pyro_objectives_in_expectation(reference):
    """On a mixture prior (Monte Carlo KL) and a Gamma precision site, the estimator has
    the same expectation as Pyro's own ELBOs."""
    torch.manual_seed(0)
    x, y = torch.randn(30, 5, dtype=torch.float64), torch.randn(30, 1, dtype=torch.float64)
    model = small_bnn(prior="mixture", dtype=torch.float64, dataset_size=30)
    guide = MeanFieldNormalGuide(model, init_scale=0.2)
    guide(x, y)
    S = 500
    ours = torch.tensor([ClosedFormKL_ELBO().loss(model, guide, x, y) for _ in range(S)])
    theirs = torch.tensor([reference().loss(model, guide, x, y) for _ in range(S)])
    se = (ours.var() / S + theirs.var() / S).sqrt()
    assert abs(ours.mean() - theirs.mean()) < z_bound() * se


def test_particles_average():
    x, y = torch.randn(10, 5), torch.randn(10, 1)
    model = small_bnn()
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    pyro.set_rng_seed(1)
    many = ClosedFormKL_ELBO(num_particles=4).loss(model, guide, x, y)
    pyro.set_rng_seed(1)
    singles = [ClosedFormKL_ELBO().loss(model, guide, x, y) for _ in range(4)]
    assert many == pytest.approx(sum(singles) / 4, rel=1e-5)


def test_works_with_svi_and_trains():
    problem = conjugate_problem()
    model = linear_regression_model(problem)
    guide = MeanFieldNormalGuide(model, init_scale=0.5)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.05}), ClosedFormKL_ELBO())
    first = svi.step(problem.x, problem.y)
    for _ in range(300):
        last = svi.step(problem.x, problem.y)
    assert last < first


def test_auxiliary_guide_sites_full_rank_guide():
    """A full-rank guide (Pyro's AutoMultivariateNormal: an auxiliary latent plus Delta
    sites) gives the same expected ELBO as Trace_ELBO."""
    from pyro.infer.autoguide import AutoMultivariateNormal

    problem = conjugate_problem(orthogonal=False)
    model = linear_regression_model(problem)
    guide = AutoMultivariateNormal(model, init_scale=0.3)
    guide(problem.x, problem.y)
    S = 500
    ours = torch.tensor([ClosedFormKL_ELBO().loss(model, guide, problem.x, problem.y) for _ in range(S)])
    theirs = torch.tensor([Trace_ELBO().loss(model, guide, problem.x, problem.y) for _ in range(S)])
    se = (ours.var() / S + theirs.var() / S).sqrt()
    assert abs(ours.mean() - theirs.mean()) < z_bound() * se


def test_non_reparameterized_guide_sites_are_rejected():
    def model():
        pyro.sample("z", dist.Normal(0.0, 1.0))

    class NoRsample(dist.Normal):
        has_rsample = False

    def guide2():
        pyro.sample("z", NoRsample(0.0, 1.0))

    with pytest.raises(NotImplementedError, match="reparameterized"):
        ClosedFormKL_ELBO().loss(model, guide2)
