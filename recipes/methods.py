"""Every method of the zoo, declared once, as data.

A :class:`MethodSpec` says what a method *is* — its prior, its guide, its objective (or its
sampler), its gradient estimator, its KL schedule and its own defaults — and nothing about
where it runs. The protocols (UCI regression :mod:`recipes.uci_vi` / :mod:`recipes.uci_sgmcmc`
/ :mod:`recipes.uci_importance_weighted` / :mod:`recipes.uci_rdp`, MNIST
:mod:`recipes.mnist_mlp`, the comparison harness through them) supply the network, the
likelihood, the data and the training budget, and evaluate these declarations.

Adding a method: write its prior and guide in :mod:`pyrozoo`, add one ``MethodSpec`` to
:data:`METHODS` here, list its name in the protocols that should run it, and add it to the
tests' case list (``tests/recipes/test_methods.py``).

Factories take the run's :class:`~recipes.config.Settings` (``s``), so any default below is
overridden by the run's ``extra`` settings without the protocols knowing the method.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional

import pyro
import torch
from pyro.infer.autoguide import AutoGuideList
from pyro.infer.autoguide.initialization import InitMessenger

from pyrozoo.guides import BayesianCompressionGuide, DeltaGuide, MeanFieldNormalGuide, RadialDirectionalGuide, SemiImplicitGuide, SparseVariationalDropoutGuide
from pyrozoo.guides.base import init_to_network
from pyrozoo.inference import (
    DSIVI_ELBO,
    SGHMC,
    SGLD,
    BlundellKLReweighting,
    ClosedFormKL_ELBO,
    ImportanceWeighted_ELBO,
    LinearKLWarmup,
    Renyi_ELBO,
    ReweightedWakeSleepLoss,
)
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.models import GroupHorseshoePrior, GroupNormalJeffreysPrior, LogUniformPrior, NormalGammaPrior, NormalPrior, RadialDirectionalPrior, ScaleMixturePrior, SpikeAndSlabPrior
from recipes.config import Settings

#: defaults every method shares (a method's own ``defaults`` override them)
COMMON_DEFAULTS = {"prior_scale": 1.0, "init_scale": 1e-3}


@dataclass(frozen=True)
class MethodSpec:
    """A method: prior, guide and objective (variational) or sampler (SG-MCMC).

    :param prior: ``s -> Prior`` (a :class:`pyrozoo.models.Prior` over the network's parameters).
    :param guide: ``(model, s) -> guide``; ``None`` for a sampler.
    :param objective: ``s -> ELBO``; ``None``: :func:`pyrozoo.inference.fit`'s default.
    :param estimator: :func:`~pyrozoo.inference.fit`'s gradient estimator (``"local"`` for
        local reparameterization), ``None`` for its default.
    :param kl_schedule: ``(s, epochs) -> KLSchedule or None``.
    :param sampler: ``(model, s, lr, **kwargs) -> StochasticGradientMCMC``; ``None`` for VI.
    :param resample: predict from the importance-resampled guide (:math:`q_K`, Domke & Sheldon 2018).
    :param adaptations: ``(model, s) -> list`` of a sampler's adaptations of the prior's own
        latent variables (SG-MCMC-SA's stochastic approximation), set up on the built model.
    :param defaults: the method's own defaults, over :data:`COMMON_DEFAULTS`.
    """

    name: str
    description: str
    prior: Callable[[Settings], Any]
    guide: Optional[Callable[[Any, Settings], Any]] = None
    objective: Optional[Callable[[Settings], Any]] = None
    estimator: Optional[str] = None
    kl_schedule: Optional[Callable[[Settings, int], Any]] = None
    sampler: Optional[Callable[..., Any]] = None
    resample: bool = False
    adaptations: Optional[Callable[[Any, Settings], list]] = None
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if (self.guide is None) == (self.sampler is None):
            raise ValueError(f"method {self.name!r} must declare exactly one of a guide (variational) or a sampler (SG-MCMC)")
        object.__setattr__(self, "defaults", {**COMMON_DEFAULTS, **self.defaults})

    @property
    def is_sampler(self) -> bool:
        return self.sampler is not None

    @property
    def sampler_family(self) -> str:
        """``"sgld"`` or ``"sghmc"``: the key of per-sampler settings (e.g. learning rates)."""
        return self.sampler.__name__

    def fit_arguments(self, s: Settings, epochs: int) -> Dict[str, Any]:
        """The keyword arguments of :func:`pyrozoo.inference.fit` this method sets."""
        kwargs = {}
        if self.objective is not None:
            kwargs["objective"] = self.objective(s)
        if self.estimator is not None:
            kwargs["estimator"] = self.estimator
        schedule = self.kl_schedule(s, epochs) if self.kl_schedule is not None else None
        if schedule is not None:
            kwargs["kl_schedule"] = schedule
        return kwargs


def predicts_with_one_sample(guide) -> bool:
    """A point estimate's predictive needs one draw."""
    return isinstance(guide, DeltaGuide)


# ---- building blocks of the declarations ------------------------------------------------


def normal_prior(s):
    return NormalPrior(s["prior_scale"])


def mean_field(model, s):
    return MeanFieldNormalGuide(model, init_scale=s["init_scale"])


def delta(model, s):
    return DeltaGuide(model)


def closed_form_kl(s):
    return ClosedFormKL_ELBO()


def monte_carlo_kl(s):
    return pyro.infer.Trace_ELBO()


def warmup(s, epochs):
    """A linear KL warm-up over the first ``warmup_fraction`` of the epochs."""
    return LinearKLWarmup(0.0, max(s["warmup_fraction"] * epochs, 1e-3))


def sparse_vd_guide(model, s):
    """The dropout guide over the weights; a likelihood's own latent variables (a noise
    precision) keep the mean-field guide's log-normal posterior, as in the other methods."""
    latent = [name for name, _ in model.likelihood.latent_sites(_probe(model)).values()]
    if not latent:
        return SparseVariationalDropoutGuide(model)
    # the list and the mean-field part trace the model for their prototypes: at the network's
    # values, as the log-uniform prior is improper and cannot be sampled
    traceable = InitMessenger(init_to_network)(model)
    guide = AutoGuideList(traceable)
    guide.append(SparseVariationalDropoutGuide(model, hide=latent))
    guide.append(MeanFieldNormalGuide(traceable, hide=model.random_parameter_names, init_scale=s["init_scale"]))
    return guide


def _probe(model):
    p = next(model.net.parameters())
    return torch.zeros((), device=p.device, dtype=p.dtype)


def bayesian_compression_guide(model, s):
    return BayesianCompressionGuide(model)


def sgld(model, s, lr, **kwargs):
    return SGLD(model, lr=lr, **kwargs)


def sghmc(model, s, lr, **kwargs):
    return SGHMC(model, lr=lr, momentum=s["momentum"], **kwargs)


SAMPLER_DEFAULTS = {"momentum": 0.9, "burn_in": 0.5}


def spike_and_slab_prior(s):
    """The SSGL prior of Deng et al. (2019) on the weight matrices (biases ``N(0, bias_scale^2)``)."""
    return SpikeAndSlabPrior(
        s["v0"], s["v1"], sparse=s["sparse"], gaussian_scale=s["bias_scale"],
        nu=s["nu"], lam=s["lam"], a=s["a"], b=s["b"],
    )


def stochastic_approximation(step: Optional[str]):
    """``(model, s) -> [StochasticApproximation]`` of the SSGL prior's latent variables
    (rho, kappa, sigma, delta; Deng et al. 2019, Algorithm 1) from its empirical-Bayes start:
    step ``"sa"`` is omega_k = scale * (offset + k)^-power, ``"em"`` omega = 1 (each latent
    variable jumps to its optimum), ``None`` keeps them at their start (no adaptation)."""

    def adaptations(model, s):
        model.prior.empirical_bayes(model.net, sigma=s["sigma"], rho=0.5, kappa0=s["kappa0"], kappa1=s["kappa1"], delta=0.5)
        if step is None:
            return []
        omega = s["omega"]
        if step == "em":
            omega = 1.0
        elif isinstance(omega, (tuple, list)):
            scale, power, offset = omega
            omega = PolynomialDecay(scale, power, offset=offset)
        return [StochasticApproximation(model.prior, omega, update_delta=s["update_delta"])]

    return adaptations


#: Deng et al. (2019)'s SSGL prior and SA settings (v0: per data set, from the protocol);
#: ``sparse`` selects the parameters under the spike-and-slab (the rest: N(0, bias_scale^2));
#: ``kappa0`` / ``kappa1`` start at their Eq. 13 values when ``None``
SSGL_DEFAULTS = {
    **SAMPLER_DEFAULTS, "sparse": {"expose_parameters": ["weight"]}, "v1": 10.0, "a": 1.0, "b": 10.0, "nu": 1.0, "lam": 1.0, "sigma": 1.0, "bias_scale": 100.0,
    "kappa0": None, "kappa1": None, "update_delta": True,
    "omega": (1.0, 0.7, 100.0),  # omega_k = scale * (offset + k)^-power, or a schedule
}


def radial_directional_prior(s):
    return RadialDirectionalPrior(grouping=s["grouping"], local_scale=s["local_scale"], global_scale=s["global_scale"], direction_epsilon=s["direction_epsilon"])


def radial_directional_guide(model, s):
    return RadialDirectionalGuide(model, init_scale=s["init_scale"], init_direction_epsilon=s["init_direction_epsilon"])


# ---- the declarations -------------------------------------------------------------------

METHODS: Dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec("map", "MAP estimate (Delta guide) under a N(0, 1) weight prior", normal_prior, delta),
        MethodSpec("mfvi", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, local reparameterization", normal_prior, mean_field, closed_form_kl, estimator="local"),
        MethodSpec("mfvi-mc", "mean-field Gaussian VI, N(0, 1) prior, Pyro Trace_ELBO (Monte Carlo KL), weight sampling", normal_prior, mean_field, monte_carlo_kl),
        MethodSpec("mfvi-cf", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, weight sampling (no local reparameterization)", normal_prior, mean_field, closed_form_kl),
        MethodSpec(
            "bbb", "Bayes by Backprop: scale-mixture prior, Monte Carlo KL, weight sampling",
            lambda s: ScaleMixturePrior(*s["mixture"]), mean_field, closed_form_kl,
            # Blundell et al. (2015) eq. 9's minibatch KL weights, on request
            kl_schedule=lambda s, epochs: BlundellKLReweighting() if s["blundell"] else None,
            defaults={"mixture": (0.5, 1.0, math.exp(-6)), "blundell": False},  # (pi, sigma1, sigma2), eq. 7
        ),
        MethodSpec(
            "dsivi", "DSIVI: semi-implicit posterior under the marginal Normal-Gamma prior, DSIVI_ELBO(K1, K2)",
            lambda s: NormalGammaPrior(*s["normal_gamma"], form="marginal", num_mixing=int(s["K2"])),
            lambda model, s: SemiImplicitGuide(model, num_mixing=int(s["K1"]), init_scale=s["init_scale"], mixing_scale=s["mixing_scale"]),
            lambda s: DSIVI_ELBO(int(s["K1"]), int(s["K2"])),
            defaults={"K1": 8, "K2": 8, "mixing_scale": 1e-2, "normal_gamma": (1.0, 1.0)},
        ),
        MethodSpec(
            "sparse-vd", "sparse variational dropout: log-uniform prior on weights, additive parameterisation, local reparameterization",
            lambda s: LogUniformPrior(), sparse_vd_guide, closed_form_kl, estimator="local", kl_schedule=warmup,
            defaults={"warmup_fraction": 0.2},
        ),
        MethodSpec(
            "iwae", "importance-weighted bound (Renyi alpha=0), K samples; predicts with resampled q_K",
            normal_prior, mean_field, lambda s: ImportanceWeighted_ELBO(num_particles=s["num_particles"]), resample=True,
            defaults={"num_particles": 8},
        ),
        MethodSpec(
            "renyi", "Renyi-alpha bound (alpha=extra['alpha'], default 0.5), K samples; predicts with resampled q_K",
            normal_prior, mean_field, lambda s: Renyi_ELBO(alpha=float(s["alpha"]), num_particles=s["num_particles"]), resample=True,
            defaults={"num_particles": 8, "alpha": 0.5},
        ),
        MethodSpec(
            "esbo", "Sagar 2020 (results withdrawn): reweighted wake-sleep reading of Algorithm 1 (not a bound)",
            normal_prior, mean_field, lambda s: ReweightedWakeSleepLoss(num_particles=s["num_particles"]),
            # from init_scale 1e-3 its inclusive-KL updates, fed by collapsed weights (ESS ~ 1),
            # left the mean nearly where it started (boston split 0 RMSE 6.5)
            defaults={"num_particles": 8, "init_scale": 1e-2},
        ),
        MethodSpec(
            "rdp", "radial-directional posteriors (Oh et al. 2020): vMF directions, half-Cauchy radii, double grouping",
            radial_directional_prior, radial_directional_guide,
            lambda s: ClosedFormKL_ELBO() if s["objective"] == "closed_form" else pyro.infer.Trace_ELBO(),
            kl_schedule=warmup,
            defaults={
                "grouping": "double", "local_scale": 1.0, "global_scale": 1.0, "direction_epsilon": 0.5,
                "init_direction_epsilon": 0.005, "objective": "closed_form", "warmup_fraction": 0.1,
            },
        ),
        MethodSpec(
            "bc-gnj", "Bayesian compression, group normal-Jeffreys prior (Louizos et al. 2017)",
            lambda s: GroupNormalJeffreysPrior(), bayesian_compression_guide, closed_form_kl, estimator="local",
        ),
        MethodSpec(
            "bc-ghs", "Bayesian compression, group horseshoe prior (Louizos et al. 2017)",
            lambda s: GroupHorseshoePrior(tau0=float(s["tau0"])), bayesian_compression_guide, closed_form_kl, estimator="local",
            defaults={"tau0": 1e-5},
        ),
        MethodSpec("sgld", "SGLD on a N(0, 1) weight prior", normal_prior, sampler=sgld, defaults=SAMPLER_DEFAULTS),
        MethodSpec("sghmc", "SGHMC (momentum 0.9) on a N(0, 1) weight prior", normal_prior, sampler=sghmc, defaults=SAMPLER_DEFAULTS),
        MethodSpec(
            "sghmc-ssgl", "SGHMC (momentum 0.9) on the SSGL model, its latent variables fixed at their empirical-Bayes start (Deng et al. 2019's SGHMC)",
            spike_and_slab_prior, sampler=sghmc, adaptations=stochastic_approximation(None), defaults=SSGL_DEFAULTS,
        ),
        MethodSpec(
            "sgld-ssgl", "SGLD on the SSGL model, its latent variables fixed at their empirical-Bayes start",
            spike_and_slab_prior, sampler=sgld, adaptations=stochastic_approximation(None), defaults=SSGL_DEFAULTS,
        ),
        MethodSpec(
            "sgld-em", "SGLD, SSGL prior on the weights, EM (omega = 1) of rho, kappa, sigma, delta (Deng et al. 2019)",
            spike_and_slab_prior, sampler=sgld, adaptations=stochastic_approximation("em"), defaults=SSGL_DEFAULTS,
        ),
        MethodSpec(
            "sgld-sa", "SGLD, SSGL prior on the weights, SA of rho, kappa, sigma, delta (Deng et al. 2019)",
            spike_and_slab_prior, sampler=sgld, adaptations=stochastic_approximation("sa"), defaults=SSGL_DEFAULTS,
        ),
        MethodSpec(
            "sghmc-sa", "SGHMC (Saatci-Wilson, momentum 0.9), SSGL prior on the weights, SA of rho, kappa, sigma, delta (Deng et al. 2019)",
            spike_and_slab_prior, sampler=sghmc, adaptations=stochastic_approximation("sa"), defaults=SSGL_DEFAULTS,
        ),
        MethodSpec(
            "sghmc-em", "SGHMC (Saatci-Wilson, momentum 0.9), SSGL prior on the weights, EM (omega = 1) of rho, kappa, sigma, delta (Deng et al. 2019)",
            spike_and_slab_prior, sampler=sghmc, adaptations=stochastic_approximation("em"), defaults=SSGL_DEFAULTS,
        ),
    ]
}


def method(name: str) -> MethodSpec:
    """The declaration of ``name``; an unknown name is an error that lists the known ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; declared: {', '.join(METHODS)}")
    return METHODS[name]
