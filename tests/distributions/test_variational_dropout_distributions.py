"""LogUniformImproper, ARDNormal and DropoutNormal: the distribution contract."""

import math

import numpy as np
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.distributions.ard import ARDNormal
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.log_uniform import LogUniformImproper
from tests.stats import gaussian_variance_rel_tolerance, mean_tolerance

PLACEHOLDERS = [LogUniformImproper, ARDNormal]
BATCH_SHAPES = [(), (3,), (2, 4)]


@pytest.mark.parametrize("cls", PLACEHOLDERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("shape", BATCH_SHAPES, ids=str)
def test_placeholder_shapes_expand_and_sampling(cls, shape):
    d = cls(shape)
    assert d.batch_shape == shape and d.event_shape == ()
    assert not d.has_rsample
    e = d.expand((5,) + shape)
    assert type(e) is cls and e.batch_shape == (5,) + shape
    assert d.to_event(len(shape)).event_shape == shape
    with pytest.raises(NotImplementedError, match="cannot be sampled"):
        d.sample()


@pytest.mark.parametrize("shape", BATCH_SHAPES, ids=str)
def test_log_uniform_log_prob_is_minus_log_abs(shape, device, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn((7,) + shape, generator=g, dtype=dtype).to(device) * 3
    d = LogUniformImproper(shape, validate_args=True)
    expected = -np.log(np.abs(x.cpu().double().numpy()))
    np.testing.assert_allclose(d.log_prob(x).cpu().double().numpy(), expected, rtol=1e-6 if dtype == torch.float32 else 1e-12)
    # density ratios are what an improper prior defines: p(2x) / p(x) = 1/2
    torch.testing.assert_close(d.log_prob(2 * x) - d.log_prob(x), torch.full_like(x, -math.log(2)))


def test_ard_has_no_density_of_its_own():
    with pytest.raises(NotImplementedError, match="empirical-Bayes"):
        ARDNormal((3,)).log_prob(torch.zeros(3))


def _dropout_normal(device, dtype, alpha_shape=(3, 4)):
    g = torch.Generator().manual_seed(1)
    loc = torch.randn(3, 4, generator=g, dtype=dtype).to(device)
    log_alpha = torch.randn(alpha_shape, generator=g, dtype=dtype).to(device)
    log_scale = 0.5 * (log_alpha + (loc * loc).log())
    return DropoutNormal(loc, log_scale, log_alpha, validate_args=True), loc, log_scale, log_alpha


@pytest.mark.parametrize("alpha_shape", [(3, 4), (3, 1), (1, 1), ()], ids=["weight", "neuron", "layer", "scalar"])
def test_dropout_normal_is_a_normal_with_its_log_alpha(alpha_shape, device, dtype):
    d, loc, log_scale, log_alpha = _dropout_normal(device, dtype, alpha_shape)
    assert isinstance(d, dist.Normal)
    assert d.batch_shape == (3, 4) and d.log_alpha.shape == (3, 4)
    torch.testing.assert_close(d.log_alpha, log_alpha.expand(3, 4))
    torch.testing.assert_close(d.variance, (2 * log_scale).exp())
    ref = dist.Normal(loc, log_scale.exp())
    x = ref.sample((5,))
    torch.testing.assert_close(d.log_prob(x), ref.log_prob(x))
    S = 20000
    z = d.rsample((S,))
    assert ((z.mean(0) - loc).abs() <= mean_tolerance(d.variance, S, 12)).all()
    assert ((z.var(0) / d.variance - 1).abs() <= gaussian_variance_rel_tolerance(S, 12)).all()
    e = d.expand((2, 3, 4))
    assert type(e) is DropoutNormal and e.log_alpha.shape == (2, 3, 4)
    torch.testing.assert_close(e.log_alpha[1], d.log_alpha)


def test_dropout_normal_validation(device):
    loc = torch.zeros(3, device=device)
    DropoutNormal(loc, loc, torch.full((3,), math.inf, device=device), validate_args=True)  # zero-mean layers
    with pytest.raises(ValueError):
        DropoutNormal(loc, loc, torch.tensor([0.0, math.nan, 0.0], device=device), validate_args=True)
    with pytest.raises(ValueError, match="broadcast"):
        DropoutNormal(loc, loc, torch.zeros(2, device=device))
