"""SG-MCMC-SA: the closed-form SA targets against numerical optimisation and exp-space
formulas, the drift of the Pyro model against the paper's gradient of Q, the EM and
frozen variants, and a small end-to-end sparse regression."""

import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy import optimize
from torch import nn

from pyrozoo.inference import SpikeOnlyWarning
from pyrozoo.inference.sgmcmc import SGHMC, SGLD
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation, delta_tilde, rho_tilde, sigma_tilde
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior

# (v0, v1): the regression setting (Laplace narrower), the CIFAR setting (Gaussian narrower)
HYPERPARAMETERS = {"regression": (0.1, 10.0), "cifar": (0.005, 1e-5)}


def q1_of_sigma(sigma, l1_norm, l2_norm, p, nu, lam, residual=None, n_obs=0.0):
    """Q_1 (Eq. 10, plus the regression likelihood's -N/2 log sigma^2 - I / (2 sigma^2))
    as a function of sigma alone."""
    a = p + nu + 2 + (n_obs if residual is not None else 0.0)
    c = l2_norm + nu * lam + (residual if residual is not None else 0.0)
    return -0.5 * a * math.log(sigma**2) - l1_norm / sigma - c / (2 * sigma**2)


@pytest.mark.parametrize("regression", [False, True], ids=["classification", "regression"])
@pytest.mark.parametrize("l1_norm, l2_norm", [(0.0, 3.0), (250.0, 40.0), (1e4, 1e-3)])
def test_sigma_tilde_is_the_argmax_of_q1(l1_norm, l2_norm, regression):
    p, nu, lam = 1000, 1.0, 1.0
    residual, n_obs = (310.0, 100.0) if regression else (None, 0.0)
    closed = float(sigma_tilde(torch.tensor(l1_norm, dtype=torch.float64), torch.tensor(l2_norm, dtype=torch.float64), p, nu, lam, None if residual is None else torch.tensor(residual, dtype=torch.float64), n_obs))
    res = optimize.minimize_scalar(lambda s: -q1_of_sigma(s, l1_norm, l2_norm, p, nu, lam, residual, n_obs), bounds=(1e-6, 1e3), method="bounded", options={"xatol": 1e-12})
    assert closed == pytest.approx(res.x, rel=1e-5)
    assert q1_of_sigma(closed, l1_norm, l2_norm, p, nu, lam, residual, n_obs) >= -res.fun - 1e-9


