"""The summed Gaussian KL that also provides the posteriors' variances (issue 26) against
``_SummedNormalKL`` on autograd's ``(2 log_scale).exp()``."""

import pyro.distributions as dist
import pytest
import torch

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.distributions.kl import _SummedNormalKL, _SummedNormalKLWithVariances, summed_kl_total

# (name, posterior shapes, prior loc, prior scale)
CASES = [
    ("one-site", [(4, 3)], 0.0, 1.0),
    ("layers", [(4, 3), (4,), (2, 4), (2,)], 0.0, 0.7),
    ("nonzero-prior-mean", [(5,), (3, 2)], 0.4, 1.3),
]


def _posteriors(shapes, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for shape in shapes:
        loc = torch.randn(shape, generator=gen, dtype=dtype).requires_grad_()
        log_scale = (torch.rand(shape, generator=gen, dtype=dtype) * 2 - 3).requires_grad_()
        out.append((loc, log_scale))
    return out


def _prior(mp, sp, dtype):
    return None if mp == 0.0 else torch.tensor(mp, dtype=dtype), torch.tensor(sp, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,shapes,mp,sp", CASES, ids=[c[0] for c in CASES])
def test_values_equal_and_gradients_agree(name, shapes, mp, sp, dtype):
    """KL and variances bit for bit; gradients of a loss that uses the KL and the variances
    (as the local reparameterization does) equal autograd's to rounding."""
    sites = _posteriors(shapes, dtype)
    prior = _prior(mp, sp, dtype)
    flat = [t for site in sites for t in site]
    coeffs = [torch.linspace(-1.0, 1.0, loc.numel(), dtype=dtype).reshape(loc.shape) for loc, _ in sites]

    kl, *variances = _SummedNormalKLWithVariances.apply(*prior, *flat)
    ref_variances = [(2 * log_scale).exp() for _, log_scale in sites]
    ref_kl = _SummedNormalKL.apply(*prior, *(t for (loc, ls), v in zip(sites, ref_variances) for t in (loc, ls, v)))
    assert torch.equal(kl, ref_kl)
    for v, r in zip(variances, ref_variances):
        assert torch.equal(v, r)

    def loss(kl, variances):
        return 0.3 * kl + sum((c * v).sum() for c, v in zip(coeffs, variances))

    grads = torch.autograd.grad(loss(kl, variances), flat)
    ref_grads = torch.autograd.grad(loss(ref_kl, ref_variances), flat)
    eps = torch.finfo(dtype).eps
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=8 * eps, atol=8 * eps * r.abs().max().item())


def test_gradcheck_with_used_and_unused_variances():
    """The written-out backward is the derivative, whether a variance reaches the loss or not
    (an unused variance's gradient is ``None``, not a zero tensor)."""
    sites = _posteriors([(3, 2), (3,)], torch.float64)
    flat = tuple(t for site in sites for t in site)
    mp, sp = torch.tensor(0.2, dtype=torch.float64), torch.tensor(0.9, dtype=torch.float64)

    def used(*t):
        kl, v1, v2 = _SummedNormalKLWithVariances.apply(mp, sp, *t)
        return kl + (v1 * torch.arange(6.0, dtype=torch.float64).reshape(3, 2)).sum() - v2.square().sum()

    def unused(*t):
        return _SummedNormalKLWithVariances.apply(mp, sp, *t)[0]

    assert torch.autograd.gradcheck(used, flat)
    assert torch.autograd.gradcheck(unused, flat)


def test_summed_kl_total_provides_the_variances():
    """With ``provide_variances``, each posterior's ``variance`` is the node's output (cached on
    it), the total equals the plain summed KL, and pairs without a rule are left over."""
    sites = _posteriors([(4, 3), (4,)], torch.float32)
    qs = [LogScaleNormal(loc, ls).to_event(loc.dim()) for loc, ls in sites]
    prior = dist.Normal(torch.zeros(()), 1.0)
    other = (LogScaleNormal(torch.zeros(2), torch.zeros(2)), dist.Laplace(0.0, 1.0).expand([2]))
    pairs = [(q, prior.expand(q.batch_shape + q.event_shape).to_event(q.event_dim)) for q in qs] + [other]
    total, rest = summed_kl_total(pairs, provide_variances=True)
    assert rest == [other]
    for q, (_, ls) in zip(qs, sites):
        cached = q.base_dist.__dict__["variance"]
        assert cached.grad_fn is not None and "WithVariances" in type(cached.grad_fn).__name__
        assert q.base_dist.variance is cached
        assert torch.equal(cached, (2 * ls).exp())
    ref_qs = [LogScaleNormal(loc, ls).to_event(loc.dim()) for loc, ls in sites]
    ref_total, _ = summed_kl_total([(q, p) for q, (_, p) in zip(ref_qs, pairs)])
    assert torch.equal(total, ref_total)
