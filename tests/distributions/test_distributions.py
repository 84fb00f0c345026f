"""Generic tests over every distribution registered in ``tests/distributions/conftest.py``,
plus a few family-specific properties."""

import math

import numpy as np
import pyro.distributions as dist
import pytest
import torch
from pyro.distributions.testing.gof import auto_goodness_of_fit
from scipy import integrate

from pyrozoo.distributions import LogScaleNormal, ScaleMixtureNormal
from pyrozoo.distributions.util import distribution_to, sum_rightmost
from tests.stats import mean_tolerance

#: chance that one goodness-of-fit check of a correct sampler fails (per batch element)
GOF_FAILURE_RATE = 1e-4


def _skip_unless_sampleable(example):
    if example.fixture.improper or not example.fixture.sampleable:
        pytest.skip(f"{example.fixture.name} cannot be sampled")


def _moments(d):
    """``{"mean": ..., "variance": ...}`` for those the family defines (improper ones may not)."""
    out = {}
    for stat in ("mean", "variance"):
        try:
            out[stat] = getattr(d, stat)
        except NotImplementedError:
            pass
    return out


def _some_values(d, example, sample_shape, device="cpu", dtype=torch.float64):
    """Points in the support: samples, else the registered test values, else the mean."""
    shape = torch.Size(sample_shape) + d.batch_shape + d.event_shape
    if example.fixture.sampleable and not example.fixture.improper:
        return d.sample(sample_shape)
    if example.fixture.test_values is not None:
        values = torch.as_tensor(example.fixture.test_values(example.numpy_params(d)), dtype=dtype, device=device)
        return values[0].expand(shape)
    return d.mean.expand(shape)


def _tol(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}


# -- shapes, devices, dtypes ---------------------------------------------------------------


def test_batch_and_event_shapes(dist_example, device, dtype):
    d = dist_example.build(device, dtype)
    batch_shape = dist_example.fixture.expected_batch_shape(dist_example.params)
    assert d.batch_shape == batch_shape
    for value in _moments(d).values():
        assert value.shape == batch_shape + d.event_shape
        assert value.dtype == dtype and value.device.type == device.type
    x = _some_values(d, dist_example, (4, 2), device, dtype)
    assert x.shape == (4, 2) + batch_shape + d.event_shape
    assert x.dtype == dtype and x.device.type == device.type
    assert bool(d.support.check(x).all())
    lp = d.log_prob(x)
    assert lp.shape == (4, 2) + batch_shape
    assert lp.dtype == dtype and lp.device.type == device.type


def test_rsample_is_differentiable(dist_example):
    if not dist_example.build().has_rsample:
        pytest.skip("no reparameterised sampler")
    params = {k: torch.as_tensor(v, dtype=torch.float64).requires_grad_() for k, v in dist_example.params.items()}
    d = dist_example.fixture.dist_class(**params)
    d.rsample((3,)).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in params.values())
    with torch.no_grad():
        assert not d.sample((3,)).requires_grad


def test_expand(dist_example, device):
    d = dist_example.build(device, validate_args=True)
    new_shape = (5,) + d.batch_shape
    e = d.expand(new_shape)
    assert type(e) is type(d)
    assert e.batch_shape == new_shape and e.event_shape == d.event_shape
    for stat, value in _moments(d).items():
        torch.testing.assert_close(getattr(e, stat), value.expand(new_shape + d.event_shape))
    x = _some_values(d, dist_example, (5,), device)
    torch.testing.assert_close(e.log_prob(x), d.log_prob(x))
    if dist_example.fixture.sampleable and not dist_example.fixture.improper:
        assert e.sample((2,)).shape == (2,) + new_shape + d.event_shape
    # the expanded distribution keeps validating its arguments
    assert e._validate_args
    with pytest.raises(ValueError):
        e.log_prob(torch.full(new_shape + d.event_shape, float("nan"), dtype=x.dtype, device=device))
    # a shape the batch shape cannot broadcast to is an error
    if len(d.batch_shape):
        bad = d.batch_shape[:-1] + (d.batch_shape[-1] + 1,)
        with pytest.raises((ValueError, RuntimeError)):
            d.expand(bad)


def test_invalid_parameters_raise(dist_invalid_case):
    fixture, params = dist_invalid_case
    with pytest.raises(ValueError):
        fixture.build(params, validate_args=True)
    fixture.build(params, validate_args=False)  # the checks are what rejects them


def test_distribution_to(dist_example, device, dtype):
    """``distribution_to`` rebuilds the family on another device/dtype with the same density."""
    d = dist_example.build("cpu", torch.float64)
    if not d.arg_constraints:
        pytest.skip("no parameters to move")
    wrapped = torch.distributions.Independent(d, len(d.batch_shape))
    moved = distribution_to(wrapped, device, dtype)
    base = moved.base_dist if len(d.batch_shape) else moved
    assert isinstance(moved, torch.distributions.Independent) == bool(len(d.batch_shape))
    assert type(base) is type(d)
    assert moved.event_shape == d.batch_shape + d.event_shape
    for name in d.arg_constraints:
        value = getattr(base, name)
        assert value.dtype == dtype and value.device.type == device.type
    x = _some_values(d, dist_example, ())
    expected = sum_rightmost(d.log_prob(x), len(d.batch_shape))
    torch.testing.assert_close(moved.log_prob(x.to(device, dtype)).double().cpu(), expected, **_tol(dtype))


