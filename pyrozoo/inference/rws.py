r"""Reweighted wake-sleep (Bornschein & Bengio 2015): the self-normalised importance-weighted
gradient estimator, which is the well-defined reading of Sagar (2020)'s Algorithm 1.

With ``K`` guide draws :math:`\theta_k \sim q_\lambda` and normalised weights
:math:`\hat w_k \propto w_k = p(\mathcal D, \theta_k) / q_\lambda(\theta_k)`, the guide
("wake-φ") update follows

.. math::

    g_\phi = \sum_{k=1}^K \hat w_k\, \nabla_\lambda \log q_\lambda(\theta_k)\big|_{\theta_k\ \text{fixed}},

an SNIS estimate of :math:`-\nabla_\lambda \mathrm{KL}(p(\theta\mid\mathcal D)\,\Vert\,q_\lambda)`:
the update minimises the *inclusive* KL. Sagar's Algorithm 1 steps 2–5 with the weights held
fixed are exactly this (his step 4 adds :math:`\min_j\log w_j`; we subtract the maximum, i.e.
normalise with ``logsumexp``). On a minibatch of ``S`` out of ``N`` examples the likelihood
enters :math:`\log w_k` scaled by ``N/S`` (his step 2), through the data plate.

**The estimator of** :math:`g_\phi`. Written as above (the score function of ``q`` at the
draws, weighted by :math:`\hat w_k`) it uses the model only through the weights. In ``d``
dimensions the weights of a ``q`` narrower than the posterior are dominated by ``q``'s own
density (:math:`\log w_k \approx \tfrac12\lVert\epsilon_k\rVert^2` + a term of size
:math:`\sigma\lVert\nabla\log p\rVert`), so each step moves every coordinate in a nearly random
direction: from the usual narrow start (``init_scale=1e-3``) a 210-weight logistic regression
stayed near chance for hundreds of steps (0.09 accuracy after 240 minibatch steps at
``lr=1e-3``; 0.62 after 500 at ``lr=0.05``, where the ELBO reaches 0.99 in 100). For reparameterised guide sites,
:math:`\theta_k = t_\lambda(\epsilon_k)`, the same expectation has the doubly reparameterised
form of Tucker et al. (2019, "Doubly reparameterized gradient estimators for Monte Carlo
objectives", §3, the RWS case):

.. math::

    \mathbb E\Big[\sum_k \hat w_k \nabla_\lambda \log q_\lambda(\theta_k)\big|_{\theta_k}\Big]
    = \mathbb E\Big[\sum_k (\hat w_k - \hat w_k^2)\,
      \frac{\partial \log w_k}{\partial \theta_k}\,\frac{\partial \theta_k}{\partial \lambda}\Big],

(the reparameterisation identity applied to :math:`\hat w_k` as a function of
:math:`\theta_k`; inside :math:`\log w_k` the density ``q`` is held at the current λ), which
uses :math:`\nabla_\theta\log p(\mathcal D,\theta)`: from the same start the logistic regression
reaches 0.997 in 300 steps at ``lr=0.05``. This module uses it for every reparameterised site and
the score-function form for the others (discrete or rejection-sampled sites), which together
estimate the same :math:`g_\phi`. Its factor :math:`1-\hat w_k` is computed as the sum of the
other weights, so that it does not round to zero where :math:`\hat w_k` rounds to 1.

Neither form helps where the weights collapse *completely* (the best draw ahead of the next by
tens of nats on every step, e.g. a CNN of ~700 weights on 500 examples): the expected update is then tiny, the doubly reparameterised estimate is
near zero on most steps and the score-function one nearly random. The ESS recorded below shows
it (:func:`~pyrozoo.inference.fit` warns); more particles or an ELBO / IWAE fit are the remedies.

**Point masses** (a ``Delta`` guide site, e.g. :class:`~pyrozoo.guides.DeltaGuide`) have no
density to weight and are point estimates, i.e. parameters of the model in the wake-sleep
sense: they get the wake-θ gradient below. A guide of point masses only is therefore MAP
(every weight is equal and the loss is :math:`-\log p(\mathcal D, \theta)`).

**This is not a bound.** The loss has no evidence-bound interpretation; the estimate is
biased for finite ``K`` and consistent only as ``K → ∞``. Sagar's "ESBO" value (his Eq. 6),
:math:`\sum_k\hat w_k\log w_k`, is at least the IWAE estimate and tends to
:math:`\log p(\mathcal D) + \mathrm{KL}(p\Vert q) \ge \log p(\mathcal D)`, i.e. it lies *above*
the evidence; it is recorded as the diagnostic ``esbo_eq6``, with the ESS of every evaluation.

Model parameters (``pyro.param`` in the model, a network's point-estimate weights, point-mass
guide sites) get the "wake-θ" gradient of the IWAE bound, :math:`\sum_k \hat w_k \nabla_\theta
\log p_\theta(\mathcal D, \theta_k)`, as in Pyro's :class:`~pyro.infer.ReweightedWakeSleep`; a
model with none (a BNN whose weights are all latent) has no wake-θ phase. Unlike Pyro's class
this one returns a single differentiable loss (usable with :func:`~pyrozoo.inference.fit` and
``pyro.infer.SVI``) and supports minibatches (with the bias warning of
:mod:`pyrozoo.inference.importance_weighted`).
"""

