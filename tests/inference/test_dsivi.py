"""DSIVI_ELBO: below the exact ELBO and converging to it on models whose ELBO is known,
monotone in K1 and K2, SSIVI tighter than SIVI, explicit sites unchanged, the ψ⁰ guard,
particles, and gradients reaching the mixing networks."""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from scipy import integrate

from pyrozoo.data import toy_regression_1d
from pyrozoo.distributions import ExplicitMixing, FiniteMixing, SemiImplicit, SemiImplicitCacheMiss, semi_implicit_samples
from pyrozoo.guides import MeanFieldNormalGuide, SemiImplicitGuide
from pyrozoo.inference import ClosedFormKL_ELBO, DSIVI_ELBO, SIVI_ELBO
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, NormalGammaPrior, NormalPrior
from tests.distributions.semi_implicit_cases import autoregressive, gaussian_location

REPLICATES, PARTICLES = 24, 1000


def replicate_elbo(elbo, model, guide, replicates=REPLICATES):
    """Mean and standard error of ``-loss`` over independent replicates."""
    values = np.array([-elbo.loss(model, guide) for _ in range(replicates)])
    return values.mean(), values.std(ddof=1) / math.sqrt(replicates)


def paired_difference(elbo_a, elbo_b, model, guide, replicates=REPLICATES):
    """Mean and s.e. of ELBO_a - ELBO_b evaluated on the same random numbers."""
    diffs = []
    for r in range(replicates):
        pyro.set_rng_seed(100 + r)
        a = -elbo_a.loss(model, guide)
        pyro.set_rng_seed(100 + r)
        diffs.append(a + elbo_b.loss(model, guide))
    diffs = np.array(diffs)
    return diffs.mean(), diffs.std(ddof=1) / math.sqrt(replicates)


def vectorized(K1, K2, **kw):
    return DSIVI_ELBO(K1, K2, num_particles=PARTICLES, vectorize_particles=True, max_plate_nesting=1, **kw)


# -- a one-dimensional model with finite Gaussian-mixture guide and prior ----------------------

GUIDE_ATOMS = ([-1.5, 0.2, 1.4], [0.35, 0.5, 0.3], [0.3, 0.5, 0.2])  # locations, scales, weights
PRIOR_ATOMS = ([-2.0, 0.0, 2.0], [0.6, 1.0, 0.6], [0.25, 0.5, 0.25])
X_OBS, X_SCALE = 0.8, 0.7


def _finite(atoms, k, device):
    locs, scales, probs = (torch.tensor(a, dtype=torch.float64, device=device) for a in atoms)
    return SemiImplicit(FiniteMixing((locs, scales), probs=probs), lambda psi: dist.Normal(psi[0], psi[1]), (), num_mixing=k)


def _mixture_pdf(atoms):
    locs, scales, probs = (np.array(a) for a in atoms)
    return lambda z: float(np.sum(probs * np.exp(-0.5 * ((z - locs) / scales) ** 2) / (scales * math.sqrt(2 * math.pi))))


def exact_finite_elbo():
    """∫ q(z) [log N(x | z, s²) + log p(z) - log q(z)] dz by adaptive quadrature."""
    q, p = _mixture_pdf(GUIDE_ATOMS), _mixture_pdf(PRIOR_ATOMS)

    def integrand(z):
        qz = q(z)
        if qz == 0.0:
            return 0.0
        log_lik = -0.5 * ((X_OBS - z) / X_SCALE) ** 2 - math.log(X_SCALE * math.sqrt(2 * math.pi))
        return qz * (log_lik + math.log(p(z)) - math.log(qz))

    value, err = integrate.quad(integrand, -12, 12, points=[-1.5, 0.2, 1.4], limit=400, epsabs=1e-11, epsrel=1e-11)
    assert err < 1e-8
    return value