# -- the density against independent references --------------------------------------------


def test_log_prob_matches_reference(dist_example, dtype):
    fixture = dist_example.fixture
    if fixture.reference_log_prob is None:
        pytest.skip("no independent reference density")
    d = dist_example.build(dtype=dtype)
    # reference evaluated at the parameters exactly as the distribution holds them
    params = dist_example.numpy_params(d)
    values = [d.sample((50,))] if fixture.sampleable and not fixture.improper else []
    if fixture.test_values is not None:
        values.append(torch.as_tensor(fixture.test_values(params), dtype=dtype))
    x = torch.cat(values)
    expected = fixture.reference_log_prob(params, x.double().numpy())
    actual = d.log_prob(x)
    assert torch.isfinite(actual).all()
    torch.testing.assert_close(actual.double(), torch.as_tensor(expected), **_tol(dtype))


_BREAKS = [0.0] + [10.0**k for k in range(-5, 4)]


def _integrate(density, support):
    """``int density`` over the support, split at log-spaced points so that narrow and wide
    features are both resolved."""
    pieces = _BREAKS + [math.inf]
    total = 0.0
    signs = (1.0, -1.0) if support is torch.distributions.constraints.real else (1.0,)
    for sign in signs:
        for a, b in zip(pieces[:-1], pieces[1:]):
            value, _ = integrate.quad(lambda t: density(sign * t), a, b, limit=200, epsabs=1e-13)
            total += value
    return total


def test_density_integrates_to_one(dist_example):
    fixture, d = dist_example.fixture, dist_example.build()
    if fixture.improper or not fixture.integrable or d.event_shape != ():
        pytest.skip("not a normalisable univariate density")
    support = d.support
    if support not in (torch.distributions.constraints.real, torch.distributions.constraints.positive):
        pytest.skip(f"numerical integration over {support} not set up")
    flat = d.expand(d.batch_shape) if d.batch_shape else d.expand((1,))
    for i in range(flat.batch_shape.numel()):
        index = np.unravel_index(i, tuple(flat.batch_shape))

        def density(t, index=index):
            x = torch.full(tuple(flat.batch_shape), t, dtype=torch.float64)
            return float(flat.log_prob(x)[index].exp())

        assert _integrate(density, support) == pytest.approx(1.0, abs=1e-7)


# -- sampling --------------------------------------------------------------------------------


def test_sample_mean_and_variance(dist_example, device):
    _skip_unless_sampleable(dist_example)
    d = dist_example.build(device)
    S = dist_example.fixture.moment_samples
    x = d.sample((S,))
    k = d.mean.numel()
    mean, variance = d.mean, d.variance
    assert (x.mean(0) - mean).abs().le(mean_tolerance(variance, S, 2 * k)).all()
    # E[(x - mean)^2] = variance: a sample mean whose own spread is estimated from the draws,
    # valid for heavy-tailed (scale-mixture) families where the Gaussian formula is not
    sq = (x - mean) ** 2
    assert (sq.mean(0) - variance).abs().le(mean_tolerance(sq.var(0), S, 2 * k)).all()


def test_goodness_of_fit(dist_example):
    _skip_unless_sampleable(dist_example)
    d = dist_example.build()
    S = dist_example.fixture.moment_samples
    x = d.sample((S,))
    probs = d.log_prob(x).exp()
    flat_x = x.reshape((S, -1) + tuple(d.event_shape))
    flat_p = probs.reshape(S, -1)
    for i in range(flat_p.shape[1]):
        gof = auto_goodness_of_fit(flat_x[:, i], flat_p[:, i])
        assert gof > GOF_FAILURE_RATE, f"batch element {i}: goodness of fit p-value {gof}"


def test_entropy_matches_monte_carlo(dist_example):
    _skip_unless_sampleable(dist_example)
    d = dist_example.build()
    try:
        entropy = d.entropy()
    except NotImplementedError:
        pytest.skip(f"{dist_example.fixture.name} has no entropy()")
    S = dist_example.fixture.moment_samples
    neg_lp = -d.log_prob(d.sample((S,)))
    assert entropy.shape == d.batch_shape
    tol = mean_tolerance(neg_lp.var(0), S, entropy.numel())
    assert (neg_lp.mean(0) - entropy).abs().le(tol).all()


# -- family-specific ---------------------------------------------------------------------------


