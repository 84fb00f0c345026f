r"""Importance-weighted evidence bounds: the Rényi-α family and its α = 0 member, IWAE.

With ``K`` draws :math:`\theta_k \sim q` and log-weights
:math:`\ell_k = \log p(\mathcal D, \theta_k) - \log q(\theta_k)`,

.. math::

    \hat{\mathcal L}_\alpha = \frac{1}{1-\alpha} \log \frac1K \sum_{k=1}^K e^{(1-\alpha)\ell_k}
    \qquad\text{(Li \& Turner 2016: the VR bound's } K\text{-sample estimate; Sagar-2020 note §3.2)}

* ``α = 0``: the importance-weighted bound of Burda et al. (2016),
  :math:`\mathbb E\hat{\mathcal L}_0 \le \log p(\mathcal D)`, non-decreasing in ``K``, equal
  to the ELBO at ``K = 1`` and tending to :math:`\log p(\mathcal D)` as ``K → ∞``.
* ``0 < α < 1``: :math:`\mathbb E\hat{\mathcal L}_\alpha \le \mathcal L_\alpha \le \log p(\mathcal D)`
  (Li & Turner, Theorems 1 and 2), a lower bound between IWAE and the ELBO.
* ``α < 0``: the exact :math:`\mathcal L_\alpha \ge \log p(\mathcal D)` (Theorem 1), but the
  ``K``-sample estimate is biased downwards (Theorem 2), so it is neither a lower nor an upper
  bound for finite ``K``.
* ``α > 1``: for any fixed draws the estimate is a power mean of the weights with exponent
  ``1 - α < 0``, hence at most their geometric mean, so
  :math:`\mathbb E\hat{\mathcal L}_\alpha \le \mathrm{ELBO} \le \log p(\mathcal D)`: a lower
  bound, looser than the ELBO. Allowed, but rarely useful.
* ``α → 1``: the ELBO, :math:`\frac1K\sum_k \ell_k` (the limit is taken by
  :class:`~pyrozoo.inference.ClosedFormKL_ELBO` or ``Trace_ELBO``; ``α = 1`` itself raises).

Gradients are the self-normalised :math:`\sum_k \hat w_{\alpha,k}\nabla\ell_k` with
:math:`\hat w_{\alpha,k} \propto e^{(1-\alpha)\ell_k}` (reparameterised guides; a guide site
with a non-zero score function raises, as in Pyro's ``RenyiELBO``).

**Minibatches (Sagar-2020 note §3.5).** On a subsampled data plate the likelihood enters
:math:`\ell_k` scaled by ``N/n``; the log-mean-exp of that noisy quantity is *not* unbiased for
the full-data bound, and the bias grows with ``N/n``. These objectives warn (once) when they
see a subsampled plate; prefer full batches (the bound is then exact).

Every importance-weighted objective records, after each evaluation, ``diagnostics``: the
effective sample size :math:`1/\sum_k \hat w_k^2` of the *importance* weights
:math:`\hat w_k \propto e^{\ell_k}` (in ``[1, K]``), the largest normalised weight and the
variance of the log-weights, as detached 0-d tensors (no host synchronisation);
:func:`~pyrozoo.inference.fit` adds them to its history.
"""

import math
import warnings
from typing import Dict, Tuple

import pyro
import torch
from pyro import poutine
from pyro.distributions.util import is_identically_zero, scale_and_mask
from pyro.infer.renyi_elbo import RenyiELBO as PyroRenyiELBO
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample
from pyro.util import warn_if_nan

from pyrozoo.distributions.semi_implicit import find_semi_implicit, semi_implicit_role
from pyrozoo.inference.direct import direct_arguments, direct_latent_sites, independent_sites
from pyrozoo.inference.elbo import DifferentiableLossELBO, _may_have_score_function
from pyrozoo.inference.trace_checks import check_model_sites, check_observed_shapes
from pyrozoo.poutine.stack import active_handlers
from pyrozoo.utils import deprecated_aliases

MINIBATCH_BIAS_WARNING = (
    "importance-weighted objective on a subsampled data plate: the log-mean-exp of N/n-scaled "
    "minibatch log-likelihoods is biased upwards (log-mean-exp is convex), so for K > 1 it is not a "
    "lower bound on the full-data evidence (the bias grows with N/n); "
    "use full batches where the data set allows"
)


def weight_diagnostics(log_weights: torch.Tensor) -> Dict[str, torch.Tensor]:
    """``ess`` (:math:`1/\\sum_k\\hat w_k^2`), ``max_weight`` (largest :math:`\\hat w_k`) and
    ``log_weight_var`` (unbiased variance of the log-weights) of a ``(K,)`` vector of
    log importance weights, normalised by max-subtraction (``logsumexp``); detached."""
    lw = log_weights.detach()
    log_w_hat = lw - torch.logsumexp(lw, 0)
    w_hat = log_w_hat.exp()
    return {
        "ess": torch.exp(-torch.logsumexp(2 * log_w_hat, 0)),
        "max_weight": w_hat.max(),
        "log_weight_var": lw.var() if lw.numel() > 1 else torch.zeros((), dtype=lw.dtype, device=lw.device),
    }