@pytest.mark.parametrize("setting", list(HYPERPARAMETERS))
def test_rho_tilde_is_finite_in_float32_and_equals_the_exp_space_formula(setting):
    v0, v1 = HYPERPARAMETERS[setting]
    beta64 = torch.linspace(-10, 10, 4001, dtype=torch.float64)
    sigma64, delta64 = torch.tensor(1.3, dtype=torch.float64), torch.tensor(0.3, dtype=torch.float64)
    ours32 = rho_tilde(beta64.float(), sigma64.float(), delta64.float(), v0, v1)
    assert torch.isfinite(ours32).all()
    assert ((ours32 >= 0) & (ours32 <= 1)).all()
    a = dist.Normal(0.0, sigma64 * math.sqrt(v1)).log_prob(beta64).exp() * delta64
    b = dist.Laplace(0.0, sigma64 * v0).log_prob(beta64).exp() * (1 - delta64)
    exp_space = a / (a + b)
    finite = torch.isfinite(exp_space)
    assert finite.any()
    if setting == "cifar":
        # the official code's formula fails here: both densities underflow to 0
        assert not finite.all()
    ours64 = rho_tilde(beta64, sigma64, delta64, v0, v1)
    assert torch.allclose(ours64[finite], exp_space[finite], rtol=1e-10, atol=1e-12)
    assert torch.allclose(ours32.double()[finite], exp_space[finite], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("a, b", [(1.0, 1.0), (1.0, 1000.0), (50.0, 50.0)])
def test_delta_tilde_is_the_argmax_of_q2(a, b):
    torch.manual_seed(0)
    rho = torch.rand(300, dtype=torch.float64) ** 3
    p = rho.numel()

    def q2(d):
        return math.log(d / (1 - d)) * float(rho.sum()) + (a - 1) * math.log(d) + (p + b - 1) * math.log(1 - d)

    closed = float(delta_tilde(rho.sum(), p, a, b))
    res = optimize.minimize_scalar(lambda d: -q2(d), bounds=(1e-12, 1 - 1e-12), method="bounded", options={"xatol": 1e-14})
    assert closed == pytest.approx(res.x, rel=1e-5)


@pytest.mark.parametrize("rho_sum", [1e-12, 1e-17, 1e-40, 1e-150])
def test_delta_tilde_keeps_a_vanishing_inclusion_sum(rho_sum):
    """At the spike-only state sum(rho) falls below the float64 spacing of 1 (2.2e-16): Eq. 15
    with a = 1 must stay proportional to it (evaluated as sum + (a - 1), not sum + a - 1, which
    rounds it to 0 and makes delta decay at the SA rate whatever the weights do)."""
    p = 1000
    closed = delta_tilde(torch.tensor(rho_sum, dtype=torch.float64), p, 1.0, float(p))
    assert float(closed) == pytest.approx(rho_sum / (2 * p - 1), rel=1e-14, abs=0.0)


def sparse_linear_model(x, y, v0=0.1, v1=10.0, sigma=1.0, tied=True, dtype=torch.float64, device="cpu"):
    p = x.shape[1]
    net = nn.Linear(p, 1, bias=False).to(device=device, dtype=dtype)
    prior = SpikeAndSlabPrior(v0, v1, sparse={"expose_parameters": ["weight"]}, a=1.0, b=float(p))
    precision = dist.Gamma(0.5, 0.5) if tied else 1.0 / sigma**2
    model = BayesianNeuralNetwork(net, prior, GaussianLikelihood(len(x), precision=precision))
    return model, prior


def test_the_drift_is_the_papers_gradient_of_q(device):
    """The gradient of the Pyro model's minibatch log-joint equals the closed form of
    Sec. 5.1: (N/n) X_B^T (y_B - X_B beta) / sigma^2 - kappa_1 beta / sigma^2 - kappa_0 sign(beta) / sigma."""
    torch.manual_seed(0)
    N, p = 30, 12
    x = torch.randn(N, p, dtype=torch.float64, device=device)
    y = torch.randn(N, 1, dtype=torch.float64, device=device)
    model, prior = sparse_linear_model(x, y, sigma=1.7, device=device)
    state = prior.empirical_bayes(model, sigma=1.7, rho=0.5, kappa0=0.8, kappa1=0.3)
    state.kappa0["weight"].uniform_(0.1, 2.0)
    state.kappa1["weight"].uniform_(0.1, 2.0)
    sa = StochasticApproximation(prior, 0.5)
    sampler = SGLD(model, lr=1e-3, adaptations=[sa])
    idx = torch.arange(10, device=device)
    sampler.setup(x[idx], y[idx], idx)
    log_joint, _ = sampler.log_joint(x[idx], y[idx], idx)
    beta = sampler.unconstrained("weight")
    (grad,) = torch.autograd.grad(log_joint, beta)
    b, s = beta.detach().reshape(-1), state.sigma
    xb = x[idx]
    expected = (N / len(idx)) * xb.T @ (y[idx].reshape(-1) - xb @ b) / s**2 - state.kappa1["weight"].reshape(-1) * b / s**2 - state.kappa0["weight"].reshape(-1) * b.sign() / s
    assert torch.allclose(grad.reshape(-1), expected, rtol=1e-10)


def test_em_variant_jumps_to_the_closed_form_targets():
    """omega = 1: after one step every latent variable equals its closed form at the new weights."""
    torch.manual_seed(1)
    N, p = 40, 8
    x = torch.randn(N, p, dtype=torch.float64)
    y = x[:, :1] * 2 + 0.5 * torch.randn(N, 1, dtype=torch.float64)
    model, prior = sparse_linear_model(x, y)
    state = prior.empirical_bayes(model, sigma=1.0)
    old_sigma, old_delta = state.sigma.clone(), state.delta["weight"].clone()
    sampler = SGLD(model, lr=1e-4, adaptations=[StochasticApproximation(prior, 1.0)])
    idx = torch.arange(N)
    sampler.setup(x, y, idx)
    beta_pre = sampler.values()["weight"].detach().clone()
    sampler.step(x, y, idx)
    beta = sampler.values()["weight"]
    rho = rho_tilde(beta, old_sigma, old_delta, prior.v0, prior.v1)
    assert torch.allclose(state.rho["weight"], rho)
    assert torch.allclose(state.kappa0["weight"], (1 - rho) / prior.v0)
    assert torch.allclose(state.kappa1["weight"], rho / prior.v1)
    assert torch.allclose(state.delta["weight"], delta_tilde(rho.sum(), p, prior.a, prior.b))
    # the regression root of Eq. 14, with I from the step's residuals at the pre-step weights
    # (full batch, so N/n = 1) and R_b, J at the new weights and latent variables
    residual = (y.reshape(-1) - x @ beta_pre.reshape(-1)).square().sum()
    l1 = (state.kappa0["weight"] * beta.abs()).sum()
    l2 = (state.kappa1["weight"] * beta.square()).sum()
    expected = sigma_tilde(l1, l2, p, prior.nu, prior.lam, residual, float(N))
    assert torch.allclose(state.sigma, expected, rtol=1e-10)
    assert not torch.allclose(state.sigma, old_sigma)


def test_frozen_variant_keeps_the_initial_latent_variables():
    torch.manual_seed(2)
    x = torch.randn(40, 6, dtype=torch.float64)
    y = torch.randn(40, 1, dtype=torch.float64)
    model, prior = sparse_linear_model(x, y)
    state = prior.empirical_bayes(model, sigma=2.0, kappa0=1.0, kappa1=1.0)
    before = state.state_dict()
    SGHMC(model, lr=1e-4, adaptations=[StochasticApproximation(prior, 0.0)]).run((x, y), num_steps=5, batch_size=20, progress=False)
    after = state.state_dict()
    assert all(torch.equal(before[k]["weight"], after[k]["weight"]) for k in ("rho", "kappa0", "kappa1", "delta"))
    assert torch.equal(before["sigma"], after["sigma"])


def test_tied_noise_conditions_the_precision_on_sigma():
    x = torch.randn(20, 4, dtype=torch.float64)
    y = torch.randn(20, 1, dtype=torch.float64)
    model, prior = sparse_linear_model(x, y)
    prior.empirical_bayes(model, sigma=1.5)
    sa = StochasticApproximation(prior, 0.1, update_sigma=False)
    sampler = SGLD(model, lr=1e-4, adaptations=[sa])
    sampler.setup(x, y, torch.arange(20))
    assert sa.regression and "noise_precision" not in sampler.site_names
    _, trace = sampler.log_joint(x, y, torch.arange(20))
    assert torch.allclose(trace.nodes["obs"]["fn"].base_dist.scale, torch.tensor(1.5, dtype=torch.float64))


def test_classification_uses_the_classification_root():
    torch.manual_seed(3)
    x = torch.randn(30, 5)
    y = torch.randint(0, 3, (30,))
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    prior = SpikeAndSlabPrior(1.0, 0.1, sparse={"expose_modules": ["0"], "hide_parameters": ["bias"]}, nu=10.0, lam=10.0)
    model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(30))
    state = prior.empirical_bayes(model, sigma=1.0)
    sampler = SGHMC(model, lr=1e-4, adaptations=[StochasticApproximation(prior, 1.0)])
    sampler.step(x, y, torch.arange(30))
    beta = sampler.values()["0.weight"]
    l1 = (state.kappa0["0.weight"] * beta.abs()).sum()
    l2 = (state.kappa1["0.weight"] * beta.square()).sum()
    assert torch.allclose(state.sigma, sigma_tilde(l1, l2, beta.numel(), 10.0, 10.0))
    assert sampler.site_names == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_sa_needs_the_empirical_bayes_form_and_valid_step_sizes():
    x = torch.randn(20, 4, dtype=torch.float64)
    model, prior = sparse_linear_model(x, torch.randn(20, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="empirical_bayes"):
        StochasticApproximation(prior, 0.1)
    prior.empirical_bayes(model)
    with pytest.raises(ValueError, match="omega"):
        StochasticApproximation(prior, 1.5)
    sa = StochasticApproximation(prior, lambda k: 0.5 if k < 2 else -0.1)
    sampler = SGLD(model, lr=1e-4, adaptations=[sa])
    sampler.step(x, torch.randn(20, 1, dtype=torch.float64), torch.arange(20))
    with pytest.raises(ValueError, match="iteration 2"):
        sampler.step(x, torch.randn(20, 1, dtype=torch.float64), torch.arange(20))


def test_sa_state_stays_finite_in_float32_with_large_weights():
    """Under the CIFAR hyperparameters the official exp-space rho is NaN for |beta| >= 0.6;
    the whole SA step stays finite in float32."""
    net = nn.Linear(50, 10)
    with torch.no_grad():
        net.weight.uniform_(-3, 3)
    prior = SpikeAndSlabPrior(0.005, 1e-5, sparse={"expose_parameters": ["weight"]}, nu=1000.0, lam=1000.0, a=500.0, b=500.0)
    model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(1000))
    state = prior.empirical_bayes(model, sigma=1.0, kappa0=5e-4, kappa1=5e-4)
    sampler = SGHMC(model, lr=1e-9, adaptations=[StochasticApproximation(prior, 0.5)])
    x, y = torch.randn(100, 50), torch.randint(0, 10, (100,))
    for _ in range(3):
        sampler.step(x, y, torch.arange(100))
    for t in (state.rho["weight"], state.kappa0["weight"], state.kappa1["weight"], state.sigma, state.delta["weight"]):
        assert torch.isfinite(t).all()
    # large weights are explained by the (wider) Laplace component here
    assert state.rho["weight"][net.weight.abs() > 0.5].max() < 0.5


