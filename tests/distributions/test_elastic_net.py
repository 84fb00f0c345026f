"""ElasticNet: a normalised density (against quadrature), its Laplace and Gaussian limits,
exact samples (goodness of fit), finiteness in float32 and bad parameters."""

import math

import pytest
import torch
import numpy as np
from scipy import integrate, stats

from pyrozoo.distributions import ElasticNet

# (l1, l2): Laplace only, Gaussian only, balanced, Laplace-dominated, Gaussian-dominated
CASES = [(1.0, 0.0), (0.0, 2.0), (3.0, 0.5), (100.0, 0.1), (0.01, 1e6), (200.0, 1e5)]


@pytest.mark.parametrize("l1, l2", CASES)
def test_density_integrates_to_one(l1, l2):
    d = ElasticNet(torch.tensor(l1, dtype=torch.float64), torch.tensor(l2, dtype=torch.float64))
    width = 60.0 / max(l1, math.sqrt(l2))
    total, err = integrate.quad(lambda x: math.exp(float(d.log_prob(torch.tensor(x, dtype=torch.float64)))), -width, width, points=[0.0], limit=200)
    assert total == pytest.approx(1.0, abs=1e-7 + err)


def test_limits_are_laplace_and_normal(dtype):
    x = torch.linspace(-5, 5, 101, dtype=dtype)
    laplace = ElasticNet(torch.tensor(1 / 0.7, dtype=dtype), torch.tensor(0.0, dtype=dtype))
    normal = ElasticNet(torch.tensor(0.0, dtype=dtype), torch.tensor(1 / 0.3, dtype=dtype))
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    zero = torch.zeros((), dtype=dtype)
    assert torch.allclose(laplace.log_prob(x), torch.distributions.Laplace(zero, zero + 0.7).log_prob(x), rtol=rtol)
    assert torch.allclose(normal.log_prob(x), torch.distributions.Normal(zero, zero + math.sqrt(0.3)).log_prob(x), rtol=rtol)


def test_log_prob_is_finite_in_float32_for_extreme_rates():
    d = ElasticNet(torch.tensor([2e5, 1e-3, 0.0]), torch.tensor([1e5, 1e9, 1e-6]))
    assert torch.isfinite(d.log_prob(torch.tensor([0.5, 1e-3, 3.0]))).all()
    assert torch.isfinite(d.log_normalizer()).all()


@pytest.mark.parametrize("l1, l2", CASES)
def test_samples_follow_the_density(l1, l2, device):
    """Kolmogorov-Smirnov against the CDF obtained by quadrature of the density."""
    torch.manual_seed(0)
    d64 = ElasticNet(torch.tensor(l1, dtype=torch.float64), torch.tensor(l2, dtype=torch.float64))
    samples = ElasticNet(torch.tensor(l1, device=device), torch.tensor(l2, device=device)).sample((4000,)).cpu().double()
    width = 60.0 / max(l1, math.sqrt(l2))
    grid = torch.linspace(-width, width, 200001, dtype=torch.float64)
    density = d64.log_prob(grid).exp()
    cdf = torch.cumulative_trapezoid(density, grid)
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), cdf]) / cdf[-1]

    result = stats.kstest(samples.numpy(), lambda x: np.interp(x, grid.numpy(), cdf.numpy()))
    assert result.pvalue > 1e-6


def test_sample_shape_and_batch(device):
    d = ElasticNet(torch.tensor([1.0, 2.0], device=device), torch.tensor([0.5, 0.0], device=device))
    assert d.sample((7,)).shape == (7, 2)
    assert d.expand((3, 2)).sample().shape == (3, 2)
    assert d.log_prob(torch.zeros(3, 2, device=device)).shape == (3, 2)


@pytest.mark.parametrize("l1, l2", [(-1.0, 1.0), (1.0, -1.0), (0.0, 0.0), (float("nan"), 1.0)])
def test_invalid_parameters_raise(l1, l2):
    with pytest.raises(ValueError):
        ElasticNet(torch.tensor(l1), torch.tensor(l2), validate_args=True)


def test_mean_is_zero():
    assert torch.equal(ElasticNet(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])).mean, torch.zeros(2))
