"""The reference posteriors (issue 22, section 1): the stored files load and meet their
convergence thresholds, the exact references match their closed forms, NUTS on the conjugate
model recovers the exact posterior, the flat NUTS potential is the pyrozoo model's log joint,
and the build script's quick configuration writes loadable, resumable files."""

import functools
import math

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

from zoo_protocols import reference_posteriors as ref
from tests.runner import run_example

PROBLEMS = ref.reference_problems()
NUTS_PROBLEMS = [p for p in PROBLEMS if ref.PROBLEMS[p].uses_nuts]
BNN_PROBLEMS = [p for p in PROBLEMS if ref.PROBLEMS[p].kind != "nig"]

#: references built but not converged: their diagnostics test is an expected failure (strict:
#: once a rebuild converges it fails as XPASS, so the name must go). None today: energy_mlp,
#: unconverged at 450 and 691 training rows, converged at 300 (zoo_protocols/reference_posteriors.py).
NOT_CONVERGED: set = set()


def _converged(problems):
    mark = pytest.mark.xfail(reason="reference built but not converged (issue 22): rebuild with more draws or another size", strict=True)
    return [pytest.param(p, marks=mark) if p in NOT_CONVERGED else p for p in problems]


@functools.lru_cache(maxsize=None)
def _data(problem):
    return ref.reference_data(problem)


def _data_or_skip(problem):
    try:
        return _data(problem)
    except FileNotFoundError as e:
        pytest.skip(f"data not available: {e}")


@pytest.fixture(scope="module")
def boston_linear_data():
    return _data_or_skip("bostonHousing_linear")


# -- the stored references -------------------------------------------------------------------

