r"""Reweighted wake-sleep (Bornschein & Bengio 2015): the self-normalised importance-weighted
gradient estimator, which is the well-defined reading of Sagar (2020)'s Algorithm 1.

With ``K`` guide draws :math:`\theta_k \sim q_\lambda` held fixed (detached) and normalised
weights :math:`\hat w_k \propto p(\mathcal D, \theta_k) / q_\lambda(\theta_k)`, the guide
("wake-φ") loss is

.. math::

    \mathcal J_\phi(\lambda) = -\sum_{k=1}^K \mathrm{sg}(\hat w_k)\,\log q_\lambda(\mathrm{sg}(\theta_k)),

an SNIS estimate of :math:`\nabla_\lambda \mathrm{KL}(p(\theta\mid\mathcal D)\,\Vert\,q_\lambda)`
up to a constant: the update minimises the *inclusive* KL. Sagar's Algorithm 1 steps 2–5 with
the weights held fixed are exactly this (his step 4 adds :math:`\min_j\log w_j`; we subtract the
maximum, i.e. normalise with ``logsumexp``). On a minibatch of ``S`` out of ``N`` examples the
likelihood enters :math:`\log w_k` scaled by ``N/S`` (his step 2), through the data plate.

**This is not a bound.** The loss has no evidence-bound interpretation; the estimate is
biased for finite ``K`` and consistent only as ``K → ∞``. Sagar's "ESBO" value (his Eq. 6),
:math:`\sum_k\hat w_k\log w_k`, is at least the IWAE estimate and tends to
:math:`\log p(\mathcal D) + \mathrm{KL}(p\Vert q) \ge \log p(\mathcal D)`, i.e. it lies *above*
the evidence; it is recorded as the diagnostic ``esbo_eq6``. For BNN weight vectors with
thousands of dimensions the weights collapse (ESS near 1) and the update fits ``q`` to a single
sample; the ESS is recorded after every evaluation so that this can be seen.

Model parameters (if any) get the "wake-θ" gradient of the IWAE bound at the detached draws,
as in Pyro's :class:`~pyro.infer.ReweightedWakeSleep`; unlike that class this one returns a
single differentiable loss (usable with :func:`~pyrozoo.inference.fit`) and supports
minibatches (with the bias warning of :mod:`pyrozoo.inference.importance_weighted`).
"""

import math
from typing import Dict

import torch
from pyro.infer.elbo import ELBO

from pyrozoo.inference.elbo import DifferentiableLossELBO
from pyrozoo.inference.importance_weighted import _ImportanceWeights, weight_diagnostics


class ReweightedWakeSleepLoss(DifferentiableLossELBO, ELBO):
    r"""The wake-φ loss :math:`-\sum_k \mathrm{sg}(\hat w_k)\log q(\mathrm{sg}(\theta_k))` plus
    the wake-θ IWAE loss for model parameters, as one differentiable scalar.

    Its *value* is :math:`-\hat{\mathcal L}_K`, the negative IWAE estimate at the current
    guide (a readable progress measure); its gradient with respect to the guide is the
    inclusive-KL (wake-φ) one, which does **not** minimise that value.

    :param int num_particles: ``K`` (Sagar's ``M``).
    :ivar dict diagnostics: ``ess``, ``max_weight``, ``log_weight_var`` and ``esbo_eq6``
        (:math:`\sum_k\hat w_k\log w_k`) of the last evaluation, detached 0-d tensors.
    """

    def __init__(self, num_particles: int = 8, max_plate_nesting=float("inf"), vectorize_particles: bool = False, **kwargs):
        if not (isinstance(num_particles, int) and num_particles >= 1):
            raise ValueError(f"num_particles must be a positive int, got {num_particles!r}")
        super().__init__(num_particles=num_particles, max_plate_nesting=max_plate_nesting, vectorize_particles=vectorize_particles, **kwargs)
        self._weights = _ImportanceWeights(self)
        self.diagnostics: Dict[str, torch.Tensor] = {}

    def _get_trace(self, model, guide, args, kwargs):  # abstract in ELBO; traces come from _ImportanceWeights
        raise NotImplementedError

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        direct = self._weights.direct(model, guide, self.num_particles, args, kwargs, detach_samples=True)
        if direct is not None:
            _, log_joint, log_q = direct
        else:
            _, log_joint, log_q = self._weights.traced(model, guide, args, kwargs, detach_samples=True)
        log_w = (log_joint - log_q).detach()
        log_w_hat = log_w - torch.logsumexp(log_w, 0)  # max-subtraction, not Sagar's "+ min"
        w_hat = log_w_hat.exp()
        diagnostics = weight_diagnostics(log_w)
        diagnostics["esbo_eq6"] = (w_hat * log_w).sum()
        self.diagnostics = diagnostics
        wake_phi = -(w_hat * log_q).sum()
        K = log_w.shape[0]
        wake_theta = -(torch.logsumexp(log_joint - log_q.detach(), 0) - math.log(K))
        return wake_theta + (wake_phi - wake_phi.detach())
