"""Importance-weighted objectives on conjugate Bayesian linear regression, where the log
evidence and the posterior are exact: IWAE between the ELBO and the evidence and increasing
in K, Rényi α → 1 is the ELBO, the ESS on known cases, reweighted wake-sleep recovering the
posterior, importance resampling, and the bookkeeping (gradients, warnings, fit history)."""

import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import (
    ImportanceWeighted_ELBO,
    RenyiELBO,
    ReweightedWakeSleep,
    fit,
    importance_resampled_samples,
    weight_diagnostics,
)
from pyrozoo.inference import PriorDrawnSiteWarning
from pyrozoo.inference.importance_weighted import MINIBATCH_BIAS_WARNING
from pyrozoo.poutine import local_reparameterization
from tests.inference.cases import conjugate_problem, linear_regression_model
from tests.inference.test_elbo import analytic_elbo
from tests.stats import z_bound


def exact_posterior(problem):
    """Mean and covariance of ``w | y`` and ``log p(y)``."""
    x, y, s2, p2 = problem.x, problem.y, problem.noise_scale**2, problem.prior_scale**2
    precision = x.T @ x / s2 + torch.eye(x.shape[1], dtype=x.dtype) / p2
    cov = torch.linalg.inv(precision)
    mean = cov @ x.T @ y / s2
    evidence_cov = s2 * torch.eye(len(y), dtype=x.dtype) + p2 * x @ x.T
    log_evidence = dist.MultivariateNormal(torch.zeros_like(y), evidence_cov).log_prob(y)
    return mean, cov, float(log_evidence)


def setup(problem, device, dtype, loc, scale):
    """The BNN-form regression with a mean-field guide set to ``N(loc, diag(scale^2))``."""
    x, y = problem.x.to(device, dtype), problem.y.to(device, dtype)
    model = linear_regression_model(problem, dtype=dtype, device=device)
    guide = MeanFieldNormalGuide(model)
    guide(x, y)
    with torch.no_grad():
        guide.locs["weight"].copy_(loc.reshape(1, -1))
        guide.log_scales["weight"].copy_(scale.log().reshape(1, -1))
    return model, guide, x, y


def pyro_regression(problem, device, dtype):
    """The same regression as plain Pyro functions (trace-based path; supports vectorised particles)."""
    x, y = problem.x.to(device, dtype), problem.y.to(device, dtype)
    d = x.shape[1]

    def model(x, y):
        w = pyro.sample("w", dist.Normal(torch.zeros(d, device=device, dtype=dtype), problem.prior_scale).to_event(1))
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal((x * w).sum(-1), problem.noise_scale), obs=y)

    def guide(x, y):
        loc = pyro.param("loc", torch.zeros(d, device=device, dtype=dtype))
        scale = pyro.param("scale", torch.ones(d, device=device, dtype=dtype), constraint=dist.constraints.positive)
        pyro.sample("w", dist.Normal(loc, scale).to_event(1))

    return model, guide, x, y


def pyro_regression_at(problem, device, dtype, loc, scale):
    """:func:`pyro_regression` with its guide set to ``N(loc, diag(scale^2))``."""
    model, guide, x, y = pyro_regression(problem, device, dtype)
    guide(x, y)
    pyro.param("loc").data.copy_(loc.to(device, dtype))
    pyro.param("scale").unconstrained().data.copy_(scale.log().to(device, dtype))
    return model, guide, x, y


def off_posterior(problem):
    """A mean-field q that misses the (correlated) posterior: shifted and too wide."""
    mean, cov, _ = exact_posterior(problem)
    sd = cov.diagonal().sqrt()
    return mean + 0.5 * sd, 1.5 * sd


def replicate(objective, model, guide, x, y, R):
    with torch.no_grad():
        return torch.tensor([-objective.loss(model, guide, x, y) for _ in range(R)], dtype=torch.float64)