def test_log_scale_normal_is_a_normal_with_exp_scale(device, dtype):
    loc = torch.tensor([0.3, -1.0, 2.0], dtype=dtype, device=device)
    log_scale = torch.tensor([-3.0, 0.0, 1.2], dtype=dtype, device=device)
    d = LogScaleNormal(loc, log_scale)
    ref = torch.distributions.Normal(loc, log_scale.exp())
    assert isinstance(d, dist.Normal)
    x = torch.tensor([0.1, 2.5, -4.0], dtype=dtype, device=device)
    for method, args in [("log_prob", (x,)), ("cdf", (x,)), ("icdf", (torch.full_like(x, 0.3),)), ("entropy", ())]:
        torch.testing.assert_close(getattr(d, method)(*args), getattr(ref, method)(*args))
    for attr in ("scale", "stddev", "variance", "mean"):
        torch.testing.assert_close(getattr(d, attr), getattr(ref, attr))


def test_log_scale_normal_entropy_uses_log_scale(dtype):
    """The entropy comes from log_scale directly: finite and exact even where
    ``exp(log_scale)`` underflows to zero (log(scale) would be -inf)."""
    d = LogScaleNormal(torch.tensor(0.0, dtype=dtype), torch.tensor(-200.0, dtype=dtype))
    assert d.scale.item() == 0.0 or dtype == torch.float64
    assert d.entropy().item() == pytest.approx(-200.0 + 0.5 * math.log(2 * math.pi * math.e), rel=1e-6)
    narrow = LogScaleNormal(torch.tensor(1.0, dtype=dtype), torch.tensor(-30.0, dtype=dtype))
    assert narrow.log_prob(torch.tensor(1.0, dtype=dtype)).item() == pytest.approx(30.0 - 0.5 * math.log(2 * math.pi), rel=1e-6)


def test_scale_mixture_mode_is_zero():
    d = ScaleMixtureNormal(torch.tensor([0.3, 0.8]), torch.tensor([1.0, 2.0]), torch.tensor([0.1, 0.01]))
    grid = torch.linspace(-5, 5, 1001).unsqueeze(-1).expand(-1, 2)
    assert torch.equal(d.mode, torch.zeros(2))
    assert (d.log_prob(d.mode) >= d.log_prob(grid)).all()


def test_scale_mixture_is_symmetric_and_reduces_to_a_normal():
    d = ScaleMixtureNormal(torch.tensor(0.3), torch.tensor(1.0), torch.tensor(0.2))
    x = torch.linspace(0.01, 4, 50)
    torch.testing.assert_close(d.log_prob(x), d.log_prob(-x))
    same = ScaleMixtureNormal(torch.tensor(0.4), torch.tensor(0.7), torch.tensor(0.7))
    torch.testing.assert_close(same.log_prob(x), torch.distributions.Normal(0.0, 0.7).log_prob(x))


def test_scale_mixture_float32_tails_do_not_underflow():
    """Blitz's ``-inf in log_prior``: a tiny sigma2 must not make log_prob -inf in float32."""
    d = ScaleMixtureNormal(0.5, 1.0, math.exp(-8))
    x = torch.tensor([1e-6, 0.5, 5.0, 40.0], dtype=torch.float32)
    assert d.log_prob(x).dtype == torch.float32
    assert torch.isfinite(d.log_prob(x)).all()


@pytest.mark.parametrize(
    "d",
    [dist.LogNormal(0.5, 0.3), dist.InverseGamma(3.0, 2.0), dist.HalfCauchy(1.5), dist.HalfNormal(0.7)],
    ids=["LogNormal", "InverseGamma", "HalfCauchy", "HalfNormal"],
)
def test_distribution_to_transformed_families(d):
    moved = distribution_to(d, "cpu", torch.float64)
    x = torch.tensor([0.3, 1.0, 2.5], dtype=torch.float64)
    assert type(moved) is type(d)
    torch.testing.assert_close(moved.log_prob(x), d.log_prob(x.float()).double(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("sigma2", [math.exp(-6), math.exp(-8), 0.3])
def test_scale_mixture_log_prob_keeps_the_arithmetic_of_the_committed_results(sigma2):
    """Bitwise the values and gradients of ``logaddexp(c1 - 0.5 v^2/s1^2, c2 - 0.5 v^2/s2^2)`` with
    one shared square (the form the committed Bayes by Backprop tables were computed with),
    while extreme scales no longer give NaN."""
    d = ScaleMixtureNormal(0.5, 1.0, sigma2)
    v = (torch.randn(10000, generator=torch.Generator().manual_seed(0)) * 0.05).requires_grad_()
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    c1 = torch.log(d.pi) - torch.log(d.sigma1) - half_log_2pi
    c2 = torch.log1p(-d.pi) - torch.log(d.sigma2) - half_log_2pi
    sq = v * v
    reference = torch.logaddexp(c1 - 0.5 * sq / d.sigma1**2, c2 - 0.5 * sq / d.sigma2**2)
    value = d.log_prob(v)
    assert torch.equal(value, reference)
    assert torch.equal(torch.autograd.grad(value.sum(), v)[0], torch.autograd.grad(reference.sum(), v)[0])
    extreme = ScaleMixtureNormal(0.5, 1e-30, 1e30).log_prob(torch.tensor([0.0, 1e-31, 1e29]))
    assert torch.isfinite(extreme).all()