@pytest.mark.parametrize("problem", PROBLEMS)
def test_stored_reference_loads_with_consistent_arrays(problem):
    stored = ref.load_reference(problem)
    n = len(stored.y_test)
    assert stored.x_test.shape[0] == n and stored.x_test.dtype == np.float32
    assert int(stored["format_version"]) == ref.FORMAT_VERSION
    for key, value in stored.arrays.items():
        if value.dtype.kind == "f":
            assert np.isfinite(value).all(), key
    kind = ref.PROBLEMS[problem].kind
    if kind == "classification":
        probs, draws = stored["probs_mean"], stored["probs_draws"]
        assert probs.shape[0] == n and draws.shape[1:] == probs.shape and 2 <= len(draws) <= ref.MAX_STORED_PROB_DRAWS
        np.testing.assert_allclose(probs.sum(-1), 1, atol=1e-5)
        np.testing.assert_allclose(draws.astype(np.float64).sum(-1), 1, atol=1e-2)  # float16 draws
        assert set(np.unique(stored.y_test)) <= set(range(probs.shape[1]))
        # both are over every draw: log of the mean probability of the true class
        np.testing.assert_allclose(np.exp(stored["test_log_pred"]), probs[np.arange(n), stored.y_test], rtol=1e-5)
    elif kind in ("regression", "linear"):
        assert stored["f_mean"].shape == (n,) and stored["f_var"].shape == (n,) and (stored["f_var"] >= 0).all()
        draws = stored["f_draws"]
        assert draws.shape[1] == n and 2 <= len(draws) <= ref.MAX_STORED_DRAWS
        assert float(stored["noise_scale"]) == ref.PROBLEMS[problem].noise_scale
        # the thinned draws carry the predictive: their noise mixture's log density at the test
        # targets is the one over every draw, to its Monte Carlo error (delta method: the
        # densities' coefficient of variation over sqrt(K) draws), within 5 standard errors
        sigma = float(stored["noise_scale"])
        density = np.exp(-0.5 * ((stored.y_test - draws.astype(np.float64)) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        se = density.std(0) / density.mean(0) / math.sqrt(len(draws))
        assert (np.abs(np.log(density.mean(0)) - stored["test_log_pred"]) < 5 * se + 1e-4).all()
    else:
        assert stored["predictive_loc"].shape == (n,) and (stored["predictive_scale"] > 0).all()
    assert stored.info["problem"] == problem and not stored.info["quick"]
    assert stored.info["test_size"] == n


@pytest.mark.parametrize("problem", PROBLEMS)
def test_stored_reference_is_of_this_problems_data(problem):
    data = _data_or_skip(problem)
    stored = ref.load_reference(problem)
    np.testing.assert_allclose(stored.x_test, data.x_test.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(stored.y_test, data.y_test.numpy().astype(stored.y_test.dtype))
    assert stored.info["train_size"] == len(data.y_train)


@pytest.mark.parametrize("problem", _converged(NUTS_PROBLEMS))
def test_stored_diagnostics_meet_the_thresholds(problem):
    info = ref.load_reference(problem).info
    d = info["diagnostics"]
    assert d["thresholds"] == {"rhat_max": ref.RHAT_MAX, "ess_bulk_min": ref.ESS_MIN, "divergences": 0}
    assert d["chains"] >= ref.MIN_CHAINS >= 4 and len(d["per_chain"]) == d["chains"]
    assert d["rhat_max"] < ref.RHAT_MAX, d["rhat_max"]
    assert d["ess_bulk_min"] >= ref.ESS_MIN, d["ess_bulk_min"]
    assert d["divergences"] == 0
    assert d["rhat_max"] == max(d["rhat_f_max"], d["rhat_log_lik"]) and d["converged"]
    # the stored mean is over every draw of every chain
    assert int(ref.load_reference(problem)["num_draws"]) == d["chains"] * d["samples_per_chain"]
    for key in ("commit", "command", "torch_threads"):
        assert info["provenance"][key] != ""
    if problem.endswith("_linear"):
        # NUTS on the conjugate model: weights within 4.5 Monte Carlo standard errors of the exact
        # posterior mean (14 weights: a chance exceedance has probability < 1e-4), and standard
        # deviations within 5 relative standard errors (1 / sqrt(2 ESS)) of the exact ones
        check = d["nuts_vs_exact"]
        assert check["mean_error_over_mcse_max"] < 4.5
        assert check["sd_relative_error_max"] < 5 / math.sqrt(2 * d["ess_bulk_theta_min"])


def _same_solve(stored, exact):
    """The stored array is the closed form up to rounding: relative 1e-10, and 1e-12 of the
    array's scale for entries that are zero but for rounding (the intercept's mean on centred
    targets), whose last bits differ between BLAS builds."""
    exact = np.asarray(exact)
    np.testing.assert_allclose(stored, exact, rtol=1e-10, atol=1e-12 * np.abs(exact).max())


def test_stored_linear_reference_matches_its_closed_form(boston_linear_data):
    spec = ref.PROBLEMS["bostonHousing_linear"]
    stored = ref.load_reference("bostonHousing_linear")
    data = boston_linear_data
    mu, cov = ref.gaussian_linear_posterior(data.x_train, data.y_train, spec.prior_scale, spec.noise_scale)
    _same_solve(stored["posterior_mean"], mu.numpy())
    _same_solve(stored["posterior_cov"], cov.numpy())
    x = torch.cat([data.x_test, torch.ones(len(data.x_test), 1, dtype=torch.float64)], 1)
    _same_solve(stored["exact_f_mean"], (x @ mu).numpy())
    _same_solve(stored["exact_f_var"], torch.diag(x @ cov @ x.T).numpy())
    # and NUTS's predictive mean agrees with the exact one to a few predictive standard errors
    se = np.sqrt(stored["exact_f_var"] / float(stored.info["diagnostics"]["ess_bulk_f_min"]))
    assert (np.abs(stored["f_mean"] - stored["exact_f_mean"]) < 4.5 * se).all()


def test_stored_nig_reference_matches_its_closed_form(boston_linear_data):
    a0, b0, v0 = ref.PROBLEMS["bostonHousing_linear_nig"].nig
    stored = ref.load_reference("bostonHousing_linear_nig")
    post = ref.nig_linear_posterior(boston_linear_data.x_train, boston_linear_data.y_train, a0, b0, v0)
    _same_solve(stored["posterior_mu"], post["mu"].numpy())
    _same_solve(stored["posterior_lambda_inv"], post["lambda_inv"].numpy())
    assert float(stored["posterior_a"]) == pytest.approx(a0 + len(boston_linear_data.y_train) / 2, rel=1e-12)
    assert float(stored["posterior_b"]) == pytest.approx(float(post["b"]), rel=1e-10)


# -- closed forms ----------------------------------------------------------------------------

def _small_regression(seed=0, n=30, d=3):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = x @ torch.randn(d, generator=g, dtype=torch.float64) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    return x, y


def test_gaussian_posterior_is_prior_times_likelihood_over_evidence():
    """``log p(theta, y) - log N(theta | mu, Sigma)`` is the same for every ``theta``: the log
    evidence, which must also equal the marginal ``N(y | 0, s^2 X X^T + sigma^2 I)``."""
    x, y = _small_regression()
    s, sigma = 0.7, 0.4
    mu, cov = ref.gaussian_linear_posterior(x, y, s, sigma)
    X = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
    marginal = dist.MultivariateNormal(torch.zeros(len(y), dtype=x.dtype), s**2 * X @ X.T + sigma**2 * torch.eye(len(y), dtype=x.dtype))
    log_evidence = ref.gaussian_linear_log_evidence(x, y, s, sigma)
    assert log_evidence == pytest.approx(float(marginal.log_prob(y)), rel=1e-10)
    posterior = dist.MultivariateNormal(mu, cov)
    for theta in (mu, mu + 1.0, torch.randn(4, dtype=x.dtype, generator=torch.Generator().manual_seed(1))):
        f64 = lambda v: torch.tensor(v, dtype=x.dtype)  # noqa: E731  (float scales would be float32)
        log_joint = dist.Normal(f64(0.0), f64(s)).log_prob(theta).sum() + dist.Normal(X @ theta, f64(sigma)).log_prob(y).sum()
        # far from the mean both terms are large: compare to their size's rounding, not the gap's
        assert float(log_joint - posterior.log_prob(theta)) == pytest.approx(log_evidence, abs=1e-12 * float(abs(log_joint)) + 1e-9)


def test_evidence_noise_scale_maximises_the_evidence_and_gives_the_problems_noise(boston_linear_data):
    x, y = _small_regression(n=200)
    best = ref.evidence_noise_scale(x, y, 1.0)
    at = lambda s: ref.gaussian_linear_log_evidence(x, y, 1.0, s)  # noqa: E731
    assert at(best) > at(best * 1.01) and at(best) > at(best / 1.01)
    # the linear problem's noise is Boston's evidence maximiser, rounded to two decimals
    spec = ref.PROBLEMS["bostonHousing_linear"]
    boston = ref.evidence_noise_scale(boston_linear_data.x_train, boston_linear_data.y_train, spec.prior_scale)
    assert round(boston, 2) == spec.noise_scale


def test_nig_posterior_is_prior_times_likelihood_over_a_constant():
    """The plain Pyro NIG model's log joint minus the Normal-Gamma posterior's log density is the
    same at every ``(tau, w)``; the Student-t predictive has the mixture's variance ``b / (a - 1) (1 + x Lambda^-1 x)``."""
    x, y = _small_regression()
    a0, b0, v0 = 3.0, 2.0, 0.5
    post = ref.nig_linear_posterior(x, y, a0, b0, v0)
    model = ref.nig_linear_model(a0, b0, v0)
    gaps = []
    g = torch.Generator().manual_seed(2)
    for _ in range(4):
        tau = torch.rand((), generator=g, dtype=x.dtype) * 3 + 0.2
        w = torch.randn(4, generator=g, dtype=x.dtype)
        tr = poutine.trace(poutine.condition(model, data={"noise_precision": tau, "weight": w})).get_trace(x, y)
        log_post = dist.Gamma(post["a"], post["b"]).log_prob(tau) + dist.MultivariateNormal(post["mu"], post["lambda_inv"] / tau).log_prob(w)
        gaps.append(float(tr.log_prob_sum() - log_post))
    np.testing.assert_allclose(gaps, gaps[0], rtol=1e-9)
    arrays = ref.exact_arrays(ref.ReferenceProblem("t", "nig", "none", nig=(a0, b0, v0)), ref.ReferenceData(x, y, x[:5], y[:5]))
    df, scale = float(arrays["predictive_df"]), arrays["predictive_scale"]
    X = torch.cat([x[:5], torch.ones(5, 1, dtype=x.dtype)], 1)
    expected = float(post["b"]) / (float(post["a"]) - 1) * (1 + ((X @ post["lambda_inv"]) * X).sum(1)).numpy()
    np.testing.assert_allclose(scale**2 * df / (df - 2), expected, rtol=1e-10)


# -- the NUTS potential ------------------------------------------------------------------------

@pytest.mark.parametrize("problem", BNN_PROBLEMS)
def test_potential_is_minus_the_pyrozoo_models_log_joint(problem):
    data = _data_or_skip(problem)
    model, (x, y) = ref.reference_model(problem, data=data)
    potential = ref.FlatPotential(model, x, y)
    g = torch.Generator().manual_seed(3)
    thetas = torch.randn(3, potential.dim, generator=g, dtype=torch.float64) * torch.tensor([[0.1], [1.0], [3.0]], dtype=torch.float64)
    for theta in thetas:
        values = potential.unflatten(theta)
        trace = poutine.trace(poutine.condition(model, data=values)).get_trace(x, y)
        assert float(potential(theta)) == pytest.approx(-float(trace.log_prob_sum()), rel=1e-12)
        np.testing.assert_allclose(potential.forward(theta).numpy(), model.net_output(values, x).detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(potential.flatten(values).numpy(), theta.numpy())
    # the batched forward the reference predictive comes from is the per-draw one
    batched = potential.forward(thetas, data.x_test)
    for theta, out in zip(thetas, batched):
        np.testing.assert_allclose(out.numpy(), model.net_output(potential.unflatten(theta), data.x_test).detach().numpy(), rtol=1e-12, atol=1e-12)


def test_potential_refuses_models_it_cannot_write():
    x, y = _small_regression()
    from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, LayerwiseNormalPrior, NormalPrior

    with pytest.raises(TypeError, match="NormalPrior"):
        ref.FlatPotential(BayesianNeuralNetwork(MLP(3, [4], 1).double(), LayerwiseNormalPrior(), GaussianLikelihood(30)), x, y)
    with pytest.raises(TypeError, match="fixed precision"):
        ref.FlatPotential(BayesianNeuralNetwork(MLP(3, [4], 1).double(), NormalPrior(), GaussianLikelihood(30, precision=dist.Gamma(1.0, 1.0))), x, y)
    with pytest.raises(ValueError, match="dataset_size"):
        ref.FlatPotential(BayesianNeuralNetwork(MLP(3, [4], 1).double(), NormalPrior(), GaussianLikelihood(31)), x, y)


# -- NUTS against the exact posterior --------------------------------------------------------

def _nuts_against_exact(spec, data, settings):
    chain = ref.run_chain(spec, data, 0, settings, progress=False)
    exact = ref.exact_arrays(spec, data)
    check = ref.nuts_vs_exact([chain], exact)
    ess = float(ref.bulk_ess(torch.as_tensor(chain["theta"][None])).min())
    assert ess > 50
    # every weight's mean within 4.5 Monte Carlo standard errors (from its bulk ESS) of the
    # exact mean (a chance exceedance among 14 weights has probability < 1e-4), every standard
    # deviation within 5 relative standard errors 1 / sqrt(2 ESS) of the exact one
    assert check["mean_error_over_mcse_max"] < 4.5
    assert check["sd_relative_error_max"] < 5 / math.sqrt(2 * ess)
    assert not chain["divergent"].any()
    assert len(chain["leapfrogs"]) == settings.warmup + settings.samples


def test_nuts_recovers_an_exact_gaussian_posterior():
    """The NUTS machinery (potential, Pyro's kernel, the draws' bookkeeping) on a small
    conjugate regression whose posterior is known exactly."""
    x, y = _small_regression(n=50, d=3)
    spec = ref.ReferenceProblem("synthetic_linear", "linear", "synthetic", (), 1.0, 0.3)
    data = ref.ReferenceData(x, y, x[:10], y[:10])
    _nuts_against_exact(spec, data, ref.NUTSSettings(warmup=100, samples=400, seed=0, init_steps=100))


@pytest.mark.slow
def test_nuts_recovers_the_exact_posterior_of_the_linear_reference_problem(boston_linear_data):
    _nuts_against_exact(ref.PROBLEMS["bostonHousing_linear"], boston_linear_data, ref.NUTSSettings(warmup=150, samples=300, seed=0, init_steps=200))


# -- diagnostics -------------------------------------------------------------------------------

def _ar1(rho, chains, draws, seed=0, shift=None):
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(chains, draws, generator=g, dtype=torch.float64)
    x = torch.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for t in range(1, draws):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho**2) * noise[:, t]
    return x if shift is None else x + shift.unsqueeze(1)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.8])
def test_bulk_ess_of_an_ar1_chain(rho):
    """An AR(1) chain's ESS is ``N (1 - rho) / (1 + rho)``; 4 x 4000 draws estimate it to ~10%."""
    x = _ar1(rho, 4, 4000)
    expected = x.numel() * (1 - rho) / (1 + rho)
    assert float(ref.bulk_ess(x)) == pytest.approx(expected, rel=0.15)


def test_rhat_is_one_for_mixed_chains_and_large_for_separated_ones():
    mixed = _ar1(0.5, 4, 2000)
    assert abs(float(ref.rank_normalized_rhat(mixed)) - 1) < 0.01
    separated = _ar1(0.5, 4, 2000, shift=torch.tensor([0.0, 0.0, 0.0, 3.0], dtype=torch.float64))
    assert float(ref.rank_normalized_rhat(separated)) > 1.3
    # a chain drifting half-way through is caught by splitting
    drift = mixed.clone()
    drift[0, 1000:] += 3
    assert float(ref.rank_normalized_rhat(drift)) > 1.1


def test_tree_depth_from_leapfrog_steps():
    np.testing.assert_array_equal(ref.tree_depths([1, 2, 3, 4, 7, 8, 1023]), [1, 2, 2, 3, 3, 4, 10])


def test_unknown_problem_and_missing_reference_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="choose from"):
        ref.get_problem("boston")
    with pytest.raises(FileNotFoundError, match="tools/reference_posteriors.py --problems yacht_mlp"):
        ref.load_reference("yacht_mlp", tmp_path)


