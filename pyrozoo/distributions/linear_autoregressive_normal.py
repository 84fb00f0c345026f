r"""A Gaussian defined by a linear autoregression, with its per-step log-density factors."""

import math

import torch
from pyro.distributions import TorchDistribution, constraints

from pyrozoo.distributions.constraints import finite, positive_finite
from pyrozoo.distributions.util import broadcast_params

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class _StrictlyLowerTriangular(constraints.Constraint):
    """Square matrices with zeros on and above the diagonal and finite entries below it."""

    event_dim = 2

    def check(self, value):
        return ((value.triu() == 0) & torch.isfinite(value)).flatten(-2).all(-1)

    def __repr__(self):
        return "StrictlyLowerTriangular()"


strictly_lower_triangular = _StrictlyLowerTriangular()


class LinearAutoregressiveNormal(TorchDistribution):
    r"""``z_i = shift_i + Σ_{j<i} W_ij z_j + scale_i ξ_i`` with ``ξ ~ N(0, I)``.

    A multivariate Normal over ``z ∈ R^D`` written as a product of its autoregressive
    conditionals :math:`\prod_i \mathcal N(z_i \mid \mathrm{shift}_i + (Wz)_i, \mathrm{scale}_i^2)`
    (Molchanov 2022, Eq. 23 with Gaussian factors). :meth:`log_prob_factors` returns the
    ``D`` factors separately, which is what the structured semi-implicit estimator (Eq. 26)
    needs when the shifts are mixing variables with one independent draw per step.

    :param shift: ``(..., D)``, finite.
    :param weight: ``(..., D, D)``, strictly lower triangular, finite.
    :param scale: ``(..., D)``, positive and finite.
    """

    arg_constraints = {
        "shift": constraints.independent(finite, 1),
        "weight": strictly_lower_triangular,
        "scale": constraints.independent(positive_finite, 1),
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, shift, weight, scale, validate_args=None):
        shift, scale = broadcast_params("LinearAutoregressiveNormal", shift=shift, scale=scale)
        if not torch.is_tensor(weight):
            raise TypeError(f"LinearAutoregressiveNormal: weight must be a tensor, got {type(weight).__name__}")
        if shift.dim() < 1 or weight.dim() < 2:
            raise ValueError(
                f"LinearAutoregressiveNormal: shift and scale need an event dimension and weight two, got shapes "
                f"{tuple(shift.shape)} and {tuple(weight.shape)}"
            )
        d = shift.shape[-1]
        if weight.shape[-2:] != (d, d):
            raise ValueError(f"LinearAutoregressiveNormal: weight must end in ({d}, {d}), got {tuple(weight.shape)}")
        try:
            batch_shape = torch.broadcast_shapes(shift.shape[:-1], weight.shape[:-2])
        except RuntimeError:
            raise ValueError(
                f"LinearAutoregressiveNormal: the batch shapes {tuple(shift.shape[:-1])} of shift/scale and "
                f"{tuple(weight.shape[:-2])} of weight do not broadcast"
            ) from None
        self.shift = shift.expand(batch_shape + (d,))
        self.scale = scale.expand(batch_shape + (d,))
        self.weight = weight.expand(batch_shape + (d, d))
        super().__init__(batch_shape, torch.Size((d,)), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LinearAutoregressiveNormal, _instance)
        batch_shape = torch.Size(batch_shape)
        d = self.event_shape
        new.shift = self.shift.expand(batch_shape + d)
        new.scale = self.scale.expand(batch_shape + d)
        new.weight = self.weight.expand(batch_shape + d + d)
        super(LinearAutoregressiveNormal, new).__init__(batch_shape, d, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=torch.Size()):
        shape = self._extended_shape(sample_shape)
        noise = torch.randn(shape, dtype=self.shift.dtype, device=self.shift.device)
        u = self.shift + self.scale * noise
        eye = torch.eye(shape[-1], dtype=u.dtype, device=u.device)
        # z = (I - W)^{-1} u: one triangular solve instead of D sequential steps
        system = (eye - self.weight).expand(shape + shape[-1:])
        return torch.linalg.solve_triangular(system, u.unsqueeze(-1), upper=False, unitriangular=True).squeeze(-1)

    def log_prob_factors(self, value):
        """``log N(z_i | shift_i + Σ_{j<i} W_ij z_j, scale_i^2)`` per step, shape ``batch + (D,)``."""
        if self._validate_args:
            self._validate_sample(value)
        mean = self.shift + (self.weight @ value.unsqueeze(-1)).squeeze(-1)
        return -0.5 * ((value - mean) / self.scale) ** 2 - self.scale.log() - _HALF_LOG_2PI

    def log_prob(self, value):
        return self.log_prob_factors(value).sum(-1)

    @property
    def mean(self):
        eye = torch.eye(self.event_shape[0], dtype=self.shift.dtype, device=self.shift.device)
        return torch.linalg.solve_triangular(eye - self.weight, self.shift.unsqueeze(-1), upper=False, unitriangular=True).squeeze(-1)

    @property
    def scale_tril(self):
        """Cholesky factor of the covariance, ``(I - W)^{-1} diag(scale)``."""
        eye = torch.eye(self.event_shape[0], dtype=self.shift.dtype, device=self.shift.device)
        inv = torch.linalg.solve_triangular(eye - self.weight, eye.expand_as(self.weight), upper=False, unitriangular=True)
        return inv * self.scale.unsqueeze(-2)

    def entropy(self):
        return self.scale.log().sum(-1) + self.event_shape[0] * (0.5 + _HALF_LOG_2PI)
