"""The von Mises-Fisher distribution and the uniform distribution on the sphere.

Sampler correctness (for every case of ``SAMPLER_CASES``, float32 and float64):
* unit norm and finiteness;
* mean resultant length E[mu'x] = A_d(kappa), tolerance from the sample's standard error;
* Kolmogorov-Smirnov test of the angle to the mean against the exact marginal density
  f(theta) ~ exp(kappa cos theta) sin(theta)^(d-2), integrated numerically;
* uniformity of the tangent direction: (1 + e'v)/2 ~ Beta((d-2)/2, (d-2)/2) for e orthogonal to mu;
layer draws (one sample per row of a batch of means, RDP's layer shapes, the concentration shared
or per row, and the sampler's later rounds forced): E[mu'x] = A_d(kappa), the angle's exact
marginal, E[x] along directions orthogonal to each mean; Wood's acceptance test and its lower
bound against quadrature; gradients (kappa: pathwise + rejection correction against
A_d'(kappa), shared and per row, and the pathwise part alone detectably biased, the closed-form
pathwise derivative against autograd and finite differences of the reference formula; loc:
against A_d(kappa)(I - mu mu')a, and equal to the Householder reflection's pathwise gradient at
the same draw), the density against mpmath's normaliser and scipy, entropy, moments and the KL
divergences against Monte Carlo estimates.
The large-d grid of the test plan (d up to 1e4, kappa up to 1e5) runs with ``--runslow``.
At huge concentrations (1e13 to 1e300, and up to the largest float) the log-density at the
mode, the entropy and the KLs are checked against mpmath, and the sampler's spread.
"""

import functools
import json
import math
from pathlib import Path

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from scipy import integrate, stats
from torch.distributions import kl_divergence

from pyrozoo.distributions import HypersphericalUniform, VonMisesFisher
from pyrozoo.distributions import von_mises_fisher as vmf_module
from pyrozoo.ops.special import bessel_iv_ratio
from pyrozoo.distributions.von_mises_fisher import log_sphere_area, vmf_concentration, vmf_log_normalizer
from tests.stats import mean_tolerance, z_bound

_FIXTURE = json.loads((Path(__file__).parents[1] / "ops" / "bessel_references.json").read_text())
REFERENCES = _FIXTURE["points"]
#: mpmath references at kappa from 1e13 to the largest float64 (see tests/ops/generate_bessel_references.py)
HUGE = _FIXTURE["huge_points"]
HUGE_KAPPAS = [1e13, 1e20, 1e100, 1e200, 1e300]
F32_EPS = torch.finfo(torch.float32).eps


def rdp_ml_kappa(d, eps):
    """RDP's prior/initial concentration ``ml_kappa(d, eps)`` (its ``torch_user/nn/utils.py``)."""
    return (max(4, d) - 3) * (1 - eps) / (1 - (1 - eps) ** 2)


#: (d, kappa, number of samples); the regression cases of known bugs in other samplers are
#: (1000, 20) (s-vae's switch of b), (800, ml_kappa(800, 0.005)) (float32 cancellation in b) and
#: (10, 1e5) (an inexact Householder reflection).
SAMPLER_CASES = [
    (2, 1e-3, 20000),
    (2, 1.0, 20000),
    (3, 0.1, 20000),
    (3, 1e5, 20000),
    (5, 2.0, 20000),
    (10, 10.0, 20000),
    (10, 1e5, 20000),
    (100, 50.0, 20000),
    (100, rdp_ml_kappa(100, 0.005), 20000),
    (1000, 20.0, 5000),
    (800, rdp_ml_kappa(800, 0.005), 5000),
]
SLOW_SAMPLER_CASES = [
    (d, kappa, 20000 if d <= 1000 else 4000)
    for d in (2, 3, 10, 100, 1000, 10000)
    for kappa in (1e-3, 0.1, 1.0, 10.0, rdp_ml_kappa(d, 0.5), rdp_ml_kappa(d, 0.1), rdp_ml_kappa(d, 0.005), rdp_ml_kappa(d, 0.002), 1e5)
]
#: p-value threshold of the KS tests: a 1e-3 chance that any correct case fails, Bonferroni
P_THRESHOLD = 1e-3 / (4 * len(SLOW_SAMPLER_CASES))


def _case_id(case):
    d, kappa, n = case
    return f"d{d}-k{kappa:.3g}"


def _unit(v):
    return v / v.norm(dim=-1, keepdim=True)


@functools.lru_cache(maxsize=8)
def _draw(d, kappa, n, dtype_name):
    """Samples of one case with a mean direction that has no special alignment, and the direction."""
    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(hash((d, round(kappa, 6))) % 2**31)
    mu = _unit(torch.randn(d, generator=g, dtype=torch.float64))
    torch.manual_seed(d * 1000 + int(math.log10(kappa) * 10) % 997)
    x = VonMisesFisher(mu.to(dtype), torch.tensor(kappa, dtype=dtype)).sample((n,))
    return x, mu


def _angle_cdf(d, kappa):
    """CDF of theta = angle(x, mu), density ~ exp(kappa (cos theta - 1)) sin(theta)^(d-2) on [0, pi]."""
    theta = np.unique(np.concatenate([np.linspace(0.0, np.pi, 200_001), np.geomspace(1e-12, np.pi, 200_001)]))
    with np.errstate(divide="ignore"):
        log_f = -2.0 * kappa * np.sin(theta / 2) ** 2 + (d - 2) * np.log(np.sin(theta)) if d > 2 else -2.0 * kappa * np.sin(theta / 2) ** 2
    log_f = np.where(np.isfinite(log_f), log_f, -np.inf)
    f = np.exp(log_f - log_f.max())
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(theta))])
    cdf /= cdf[-1]
    return lambda t: np.interp(t, theta, cdf)


