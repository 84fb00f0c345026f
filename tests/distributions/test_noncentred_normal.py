"""Bayesian compression's non-centred weight posterior and its grouped KL against the
reference computation (a LogScaleNormal ``N(z mu~, z^2 sigma~^2)`` and the registered
elementwise Normal KL): same values and gradients to rounding."""

import pyro.distributions as dist
import pytest
import torch
from torch.distributions import kl_divergence

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.distributions.kl import summed_kl
from pyrozoo.distributions.noncentred_normal import SCALE_FLOOR, GroupScaleNormal, NoncentredNormal

#: (weight shape, group-scale shape): a linear layer's input columns, a convolution's
#: filters, one scale for a whole tensor, and a scale per weight
LAYOUTS = [((5, 7), (1, 7)), ((4, 3, 2, 2), (4, 1, 1, 1)), ((3, 4), ()), ((3, 4), (3, 4)), ((5, 7), (7,))]


def _case(weight_shape, scale_shape, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    z = (torch.randn(scale_shape, generator=g, dtype=dtype) + 0.5).requires_grad_()
    mu = torch.randn(weight_shape, generator=g, dtype=dtype).requires_grad_()
    log_var = (torch.randn(weight_shape, generator=g, dtype=dtype) - 3).requires_grad_()
    return z, mu, log_var


def _reference(z, mu, log_var):
    """The pre-fusion weight posterior of BayesianCompressionGuide."""
    return LogScaleNormal(z * mu, z.abs().clamp_min(SCALE_FLOOR).log() + 0.5 * log_var)


def _prior(shape, scale, kind="normal"):
    """``N(0, scale^2)`` over ``shape``: an expanded Normal, or the compression priors' GroupScaleNormal."""
    if kind == "group-scale":
        return GroupScaleNormal(scale.abs(), shape)
    zero = torch.zeros((), dtype=scale.dtype)
    return dist.Normal(zero, scale.abs()).expand(shape)


@pytest.mark.parametrize("weight_shape, scale_shape", LAYOUTS)
def test_moments_equal_the_reference(weight_shape, scale_shape, dtype):
    z, mu, log_var = _case(weight_shape, scale_shape, dtype)
    q, ref = NoncentredNormal(z, mu, log_var, with_kl=True), _reference(z, mu, log_var)
    tol = {"rtol": 1e-12, "atol": 0} if dtype == torch.float64 else {"rtol": 1e-6, "atol": 0}
    assert torch.equal(q.loc, ref.loc) and torch.equal(q.log_scale, ref.log_scale)
    torch.testing.assert_close(q.variance, ref.variance, **tol)
    assert q.batch_shape == weight_shape


@pytest.mark.parametrize("weight_shape, scale_shape", LAYOUTS)
@pytest.mark.parametrize("same_scale", [True, False], ids=["prior-scale-is-z", "other-prior-scale"])
@pytest.mark.parametrize("prior_kind", ["normal", "group-scale"])
def test_grouped_kl_and_gradients_equal_the_elementwise_kl(weight_shape, scale_shape, same_scale, prior_kind):
    """Summed KL to ``N(0, s^2)`` and its gradients in ``z, mu~, log sigma~^2`` and ``s``,
    for the prior scale ``|z|`` (Bayesian compression) and for another one."""
    z, mu, log_var = _case(weight_shape, scale_shape)
    s = z if same_scale else (z.detach() * 1.7 - 0.2).requires_grad_()
    # the posterior's group scale broadcast to the prior's shape, as the model does
    prior_scale = s.reshape((1,) * (len(weight_shape) - s.dim()) + tuple(s.shape)) if s.dim() < len(weight_shape) else s
    q, ref = NoncentredNormal(z, mu, log_var, with_kl=True), _reference(z, mu, log_var)
    p = _prior(weight_shape, prior_scale, prior_kind)
    fused, reference = summed_kl(q, p), kl_divergence(ref, p).sum()
    torch.testing.assert_close(fused, reference, rtol=1e-12, atol=1e-12)
    inputs = (z, mu, log_var) if same_scale else (z, mu, log_var, s)
    for a, b in zip(torch.autograd.grad(fused, inputs, retain_graph=True), torch.autograd.grad(reference, inputs)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_local_reparameterization_gradients_equal_the_reference():
    """The written-out backward pass of the mean and variance, through a layer's two products."""
    z, mu, log_var = _case((5, 7), (1, 7))
    x = torch.randn(3, 7, dtype=torch.float64)

    def layer(q):
        return (x @ q.loc.T).sum() + (2.0 * (x * x) @ q.variance.T).sin().sum()

    for with_kl in (True, False):
        fused = torch.autograd.grad(layer(NoncentredNormal(z, mu, log_var, with_kl=with_kl)), (z, mu, log_var))
        reference = torch.autograd.grad(layer(_reference(z, mu, log_var)), (z, mu, log_var))
        for a, b in zip(fused, reference):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_grouped_kl_declines_what_it_does_not_cover():
    z, mu, log_var = _case((5, 7), (1, 7))
    q = NoncentredNormal(z, mu, log_var, with_kl=True)
    # a prior with a non-zero mean, a scale that varies within the posterior's groups, or
    # a posterior built without its group sums: the elementwise rule applies
    assert summed_kl(q, dist.Normal(torch.tensor(0.5, dtype=torch.float64), z.abs()).expand((5, 7))) is None
    assert summed_kl(q, _prior((5, 7), torch.rand(5, 7, dtype=torch.float64) + 0.1)) is None
    assert summed_kl(NoncentredNormal(z, mu, log_var), _prior((5, 7), z)) is None
    ref = _reference(z, mu, log_var)
    p = _prior((5, 7), torch.rand(5, 7, dtype=torch.float64) + 0.1)
    torch.testing.assert_close(kl_divergence(q, p), kl_divergence(ref, p), rtol=1e-12, atol=1e-12)


def test_group_scale_normal_is_the_expanded_normal():
    scale = torch.rand(1, 7, dtype=torch.float64) + 0.1
    p, ref = GroupScaleNormal(scale, (5, 7)), _prior((5, 7), scale)
    value = torch.randn(5, 7, dtype=torch.float64)
    assert p.batch_shape == (5, 7) and isinstance(p, dist.Normal)
    assert torch.equal(p.log_prob(value), ref.log_prob(value))
    expanded = p.expand((2, 5, 7))
    assert expanded.batch_shape == (2, 5, 7) and torch.equal(expanded.log_prob(value), ref.log_prob(value).expand(2, 5, 7))


def test_expand_and_bad_shapes():
    z, mu, log_var = _case((5, 7), (1, 7))
    q = NoncentredNormal(z, mu, log_var)
    expanded = q.expand((2, 5, 7))
    assert type(expanded) is LogScaleNormal and expanded.batch_shape == (2, 5, 7)
    torch.testing.assert_close(expanded.variance[0], q.variance)
    with pytest.raises(ValueError, match="one shape"):
        NoncentredNormal(z, mu, log_var[:2])
    with pytest.raises(ValueError, match="does not broadcast"):
        NoncentredNormal(torch.ones(5, 1, 1), mu, log_var)
