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
from torch.distributions.utils import broadcast_all

_LOG_2 = math.log(2.0)
_HALF_LOG_PI_OVER_2 = 0.5 * math.log(math.pi / 2.0)


class ElasticNet(TorchDistribution):
    r"""Density :math:`\propto \exp(-\lambda_1 |x| - \lambda_2 x^2 / 2)` on the real line.

    :param l1: Laplace rate :math:`\lambda_1 \ge 0`.
    :param l2: Gaussian precision :math:`\lambda_2 \ge 0` (not both zero).
    """

    arg_constraints = {"l1": constraints.nonnegative, "l2": constraints.nonnegative}
    support = constraints.real
    has_rsample = False

    def __init__(self, l1, l2, validate_args=None):
        self.l1, self.l2 = broadcast_all(l1, l2)
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
        gaussian = l2 > 0
        safe_l2 = torch.where(gaussian, l2, torch.ones_like(l2))
        # log of 2 * int_0^inf exp(-l1 x - l2 x^2 / 2) dx; erfcx keeps the Laplace-dominated
        # regime (l1 >> sqrt(l2)) finite where exp(z^2) erfc(z) would overflow/underflow
        z = l1 / torch.sqrt(2.0 * safe_l2)
        with_gaussian = _LOG_2 + _HALF_LOG_PI_OVER_2 - 0.5 * torch.log(safe_l2) + torch.log(torch.special.erfcx(z))
        safe_l1 = torch.where(gaussian, torch.ones_like(l1), l1)
        laplace_only = _LOG_2 - torch.log(safe_l1)
        return torch.where(gaussian, with_gaussian, laplace_only)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return -self.l1 * value.abs() - 0.5 * self.l2 * value.square() - self.log_normalizer()

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
            log_accept = torch.where(use_exponential, -0.5 * l2 * proposal.square(), -l1 * proposal)
            accept = pending & (torch.rand(shape, dtype=l1.dtype, device=l1.device).log() <= log_accept)
            magnitude = torch.where(accept, proposal, magnitude)
            pending = pending & ~accept
        sign = torch.randint(0, 2, shape, device=l1.device).to(l1.dtype) * 2 - 1
        return sign * magnitude
