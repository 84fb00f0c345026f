"""SGLD and SGHMC: stationary moments on known Gaussians, the tempered variance, the
minibatch log-joint, runs with thinning, sinks and checkpoints, and bad input."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.ops.stats import effective_sample_size
from torch import nn

from pyrozoo.inference.sample_storage import DiskSamples, InMemorySamples
from pyrozoo.inference.sgmcmc import SGHMC, SGLD
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.models import BayesianNeuralNetwork, GaussianLikelihood, NormalPrior
from tests.inference.cases import conjugate_problem, linear_regression_model, unscaled_regression_model
from tests.stats import z_bound

# (sampler, kwargs): SGHMC's effective step is lr / (1 - momentum), so both move alike
SAMPLERS = {
    "sgld": (SGLD, {"lr": 1e-2}),
    "sghmc": (SGHMC, {"lr": 1e-3, "momentum": 0.9}),
}


def replicated_gaussian(mean, scale_tril, replicas):
    """``replicas`` independent copies of one Gaussian in a single site: one sampler run is
    that many independent chains, so moments are cheap to pin down."""

    def model():
        pyro.sample("z", dist.MultivariateNormal(mean, scale_tril=scale_tril).expand([replicas]).to_event(1))

    return model


def moment_errors_and_tolerances(draws, mean, cov, num_comparisons):
    """|error| and z * sqrt(var / ESS) for the mean and the covariance entries, with the
    effective sample size of each statistic estimated across chains (dim 0) and draws (dim 1)."""
    c = draws - mean
    i, j = torch.triu_indices(cov.shape[0], cov.shape[0])
    products = c[..., i] * c[..., j]
    z = z_bound(num_comparisons)
    out = []
    for stat, target in ((draws, mean), (products, cov[i, j])):
        ess = effective_sample_size(stat, chain_dim=0, sample_dim=1)
        tol = z * (stat.var((0, 1)) / ess).sqrt()
        out.append(((stat.mean((0, 1)) - target).abs(), tol))
    return out


@pytest.mark.parametrize("tau", [1.0, 4.0], ids=["tau1", "tau4"])
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_gaussian_target_moments_and_temperature(name, tau, device):
    """The chain's stationary mean is the target's and its covariance is cov / tau."""
    dtype = torch.float64
    mean = torch.tensor([1.0, -2.0], dtype=dtype, device=device)
    cov = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=dtype, device=device)
    scale_tril = torch.linalg.cholesky(cov)
    replicas, burn_in, draws = 2000, 500, 1000
    init = mean + torch.randn(replicas, 2, dtype=dtype, device=device) @ scale_tril.T
    cls, kwargs = SAMPLERS[name]
    sampler = cls(replicated_gaussian(mean, scale_tril, replicas), inverse_temperature=tau, init_values={"z": init}, **kwargs)
    for _ in range(burn_in):
        sampler.step()
    out = torch.empty(replicas, draws, 2, dtype=dtype, device=device)
    for t in range(draws):
        sampler.step()
        out[:, t] = sampler.values()["z"]
    # the Euler scheme's variance bias is about lr * lambda_max / 2 = 1%, well inside the tolerances
    (mean_err, mean_tol), (cov_err, cov_tol) = moment_errors_and_tolerances(out.cpu(), mean.cpu(), cov.cpu() / tau, 5)
    assert (mean_err < mean_tol).all(), (mean_err, mean_tol)
    assert (cov_err < cov_tol).all(), (cov_err, cov_tol)


def replicated_linear_regression(problem, replicas, device, dataset_size=None):
    """``replicas`` independent copies of a conjugate Bayesian linear regression in one
    network (``nn.Linear(d, replicas)`` fitted to ``y`` repeated in every output column):
    each row of the weight matrix has the exact posterior of ``problem``."""
    net = nn.Linear(problem.x.shape[1], replicas, bias=False).to(device=device, dtype=torch.float64)
    likelihood = GaussianLikelihood(dataset_size, precision=problem.noise_scale**-2)
    return BayesianNeuralNetwork(net, NormalPrior(problem.prior_scale), likelihood)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_conjugate_linear_regression_posterior(name, device):
    """SG-MCMC on a BayesianNeuralNetwork (Gaussian likelihood, Normal prior) matches the
    exact posterior's mean and covariance, within tolerances from the effective sample
    size. Full-batch gradients keep the replicated chains independent; the minibatch
    scaling is checked exactly below and end to end by the slow single-chain test."""
    problem = conjugate_problem(orthogonal=False, n=40, d=3)
    replicas = 2000
    model = replicated_linear_regression(problem, replicas, device)
    post_mean, post_cov = problem.posterior()
    cls, kwargs = SAMPLERS[name]
    # the largest posterior precision is ~100: lr 2e-4 keeps the discretisation bias ~1%
    sampler = cls(model, **{**kwargs, "lr": kwargs["lr"] / 50})
    x, y = problem.x.to(device), problem.y.to(device).unsqueeze(-1).expand(-1, replicas)
    init = post_mean.to(device) + torch.randn(replicas, 3, dtype=torch.float64, device=device) @ torch.linalg.cholesky(post_cov).T.to(device)
    sampler.init_values = {"weight": init}
    draws = []
    sampler.run((x, y), num_steps=1000, batch_size=len(x), burn_in=300, seed=0, progress=False, on_sample=lambda s, k, w: draws.append(s.values()["weight"]))
    draws = torch.stack(draws, 1).cpu()
    (mean_err, mean_tol), (cov_err, cov_tol) = moment_errors_and_tolerances(draws, post_mean, post_cov, 9)
    assert (mean_err < mean_tol).all(), (mean_err, mean_tol)
    assert (cov_err < cov_tol).all(), (cov_err, cov_tol)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_conjugate_linear_regression_single_minibatch_chain(name, device):
    """One long minibatch chain (N/n = 2) matches the exact posterior."""
    problem = conjugate_problem(orthogonal=True, n=40, d=3)
    model = linear_regression_model(problem, device=device, dataset_size=40)
    post_mean, post_cov = problem.posterior()
    cls, kwargs = SAMPLERS[name]
    sampler = cls(model, **{**kwargs, "lr": kwargs["lr"] / 50})
    draws = []
    x, y = problem.x.to(device), problem.y.to(device).unsqueeze(-1)
    sampler.run((x, y), num_steps=60000, batch_size=20, burn_in=2000, seed=0, progress=False, on_sample=lambda s, k, w: draws.append(s.values()["weight"].reshape(-1)))
    # four consecutive pieces of the chain act as chains for the split-chain ESS
    draws = torch.stack(draws).cpu()
    draws = draws[: len(draws) // 4 * 4].reshape(4, -1, 3)
    (mean_err, mean_tol), (cov_err, cov_tol) = moment_errors_and_tolerances(draws, post_mean, post_cov, 9)
    assert (mean_err < mean_tol).all(), (mean_err, mean_tol)
    # minibatch gradient noise inflates the variance by about lr * Var(grad) / 2 ~ 1%
    assert (cov_err < cov_tol + 0.02 * post_cov.abs().max()).all(), (cov_err, cov_tol)


def test_minibatch_log_joints_average_to_the_full_data_log_joint():
    """With the plate's N/n scale, minibatch log-likelihoods over a partition average to the
    full-data one (the prior is counted once per minibatch)."""
    problem = conjugate_problem(n=60)
    model = linear_regression_model(problem, dataset_size=60)
    sampler = SGLD(model, lr=1e-3)
    x, y = problem.x, problem.y.unsqueeze(-1)
    idx = torch.arange(60)
    sampler.setup(x, y, idx)
    full, _ = sampler.log_joint(x, y, idx)
    parts = [sampler.log_joint(x[i], y[i], i)[0] for i in idx.split(15)]
    assert torch.allclose(torch.stack(parts).mean(), full, rtol=1e-10)


def test_unscaled_observations_are_rejected():
    """A minibatch without the N/n plate scale would target the wrong posterior."""
    problem = conjugate_problem(n=40)
    with pytest.raises(ValueError, match="N/n"):
        SGLD(unscaled_regression_model, lr=1e-3).run((problem.x, problem.y), num_steps=1, batch_size=10, progress=False)


def test_constrained_sites_are_sampled_in_unconstrained_space():
    """A positive site (a noise precision with a Gamma prior) stays positive and its
    stationary distribution is its prior when the data carry no information about it."""
    def model():
        pyro.sample("precision", dist.Gamma(torch.full((4000,), 3.0, dtype=torch.float64), 2.0).to_event(1))

    sampler = SGLD(model, lr=2e-3)
    for _ in range(300):
        sampler.step()
    draws = []
    for _ in range(300):
        sampler.step()
        draws.append(sampler.values()["precision"])
    draws = torch.stack(draws, 1)
    assert (draws > 0).all()
    ess = effective_sample_size(draws.unsqueeze(-1), chain_dim=0, sample_dim=1)
    tol = z_bound() * (draws.var() / ess).sqrt()
    assert (draws.mean() - 1.5).abs() < tol  # Gamma(3, 2) has mean 1.5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"lr": -1e-3}, "step size"),
        ({"lr": float("nan")}, "lr must be finite"),
        ({"lr": 1e-3, "inverse_temperature": 0.0}, "inverse temperature"),
        ({"lr": PolynomialDecay(1e-3, 0.5), "inverse_temperature": -2.0}, "inverse temperature"),
        ({"lr": 1e-3, "momentum": 1.0}, "momentum"),
        ({"lr": 1e-3, "momentum": 0.9, "grad_noise_var": 1e3}, "friction"),
    ],
)
def test_invalid_hyperparameters_raise(kwargs, match):
    model = replicated_gaussian(torch.zeros(2), torch.eye(2), 1)
    with pytest.raises(ValueError, match=match):
        SGHMC(model, **kwargs) if "momentum" in kwargs else SGLD(model, **kwargs)


def test_a_schedule_that_turns_invalid_mid_run_raises():
    model = replicated_gaussian(torch.zeros(2), torch.eye(2), 1)
    sampler = SGLD(model, lr=lambda k: 1e-3 if k < 3 else float("inf"))
    sampler.step()
    sampler.step()
    with pytest.raises(ValueError, match="iteration 3"):
        sampler.step()


def test_discrete_latent_sites_are_rejected():
    def model():
        pyro.sample("coin", dist.Bernoulli(0.5))
        pyro.sample("z", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="discrete"):
        SGLD(model, lr=1e-3).step()


def _regression_run(tmp_path, epochs, sink, checkpoint):
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    problem = conjugate_problem(n=40)
    model = linear_regression_model(problem, dataset_size=40)
    sampler = SGHMC(model, lr=1e-4, momentum=0.5)
    history = sampler.run((problem.x, problem.y.unsqueeze(-1)), epochs=epochs, batch_size=10, thin=3, sink=sink, checkpoint=checkpoint, seed=3, progress=False)
    return sampler, history


def test_checkpoint_resume_continues_the_same_chain(tmp_path):
    """Two epochs at once equal one epoch, a checkpoint and a resumed second epoch, including
    the samples streamed to disk."""
    full, _ = _regression_run(tmp_path, 2, DiskSamples(tmp_path / "a", shard_size=2), None)
    _regression_run(tmp_path, 1, DiskSamples(tmp_path / "b", shard_size=2), tmp_path / "ck.pt")
    resumed, history = _regression_run(tmp_path, 2, DiskSamples(tmp_path / "b", shard_size=2), tmp_path / "ck.pt")
    assert list(history.epoch) == [1, 2]
    assert torch.equal(full.values()["weight"], resumed.values()["weight"])
    a, b = DiskSamples(tmp_path / "a").load(), DiskSamples(tmp_path / "b").load()
    assert a["weight"].shape[0] == 2  # iterations 3 and 6 of 2 epochs x 4 minibatches
    assert torch.equal(a["weight"], b["weight"])



def test_the_chain_keeps_a_channels_last_layout_through_a_checkpoint():
    """The sampler's tensors inherit the network's NHWC convolution weights, where oneDNN's
    CPU convolutions are faster, and a resumed chain keeps them."""
    from pyrozoo.models import CategoricalLikelihood, TwoConvTwoFCNet

    model = BayesianNeuralNetwork(TwoConvTwoFCNet(), NormalPrior(1.0), CategoricalLikelihood(100))
    sampler = SGHMC(model, lr=1e-7)
    x, y = torch.rand(4, 1, 28, 28), torch.randint(0, 10, (4,))
    sampler.step(x, y, torch.arange(4))
    sampler.load_state_dict(sampler.state_dict())
    sampler.step(x, y, torch.arange(4))
    # conv2 (32 input channels) tells the layouts apart; conv1's single channel does not
    assert sampler.unconstrained("conv2.weight").is_contiguous(memory_format=torch.channels_last)
    assert sampler.momentum("conv2.weight").is_contiguous(memory_format=torch.channels_last)

def test_disk_samples_truncate_to_a_checkpoint(tmp_path):
    sink = DiskSamples(tmp_path, shard_size=3)
    for i in range(7):
        sink.append({"w": torch.full((2,), float(i))})
    state = {"count": 5}
    sink.flush()
    reopened = DiskSamples(tmp_path, shard_size=3)
    reopened.load_state_dict(state)
    assert len(reopened) == 5
    assert torch.equal(reopened.load()["w"][:, 0], torch.arange(5.0))
    assert len(list(tmp_path.glob("samples-*.pt"))) == 2


def test_thinning_and_burn_in_select_the_iterations():
    problem = conjugate_problem(n=40)
    model = linear_regression_model(problem, dataset_size=40)
    steps = []
    sink = InMemorySamples()
    SGLD(model, lr=1e-4).run((problem.x, problem.y.unsqueeze(-1)), num_steps=25, batch_size=10, burn_in=4, thin=5, sink=sink, on_sample=lambda s, k, w: steps.append(k), progress=False)
    assert steps == [9, 14, 19, 24]
    assert len(sink) == 4


def test_dataset_size_is_taken_from_the_data_when_unset():
    problem = conjugate_problem(n=40)
    net = nn.Linear(3, 1, bias=False).double()
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), GaussianLikelihood(None, precision=2.0))
    SGLD(model, lr=1e-4).run((problem.x, problem.y.unsqueeze(-1)), num_steps=2, batch_size=10, progress=False)
    assert model.likelihood.dataset_size == 40


def test_run_argument_errors():
    problem = conjugate_problem(n=40)
    sampler = SGLD(linear_regression_model(problem, dataset_size=40), lr=1e-4)
    data = (problem.x, problem.y.unsqueeze(-1))
    with pytest.raises(ValueError, match="exactly one"):
        sampler.run(data, epochs=1, num_steps=3)
    with pytest.raises(ValueError, match="thin"):
        sampler.run(data, epochs=1, thin=0)
    with pytest.raises(ValueError, match="NaN"):
        sampler.run((problem.x, torch.full((40, 1), math.nan, dtype=torch.float64)), epochs=1)


def test_values_are_snapshots_not_views_of_the_chain():
    """The sampler updates its tensors in place; values() must not alias them."""
    model = replicated_gaussian(torch.zeros(2), torch.eye(2), 3)
    sampler = SGLD(model, lr=1e-2)
    sampler.step()
    before = sampler.values()["z"]
    kept = before.clone()
    sampler.step()
    assert torch.equal(before, kept)
    assert not torch.equal(sampler.values()["z"], kept)