def finite_model_and_guide(K1_default, K2_default, device):
    def model():
        z = pyro.sample("z", _finite(PRIOR_ATOMS, K2_default, device))
        pyro.sample("x", dist.Normal(z, X_SCALE), obs=torch.tensor(X_OBS, dtype=torch.float64, device=device))

    def guide():
        pyro.sample("z", _finite(GUIDE_ATOMS, K1_default, device))

    return model, guide


@pytest.fixture(scope="module")
def exact_elbo():
    return exact_finite_elbo()


@pytest.mark.parametrize("K", [1, 16, 256])
def test_bound_is_below_the_exact_elbo(K, exact_elbo, device):
    model, guide = finite_model_and_guide(1, 1, device)
    mean, se = replicate_elbo(vectorized(K, K), model, guide)
    assert mean <= exact_elbo + 4 * se, (mean, se, exact_elbo)


def test_bound_increases_with_K1(exact_elbo, device):
    model, guide = finite_model_and_guide(1, 1, device)
    means = [replicate_elbo(vectorized(K1, 64), model, guide) for K1 in (0, 4, 64)]
    for (m1, s1), (m2, s2) in zip(means, means[1:]):
        assert m2 - m1 > 3 * math.hypot(s1, s2), means


def test_bound_increases_with_K2(exact_elbo, device):
    model, guide = finite_model_and_guide(1, 1, device)
    means = [replicate_elbo(vectorized(64, K2), model, guide) for K2 in (1, 3, 64)]
    for (m1, s1), (m2, s2) in zip(means, means[1:]):
        assert m2 - m1 > 3 * math.hypot(s1, s2), means


def test_bound_converges_to_the_exact_elbo(exact_elbo, device):
    model, guide = finite_model_and_guide(1, 1, device)
    loose, _ = replicate_elbo(vectorized(1, 1), model, guide)
    tight, se = replicate_elbo(vectorized(512, 512), model, guide, replicates=12)
    assert -4 * se <= exact_elbo - tight < 0.1 * (exact_elbo - loose), (loose, tight, se, exact_elbo)
    # the finite mixtures evaluated exactly give the ELBO itself
    exact_model, exact_guide = finite_model_and_guide(None, None, device)
    mean, se = replicate_elbo(vectorized(1, 1), exact_model, exact_guide, replicates=8)
    assert abs(mean - exact_elbo) < 4 * se


# -- Gaussian semi-implicit guide and prior: exact ELBO, sandwich, particles --------------------


def gaussian_model_and_guide(device, k=8):
    """Guide and prior both Gaussian location mixtures; p(ζ | z) is Gaussian, so the
    sandwich upper bound is available and the ELBO is known in closed form."""
    q, q_marginal = gaussian_location(device, torch.float64, k=k, group=True)
    p, p_marginal = gaussian_location(device, torch.float64, k=k, group=True)
    x = torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64, device=device)

    def model():
        z = pyro.sample("z", p)
        pyro.sample("x", dist.Normal(z, 1.0).to_event(1), obs=x)

    def guide():
        pyro.sample("z", q)

    qm, qv = q_marginal.base_dist.loc, q_marginal.base_dist.scale**2
    pm, pv = p_marginal.base_dist.loc, p_marginal.base_dist.scale**2
    log2pi = math.log(2 * math.pi)
    lik = (-0.5 * log2pi - 0.5 * ((x - qm) ** 2 + qv)).sum()
    cross = (-0.5 * log2pi - 0.5 * pv.log() - 0.5 * ((qm - pm) ** 2 + qv) / pv).sum()
    entropy = (0.5 * (log2pi + 1) + 0.5 * qv.log()).sum()
    return model, guide, float(lik + cross + entropy)


def test_sandwich_brackets_the_exact_elbo(device):
    model, guide, exact = gaussian_model_and_guide(device)
    lower, s1 = replicate_elbo(vectorized(8, 8), model, guide)
    upper, s2 = replicate_elbo(vectorized(8, 8, bound="upper"), model, guide)
    assert lower < exact + 4 * s1 and upper > exact - 4 * s2, (lower, exact, upper)
    assert upper - lower > 4 * math.hypot(s1, s2)


