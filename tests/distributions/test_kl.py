"""The KL divergences registered in ``pyrozoo.distributions.kl``.

Every (q, p) pair in ``KL_CASES`` is checked against a Monte Carlo estimate (tolerance from
the sample standard error), against an independent closed form or quadrature, and in its
gradients; the hand-written autograd functions are checked with ``gradcheck`` in float64,
and the summed rule against the sum of the elementwise one.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Optional

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from scipy import stats
from torch.distributions import kl_divergence

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.distributions.kl import _NormalKL, _SummedNormalKL, summed_kl
from tests.stats import mean_tolerance

SHAPE = (3, 4)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _randn(shape, g, scale=1.0):
    return torch.randn(shape, generator=g, dtype=torch.float64) * scale


def _rand(shape, g, low, high):
    return low + (high - low) * torch.rand(shape, generator=g, dtype=torch.float64)


@dataclass
class KLCase:
    """``params()`` -> float64 CPU leaf tensors; ``build(**params)`` -> (q, p).

    ``normal_family``: q and p are Normals, so torch's own Normal-Normal KL is a reference.
    ``summed``: the summed rule must apply (else it must return None).
    """

    name: str
    params: Callable[[], Dict[str, torch.Tensor]]
    build: Callable[..., tuple]
    normal_family: bool = True
    summed: bool = False
    #: which parameters the KL may be differentiated in (prior constants are excluded)
    grad_params: Optional[tuple] = None

    def make(self, device="cpu", dtype=torch.float64, requires_grad=False):
        params = {k: v.to(device=device, dtype=dtype).requires_grad_(requires_grad and k in self.differentiable) for k, v in self.params().items()}
        return params, self.build(**params)

    @property
    def differentiable(self):
        return self.grad_params if self.grad_params is not None else tuple(self.params())

    def __str__(self):
        return self.name


def _q_params(g):
    return {"mq": _randn(SHAPE, g), "lq": _rand(SHAPE, g, -1.5, 0.3)}


def _full_prior():
    g = _gen(1)
    return {**_q_params(g), "mp": _randn(SHAPE, g, 0.5), "sp": _rand(SHAPE, g, 0.5, 2.0)}


def _scalar_prior(loc):
    def params():
        g = _gen(2)
        return {**_q_params(g), "mp": torch.tensor(loc, dtype=torch.float64), "sp": torch.tensor(0.8, dtype=torch.float64)}

    return params


def _broadcast_prior():
    g = _gen(3)
    return {**_q_params(g), "mp": _randn((4,), g, 0.5), "sp": _rand((3, 1), g, 0.5, 2.0)}


def _view_with_offset():
    # the prior's scalars are views into a larger tensor at a non-zero storage offset
    g = _gen(4)
    return {**_q_params(g), "hyper": torch.tensor([9.0, -0.4, 1.3], dtype=torch.float64)}


def _lognormal_gamma():
    g = _gen(5)
    return {"mu": _randn((5,), g, 0.5), "s": _rand((5,), g, 0.2, 0.8), "a": _rand((5,), g, 0.5, 3.0), "r": _rand((5,), g, 0.5, 2.0)}


def _vs_expanded_normal(mq, lq, mp, sp):
    return LogScaleNormal(mq, lq), dist.Normal(mp, sp).expand(SHAPE)


KL_CASES = [
    KLCase(
        "LogScaleNormal||Normal-full",
        _full_prior,
        lambda mq, lq, mp, sp: (LogScaleNormal(mq, lq), dist.Normal(mp, sp)),
    ),
    *[
        KLCase(f"LogScaleNormal||Normal-expanded-{label}", _scalar_prior(loc), _vs_expanded_normal, summed=True, grad_params=("mq", "lq"))
        for label, loc in (("scalar", 0.3), ("zero-loc", 0.0))
    ],
    KLCase(
        "LogScaleNormal||Normal-expanded-scalar-learnable-prior",
        _scalar_prior(0.3),
        _vs_expanded_normal,
        summed=False,  # a prior with gradients is left to the elementwise rule
    ),
    KLCase(
        "LogScaleNormal||Normal-broadcast",
        _broadcast_prior,
        lambda mq, lq, mp, sp: (LogScaleNormal(mq, lq), dist.Normal(mp, sp)),
    ),
    KLCase(
        "LogScaleNormal||Normal-view-offset",
        _view_with_offset,
        lambda mq, lq, hyper: (LogScaleNormal(mq, lq), dist.Normal(hyper[1], hyper[2]).expand(SHAPE)),
        summed=True,
        grad_params=("mq", "lq"),
    ),
    KLCase(
        "LogScaleNormal||LogScaleNormal",
        _full_prior,
        lambda mq, lq, mp, sp: (LogScaleNormal(mq, lq), LogScaleNormal(mp, sp.log())),
    ),
    KLCase(
        "LogNormal||Gamma",
        _lognormal_gamma,
        lambda mu, s, a, r: (dist.LogNormal(mu, s), dist.Gamma(a, r)),
        normal_family=False,
    ),
    KLCase(
        "LogNormal||InverseGamma",
        _lognormal_gamma,
        lambda mu, s, a, r: (dist.LogNormal(mu, s), dist.InverseGamma(a, r)),
        normal_family=False,
    ),
]


@pytest.fixture(params=KL_CASES, ids=str)
def kl_case(request):
    return request.param


def _as_plain_normal(d):
    """torch's own Normal with the same parameters (its registered KL is the reference)."""
    return torch.distributions.Normal(d.loc, d.scale)