@pytest.mark.parametrize("path", ["bnn-direct", "pyro-vectorized"])
def test_iwae_is_between_elbo_and_evidence_and_increases_with_k(path, device, dtype):
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    _, _, log_evidence = exact_posterior(problem)
    elbo = float(analytic_elbo(problem, loc, scale))
    if path == "bnn-direct":
        model, guide, x, y = setup(problem, device, dtype, loc, scale)
        vectorize = False
    else:
        model, guide, x, y = pyro_regression_at(problem, device, dtype, loc, scale)
        vectorize = True
    assert log_evidence - elbo > 1.0  # q is far enough off for the bound to have room to move
    R, Ks = 200, (1, 4, 32)
    means, ses = [], []
    for K in Ks:
        draws = replicate(ImportanceWeighted_ELBO(num_particles=K, vectorize_particles=vectorize), model, guide, x, y, R)
        means.append(float(draws.mean()))
        ses.append(float(draws.std() / R**0.5))
    z = z_bound(num_comparisons=3 * len(Ks))
    assert abs(means[0] - elbo) < z * ses[0] + 1e-3  # K = 1 is the ELBO
    for m, se in zip(means, ses):
        assert m > elbo - z * se
        assert m < log_evidence + z * se
    for (m1, s1), (m2, s2) in zip(zip(means, ses), zip(means[1:], ses[1:])):
        assert m2 - m1 > -z * math.hypot(s1, s2)
    assert means[-1] - means[0] > z * math.hypot(ses[0], ses[-1])  # strictly better, not just no worse


def test_sequential_and_vectorized_trace_paths_agree(device):
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = pyro_regression_at(problem, device, torch.float64, loc, scale)
    R = 100
    a = replicate(ImportanceWeighted_ELBO(num_particles=8, vectorize_particles=True), model, guide, x, y, R)
    b = replicate(ImportanceWeighted_ELBO(num_particles=8, vectorize_particles=False), model, guide, x, y, R)
    assert abs(a.mean() - b.mean()) < z_bound() * (a.var() / R + b.var() / R).sqrt()


def test_renyi_tends_to_the_elbo_as_alpha_tends_to_one(device, dtype):
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = setup(problem, device, dtype, loc, scale)
    eps = 1e-4
    objective = RenyiELBO(alpha=1.0 - eps, num_particles=8)
    # same draws: the Rényi estimate differs from the K-sample ELBO (the mean log-weight) by
    # eps/2 * Var(log w) + O(eps^2), and so do the gradients
    pyro.set_rng_seed(7)
    renyi = -objective.differentiable_loss(model, guide, x, y)
    g_renyi = torch.autograd.grad(renyi, list(guide.parameters()))
    pyro.set_rng_seed(7)
    log_joint, log_q = objective.log_weights(model, guide, x, y)
    log_w = log_joint - log_q
    elbo = log_w.mean()
    g_elbo = torch.autograd.grad(elbo, list(guide.parameters()))
    gap = eps / 2 * float(log_w.detach().var(unbiased=False))
    rtol = 1e-4 if dtype == torch.float32 else 1e-9
    assert abs(float((renyi - elbo).detach())) <= 2 * gap + rtol * abs(float(elbo.detach()))
    for a, b in zip(g_renyi, g_elbo):
        assert torch.allclose(a, b, rtol=10 * eps + rtol, atol=10 * eps * float(b.abs().max()) + rtol)
    # and in expectation it is the analytic ELBO
    R = 200
    draws = replicate(RenyiELBO(alpha=1.0 - eps, num_particles=8), model, guide, x, y, R)
    assert abs(float(draws.mean()) - float(analytic_elbo(problem, loc, scale))) < z_bound() * float(draws.std()) / R**0.5 + 1e-3


def test_alpha_one_is_refused():
    with pytest.raises(ValueError, match="ELBO"):
        RenyiELBO(alpha=1.0)


def test_weight_diagnostics_on_hand_made_weights(dtype):
    w = torch.tensor([1.0, 1.0, 2.0, 4.0], dtype=dtype)
    rel = 1e-4 if dtype == torch.float32 else 1e-10
    for shift in (0.0, 200.0, -200.0):  # exp overflows / underflows there: normalisation is by max-subtraction
        d = weight_diagnostics(w.log() + shift)
        assert float(d["ess"]) == pytest.approx(64 / 22, rel=rel)
        assert float(d["max_weight"]) == pytest.approx(0.5, rel=rel)
        assert float(d["log_weight_var"]) == pytest.approx(float(w.log().var()), rel=10 * rel)
    d = weight_diagnostics(torch.tensor([0.0, -1e4, -1e4], dtype=dtype))  # total collapse
    assert float(d["ess"]) == pytest.approx(1.0) and float(d["max_weight"]) == pytest.approx(1.0)