# -- the build script ----------------------------------------------------------------------------

def test_quick_build_writes_loadable_files_and_resumes(tmp_path, monkeypatch, capsys):
    _data_or_skip("yacht_mlp")
    args = ["--quick", "--no-progress", "--results-dir", tmp_path]
    run_example("reference_posteriors.py", *args, monkeypatch=monkeypatch)
    for problem in ("yacht_mlp", "bostonHousing_linear_nig"):
        stored = ref.load_reference(problem, tmp_path, quick=True)
        assert stored.info["quick"] and len(stored.y_test) == stored.x_test.shape[0]
    assert (tmp_path / "diagnostics_quick.md").read_text().startswith("# Reference posteriors")
    chains = sorted((tmp_path / "chains").glob("yacht_mlp_*_chain*.npz"))
    assert len(chains) == 2
    # a rerun reuses the finished chains; a lost chain is the only one run again
    kept = chains[0].stat().st_mtime_ns
    chains[1].unlink()
    capsys.readouterr()
    run_example("reference_posteriors.py", *args, "--problems", "yacht_mlp", monkeypatch=monkeypatch)
    out = capsys.readouterr().out
    assert "yacht_mlp chain 0: cached" in out and "yacht_mlp chain 1: cached" not in out
    assert chains[0].stat().st_mtime_ns == kept and chains[1].is_file()
    assert not list(tmp_path.rglob("*.tmp"))
