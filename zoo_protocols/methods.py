"""Every method of the zoo, declared once, as data.

A :class:`MethodSpec` says what a method *is* — its prior, its guide, its objective (or its
sampler), its gradient estimator, its KL schedule and its own defaults — and nothing about
where it runs. The protocols (UCI regression :mod:`zoo_protocols.uci_vi` / :mod:`zoo_protocols.uci_sgmcmc`
/ :mod:`zoo_protocols.uci_importance_weighted` / :mod:`zoo_protocols.uci_rdp`, MNIST
:mod:`zoo_protocols.mnist_mlp`, the comparison harness through them) supply the network, the
likelihood, the data and the training budget, and evaluate these declarations.

Adding a method: write its prior and guide in :mod:`pyrozoo`, and add one ``MethodSpec`` to
:data:`METHODS` here naming the protocols that run it (``protocols=``, :data:`PROTOCOLS`);
``tests/zoo_protocols/test_methods.py`` builds and trains every declaration.

Factories take the run's :class:`~zoo_protocols.config.Settings` (``s``), so any default below is
overridden by the run's ``extra`` settings without the protocols knowing the method.

Besides the BNN methods, the declarations cover the DSIVI studies of Molchanov (2022): a
Normal-Gamma hierarchical prior trained jointly or marginally (:mod:`zoo_protocols.dsivi_hierarchical`,
Eqs. 17-20; :mod:`zoo_protocols.dsivi_toy` fits a known scale mixture with the same declarations),
the VAE priors of Table 3 (:mod:`zoo_protocols.vae_priors`) and the variational-dropout
parameterisations of Table 2 (:mod:`zoo_protocols.variance_networks`).
"""

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import pyro
import torch
from pyro.infer.autoguide import AutoGuideList
from pyro.infer.autoguide.initialization import InitMessenger

from pyrozoo.distributions import PriorComponentCache
from pyrozoo.guides import (
    BayesianCompressionGuide,
    DeltaGuide,
    MeanFieldNormalGuide,
    RadialDirectionalGuide,
    SemiImplicitGuide,
    SparseVariationalDropoutGuide,
    VariationalDropoutGuide,
)
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.guides.variational_dropout import PARAMETERIZATIONS
from pyrozoo.inference import (
    DSIVI_ELBO,
    SGHMC,
    SGLD,
    BlundellKLReweighting,
    ClosedFormKL_ELBO,
    ImportanceWeighted_ELBO,
    LinearKLWarmup,
    RenyiELBO,
    ReweightedWakeSleep,
)
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.models import (
    AggregatedPosteriorPrior,
    ARDPrior,
    GroupHorseshoePrior,
    GroupNormalJeffreysPrior,
    LogUniformPrior,
    NormalGammaPrior,
    NormalPrior,
    RadialDirectionalPrior,
    ScaleMixturePrior,
    SpikeAndSlabPrior,
    StandardNormalLatentPrior,
    VampPrior,
)
from pyrozoo.models.dropout_priors import NORMALIZATION_LAYERS
from pyrozoo.models.selection import ParameterSelector
from zoo_protocols.binarized_mnist import random_binarize
from zoo_protocols.config import Settings

#: defaults every method shares (a method's own ``defaults`` override them)
COMMON_DEFAULTS = {"prior_scale": 1.0, "init_scale": 1e-3}

#: the treatments of a hierarchical prior (:attr:`MethodSpec.hierarchy`)
HIERARCHIES = ("joint", "marginal", "exact")

#: the protocols that evaluate every declaration naming them (:attr:`MethodSpec.protocols`):
#: UCI regression (:mod:`zoo_protocols.uci_vi`), the MNIST MLP (:mod:`zoo_protocols.mnist_mlp`)
#: and the importance-weighted UCI protocol (:mod:`zoo_protocols.uci_importance_weighted`); the
#: other protocols register the methods they run by name
PROTOCOLS = ("uci", "mnist", "uci-importance-weighted")