@pytest.mark.parametrize("objective", ["iwae", "renyi", "rws"])
def test_exact_posterior_gives_full_ess_and_the_evidence(objective, device, dtype):
    """With q the exact posterior (orthogonal design: it factorises) every weight is p(D):
    ESS = K, zero log-weight variance, and the IWAE estimate is log p(D) exactly."""
    problem = conjugate_problem(orthogonal=True)
    mean, cov, log_evidence = exact_posterior(problem)
    model, guide, x, y = setup(problem, device, dtype, mean, cov.diagonal().sqrt())
    K = 16
    obj = {"iwae": ImportanceWeighted_ELBO(K), "renyi": RenyiELBO(alpha=-0.5, num_particles=K), "rws": ReweightedWakeSleep(K)}[objective]
    loss = obj.loss(model, guide, x, y)
    # (log-weights are sums of terms of size ~|log p(D)|, so rounding spreads them by ~eps * 50)
    tol = 1e-3 if dtype == torch.float32 else 1e-6
    assert loss == pytest.approx(-log_evidence, abs=tol * abs(log_evidence))
    assert float(obj.diagnostics["ess"]) == pytest.approx(K, rel=tol)
    assert float(obj.diagnostics["max_weight"]) == pytest.approx(1 / K, rel=tol)
    assert float(obj.diagnostics["log_weight_var"]) < tol


@pytest.mark.parametrize("objective", ["iwae", "renyi", "rws"])
def test_a_latent_the_guide_leaves_to_the_prior_cancels_from_the_weights(objective, device, dtype):
    """u ~ p(u) drawn inside the model is its own proposal: the weights are still exactly
    p(D) under the exact posterior of w (a narrow prior, whose density far exceeds 1, would
    otherwise raise the estimate above log p(D)). The objective says once that u is not inferred."""
    problem = conjugate_problem(orthogonal=True)
    mean, cov, log_evidence = exact_posterior(problem)
    model, guide, x, y = pyro_regression(problem, device, dtype)

    def model_with_nuisance(x, y):
        pyro.sample("u", dist.Normal(torch.zeros(5, device=device, dtype=dtype), 1e-3).to_event(1))
        model(x, y)

    def exact_guide(x, y):
        pyro.sample("w", dist.Normal(mean.to(device, dtype), cov.diagonal().sqrt().to(device, dtype)).to_event(1))

    obj = {"iwae": ImportanceWeighted_ELBO(8), "renyi": RenyiELBO(alpha=-0.5, num_particles=8), "rws": ReweightedWakeSleep(8)}[objective]
    tol = 1e-3 if dtype == torch.float32 else 1e-6
    with pytest.warns(PriorDrawnSiteWarning, match="'u' is in the model but not in the guide") as record:
        for _ in range(3):
            loss = obj.loss(model_with_nuisance, exact_guide, x, y)
            assert loss == pytest.approx(-log_evidence, abs=tol * abs(log_evidence))
    assert sum(w.category is PriorDrawnSiteWarning for w in record) == 1


@pytest.mark.parametrize("objective", ["iwae", "renyi", "rws"])
def test_differentiable_loss_and_loss_and_grads_agree(objective, device):
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = setup(problem, device, torch.float64, loc, scale)
    make = {"iwae": lambda: ImportanceWeighted_ELBO(8), "renyi": lambda: RenyiELBO(0.5, 8), "rws": lambda: ReweightedWakeSleep(8)}[objective]
    params = list(guide.parameters())
    pyro.set_rng_seed(3)
    loss = make().differentiable_loss(model, guide, x, y)
    grads = torch.autograd.grad(loss, params)
    pyro.set_rng_seed(3)
    value = make().loss_and_grads(model, guide, x, y)
    assert value == pytest.approx(float(loss.detach()), rel=1e-12)
    for p, g in zip(params, grads):
        assert torch.allclose(p.grad, g, rtol=1e-10)


