"""SemiImplicit: Pyro's distribution contract, the SIVI / DSIVI / SSIVI estimators against
exact marginal densities, the ψ⁰ guard, the fast diagonal-Normal path and exact finite mixtures."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.distributions import (
    ExplicitMixing,
    FiniteMixing,
    ImplicitMixing,
    LinearAutoregressiveNormal,
    SemiImplicit,
    SemiImplicitCacheMiss,
    semi_implicit_role,
    semi_implicit_samples,
)
from pyrozoo.distributions.semi_implicit import _logsumexp_first, _normal_component_log_probs, log_prob_keep
from tests.distributions.semi_implicit_cases import CASE_IDS, CASES, case

N = 3000  # i.i.d. copies per statistical check


def _mean_se(x):
    x = x.detach().double().flatten()
    return float(x.mean()), float(x.std() / math.sqrt(x.numel()))


# -- contract ------------------------------------------------------------------------------


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("sample_shape", [(), (5,), (2, 3)])
def test_shapes(c, sample_shape, device):
    q, _ = c.build(device, torch.float64)
    z = q.rsample(sample_shape)
    assert z.shape == torch.Size(sample_shape) + q.batch_shape + q.event_shape
    assert z.device.type == device.type
    assert q.log_prob(z).shape == torch.Size(sample_shape) + q.batch_shape
    qe = q.expand((4,))
    z = qe.rsample(sample_shape)
    assert z.shape == torch.Size(sample_shape) + (4,) + q.event_shape
    assert qe.log_prob(z).shape == torch.Size(sample_shape) + (4,)
    # model-side estimate at values it did not sample; with leading dims beyond the batch
    with semi_implicit_role("model"):
        assert qe.log_prob(z.detach().clone()).shape == torch.Size(sample_shape) + (4,)


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_sample_moments_match_marginal(c, device):
    """rsample draws from the marginal: sample mean within 5 standard errors of the exact mean."""
    q, exact = c.build(device, torch.float64)
    z = q.sample((20000,))
    ref = exact.sample((200000,))  # exact moments for the mixtures without closed forms
    diff = z.mean(0) - ref.mean(0)
    se = (z.var(0) / z.shape[0] + ref.var(0) / ref.shape[0]).sqrt()
    assert (diff.abs() < 5 * se).all(), (diff, se)
    var_ratio = z.var(0) / ref.var(0)
    assert ((var_ratio - 1).abs() < 10 / math.sqrt(z.shape[0]) * 3).all(), var_ratio


def test_to_event_wrapper_keeps_psi0(device):
    """A batch of semi-implicit distributions reinterpreted as one event (.to_event) passes
    the sampled tensor through, so the guide-side estimate still finds psi0."""
    base = SemiImplicit(ExplicitMixing(dist.Normal(torch.zeros(4, device=device), 1.0)), lambda p: dist.Normal(p, 0.5), (), batch_shape=(4,), num_mixing=3)
    q = base.to_event(1)
    z = q.rsample((2,))
    with semi_implicit_role("guide"):
        lp = q.log_prob(z)
        with pytest.raises(SemiImplicitCacheMiss):
            q.log_prob(z.clone())
    assert lp.shape == (2,) and torch.isfinite(lp).all()


def test_support_and_validation(device):
    q, _ = case("student_t_scale").build(device, torch.float32)
    assert q.support.event_dim == 2
    with pytest.raises(ValueError):
        q.log_prob(torch.zeros(3, 2, device=device))  # wrong event shape
    with pytest.raises(ValueError, match="num_mixing"):
        SemiImplicit(ExplicitMixing(dist.Normal(0.0, 1.0)), lambda p: dist.Normal(p, 1.0), (), num_mixing=-1)
    with pytest.raises(ValueError, match="group_ndims"):
        SemiImplicit(ExplicitMixing(dist.Normal(0.0, 1.0)), lambda p: dist.Normal(p, 1.0), (), group_ndims=1)
    with pytest.raises(ValueError, match="FiniteMixing"):
        SemiImplicit(ExplicitMixing(dist.Normal(0.0, 1.0)), lambda p: dist.Normal(p, 1.0), (), num_mixing=None)
    with pytest.raises(ValueError, match="event_shape"):
        SemiImplicit(ExplicitMixing(dist.Normal(torch.zeros(3), 1.0)), lambda p: dist.Normal(p, 1.0), (3,)).rsample()
    with pytest.raises(NotImplementedError, match="reparameterizable"):
        SemiImplicit(ExplicitMixing(dist.Uniform(0.1, 0.9)), lambda p: dist.Bernoulli(p), ()).rsample()
    with pytest.raises(ValueError, match="expand"):
        SemiImplicit(ExplicitMixing(dist.Normal(torch.zeros(3), 1.0)), lambda p: dist.Normal(p, 1.0), (), batch_shape=(3,)).expand((2, 4))
    with pytest.raises(ValueError, match="at least one"):
        q.log_prob_estimate(q.sample(), 0)
    with pytest.raises(ValueError, match="non-negative"):
        FiniteMixing(torch.zeros(3, 2), probs=torch.tensor([0.5, 0.6, -0.1]))


def test_finite_mixing_learnable_probs_need_exact(device):
    probs = torch.tensor([0.3, 0.7], device=device, requires_grad=True)
    q = SemiImplicit(FiniteMixing(torch.tensor([-1.0, 1.0], device=device), probs=probs), lambda p: dist.Normal(p, 1.0), (), num_mixing=4)
    with pytest.raises(NotImplementedError, match="exact"):
        q.rsample()
    exact = SemiImplicit(FiniteMixing(torch.tensor([-1.0, 1.0], device=device), probs=probs), lambda p: dist.Normal(p, 1.0), (), num_mixing=None)
    exact.log_prob(torch.tensor(0.5, device=device)).backward()
    assert probs.grad is not None and torch.isfinite(probs.grad).all() and probs.grad.abs().sum() > 0


# -- the psi0 guard -------------------------------------------------------------------------


def test_cache_miss_is_an_error_on_the_guide_side(device):
    q, _ = case("gaussian_location").build(device, torch.float32, k=4)
    z = q.rsample()
    with semi_implicit_role("guide"):
        q.log_prob(z)  # the sampled tensor itself: fine
        with pytest.raises(SemiImplicitCacheMiss, match="psi0"):
            q.log_prob(z.clone())
    guarded = SemiImplicit(q.mixing, q.conditional, q.event_shape, num_mixing=4, role="guide")
    guarded.log_prob(guarded.rsample())
    with pytest.raises(SemiImplicitCacheMiss):
        guarded.log_prob(guarded.rsample().clone())


def test_automatic_role_uses_psi0_only_for_own_samples(device):
    """With psi0 (and K = 0) the estimate is exactly log q(z | psi0); elsewhere fresh draws."""
    q, _ = case("gaussian_location").build(device, torch.float64, k=0)
    z = q.rsample((7,))
    psi0 = q.mixing_draw(z)
    assert psi0 is not None and q.mixing_draw(z.clone()) is None
    torch.testing.assert_close(q.log_prob(z), q.conditional(psi0).log_prob(z))
    with pytest.raises(ValueError, match="at least one"):
        q.log_prob(z.clone())  # model side with K = 0


# -- estimators against exact densities -------------------------------------------------------


def _gaps(c, device, dtype, ks, side):
    """mean and s.e. of (estimate - exact log density) at z ~ q for each K."""
    out = []
    for k in ks:
        q, exact = c.build(device, dtype, k=k)
        q = q.expand((N,))
        z = q.rsample()
        with semi_implicit_role(side):
            est = q.log_prob(z if side == "guide" else z.detach().clone())
        out.append(_mean_se(est - exact.log_prob(z)))
    return out


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_guide_side_estimate_is_biased_up_and_converges(c, device):
    """E[log (1/(K+1)) Σ_k q(z|ψ^k)] ≥ E[log q(z)], decreasing in K towards it (SIVI, Eq. 25)."""
    ks = [0, 8, 256]
    gaps = _gaps(c, device, torch.float64, ks, "guide")
    for m, se in gaps:
        assert m > -4 * se
    for (m1, s1), (m2, s2) in zip(gaps, gaps[1:]):
        assert m1 - m2 > 3 * math.hypot(s1, s2), gaps
    assert gaps[-1][0] < 0.25 * gaps[0][0], gaps


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_model_side_estimate_is_biased_down_and_converges(c, device):
    """E[log (1/K) Σ_j p(z|ζ^j)] ≤ log p(z) (Jensen), increasing in K towards it (Eq. 14)."""
    ks = [1, 8, 256]
    gaps = _gaps(c, device, torch.float64, ks, "model")
    for m, se in gaps:
        assert m < 4 * se
    for (m1, s1), (m2, s2) in zip(gaps, gaps[1:]):
        assert m2 - m1 > 3 * math.hypot(s1, s2), gaps
    assert abs(gaps[-1][0]) < 0.25 * abs(gaps[0][0]), gaps


@pytest.mark.parametrize("c", [c for c in CASES if c.reversible], ids=[c.name for c in CASES if c.reversible])
def test_sandwich_estimates(c, device):
    """bound="upper": the guide side without ψ⁰ is biased down, the prior side with ζ⁰ ~ p(ζ|z) up."""
    q, exact = c.build(device, torch.float64, k=4)
    q = q.expand((N,))
    z = q.rsample()
    lq = exact.log_prob(z)
    with semi_implicit_samples(bound="upper"):
        with semi_implicit_role("guide"):
            m, se = _mean_se(q.log_prob(z) - lq)
        assert m < 4 * se
        with semi_implicit_role("model"):
            m, se = _mean_se(q.log_prob(z.detach().clone()) - lq)
        assert m > -4 * se
    no_reverse = SemiImplicit(q.mixing, q.conditional, q.event_shape, num_mixing=2)
    with semi_implicit_samples(bound="upper"), semi_implicit_role("model"), pytest.raises(ValueError, match="reverse_conditional"):
        no_reverse.log_prob(z[0])


@pytest.mark.parametrize("c", [c for c in CASES if c.grouped], ids=[c.name for c in CASES if c.grouped])
def test_structured_estimate_is_tighter(c, device):
    """Theorem 4: per-group estimates bound the entropy more tightly than the joint one.
    Paired: the same z, ψ⁰ and fresh draws, reduced per group or jointly."""
    q, exact = c.build(device, torch.float64, k=8)
    q = q.expand((N,))
    z = q.rsample()
    psi0 = q.mixing_draw(z)
    pyro.set_rng_seed(1)
    structured = q.log_prob_estimate(z, 8, psi0=psi0, structured=True)
    pyro.set_rng_seed(1)
    joint = q.log_prob_estimate(z, 8, psi0=psi0, structured=False)
    m, se = _mean_se(joint - structured)  # both overestimate E log q; the structured one less
    assert m > 4 * se
    m, se = _mean_se(structured - exact.log_prob(z))
    assert m > -4 * se


def test_share_mixing_keeps_the_estimate_unbiased(device):
    """Shared fresh draws across copies: per value, the same expectation as independent ones
    (replicates are independent across calls, so their spread gives the standard error)."""
    q, exact = case("gaussian_location").build(device, torch.float64, k=4)
    shared = SemiImplicit(q.mixing, q.conditional, q.event_shape, num_mixing=4, share_mixing=True)
    z = exact.sample((5,))
    reps = {name: torch.stack([d.expand((5,)).log_prob(z) for _ in range(400)]) for name, d in (("own", q), ("shared", shared))}
    diff = reps["own"].mean(0) - reps["shared"].mean(0)
    se = ((reps["own"].var(0) + reps["shared"].var(0)) / 400).sqrt()
    assert (diff.abs() < 4.5 * se).all(), (diff, se)
    # shared: one set of draws, so copies at equal values give equal estimates
    same = shared.expand((3,)).log_prob(z[:1].expand(3, -1))
    assert torch.equal(same, same[:1].expand(3))


# -- fast path, exact enumeration, log-sum-exp ------------------------------------------------


@pytest.mark.parametrize("keep", [0, 1])
def test_fast_normal_path_matches_elementwise(keep, device, dtype):
    g = torch.Generator().manual_seed(0)
    C, M, b, e = 7, 11, 3, 5
    loc = torch.randn(C, 1, b, e, generator=g).to(device, dtype) * 2
    scale = torch.rand(C, 1, b, e, generator=g).to(device, dtype) + 0.1
    value = torch.randn(M, b, e, generator=g).to(device, dtype) * 2
    cond = dist.Normal(loc, scale).to_event(2)
    fast = _normal_component_log_probs(cond, value, keep)
    slow = log_prob_keep(cond, value, keep)
    tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-9)
    torch.testing.assert_close(fast, slow, **tol)


def test_exact_finite_mixture(device, dtype):
    q, exact = case("finite_mixture").build(device, dtype)
    q = SemiImplicit(q.mixing, q.conditional, q.event_shape, num_mixing=None, chunk_size=3)
    z = exact.sample((50,))
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(q.log_prob(z), exact.log_prob(z), **tol)
    with semi_implicit_samples(guide=1, model=1):  # K overrides do not apply to exact mixtures
        torch.testing.assert_close(q.expand((50,)).log_prob(z), exact.log_prob(z), **tol)


def test_logsumexp_first_matches_torch(device, dtype):
    x = torch.randn(6, 5, device=device, dtype=dtype) * 200
    x[:, 0] = -math.inf
    torch.testing.assert_close(_logsumexp_first(x), torch.logsumexp(x, 0))
    torch.testing.assert_close(_logsumexp_first(x.T.contiguous().T), torch.logsumexp(x, 0))
    x.requires_grad_(True)
    _logsumexp_first(x).sum().backward()
    torch.testing.assert_close(x.grad[:, 1:], torch.softmax(x.detach()[:, 1:], 0))
    assert torch.equal(x.grad[:, 0], torch.zeros_like(x.grad[:, 0]))  # an all -inf column: no NaN gradient


# -- gradients ------------------------------------------------------------------------------


def test_gradients_reach_implicit_mixing_and_finite_atoms(device):
    net = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)
    q = SemiImplicit(ImplicitMixing(net, (2,)), lambda psi: dist.Normal(psi, 0.3).to_event(1), (3,), num_mixing=5)
    atoms = torch.randn(6, 3, device=device, requires_grad=True)
    p = SemiImplicit(FiniteMixing(atoms), lambda psi: dist.Normal(psi, 1.0).to_event(1), (3,), num_mixing=5)
    z = q.expand((10,)).rsample()
    loss = q.expand((10,)).log_prob(z).sum()  # a different instance: needs the sampling one
    with pytest.raises(SemiImplicitCacheMiss):
        with semi_implicit_role("guide"):
            q.expand((10,)).log_prob(z)
    qe = q.expand((10,))
    z = qe.rsample()
    with semi_implicit_role("guide"):
        loss = qe.log_prob(z).sum()
    with semi_implicit_role("model"):
        loss = loss - p.log_prob(z).sum()
    loss.backward()
    for prm in list(net.parameters()) + [atoms]:
        assert prm.grad is not None and torch.isfinite(prm.grad).all() and prm.grad.abs().sum() > 0


# -- LinearAutoregressiveNormal ------------------------------------------------------------


def test_linear_autoregressive_normal(device, dtype):
    g = torch.Generator().manual_seed(0)
    d = 5
    w = torch.randn(d, d, generator=g).tril(-1).to(device, dtype)
    shift = torch.randn(3, d, generator=g).to(device, dtype)
    scale = (torch.rand(d, generator=g) + 0.2).to(device, dtype)
    ar = LinearAutoregressiveNormal(shift, w, scale)
    mvn = dist.MultivariateNormal(ar.mean, scale_tril=ar.scale_tril)
    z = mvn.sample((4,))
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else {}
    torch.testing.assert_close(ar.log_prob(z), mvn.log_prob(z), **tol)
    torch.testing.assert_close(ar.log_prob_factors(z).sum(-1), ar.log_prob(z))
    torch.testing.assert_close(ar.entropy(), mvn.entropy(), **tol)
    x = ar.rsample((20000,))
    assert ((x.mean(0) - ar.mean).abs() < 5 * scale.max() * 10 / math.sqrt(20000)).all()
    with pytest.raises(ValueError):
        LinearAutoregressiveNormal(shift, w + torch.eye(d, device=device, dtype=dtype), scale, validate_args=True)
