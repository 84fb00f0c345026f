r"""The elastic-net distribution: a Gaussian tilted by a Laplace factor.

.. math::

    p(x \mid \lambda_1, \lambda_2) = \frac{1}{Z} \exp\!\big(-\lambda_1 |x| - \tfrac12 \lambda_2 x^2\big),
    \qquad Z = \sqrt{\frac{2\pi}{\lambda_2}}\; \operatorname{erfcx}\!\Big(\frac{\lambda_1}{\sqrt{2\lambda_2}}\Big)
    \quad (\lambda_2 > 0), \qquad Z = \frac{2}{\lambda_1} \quad (\lambda_2 = 0).

``ElasticNet(1 / s, 0)`` is ``Laplace(0, s)`` and ``ElasticNet(0, 1 / v)`` is
``Normal(0, sqrt(v))``. In the spike-and-slab Gaussian-Laplace prior of Deng et al.
(2019, Eq. 4), the conditional of a weight given its indicator :math:`\gamma` is
``ElasticNet((1 - γ) / (σ v0), γ / (σ² v1))``, and the EM expectation of its log-density
over :math:`\gamma` (Eq. 10) is, up to a constant in the weight, the log-density of
``ElasticNet(κ0 / σ, κ1 / σ²)``: the adaptive elastic-net penalty the sampler follows.
"""

import math

import torch
from pyro.distributions import TorchDistribution, constraints

from pyrozoo.distributions.constraints import nonnegative_finite
from pyrozoo.distributions.util import broadcast_params

_LOG_2 = math.log(2.0)
_HALF_LOG_PI_OVER_2 = 0.5 * math.log(math.pi / 2.0)
#: beyond z = l1 / sqrt(2 l2) = 1e8 the density is Laplace's to a relative 1e-16 in Z
_ERFCX_ASYMPTOTIC = 1e8


class ElasticNet(TorchDistribution):
    r"""Density :math:`\propto \exp(-\lambda_1 |x| - \lambda_2 x^2 / 2)` on the real line.

    :param l1: Laplace rate :math:`\lambda_1 \ge 0`, finite.
    :param l2: Gaussian precision :math:`\lambda_2 \ge 0`, finite (not both zero).
    """

    arg_constraints = {"l1": nonnegative_finite, "l2": nonnegative_finite}
    support = constraints.real
    has_rsample = False

    def __init__(self, l1, l2, validate_args=None):
        self.l1, self.l2 = broadcast_params("ElasticNet", l1=l1, l2=l2)
        super().__init__(self.l1.shape, validate_args=validate_args)
        if self._validate_args and not bool(((self.l1 > 0) | (self.l2 > 0)).all()):
            raise ValueError("ElasticNet needs l1 > 0 or l2 > 0 in every entry (otherwise the density is flat)")

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ElasticNet, _instance)
        batch_shape = torch.Size(batch_shape)
        new.l1 = self.l1.expand(batch_shape)
        new.l2 = self.l2.expand(batch_shape)
        super(ElasticNet, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_normalizer(self) -> torch.Tensor:
        """:math:`\\log Z(\\lambda_1, \\lambda_2)`, finite for every valid parameter."""
        l1, l2 = self.l1, self.l2
        # log of 2 * int_0^inf exp(-l1 x - l2 x^2 / 2) dx; erfcx keeps the Laplace-dominated
        # regime (l1 >> sqrt(l2)) finite where exp(z^2) erfc(z) would overflow/underflow. Beyond
        # z = l1 / sqrt(2 l2) = 1e8 the Gaussian factor changes Z by a relative 1/(2 z^2) < 1e-16,
        # so Z = 2 / l1 there: z itself may overflow (l1 = 1e30, l2 = 1e-30 in float32), and
        # neither branch sees the other's arguments, so neither leaks inf or NaN gradients.
        # (z / 1e8)^2 <= 1 as (l1 / 1e8)^2 <= 2 l2: no sqrt, and no overflow below l1 = 1.8e27 in
        # float32 (above it z > 7e7 whatever l2, so taking the Laplace branch is as accurate)
        scaled_l1 = l1 * (1.0 / _ERFCX_ASYMPTOTIC)
        gaussian = (l2 > 0) & (scaled_l1 * scaled_l1 <= 2.0 * l2)
        one = torch.ones_like(l2)
        safe_l2 = torch.where(gaussian, l2, one)
        z = l1 / torch.sqrt(2.0 * safe_l2)
        with_gaussian = _LOG_2 + _HALF_LOG_PI_OVER_2 - 0.5 * torch.log(safe_l2) + torch.log(torch.special.erfcx(z))
        safe_l1 = torch.where(gaussian, one, l1)
        laplace_only = _LOG_2 - torch.log(safe_l1)
        return torch.where(gaussian, with_gaussian, laplace_only)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        # (l2 |x|) |x|: x^2 overflows for |x| > 1.8e19 in float32, and 0 * inf is NaN where l2 = 0
        magnitude = value.abs()
        return -self.l1 * magnitude - 0.5 * (self.l2 * magnitude) * magnitude - self.log_normalizer()

    @property
    def mean(self):
        return torch.zeros_like(self.l1)

    @torch.no_grad()
    def sample(self, sample_shape=torch.Size()):
        """Exact draws by rejection on ``|x|`` with a sign drawn uniformly: from
        ``Exponential(λ1)`` accepting with probability ``exp(-λ2 x² / 2)`` where
        ``λ1 ≥ sqrt(λ2)``, else from the half-normal of precision ``λ2`` accepting with
        probability ``exp(-λ1 x)``. Each acceptance rate is at least 0.52."""
        shape = self._extended_shape(sample_shape)
        l1, l2 = self.l1.expand(shape), self.l2.expand(shape)
        use_exponential = l1 * l1 >= l2
        safe_l1 = torch.where(use_exponential, l1, torch.ones_like(l1))
        safe_l2 = torch.where(use_exponential, torch.ones_like(l2), l2)
        magnitude = torch.empty(shape, dtype=l1.dtype, device=l1.device)
        pending = torch.ones(shape, dtype=torch.bool, device=l1.device)
        while bool(pending.any()):
            exponential = torch.empty(shape, dtype=l1.dtype, device=l1.device).exponential_() / safe_l1
            half_normal = torch.randn(shape, dtype=l1.dtype, device=l1.device).abs() / safe_l2.sqrt()
            proposal = torch.where(use_exponential, exponential, half_normal)
            # (l2 x) x: with l2 = 0 and a huge Exponential(l1) proposal, l2 x^2 would be 0 * inf = NaN
            # (never accepted: the loop hung for l1 = 1e-30 in float32)
            log_accept = torch.where(use_exponential, -0.5 * (l2 * proposal) * proposal, -l1 * proposal)
            accept = pending & (torch.rand(shape, dtype=l1.dtype, device=l1.device).log() <= log_accept)
            magnitude = torch.where(accept, proposal, magnitude)
            pending = pending & ~accept
        sign = torch.randint(0, 2, shape, device=l1.device).to(l1.dtype) * 2 - 1
        return sign * magnitude