def _reference_kl(q, p):
    if isinstance(q, torch.distributions.Normal):
        return kl_divergence(_as_plain_normal(q), _as_plain_normal(p))
    # E_q[log q - log p] by Gauss-Hermite quadrature in z, x = exp(mu + s z), with scipy's
    # densities (scipy's invgamma "scale" is the b of x^(-a-1) exp(-b/x))
    z, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    mu, s = q.loc.detach().double().cpu().numpy(), q.scale.detach().double().cpu().numpy()
    a, r = p.concentration.detach().double().cpu().numpy(), p.rate.detach().double().cpu().numpy()
    x = np.exp(mu[:, None] + s[:, None] * z)
    log_q = stats.lognorm.logpdf(x, s[:, None], scale=np.exp(mu)[:, None])
    if isinstance(p, torch.distributions.Gamma):
        log_p = stats.gamma.logpdf(x, a[:, None], scale=1.0 / r[:, None])
    else:
        log_p = stats.invgamma.logpdf(x, a[:, None], scale=r[:, None])
    return torch.as_tensor(((log_q - log_p) * w).sum(-1))


# -- values -------------------------------------------------------------------------------------


def test_kl_matches_monte_carlo(kl_case, device):
    _, (q, p) = kl_case.make(device)
    kl = kl_divergence(q, p)
    assert kl.shape == torch.broadcast_shapes(q.batch_shape, p.batch_shape)
    S = 20000
    z = q.sample((S,))
    ratio = q.log_prob(z) - p.log_prob(z)
    tol = mean_tolerance(ratio.var(0), S, kl.numel())
    assert (ratio.mean(0) - kl).abs().le(tol).all()
    assert (kl >= 0).all()


def test_kl_matches_independent_reference(kl_case, device, dtype):
    _, (q, p) = kl_case.make(device, dtype)
    kl = kl_divergence(q, p)
    assert kl.dtype == dtype and kl.device.type == device.type
    expected = _reference_kl(q, p).to(kl)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-10}
    torch.testing.assert_close(kl, expected, **tol)


def test_kl_is_zero_for_identical_normals(device, dtype):
    loc = torch.randn(SHAPE, dtype=dtype, device=device)
    log_scale = torch.randn(SHAPE, dtype=dtype, device=device)
    kl = kl_divergence(LogScaleNormal(loc, log_scale), dist.Normal(loc, log_scale.exp()))
    assert kl.abs().max() < (1e-5 if dtype == torch.float32 else 1e-12)