def _rws_draws(problem, model, guide, x, y, seed, K=8, R=1):
    """``R`` independent reweighted wake-sleep evaluations with the random numbers of ``seed``
    (drawn as ``R * K`` particles): the draws ``(R, K, d)``, their normalised weights
    ``(R, K)`` and the hand-computed ``d log w_k / d theta_k``, and the guide's ``m`` and ``s``."""
    obj = ReweightedWakeSleep(K)
    pyro.set_rng_seed(seed)
    with torch.no_grad():
        values, log_joint, log_q = obj._weights.direct(model, guide, R * K, (x, y), {})
    theta = values["weight"].reshape(R, K, -1)
    w_hat = torch.softmax((log_joint - log_q).reshape(R, K), -1)
    m, s = guide.locs["weight"].detach().reshape(-1), guide.log_scales["weight"].detach().exp().reshape(-1)
    # Gaussian likelihood and prior, and the guide's Normal: the exact gradients of log p and log q
    residual = y.reshape(-1) - theta @ x.T
    dlog_p = residual @ x / problem.noise_scale**2 - theta / problem.prior_scale**2
    dlog_q = -(theta - m) / s**2
    return theta, w_hat, dlog_p - dlog_q, m, s


def test_rws_guide_gradient_is_the_doubly_reparameterized_wake_phi_gradient():
    """Per draw, the guide gradient is Tucker et al. (2019)'s doubly reparameterised RWS
    estimator -sum_k (w_k - w_k^2) dlog w_k/dtheta_k dtheta_k/dlambda, computed here by hand
    from the same draws (theta = m + s * eps: dtheta/dm = 1, dtheta/dlog s = s * eps)."""
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = setup(problem, "cpu", torch.float64, loc, scale)
    obj = ReweightedWakeSleep(8)
    pyro.set_rng_seed(5)
    loss = obj.differentiable_loss(model, guide, x, y)
    g_loc, g_log_scale = torch.autograd.grad(loss, [guide.locs["weight"], guide.log_scales["weight"]])
    theta, w_hat, dlog_w, m, s = _rws_draws(problem, model, guide, x, y, seed=5)
    theta, w_hat, dlog_w = theta[0], w_hat[0], dlog_w[0]
    c = (w_hat - w_hat**2)[:, None]
    assert 1.5 < float(obj.diagnostics["ess"]) < 7.5  # neither trivial (ESS = K) nor collapsed
    # (rtol: the path terms through log p and log q cancel in part)
    assert torch.allclose(g_loc.reshape(-1), -(c * dlog_w).sum(0), rtol=1e-6)
    assert torch.allclose(g_log_scale.reshape(-1), -(c * dlog_w * (theta - m)).sum(0), rtol=1e-6)
    assert float(obj.diagnostics["esbo_eq6"]) >= -loss.item() - 1e-9  # Eq. 6 >= the IWAE estimate


def test_rws_guide_gradient_has_the_expectation_of_the_score_function_form():
    """The doubly reparameterised estimator and the score-function form of the wake-phi
    gradient (Sagar's Algorithm 1 with the draws held fixed: -sum_k w_k dlog q(theta_k)/dlambda)
    have the same expectation; their means over R draws agree within their standard errors."""
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = setup(problem, "cpu", torch.float64, loc, scale)
    R = 4000
    theta, w_hat, dlog_w, m, s = _rws_draws(problem, model, guide, x, y, seed=0, R=R)
    c, eps, w = (w_hat - w_hat**2)[..., None], (theta - m) / s, w_hat[..., None]
    dreg = torch.cat([-(c * dlog_w).sum(1), -(c * dlog_w * (theta - m)).sum(1)], -1)
    # d log N(theta; m, s) / dm = eps / s, / dlog s = eps^2 - 1
    score = torch.cat([-(w * eps / s).sum(1), -(w * (eps**2 - 1)).sum(1)], -1)
    diff = dreg - score
    z = z_bound(num_comparisons=diff.shape[1])
    assert torch.all(diff.mean(0).abs() < z * diff.std(0) / R**0.5)
    assert torch.all(dreg.mean(0).abs() > z * dreg.std(0) / R**0.5)  # not zero: a wrong sign would show
    # and it is the lower-variance one here (the reason to use it)
    assert torch.all(dreg.var(0) < score.var(0))


