"""The two-component zero-mean Gaussian scale mixture of Bayes by Backprop."""

import math

import torch
from pyro.distributions import TorchDistribution, constraints

from pyrozoo.distributions.constraints import positive_finite
from pyrozoo.distributions.util import broadcast_params

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class ScaleMixtureNormal(TorchDistribution):
    r"""``pi N(0, sigma1^2) + (1 - pi) N(0, sigma2^2)`` (Blundell et al. 2015, eq. 7).

    The log-density is evaluated with ``logaddexp`` so a tiny ``sigma2`` never underflows
    to ``log(0)`` (the failure behind blitz's "-inf in log_prior").

    :param pi: weight of the first component, in [0, 1].
    :param sigma1: scale of the first component (the wide "slab" in the paper), positive and finite.
    :param sigma2: scale of the second component (the narrow "spike"), positive and finite.
    """

    arg_constraints = {
        "pi": constraints.unit_interval,
        "sigma1": positive_finite,
        "sigma2": positive_finite,
    }
    support = constraints.real
    has_rsample = False

    def __init__(self, pi, sigma1, sigma2, validate_args=None):
        self.pi, self.sigma1, self.sigma2 = broadcast_params("ScaleMixtureNormal", pi=pi, sigma1=sigma1, sigma2=sigma2)
        super().__init__(self.pi.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ScaleMixtureNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.pi = self.pi.expand(batch_shape)
        new.sigma1 = self.sigma1.expand(batch_shape)
        new.sigma2 = self.sigma2.expand(batch_shape)
        super(ScaleMixtureNormal, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return torch.zeros_like(self.pi)

    @property
    def mode(self):
        return torch.zeros_like(self.pi)

    @property
    def variance(self):
        return self.pi * self.sigma1**2 + (1 - self.pi) * self.sigma2**2

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        # log(pi) - log(sigma) - log(2 pi)/2 does not depend on the value: keep it out of the
        # elementwise work on weight-sized tensors.
        c1 = torch.log(self.pi) - torch.log(self.sigma1) - _HALF_LOG_2PI
        c2 = torch.log1p(-self.pi) - torch.log(self.sigma2) - _HALF_LOG_2PI
        # (value / sigma)^2 rather than value^2 / sigma^2: sigma^2 and value^2 under- or
        # overflow for scales beyond ~1e+-19 in float32 (sigma = 1e-30 gave NaN)
        z1 = value / self.sigma1
        z2 = value / self.sigma2
        return torch.logaddexp(c1 - 0.5 * z1 * z1, c2 - 0.5 * z2 * z2)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            first = torch.rand(shape, dtype=self.pi.dtype, device=self.pi.device) < self.pi.expand(shape)
            scale = torch.where(first, self.sigma1.expand(shape), self.sigma2.expand(shape))
            return torch.randn(shape, dtype=self.pi.dtype, device=self.pi.device) * scale