def test_kl_of_independent_wrappers_sums_elementwise_rule(kl_case):
    _, (q, p) = kl_case.make()
    n = len(q.batch_shape)
    total = kl_divergence(q.to_event(n), p.to_event(n))
    torch.testing.assert_close(total, kl_divergence(q, p).sum())


# -- gradients --------------------------------------------------------------------------------


def test_kl_gradients_match_reference(kl_case, device):
    """Gradients of the hand-written rules equal autograd through an independent formula,
    for a constant upstream gradient (``.sum()``, which the rules special-case) and a
    dense random one."""
    if not kl_case.normal_family:
        pytest.skip("no hand-written backward (plain autograd expression)")
    params, (q, p) = kl_case.make(device, requires_grad=True)
    leaves = [params[k] for k in kl_case.differentiable]
    upstreams = [None, torch.rand(torch.broadcast_shapes(q.batch_shape, p.batch_shape), dtype=torch.float64, device=device)]
    for upstream in upstreams:
        def weighted(kl):
            return kl.sum() if upstream is None else (kl * upstream).sum()

        # fresh distributions per graph: their lazily cached variance belongs to one graph
        grads = torch.autograd.grad(weighted(kl_divergence(*kl_case.build(**params))), leaves)
        expected = torch.autograd.grad(weighted(_reference_kl(*kl_case.build(**params))), leaves)
        for name, g, e in zip(kl_case.differentiable, grads, expected):
            assert g.shape == params[name].shape
            torch.testing.assert_close(g, e, msg=lambda m: f"d KL / d {name}: {m}")


def test_kl_gradcheck(kl_case):
    params, _ = kl_case.make(requires_grad=True)
    names = kl_case.differentiable
    fixed = {k: v for k, v in params.items() if k not in names}

    def fn(*args):
        return kl_divergence(*kl_case.build(**fixed, **dict(zip(names, args))))

    assert torch.autograd.gradcheck(fn, tuple(params[k] for k in names))


def test_normal_kl_function_gradcheck():
    """``_NormalKL`` with its five inputs (the variance treated as independent of the log
    scale, as the function's contract states), including broadcast and 0-d inputs."""
    g = _gen(7)
    inputs = [
        (_randn(SHAPE, g), _randn(SHAPE, g), _rand(SHAPE, g, 0.2, 2.0), _randn(SHAPE, g), _rand(SHAPE, g, 0.5, 2.0)),
        (_randn(SHAPE, g), _randn(SHAPE, g), _rand(SHAPE, g, 0.2, 2.0), _randn((4,), g), _rand((3, 1), g, 0.5, 2.0)),
        (_randn(SHAPE, g), _randn(SHAPE, g), _rand(SHAPE, g, 0.2, 2.0), _randn((), g), _rand((), g, 0.5, 2.0)),
    ]
    for args in inputs:
        args = tuple(a.clone().requires_grad_() for a in args)
        assert torch.autograd.gradcheck(_NormalKL.apply, args)


def test_summed_normal_kl_function_gradcheck():
    g = _gen(8)
    sp = torch.tensor(0.7, dtype=torch.float64)
    for mp in (None, torch.tensor(0.4, dtype=torch.float64)):
        args = (_randn(SHAPE, g).requires_grad_(), _randn(SHAPE, g).requires_grad_(), _rand(SHAPE, g, 0.2, 2.0).requires_grad_())
        assert torch.autograd.gradcheck(lambda a, b, c: _SummedNormalKL.apply(mp, sp, a, b, c), args)
        # several posteriors sharing the prior in one call
        more = (_randn((3,), g).requires_grad_(), _randn((3,), g).requires_grad_(), _rand((3,), g, 0.2, 2.0).requires_grad_())
        assert torch.autograd.gradcheck(lambda *t: _SummedNormalKL.apply(mp, sp, *t), args + more)