@pytest.mark.parametrize("vectorize", [False, True])
def test_rws_on_the_traced_path_gives_the_doubly_reparameterized_gradient(vectorize):
    """The trace-based path (a plain Pyro model and a guide of ``pyro.param``s), with sequential
    or vectorised particles: the same hand-computed estimator at the draws the guide made."""
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, _, x, y = pyro_regression_at(problem, "cpu", torch.float64, loc, scale)
    draws = []

    def recording_guide(x, y):
        draws.append(guide(x, y))

    def guide(x, y):
        m = pyro.param("loc")
        return pyro.sample("w", dist.Normal(m, pyro.param("scale")).to_event(1))

    K = 8
    pyro.set_rng_seed(7)
    loss = ReweightedWakeSleep(K, vectorize_particles=vectorize).differentiable_loss(model, recording_guide, x, y)
    m, log_s = pyro.param("loc"), pyro.param("scale").unconstrained()
    g_loc, g_log_scale = torch.autograd.grad(loss, [m, log_s])
    theta = torch.cat([d.detach().reshape(-1, x.shape[1]) for d in draws])[-K:]
    s = log_s.detach().exp()
    log_w = (
        dist.Normal(theta @ x.T, problem.noise_scale).log_prob(y).sum(-1)
        + dist.Normal(0.0, problem.prior_scale).log_prob(theta).sum(-1)
        - dist.Normal(m.detach(), s).log_prob(theta).sum(-1)
    )
    w_hat = torch.softmax(log_w, 0)
    dlog_w = (y - theta @ x.T) @ x / problem.noise_scale**2 - theta / problem.prior_scale**2 + (theta - m.detach()) / s**2
    c = (w_hat - w_hat**2)[:, None]
    assert torch.allclose(g_loc, -(c * dlog_w).sum(0), rtol=1e-6)
    assert torch.allclose(g_log_scale, -(c * dlog_w * (theta - m.detach())).sum(0), rtol=1e-6)
    assert loss.item() == pytest.approx(-(float(torch.logsumexp(log_w, 0)) - math.log(K)), rel=1e-8)


def test_rws_keeps_the_score_function_form_for_a_discrete_guide_site():
    """A site without a reparameterised sampler (a Bernoulli) gets the score-function wake-phi
    gradient -sum_k w_k d log q(z_k) / dlogit, beside a reparameterised site's doubly
    reparameterised one, in the same loss."""
    y = torch.tensor([0.9, 1.2, 0.7], dtype=torch.float64)

    def model(y):
        z = pyro.sample("z", dist.Bernoulli(torch.tensor(0.3, dtype=torch.float64)))
        u = pyro.sample("u", dist.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0))
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal(z + u, 1.0), obs=y)

    def guide(y):
        logit = pyro.param("logit", torch.tensor(0.2, dtype=torch.float64))
        loc = pyro.param("loc", torch.tensor(0.1, dtype=torch.float64))
        return pyro.sample("z", dist.Bernoulli(logits=logit)), pyro.sample("u", dist.Normal(loc, 0.5))

    pyro.clear_param_store()
    guide(y)
    K = 16
    pyro.set_rng_seed(2)
    loss = ReweightedWakeSleep(K).differentiable_loss(model, guide, y)
    logit, loc = pyro.param("logit"), pyro.param("loc")
    g_logit, g_loc = torch.autograd.grad(loss, [logit, loc])
    pyro.set_rng_seed(2)
    with torch.no_grad():
        z, u = (torch.stack(v) for v in zip(*[guide(y) for _ in range(K)]))
        log_w = (
            dist.Bernoulli(torch.tensor(0.3, dtype=torch.float64)).log_prob(z) + dist.Normal(0.0, 1.0).log_prob(u)
            + dist.Normal((z + u)[:, None], 1.0).log_prob(y).sum(-1)
            - dist.Bernoulli(logits=logit).log_prob(z) - dist.Normal(loc, 0.5).log_prob(u)
        )
    w_hat = torch.softmax(log_w, 0)
    assert 1.5 < float(1 / (w_hat**2).sum()) < K - 0.5  # weights neither equal nor collapsed
    # d log Bernoulli(z; sigmoid(l)) / dl = z - sigmoid(l)
    assert float(g_logit) == pytest.approx(-float((w_hat * (z - torch.sigmoid(logit.detach()))).sum()), rel=1e-8)
    dlog_w = (y - z[:, None] - u[:, None]).sum(-1) - u + (u - loc.detach()) / 0.25
    assert float(g_loc) == pytest.approx(-float(((w_hat - w_hat**2) * dlog_w).sum()), rel=1e-8)


