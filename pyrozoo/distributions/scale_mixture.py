"""The two-component zero-mean Gaussian scale mixture of Bayes by Backprop."""

import math

import torch
from pyro.distributions import TorchDistribution, constraints
from torch.distributions.utils import lazy_property

from pyrozoo.distributions.constraints import positive_finite
from pyrozoo.distributions.util import broadcast_params

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _half_squares(value: torch.Tensor, sigma1: torch.Tensor, sigma2: torch.Tensor, shared: bool):
    """``0.5 * value^2 / sigma_i^2`` for both components.

    ``shared``: from one square of ``value`` shared by both terms, as the committed results
    were computed (bitwise the same values and gradients), after scaling ``value`` and the
    scales by the power of two that brings the scales' geometric mean near 1, an exact
    scaling that keeps ``sigma^2`` from under- or overflowing (float32 scales beyond
    ~1e+-19 gave NaN). It needs scales within a factor 2^40 of each other; otherwise each term
    is formed as ``(value / sigma)^2``, which holds for any pair of finite scales."""
    if not shared:
        z1, z2 = value / sigma1, value / sigma2
        return 0.5 * (z1 * z1), 0.5 * (z2 * z2)
    exponent = torch.round(0.5 * (torch.log2(sigma1) + torch.log2(sigma2))).clamp(-126.0, 127.0)
    k = torch.exp2(-exponent)
    scaled = value * k
    sq = 0.5 * (scaled * scaled)
    return sq / (sigma1 * k) ** 2, sq / (sigma2 * k) ** 2


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

    @lazy_property
    def _scales_are_close(self) -> bool:
        # read on the host only where that costs no device synchronisation: on an accelerator
        # the form that holds for any scales is used
        if self.sigma1.device.type != "cpu":
            return False
        return bool((torch.log2(self.sigma1) - torch.log2(self.sigma2)).abs().max() <= 40.0) if self.sigma1.numel() else True

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        # log(pi) - log(sigma) - log(2 pi)/2 does not depend on the value: keep it out of the
        # elementwise work on weight-sized tensors.
        c1 = torch.log(self.pi) - torch.log(self.sigma1) - _HALF_LOG_2PI
        c2 = torch.log1p(-self.pi) - torch.log(self.sigma2) - _HALF_LOG_2PI
        half_sq1, half_sq2 = _half_squares(value, self.sigma1, self.sigma2, self._scales_are_close)
        return torch.logaddexp(c1 - half_sq1, c2 - half_sq2)

    def sample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        with torch.no_grad():
            first = torch.rand(shape, dtype=self.pi.dtype, device=self.pi.device) < self.pi.expand(shape)
            scale = torch.where(first, self.sigma1.expand(shape), self.sigma2.expand(shape))
            return torch.randn(shape, dtype=self.pi.dtype, device=self.pi.device) * scale