def test_summed_kl_total_groups_pairs_and_leaves_the_rest():
    """One node per shared prior; its value and gradients equal the per-pair rules; pairs
    without a batched rule come back unchanged, in order."""
    from pyrozoo.distributions.kl import summed_kl_total

    g = _gen(9)
    locs = [_randn(s, g).requires_grad_() for s in [(4, 3), (4,), (2, 4)]]
    logs = [(_randn(s, g) * 0.3).requires_grad_() for s in [(4, 3), (4,), (2, 4)]]
    prior_a = dist.Normal(torch.tensor(0.0, dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64))
    prior_b = dist.Normal(torch.tensor(0.2, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64))
    pairs = [
        (LogScaleNormal(locs[0], logs[0]).to_event(2), prior_a.expand((4, 3)).to_event(2)),
        (LogScaleNormal(locs[1], logs[1]).to_event(1), prior_b.expand((4,)).to_event(1)),
        (LogScaleNormal(locs[2], logs[2]).to_event(2), prior_a.expand((2, 4)).to_event(2)),
        (dist.Normal(locs[1], logs[1].exp()).to_event(1), prior_a.expand((4,)).to_event(1)),
    ]
    total, rest = summed_kl_total(pairs)
    assert rest == pairs[3:]
    expected = sum(kl_divergence(q, p) for q, p in pairs[:3])
    torch.testing.assert_close(total, expected)
    # (the cached variances are shared by both graphs)
    for a, b in zip(torch.autograd.grad(total, locs + logs, retain_graph=True), torch.autograd.grad(expected, locs + logs)):
        torch.testing.assert_close(a, b)


# -- the summed rule ------------------------------------------------------------------------------


def test_summed_kl_equals_sum_of_elementwise(kl_case, device, dtype):
    params, (q, p) = kl_case.make(device, dtype, requires_grad=True)
    n = len(q.batch_shape)
    total = summed_kl(q.to_event(n), p.to_event(n))
    if not kl_case.summed:
        assert total is None
        return
    assert total is not None and total.dim() == 0
    elementwise = kl_divergence(*kl_case.build(**params)).sum()
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(total, elementwise, **tol)
    leaves = [params[k] for k in kl_case.differentiable]
    for g, e in zip(torch.autograd.grad(total, leaves), torch.autograd.grad(elementwise, leaves)):
        torch.testing.assert_close(g, e, **tol)


def test_summed_kl_unexpanded_scalar_prior():
    """A prior with empty batch shape broadcasts over every entry of q."""
    g = _gen(9)
    loc, log_scale = _randn(SHAPE, g).requires_grad_(), _randn(SHAPE, g).requires_grad_()
    q = LogScaleNormal(loc, log_scale)
    p = dist.Normal(torch.tensor(-0.2, dtype=torch.float64), torch.tensor(1.5, dtype=torch.float64))
    total = summed_kl(q.to_event(2), p)
    expected = kl_divergence(_as_plain_normal(q), _as_plain_normal(p)).sum()
    torch.testing.assert_close(total, expected)
    for a, b in zip(torch.autograd.grad(total, [loc, log_scale]), torch.autograd.grad(expected, [loc, log_scale])):
        torch.testing.assert_close(a, b)


def test_summed_kl_without_a_rule_is_none():
    q = dist.Normal(torch.zeros(3), 1.0)
    assert summed_kl(q, dist.Normal(0.0, 1.0)) is None
    assert summed_kl(LogScaleNormal(torch.zeros(3), torch.zeros(3)), dist.Laplace(0.0, 1.0)) is None


def test_prior_with_larger_batch_shape_than_posterior():
    """torch's Normal rule broadcasts q's batch shape against p's; so must the hand-written one
    (here the prior's loc is an expanded scalar, its scale a full tensor)."""
    g = _gen(10)
    q = LogScaleNormal(_randn((4,), g), _randn((4,), g, 0.3))
    p = dist.Normal(0.2, _rand((3, 4), g, 0.5, 2.0))
    torch.testing.assert_close(kl_divergence(q, p), _reference_kl(q, p))
