"""Guides: exact conjugate posteriors, MAP, plates, supports, SVI/Predictive compatibility."""

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import Predictive

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import ClosedFormKL_ELBO, fit
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn


def test_mean_field_recovers_the_exact_posterior_of_an_orthogonal_design():
    """With orthogonal inputs the exact posterior of Bayesian linear regression factorises,
    so the ELBO's optimum over mean-field Gaussians is the exact posterior. Tolerance: 0.1
    posterior standard deviations for the means, 5% for the standard deviations (SVI's
    residual noise at the final learning rate)."""
    pyro.enable_validation(False)
    problem = conjugate_problem(orthogonal=True)
    mean, cov = problem.posterior()
    model = linear_regression_model(problem)
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    epochs = 1500
    fit(model, guide, (problem.x, problem.y), epochs=epochs, batch_size=len(problem.y), lr=0.05,
        lr_schedule=lambda e: 0.01 ** (e / epochs), objective=ClosedFormKL_ELBO(num_particles=4),
        estimator="local", seed=0, progress=False)
    loc, log_scale = guide.loc_and_log_scale("weight")
    sd = cov.diag().sqrt()
    assert ((loc.detach().reshape(-1) - mean).abs() / sd).max() < 0.1
    assert (log_scale.detach().exp().reshape(-1) / sd - 1).abs().max() < 0.05


def test_delta_guide_finds_the_posterior_mode():
    """MAP of Bayesian linear regression (non-orthogonal design) is the exact posterior mean."""
    pyro.enable_validation(False)
    problem = conjugate_problem(orthogonal=False)
    mean, _ = problem.posterior()
    model = linear_regression_model(problem)
    guide = DeltaGuide(model)
    fit(model, guide, (problem.x, problem.y), epochs=2000, batch_size=len(problem.y), lr=0.05,
        lr_schedule=lambda e: 0.02 ** (e / 2000), seed=0, progress=False)
    assert torch.allclose(guide.median()["weight"].reshape(-1), mean, atol=1e-4)


def test_full_rank_posterior_with_pyro_autoguide():
    """Where mean-field cannot be exact, a full-rank guide with pyrozoo's objective recovers
    the exact covariance (Pyro's AutoMultivariateNormal)."""
    from pyro.infer import SVI
    from pyro.infer.autoguide import AutoMultivariateNormal

    pyro.enable_validation(False)
    problem = conjugate_problem(orthogonal=False, d=2)
    mean, cov = problem.posterior()
    model = linear_regression_model(problem)
    guide = AutoMultivariateNormal(model, init_scale=0.1)
    optim = pyro.optim.ClippedAdam({"lr": 0.05, "lrd": 0.997})
    svi = SVI(model, guide, optim, ClosedFormKL_ELBO(num_particles=4))
    for _ in range(1500):
        svi.step(problem.x, problem.y)
    q_loc = guide.loc.detach()
    q_cov = guide.get_posterior().covariance_matrix.detach()
    sd = cov.diag().sqrt()
    assert ((q_loc - mean).abs() / sd).max() < 0.1
    assert ((q_cov - cov).abs() / torch.outer(sd, sd)).max() < 0.1


def test_initial_locations_are_the_network_values():
    model = small_bnn()
    x, y = torch.randn(4, 5), torch.randn(4, 1)
    guide = MeanFieldNormalGuide(model)
    guide(x, y)
    for name, p in model.net.named_parameters():
        loc, _ = guide.loc_and_log_scale(name)
        assert torch.equal(loc.detach(), p.detach())


def test_site_families_follow_the_support():
    model = small_bnn(precision="random")
    x, y = torch.randn(4, 5), torch.randn(4, 1)
    guide = MeanFieldNormalGuide(model)
    guide(x, y)
    assert isinstance(guide.posterior("0.weight").base_dist, LogScaleNormal)
    assert isinstance(guide.posterior("noise_precision"), dist.LogNormal)

    def simplex_model():
        pyro.sample("p", dist.Dirichlet(torch.ones(3)))

    g = MeanFieldNormalGuide(simplex_model)
    sample = g()["p"]
    assert sample.shape == (3,) and torch.allclose(sample.sum(), torch.tensor(1.0)) and (sample > 0).all()


def test_max_scale_caps_the_standard_deviation():
    model = small_bnn()
    x, y = torch.randn(4, 5), torch.randn(4, 1)
    guide = MeanFieldNormalGuide(model, init_scale=0.05, max_scale=0.1)
    guide(x, y)
    with torch.no_grad():
        for p in guide.log_scales.values():
            p.fill_(3.0)
    _, log_scale = guide.loc_and_log_scale("0.weight")
    assert torch.allclose(log_scale.exp(), torch.tensor(0.1))


@pytest.mark.parametrize("kwargs", [{"init_scale": 0.0}, {"init_scale": -1.0}, {"init_scale": float("nan")}, {"init_scale": 0.5, "max_scale": 0.1}, {"max_scale": -1.0}])
def test_invalid_hyperparameters(kwargs):
    with pytest.raises(ValueError):
        MeanFieldNormalGuide(small_bnn(), **kwargs)


@pytest.mark.parametrize("guide_class", [MeanFieldNormalGuide, DeltaGuide])
def test_local_latents_in_subsampled_plates(guide_class):
    """Parameters have the plate's full size and each call slices them by the subsample
    (which, as for Pyro's autoguides, the guide learns from ``create_plates``)."""
    N = 10

    def model(idx):
        with pyro.plate("items", N, subsample=idx):
            pyro.sample("z", dist.Normal(0.0, 1.0))

    guide = guide_class(model, create_plates=lambda idx: pyro.plate("items", N, subsample=idx))
    idx = torch.tensor([1, 4, 7])
    tr = pyro.poutine.trace(guide).get_trace(idx)
    assert tr.nodes["z"]["value"].shape == (3,)
    assert guide.locs["z"].shape == (N,)
    with torch.no_grad():
        guide.locs["z"].copy_(torch.arange(N, dtype=torch.float32))
        if guide_class is MeanFieldNormalGuide:
            guide.log_scales["z"].fill_(-20.0)
    value = pyro.poutine.trace(guide).get_trace(idx).nodes["z"]["value"]
    assert torch.allclose(value, idx.float(), atol=1e-6)


def test_predictive_uses_the_guide(device):
    model = small_bnn(device=device)
    x, y = torch.randn(6, 5, device=device), torch.randn(6, 1, device=device)
    guide = MeanFieldNormalGuide(model, init_scale=1e-6)
    guide(x, y)
    out = Predictive(model, guide=guide, num_samples=3, return_sites=["_RETURN"])(x)["_RETURN"]
    assert out.shape == (3, 6, 1)
    assert torch.allclose(out[0], model.net(x), atol=1e-3)


def test_hidden_sites_are_left_to_the_prior():
    model = small_bnn()
    guide = MeanFieldNormalGuide(model, hide=["noise_precision"])
    guide(torch.randn(3, 5), torch.randn(3, 1))
    assert "noise_precision" not in guide.sites()
