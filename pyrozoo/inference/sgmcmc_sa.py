r"""SG-MCMC-SA: adaptive empirical Bayes for sparse deep learning (Deng et al. 2019).

Algorithm 1 alternates a stochastic-gradient MCMC step on the weights :math:`\beta`,
driven by :math:`\nabla_\beta Q` (the model's log-joint with the SSGL prior in its
empirical-Bayes form, :class:`~pyrozoo.models.spike_and_slab.SpikeAndSlabPrior`), with a
stochastic-approximation (SA) step that moves every latent variable a fraction
:math:`\omega_k` of the way to its closed-form optimum given the new weights:

.. math::

    \theta^{(k+1)} = (1 - \omega_{k+1})\, \theta^{(k)} + \omega_{k+1}\, \tilde\theta^{(k+1)},
    \qquad \theta = (\rho, \kappa_0, \kappa_1, \sigma, \delta).

:class:`StochasticApproximation` is that SA step, an
:class:`~pyrozoo.inference.sgmcmc.Adaptation` of :class:`~pyrozoo.inference.SGLD`
(SGLD-SA) or :class:`~pyrozoo.inference.SGHMC` (SGHMC-SA). :math:`\omega \equiv 1` is the
EM variant (SGLD-EM / SGHMC-EM); a sampler without it runs the same hierarchical model
with the latent variables frozen at their initial values (the paper's plain SGLD/SGHMC).
Magnitude pruning (:class:`~pyrozoo.inference.pruning.MagnitudePruning`) and simulated
annealing (a growing ``inverse_temperature`` schedule) combine with it.

Implementation choices (see ``shared/notes/sgmcmc-sa.md`` §4):

* :math:`\tilde\rho` is computed in log space (Eq. 12 as a sigmoid of a log-odds); the
  official code's ratio of exp-space densities is NaN in float32 for :math:`|\beta| \ge 0.6`
  under the CIFAR hyperparameters.
* The densities in Eq. 12 carry :math:`\sigma` as in the paper.
* :math:`\tilde\rho` and :math:`\tilde\sigma` use the weights *after* the step, as the
  official code does; the regression residual :math:`I` of Eq. 14 comes from the step's
  own forward pass (before the step), which avoids a second forward pass.
* :math:`\sigma` itself is averaged (the paper), not :math:`\sigma^2` (the code).
* The regression root uses :math:`R_a = N + p + \nu + 2`, the exact stationary point of
  Eq. 10 (the paper drops the ``+ 2``; the difference is negligible).
"""

import math
from typing import Dict, Optional

import torch
from pyro.poutine.util import site_is_subsample

from pyrozoo.distributions.ssgl_expectation import SSGLExpectedLogDensity
from pyrozoo.inference.diagnostics import SPIKE_ONLY_INCLUSION, SPIKE_ONLY_RATE, SpikeOnlyLeftWarning, SpikeOnlyWarning, spike_only, spike_only_left
from pyrozoo.inference.sgmcmc import Adaptation
from pyrozoo.inference.step_sizes import ScheduleLike, as_schedule, checked_value
from pyrozoo.models.likelihoods import GaussianLikelihood
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior

_LOG_2 = math.log(2.0)
_LOG_2PI = math.log(2.0 * math.pi)


def rho_tilde(beta: torch.Tensor, sigma: torch.Tensor, delta: torch.Tensor, v0: float, v1: float) -> torch.Tensor:
    r"""Eq. 12: :math:`P(\gamma = 1 \mid \beta, \delta) = a / (a + b)` with
    :math:`a = \phi(\beta; 0, \sigma^2 v_1)\,\delta` and
    :math:`b = (2\sigma v_0)^{-1} e^{-|\beta|/(\sigma v_0)} (1 - \delta)`, evaluated as
    :math:`\mathrm{sigmoid}(\log a - \log b)` so that it stays finite for any :math:`\beta`
    in any precision."""
    return _rho_tilde(beta.abs(), beta.square(), sigma, delta, v0, v1)


def _rho_tilde(abs_beta, sq_beta, sigma, delta, v0, v1):
    # log a - log b = c + |beta| / (sigma v0) - beta^2 / (2 sigma^2 v1), with c a 0-dim tensor
    c = torch.log(delta) - torch.log1p(-delta) + torch.log(2.0 * v0 * sigma) - 0.5 * (_LOG_2PI + torch.log(sigma.square() * v1))
    log_odds = torch.addcmul(c, abs_beta, 1.0 / (sigma * v0))
    log_odds.addcmul_(sq_beta, -0.5 / (v1 * sigma.square()))
    return log_odds.sigmoid_()