def _sum_to_particles(lp: torch.Tensor, num_particles: int, nesting: int, vectorized: bool) -> torch.Tensor:
    if not vectorized:
        return lp.sum()
    if lp.dim() > nesting:
        lp = lp.reshape(lp.shape[: lp.dim() - nesting] + (-1,)).sum(-1)
    return lp.reshape(-1).expand(num_particles) if lp.numel() == 1 else lp.reshape(num_particles)


def _refuse_semi_implicit_site(name, fn) -> None:
    """Reweighted wake-sleep evaluates ``log q`` at values it maps (detached or re-wrapped); a
    semi-implicit guide's surrogate density needs the mixing draw psi0 of the very tensor it
    sampled, which the mapped value no longer is (its estimate would silently drop psi0)."""
    if find_semi_implicit(fn) is not None:
        raise NotImplementedError(
            f"guide site {name!r} is semi-implicit: reweighted wake-sleep needs log q at copies of its draws, which a "
            "semi-implicit guide cannot give without its mixing draw; use DSIVI_ELBO or ImportanceWeighted_ELBO"
        )


class _TreatValues(Messenger):
    """Maps each latent value a guide draws through ``treat`` (see
    :meth:`_ImportanceWeights.traced`) before the trace records it and the guide uses it."""

    def __init__(self, treat, particle, nesting):
        super().__init__()
        self.treat, self.particle, self.nesting = treat, particle, nesting

    def _pyro_post_sample(self, msg):
        if msg["is_observed"] or site_is_subsample(msg):
            return
        fn = msg["fn"]
        _refuse_semi_implicit_site(msg["name"], fn)
        # vectorised particles: the particle plate is the leftmost of the nesting batch dims
        dim = None if self.nesting is None else msg["value"].dim() - fn.event_dim - self.nesting
        msg["value"] = self.treat(msg["name"], fn, msg["value"], particle=self.particle, particle_dim=dim)