import math
from typing import Dict, Optional, Set

import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions.util import is_identically_zero, scale_and_mask
from pyro.infer.elbo import ELBO
from pyro.poutine.util import site_is_subsample

from pyrozoo.distributions.util import innermost
from pyrozoo.inference.elbo import DifferentiableLossELBO, _may_have_score_function
from pyrozoo.utils import deprecated_aliases
from pyrozoo.inference.importance_weighted import _ImportanceWeights, _sum_to_particles, weight_diagnostics


def _is_point_mass(fn) -> bool:
    return isinstance(innermost(fn), dist.Delta)


def _is_reparameterized(fn, value) -> bool:
    if not fn.has_rsample:
        return False
    return not _may_have_score_function(fn) or is_identically_zero(fn.score_parts(value).score_function)


class _ScaleParticleGrad(torch.autograd.Function):
    """Identity whose backward multiplies each particle's gradient by ``1 - ŵ_k``, read from
    ``sites.scale`` at backward time (the weights are known only after the forward pass)."""

    @staticmethod
    def forward(ctx, value, sites, particle, particle_dim):
        ctx.sites, ctx.particle, ctx.particle_dim = sites, particle, particle_dim
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.sites.factor(grad, ctx.particle, ctx.particle_dim), None, None, None


class _WakePhiSites:
    """How each guide draw enters the surrogate (``treat_values`` of
    :class:`~pyrozoo.inference.importance_weighted._ImportanceWeights`): reparameterised draws
    keep their path to λ with each particle's gradient scaled by ``1 - ŵ_k`` (with the outer
    weight ``ŵ_k`` this is the doubly reparameterised ``ŵ_k - ŵ_k²``); point masses keep theirs
    unscaled (parameters); any other draw is detached and recorded for the score-function term."""

    def __init__(self):
        self.scale: Optional[torch.Tensor] = None  # (K,) 1 - ŵ, set before backward
        self.score_sites: Set[str] = set()

    def __call__(self, name, fn, value, particle=None, particle_dim=None):
        if _is_point_mass(fn):
            return value
        if _is_reparameterized(fn, value):
            return _ScaleParticleGrad.apply(value, self, particle, particle_dim)
        self.score_sites.add(name)
        return value.detach()

    def factor(self, grad, particle, particle_dim):
        scale = self.scale.to(grad.dtype)
        if particle is not None:
            return scale[particle]
        return scale.reshape((-1,) + (1,) * (grad.dim() - particle_dim - 1))