@dataclass(frozen=True)
class MethodSpec:
    """A method: prior, guide and objective (variational), sampler (SG-MCMC), or a VAE's
    latent prior and objective.

    :param prior: ``s -> Prior`` (a :class:`pyrozoo.models.Prior` over the network's
        parameters); ``None`` for a latent-prior method, whose network has no weight prior.
    :param guide: ``(model, s) -> guide``; ``None`` for a sampler or a latent-prior method.
    :param objective: ``s -> ELBO``; ``None``: :func:`pyrozoo.inference.fit`'s default.
    :param estimator: :func:`~pyrozoo.inference.fit`'s gradient estimator (``"local"`` for
        local reparameterization), ``None`` for its default.
    :param kl_schedule: ``(s, epochs) -> KLSchedule or None``.
    :param sampler: ``(model, s, lr, **kwargs) -> StochasticGradientMCMC``; ``None`` for VI.
    :param resample: predict from the importance-resampled guide (:math:`q_K`, Domke & Sheldon 2018).
    :param adaptations: ``(model, s) -> list`` of a sampler's adaptations of the prior's own
        latent variables (SG-MCMC-SA's stochastic approximation), set up on the built model.
    :param hierarchy: how the method treats a hierarchical prior ``w | lambda``,
        ``lambda ~ p(lambda)`` (a scale mixture such as the Normal-Gamma prior, or the aggregated
        posterior's mixture over training inputs; Molchanov 2022, Eqs. 17-21): ``"joint"`` keeps
        ``lambda`` as latent variables with a posterior of their own (Eq. 18), ``"marginal"``
        integrates it out and estimates the semi-implicit densities from mixing draws (``K1``
        on the guide's side, ``K2`` on the prior's; Eq. 19), ``"exact"`` uses the closed-form
        marginal density; ``None`` for methods without such a prior. Protocols with a scale
        mixture of their own (:mod:`zoo_protocols.dsivi_toy`'s target) read it.
    :param latent_prior: ``(encoder, inputs, s) -> prior`` over the latent code of a VAE
        (:class:`pyrozoo.models.VAE`), whose guide is the amortized ``encoder`` and whose
        decoder is a point estimate; ``inputs`` are the training inputs (Molchanov 2022, Table 3).
    :param defaults: the method's own defaults, over :data:`COMMON_DEFAULTS`.
    :param protocols: the protocols of :data:`PROTOCOLS` that evaluate it: naming one here is
        all it takes for the protocol, its sweeps and its command line to run the method.
    """

    name: str
    description: str
    prior: Optional[Callable[[Settings], Any]]
    guide: Optional[Callable[[Any, Settings], Any]] = None
    objective: Optional[Callable[[Settings], Any]] = None
    estimator: Optional[str] = None
    kl_schedule: Optional[Callable[[Settings, int], Any]] = None
    sampler: Optional[Callable[..., Any]] = None
    resample: bool = False
    adaptations: Optional[Callable[[Any, Settings], list]] = None
    hierarchy: Optional[str] = None
    latent_prior: Optional[Callable[[Any, Any, Settings], Any]] = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    protocols: Tuple[str, ...] = ()

    def __post_init__(self):
        if sum(x is not None for x in (self.guide, self.sampler, self.latent_prior)) != 1:
            raise ValueError(
                f"method {self.name!r} must declare exactly one of a guide (variational), a sampler (SG-MCMC) "
                "or a latent prior (a VAE, whose guide is its encoder)"
            )
        if (self.prior is None) != (self.latent_prior is not None):
            raise ValueError(f"method {self.name!r} must declare a prior over the network's parameters unless it declares a VAE's latent prior (then none)")
        if self.hierarchy not in (None, *HIERARCHIES):
            raise ValueError(f"method {self.name!r}: hierarchy must be one of {HIERARCHIES} or None, got {self.hierarchy!r}")
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if isinstance(self.protocols, str) or unknown:
            raise ValueError(f"method {self.name!r}: protocols must be a tuple of {PROTOCOLS}, got {self.protocols!r}")
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
        s["v0"], s["v1"], sparse=s["sparse"], layer_scale=s.get("layer_scale"), gaussian_scale=s["bias_scale"],
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
#: ``kappa0`` / ``kappa1`` start at their Eq. 13 values when ``None``; a protocol whose v0 was
#: set for other target units also sets ``layer_scale`` (:func:`zoo_protocols.uci_sgmcmc.raw_target_units`)
SSGL_DEFAULTS = {
    **SAMPLER_DEFAULTS, "sparse": {"expose_parameters": ["weight"]}, "v1": 10.0, "a": 1.0, "b": 10.0, "nu": 1.0, "lam": 1.0, "sigma": 1.0, "bias_scale": 100.0,
    "kappa0": None, "kappa1": None, "update_delta": True,
    "omega": (1.0, 0.7, 100.0),  # omega_k = scale * (offset + k)^-power, or a schedule
}