def test_rws_with_many_particles_recovers_the_posterior_moments(device):
    """Inclusive-KL fitting of a family that contains the posterior (orthogonal design):
    the fixed point is the posterior itself, up to the SNIS bias O(1/K) and SGD noise."""
    problem = conjugate_problem(orthogonal=True)
    mean, cov, _ = exact_posterior(problem)
    sd = cov.diagonal().sqrt()
    model, guide, x, y = setup(problem, device, torch.float64, mean + 2 * sd, 3 * sd)
    steps = 200
    fit(model, guide, (x, y), epochs=steps, objective=ReweightedWakeSleep(500), batch_size=len(y), lr=0.05,
        lr_schedule=lambda e: 1.0 - 0.95 * e / steps, progress=False, seed=0)
    loc = guide.locs["weight"].detach().cpu().reshape(-1)
    fitted_sd = guide.log_scales["weight"].detach().exp().cpu().reshape(-1)
    assert torch.all((loc - mean).abs() < 0.1 * sd)
    assert torch.all((fitted_sd / sd - 1).abs() < 0.1)


def test_importance_resampling_moves_q_towards_the_posterior(device):
    problem = conjugate_problem(orthogonal=False)
    mean, cov, _ = exact_posterior(problem)
    sd = cov.diagonal().sqrt()
    loc, scale = mean + 1.0 * sd, 2.0 * sd
    model, guide, x, y = setup(problem, device, torch.float64, loc, scale)
    S = 1000
    plain = importance_resampled_samples(model, guide, x, y, num_samples=S, num_proposals=1)["weight"].cpu().reshape(S, -1)
    z = z_bound(num_comparisons=2 * len(sd))
    assert torch.all((plain.mean(0) - loc).abs() < z * scale / S**0.5)  # M = 1 is q itself
    samples, diag = importance_resampled_samples(model, guide, x, y, num_samples=S, num_proposals=256, return_diagnostics=True)
    resampled = samples["weight"].cpu().reshape(S, -1)
    # SNIS with M = 256 from a q whose weights have ESS ~ diag["ess"]: the draws are (nearly)
    # posterior draws; their mean is within the Monte Carlo error plus a small SNIS bias
    assert 1 < diag["ess"] < 256
    assert torch.all((resampled.mean(0) - mean).abs() < z * sd / S**0.5 + 0.1 * sd)
    assert torch.all((resampled.std(0) / sd - 1).abs() < 0.15)


def test_minibatch_plate_warns_and_local_reparameterization_is_refused():
    problem = conjugate_problem(orthogonal=False, n=40)
    loc, scale = off_posterior(problem)
    model, guide, x, y = setup(problem, "cpu", torch.float64, loc, scale)
    model.likelihood.dataset_size = 40
    obj = ImportanceWeighted_ELBO(4)
    with pytest.warns(UserWarning, match="subsampled"):
        obj.loss(model, guide, x[:10], y[:10], torch.arange(10))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obj.loss(model, guide, x, y)  # full batch: no warning
    pmodel, pguide, px, py = pyro_regression(problem, "cpu", torch.float64)

    def sub_model(x, y):
        with pyro.plate("data", 40, subsample_size=10) as idx:
            w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype), 1.0).to_event(1))
            pyro.sample("y", dist.Normal((x[idx] * w).sum(-1), 1.0), obs=y[idx])

    def sub_guide(x, y):
        with pyro.plate("data", 40, subsample_size=10):
            pyro.sample("w", dist.Normal(torch.zeros(x.shape[1], dtype=x.dtype), 1.0).to_event(1))

    with pytest.warns(UserWarning, match="subsampled"):
        ImportanceWeighted_ELBO(2).loss(sub_model, sub_guide, px, py)
    with pytest.raises(ValueError, match="local reparameterization"):
        with local_reparameterization():
            ImportanceWeighted_ELBO(2).loss(lambda *a: model(*a), lambda *a: guide(*a), x, y)
    assert "bias" in MINIBATCH_BIAS_WARNING