class ReweightedWakeSleep(DifferentiableLossELBO, ELBO):
    r"""Reweighted wake-sleep as one differentiable scalar: the wake-φ (inclusive-KL) gradient
    for the guide, doubly reparameterised where the guide is reparameterised (Tucker et al.
    2019), and the wake-θ IWAE gradient for model parameters and point-mass guide sites.

    Its *value* is :math:`-\hat{\mathcal L}_K`, the negative IWAE estimate at the current
    guide (a readable progress measure); its gradient with respect to the guide is the
    inclusive-KL (wake-φ) one, which does **not** minimise that value.

    :param int num_particles: ``K`` (Sagar's ``M``); at ``K = 1`` every weight is 1 and the
        expected guide gradient is zero, so use ``K ≥ 2``.
    :ivar dict diagnostics: ``ess``, ``max_weight``, ``log_weight_var`` and ``esbo_eq6``
        (:math:`\sum_k\hat w_k\log w_k`) of the last evaluation, detached 0-d tensors.
    """

    #: the estimators :func:`~pyrozoo.inference.fit` may evaluate it under (see :class:`~pyrozoo.inference.RenyiELBO`)
    accepted_estimators = (None,)

    def __init__(self, num_particles: int = 8, max_plate_nesting=float("inf"), vectorize_particles: bool = False, **kwargs):
        if not (isinstance(num_particles, int) and num_particles >= 1):
            raise ValueError(f"num_particles must be a positive int, got {num_particles!r}")
        super().__init__(num_particles=num_particles, max_plate_nesting=max_plate_nesting, vectorize_particles=vectorize_particles, **kwargs)
        self._weights = _ImportanceWeights(self)
        self.diagnostics: Dict[str, torch.Tensor] = {}

    def _get_trace(self, model, guide, args, kwargs):  # abstract in ELBO; traces come from _ImportanceWeights
        raise NotImplementedError

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        K = self.num_particles
        sites = _WakePhiSites()
        direct = self._weights.direct(model, guide, K, args, kwargs, treat_values=sites)
        if direct is not None:
            values, log_joint, log_q = direct
            # log q at the draws held fixed: its λ-gradient cancels the one through log_q above
            fixed_log_q = sum(guide.posterior(name).log_prob(v.detach()).reshape(K, -1).sum(-1) for name, v in values.items())
            score_log_q = 0.0  # the direct path takes reparameterised guides only
        else:
            guide_traces, log_joint, log_q = self._weights.traced(model, guide, args, kwargs, treat_values=sites)
            fixed_log_q, score_log_q = self._fixed_log_q(guide, guide_traces, sites.score_sites, args, kwargs, like=log_joint)
        log_w = log_joint - log_q
        lw = log_w.detach()
        log_w_hat = lw - torch.logsumexp(lw, 0)  # max-subtraction, not Sagar's "+ min"
        w_hat = log_w_hat.exp()
        # 1 - w_k as the sum of the other weights: stays non-zero where w_k rounds to 1
        others = log_w_hat.expand(K, K).masked_fill(torch.eye(K, dtype=torch.bool, device=lw.device), -math.inf)
        sites.scale = torch.logsumexp(others, 1).exp()
        diagnostics = weight_diagnostics(lw)
        diagnostics["esbo_eq6"] = (w_hat * lw).sum()
        self.diagnostics = diagnostics
        # gradients: model parameters and point masses sum_k w_k grad log p (wake-theta);
        # reparameterised draws (w_k - w_k^2) dlog w_k/dtheta_k dtheta_k/dlambda (doubly
        # reparameterised wake-phi); score-function sites sum_k w_k grad log q (wake-phi)
        surrogate = -(w_hat * (log_w + fixed_log_q + score_log_q)).sum()
        value = -(torch.logsumexp(lw, 0) - math.log(K))
        return value + (surrogate - surrogate.detach())

    def _fixed_log_q(self, guide, guide_traces, score_sites, args, kwargs, like):
        """``(K,)`` log q of every guide site, and of the score-function sites alone, at the
        drawn values held fixed (the guide replayed on detached copies, so a site whose
        distribution depends on another site's value sees that value fixed too); on ``like``'s
        device and dtype (a particle without score-function sites contributes a plain 0)."""
        K = self.num_particles
        vectorized = self.vectorize_particles and K > 1
        replayed = self._vectorized_num_particles(guide) if vectorized else guide
        nesting = self.max_plate_nesting - 1 if vectorized else 0
        total, score = [], []
        for trace in guide_traces:
            fixed = poutine.Trace()
            for name, site in trace.nodes.items():
                if site["type"] == "sample":
                    fixed.add_node(name, **{**site, "value": site["value"].detach()})
            replay_trace = poutine.trace(poutine.replay(replayed, trace=fixed)).get_trace(*args, **kwargs)
            lq_all, lq_score = 0.0, 0.0
            for name, site in replay_trace.nodes.items():
                if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site):
                    continue
                lp = _sum_to_particles(scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"]), K, nesting, vectorized)
                lq_all = lq_all + lp
                if name in score_sites:
                    lq_score = lq_score + lp
            total.append(torch.as_tensor(lq_all, dtype=like.dtype, device=like.device))
            score.append(torch.as_tensor(lq_score, dtype=like.dtype, device=like.device))
        if vectorized:
            return total[0], score[0]
        return torch.stack(total), torch.stack(score)


__getattr__ = deprecated_aliases("pyrozoo.inference.rws", {"ReweightedWakeSleepLoss": lambda: ReweightedWakeSleep})