def radial_directional_prior(s):
    return RadialDirectionalPrior(grouping=s["grouping"], local_scale=s["local_scale"], global_scale=s["global_scale"], direction_epsilon=s["direction_epsilon"])


def radial_directional_guide(model, s):
    return RadialDirectionalGuide(model, init_scale=s["init_scale"], init_direction_epsilon=s["init_direction_epsilon"])


#: Pyro ``ELBO`` options a run may set for the objectives that take them
ELBO_OPTIONS = ("num_particles", "vectorize_particles", "max_plate_nesting")


def elbo_options(s) -> dict:
    """The :data:`ELBO_OPTIONS` among the run's settings (only those given: otherwise Pyro's defaults)."""
    return {key: s[key] for key in ELBO_OPTIONS if key in s}


def normal_gamma_prior(form: str):
    """``s -> NormalGammaPrior`` of ``w | lambda ~ N(0, 1/lambda)``, ``lambda ~ Gamma(*normal_gamma)``
    (one lambda per weight) in ``form`` (``"joint"``, ``"marginal"`` with ``K2`` mixing draws, ``"exact"``)."""

    def prior(s):
        mixing = {"num_mixing": int(s["K2"])} if form == "marginal" else {}
        return NormalGammaPrior(*s["normal_gamma"], form=form, **mixing)

    return prior


def dsivi_bound(K1):
    """``s -> DSIVI_ELBO(K1, K2)`` (Molchanov 2022, Eq. 14): ``K1`` a setting's name, or a fixed
    count (0: an explicit guide, whose entropy enters exactly)."""

    def objective(s):
        return DSIVI_ELBO(int(s[K1]) if isinstance(K1, str) else K1, int(s["K2"]), **elbo_options(s))

    return objective


def exact_densities(s):
    """The ELBO with exact densities: :class:`DSIVI_ELBO` with no semi-implicit site keeps
    closed-form KLs where they exist and ``log q(z) - log p(z)`` at the sample elsewhere —
    the value its bounds tend to (Theorem 2)."""
    return DSIVI_ELBO(**elbo_options(s))


NORMAL_GAMMA_DEFAULTS = {"normal_gamma": (1.0, 1.0), "K2": 8}

#: the priors of the variational-dropout parameterisations (Molchanov 2022, sec. 2.2)
DROPOUT_PRIORS = {"log-uniform": LogUniformPrior, "ard": ARDPrior}


def dropout_prior(s, selector=None):
    """The log-uniform or ARD prior named by the setting ``prior`` (on every weight, or on
    those ``selector`` chooses)."""
    if s["prior"] not in DROPOUT_PRIORS:
        raise ValueError(f"prior must be one of {sorted(DROPOUT_PRIORS)}, got {s['prior']!r}")
    return DROPOUT_PRIORS[s["prior"]](selector)


class HiddenLayerWeights(ParameterSelector):
    """The dropout priors' default selection (every ``weight``, normalisation layers' excepted)
    less the output layer's: the last module, in the order the network registers its
    modules, that has a selected weight (the order of the forward pass in the zoo's networks).

    A zero-mean variance network needs this. If the output layer's weights are zero-mean
    too, the logits given the hidden units ``h`` are ``N(b, diag(sum_i h_i^2 sigma_ij^2))``:
    their mean is the bias ``b`` whatever the input, and the expected cross-entropy
    ``E[-log softmax(z)_y]`` is convex in ``z``, so by Jensen's inequality it is at least
    ``-log softmax(b)_y``, the loss of a network that ignores its input. Training then makes
    the output variance vanish and puts the class frequencies into ``b``: a classifier at
    chance (``docs/results/controlled/variance_network_zero_mean.md`` measures it, with and
    without batch normalisation). The authors' variance networks keep the output layer
    ``dense2`` a plain ``nn.Linear`` (``scripts/lenet5-vn.py`` of Neklyudov et al.'s code;
    its ``--var4`` flag makes it zero-mean), which the selection leaves to be a point
    estimate here, as the biases are; every random layer is then zero-mean and the KL 0,
    as in the thesis' Table 2.
    """

    def __init__(self):
        super().__init__(expose_parameters=["weight"], hide_types=NORMALIZATION_LAYERS)

    def select(self, net):
        selected = list(super().select(net))
        layers = list(dict.fromkeys(module_name for module_name, *_ in selected))
        if len(layers) < 2:
            raise ValueError(
                f"a zero-mean variance network needs a hidden layer under its output layer, but {type(net).__name__} has "
                f"weights in {len(layers)} layer(s) only: the output layer keeps a mean (its logits' mean is otherwise "
                "the bias alone), so nothing would be zero-mean; use a network with a hidden layer, or another "
                "parameterization"
            )
        return iter([entry for entry in selected if entry[0] != layers[-1]])