def test_vectorized_particles_match_sequential(device):
    model, guide, _ = gaussian_model_and_guide(device, k=4)
    vec = replicate_elbo(DSIVI_ELBO(4, 4, num_particles=100, vectorize_particles=True, max_plate_nesting=1), model, guide, replicates=12)
    seq = replicate_elbo(DSIVI_ELBO(4, 4, num_particles=100), model, guide, replicates=6)
    assert abs(vec[0] - seq[0]) < 4 * math.hypot(vec[1], seq[1]), (vec, seq)


def test_stock_trace_elbo_computes_the_same_bound(device):
    """Pyro's own Trace_ELBO gives the DSIVI bound too: a guide site's log_prob recognises
    its own sample (psi0 + K1 draws), a prior site's does not (K2 draws)."""
    model, guide, _ = gaussian_model_and_guide(device, k=4)
    ours = replicate_elbo(vectorized(4, 4), model, guide)
    stock = pyro.infer.Trace_ELBO(num_particles=PARTICLES, vectorize_particles=True, max_plate_nesting=1)
    with semi_implicit_samples(guide=4, model=4):
        theirs = replicate_elbo(stock, model, guide)
    assert abs(ours[0] - theirs[0]) < 4 * math.hypot(ours[1], theirs[1]), (ours, theirs)


# -- structured vs joint --------------------------------------------------------------------


def test_structured_bound_beats_the_joint_bound(device):
    """SSIVI ≥ SIVI (Theorem 4) on an autoregressive semi-implicit guide, paired draws;
    both below the exact ELBO (the guide is Gaussian, so its entropy is known)."""
    d = 6
    q, q_marginal = autoregressive(device, torch.float64, k=8, d=d)
    x = torch.linspace(-1, 1, d, dtype=torch.float64, device=device)

    def model():
        z = pyro.sample("z", dist.Normal(torch.zeros(d, dtype=torch.float64, device=device), 1.0).to_event(1))
        pyro.sample("x", dist.Normal(z, 1.0).to_event(1), obs=x)

    def guide():
        pyro.sample("z", q)

    mu, cov = q_marginal.mean, q_marginal.covariance_matrix
    log2pi = math.log(2 * math.pi)
    exact = float(-d * log2pi - 0.5 * (torch.trace(cov) + mu @ mu) - 0.5 * (torch.trace(cov) + (x - mu) @ (x - mu)) + q_marginal.entropy())
    diff, se = paired_difference(vectorized(8, 1), vectorized(8, 1, structured=False), model, guide)
    assert diff > 4 * se, (diff, se)
    structured, se = replicate_elbo(vectorized(8, 1), model, guide)
    assert structured < exact + 4 * se


# -- explicit sites, SIVI, guards, validation ---------------------------------------------------


def _bnn(prior, n=32):
    x, y = toy_regression_1d(n)
    model = BayesianNeuralNetwork(MLP(1, [8], 1), prior, GaussianLikelihood(n, precision=dist.Gamma(6.0, 6.0)))
    return model, x, y


def test_explicit_sites_keep_closed_form_kls(device):
    model, x, y = _bnn(NormalPrior(1.0))
    model.to(device)
    x, y = x.to(device), y.to(device)
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    for fuse in (True, False):
        pyro.set_rng_seed(3)
        a = DSIVI_ELBO(4, 4, fuse=fuse).loss(model, guide, x, y)
        pyro.set_rng_seed(3)
        b = ClosedFormKL_ELBO(fuse=fuse).loss(model, guide, x, y)
        assert a == b