def _check_sampler(d, kappa, n, dtype):
    x, mu = _draw(d, kappa, n, str(dtype).split(".")[-1])
    assert x.dtype == dtype and x.shape == (n, d)
    assert torch.isfinite(x).all()
    eps = 1e-12 if dtype == torch.float64 else 1e-6
    assert (x.double().norm(dim=-1) - 1).abs().max() <= eps

    x64 = x.double()
    t = 0.5 * (x64 - mu).square().sum(-1)  # 1 - mu'x without cancellation
    w = 1.0 - t
    a = float(bessel_iv_ratio(d / 2, torch.tensor(kappa, dtype=torch.float64)))
    # statistical tolerance plus the rounding of float32 coordinates
    tol = mean_tolerance(float(w.var()), n, 2 * len(SLOW_SAMPLER_CASES)) + 4 * torch.finfo(dtype).eps * math.sqrt(d) * float(t.mean().sqrt() + 1e-30)
    assert abs(float(w.mean()) - a) <= tol + (0 if dtype == torch.float64 else 1e-7)

    theta = 2.0 * np.arcsin(np.sqrt(np.clip(t.numpy() / 2.0, 0.0, 1.0)))
    p_marginal = stats.kstest(theta, _angle_cdf(d, kappa)).pvalue
    assert p_marginal > P_THRESHOLD, f"angle to the mean: KS p-value {p_marginal}"

    # tangent direction against a fixed unit vector e orthogonal to mu
    e = torch.randn(d, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    e = _unit(e - (e @ mu) * mu)
    r = x64 - (x64 @ mu).unsqueeze(-1) * mu
    s = (_unit(r) @ e).clamp(-1.0, 1.0)
    if d == 2:
        p_tangent = stats.binomtest(int((s > 0).sum()), n, 0.5).pvalue
    else:
        p_tangent = stats.kstest(((1.0 + s) / 2.0).numpy(), stats.beta((d - 2) / 2, (d - 2) / 2).cdf).pvalue
    assert p_tangent > P_THRESHOLD, f"tangent direction: p-value {p_tangent}"


@pytest.mark.parametrize("case", SAMPLER_CASES, ids=_case_id)
def test_sampler(case, dtype):
    _check_sampler(*case, dtype)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_SAMPLER_CASES, ids=_case_id)
def test_sampler_full_grid(case, dtype):
    _check_sampler(*case, dtype)