def test_fit_history_records_the_ess():
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = setup(problem, "cpu", torch.float64, loc, scale)
    history = fit(model, guide, (x, y), epochs=3, objective=ImportanceWeighted_ELBO(8), batch_size=len(y), progress=False)
    assert {"ess", "max_weight", "log_weight_var"} <= set(history.columns)
    assert ((history.ess >= 1 - 1e-9) & (history.ess <= 8 + 1e-9)).all()


@pytest.mark.parametrize("alpha", [0.0, 0.5, -1.0])
def test_matches_pyros_renyi_elbo_on_the_same_draws(alpha, device):
    """On a plain Pyro model with vectorised particles, the value and the gradients are Pyro's
    ``RenyiELBO``'s (same random numbers), which has no ``differentiable_loss``."""
    problem = conjugate_problem(orthogonal=False)
    loc, scale = off_posterior(problem)
    model, guide, x, y = pyro_regression_at(problem, device, torch.float64, loc, scale)
    params = [pyro.param("loc").unconstrained(), pyro.param("scale").unconstrained()]
    results = []
    for objective in (RenyiELBO(alpha, num_particles=6, vectorize_particles=True), pyro.infer.RenyiELBO(alpha, num_particles=6, vectorize_particles=True)):
        for p in params:
            p.grad = None
        pyro.set_rng_seed(11)
        value = objective.loss_and_grads(model, guide, x, y)
        results.append((value, [p.grad.clone() for p in params]))
    (v1, g1), (v2, g2) = results
    assert v1 == pytest.approx(v2, rel=1e-10)
    for a, b in zip(g1, g2):
        assert torch.allclose(a, b, rtol=1e-8, atol=1e-10)


def test_guides_with_a_score_function_term_are_refused():
    """A von Mises-Fisher direction is only partly reparameterized: without its score-function
    correction the importance-weighted gradient would be biased, so the objectives refuse it."""
    from pyrozoo.guides import RadialDirectionalGuide
    from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, RadialDirectionalPrior

    torch.manual_seed(0)
    x, y = torch.randn(12, 3), torch.randn(12, 1)
    model = BayesianNeuralNetwork(MLP(3, [4], 1), RadialDirectionalPrior(grouping="double"), GaussianLikelihood(12, precision=1.0))
    guide = RadialDirectionalGuide(model)
    guide(x, y)
    with pytest.raises(NotImplementedError, match="reparameterized"):
        ImportanceWeighted_ELBO(2).loss(model, guide, x, y)


@pytest.mark.parametrize("objective", ["iwae", "renyi", "rws"])
@pytest.mark.parametrize("vectorize", [False, True])
def test_a_guide_without_latent_sites_weighs_on_the_models_device_and_dtype(objective, vectorize, device, dtype):
    # no latent site: every weight is the likelihood, log q is 0 on the model's device and
    # dtype, and the bound is exactly log p(y | theta)
    y = torch.tensor([0.3, -1.2, 2.0], device=device, dtype=dtype)

    def model(y):
        loc = pyro.param("loc", torch.tensor(0.5, device=device, dtype=dtype))
        with pyro.plate("data", len(y)):
            pyro.sample("y", dist.Normal(loc, 1.0), obs=y)

    def guide(y):
        pass

    pyro.clear_param_store()
    made = {"iwae": ImportanceWeighted_ELBO, "renyi": lambda **kw: RenyiELBO(alpha=0.5, **kw), "rws": ReweightedWakeSleep}[objective]
    elbo = made(num_particles=3, vectorize_particles=vectorize, max_plate_nesting=1)
    if objective != "rws":
        log_joint, log_q = elbo.log_weights(model, guide, y)
        assert log_q.device == log_joint.device == y.device and log_q.dtype == log_joint.dtype == dtype
        assert torch.equal(log_q, torch.zeros_like(log_q))
    loss = elbo.differentiable_loss(model, guide, y)
    expected = -dist.Normal(torch.tensor(0.5, dtype=torch.float64), 1.0).log_prob(y.cpu().double()).sum()
    assert loss.device == y.device and loss.dtype == dtype
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-6)
