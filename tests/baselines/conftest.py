"""Shared problems of the baseline tests: small enough to train in well under a second."""

import math

import pyro.distributions as dist
import pytest
import torch

from pyrozoo.models import CategoricalLikelihood, GaussianLikelihood


def two_clusters(n: int = 40, seed: int = 0, noise_std: float = 0.1):
    """A 1-d regression with inputs in two clusters, [-2, -1] and [1, 2], and
    ``y = sin(2 x) + noise``: the data leave a gap around 0 and nothing beyond |x| > 2."""
    g = torch.Generator().manual_seed(seed)
    side = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    x = (side * (1.0 + torch.rand(n, generator=g)))[:, None]
    y = torch.sin(2 * x[:, 0]) + noise_std * torch.randn(n, generator=g)
    return x, y


#: the likelihoods the baselines support: (name, factory of n, output width, targets of n)
LIKELIHOOD_CASES = [
    pytest.param(lambda n: GaussianLikelihood(n, precision=dist.Gamma(6.0, 6.0)), 1, id="gaussian-learned-noise"),
    pytest.param(lambda n: GaussianLikelihood(n, precision=4.0), 1, id="gaussian-fixed-noise"),
    pytest.param(lambda n: CategoricalLikelihood(n), 3, id="categorical"),
]


def targets_for(likelihood, x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Targets of the likelihood's kind for inputs ``x``: reals, or labels 0..2 by the first feature's tercile."""
    if isinstance(likelihood, CategoricalLikelihood):
        return torch.bucketize(x[:, 0], torch.quantile(x[:, 0], torch.tensor([1 / 3, 2 / 3]))).long()
    g = torch.Generator().manual_seed(seed)
    return torch.sin(2 * x[:, 0]) + 0.1 * torch.randn(len(x), generator=g)


def binomial_sd(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)
