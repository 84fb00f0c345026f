"""SSGLExpectedLogDensity: with kappa at its Eq. 13 values it is the rho-weighted mixture of the
Laplace and Gaussian log-densities (Deng et al. 2019, Eq. 10), checked against scipy; shapes
broadcast and expand like a torch distribution's."""

import numpy as np
import pytest
import torch
from scipy import stats

from pyrozoo.distributions import SSGLExpectedLogDensity

# (v0, v1, sigma): the regression setting (Laplace spike) and the CIFAR one (Gaussian spike)
CASES = [(0.01, 10.0, 2.0), (0.1, 10.0, 1.0), (0.005, 1e-5, 1.0)]


@pytest.mark.parametrize("v0, v1, sigma", CASES)
def test_log_prob_is_the_expected_complete_data_log_density(v0, v1, sigma, device, dtype):
    rho = np.array([0.0, 0.2, 0.5, 0.9, 1.0])
    beta = np.array([-0.3, 0.004, 0.0, 1.5, -2.0])
    kappa0, kappa1 = (1 - rho) / v0, rho / v1
    as_tensor = lambda a: torch.as_tensor(a, dtype=dtype, device=device)
    d = SSGLExpectedLogDensity(as_tensor(kappa0), as_tensor(kappa1), as_tensor(rho), as_tensor(sigma), v0, v1)
    expected = (1 - rho) * stats.laplace.logpdf(beta, scale=sigma * v0) + rho * stats.norm.logpdf(beta, scale=sigma * np.sqrt(v1))
    rtol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(d.log_prob(as_tensor(beta)).cpu().double().numpy(), expected, rtol=rtol)


def test_batch_shape_broadcasts_and_expands(device):
    kappa0 = torch.ones(2, 3, device=device)
    rho = torch.full((1, 3), 0.5, device=device)
    sigma = torch.tensor(1.0, device=device)
    same = SSGLExpectedLogDensity(kappa0, kappa0, kappa0 * 0.5, sigma, 0.1, 10.0)
    assert same.batch_shape == (2, 3)
    mixed = SSGLExpectedLogDensity(kappa0, torch.ones(3, device=device), rho, sigma, 0.1, 10.0)
    assert mixed.batch_shape == (2, 3) and mixed.log_prob(torch.zeros(2, 3, device=device)).shape == (2, 3)
    expanded = mixed.expand((4, 2, 3))
    assert expanded.batch_shape == (4, 2, 3)
    assert torch.equal(expanded.log_prob(torch.ones(4, 2, 3, device=device))[1], mixed.log_prob(torch.ones(2, 3, device=device)))
    with pytest.raises(ValueError, match="broadcast"):
        SSGLExpectedLogDensity(kappa0, torch.ones(4, device=device), rho, sigma, 0.1, 10.0)
