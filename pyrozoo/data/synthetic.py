"""Synthetic data with known answers, for tests and demonstrations."""

from dataclasses import dataclass

import torch


@dataclass
class LinearRegressionProblem:
    """``y = X w + noise`` with ``w ~ N(0, prior_scale^2 I)``: the exact posterior is Gaussian."""

    x: torch.Tensor
    y: torch.Tensor
    true_weight: torch.Tensor
    noise_scale: float
    prior_scale: float

    def posterior(self):
        """Exact posterior mean and covariance of ``w`` (Bishop 2006, eqs. 3.53-3.54)."""
        x = self.x
        precision = x.T @ x / self.noise_scale**2 + torch.eye(x.shape[1], dtype=x.dtype) / self.prior_scale**2
        cov = torch.linalg.inv(precision)
        mean = cov @ x.T @ self.y / self.noise_scale**2
        return mean, cov

    def log_evidence(self) -> torch.Tensor:
        """``log p(y | X)``: y ~ N(0, X X^T prior^2 + noise^2 I)."""
        n = self.x.shape[0]
        cov = self.x @ self.x.T * self.prior_scale**2 + torch.eye(n, dtype=self.x.dtype) * self.noise_scale**2
        return torch.distributions.MultivariateNormal(torch.zeros(n, dtype=self.x.dtype), cov).log_prob(self.y)


def linear_regression(n: int = 100, d: int = 3, noise_scale: float = 0.5, prior_scale: float = 1.0, orthogonal: bool = False, seed: int = 0, dtype=torch.float64) -> LinearRegressionProblem:
    """A Bayesian linear regression problem.

    With ``orthogonal=True`` the design has orthogonal columns (``X^T X`` diagonal), so the
    exact posterior factorises and a mean-field guide can represent it exactly.
    """
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    if orthogonal:
        q, _ = torch.linalg.qr(x)
        x = q * (n**0.5)
    w = torch.randn(d, generator=g, dtype=dtype) * prior_scale
    y = x @ w + noise_scale * torch.randn(n, generator=g, dtype=dtype)
    return LinearRegressionProblem(x, y, w, noise_scale, prior_scale)


def toy_regression_1d(n: int = 64, noise_scale: float = 0.1, seed: int = 0, dtype=torch.float32):
    """``y = sin(3x) + noise`` on two clusters of ``x``: a standard picture of BNN uncertainty."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat([torch.rand(n // 2, generator=g) * 1.5 - 2.0, torch.rand(n - n // 2, generator=g) * 1.5 + 0.5])
    y = torch.sin(3 * x) + noise_scale * torch.randn(n, generator=g)
    return x.unsqueeze(-1).to(dtype), y.unsqueeze(-1).to(dtype)
