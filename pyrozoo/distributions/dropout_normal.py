"""A Normal distribution that also carries its (clipped) dropout rate log alpha."""

import math

import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution

from pyrozoo.distributions.constraints import finite
from pyrozoo.distributions.log_scale_normal import LogScaleNormal
from pyrozoo.distributions.util import broadcast_params


class DropoutNormal(LogScaleNormal):
    r"""``Normal(loc, exp(log_scale))`` of a variational-dropout posterior, with its log dropout
    rate :math:`\log\alpha = \log(\sigma^2 / \theta^2)` attached.

    Gaussian dropout posteriors :math:`\mathcal N(\theta, \alpha\theta^2)` (Kingma et al.
    2015; Molchanov et al. 2017, eq. 5; thesis eq. 11) are parameterised through
    :math:`\log\alpha` — clipped to a range, shared across a layer or a neuron, or infinite
    for a zero-mean variance layer. The KLs against the log-uniform and ARD priors depend
    on :math:`\alpha` alone, so they read ``log_alpha`` here instead of recomputing it from
    ``loc``. This matters where ``loc`` is not :math:`\theta`: with the train-time clip mask
    of Sparse VD the mean of the weights with :math:`\log\alpha \ge 3` is zeroed while the
    KL (and the variance) still use :math:`\theta` (Molchanov et al.'s ``train_clip``).

    It is a :class:`~pyrozoo.distributions.LogScaleNormal` (so a ``Normal``), hence works with
    the local-reparameterization and flipout handlers and every rule for Normals.

    :param loc: mean of the weights.
    :param log_scale: log standard deviation.
    :param log_alpha: log dropout rate (broadcastable with ``loc``; may be ``+inf``, the
        zero-mean variance layers, but not ``-inf`` or NaN).
    """

    arg_constraints = {
        "loc": finite,
        "log_scale": finite,
        # (-inf, inf]: alpha = inf is a zero-mean layer; alpha = 0 would be a point mass
        "log_alpha": constraints.greater_than(-math.inf),
    }

    def __init__(self, loc, log_scale, log_alpha, validate_args=None):
        if torch.is_tensor(loc) and torch.is_tensor(log_scale) and loc.shape == log_scale.shape:
            self.loc, self.log_scale = loc, log_scale
        else:
            self.loc, self.log_scale = broadcast_params(type(self).__name__, loc=loc, log_scale=log_scale)
        log_alpha = torch.as_tensor(log_alpha, dtype=self.loc.dtype, device=self.loc.device)
        if log_alpha.shape != self.loc.shape:
            try:
                shape = torch.broadcast_shapes(self.loc.shape, log_alpha.shape)
            except RuntimeError:
                raise ValueError(
                    f"DropoutNormal: log_alpha of shape {tuple(log_alpha.shape)} does not broadcast with the shape "
                    f"{tuple(self.loc.shape)} of loc and log_scale"
                ) from None
            self.loc, self.log_scale, log_alpha = self.loc.expand(shape), self.log_scale.expand(shape), log_alpha.expand(shape)
        self.log_alpha = log_alpha
        TorchDistribution.__init__(self, self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(DropoutNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        new.loc = self.loc.expand(batch_shape)
        new.log_scale = self.log_scale.expand(batch_shape)
        new.log_alpha = self.log_alpha.expand(batch_shape)
        TorchDistribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new
