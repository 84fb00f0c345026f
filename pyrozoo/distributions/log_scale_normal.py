"""A Normal distribution parameterised by its log standard deviation."""

import math

import torch
from pyro.distributions import Normal
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions.utils import lazy_property

from pyrozoo.distributions.constraints import finite
from pyrozoo.distributions.util import broadcast_params

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class LogScaleNormal(Normal):
    """``Normal(loc, exp(log_scale))``.

    Variational posteriors optimise the log of the standard deviation; handing it to the
    distribution directly lets the entropy, the KL divergences registered in
    :mod:`pyrozoo.distributions.kl` and the local-reparameterization handler use
    ``log_scale`` and one cached ``variance = exp(2 log_scale)`` instead of recomputing
    ``log(scale)`` and ``scale**2`` from ``scale`` on every weight-sized tensor. It is a
    :class:`~pyro.distributions.Normal` (``isinstance`` holds), so every rule for Normals
    applies to it.

    Both parameters must be finite (``validate_args``): an infinite ``log_scale`` is a zero or
    infinite standard deviation.
    """

    arg_constraints = {"loc": finite, "log_scale": finite}

    def __init__(self, loc, log_scale, validate_args=None):
        if torch.is_tensor(loc) and torch.is_tensor(log_scale) and loc.shape == log_scale.shape:
            self.loc, self.log_scale = loc, log_scale  # the common case, without broadcast_all's cost
        else:
            self.loc, self.log_scale = broadcast_params(type(self).__name__, loc=loc, log_scale=log_scale)
        TorchDistribution.__init__(self, self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogScaleNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.log_scale = self.log_scale.expand(batch_shape)
        TorchDistribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def scale(self):
        return self.log_scale.exp()

    @lazy_property
    def variance(self):
        # ClosedFormKL_ELBO's direct evaluation fills this cache from the summed KL's node
        # (same values; see pyrozoo.distributions.kl.summed_kl_total) before anything reads it
        return (2 * self.log_scale).exp()

    @property
    def stddev(self):
        return self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        # standardise with exp(-log_scale): stays finite where the variance underflows
        z = (value - self.loc) * torch.exp(-self.log_scale)
        return -0.5 * z * z - self.log_scale - _HALF_LOG_2PI

    def entropy(self):
        return self.log_scale + (0.5 + _HALF_LOG_2PI)