def kappa_tilde(rho: torch.Tensor, v0: float, v1: float):
    r"""Eq. 13: :math:`\tilde\kappa_0 = (1 - \rho)/v_0`, :math:`\tilde\kappa_1 = \rho / v_1`."""
    return (1.0 - rho) / v0, rho / v1


def sigma_tilde(l1_norm: torch.Tensor, l2_norm: torch.Tensor, num_sparse: int, nu: float, lam: float, residual: Optional[torch.Tensor] = None, num_observations: float = 0.0) -> torch.Tensor:
    r"""Eq. 14: the positive root of :math:`-R_a \sigma^2 + R_b \sigma + R_c = 0`, the
    maximiser of :math:`Q_1` over :math:`\sigma`.

    :param l1_norm: :math:`R_b = \sum_{l \in \mathfrak X} \|V_{0l} \beta_l\|_1 = \sum \kappa_0 |\beta|`.
    :param l2_norm: :math:`J = \sum \kappa_1 \beta^2`.
    :param num_sparse: :math:`p`.
    :param residual: regression only: :math:`I = \frac{N}{n} \sum_{i \in S} (y_i - \psi(x_i))^2`.
        ``None`` is the classification form (the likelihood does not involve :math:`\sigma`):
        :math:`C_a = p + \nu + 2`, :math:`C_c = J + \nu\lambda`.
    :param num_observations: regression only: :math:`N` (number of scalar observations).
    """
    a = num_sparse + nu + 2.0 + (num_observations if residual is not None else 0.0)
    c = l2_norm + nu * lam
    if residual is not None:
        c = c + residual
    return (l1_norm + torch.sqrt(l1_norm.square() + 4.0 * a * c)) / (2.0 * a)


def delta_tilde(rho_sum: torch.Tensor, num_weights: int, a: float, b: float) -> torch.Tensor:
    r"""Eq. 15: :math:`\arg\max_\delta Q_2 = (\sum_j \rho_{lj} + a - 1) / (a + b + p_l - 2)`."""
    # a - 1 first: at the spike-only state the sum falls below 1e-16 and sum + a - 1 would round it
    # to 0 (with the paper's a = 1), so that delta could never grow back
    return (rho_sum + (a - 1.0)) / (a + b + num_weights - 2.0)


