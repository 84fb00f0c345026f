"""Sparse VD's fused additive posterior and log-uniform KL against the reference computation
(``_AdditivePosterior`` followed by the registered KL from ``log alpha``): same values and
gradients to rounding, on every branch of the written-out backward pass."""

import itertools

import pytest
import torch
from torch.distributions import kl_divergence

from pyrozoo.distributions.additive_dropout import AdditiveDropoutNormal, _AdditiveDropout
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.kl import kl_log_uniform_from_log_alpha, summed_kl
from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.guides.variational_dropout import _AdditivePosterior

LOW, HIGH, THRESHOLD = -8.0, 8.0, 3.0
#: which of (mean, log variance, variance, log alpha, KL) the loss reads: every branch of the backward pass
OUTPUT_SUBSETS = [(0, 2, 4), (0, 1, 2, 3, 4), (1,), (3,), (4,), (0,), (2, 3)]


def _parameters(dtype, n=60):
    """Means and log variances that put entries inside the clip, below it, above it (among
    them theta = 0 and tiny thetas) and on both sides of the pruning threshold."""
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(n, generator=g, dtype=torch.float64) * 0.1
    theta[:5] = torch.tensor([0.0, 1e-12, -2e-5, 3.0, -1.5], dtype=torch.float64)
    log_sigma2 = torch.randn(n, generator=g, dtype=torch.float64) * 6 - 8
    return theta.to(dtype).reshape(6, -1).requires_grad_(), log_sigma2.to(dtype).reshape(6, -1).requires_grad_()


def _tolerances(dtype):
    return {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 2e-5, "atol": 1e-5}


def _reference(theta, log_sigma2, train_clip):
    """The pre-fusion computation: posterior, then the registered KL from log alpha."""
    loc, log_scale, variance, log_alpha = _AdditivePosterior.apply(theta, log_sigma2, LOW, HIGH, THRESHOLD, train_clip)
    return loc, 2 * log_scale, variance, log_alpha, kl_log_uniform_from_log_alpha(log_alpha).sum()


@pytest.mark.parametrize("train_clip", [True, False])
def test_values_equal_the_reference(train_clip, dtype):
    theta, log_sigma2 = _parameters(dtype)
    fused = _AdditiveDropout.apply(theta, log_sigma2, LOW, HIGH, THRESHOLD, train_clip, True)
    reference = _reference(theta, log_sigma2, train_clip)
    # log alpha and the mean bitwise (pruning decisions cannot differ), the rest to rounding
    assert torch.equal(fused[3], reference[3])
    assert torch.equal(fused[0], reference[0])
    assert (reference[3] == LOW).any() and (reference[3] == HIGH).any() and ((reference[3] > LOW) & (reference[3] < HIGH)).any()
    for a, b in zip(fused[1:3] + fused[4:], reference[1:3] + reference[4:]):
        torch.testing.assert_close(a, b, **_tolerances(dtype))


@pytest.mark.parametrize("train_clip, outputs", list(itertools.product([True, False], OUTPUT_SUBSETS)))
def test_gradients_equal_the_reference(train_clip, outputs, dtype):
    theta, log_sigma2 = _parameters(dtype)
    g = torch.Generator().manual_seed(1)
    cotangents = [torch.randn(theta.shape, generator=g, dtype=torch.float64).to(dtype) for _ in range(4)] + [torch.tensor(1.7, dtype=dtype)]

    def loss(values):
        return sum((values[i] * cotangents[i]).sum() for i in outputs)

    fused = torch.autograd.grad(loss(_AdditiveDropout.apply(theta, log_sigma2, LOW, HIGH, THRESHOLD, train_clip, True)), (theta, log_sigma2), allow_unused=True)
    reference = torch.autograd.grad(loss(_reference(theta, log_sigma2, train_clip)), (theta, log_sigma2), allow_unused=True)
    for a, b in zip(fused, reference):
        if b is None or not b.any():
            assert a is None or not a.any()
        else:
            # the hand-written chain rule against autograd's; theta's gradient grows as 1/theta near 0
            torch.testing.assert_close(a, b, rtol=_tolerances(dtype)["rtol"], atol=_tolerances(dtype)["atol"] * float(b.abs().max()))


def test_gradcheck_away_from_the_clip_and_threshold_edges():
    theta, log_sigma2 = _parameters(torch.float64)
    la = (log_sigma2 - (theta * theta + 1e-32).log()).detach()
    # finite differences cannot straddle the kinks of the clip and the threshold
    keep = ((la - LOW).abs() > 1e-3) & ((la - HIGH).abs() > 1e-3) & ((la - THRESHOLD).abs() > 1e-3) & (theta.abs() > 1e-3)
    t, s = theta.detach()[keep].requires_grad_(), log_sigma2.detach()[keep].requires_grad_()
    assert torch.autograd.gradcheck(lambda t, s: _AdditiveDropout.apply(t, s, LOW, HIGH, THRESHOLD, True, True), (t, s))


def test_summed_kl_is_the_registered_kl():
    """The KL carried by the posterior is the registered elementwise KL summed; without it
    (``with_kl=False``) the summed rule sums the registered one."""
    theta, log_sigma2 = _parameters(torch.float64)
    prior = LogUniformImproper(theta.shape)
    q = AdditiveDropoutNormal(theta, log_sigma2, LOW, HIGH, THRESHOLD, True, with_kl=True)
    torch.testing.assert_close(summed_kl(q, prior), kl_divergence(q, prior).sum(), rtol=1e-12, atol=0)
    plain = AdditiveDropoutNormal(theta, log_sigma2, LOW, HIGH, THRESHOLD, True, with_kl=False)
    torch.testing.assert_close(summed_kl(plain, prior), summed_kl(q, prior), rtol=1e-12, atol=0)
    # a prior of another shape is left to the broadcasting rule
    assert summed_kl(q, LogUniformImproper((2,) + tuple(theta.shape))) is None


def test_distribution_matches_dropout_normal():
    theta, log_sigma2 = _parameters(torch.float64)
    q = AdditiveDropoutNormal(theta, log_sigma2, LOW, HIGH, THRESHOLD, True)
    loc, log_scale, variance, log_alpha = _AdditivePosterior.apply(theta, log_sigma2, LOW, HIGH, THRESHOLD, True)
    reference = DropoutNormal(loc, log_scale, log_alpha)
    assert isinstance(q, DropoutNormal)
    for name in ("loc", "log_scale", "variance", "scale", "log_alpha"):
        torch.testing.assert_close(getattr(q, name), getattr(reference, name), rtol=1e-12, atol=0)
    value = torch.randn(theta.shape, dtype=torch.float64)
    torch.testing.assert_close(q.log_prob(value), reference.log_prob(value), rtol=1e-12, atol=0)
    expanded = q.expand((3,) + tuple(theta.shape))
    assert type(expanded) is DropoutNormal and expanded.batch_shape == (3,) + tuple(theta.shape)
    torch.testing.assert_close(expanded.variance[1], q.variance)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="one shape"):
        AdditiveDropoutNormal(torch.zeros(3), torch.zeros(4), LOW, HIGH, THRESHOLD, True)
