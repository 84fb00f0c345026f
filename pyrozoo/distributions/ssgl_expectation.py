r"""The EM expectation of the spike-and-slab Gaussian-Laplace log-density (Deng et al. 2019, Eq. 10).

With :math:`\gamma \sim \mathrm{Bernoulli}(\rho)`, the expected complete-data log-density of a
weight under the SSGL prior :math:`(1-\gamma)\,\mathcal L(0, \sigma v_0) + \gamma\,\mathcal N(0, \sigma^2 v_1)` is

.. math::

    \mathbb E_\gamma[\log \pi(\beta \mid \sigma, \gamma)]
    = -\frac{\kappa_0 |\beta|}{\sigma} - \frac{\kappa_1 \beta^2}{2\sigma^2}
      - (1 - \rho) \log(2 \sigma v_0) - \rho\, \tfrac12 \log(2\pi \sigma^2 v_1),

with :math:`\kappa_0 = (1-\rho)/v_0` and :math:`\kappa_1 = \rho / v_1` (Eq. 13); SG-MCMC-SA
carries :math:`\kappa_0, \kappa_1` as their own stochastic-approximation averages, so they are
separate parameters here. This is the prior part of :math:`Q_1` and the potential whose
gradient the sampler follows. It is a function of :math:`\beta`, not a normalised density:
there is no ``sample``; draw prior samples from the hierarchical model instead.
"""

import math
import numbers

import torch
from pyro.distributions import TorchDistribution, constraints

from pyrozoo.distributions.constraints import nonnegative_finite, positive_finite

_LOG_2 = math.log(2.0)
_LOG_2PI = math.log(2.0 * math.pi)


class SSGLExpectedLogDensity(TorchDistribution):
    r"""``log_prob(beta)`` is the expectation above, elementwise.

    :param kappa0, kappa1: non-negative finite tensors broadcastable to the weight's shape.
    :param rho: tensor in :math:`[0, 1]` broadcastable to the weight's shape.
    :param sigma: the global scale :math:`\sigma > 0` (a 0-dim tensor, or one that
        broadcasts to the batch shape without enlarging it).
    :param float v0, v1: the SSGL hyperparameters, positive and finite (always checked: they
        are Python numbers, so this costs no device synchronisation).
    """

    arg_constraints = {
        "kappa0": nonnegative_finite,
        "kappa1": nonnegative_finite,
        "rho": constraints.unit_interval,
        "sigma": positive_finite,
    }
    support = constraints.real
    has_rsample = False

    def __init__(self, kappa0: torch.Tensor, kappa1: torch.Tensor, rho: torch.Tensor, sigma: torch.Tensor, v0: float, v1: float, validate_args=None):
        for name, t in (("kappa0", kappa0), ("kappa1", kappa1), ("rho", rho), ("sigma", sigma)):
            if not torch.is_tensor(t):
                raise TypeError(f"SSGLExpectedLogDensity: {name} must be a tensor, got {type(t).__name__}")
        for name, v in (("v0", v0), ("v1", v1)):
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f"SSGLExpectedLogDensity: {name} must be a real number, got {type(v).__name__}")
            if not 0 < v < math.inf:
                raise ValueError(f"SSGLExpectedLogDensity: {name} must be a positive finite number, got {v!r}")
        self.kappa0, self.kappa1, self.rho, self.sigma = kappa0, kappa1, rho, sigma
        self.v0, self.v1 = float(v0), float(v1)
        shapes = (kappa0.shape, kappa1.shape, rho.shape)
        # built on every step of a sampler: skip torch.broadcast_shapes (tens of microseconds) in the usual case of equal shapes
        batch_shape = with_sigma = None
        try:
            batch_shape = shapes[0] if shapes[0] == shapes[1] == shapes[2] else torch.broadcast_shapes(*shapes)
            with_sigma = torch.broadcast_shapes(sigma.shape, batch_shape) if sigma.dim() else batch_shape
        except RuntimeError:
            pass
        if batch_shape is None or with_sigma != batch_shape:
            raise ValueError(
                f"SSGLExpectedLogDensity: kappa0 {tuple(kappa0.shape)}, kappa1 {tuple(kappa1.shape)}, rho {tuple(rho.shape)} "
                f"and sigma {tuple(sigma.shape)} do not broadcast to one batch shape (sigma may not enlarge it)"
            ) from None
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(SSGLExpectedLogDensity, _instance)
        batch_shape = torch.Size(batch_shape)
        new.kappa0, new.kappa1, new.rho = (t.expand(batch_shape) for t in (self.kappa0, self.kappa1, self.rho))
        new.sigma, new.v0, new.v1 = self.sigma, self.v0, self.v1
        super(SSGLExpectedLogDensity, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value):
        sigma = self.sigma
        log_laplace_norm = _LOG_2 + torch.log(sigma * self.v0)
        log_gauss_norm = 0.5 * (_LOG_2PI + torch.log(sigma.square() * self.v1))
        # -(1 - rho) log_laplace_norm - rho log_gauss_norm, as one pass over rho
        constant = torch.addcmul(-log_laplace_norm, self.rho, log_laplace_norm - log_gauss_norm)
        penalty = self.kappa0 * value.abs() / sigma + self.kappa1 * value.square() / (2.0 * sigma.square())
        return constant - penalty

    def sample(self, sample_shape=torch.Size()):
        raise NotImplementedError(
            "SSGLExpectedLogDensity is the EM expectation of the SSGL log-density (Deng et al. 2019, Eq. 10), "
            "not a normalised density of the weights: sample the prior's hierarchical form instead"
        )