@pytest.mark.parametrize("guide_cls", [MeanFieldNormalGuide, SemiImplicitGuide])
def test_direct_and_trace_evaluation_agree(guide_cls, device):
    model, x, y = _bnn(NormalGammaPrior(1.0, 1.0, form="marginal", num_mixing=4))
    model.to(device)
    x, y = x.to(device), y.to(device)
    guide = guide_cls(model)
    guide(x, y)
    guide.to(device)
    values = []
    for fuse in (True, False):
        pyro.set_rng_seed(5)
        values.append(DSIVI_ELBO(3, 5, fuse=fuse).loss(model, guide, x, y))
    # the same sums in another shape: equal on the CPU; CUDA's reductions order a sum by its
    # tensor's shape, so there the two agree to float32 rounding (a few ulps of the total)
    assert values[0] == pytest.approx(values[1], rel=0 if device.type == "cpu" else 1e-6) and math.isfinite(values[0])


def test_sivi_is_dsivi_with_an_explicit_prior(device):
    model, x, y = _bnn(NormalPrior(1.0))
    x, y = x.to(device), y.to(device)
    model.to(device)
    guide = SemiImplicitGuide(model, num_mixing=3)
    guide(x, y)
    guide.to(device)
    pyro.set_rng_seed(0)
    a = SIVI_ELBO(6).loss(model, guide, x, y)
    pyro.set_rng_seed(0)
    b = DSIVI_ELBO(6, 1).loss(model, guide, x, y)
    assert a == b
    si_model, _, _ = _bnn(NormalGammaPrior(form="marginal"))
    si_model.to(device)
    with pytest.raises(ValueError, match="explicit priors"):
        SIVI_ELBO(2).loss(si_model, MeanFieldNormalGuide(si_model), x, y)


def test_cache_miss_is_reported(device):
    """A guide whose latent values do not come from its own rsample (here: replayed from an
    earlier trace into a new distribution object) has no ψ⁰: the objective must refuse
    instead of silently overestimating the ELBO."""
    model, _, _ = gaussian_model_and_guide(device)

    def guide():  # a new distribution object per call, as guides usually build them
        pyro.sample("z", gaussian_location(device, torch.float64, k=2, group=True)[0])

    DSIVI_ELBO(2, 2).loss(model, guide)
    replayed = poutine.replay(guide, trace=poutine.trace(guide).get_trace())
    with pytest.raises(SemiImplicitCacheMiss, match="psi0"):
        DSIVI_ELBO(2, 2).loss(model, replayed)

    def aux_guide():
        aux = SemiImplicit(ExplicitMixing(dist.Normal(torch.zeros(2, device=device), 1.0)), lambda p: dist.Normal(p, 1.0).to_event(1), (2,))
        pyro.sample("aux", aux, infer={"is_auxiliary": True})
        guide()

    DSIVI_ELBO(2, 2).loss(model, aux_guide)
    old = poutine.trace(aux_guide).get_trace()
    old.remove_node("z")  # replay only the auxiliary site
    with pytest.raises(SemiImplicitCacheMiss, match="auxiliary"):
        DSIVI_ELBO(2, 2).loss(model, poutine.replay(aux_guide, trace=old))


def test_argument_validation():
    with pytest.raises(ValueError):
        DSIVI_ELBO(-1, 2)
    with pytest.raises(ValueError):
        DSIVI_ELBO(1, 2.5)
    with pytest.raises(ValueError, match="upper"):
        DSIVI_ELBO(0, 2, bound="upper")
    with pytest.raises(ValueError):
        DSIVI_ELBO(1, 1, bound="middle")


# -- gradients ----------------------------------------------------------------------------


@pytest.mark.parametrize("grouping", ["site", "row"])
def test_gradients_reach_the_mixing_network(grouping, device):
    model, x, y = _bnn(NormalGammaPrior(1.0, 1.0, form="marginal", num_mixing=4))
    model.to(device)
    x, y = x.to(device), y.to(device)
    guide = SemiImplicitGuide(model, grouping=grouping, num_mixing=4)
    guide(x, y)
    guide.to(device)
    loss = DSIVI_ELBO(4, 4).differentiable_loss(model, guide, x, y)
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in guide.hypernets.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