def simulated_sparse_regression(seed, n=60, p=80, noise=1.0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n + 200, p, generator=g, dtype=torch.float64)
    beta = torch.zeros(p, dtype=torch.float64)
    beta[:3] = torch.tensor([3.0, 2.0, 1.0])
    y = x @ beta + noise * torch.randn(n + 200, generator=g, dtype=torch.float64)
    return (x[:n], y[:n, None]), (x[n:], y[n:, None]), beta


def run_sparse_regression(method, seed, steps=2500):
    (x, y), (xt, yt), beta = simulated_sparse_regression(seed)
    torch.manual_seed(seed)
    model, prior = sparse_linear_model(x, y, v0=0.1, sigma=1.0, tied=method != "sgld")
    prior.empirical_bayes(model, sigma=1.0, kappa0=1.0, kappa1=1.0)
    adaptations = {"sgld-sa": [StochasticApproximation(prior, PolynomialDecay(10.0, 0.7, 1000.0))], "sgld": []}[method]
    sampler = SGLD(model, lr=PolynomialDecay(2e-3, 1 / 3), adaptations=adaptations)
    draws = []
    sampler.run((x, y), num_steps=steps, batch_size=30, burn_in=steps // 3, thin=10, seed=seed, progress=False, on_sample=lambda s, k, w: draws.append(s.values()["weight"].reshape(-1)))
    estimate = torch.stack(draws).mean(0)
    return float((xt @ estimate - yt.reshape(-1)).square().mean()), estimate, beta


def test_sgld_sa_beats_plain_sgld_on_a_sparse_regression():
    """With p > n, adapting the spike-and-slab penalty predicts better than sampling the
    same hierarchical model with its latent variables frozen (Deng et al. 2019, Table 1)."""
    sa_mse, sa_beta, beta = run_sparse_regression("sgld-sa", 0)
    plain_mse, plain_beta, _ = run_sparse_regression("sgld", 0)
    assert sa_mse < plain_mse
    # the adaptive penalty keeps the three signals and shrinks the rest much harder
    assert (sa_beta[:3] - beta[:3]).abs().max() < 0.5
    assert sa_beta[3:].abs().mean() < 0.5 * plain_beta[3:].abs().mean()


# -- a plain Pyro model at p >> n (issue 42) --------------------------------------------------------

def _wide_design(n=100, p=200, signals=(10, 80, 150), seed=0, correlation=0.6):
    """Toeplitz-correlated inputs, three scattered signals, unit noise (Deng et al.'s design,
    narrower)."""
    g = torch.Generator().manual_seed(seed)
    i = torch.arange(p)
    chol = torch.linalg.cholesky(correlation ** (i[:, None] - i[None, :]).abs().double())
    x = (torch.randn(n, p, generator=g, dtype=torch.float64) @ chol.T).float()
    beta = torch.zeros(p)
    beta[list(signals)] = torch.tensor([2.0, -3.0, 2.5])
    return x, x @ beta + torch.randn(n, generator=g), list(signals)


def _plain_sgld_sa(x, y, seed, init_values=None, steps=4000):
    """The SG-MCMC tutorial's plain-Pyro recipe: the sparse weights drawn with
    ``prior.sample_sparse``, the noise precision tied to sigma."""
    n, p = x.shape
    prior = SpikeAndSlabPrior(v0=0.1, v1=10.0, sparse=None)
    prior.empirical_bayes({"beta": (p,)}, sigma=1.0, rho=0.5, delta=0.5)

    def model(x, y=None, idx=None):
        beta = prior.sample_sparse("beta")
        tau = pyro.sample("tau", dist.Gamma(1.0, 1.0))
        with pyro.plate("data", n if idx is not None else len(x), subsample=idx):
            return pyro.sample("y", dist.Normal(x @ beta, tau.rsqrt()), obs=y)

    sa = StochasticApproximation(prior, PolynomialDecay(1.0, 0.7, offset=100.0), tie_noise=True, noise_site="tau")
    pyro.set_rng_seed(seed)
    history = SGLD(model, lr=1e-4, adaptations=[sa], init_values=init_values).run((x, y), num_steps=steps, batch_size=50, seed=seed, progress=False)
    return history, (prior.state.rho["beta"] > 0.5).nonzero().flatten().tolist()


@pytest.mark.parametrize("seed", [0, 1])
def test_a_plain_model_at_p_twice_n_selects_the_signals_from_the_default_start(seed):
    """The default start of a sparse site (N(0, 0.1^2), the authors' own) selects exactly the
    three signals, quietly; the former start, uniform on (-2, 2), puts the chain at the
    spike-only fixed point, which is warned about and marks the run collapsed."""
    x, y, signals = _wide_design(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpikeOnlyWarning)
        history, selected = _plain_sgld_sa(x, y, seed)
    assert selected == signals and history.attrs["status"] == "ok"
    far = {"beta": 4 * torch.rand(x.shape[1], generator=torch.Generator().manual_seed(seed)) - 2}
    with pytest.warns(SpikeOnlyWarning, match="spike-only fixed point.*Start the sparse weights near zero"):
        history, selected = _plain_sgld_sa(x, y, seed, init_values=far, steps=2000)
    assert selected == [] and history.attrs["status"] == "collapsed"
    assert [e["kind"] for e in history.attrs["events"]] == ["spike_only"]