class _ImportanceWeights:
    """Evaluation of ``K`` joint log-weights :math:`\\ell_k` for an objective, shared by the
    importance-weighted bounds, reweighted wake-sleep and importance resampling.

    Two paths compute the same numbers: a direct one for a model and guide that declare it
    (:class:`~pyrozoo.inference.direct.DirectParticlesModel` and
    :class:`~pyrozoo.inference.direct.DirectGuide`, e.g. a
    :class:`~pyrozoo.models.BayesianNeuralNetwork` with one prior site per parameter and a
    :class:`~pyrozoo.guides.SitewiseGuide` without plates), which draws ``K`` weight vectors at
    once and lets the model evaluate all of them together (a BNN runs its network with
    :func:`torch.func.vmap`; Pyro's ``vectorize_particles`` cannot: ``nn.Linear`` does not
    take a batch of weights), called with no handler active; and a
    trace-based one for any model and guide (sequential particles, or Pyro's vectorised
    particle plate when ``vectorize_particles=True`` and the model supports it).
    """

    def __init__(self, objective):
        self.objective = objective
        self.warned = False
        self.prior_drawn = set()  # latent sites left to the model's prior, warned about once

    def _warn_minibatch(self):
        if not self.warned:
            warnings.warn(MINIBATCH_BIAS_WARNING, stacklevel=4)
            self.warned = True

    @staticmethod
    def _check_stack():
        if active_handlers().weight_noise is not None:
            raise ValueError(
                "importance weights need one global weight sample per particle; local "
                "reparameterization / flipout sample per-example weights and do not apply here: evaluate the "
                "objective outside local_reparameterization() / flipout() (with fit: estimator=None)"
            )

    def direct(self, model, guide, num_particles, args, kwargs, treat_values=None):
        """``(values, log_joint, log_q)`` with ``(K, ...)`` values per site and ``(K,)``
        log-densities, or ``None`` when the direct path does not apply.

        ``treat_values(name, fn, value, particle=None, particle_dim=0)``, where given, maps
        each guide draw to the value the densities are evaluated at (reweighted wake-sleep
        shapes its gradient there); guides with a score-function term take the traced path."""
        if active_handlers().count or getattr(model, "log_likelihood_particles", None) is None:
            return None
        call = direct_arguments(model, guide, args, kwargs)
        if call is None:
            return None
        names, x, y, subsample = call
        sites = direct_latent_sites(model, names, x)
        if sites is None or not independent_sites(guide, sites):
            return None  # K particles are drawn site by site, all at once: sites must be independent
        N = getattr(model, "dataset_size", None)
        if N is not None and len(y) < N:
            self._warn_minibatch()
        K = num_particles
        values, log_q, log_p = {}, 0.0, 0.0
        posteriors = [(name, prior, guide.posterior(name)) for name, prior in sites]
        if any(_may_have_score_function(q) for _, _, q in posteriors):
            return None  # the traced path refuses (or, with treat_values, handles) them
        for name, prior, q in posteriors:
            value = q.rsample((K,))
            if treat_values is not None:
                _refuse_semi_implicit_site(name, q)
                value = treat_values(name, q, value, particle_dim=0)
            values[name] = value
            with semi_implicit_role("guide"):
                log_q = log_q + q.log_prob(value).reshape(K, -1).sum(-1)
            with semi_implicit_role("model"):
                log_p = log_p + prior.log_prob(value).reshape(K, -1).sum(-1)
        log_lik = model.log_likelihood_particles(values, x, y, subsample)
        return values, log_p + log_lik, log_q

    def traced(self, model, guide, args, kwargs, treat_values=None):
        """``(guide traces, log_joint, log_q)`` from Pyro traces, with ``(K,)`` log-densities.
        With ``treat_values`` (see :meth:`direct`; ``particle`` is the particle's index on the
        sequential path, ``particle_dim`` the particle dim of the value on the vectorised one)
        each guide value is mapped as the guide draws it, so later guide sites, the guide's
        densities and the model all see the mapped value; guides with a score-function term
        are then left to the caller."""
        self._check_stack()
        obj = self.objective
        K = obj.num_particles
        vectorized = obj.vectorize_particles and K > 1
        if vectorized and obj.max_plate_nesting == float("inf"):
            obj._guess_max_plate_nesting(model, guide, args, kwargs)
        if vectorized:
            model, guide = obj._vectorized_num_particles(model), obj._vectorized_num_particles(guide)
        # plate dims right of the particle plate are summed; the particle dim is kept
        nesting = obj.max_plate_nesting - 1 if vectorized else 0
        log_joint, log_q, guide_traces = [], [], []
        for k in range(1 if vectorized else K):
            if treat_values is None:
                guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
            else:
                with _TreatValues(treat_values, None if vectorized else k, obj.max_plate_nesting if vectorized else None):
                    guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
            model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
            check_model_sites(type(obj).__name__, model_trace, guide_trace, self.prior_drawn)
            if pyro.infer.util.is_validation_enabled():
                # (as Trace_ELBO: a target of another shape than its plates would broadcast silently)
                check_observed_shapes(model_trace, obj.max_plate_nesting)
            lj, lq = 0.0, 0.0
            # explicit roles: a semi-implicit guide must be evaluated with the psi0 of its own
            # sample (a miss raises), a semi-implicit prior with fresh mixing draws
            with semi_implicit_role("model"):
                for name, site in model_trace.nodes.items():
                    if site["type"] != "sample" or site_is_subsample(site):
                        continue
                    if not site["is_observed"] and name not in guide_trace.nodes:
                        # drawn from its own prior inside the model (warned above): p(u) / p(u) = 1 in the
                        # weight (as ClosedFormKL_ELBO gives it no KL); counting log p(u) would bias the bound
                        continue
                    for frame in site["cond_indep_stack"]:
                        if frame.vectorized and frame.full_size is not None and frame.size < frame.full_size:
                            self._warn_minibatch()
                    lp = scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"], site["mask"])
                    lj = lj + _sum_to_particles(lp, K, nesting, vectorized)
            with semi_implicit_role("guide"):
                for site in guide_trace.nodes.values():
                    if site["type"] != "sample" or site_is_subsample(site):
                        continue
                    fn = site["fn"]
                    if treat_values is None and (not fn.has_rsample or not is_identically_zero(fn.score_parts(site["value"]).score_function)):
                        raise NotImplementedError(
                            f"guide site {site['name']!r} is not fully reparameterized; the importance-weighted "
                            "bounds here need reparameterized guides"
                        )
                    lp = scale_and_mask(fn.log_prob(site["value"]), site["scale"], site["mask"])
                    lq = lq + _sum_to_particles(lp, K, nesting, vectorized)

            # a guide without latent sites leaves lq a plain 0: it goes where log p is
            lj = torch.as_tensor(lj)
            log_joint.append(lj)
            log_q.append(torch.as_tensor(lq, dtype=lj.dtype, device=lj.device))
            guide_traces.append(guide_trace)
        if vectorized:
            return guide_traces, log_joint[0], log_q[0]
        return guide_traces, torch.stack(log_joint), torch.stack(log_q)