@pytest.mark.parametrize("mu", [[1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [1.0, 1e-9, 0.0, 0.0], [0.0, 0.0, 0.0, -1.0]])
def test_reflection_has_no_special_case_at_the_poles(mu, dtype):
    """Means at +-e1 (where a reflection through e1 - mu degenerates) sample correctly."""
    mu = _unit(torch.tensor(mu, dtype=torch.float64))
    kappa, n = 1e5, 20000
    x = VonMisesFisher(mu.to(dtype), torch.tensor(kappa, dtype=dtype)).sample((n,)).double()
    t = 0.5 * (x - mu).square().sum(-1)
    theta = 2.0 * np.arcsin(np.sqrt(t.numpy() / 2.0))
    assert stats.kstest(theta, _angle_cdf(4, kappa)).pvalue > P_THRESHOLD


# -- batched draws: one sample per row of a layer (issue 26) ----------------------------------

#: (rows, d, kappa) of layer draws: one sample per row of a batch of means, as RDP draws a
#: layer's directions. The RDP networks' shapes (LeNet-5 conv2 rows and columns, fc1 columns,
#: LeNet-300-100 fc2 rows, UCI hidden layers) at RDP's prior and initial concentrations, and
#: the edges of d and kappa.
ROW_CASES = [
    (50, 500, rdp_ml_kappa(500, 0.1)),
    (20, 1250, rdp_ml_kappa(1250, 0.1)),
    (20, 1250, 1e6),
    (800, 500, rdp_ml_kappa(500, 0.005)),
    (100, 300, rdp_ml_kappa(300, 0.1)),
    (50, 8, rdp_ml_kappa(8, 0.5)),
    (16, 50, rdp_ml_kappa(50, 0.005)),
    (100, 2, 1e-3),
    (50, 3, 1e5),
]
#: draws per case (all rows together); fewer for d >= 500 (tolerances follow the sample size)
ROW_DRAWS = 10000


def _row_case_id(case):
    rows, d, kappa = case
    return f"{rows}x{d}-k{kappa:.3g}"


def _check_row_draws(rows, d, kappa, shared, dtype, draws=ROW_DRAWS):
    """Layer draws (``rsample()`` of a batch of ``rows`` means, repeated) against the exact
    distribution: unit norm; E[mu'x] = A_d(kappa) within a tolerance from the sample size; the
    angle to the mean against its exact marginal (KS); the tangent part's mean along a fixed
    direction orthogonal to each mean is 0 (so E[x] = A_d(kappa) mu)."""
    draws = draws if d < 500 else draws // 2
    g = torch.Generator().manual_seed(rows * 7919 + d)
    mu = _unit(torch.randn(rows, d, generator=g, dtype=torch.float64))
    e = torch.randn(rows, d, generator=g, dtype=torch.float64)
    e = _unit(e - (e * mu).sum(-1, keepdim=True) * mu)
    concentration = torch.tensor(kappa, dtype=dtype) if shared else torch.full((rows,), kappa, dtype=dtype)
    q = VonMisesFisher(mu.to(dtype), concentration)
    torch.manual_seed(d + rows)
    x = torch.stack([q.rsample() for _ in range(-(-draws // rows))])  # (draws / rows, rows, d)
    assert x.dtype == dtype and bool(torch.isfinite(x).all())
    x = x.double()
    assert (x.norm(dim=-1) - 1).abs().max() <= (1e-12 if dtype == torch.float64 else 1e-6)
    t = (0.5 * (x - mu).square().sum(-1)).flatten()  # 1 - mu'x without cancellation
    n = t.numel()
    a = float(bessel_iv_ratio(d / 2, torch.tensor(kappa, dtype=torch.float64)))
    rounding = 4 * torch.finfo(dtype).eps * math.sqrt(d) * float(t.mean().sqrt()) + (0 if dtype == torch.float64 else 1e-7)
    assert abs(float((1.0 - t).mean()) - a) <= mean_tolerance(float(t.var()), n, 4 * len(ROW_CASES)) + rounding
    theta = 2.0 * np.arcsin(np.sqrt(np.clip(t.numpy() / 2.0, 0.0, 1.0)))
    assert stats.kstest(theta, _angle_cdf(d, kappa)).pvalue > P_THRESHOLD
    side = (x * e).sum(-1).flatten()
    assert abs(float(side.mean())) <= mean_tolerance(float(side.var()), n, 4 * len(ROW_CASES)) + rounding


@pytest.mark.parametrize("case", ROW_CASES, ids=_row_case_id)
def test_layer_draws(case, dtype):
    """Rows sharing one concentration (a layer's) draw from a common pool of proposals."""
    _check_row_draws(*case, True, dtype)


@pytest.mark.parametrize("case", ROW_CASES, ids=_row_case_id)
def test_layer_draws_with_a_concentration_per_row(case):
    """Rows with their own concentrations make several proposals each."""
    _check_row_draws(*case, False, torch.float64)


@pytest.mark.parametrize("case", [ROW_CASES[0], ROW_CASES[5], ROW_CASES[7]], ids=_row_case_id)
def test_layer_draws_that_need_more_rounds(case, monkeypatch):
    """The rounds after the first (a pool that falls short, rows left without an accepted
    proposal) draw from the same distribution: forced here by pools sized 3 standard deviations
    below the mean number accepted and one proposal per row and round."""
    monkeypatch.setattr(vmf_module, "_POOL_MARGIN_SD", -3.0)
    for name in ("_TRIES", "_LARGE_TRIES", "_LATER_TRIES"):
        monkeypatch.setattr(vmf_module, name, 1)
    for shared in (True, False):
        _check_row_draws(*case, shared, torch.float64, draws=ROW_DRAWS // 2)


class _TensorConstants(vmf_module._WoodConstants):
    """Wood's constants as 0-d tensors, as on an accelerator (where reading the value would synchronise)."""

    def __init__(self, dim, kappa):
        super().__init__(dim, torch.as_tensor(kappa, dtype=torch.float64))


@pytest.mark.parametrize("case", [ROW_CASES[0], ROW_CASES[5], ROW_CASES[7]], ids=_row_case_id)
def test_accelerator_path_draws_the_same(case, monkeypatch):
    """With the concentration's constants kept as tensors (the accelerator path, forced here on
    the CPU) a draw consumes the same random numbers and gives the same sample and gradients."""
    rows, d, kappa = case
    mu = _unit(torch.randn(rows, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    upstream = torch.randn(rows, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)

    def draw():
        v = mu.clone().requires_grad_()
        k = torch.tensor(kappa, dtype=torch.float64, requires_grad=True)
        torch.manual_seed(0)
        x = VonMisesFisher(v / v.norm(dim=-1, keepdim=True), k).rsample()
        return (x.detach(),) + torch.autograd.grad((x * upstream).sum(), [v, k])

    expected = draw()
    monkeypatch.setattr(vmf_module, "_WoodConstants", _TensorConstants)
    for value, reference in zip(draw(), expected):
        torch.testing.assert_close(value, reference, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("d", [2, 3, 4, 5, 6, 9, 10, 49, 50, 1000])
def test_minimum_acceptance_bounds_woods_acceptance(d):
    """``_min_acceptance(d)``, which sizes the pools, is below the acceptance probability of
    Wood's sampler at every kappa (quadrature of Wood's own test over the Beta proposal; it
    decreases in kappa towards its limit, ~0.658 at d = 2 and 1/sqrt(2) for large d), at the
    first dimension of each entry of the table and below the next."""
    m = d - 1.0
    beta = stats.beta(m / 2, m / 2)
    for kappa in (1e-3, 1.0, float(d), 1e3 * d, 1e9):
        b = m / (2 * kappa + math.sqrt(4 * kappa * kappa + m * m))
        x0 = (1 - b) / (1 + b)
        c = kappa * x0 + m * math.log(1 - x0 * x0)

        def accept(eps):
            w = (1 - (1 + b) * eps) / (1 - (1 - b) * eps)
            return math.exp(kappa * w + m * math.log(1 - x0 * w) - c) * beta.pdf(eps)

        value = integrate.quad(accept, 0.0, 1.0, limit=200, points=[0.5])[0]
        assert vmf_module._min_acceptance(d) < value <= 1.0


@pytest.mark.parametrize("d, kappa", [(2, 1e-3), (3, 1.0), (10, 30.0), (500, 4000.0), (1250, 1e6)])
def test_acceptance_test_is_woods(d, kappa):
    """The rearranged test (no term of size kappa) accepts exactly the proposals that Wood's
    original test, log u <= kappa w + m log(1 - x0 w) - c, accepts at these moderate kappa
    (where the original is still accurate), for the float, 0-d and per-row constants alike;
    the proposal recovered from rho is the one tested."""
    m = d - 1.0
    torch.manual_seed(11)
    eps, one_minus_eps = vmf_module._symmetric_beta(0.5 * m, (4000,), None)
    torch.manual_seed(12)
    log_u = torch.rand(4000, dtype=torch.float64).log()
    b = m / (2 * kappa + math.sqrt(4 * kappa * kappa + m * m))
    x0 = (1 - b) / (1 + b)
    w = (1 - (1 + b) * eps) / (1 - (1 - b) * eps)
    expected = log_u <= kappa * w + m * torch.log1p(-x0 * w) - (kappa * x0 + m * math.log1p(-x0 * x0))
    for concentration in (kappa, torch.tensor(kappa, dtype=torch.float64), torch.full((4000,), kappa, dtype=torch.float64)):
        constants = vmf_module._WoodConstants(d, concentration)
        torch.manual_seed(12)
        rho, accepted = constants.accept(eps, one_minus_eps)
        assert bool((accepted == expected).all())
        torch.testing.assert_close(constants.proposal(rho), eps, rtol=1e-14, atol=0)
        w_rho, sin = constants.w_and_sin(rho)
        torch.testing.assert_close(w_rho, w, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(sin, (1 - w * w).clamp(min=0).sqrt(), rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("d, kappa", [(2, 0.1), (10, 30.0), (500, 4000.0), (1250, 1e6), (3, 1e300)])
def test_kappa_gradient_of_the_accepted_proposals_is_exact(d, kappa):
    """(w, sin) of accepted proposals and their closed-form kappa-derivatives (``_WoodTransform``)
    equal the reference formula ``_w_and_sin`` (b and the denominator in kappa at fixed eps,
    which score_parts differentiates) and its autograd gradient, and central finite
    differences of it (where kappa is not huge), for one shared and one per-row concentration."""
    torch.manual_seed(3)
    n = 50
    eps = vmf_module._symmetric_beta(0.5 * (d - 1), (n, 1), None)[0]
    weights = torch.randn(2, n, 1, dtype=torch.float64)
    q = VonMisesFisher(_unit(torch.randn(d, dtype=torch.float64)), kappa)
    for shape in ((), (n, 1)):
        k = torch.full(shape, kappa, dtype=torch.float64, requires_grad=True)
        constants = vmf_module._WoodConstants(d, kappa if not shape else k.detach())
        rho = eps / ((1 - eps) + constants.b * eps)
        w, sin = vmf_module._WoodTransform.apply(k, rho, constants)
        (grad,) = torch.autograd.grad((weights[0] * w + weights[1] * sin).sum(), k)
        k_ref = k.detach().clone().requires_grad_()
        w_ref, sin_ref = q._w_and_sin(k_ref, eps)[:2]
        (grad_ref,) = torch.autograd.grad((weights[0] * w_ref + weights[1] * sin_ref).sum(), k_ref)
        torch.testing.assert_close(w, w_ref, rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(sin, sin_ref, rtol=1e-12, atol=0)
        torch.testing.assert_close(grad, grad_ref, rtol=1e-10, atol=1e-300)
        if kappa < 1e100:
            h = 1e-6 * kappa

            def loss(value):
                w_h, sin_h = q._w_and_sin(torch.tensor(value, dtype=torch.float64), eps)[:2]
                return float((weights[0] * w_h + weights[1] * sin_h).sum())

            finite_difference = (loss(kappa + h) - loss(kappa - h)) / (2 * h)
            assert float(grad.sum()) == pytest.approx(finite_difference, rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("d, kappa", [(5, 2.0), (100, 50.0), (500, rdp_ml_kappa(500, 0.1))])
def test_shared_kappa_gradient_is_unbiased(d, kappa):
    """A layer's shared concentration (a 0-d parameter, RDP's): the pathwise gradient of the
    rows' mean of mu'x plus the rejection correction, over repeated draws, is A_d'(kappa)."""
    torch.manual_seed(6)
    rows, repeats = min(2000, 200_000 // d), 30
    mu = _unit(torch.randn(rows, d, dtype=torch.float64))
    grads = []
    for _ in range(repeats):
        k = torch.tensor(kappa, dtype=torch.float64, requires_grad=True)
        q = VonMisesFisher(mu, k)
        x = q.rsample()
        f = (x * mu).sum(-1)
        surrogate = f.mean() + (f.detach() * q.score_parts(x).score_function).mean()
        grads.append(float(torch.autograd.grad(surrogate, k)[0]))
    grads = np.array(grads)
    assert abs(grads.mean() - _a_prime(d, kappa)) <= z_bound(3, 1e-6) * grads.std(ddof=1) / math.sqrt(repeats)


def test_loc_gradient_is_the_householder_pathwise_gradient(dtype):
    """The loc-gradient is the pathwise gradient through the reflection H(mu) that maps
    sigma e1 to mu (sigma = -sign(mu_1)) at fixed x' = H(mu) x = (sigma w, sin v): the same
    estimator as before the batched sampler (issue 26), checked against an explicit matrix
    reflection at the same draws, means near the poles included."""
    torch.manual_seed(8)
    n, d = 64, 7
    v = torch.randn(n, d, dtype=dtype)
    v[:4] = torch.eye(d, dtype=dtype)[:4] * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=dtype)[:, None]
    v = v.requires_grad_()
    mu = v / v.norm(dim=-1, keepdim=True)
    x = VonMisesFisher(mu, torch.tensor(20.0, dtype=dtype)).rsample()
    upstream = torch.randn(n, d, dtype=dtype)
    (grad,) = torch.autograd.grad((x * upstream).sum(), v, retain_graph=True)

    def reflection(m, sigma):
        u = -m
        u = u + torch.nn.functional.pad(sigma[:, None], (0, d - 1))
        return torch.eye(d, dtype=dtype) - 2 * u[:, :, None] * u[:, None, :] / (u * u).sum(-1)[:, None, None]

    sigma = torch.where(mu.detach()[:, 0] >= 0, -1.0, 1.0).to(dtype)
    x_prime = (reflection(mu.detach(), sigma) @ x.detach()[:, :, None])[:, :, 0]
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    # x' has the reflection's structure: first coordinate sigma w = sigma mu'x, the rest sin v
    torch.testing.assert_close(x_prime[:, 0], sigma * (mu * x).sum(-1).detach(), rtol=tol, atol=tol)
    x_ref = (reflection(mu, sigma) @ x_prime[:, :, None])[:, :, 0]
    (grad_ref,) = torch.autograd.grad((x_ref * upstream).sum(), v)
    torch.testing.assert_close(grad, grad_ref, rtol=tol, atol=tol)


def test_shared_invalid_concentration_fails_fast_when_sampling():
    """The pooled path (one concentration for all rows) names an invalid one too."""
    loc = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    for kappa in (float("nan"), float("inf")):
        q = VonMisesFisher(loc, torch.tensor(kappa), validate_args=False)
        with pytest.raises(ValueError, match="concentration must be positive and finite"):
            q.rsample((3,))


# Pyro's density-based ``auto_goodness_of_fit(..., dim=d - 1)`` is not used: on the circle and
# the 2-sphere it returns p-values below 1e-5 for scipy's vonmises_fisher sampler as often as
# for this one (30 seeds of 20,000 draws at kappa = 3), i.e. it is not calibrated there. The
# angle and tangent tests above characterise the distribution exactly.


# -- gradients -----------------------------------------------------------------------------


def _kappa_gradient(d, kappa, n, correction=True, seed=0):
    """Per-sample estimates of d/dkappa E[mu'x] (pathwise, plus the rejection correction)."""
    torch.manual_seed(seed)
    mu = _unit(torch.ones(d, dtype=torch.float64))
    k = torch.full((n,), kappa, dtype=torch.float64, requires_grad=True)
    q = VonMisesFisher(mu.expand(n, d), k, gradient_correction=correction)
    x = q.rsample()
    f = x @ mu
    surrogate = f.sum()
    score = q.score_parts(x).score_function
    if torch.is_tensor(score):
        surrogate = surrogate + (f.detach() * score).sum()
    (g,) = torch.autograd.grad(surrogate, k)
    return g


def _a_prime(d, kappa):
    a = float(bessel_iv_ratio(d / 2, torch.tensor(kappa, dtype=torch.float64)))
    return 1.0 - a * a - (d - 1) * a / kappa


@pytest.mark.parametrize("d, kappa, n", [(5, 2.0, 100_000), (10, 10.0, 100_000), (100, 50.0, 40_000)])
def test_kappa_gradient_is_unbiased(d, kappa, n):
    g = _kappa_gradient(d, kappa, n)
    tol = mean_tolerance(float(g.var()), n, 6)
    assert abs(float(g.mean()) - _a_prime(d, kappa)) <= tol


@pytest.mark.slow
@pytest.mark.parametrize("d, kappa", [(5, 2.0), (10, 10.0), (100, 50.0), (100, 459.5), (1000, 664.7)])
def test_kappa_gradient_is_unbiased_many_samples(d, kappa):
    g = _kappa_gradient(d, kappa, 400_000 if d <= 100 else 100_000)
    assert abs(float(g.mean()) - _a_prime(d, kappa)) <= mean_tolerance(float(g.var()), g.numel(), 5)


def test_pathwise_kappa_gradient_alone_is_biased():
    """Guards against silently dropping the correction: pathwise-only is ~13% low at (5, 2)."""
    g = _kappa_gradient(5, 2.0, 100_000, correction=False)
    assert float(g.mean()) < _a_prime(5, 2.0) - 10 * math.sqrt(float(g.var()) / g.numel())


def test_score_function_recovered_from_a_value_matches_the_cached_one():
    torch.manual_seed(0)
    mu = _unit(torch.randn(6, 7, dtype=torch.float64))
    q = VonMisesFisher(mu, torch.tensor(5.0, dtype=torch.float64))
    x = q.rsample((3,))
    cached = q.score_parts(x).score_function
    recovered = q.score_parts(x.clone()).score_function
    torch.testing.assert_close(recovered, cached, rtol=1e-9, atol=1e-9)
    assert VonMisesFisher(mu, 5.0, gradient_correction=False).score_parts(x).score_function == 0


def test_loc_gradient(dtype):
    """grad_v E[a'x] = A (I - mu mu') a / |v| for mu = v / |v|."""
    d, kappa, n = 6, 3.0, 50_000
    torch.manual_seed(1)
    v = torch.tensor([0.5, -1.0, 2.0, 0.3, 0.0, 1.0], dtype=dtype).expand(n, d).clone().requires_grad_()
    a = torch.tensor([1.0, 2.0, -1.0, 0.5, 3.0, -2.0], dtype=dtype)
    mu = v / v.norm(dim=-1, keepdim=True)
    x = VonMisesFisher(mu, torch.tensor(kappa, dtype=dtype)).rsample()
    (g,) = torch.autograd.grad((x @ a).sum(), v)
    m = mu[0].detach().double()
    A = float(bessel_iv_ratio(d / 2, torch.tensor(kappa, dtype=torch.float64)))
    expected = A * (a.double() - (m @ a.double()) * m) / v[0].detach().double().norm()
    tol = mean_tolerance(g.double().var(0), n, 2 * d) + 1e-5
    assert ((g.double().mean(0) - expected).abs() <= tol).all()


def test_trace_elbo_gradient_in_kappa_is_unbiased():
    """Pyro's Trace_ELBO uses ``score_parts``: the surrogate gradient of E_q[log p(y | x)] - KL,
    with q = vMF(mu, kappa), matches the closed form (built from E[x] and E[xx'])."""
    d, y, a = 4, 0.7, torch.tensor([1.0, -0.5, 2.0, 0.3], dtype=torch.float64)
    mu = _unit(torch.tensor([0.2, 1.0, -0.4, 0.5], dtype=torch.float64))

    def model():
        x = pyro.sample("x", HypersphericalUniform(d, dtype=torch.float64))
        pyro.sample("y", dist.Normal(x @ a, 1.0), obs=torch.tensor(y, dtype=torch.float64))

    def guide(kappa):
        pyro.sample("x", VonMisesFisher(mu, kappa))

    def exact(kappa):
        A = bessel_iv_ratio(d / 2, kappa)
        second = (A / kappa) * (a @ a) + (1 - d * A / kappa) * (mu @ a) ** 2  # a' E[xx'] a
        expected_log_lik = -0.5 * (y * y - 2 * y * A * (mu @ a) + second) - 0.5 * math.log(2 * math.pi)
        return expected_log_lik - kl_divergence(VonMisesFisher(mu, kappa), HypersphericalUniform(d, dtype=torch.float64))

    kappa0 = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (expected,) = torch.autograd.grad(exact(kappa0), kappa0)
    elbo = pyro.infer.Trace_ELBO(num_particles=2000, vectorize_particles=True, max_plate_nesting=0)
    grads = []
    for _ in range(30):
        kappa = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(-elbo.differentiable_loss(model, lambda: guide(kappa)), kappa)
        grads.append(float(g))
    grads = np.array(grads)
    assert abs(grads.mean() - float(expected)) <= z_bound(1, 1e-6) * grads.std(ddof=1) / math.sqrt(len(grads))


# -- density, normaliser, entropy, moments ----------------------------------------------------


def test_log_normalizer_matches_mpmath(dtype, device):
    d = torch.tensor([p["d"] for p in REFERENCES], dtype=torch.float64)
    kappa = torch.tensor([p["kappa"] for p in REFERENCES], dtype=torch.float64)
    ref = torch.tensor([p["log_normalizer"] for p in REFERENCES], dtype=torch.float64)
    # one call per dimension (the normaliser takes d as a Python int)
    for dim in sorted({p["d"] for p in REFERENCES}):
        at = d == dim
        value = vmf_log_normalizer(dim, kappa[at].to(dtype=dtype, device=device))
        assert value.dtype == dtype and torch.isfinite(value).all()
        err = (value.double().cpu() - ref[at]).abs() / ref[at].abs().clamp(min=1.0)
        # float32: the rounding of kappa moves log C by about kappa * eps
        tol = 1e-12 if dtype == torch.float64 else 4 * torch.finfo(torch.float32).eps * (1 + kappa[at] / ref[at].abs().clamp(min=1.0))
        assert (err <= tol).all(), f"d={dim}: {err.max()}"


@pytest.mark.parametrize("d, kappa", [(3, 0.5), (5, 20.0), (50, 100.0), (200, 1e3)])
def test_log_prob_matches_scipy(d, kappa, dtype):
    mu = _unit(torch.linspace(-1.0, 2.0, d, dtype=torch.float64))
    q = VonMisesFisher(mu.to(dtype), torch.tensor(kappa, dtype=dtype), validate_args=True)
    x = torch.cat([q.sample((20,)), HypersphericalUniform(d, dtype=dtype).sample((5,)), mu.to(dtype).unsqueeze(0)])
    ref = stats.vonmises_fisher(mu.numpy(), kappa).logpdf(x.double().numpy() / np.linalg.norm(x.double().numpy(), axis=-1, keepdims=True))
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5 * max(1.0, kappa / 100)}
    torch.testing.assert_close(q.log_prob(x).double(), torch.as_tensor(ref), **tol)


def test_entropy_mean_and_variance_match_monte_carlo(dtype):
    torch.manual_seed(2)
    mu = _unit(torch.randn(3, 8, dtype=torch.float64)).to(dtype)
    kappa = torch.tensor([0.3, 12.0, 400.0], dtype=dtype)
    q = VonMisesFisher(mu, kappa)
    n = 40000
    x = q.sample((n,))
    neg_lp = -q.log_prob(x).double()
    assert ((neg_lp.mean(0) - q.entropy().double()).abs() <= mean_tolerance(neg_lp.var(0), n, 3) + 1e-4).all()
    xd = x.double()
    assert ((xd.mean(0) - q.mean.double()).abs() <= mean_tolerance(xd.var(0), n, 48) + 1e-6).all()
    sq = (xd - q.mean.double()) ** 2
    assert ((sq.mean(0) - q.variance.double()).abs() <= mean_tolerance(sq.var(0), n, 48) + 1e-6).all()


def test_concentration_inverts_the_mean_resultant_length():
    for d in (2, 13, 500, 10000):
        rho = torch.tensor([0.05, 0.5, 0.9, 0.998], dtype=torch.float64)
        kappa = vmf_concentration(d, rho, dtype=torch.float64)
        torch.testing.assert_close(bessel_iv_ratio(d / 2, kappa), rho, rtol=1e-10, atol=0)
    # RDP's approximation ml_kappa agrees with the exact value for large d
    assert vmf_concentration(1000, 0.9).item() == pytest.approx(rdp_ml_kappa(1000, 0.1), rel=0.01)
    with pytest.raises(ValueError, match="mean resultant length"):
        vmf_concentration(5, 1.0)


# -- KL divergences --------------------------------------------------------------------------


def _mc_kl(q, p, n=40000):
    x = q.sample((n,))
    diff = (q.log_prob(x) - p.log_prob(x)).double()
    return diff.mean(0), mean_tolerance(diff.var(0), n, 8)


@pytest.mark.parametrize("same_mean", [True, False])
def test_kl_vmf_vmf_matches_monte_carlo(same_mean, dtype):
    torch.manual_seed(3)
    mu_q = _unit(torch.randn(4, 10, dtype=torch.float64))
    mu_p = mu_q if same_mean else _unit(torch.randn(4, 10, dtype=torch.float64))
    q = VonMisesFisher(mu_q.to(dtype), torch.tensor([0.5, 5.0, 50.0, 500.0], dtype=dtype))
    p = VonMisesFisher(mu_p.to(dtype), torch.tensor(20.0, dtype=dtype))
    kl = kl_divergence(q, p)
    assert kl.shape == (4,) and kl.dtype == dtype
    mc, tol = _mc_kl(q, p)
    assert ((kl.double() - mc).abs() <= tol + 1e-4 * (1 + mc.abs())).all()


def test_kl_with_the_uniform_matches_monte_carlo():
    torch.manual_seed(4)
    mu = _unit(torch.randn(3, 6, dtype=torch.float64))
    q = VonMisesFisher(mu, torch.tensor([0.1, 3.0, 80.0], dtype=torch.float64))
    u = HypersphericalUniform(6, (3,), dtype=torch.float64)
    for a, b in ((q, u), (u, q)):
        mc, tol = _mc_kl(a, b)
        assert ((kl_divergence(a, b) - mc).abs() <= tol).all()
    assert kl_divergence(u, u).abs().max() == 0


def test_kl_is_finite_nonnegative_on_the_reference_grid(dtype):
    """KL(vMF(mu, kq) || vMF(mu, kp)) over the grid's concentrations, in both dtypes, with its gradient."""
    for dim in (2, 3, 10, 100, 1000, 10000, 100000):
        kappas = torch.tensor(sorted({p["kappa"] for p in REFERENCES if p["d"] == dim}), dtype=dtype)
        kq = kappas.repeat_interleave(len(kappas)).requires_grad_()
        kp = kappas.repeat(len(kappas))
        mu = torch.zeros(len(kq), dim, dtype=dtype)
        mu[:, 0] = 1.0
        kl = kl_divergence(VonMisesFisher(mu, kq), VonMisesFisher(mu, kp))
        (g,) = torch.autograd.grad(kl.sum(), kq)
        assert torch.isfinite(kl).all() and torch.isfinite(g).all()
        scale = 1e-12 if dtype == torch.float64 else 1e-5
        assert (kl >= -scale * (1 + kq.detach() + kp)).all()
        assert (kl[kq == kp].abs() <= scale * (1 + kp[kq == kp])).all()


def test_same_mean_kl_has_no_gradient_in_the_mean():
    v = torch.randn(5, 20, dtype=torch.float64, requires_grad=True)
    mu = v / v.norm(dim=-1, keepdim=True)
    kl = kl_divergence(VonMisesFisher(mu, 30.0), VonMisesFisher(mu, 60.0)).sum()
    (g,) = torch.autograd.grad(kl, v)
    assert g.abs().max() <= 1e-12


# -- shapes and validation ------------------------------------------------------------------

SHAPE_CASES = [((3,), ()), ((4, 5), ()), ((4, 5), (4,)), ((2, 1, 3), (4,)), ((6,), (2, 3))]


@pytest.mark.parametrize("loc_shape, kappa_shape", SHAPE_CASES)
def test_shapes_and_expand(loc_shape, kappa_shape, device, dtype):
    loc = _unit(torch.randn(loc_shape, dtype=dtype, device=device))
    kappa = torch.rand(kappa_shape, dtype=dtype, device=device) * 10 + 0.1
    q = VonMisesFisher(loc, kappa, validate_args=True)
    batch = torch.broadcast_shapes(loc_shape[:-1], kappa_shape)
    assert q.batch_shape == batch and q.event_shape == loc_shape[-1:]
    x = q.rsample((7,))
    assert x.shape == (7,) + batch + loc_shape[-1:] and x.dtype == dtype and x.device.type == device.type
    for t in (q.log_prob(x), q.score_parts(x).score_function):
        assert t.shape == (7,) + batch and t.dtype == dtype
    assert q.entropy().shape == batch and q.mean.shape == batch + loc_shape[-1:] and q.variance.shape == q.mean.shape
    e = q.expand((2,) + batch)
    assert e.batch_shape == (2,) + batch and e._validate_args
    torch.testing.assert_close(e.log_prob(x[:, None]), q.log_prob(x[:, None]).expand(7, 2, *batch))
    assert e.sample((3,)).shape == (3, 2) + batch + loc_shape[-1:]


def test_independent_wrapper_passes_score_parts_through():
    q = VonMisesFisher(_unit(torch.randn(5, 4, dtype=torch.float64)), 3.0).to_event(1)
    x = q.rsample()
    parts = q.score_parts(x)
    assert parts.log_prob.shape == () and parts.score_function.shape == ()


@pytest.mark.parametrize(
    "loc, kappa, match",
    [
        ([1.0, 1.0, 0.0], 1.0, "loc"),
        ([1.0, 0.0, 0.0], 0.0, "concentration"),
        ([1.0, 0.0, 0.0], -2.0, "concentration"),
        ([1.0, 0.0, 0.0], float("nan"), "concentration"),
        ([1.0, 0.0, 0.0], float("inf"), "concentration"),
        ([float("nan"), 0.0, 0.0], 1.0, "loc"),
    ],
)
def test_invalid_parameters_raise(loc, kappa, match):
    with pytest.raises(ValueError, match=match):
        VonMisesFisher(torch.tensor(loc), torch.tensor(kappa), validate_args=True)


@pytest.mark.parametrize("kappa", [float("inf"), float("nan"), 0.0, -1.0, 0])
def test_number_concentration_is_checked_without_validation(kappa):
    """A Python number is checked even with validation off (no device synchronisation)."""
    with pyro.validation_enabled(False):
        with pytest.raises(ValueError, match="concentration must be positive and finite"):
            VonMisesFisher(torch.tensor([1.0, 0.0, 0.0]), kappa)


@pytest.mark.parametrize("kappa", [[1.0, float("inf")], [float("nan"), 1.0]])
def test_unvalidated_tensor_concentration_fails_fast_when_sampling(kappa):
    """With validation off, a tensor concentration is not checked at construction; the
    sampler then names it after a few rounds (it used to spin for seconds, then fail with
    a message that did not mention kappa)."""
    q = VonMisesFisher(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), torch.tensor(kappa), validate_args=False)
    with pytest.raises(ValueError, match="concentration must be positive and finite"):
        q.rsample((3,))


def test_log_prob_at_the_mode_for_huge_concentration():
    # d = 3: log C + kappa = log kappa - log(2 pi) - log(1 - exp(-2 kappa))
    kappa = 1e16
    q = VonMisesFisher(torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), torch.tensor(kappa, dtype=torch.float64))
    expected = math.log(kappa) - math.log(2 * math.pi)
    assert q.log_prob(q.loc).item() == pytest.approx(expected, abs=1e-6)


def _huge_points(d):
    points = {p["kappa"]: p for p in HUGE if p["d"] == d}
    assert set(HUGE_KAPPAS) <= set(points)
    return [points[k] for k in HUGE_KAPPAS]


def _scaled_error(value, ref):
    """|value - ref| / max(1, |ref|): relative where the reference is not near 0, absolute otherwise."""
    value = value.detach().double().cpu()
    return ((value - ref).abs() / ref.abs().clamp(min=1.0)).max().item()


@pytest.mark.parametrize("d", [2, 3, 10, 1000])
def test_huge_concentration_matches_mpmath(d):
    """log_prob at the mode (log C + kappa), entropy and KL(vMF || uniform) at kappa in {1e13, 1e20,
    1e100, 1e200, 1e300} against mpmath (float64: the requirement is 1e-10 relative, achieved
    about 1e-14; (log C) + kappa used to return 0 at the mode from kappa ~ 1e16 and NaN beyond
    1e154), one concentration per row and one shared by all rows; and their kappa-gradients:
    1 - A_d, -kappa A_d' and kappa A_d', finite everywhere and accurate where A_d' (about
    (d - 1) / (2 kappa^2)) does not underflow."""
    points = _huge_points(d)
    n = len(points)
    keys = ("log_normalizer_plus_kappa", "entropy", "kl_uniform", "ratio_complement", "ratio_derivative")
    refs = {key: torch.tensor([p[key] for p in points], dtype=torch.float64) for key in keys}
    kappa_values = torch.tensor(HUGE_KAPPAS, dtype=torch.float64)
    loc = torch.zeros(n, d, dtype=torch.float64)
    loc[:, 0] = 1.0
    kappa = kappa_values.clone().requires_grad_()
    q = VonMisesFisher(loc, kappa, validate_args=True)
    values = {
        "log_normalizer_plus_kappa": q.log_prob(loc),
        "entropy": q.entropy(),
        "kl_uniform": kl_divergence(q, HypersphericalUniform(d, (n,), dtype=torch.float64)),
    }
    for key, value in values.items():
        assert _scaled_error(value, refs[key]) <= 1e-10  # the requirement
        assert _scaled_error(value, refs[key]) <= 1e-13, key  # what the method achieves
    a_prime = refs["ratio_derivative"]
    normal = a_prime > 1e-300
    expected = {"log_normalizer_plus_kappa": refs["ratio_complement"], "entropy": -kappa_values * a_prime, "kl_uniform": kappa_values * a_prime}
    for key, value in values.items():
        (grad,) = torch.autograd.grad(value.sum(), kappa)
        assert bool(torch.isfinite(grad).all()), (key, grad)
        exp = expected[key]
        if key == "log_normalizer_plus_kappa":
            assert ((grad - exp).abs() / exp).max() <= 1e-13
        else:
            assert ((grad[normal] - exp[normal]).abs() / exp[normal].abs()).max() <= 1e-9, (key, grad, exp)
            # beyond ~1e154 A' underflows: the gradient is 0 instead of about (d - 1) / (2 kappa)
            assert bool((grad[~normal].abs() <= d / kappa_values[~normal]).all())
    # one concentration shared by all rows (the scalar path)
    for k, p in zip(HUGE_KAPPAS, points):
        q1 = VonMisesFisher(loc[:2], torch.tensor(k, dtype=torch.float64))
        assert abs(q1.log_prob(loc[:2])[0].item() - p["log_normalizer_plus_kappa"]) <= 1e-13 * abs(p["log_normalizer_plus_kappa"])
        assert abs(q1.entropy()[0].item() - p["entropy"]) <= 1e-13 * abs(p["entropy"])
        kl = kl_divergence(q1, HypersphericalUniform(d, dtype=torch.float64))[0].item()
        assert abs(kl - p["kl_uniform"]) <= 1e-13 * abs(p["kl_uniform"])


@pytest.mark.parametrize("d", [2, 3, 10, 1000])
def test_kl_between_huge_concentrations_matches_mpmath(d):
    """KL(vMF(mu, kq) || vMF(mu', kp)) for consecutive huge concentrations, from the mpmath
    references: log C(kq) + kq - (log C(kp) + kp) - (1 - A(kq))(kq - kp) + A(kq) kp |mu - mu'|^2 / 2,
    each term formed in float64 from references accurate to an ulp; same mean (where the
    textbook form cancelled completely) and a slightly different one."""
    points = _huge_points(d)
    q_points, p_points = points[1:], points[:-1]
    kq = torch.tensor([p["kappa"] for p in q_points], dtype=torch.float64, requires_grad=True)
    kp = torch.tensor([p["kappa"] for p in p_points], dtype=torch.float64)
    lq = torch.tensor([p["log_normalizer_plus_kappa"] for p in q_points], dtype=torch.float64)
    lp = torch.tensor([p["log_normalizer_plus_kappa"] for p in p_points], dtype=torch.float64)
    w = torch.tensor([p["ratio_complement"] for p in q_points], dtype=torch.float64)
    same = lq - lp - w * kq.detach() * (1.0 - kp / kq.detach())
    mu = torch.zeros(len(kq), d, dtype=torch.float64)
    mu[:, 0] = 1.0
    angle = 1e-3
    mu2 = mu.clone()
    mu2[:, 0], mu2[:, 1] = math.cos(angle), math.sin(angle)
    half_sq_dist = 0.5 * ((1.0 - math.cos(angle)) ** 2 + math.sin(angle) ** 2)
    for other, expected in ((mu, same), (mu2, same + (1.0 - w) * kp * half_sq_dist)):
        kl = kl_divergence(VonMisesFisher(mu, kq), VonMisesFisher(other, kp))
        assert _scaled_error(kl, expected) <= 1e-13, (kl, expected)
        assert (kl.detach() >= 0).all()
        (grad,) = torch.autograd.grad(kl.sum(), kq)
        assert bool(torch.isfinite(grad).all())


def test_huge_concentration_float32_and_the_largest_floats():
    """float32 up to its largest number and float64 at its largest: every value and gradient
    finite, float32 the float64 values (at the same, rounded concentration) rounded."""
    for dtype in (torch.float32, torch.float64):
        big = torch.finfo(dtype).max
        kappas = [1e13, 1e20, 1e30, big] if dtype == torch.float32 else [1e300, big]
        for d in (2, 3, 1000):
            loc = torch.zeros(len(kappas), d, dtype=dtype)
            loc[:, 0] = 1.0
            kappa = torch.tensor(kappas, dtype=dtype, requires_grad=True)
            q = VonMisesFisher(loc, kappa, validate_args=True)
            values = [q.log_prob(loc), q.entropy(), kl_divergence(q, HypersphericalUniform(d, (len(kappas),), dtype=dtype))]
            values.append(kl_divergence(q, VonMisesFisher(loc, kappa.detach() * 0.5)))
            torch.manual_seed(0)
            x = q.rsample((3,))
            values.append(q.log_prob(x).sum(0))
            values.append(q.score_parts(x).score_function.sum(0))
            (grad,) = torch.autograd.grad(sum(v.sum() for v in values) + x.sum(), kappa)
            assert all(bool(torch.isfinite(v).all()) for v in values) and bool(torch.isfinite(grad).all()), (dtype, d, values, grad)
            if dtype == torch.float32:
                q64 = VonMisesFisher(loc.double(), kappa.detach().double())
                ref = [q64.log_prob(loc.double()), q64.entropy(), kl_divergence(q64, HypersphericalUniform(d, (len(kappas),), dtype=torch.float64))]
                for value, r in zip(values, ref):
                    assert ((value.detach().double() - r).abs() / r.abs()).max() <= F32_EPS


@pytest.mark.parametrize("d, kappa, pole", [(3, 1e20, 0), (3, 1e300, 0), (1000, 1e300, -1), (10, torch.finfo(torch.float64).max, 3)])
def test_sampler_at_huge_concentration(d, kappa, pole):
    """Samples at huge kappa lie at 1 - mu'x = |x - mu|^2 / 2 ~ (d - 1) / (2 kappa) from the mean:
    kappa (1 - mu'x) has mean kappa (1 - A_d(kappa)) (from mpmath; (d - 1)/2 to rounding). The
    mean is a pole +-e_i: around any other unit vector a sample within 1e-150 of it rounds to it."""
    n = 4000
    torch.manual_seed(5)
    mu = torch.zeros(d, dtype=torch.float64)
    mu[pole] = 1.0 if pole >= 0 else -1.0
    x = VonMisesFisher(mu, torch.tensor(kappa, dtype=torch.float64)).sample((n,))
    assert bool(torch.isfinite(x).all()) and (x.norm(dim=-1) - 1).abs().max() <= 1e-12
    scaled = 0.5 * kappa * (x - mu).square().sum(-1)  # kappa (1 - mu'x), with kappa * |x - mu|^2 in range
    expected = [p["ratio_complement"] * kappa for p in HUGE if p["d"] == d and p["kappa"] == kappa]
    expected = expected[0] if expected else (d - 1) / 2
    assert abs(float(scaled.mean()) - expected) <= mean_tolerance(float(scaled.var()), n, 4)


def test_bad_shapes_and_values_raise():
    with pytest.raises(ValueError, match="d >= 2"):
        VonMisesFisher(torch.ones(3, 1), 1.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        VonMisesFisher(_unit(torch.randn(4, 3)), torch.ones(3))
    with pytest.raises(TypeError, match="floating-point"):
        VonMisesFisher(torch.tensor([1, 0]), 1.0)
    q = VonMisesFisher(torch.tensor([1.0, 0.0, 0.0]), 2.0, validate_args=True)
    with pytest.raises(ValueError):
        q.log_prob(torch.tensor([1.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="dim"):
        HypersphericalUniform(1)
    with pytest.raises(ValueError, match="different dimension"):
        kl_divergence(q, HypersphericalUniform(4))


def test_hyperspherical_uniform(device, dtype):
    u = HypersphericalUniform(5, (2, 3), dtype=dtype, device=device, validate_args=True)
    x = u.sample((20000,))
    assert x.shape == (20000, 2, 3, 5) and x.dtype == dtype and x.device.type == device.type
    assert ((x.norm(dim=-1) - 1).abs() < 1e-5).all()
    torch.testing.assert_close(u.log_prob(x[:2]), torch.full((2, 2, 3), -log_sphere_area(5), dtype=dtype, device=device))
    torch.testing.assert_close(u.entropy(), torch.full((2, 3), log_sphere_area(5), dtype=dtype, device=device))
    # the first coordinate: (1 + x_1)/2 ~ Beta((d-1)/2, (d-1)/2)
    assert stats.kstest(((1 + x[:, 0, 0, 0].double().cpu()) / 2).numpy(), stats.beta(2, 2).cdf).pvalue > 1e-4
    assert math.isclose(log_sphere_area(3), math.log(4 * math.pi)) and math.isclose(log_sphere_area(2), math.log(2 * math.pi))
    assert u.expand((4, 2, 3)).batch_shape == (4, 2, 3)


@pytest.mark.parametrize("dim,kappa", [(2, 1e6), (3, 5.8e5), (10, 1e5), (1000, 1e6)])
def test_variance_along_the_mean_is_accurate_at_large_concentration(dim, kappa):
    """Var[mu'x] = A_d'(kappa): at large kappa/d the closed form 1 - A^2 - (d-1)A/kappa cancels
    (relative error 6e-3 at d = 2, kappa = 1e6); checked against mpmath at 50 digits."""
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(50):
        k = mpmath.mpf(kappa)
        a = mpmath.besseli(dim / 2, k) / mpmath.besseli(dim / 2 - 1, k)
        expected = float(1 - a * a - (dim - 1) * a / k)
    loc = torch.zeros(dim, dtype=torch.float64)
    loc[0] = 1.0
    along_mean = VonMisesFisher(loc, torch.tensor(kappa, dtype=torch.float64)).variance[0].item()
    assert along_mean == pytest.approx(expected, rel=1e-9)


def test_variance_keeps_its_gradient_in_the_concentration():
    kappa = torch.tensor(50.0, dtype=torch.float64, requires_grad=True)
    loc = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    torch.autograd.gradcheck(lambda k: VonMisesFisher(loc, k).variance, (kappa,))