def variance_network_prior(s):
    """:func:`dropout_prior` on the hidden layers only (:class:`HiddenLayerWeights`), unless the
    setting ``zero_mean_output`` asks for every layer zero-mean (the setting that cannot learn)."""
    return dropout_prior(s, None if s["zero_mean_output"] else HiddenLayerWeights())


def variational_dropout_guide(parameterization: str):
    """``(model, s) -> VariationalDropoutGuide`` with ``parameterization`` (thesis eq. 11)."""

    def guide(model, s):
        return VariationalDropoutGuide(
            model, parameterization=parameterization, log_alpha_bounds=s["log_alpha_bounds"],
            init_log_alpha=s["init_log_alpha"], init_log_sigma2=s["init_log_sigma2"],
        )

    return guide


VARIATIONAL_DROPOUT_DEFAULTS = {
    "prior": "log-uniform",
    # log alpha may grow far beyond Sparse VD's clip for the phase transition to happen (the
    # authors' phase-transition layers clip to [-20, 20])
    "log_alpha_bounds": (-20.0, 20.0),
    "init_log_alpha": -5.0,
    "init_log_sigma2": -10.0,
}


def vae_dsivi_bound(s):
    """Every VAE prior trains with ``DSIVI_ELBO(0, K)``: the closed-form-KL ELBO for an explicit
    prior, the DSIVI bound from ``K`` sampled training points for the aggregated posterior."""
    return DSIVI_ELBO(K1=0, K2=int(s["K"]), **elbo_options(s))


def vae_aggregated_posterior_bound(s):
    """:func:`vae_dsivi_bound` whose ``K`` prior components (one encoder pass each) are reused
    for up to ``prior_refresh_every`` parameter changes when that setting is an integer
    (:class:`~pyrozoo.distributions.PriorComponentCache`: no gradient through them, a lower
    bound still, looser by the KL between the current and the stale aggregated posterior);
    ``None`` is Eq. 14 as written, fresh components with gradient at every step. A training
    objective only: the reported evaluations do not use it."""
    refresh = s["prior_refresh_every"]
    if refresh is None:
        return vae_dsivi_bound(s)
    try:
        cache = PriorComponentCache(refresh)
    except ValueError:
        raise ValueError(f"setting prior_refresh_every must be None (uncached) or a positive int, got {refresh!r}") from None
    return DSIVI_ELBO(K1=0, K2=int(s["K"]), prior_cache=cache, **elbo_options(s))


def vae_warmup(s, epochs):
    """A linear KL warm-up over the first ``warmup_epochs`` epochs (none at 0)."""
    return LinearKLWarmup(0, s["warmup_epochs"]) if s["warmup_epochs"] > 0 else None


VAE_DEFAULTS = {"warmup_epochs": 10}


# ---- the declarations -------------------------------------------------------------------