def _drawn_from(fn, state, name: str) -> bool:
    """Whether the site distribution ``fn`` is the Eq. 10 expectation on ``state``'s own tensors."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    # (compared by memory: expanding the distribution keeps views of the same tensors)
    if not isinstance(fn, SSGLExpectedLogDensity):
        return False
    return fn.rho.data_ptr() == state.rho[name].data_ptr() and fn.sigma.data_ptr() == state.sigma.data_ptr()


class StochasticApproximation(Adaptation):
    r"""The SA step of Algorithm 1 for an SSGL prior in its empirical-Bayes form.

    :param prior: the model's :class:`~pyrozoo.models.spike_and_slab.SpikeAndSlabPrior`,
        after :meth:`~pyrozoo.models.spike_and_slab.SpikeAndSlabPrior.empirical_bayes`.
    :param step_size: :math:`\omega_k \in [0, 1]` (number or schedule); 1 is the EM variant.
    :param bool update_sigma: update :math:`\sigma` (Eq. 14); the authors recommend
        freezing :math:`\sigma` and :math:`\delta` for deep networks.
    :param bool update_delta: update :math:`\delta` (Eq. 15).
    :param tie_noise: the regression model of Eq. 5, whose noise variance is
        :math:`\sigma^2`: condition the likelihood's noise-precision site on
        :math:`1/\sigma^2` and use the regression root of Eq. 14. ``None`` ties when the
        model's likelihood has a noise-precision site (``noise_site``).
    :param str noise_site: name of that site (default: the model likelihood's).
    """

    def __init__(self, prior: SpikeAndSlabPrior, step_size: ScheduleLike, *, update_sigma: bool = True, update_delta: bool = True, tie_noise: Optional[bool] = None, noise_site: Optional[str] = None):
        if not isinstance(prior, SpikeAndSlabPrior):
            raise TypeError(f"prior must be a SpikeAndSlabPrior, got {type(prior).__name__}")
        if prior.state is None:
            raise ValueError(
                "the prior is in its hierarchical form; SA updates the latent variables of its empirical-Bayes form, "
                "created by prior.empirical_bayes(...): for a BayesianNeuralNetwork, prior.empirical_bayes(model); for a "
                "plain Pyro model, create the prior with sparse=None, call prior.empirical_bayes({'<site>': shape, ...}) "
                "naming the model's sparse weight sites, and draw each of them in the model with "
                "prior.sample_sparse('<site>')"
            )
        self.prior = prior
        self.step_size = as_schedule(step_size, "step_size")
        checked_value(self.step_size, 1, "the SA step size omega", allow_zero=True, maximum=1.0)
        self.update_sigma = bool(update_sigma)
        self.update_delta = bool(update_delta)
        self.tie_noise = tie_noise
        self.noise_site = noise_site
        self._tied = False
        self._observation_sites = None
        self._rho_sums, self._deltas = [], []  # per history row, for rule 4
        self._at_spike_only = False  # reported there, and not reported out of it since

    @property
    def state(self):
        return self.prior.state

    def _resolve_noise_site(self, model) -> Optional[str]:
        if self.noise_site is not None:
            return self.noise_site
        likelihood = getattr(model, "likelihood", None)
        if isinstance(likelihood, GaussianLikelihood) and likelihood.precision_prior is not None:
            return likelihood.PRECISION_SITE
        return None

    def conditioned_sites(self):
        return (self.noise_site,) if self._tied else ()

    def setup(self, sampler, trace):
        state = self.state
        missing = [n for n in state.names if n not in sampler.site_names]
        if missing:
            raise ValueError(
                f"sparse parameters {missing} are not sampled sites of the model (sampled: {sampler.site_names}); in a "
                "plain Pyro model draw each of them with prior.sample_sparse(name)"
            )
        # SA moves this prior's state: a sparse site drawn from anything else would never feel it
        foreign = [n for n in state.names if not _drawn_from(trace.nodes[n]["fn"], state, n)]
        if foreign:
            raise ValueError(
                f"sparse site(s) {foreign} are not drawn from this prior's empirical-Bayes form, so the SA updates would "
                "not reach the model: draw them with prior.sample_sparse(name) (a BayesianNeuralNetwork built with this "
                "prior does so itself)"
            )
        first = sampler.unconstrained(state.names[0])
        state.to(first.device, first.dtype)
        self._observation_sites = [
            name for name, site in trace.nodes.items()
            if site["type"] == "sample" and site["is_observed"] and name not in sampler.site_names
            and name != self.noise_site and not site_is_subsample(site)
        ]

    def attach(self, model):
        """Decides whether the noise precision is tied to :math:`\\sigma`."""
        site = self._resolve_noise_site(model)
        tie = self.tie_noise if self.tie_noise is not None else site is not None
        if tie and site is None:
            raise ValueError("tie_noise=True needs a noise-precision site: give noise_site or use a Gaussian likelihood with a precision prior")
        self.noise_site = site
        self._tied = bool(tie)

    @property
    def regression(self) -> bool:
        """True when :math:`\\sigma` is also the noise scale (regression root of Eq. 14)."""
        return self._tied

    def conditions(self):
        if not self._tied:
            return {}
        return {self.noise_site: self.state.sigma.square().reciprocal()}

    def _residual(self, trace):
        """:math:`I` and :math:`N` of Eq. 14 from the step's Gaussian observation sites."""
        residual, count = None, 0.0
        for name in self._observation_sites:
            site = trace.nodes[name]
            fn = site["fn"]
            base = fn
            while hasattr(base, "base_dist"):
                base = base.base_dist
            if not isinstance(base, torch.distributions.Normal):
                raise ValueError(f"the regression update of sigma (Eq. 14) needs Gaussian observations; site {name!r} is {type(base).__name__}")
            scale = site["scale"]
            sq = (site["value"].detach() - fn.mean.detach()).square().sum() * scale
            residual = sq if residual is None else residual + sq
            count += scale * site["value"].numel()
        return residual, count

    @torch.no_grad()
    def update(self, sampler, trace, k):
        omega = checked_value(self.step_size, k, "the SA step size omega", allow_zero=True, maximum=1.0)
        prior, state = self.prior, self.state
        sigma = state.sigma
        l1_norm = torch.zeros((), device=sigma.device, dtype=sigma.dtype)
        l2_norm = torch.zeros((), device=sigma.device, dtype=sigma.dtype)
        for name in state.names:
            beta = sampler.unconstrained(name).detach()
            abs_beta, sq_beta = beta.abs(), beta.square()
            rho = state.rho[name]
            v0, v1 = prior.v0_of(name), prior.v1_of(name)
            rho.lerp_(_rho_tilde(abs_beta, sq_beta, sigma, state.delta[name], v0, v1), omega)
            k0, k1 = kappa_tilde(rho, v0, v1)
            state.kappa0[name].lerp_(k0, omega)
            state.kappa1[name].lerp_(k1, omega)
            l1_norm += torch.dot(state.kappa0[name].reshape(-1), abs_beta.reshape(-1))
            l2_norm += torch.dot(state.kappa1[name].reshape(-1), sq_beta.reshape(-1))
            if self.update_delta:
                state.delta[name].lerp_(delta_tilde(rho.sum(), rho.numel(), prior.a, prior.b), omega)
        if self.update_sigma:
            residual, count = self._residual(trace) if self._tied else (None, 0.0)
            if residual is not None:  # data-parallel: this rank's part's estimate -> the global batch's
                residual = sampler.average_over_ranks(residual)
            target = sigma_tilde(l1_norm, l2_norm, state.num_sparse, prior.nu, prior.lam, residual, count)
            sigma.lerp_(target, omega)

    def check(self, row):
        """Rule 4 (:func:`~pyrozoo.inference.diagnostics.spike_only`) on the SSGL state of each
        history row: a chain that stays at the spike-only fixed point gets a
        :class:`~pyrozoo.inference.SpikeOnlyWarning`, naming what to try, and the run's status
        ``"collapsed"``; a chain reported there that leaves again (a weight back in the slab:
        the state is stable only while every weight stays near zero) gets a
        :class:`~pyrozoo.inference.SpikeOnlyLeftWarning`, which clears that status."""
        state = self.state
        # (the row's logging scalars, read from the device once already)
        self._rho_sums.append(row["rho_mean"] * state.num_sparse)
        self._deltas.append(row["delta_mean"])
        if self._at_spike_only:
            left = spike_only_left(self._rho_sums)
            if left is None:
                return None
            self._at_spike_only = False
            left.update(delta=row["delta_mean"], sigma=row["sigma"])
            return SpikeOnlyLeftWarning, (
                f"the chain left the spike-only fixed point: for the last {left['rows']} history rows the inclusion probabilities "
                f"summed to at least {SPIKE_ONLY_INCLUSION:g} (now {left['rho_sum']:.3g}, delta {left['delta']:.3g}, sigma {left['sigma']:.3g}), "
                "so it selects again and the run is no longer marked collapsed; the draws recorded while it was there are in its "
                "posterior average (a later burn-in leaves them out)"), left
        found = spike_only(self._rho_sums, self._deltas, state.num_sparse)
        if found is None:
            return None
        self._at_spike_only = True
        found["sigma"] = row["sigma"]
        return SpikeOnlyWarning, (
            f"the chain is at the spike-only fixed point: for the last {found['rows']} history rows the inclusion "
            f"probabilities summed to less than {SPIKE_ONLY_INCLUSION:g} over {state.num_sparse} weights and the prior inclusion "
            f"rate delta was below {SPIKE_ONLY_RATE:g} / {state.num_sparse} (now {found['rho_sum']:.3g} and {found['delta']:.3g}, "
            f"sigma {found['sigma']:.3g}); it selects nothing. Start the sparse weights near zero "
            "(init_values={name: 0.1 * torch.randn(shape)}; plain models get that start by default), let the weights move "
            "before the SA updates do (a larger offset of the step-size schedule, e.g. PolynomialDecay(1.0, 0.7, "
            "offset=1000.0)), or run several chains"), found

    def logging(self) -> Dict[str, torch.Tensor]:
        state = self.state
        total = sum(r.sum() for r in state.rho.values())
        return {"sigma": state.sigma, "rho_mean": total / state.num_sparse, "delta_mean": torch.stack(list(state.delta.values())).mean()}

    def state_dict(self):
        return {"ssgl": self.state.state_dict(), "rho_sums": list(self._rho_sums), "deltas": list(self._deltas), "at_spike_only": self._at_spike_only}

    def load_state_dict(self, state):
        self.state.load_state_dict(state["ssgl"])
        # (checkpoints written before rule 4 have no rows: the rule starts afresh)
        self._rho_sums, self._deltas = list(state.get("rho_sums", [])), list(state.get("deltas", []))
        self._at_spike_only = bool(state.get("at_spike_only", False))