class RenyiELBO(DifferentiableLossELBO, PyroRenyiELBO):
    r"""The variational Rényi bound's ``K``-sample estimate :math:`\hat{\mathcal L}_\alpha` (Li & Turner 2016),
    with ``differentiable_loss`` (Pyro's ``RenyiELBO`` has only ``loss`` and
    ``loss_and_grads``), so it works with :func:`~pyrozoo.inference.fit` and any zoo guide.

    Which α gives a bound, and on what, is listed in the module docstring: ``α ≥ 0`` is a
    lower bound on :math:`\log p(\mathcal D)` in expectation (between the ELBO and IWAE for
    ``0 ≤ α < 1``, below the ELBO for ``α > 1``); ``α < 0`` is not a bound for finite ``K``.
    ``α = 1`` raises (use :class:`~pyrozoo.inference.ClosedFormKL_ELBO`).

    The ``loss`` is :math:`-\hat{\mathcal L}_\alpha`; its gradient is the self-normalised
    :math:`-\sum_k \hat w_{\alpha,k}\nabla\ell_k`. Latent variables local to a plate are
    weighted jointly with the global ones (one weight per particle over all sites); Pyro's
    ``RenyiELBO`` instead factorises over independent plates.

    :param float alpha: the order α (≠ 1).
    :param int num_particles: ``K``, the number of importance samples.
    :param bool vectorize_particles: trace-based path only (the BNN direct path is always
        vectorised).
    :ivar dict diagnostics: ``ess``, ``max_weight``, ``log_weight_var`` of the last evaluation
        (see :func:`weight_diagnostics`; importance weights :math:`\propto e^{\ell_k}`, whatever α).
    """

    #: the estimators :func:`~pyrozoo.inference.fit` may evaluate it under: none that draws
    #: weights per example (each particle's weight needs one global draw of every latent)
    accepted_estimators = (None,)

    def __init__(self, alpha: float = 0.0, num_particles: int = 2, max_plate_nesting=float("inf"), vectorize_particles: bool = False, **kwargs):
        if alpha == 1:
            raise ValueError("alpha = 1 is the ELBO: use ClosedFormKL_ELBO (or pyro.infer.Trace_ELBO) for it")
        if not math.isfinite(alpha):
            raise ValueError(f"alpha must be finite, got {alpha}")
        if not (isinstance(num_particles, int) and num_particles >= 1):
            raise ValueError(f"num_particles must be a positive int, got {num_particles!r}")
        super().__init__(alpha=alpha, num_particles=num_particles, max_plate_nesting=max_plate_nesting, vectorize_particles=vectorize_particles, **kwargs)
        self._weights = _ImportanceWeights(self)
        self.diagnostics: Dict[str, torch.Tensor] = {}

    def log_weights(self, model, guide, *args, **kwargs) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(log_joint, log_q)``, each ``(K,)``: :math:`\\log p(\\mathcal D,\\theta_k)` (with the
        plates' scales) and :math:`\\log q(\\theta_k)` of ``K`` fresh guide draws (differentiable)."""
        direct = self._weights.direct(model, guide, self.num_particles, args, kwargs)
        if direct is not None:
            return direct[1], direct[2]
        _, log_joint, log_q = self._weights.traced(model, guide, args, kwargs)
        return log_joint, log_q

    def differentiable_loss(self, model, guide, *args, **kwargs) -> torch.Tensor:
        log_joint, log_q = self.log_weights(model, guide, *args, **kwargs)
        log_w = log_joint - log_q
        self.diagnostics = weight_diagnostics(log_w)
        K = log_w.shape[0]
        scaled = (1.0 - self.alpha) * log_w
        bound = (torch.logsumexp(scaled, 0) - math.log(K)) / (1.0 - self.alpha)
        if pyro.infer.util.is_validation_enabled():
            warn_if_nan(bound, "loss")
        return -bound


class ImportanceWeighted_ELBO(RenyiELBO):
    r"""The importance-weighted bound of Burda et al. (2016), Rényi α = 0:
    :math:`\hat{\mathcal L}_K = \log\frac1K\sum_k w_k`, with
    :math:`\mathbb E\hat{\mathcal L}_K \le \log p(\mathcal D)`, non-decreasing in ``K``
    (Burda et al., Theorem 1), the ELBO at ``K = 1``. Domke & Sheldon (2018) show it is the
    ELBO of the implied distribution :math:`q_K` (draw ``K``, resample one ∝ :math:`w_k`), so
    predictions should use :func:`~pyrozoo.inference.importance_resampled_samples`.
    """

    def __init__(self, num_particles: int = 8, max_plate_nesting=float("inf"), vectorize_particles: bool = False, **kwargs):
        super().__init__(alpha=0.0, num_particles=num_particles, max_plate_nesting=max_plate_nesting, vectorize_particles=vectorize_particles, **kwargs)


__getattr__ = deprecated_aliases("pyrozoo.inference.importance_weighted", {"Renyi_ELBO": lambda: RenyiELBO})