METHODS: Dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec("map", "MAP estimate (Delta guide) under a N(0, 1) weight prior", normal_prior, delta, protocols=("uci", "mnist")),
        MethodSpec("mfvi", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, local reparameterization", normal_prior, mean_field, closed_form_kl, estimator="local", protocols=("uci", "mnist")),
        MethodSpec("mfvi-mc", "mean-field Gaussian VI, N(0, 1) prior, Pyro Trace_ELBO (Monte Carlo KL), weight sampling", normal_prior, mean_field, monte_carlo_kl, protocols=("uci", "mnist")),
        MethodSpec("mfvi-cf", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, weight sampling (no local reparameterization)", normal_prior, mean_field, closed_form_kl, protocols=("uci",)),
        MethodSpec(
            "bbb", "Bayes by Backprop: scale-mixture prior, Monte Carlo KL, weight sampling",
            lambda s: ScaleMixturePrior(*s["mixture"]), mean_field, closed_form_kl,
            # Blundell et al. (2015) eq. 9's minibatch KL weights, on request
            kl_schedule=lambda s, epochs: BlundellKLReweighting() if s["blundell"] else None,
            defaults={"mixture": (0.5, 1.0, math.exp(-6)), "blundell": False},  # (pi, sigma1, sigma2), eq. 7
            protocols=("uci",),
        ),
        MethodSpec(
            "dsivi", "DSIVI: semi-implicit posterior under the marginal Normal-Gamma prior, DSIVI_ELBO(K1, K2)",
            normal_gamma_prior("marginal"),
            lambda model, s: SemiImplicitGuide(model, num_mixing=int(s["K1"]), init_scale=s["init_scale"], mixing_scale=s["mixing_scale"]),
            dsivi_bound("K1"), hierarchy="marginal",
            defaults={**NORMAL_GAMMA_DEFAULTS, "K1": 8, "mixing_scale": 1e-2},
            protocols=("uci",),
        ),
        # the Normal-Gamma hierarchy w | lambda ~ N(0, 1/lambda), lambda ~ Gamma(a, b) with a
        # mean-field Normal posterior over w, three ways (Molchanov 2022, Eqs. 17-20, Theorem 3)
        MethodSpec(
            "normal-gamma-joint", "Normal-Gamma prior kept joint: mean-field posterior over w and log-normal over lambda, closed-form KLs (Eq. 18)",
            normal_gamma_prior("joint"), mean_field, closed_form_kl, hierarchy="joint", defaults=NORMAL_GAMMA_DEFAULTS,
        ),
        MethodSpec(
            "normal-gamma-marginal", "Normal-Gamma prior marginalised (semi-implicit, K2 draws of lambda): mean-field posterior over w, DSIVI_ELBO(0, K2) (Eq. 19)",
            normal_gamma_prior("marginal"), mean_field, dsivi_bound(0), hierarchy="marginal", defaults=NORMAL_GAMMA_DEFAULTS,
        ),
        MethodSpec(
            "normal-gamma-exact", "Normal-Gamma prior marginalised in closed form (Student-t): mean-field posterior over w, exact log-densities (Monte Carlo KL)",
            normal_gamma_prior("exact"), mean_field, exact_densities, hierarchy="exact", defaults=NORMAL_GAMMA_DEFAULTS,
        ),
        MethodSpec(
            "sparse-vd", "sparse variational dropout: log-uniform prior on weights, additive parameterisation, local reparameterization",
            lambda s: LogUniformPrior(), sparse_vd_guide, closed_form_kl, estimator="local", kl_schedule=warmup,
            defaults={"warmup_fraction": 0.2},
            protocols=("uci", "mnist"),
        ),
        MethodSpec(
            "iwae", "importance-weighted bound (Renyi alpha=0), K samples; predicts with resampled q_K",
            normal_prior, mean_field, lambda s: ImportanceWeighted_ELBO(num_particles=s["num_particles"]), resample=True,
            defaults={"num_particles": 8},
            protocols=("uci-importance-weighted",),
        ),
        MethodSpec(
            "renyi", "Renyi-alpha bound (alpha=extra['alpha'], default 0.5), K samples; predicts with resampled q_K",
            normal_prior, mean_field, lambda s: RenyiELBO(alpha=float(s["alpha"]), num_particles=s["num_particles"]), resample=True,
            defaults={"num_particles": 8, "alpha": 0.5},
            protocols=("uci-importance-weighted",),
        ),
        MethodSpec(
            "esbo", "Sagar 2020 (results withdrawn): reweighted wake-sleep reading of Algorithm 1 (not a bound)",
            normal_prior, mean_field, lambda s: ReweightedWakeSleep(num_particles=s["num_particles"]),
            # from init_scale 1e-3 its inclusive-KL updates, fed by collapsed weights (ESS ~ 1),
            # left the mean nearly where it started (boston split 0 RMSE 6.5)
            defaults={"num_particles": 8, "init_scale": 1e-2},
            protocols=("uci-importance-weighted",),
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
        # variance networks (Neklyudov et al. 2019; Molchanov 2022, sec. 2.2, Table 2): Gaussian
        # dropout posteriors in each parameterisation of eq. 11, log-uniform (or ARD: extra
        # {"prior": "ard"}) prior; unlike sparse-vd no train-time clip mask and log alpha in [-20, 20]
        *(
            MethodSpec(
                f"vd-{p}", f"variational dropout, {p} parameterisation (Molchanov 2022, eq. 11), log-uniform (or ARD) prior, closed-form KL, local reparameterization",
                dropout_prior, variational_dropout_guide(p), closed_form_kl, estimator="local", defaults=VARIATIONAL_DROPOUT_DEFAULTS,
            )
            for p in PARAMETERIZATIONS
            if p != "zero-mean"
        ),
        # zero-mean hidden layers under a point-estimated output layer (HiddenLayerWeights says why);
        # extra {"zero_mean_output": True} makes the output layer zero-mean too
        MethodSpec(
            "vd-zero-mean", "variance network: zero-mean Gaussian hidden layers N(0, sigma^2) (Molchanov 2022, eq. 11), point-estimated output layer, log-uniform (or ARD) prior, local reparameterization",
            variance_network_prior, variational_dropout_guide("zero-mean"), closed_form_kl, estimator="local",
            defaults={**VARIATIONAL_DROPOUT_DEFAULTS, "zero_mean_output": False},
        ),
        # a VAE's latent prior (Molchanov 2022, Table 3), the encoder and decoder from the protocol
        MethodSpec(
            "vae-normal", "VAE with a standard Normal latent prior, closed-form KL", None,
            latent_prior=lambda encoder, inputs, s: StandardNormalLatentPrior(encoder.latent_dim),
            objective=vae_dsivi_bound, kl_schedule=vae_warmup, defaults={**VAE_DEFAULTS, "K": 0},
        ),
        MethodSpec(
            "vae-vamp", "VAE with a VampPrior of K learned pseudo-inputs (Tomczak & Welling 2018), evaluated exactly", None,
            latent_prior=lambda encoder, inputs, s: VampPrior(encoder, int(s["K"]), (inputs[0].numel(),)),
            objective=vae_dsivi_bound, kl_schedule=vae_warmup, defaults={**VAE_DEFAULTS, "K": 500},
        ),
        MethodSpec(
            "vae-dsivi", "VAE whose prior is the aggregated posterior over the (dynamically binarised) training inputs, a semi-implicit prior trained with DSIVI from K sampled points (Eq. 21)",
            None, hierarchy="marginal",
            latent_prior=lambda encoder, inputs, s: AggregatedPosteriorPrior(encoder, inputs.flatten(1), num_mixing=int(s["K"]), transform=random_binarize),
            # prior_refresh_every: None = the paper's estimator; R = components reused R steps
            objective=vae_aggregated_posterior_bound, kl_schedule=vae_warmup, defaults={**VAE_DEFAULTS, "K": 500, "prior_refresh_every": None},
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
        MethodSpec("sgld", "SGLD on a N(0, 1) weight prior", normal_prior, sampler=sgld, defaults=SAMPLER_DEFAULTS, protocols=("mnist",)),
        MethodSpec("sghmc", "SGHMC (momentum 0.9) on a N(0, 1) weight prior", normal_prior, sampler=sghmc, defaults=SAMPLER_DEFAULTS, protocols=("mnist",)),
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


def evaluated_by(protocol: str) -> Tuple[str, ...]:
    """The names of the declarations that ``protocol`` (one of :data:`PROTOCOLS`) evaluates, in
    declaration order."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose from {PROTOCOLS}")
    return tuple(name for name, spec in METHODS.items() if protocol in spec.protocols)


def method(name: str) -> MethodSpec:
    """The declaration of ``name``; an unknown name is an error that lists the known ones."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; declared: {', '.join(METHODS)}")
    return METHODS[name]
