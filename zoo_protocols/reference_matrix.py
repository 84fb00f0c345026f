r"""The combination matrix of issue 22 (section 3): every prior x guide x objective, and every
prior x sampler, that the package exports, run on the reference problems
(:mod:`zoo_protocols.reference_posteriors`) and on plain Pyro models that are not
``BayesianNeuralNetwork``\ s, and scored against the stored reference posteriors.

**The axes** (:data:`PRIORS`, :data:`GUIDES`, :data:`OBJECTIVES`, :data:`SAMPLERS`) are the
concrete classes ``pyrozoo.models``, ``pyrozoo.guides`` and ``pyrozoo.inference`` export, each
built with the settings the zoo's method declarations give it (:mod:`zoo_protocols.methods`: the
scale mixture of Bayes by Backprop, the SSGL prior and its stochastic approximation, the
radial-directional prior and guide, the Normal-Gamma prior and the semi-implicit guide of
DSIVI, ``K = 8`` particles for the importance-weighted objectives) and otherwise with their
defaults. Abstract bases (``Prior``, ``IIDPrior``, ``GroupScalePrior``, ``SitewiseGuide``) and
the priors that need a user's function (``FunctionPrior``) are not combinations. The KL
warm-up belongs to the prior where the zoo declares one for the methods built on it
(:data:`PRIOR_KL_WARMUP`: the dropout priors, the radial-directional prior); every other run
uses the full KL from the first step. ``SG-MCMC-SA`` is SGHMC with Deng et al. (2019)'s
stochastic approximation of the SSGL prior's latent variables (:mod:`zoo_protocols.methods`'s
``sghmc-sa``).

**The problems** (:func:`matrix_problems`): every reference problem whose model is a
``BayesianNeuralNetwork`` (the four UCI MLPs, MNIST softmax regression, Bayesian linear
regression), with the reference's network, likelihood and data and the prior of the
combination; and plain Pyro models whose *own* prior is the reference's, so only guide x
objective/sampler varies there: the Normal-inverse-gamma linear regression of the references
(``bostonHousing_linear_nig``, exact posterior, a positive latent: the noise precision) and
the MNIST softmax regression written as a plain Pyro model (``mnist_softmax_plain``, the
posterior of ``mnist_softmax``).

**The run.** Every combination gets the same budget (:class:`Budget`): ``steps`` full-batch
gradient evaluations (Adam at ``lr`` for the objectives, the guides started at the network's
initialisation; for the samplers a step scaled to the problem's curvature,
:meth:`MatrixProblem.sampler_step`, half the run burn-in, the rest thinned to ``num_samples``
draws), from the same network initialisation (``seed``); the predictive is read from
``num_samples`` posterior draws (one for a point estimate). A combination the API refuses
(an exception while the model, guide, objective or sampler are built or during the first
step) is recorded as ``refused`` with its message; one that raises later is ``failed``
(``diverged`` for a :class:`~pyrozoo.inference.diagnostics.DivergenceError`).

**Scores** against the reference predictive at the test inputs (:func:`score_predictive`):
classification: :func:`~pyrozoo.metrics.agreement` and
:func:`~pyrozoo.metrics.total_variation` of the posterior-averaged class probabilities,
accuracy; regression: :func:`~pyrozoo.metrics.wasserstein2_predictive` between the predictive
distributions of ``y`` (standardised units; each network draw plus :data:`NOISE_DRAWS` draws
of its noise, on both sides; the reference's Student-t predictive for the NIG model), RMSE and
the empirical coverage of the central 90% predictive interval; both: the test log-likelihood
(mean over test points of the log of the predictive density, the mixture over draws, in the
targets' original units). On the conjugate problems the relative errors of the posterior mean
and covariance of ``[w, b]`` against the exact posterior
(:func:`~pyrozoo.metrics.posterior_moment_errors`; a BNN's weights are read off its outputs at
probe inputs, so every prior's parameterisation gives the same ``[w, b]``).

**Status** (:func:`assess`), one per row: ``refused``; ``failed``; ``diverged`` (a
``DivergenceWarning`` or ``DivergenceError``); ``warned`` (another run-time warning fired:
any :class:`~pyrozoo.inference.diagnostics.RunWarning` or the dropout priors'
``KLWarmupWarning``; the ``warnings`` column names them); ``below_quality``; ``ok``.

**The quality bar** (issue 22, section 4a): inference that is no worse than mean-field VI *of
the same model*. Mean-field VI (``MeanFieldNormalGuide``, ``ClosedFormKL_ELBO``;
:func:`prior_baseline`) is run with every seed of ``seeds`` (at least 3) under every prior on
every problem (:data:`BASELINE`: under the reference's ``NormalPrior``; :data:`PLAIN_BASELINE`:
under a plain model's own prior). For each judged score, with ``m`` and ``s`` the baseline's
mean and standard deviation over its ``n`` seeds, a combination is below quality when its
score is worse than the one-sided :data:`QUALITY_LEVEL` (99%) Student-t *prediction interval*
of one more baseline run,

.. math::

    \text{margin} = \max\big(t_{0.99,\,n-1}\, s \sqrt{1 + 1/n},\ \text{floor}\big),

i.e. test log-likelihood below ``m - margin``, or a distance to the reference above
``m + margin``: a score that a further seed of mean-field VI would reach with probability
below 1%. The floors (:data:`MARGIN_FLOORS`) only keep the margin from vanishing when the
seeds happen to agree. Judged scores: the test log-likelihood of every combination, against
the lower (more lenient) of two bars (:func:`test_ll_bar`): the mean-field baseline's under
the reference prior, and under the combination's own prior where that baseline ran cleanly on
two seeds or more — a combination is below quality when it is worse than mean-field VI both
with the default prior and with its own (another prior is another model, whose posterior
predictive may score higher or lower than ``NormalPrior``'s however exact the inference; a
more restricted family than mean-field, such as the dropout posteriors, may trail mean-field
VI under the same prior by a little without anything being wrong: the ``own_prior_quality``
column reports that finer comparison, not judged), and the distance to the reference (W2
for regression, total variation for classification) of the combinations whose target *is* the
reference posterior (the reference's ``NormalPrior``, and the plain models, whose prior is
their own); under another prior the posterior is another one, and its distance to the
reference is reported but not judged. What a prior does to the model itself — its mean-field
baseline against the reference prior's — is reported apart (:func:`prior_effects`), not
judged. A run that is already refused, failed, diverged or warned keeps that status (the
``quality`` column still says whether it met the bar).

**The comparison harness** (:mod:`zoo_protocols.compare`) adds the reference metric of its UCI runs
through :func:`harness_reference_metrics` (its models are not the references', see there).
"""

import hashlib
import inspect
import math
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import Predictive

import pyrozoo.guides
import pyrozoo.inference
from pyrozoo import atomic, metrics
from pyrozoo.guides import SitewiseGuide
from pyrozoo.inference import (
    SGHMC,
    SGLD,
    LinearKLWarmup,
    fit,
    posterior_samples,
)
from pyrozoo.inference.diagnostics import DivergenceError, DivergenceWarning, RunWarning, collect_events
from pyrozoo.inference.sample_storage import InMemorySamples, SampleGuide
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.models import (
    MLP,
    ARDPrior,
    BayesianNeuralNetwork,
    CategoricalLikelihood,
    GaussianLikelihood,
    GroupHorseshoePrior,
    GroupNormalJeffreysPrior,
    LayerwiseNormalPrior,
    LogUniformPrior,
    NormalGammaPrior,
    NormalPrior,
    RadialDirectionalPrior,
    ScaleMixturePrior,
    SpikeAndSlabPrior,
)
from pyrozoo.models.dropout_priors import KLWarmupWarning
from zoo_protocols import methods as declared
from zoo_protocols import read_runs
from zoo_protocols import reference_posteriors as ref
from zoo_protocols.config import RunConfig

# -- the axes -----------------------------------------------------------------------------------

#: the settings of the declared methods that the pieces below take (zoo_protocols.methods)
_SSGL = RunConfig().settings(declared.SSGL_DEFAULTS, {"v0": 0.1})
_BBB, _RDP, _DSIVI, _GHS = (declared.method(m).defaults for m in ("bbb", "rdp", "dsivi", "bc-ghs"))

#: every concrete prior of ``pyrozoo.models``, as the zoo's declarations configure it
PRIORS: Dict[str, Callable[[], object]] = {
    "NormalPrior": lambda: NormalPrior(1.0),
    "ScaleMixturePrior": lambda: ScaleMixturePrior(*_BBB["mixture"]),
    "LayerwiseNormalPrior": lambda: LayerwiseNormalPrior(),
    "LogUniformPrior": lambda: LogUniformPrior(),
    "ARDPrior": lambda: ARDPrior(),
    "GroupNormalJeffreysPrior": lambda: GroupNormalJeffreysPrior(),
    "GroupHorseshoePrior": lambda: GroupHorseshoePrior(tau0=float(_GHS["tau0"])),
    "RadialDirectionalPrior": lambda: RadialDirectionalPrior(
        grouping=_RDP["grouping"], local_scale=_RDP["local_scale"], global_scale=_RDP["global_scale"], direction_epsilon=_RDP["direction_epsilon"]
    ),
    "SpikeAndSlabPrior": lambda: declared.spike_and_slab_prior(_SSGL),
    "NormalGammaPrior": lambda: NormalGammaPrior(*_DSIVI["normal_gamma"], form="marginal", num_mixing=int(_DSIVI["K2"])),
}

#: the prior of a plain Pyro model: its own
OWN_PRIOR = "model's own"

#: KL warm-up (fraction of the budget) of the priors whose declared methods warm up
PRIOR_KL_WARMUP = {
    "LogUniformPrior": declared.method("sparse-vd").defaults["warmup_fraction"],
    "ARDPrior": declared.method("sparse-vd").defaults["warmup_fraction"],
    "RadialDirectionalPrior": _RDP["warmup_fraction"],
}

_INIT_SCALE = declared.COMMON_DEFAULTS["init_scale"]

#: the constructor options of the guides whose declared methods set them; every other guide
#: runs at its own defaults
GUIDE_OPTIONS: Dict[str, Callable[[], dict]] = {
    "MeanFieldNormalGuide": lambda: {"init_scale": _INIT_SCALE},
    "SemiImplicitGuide": lambda: {"num_mixing": int(_DSIVI["K1"]), "init_scale": _INIT_SCALE, "mixing_scale": _DSIVI["mixing_scale"]},
    "RadialDirectionalGuide": lambda: {"init_scale": _INIT_SCALE, "init_direction_epsilon": _RDP["init_direction_epsilon"]},
}


def _exported(module, base, leave_out=()) -> list:
    """The classes of ``module.__all__`` that subclass ``base``, in export order."""
    found = [getattr(module, n) for n in module.__all__]
    return [c for c in found if inspect.isclass(c) and issubclass(c, base) and c.__name__ not in leave_out]


def _guide_maker(cls):
    return lambda model: cls(model, **GUIDE_OPTIONS.get(cls.__name__, dict)())


#: every guide ``pyrozoo.guides`` exports (``model -> guide``) but the abstract base and
#: :class:`~pyrozoo.guides.CompositeGuide` (a composition of the others): a new export is a new
#: column of the matrix with no edit here
GUIDES: Dict[str, Callable[[object], object]] = {
    cls.__name__: _guide_maker(cls) for cls in _exported(pyrozoo.guides, SitewiseGuide, leave_out=("SitewiseGuide",))
}

#: particles of the importance-weighted objectives (the declarations' K)
PARTICLES = int(declared.method("iwae").defaults["num_particles"])

#: the constructor arguments of the objectives whose declared methods set them
OBJECTIVE_OPTIONS: Dict[str, Callable[[], dict]] = {
    "SIVI_ELBO": lambda: {"K": int(_DSIVI["K1"])},
    "DSIVI_ELBO": lambda: {"K1": int(_DSIVI["K1"]), "K2": int(_DSIVI["K2"])},
    "ImportanceWeighted_ELBO": lambda: {"num_particles": PARTICLES},
    "RenyiELBO": lambda: {"alpha": float(declared.method("renyi").defaults["alpha"]), "num_particles": PARTICLES},
    "ReweightedWakeSleep": lambda: {"num_particles": PARTICLES},
}


def _objective_maker(cls):
    return lambda: cls(**OBJECTIVE_OPTIONS.get(cls.__name__, dict)())


#: every objective (``() -> ELBO``): the ``ELBO`` subclasses ``pyrozoo.inference`` exports, and
#: Pyro's own ``Trace_ELBO``
OBJECTIVES: Dict[str, Callable[[], object]] = {
    "Trace_ELBO": lambda: pyro.infer.Trace_ELBO(),
    **{cls.__name__: _objective_maker(cls) for cls in _exported(pyrozoo.inference, pyro.infer.ELBO)},
}

#: the samplers; ``SG-MCMC-SA`` adapts an SSGL prior and is no combination of a plain model
SAMPLERS = ("SGLD", "SGHMC", "SG-MCMC-SA")

#: the guide column of a sampler's row
SAMPLES = "(samples)"


@dataclass(frozen=True)
class Combination:
    """One row of the matrix: a prior (or :data:`OWN_PRIOR`), a guide (or :data:`SAMPLES`)
    and an objective or sampler."""

    prior: str
    guide: str
    objective: str

    @property
    def is_sampler(self) -> bool:
        return self.objective in SAMPLERS

    def label(self) -> str:
        return f"{self.prior} / {self.guide} / {self.objective}"


#: the quality baseline: mean-field VI with the closed-form KL
BASELINE = Combination("NormalPrior", "MeanFieldNormalGuide", "ClosedFormKL_ELBO")
PLAIN_BASELINE = Combination(OWN_PRIOR, "MeanFieldNormalGuide", "ClosedFormKL_ELBO")


def combinations(plain: bool = False) -> List[Combination]:
    """Every prior x guide x objective and prior x sampler (a plain model: guide x objective
    and the samplers but SG-MCMC-SA, under its own prior), the baseline first."""
    priors = [OWN_PRIOR] if plain else list(PRIORS)
    samplers = [s for s in SAMPLERS if not (plain and s == "SG-MCMC-SA")]
    out = [Combination(p, g, o) for p in priors for g in GUIDES for o in OBJECTIVES]
    out += [Combination(p, SAMPLES, s) for p in priors for s in samplers]
    first = PLAIN_BASELINE if plain else BASELINE
    return [first] + [c for c in out if c != first]


def baseline_of(problem: "MatrixProblem") -> Combination:
    """The baseline under the problem's reference prior (``NormalPrior``, or a plain model's own)."""
    return PLAIN_BASELINE if problem.plain else BASELINE


def prior_baseline(prior: str) -> Combination:
    """Mean-field VI with the closed-form KL under ``prior``: the bar of every combination with that prior."""
    return Combination(prior, BASELINE.guide, BASELINE.objective)


# -- the problems -------------------------------------------------------------------------------

#: plain Pyro models: name -> the reference problem whose posterior is theirs
PLAIN_PROBLEMS = {"bostonHousing_linear_nig": "bostonHousing_linear_nig", "mnist_softmax_plain": "mnist_softmax"}


def matrix_problems() -> List[str]:
    """The problems of the matrix: the reference problems with a ``BayesianNeuralNetwork``
    model, then the plain Pyro models (:data:`PLAIN_PROBLEMS`)."""
    bnn = [p for p in ref.reference_problems() if ref.PROBLEMS[p].kind != "nig"]
    return bnn + list(PLAIN_PROBLEMS)


@dataclass
class MatrixProblem:
    """A problem of the matrix: its data, how its model is built, and its reference.

    :ivar reference: the reference problem whose stored posterior scores it.
    :ivar kind: ``"regression"`` or ``"classification"``.
    :ivar plain: a plain Pyro model (the prior of a combination is ignored: it has its own).
    """

    name: str
    reference: str
    kind: str
    plain: bool
    data: ref.ReferenceData
    spec: ref.ReferenceProblem

    @property
    def exact(self) -> bool:
        return self.spec.is_exact

    @property
    def targets(self) -> torch.Tensor:
        """Training targets as the model observes them."""
        y = self.data.y_train
        return y.unsqueeze(-1) if self.kind == "regression" and not self.plain else y

    def sampler_step(self) -> float:
        r"""``1 / (N h lambda)``: the inverse of a bound on the largest curvature of the
        log-likelihood of a linear model in its weights, ``N`` examples times ``h``, the
        curvature per unit of output (a Gaussian's precision; 1/2 for a softmax, the largest
        eigenvalue of its Hessian in the logits; the plain NIG model's noise precision unknown,
        the least-squares residuals' inverse variance), times ``lambda``, the largest eigenvalue
        of the inputs' second-moment matrix ``X^T X / N`` (bias column included). Langevin
        dynamics' drift is stable below twice that; a data-scaled step, so one setting serves
        every problem (SGLD at 1e-3 diverges on Boston and mixes slowly on MNIST at 1e-4)."""
        x = self.data.x_train
        X = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)
        lam = float(torch.linalg.eigvalsh(X.T @ X / len(x)).max())
        if self.kind == "classification":
            h = 0.5
        elif not self.plain:
            h = self.spec.noise_scale ** -2
        else:
            y = self.data.y_train.to(X.dtype)
            residual = y - X @ torch.linalg.lstsq(X, y[:, None]).solution.squeeze(-1)
            h = 1.0 / float(residual.square().mean())
        return 1.0 / (len(x) * h * lam)

    def build(self, prior_name: str, seed: int):
        """The model under ``prior_name`` (a plain model: its own), the network initialised from ``seed``."""
        torch.manual_seed(seed)
        if self.plain:
            return _plain_model(self)
        n, d = len(self.data.y_train), self.data.num_features
        if self.kind == "classification":
            out, likelihood = int(self.data.y_train.max()) + 1, CategoricalLikelihood(n)
        else:
            out, likelihood = 1, GaussianLikelihood(n, precision=self.spec.noise_scale ** -2)
        net = MLP(d, list(self.spec.hidden), out).double()
        return BayesianNeuralNetwork(net, PRIORS[prior_name](), likelihood)


def load_problem(name: str, data_dir=None) -> MatrixProblem:
    """The problem ``name`` of :func:`matrix_problems`, its data read from ``data_dir``."""
    plain = name in PLAIN_PROBLEMS
    reference = PLAIN_PROBLEMS.get(name, name)
    if reference not in ref.PROBLEMS or (not plain and ref.PROBLEMS[reference].kind == "nig"):
        raise ValueError(f"unknown matrix problem {name!r}; choose from {', '.join(matrix_problems())}")
    spec = ref.get_problem(reference)
    kind = "classification" if spec.kind == "classification" else "regression"
    return MatrixProblem(name, reference, kind, plain, ref.reference_data(spec, data_dir), spec)


def _plain_model(problem: MatrixProblem):
    """The plain Pyro model of a plain problem, called as ``model(x, y=None, subsample=None)``."""
    if problem.reference == "bostonHousing_linear_nig":
        a0, b0, v0 = problem.spec.nig
        nig = ref.nig_linear_model(a0, b0, v0)

        def model(x, y=None, subsample=None):
            # the reference's own model; the matrix trains full-batch, so a subsample is the data
            return nig(x, y)

        return model
    d, k = problem.data.num_features, int(problem.data.y_train.max()) + 1
    n_train = len(problem.data.y_train)

    def model(x, y=None, subsample=None):
        W = pyro.sample("W", dist.Normal(torch.zeros(d, k, dtype=x.dtype), 1.0).to_event(2))
        b = pyro.sample("b", dist.Normal(torch.zeros(k, dtype=x.dtype), 1.0).to_event(1))
        with pyro.plate("data", n_train if subsample is not None else len(x), subsample=subsample):
            return pyro.sample("y", dist.Categorical(logits=x @ W + b), obs=y)

    return model


# -- the budget and one run ---------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """What every combination gets (the same for all)."""

    #: full-batch gradient evaluations (optimizer steps or sampler iterations)
    steps: int = 200
    #: Adam's learning rate (objectives)
    lr: float = 0.03
    #: a sampler's step size in units of the inverse of the log-likelihood's largest curvature
    #: (:meth:`MatrixProblem.sampler_step`); SGHMC's is that times ``1 - momentum``
    step_scale: float = 1.0
    #: fraction of a sampler's iterations discarded
    burn_in: float = 0.5
    #: posterior draws of the predictive
    num_samples: int = 50
    #: posterior draws for the moments of a conjugate problem's weights
    moment_draws: int = 500

    def digest(self) -> str:
        """The budget as text (the runs files' ``budget`` column: a resume needs the same)."""
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items())


#: quick (test-suite) budget
QUICK_BUDGET = Budget(steps=20, num_samples=20, moment_draws=100)

#: noise draws per network draw of a regression predictive (W2 between predictives of y)
NOISE_DRAWS = 20
#: draws of the exact Student-t predictive of the NIG model
EXACT_PREDICTIVE_DRAWS = 2000


class _Stage:
    """Where a run is, for classifying its exception: refused up to the first step, failed after."""

    def __init__(self):
        self.name = "construction"
        self.steps = 0

    def callback(self, epoch, row):
        self.steps = epoch
        self.name = "training"


@dataclass
class PosteriorDraws:
    """A posterior's predictive at the test inputs (standardised units).

    ``f`` ``(S, n)`` network outputs and ``noise`` ``(S,)`` noise standard deviations
    (regression), or ``probs`` ``(S, n, K)`` (classification); ``weights`` ``(S, D)``
    draws of ``[w, b]`` on the conjugate problems."""

    f: Optional[torch.Tensor] = None
    noise: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    weights: Optional[torch.Tensor] = None


def run_combination(problem: MatrixProblem, combo: Combination, budget: Budget, seed: int, reference: "ReferencePredictive") -> dict:
    """Builds, trains and scores ``combo`` on ``problem`` against ``reference``
    (:func:`reference_predictive`); returns the row (see :data:`COLUMNS`), its ``run_status``
    not yet judged against the quality bar (:func:`assess`)."""
    row = {"problem": problem.name, "reference": problem.reference, "kind": problem.kind, **asdict(combo), "seed": seed, "steps": 0}
    stage = _Stage()
    t0 = time.perf_counter()
    pyro.clear_param_store()
    with warnings.catch_warnings(record=True) as caught, collect_events() as events:
        warnings.simplefilter("always")
        try:
            predictive = _train_and_predict(problem, combo, budget, seed, stage)
            stage.name = "scoring"
            row.update(score_predictive(problem, predictive, reference))
            error = None
        except Exception as e:  # noqa: BLE001 - every failure is a row of the matrix
            error = e
    row["seconds"] = time.perf_counter() - t0
    row["steps"] = stage.steps
    run_warnings = [w for w in caught if issubclass(w.category, (RunWarning, KLWarmupWarning))]
    row["warnings"] = ";".join(dict.fromkeys(w.category.__name__ for w in run_warnings))
    diverged = any(e.get("status") == "diverged" for e in events) or any(issubclass(w.category, DivergenceWarning) for w in run_warnings)
    if error is not None:
        text = clean_message(f"{type(error).__name__}: {str(error)}")
        if isinstance(error, DivergenceError):
            row.update(run_status="diverged", message=f"{stage.name}: {text}")
        elif stage.name == "construction":
            row.update(run_status="refused", message=text)
        else:
            row.update(run_status="failed", message=f"{stage.name}: {text}")
    elif diverged:
        row.update(run_status="diverged", message=_first_message(run_warnings, DivergenceWarning))
    elif run_warnings:
        row.update(run_status="warned", message=_first_message(run_warnings))
    elif not all(math.isfinite(row.get(k, math.nan)) for k in ("test_ll", "w2" if problem.kind == "regression" else "total_variation")):
        row.update(run_status="failed", message="scoring: a score is not finite")
    else:
        row.update(run_status="ok", message="")
    return row


def _first_message(caught, category=Warning) -> str:
    for w in caught:
        if issubclass(w.category, category):
            return clean_message(f"{w.category.__name__}: {w.message}")
    return ""


def clean_message(text: str) -> str:
    """A message on one line, without the table of trace shapes Pyro appends to an error
    raised inside a trace (the API's own words are before it)."""
    return " ".join(str(text).split(" Trace Shapes:")[0].split("\nTrace Shapes:")[0].split())


def _train_and_predict(problem: MatrixProblem, combo: Combination, budget: Budget, seed: int, stage: _Stage) -> PosteriorDraws:
    model = problem.build(combo.prior if not problem.plain else OWN_PRIOR, seed)
    x, y = problem.data.x_train, problem.targets
    n = len(x)
    pyro.set_rng_seed(seed)
    if combo.is_sampler:
        sampler = _sampler(combo.objective, model, budget.step_scale * problem.sampler_step())
        burn_in = int(budget.burn_in * budget.steps)
        kept = budget.steps - burn_in
        thin = max(1, kept // max(budget.moment_draws if problem.exact else budget.num_samples, 1))
        sink = InMemorySamples()
        sampler.run((x, y), num_steps=budget.steps, batch_size=n, burn_in=burn_in, thin=thin, sink=sink, seed=seed, progress=False, callback=stage.callback)
        if len(sink) == 0:
            raise ValueError(f"the sampler kept no draws ({budget.steps} steps, burn-in {burn_in})")
        samples = sink.load()
        every = torch.linspace(0, len(sink) - 1, min(len(sink), budget.num_samples)).round().long()
        guide = SampleGuide({k: v[every] for k, v in samples.items()})
        moment_guide = SampleGuide(samples)
        draws, moment_draws = len(every), len(sink)
    else:
        guide = GUIDES[combo.guide](model)
        objective = OBJECTIVES[combo.objective]()
        warmup = PRIOR_KL_WARMUP.get(combo.prior) if not problem.plain else None
        schedule = LinearKLWarmup(0.0, max(warmup * budget.steps, 1e-3)) if warmup else None
        fit(model, guide, (x, y), epochs=budget.steps, objective=objective, batch_size=n, lr=budget.lr, kl_schedule=schedule, seed=seed, progress=False, callback=stage.callback)
        # a point estimate's predictive is one network (its noise still drawn for W2)
        draws = 1 if declared.predicts_with_one_sample(guide) else budget.num_samples
        moment_guide, moment_draws = guide, (2 if draws == 1 else budget.moment_draws)
    stage.name = "prediction"
    pyro.set_rng_seed(seed + 1)
    return _predictive(problem, model, guide, draws, moment_guide if problem.exact else None, moment_draws)


def _sampler(name: str, model, lr: float):
    s = _SSGL
    friction = 1.0 - declared.SAMPLER_DEFAULTS["momentum"]
    if name == "SGLD":
        return SGLD(model, lr=lr)
    if name == "SGHMC":
        return SGHMC(model, lr=lr * friction, momentum=declared.SAMPLER_DEFAULTS["momentum"])
    # SGHMC-SA (zoo_protocols.methods "sghmc-sa"): the SSGL prior's empirical-Bayes start, then SA
    prior = getattr(model, "prior", None)
    if isinstance(prior, SpikeAndSlabPrior):
        prior.empirical_bayes(model.net, sigma=s["sigma"], rho=0.5, kappa0=s["kappa0"], kappa1=s["kappa1"], delta=0.5)
    scale, power, offset = s["omega"]
    adaptation = StochasticApproximation(prior, PolynomialDecay(scale, power, offset=offset), update_delta=s["update_delta"])
    return SGHMC(model, lr=lr * friction, momentum=s["momentum"], adaptations=[adaptation])


@torch.no_grad()
def _predictive(problem: MatrixProblem, model, guide, draws: int, moment_guide, moment_draws: int) -> PosteriorDraws:
    x_test = problem.data.x_test
    if problem.plain:
        sites = ["weight", "noise_precision"] if problem.kind == "regression" else ["W", "b"]
        values = Predictive(model, guide=guide, num_samples=draws, return_sites=sites)(x_test)
        if problem.kind == "classification":
            logits = x_test @ values["W"].reshape(draws, *values["W"].shape[-2:]) + values["b"].reshape(draws, 1, -1)
            return PosteriorDraws(probs=logits.softmax(-1))
        w = values["weight"].reshape(draws, -1)
        out = PosteriorDraws(f=w[:, :-1] @ x_test.T + w[:, -1:], noise=values["noise_precision"].reshape(draws).rsqrt())
        if moment_guide is not None:
            out.weights = Predictive(model, guide=moment_guide, num_samples=moment_draws, return_sites=["weight"])(x_test)["weight"].reshape(moment_draws, -1)
        return out
    f = posterior_samples(model, guide, x_test, num_samples=draws)["_RETURN"]
    if problem.kind == "classification":
        return PosteriorDraws(probs=f.softmax(-1))
    out = PosteriorDraws(f=f.squeeze(-1), noise=torch.full((draws,), problem.spec.noise_scale, dtype=f.dtype))
    if moment_guide is not None:
        # [w, b] of a linear network from its outputs at 0 and at the unit vectors
        d = problem.data.num_features
        probe = torch.cat([torch.zeros(1, d, dtype=x_test.dtype), torch.eye(d, dtype=x_test.dtype)])
        g = posterior_samples(model, moment_guide, probe, num_samples=moment_draws)["_RETURN"].squeeze(-1)
        out.weights = torch.cat([g[:, 1:] - g[:, :1], g[:, :1]], 1)
    return out


# -- the reference and the scores ---------------------------------------------------------------

@dataclass
class ReferencePredictive:
    """A stored reference as the scores use it: ``y_draws`` ``(R, n)`` of the predictive of
    ``y`` (regression, standardised units) or ``probs`` ``(n, K)`` (classification), and the
    exact posterior's ``mean``/``cov`` of ``[w, b]`` on the conjugate problems."""

    problem: str
    y_test: Optional[torch.Tensor] = None
    y_draws: Optional[torch.Tensor] = None
    probs: Optional[torch.Tensor] = None
    mean: Optional[torch.Tensor] = None
    cov: Optional[torch.Tensor] = None
    test_ll: float = math.nan
    info: dict = field(default_factory=dict)
    #: the scored arrays' identity (:func:`arrays_digest` of :data:`SCORED_ARRAYS`), kept with every run scored against them
    digest: str = ""


#: the stored arrays that :func:`reference_predictive` scores against, by problem kind (and
#: that identify a reference in the runs files): a stored array outside these (the thinned
#: draws of class probabilities, per-point log densities, the test inputs) may be rewritten
#: without making the runs scored against the reference stale
SCORED_ARRAYS = {
    "classification": ("y_test", "probs_mean"),
    "regression": ("y_test", "y_std", "f_draws", "noise_scale"),
    "linear": ("y_test", "y_std", "noise_scale", "exact_f_mean", "exact_f_var", "posterior_mean", "posterior_cov"),
    "nig": ("y_test", "y_std", "predictive_df", "predictive_loc", "predictive_scale", "posterior_lambda_inv", "posterior_a", "posterior_b", "posterior_mu"),
}


def arrays_digest(arrays: Dict[str, np.ndarray], keys: Optional[Iterable[str]] = None) -> str:
    """``"sha1:"`` and ten hex digits of the SHA-1 of the arrays (names, dtypes, shapes, bytes;
    all of them, or ``keys``): a reference rewritten with the same content keeps it (the
    ``.npz`` file's own bytes carry the zip entries' write times)."""
    if keys is not None:
        arrays = {k: arrays[k] for k in keys}
    h = hashlib.sha1()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        for part in (key, str(a.dtype), str(a.shape)):
            h.update(part.encode())
        h.update(a.tobytes())
    return "sha1:" + h.hexdigest()[:10]


_REFERENCES: Dict[Tuple[str, str, bool], ReferencePredictive] = {}


def reference_predictive(name: str, results_dir=None, *, quick: bool = False) -> ReferencePredictive:
    """The stored reference of problem ``name`` (in ``results_dir``, default the committed
    ones; ``quick``: the quick smoke references) as :func:`score_predictive` uses it (cached)."""
    key = (name, str(results_dir), quick)
    if key in _REFERENCES:
        return _REFERENCES[key]
    stored = ref.load_reference(name, results_dir, quick=quick)
    spec = ref.get_problem(name)
    g = torch.Generator().manual_seed(12345)
    out = ReferencePredictive(name, y_test=torch.as_tensor(stored.y_test), info=stored.info, digest=arrays_digest(stored.arrays, SCORED_ARRAYS[spec.kind]))
    if spec.kind == "classification":
        out.probs = torch.as_tensor(stored["probs_mean"], dtype=torch.float64)
        out.probs = out.probs / out.probs.sum(-1, keepdim=True)  # stored as float32
        y = torch.as_tensor(stored.y_test).long()
        out.test_ll = float(out.probs.gather(-1, y[:, None]).log().mean())
    elif spec.kind == "nig":
        df, loc, scale = (torch.as_tensor(stored[k], dtype=torch.float64) for k in ("predictive_df", "predictive_loc", "predictive_scale"))
        student = torch.distributions.StudentT(df, loc, scale)
        t = np.random.default_rng(12345).standard_t(float(df), size=(EXACT_PREDICTIVE_DRAWS, len(loc)))
        out.y_draws = loc + scale * torch.as_tensor(t)
        y = torch.as_tensor(stored.y_test, dtype=torch.float64)
        out.test_ll = float(student.log_prob(y).mean()) - math.log(float(stored["y_std"]))
        lam_inv = torch.as_tensor(stored["posterior_lambda_inv"], dtype=torch.float64)
        a, b = float(stored["posterior_a"]), float(stored["posterior_b"])
        out.mean = torch.as_tensor(stored["posterior_mu"], dtype=torch.float64)
        # the marginal of [w, b] is t_{2a}(mu, b/a Lambda^-1): covariance (b/a) Lambda^-1 * 2a / (2a - 2)
        out.cov = lam_inv * (b / a) * (2 * a) / (2 * a - 2)
    else:
        if spec.kind == "linear":
            # the exact Gaussian predictive (NUTS's is its Monte Carlo estimate)
            mean = torch.as_tensor(stored["exact_f_mean"], dtype=torch.float64)
            sd = torch.as_tensor(stored["exact_f_var"], dtype=torch.float64).sqrt()
            f = mean + sd * torch.randn(EXACT_PREDICTIVE_DRAWS // NOISE_DRAWS, len(mean), generator=g, dtype=torch.float64)
            out.mean = torch.as_tensor(stored["posterior_mean"], dtype=torch.float64)
            out.cov = torch.as_tensor(stored["posterior_cov"], dtype=torch.float64)
        else:
            f = torch.as_tensor(stored["f_draws"], dtype=torch.float64)
        sigma = float(stored["noise_scale"])
        out.y_draws = _noisy(f, torch.full((len(f),), sigma, dtype=torch.float64), g)
        y = torch.as_tensor(stored.y_test, dtype=torch.float64)
        out.test_ll = _gaussian_mixture_ll(f, torch.full((len(f),), sigma, dtype=torch.float64), y) - math.log(float(stored["y_std"]))
    _REFERENCES[key] = out
    return out


def _noisy(f: torch.Tensor, noise: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``(S * NOISE_DRAWS, n)`` draws of ``y = f + noise * eps``."""
    eps = torch.randn(NOISE_DRAWS, *f.shape, generator=generator, dtype=f.dtype)
    return (f + noise[:, None] * eps).reshape(-1, f.shape[-1])


def _gaussian_mixture_ll(f: torch.Tensor, noise: torch.Tensor, y: torch.Tensor) -> float:
    """Mean over test points of ``log (1/S) sum_s N(y | f_s, noise_s^2)``."""
    log_p = torch.distributions.Normal(f, noise[:, None]).log_prob(y)
    return float(metrics.log_mean_exp(log_p, 0).mean())


def score_predictive(problem: MatrixProblem, pred: PosteriorDraws, reference: ReferencePredictive) -> dict:
    """The scores of a predictive against the data and the reference (see the module docstring)."""
    y = problem.data.y_test
    out = {}
    if problem.kind == "classification":
        probs = pred.probs.double()
        mean = probs.mean(0)
        out["test_ll"] = float(metrics.log_mean_exp(probs.clamp_min(1e-300).log().gather(-1, y.expand(len(probs), -1).unsqueeze(-1)).squeeze(-1), 0).mean())
        out["accuracy"] = metrics.accuracy(mean, y)
        out["agreement"] = metrics.agreement(mean, reference.probs)
        out["total_variation"] = metrics.total_variation(mean, reference.probs)
        return out
    f, noise = pred.f.double(), pred.noise.double()
    y = y.double()
    out["test_ll"] = _gaussian_mixture_ll(f, noise, y) - math.log(problem.data.y_std)
    out["rmse"] = metrics.rmse(f.mean(0), y) * problem.data.y_std
    y_draws = _noisy(f, noise, torch.Generator().manual_seed(54321))
    out["coverage90"] = float(metrics.interval_coverage_from_samples(y_draws, y, [0.9])[0]) if torch.isfinite(y_draws).all() else math.nan
    out["w2"] = metrics.wasserstein2_predictive(y_draws, reference.y_draws) if torch.isfinite(y_draws).all() else math.nan
    if reference.mean is not None and pred.weights is not None and torch.isfinite(pred.weights).all():
        errors = metrics.posterior_moment_errors(pred.weights.double(), reference.mean, reference.cov)
        out["mean_error"], out["cov_error"] = errors["mean"], errors["cov"]
    return out


# -- the quality bar and the status -------------------------------------------------------------

#: one-sided level of the baseline's prediction interval
QUALITY_LEVEL = 0.99
#: smallest margins (the scores' units: nats per test point; W2 in standardised units; TV)
MARGIN_FLOORS = {"test_ll": 0.01, "w2": 0.005, "total_variation": 0.005}
#: higher is better for these scores, lower for the others
HIGHER_IS_BETTER = {"test_ll"}
#: minimum number of baseline seeds (the brief: at least 3)
MIN_SEEDS = 3


def judged_scores(problem_kind: str) -> Tuple[str, str]:
    return ("test_ll", "w2" if problem_kind == "regression" else "total_variation")


def _bar(values: np.ndarray, score: str, level: float) -> dict:
    from scipy import stats

    n = len(values)
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    t = float(stats.t.ppf(level, n - 1))
    margin = max(t * sd * math.sqrt(1 + 1 / n), MARGIN_FLOORS[score])
    bar = mean - margin if score in HIGHER_IS_BETTER else mean + margin
    return {"mean": mean, "sd": sd, "n": n, "t": t, "score": score, "margin": margin, "bar": bar}


def bar_for_mean(b: dict, m: int) -> dict:
    """The bar ``b`` for the mean of ``m`` seeds of a combination instead of one run: the
    prediction interval of the mean of ``m`` more baseline runs, margin
    ``max(t s sqrt(1/m + 1/n), floor)`` (``m = 1``: ``b`` itself)."""
    if m == 1:
        return b
    margin = max(b["t"] * b["sd"] * math.sqrt(1 / m + 1 / b["n"]), MARGIN_FLOORS[b["score"]])
    bar = b["mean"] - margin if b["score"] in HIGHER_IS_BETTER else b["mean"] + margin
    return {**b, "margin": margin, "bar": bar, "m": m}


def quality_bars(rows: pd.DataFrame, level: float = QUALITY_LEVEL) -> Dict[str, Dict[str, Dict[str, dict]]]:
    """``{problem: {prior: {score: {"mean", "sd", "n", "margin", "bar"}}}}`` from the rows of
    each prior's mean-field baseline (:func:`prior_baseline`) that ran cleanly (``run_status``
    ok); a prior with fewer than two such seeds on a problem has no bar there."""
    bars: Dict[str, Dict[str, Dict[str, dict]]] = {}
    if rows.empty:
        return bars
    for problem, group in rows.groupby("problem", sort=False):
        base = group[(group.guide == BASELINE.guide) & (group.objective == BASELINE.objective) & (group.run_status == "ok")]
        kind = group.kind.iloc[0]
        bars[problem] = {}
        for prior, runs in base.groupby("prior", sort=False):
            for score in judged_scores(kind):
                values = pd.to_numeric(runs[score], errors="coerce").dropna().to_numpy()
                if len(values) >= 2:
                    bars[problem].setdefault(prior, {})[score] = _bar(values, score, level)
    return bars


def reference_bars(bars: Dict[str, Dict[str, Dict[str, dict]]], problem: str) -> Dict[str, dict]:
    """The bars of ``problem``'s reference prior (``NormalPrior`` or a plain model's own)."""
    problem_bars = bars.get(problem, {})
    return problem_bars.get(BASELINE.prior) or problem_bars.get(OWN_PRIOR) or {}


def test_ll_bars(row, bars: Dict[str, Dict[str, Dict[str, dict]]]) -> List[Tuple[dict, str]]:
    """The test log-likelihood bars that apply to ``row``, each with whose baseline it is: its
    own prior's (where that baseline ran cleanly on two seeds or more) and the reference prior's."""
    out = []
    own = bars.get(row["problem"], {}).get(row["prior"], {}).get("test_ll")
    if own is not None:
        out.append((own, f"{row['prior']} baseline"))
    reference = reference_bars(bars, row["problem"]).get("test_ll")
    if reference is not None and reference is not own:
        out.append((reference, "reference prior's baseline"))
    return out


def test_ll_bar(row, bars: Dict[str, Dict[str, Dict[str, dict]]]) -> Tuple[Optional[dict], str]:
    """The test log-likelihood bar ``row`` is judged by: the lower (more lenient) of
    :func:`test_ll_bars`, with whose baseline it is."""
    candidates = test_ll_bars(row, bars)
    if not candidates:
        return None, ""
    return min(candidates, key=lambda c: c[0]["bar"])


def _bar_text(score: str, value: float, b: dict, whose: str) -> str:
    sign = "-" if score in HIGHER_IS_BETTER else "+"
    of = f"mean over {b['m']} seeds " if b.get("m", 1) > 1 else ""
    return f"{score} {of}{value:.4g} vs bar {b['bar']:.4g} ({whose} {b['mean']:.4g} {sign} {b['margin']:.3g}, n={b['n']})"


def _worse(score: str, value: float, b: dict) -> bool:
    return not math.isfinite(value) or (value < b["bar"] if score in HIGHER_IS_BETTER else value > b["bar"])


def meets_bar(row, bars: Dict[str, Dict[str, Dict[str, dict]]], seeds: int = 1) -> Tuple[str, str]:
    """``(quality, why)``: ``"pass"``, ``"below"`` (with the scores that missed) or ``"n/a"``
    (not scored, or no bar). The test log-likelihood is judged by :func:`test_ll_bar`; the
    distance to the reference only for the combinations whose target is the reference posterior.
    ``seeds > 1``: ``row`` holds the mean scores of that many seeds, judged by :func:`bar_for_mean`."""
    on_reference = row["prior"] in (BASELINE.prior, OWN_PRIOR)
    judged = []
    ll_bar, whose = test_ll_bar(row, bars)
    if ll_bar is not None:
        judged.append(("test_ll", ll_bar, whose))
    distance = judged_scores(row["kind"])[1]
    distance_bar = reference_bars(bars, row["problem"]).get(distance)
    if on_reference and distance_bar is not None:
        judged.append((distance, distance_bar, "reference prior's baseline"))
    if not judged or not math.isfinite(_number(row.get("test_ll"))):
        return "n/a", ""
    judged = [(score, bar_for_mean(b, seeds), whose) for score, b, whose in judged]
    missed = [_bar_text(score, _number(row.get(score)), b, whose) for score, b, whose in judged if _worse(score, _number(row.get(score)), b)]
    return ("below", "; ".join(missed)) if missed else ("pass", "")


def own_prior_quality(row, bars: Dict[str, Dict[str, Dict[str, dict]]]) -> str:
    """Finer and not judged: ``"pass"`` or ``"below"`` against mean-field VI under the row's own
    prior alone (``"n/a"`` for the reference prior, or where that baseline has no bar)."""
    own = bars.get(row["problem"], {}).get(row["prior"], {}).get("test_ll")
    if own is None or row["prior"] in (BASELINE.prior, OWN_PRIOR) or not math.isfinite(_number(row.get("test_ll"))):
        return "n/a"
    return "below" if _worse("test_ll", _number(row.get("test_ll")), own) else "pass"


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _clean_means(rows: pd.DataFrame) -> Dict[tuple, Tuple[pd.Series, int]]:
    """Per combination (problem, prior, guide, objective) run cleanly with two seeds or more:
    the mean of its clean seeds' scores and their number."""
    out = {}
    clean = rows[rows.run_status == "ok"]
    scores = ["test_ll", "w2", "total_variation"]
    for key, group in clean.groupby(KEY[:-1], sort=False):
        if group.seed.nunique() >= 2:
            mean = group.iloc[0].copy()
            for score in (s for s in scores if s in group):
                mean[score] = pd.to_numeric(group[score], errors="coerce").mean()
            out[key] = (mean, len(group))
    return out


def assess(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``quality`` and the final ``status``: a run that ran cleanly (``run_status``
    ok) but misses the bar is ``below_quality`` (its ``message`` says which score); any other
    ``run_status`` stands. A combination run cleanly with several seeds (a first seed's miss is
    rechecked with further seeds: :func:`run_problem`) is judged by its mean over them
    (:func:`bar_for_mean`), so one unlucky seed is not called a failure, nor hidden."""
    rows = rows.copy()
    bars = quality_bars(rows)
    means = _clean_means(rows) if len(rows) else {}
    quality, status, message, own = [], [], [], []
    for _, r in rows.iterrows():
        q, why = meets_bar(r, bars)
        key = tuple(r[k] for k in KEY[:-1])
        if r["run_status"] == "ok" and key in means:
            single = q
            q, why = meets_bar(means[key][0], bars, seeds=means[key][1])
            if single == "below" and q == "pass":
                why = f"this seed alone missed the bar, the mean over {means[key][1]} seeds meets it"
        quality.append(q)
        own.append(own_prior_quality(r, bars))
        if r["run_status"] == "ok" and q == "below":
            status.append("below_quality")
            message.append(why)
        elif r["run_status"] == "ok":
            status.append("ok")
            message.append(why or (clean_message(r["message"]) if isinstance(r["message"], str) else ""))
        else:
            status.append(r["run_status"])
            message.append(clean_message(r["message"]) if isinstance(r["message"], str) else "")
    rows["quality"], rows["status"], rows["message"], rows["own_prior_quality"] = quality, status, message, own
    return rows


#: objectives' former names (their deprecated aliases): rows written under them count for the new
#: names, so a rename does not strand the committed matrix
FORMER_NAMES = {"Renyi_ELBO": "RenyiELBO", "ReweightedWakeSleepLoss": "ReweightedWakeSleep"}


def current_names(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``objective`` column in today's names (:data:`FORMER_NAMES`)."""
    if "objective" not in table:
        return table
    return table.assign(objective=table.objective.replace(FORMER_NAMES))


def coverage_problems(table: pd.DataFrame) -> List[str]:
    """What a committed matrix (its rows as read by :func:`zoo_protocols.read_runs`) lacks against the
    code today: a problem whose first-seed rows are not exactly :func:`combinations`, a baseline
    (the reference prior's, the model's own, or any prior's that ran) with fewer than
    :data:`MIN_SEEDS` seeds, an unknown status, a row not ``ok`` without its message, a run
    without finite scores, a stored status that :func:`assess` no longer gives. Empty when
    current. A report, not a test (``make results-check``): a new export adds combinations that
    only a rerun of the matrix can fill."""
    problems = []
    statuses = set(STATUS_COLORS)
    table = current_names(table)
    first = table[table.seed == table.seed.min()]
    is_base = (table.guide == BASELINE.guide) & (table.objective == BASELINE.objective)
    for problem in matrix_problems():
        rows = first[first.problem == problem]
        have = set(zip(rows.prior, rows.guide, rows.objective))
        want = {(c.prior, c.guide, c.objective) for c in combinations(problem in PLAIN_PROBLEMS)}
        if have != want:
            missing, extra = sorted(want - have), sorted(have - want)
            problems.append(f"{problem}: {len(missing)} combination(s) without a row{' (' + ', '.join('/'.join(m) for m in missing[:3]) + (', ...' if len(missing) > 3 else '') + ')' if missing else ''}"
                            f"{f', {len(extra)} row(s) of combinations no longer exported' if extra else ''}")
        base = table[(table.problem == problem) & is_base]
        if base[base.prior.isin([BASELINE.prior, OWN_PRIOR])].seed.nunique() < MIN_SEEDS:
            problems.append(f"{problem}: the baseline has fewer than {MIN_SEEDS} seeds")
        for prior, runs in base.groupby("prior"):
            if (runs.run_status != "refused").any() and runs.seed.nunique() < MIN_SEEDS:
                problems.append(f"{problem}: the {prior} baseline has {runs.seed.nunique()} seed(s), its bar needs {MIN_SEEDS}")
    unknown = sorted(set(table.status) - statuses)
    if unknown:
        problems.append(f"unknown statuses {unknown}")
    silent = table[(table.status != "ok") & ~table.message.map(lambda m: isinstance(m, str) and len(m) > 0)]
    if len(silent):
        problems.append(f"{len(silent)} row(s) not ok without a message")
    ran = table[table.status.isin(["ok", "below_quality"])]
    if not np.isfinite(ran.test_ll.astype(float)).all():
        problems.append("a run that ran has a non-finite test_ll")
    if len(table) and not (assess(table).status.values == table.status.values).all():
        problems.append("stored statuses differ from what the quality rule gives today (rerun tools/reference_matrix.py: it resumes from its runs files)")
    return problems


# -- the whole matrix ---------------------------------------------------------------------------

#: the CSV's columns, in order
COLUMNS = [
    "problem", "prior", "guide", "objective", "seed", "status", "message", "test_ll", "agreement", "total_variation", "w2",
    "seconds", "accuracy", "rmse", "coverage90", "mean_error", "cov_error", "warnings", "quality", "own_prior_quality", "run_status", "kind",
    "reference", "steps", "budget", "reference_digest",
]
KEY = ["problem", "prior", "guide", "objective", "seed"]
#: the columns :func:`assess` derives (a runs file written before one of them existed still resumes)
ASSESSED = ("status", "quality", "own_prior_quality")
#: the columns a per-problem runs file must have
RUN_COLUMNS = [c for c in COLUMNS if c not in ASSESSED]


def planned_runs(problem: "MatrixProblem", seeds: Sequence[int], combos: Optional[Sequence[Combination]] = None) -> List[Tuple[Combination, int]]:
    """The runs of one problem: the baseline with every seed, then every other combination
    (default :func:`combinations`) with the first seed, then the further seeds of every other
    prior's baseline (:func:`prior_baseline`) among them."""
    chosen = list(combos) if combos is not None else combinations(problem.plain)
    base = baseline_of(problem)
    # the other priors' baselines' further seeds come last, so a matrix run before they were
    # planned resumes by adding them
    others = [c for c in dict.fromkeys(prior_baseline(c.prior) for c in chosen) if c != base and c in chosen]
    return [(base, s) for s in seeds] + [(c, seeds[0]) for c in chosen if c != base] + [(c, s) for c in others for s in seeds[1:]]


def runs_path(runs_dir, problem: str) -> Path:
    """The per-problem runs file (what resuming reads)."""
    return Path(runs_dir) / f"{problem}.csv"


def run_problem(
    problem: "MatrixProblem",
    budget: Budget,
    seeds: Sequence[int] = (0, 1, 2),
    *,
    runs_dir=None,
    reference_dir=None,
    quick_reference: bool = False,
    combos: Optional[Sequence[Combination]] = None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Runs every planned (combination, seed) of ``problem``, scored against its stored
    reference (:func:`reference_predictive` of ``reference_dir`` / ``quick_reference``), not already in its runs file
    under ``runs_dir`` (rewritten atomically after every run, so an interrupted matrix resumes
    where it stopped; a file made with another budget is refused) and returns its rows,
    not yet assessed (:func:`assess` judges them with the other problems' or alone)."""
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"the quality bar needs the baseline's spread over seeds: pass at least 2 seeds ({MIN_SEEDS} or more for a result), got {seeds}")
    digest = budget.digest()
    reference = reference_predictive(problem.reference, reference_dir, quick=quick_reference)
    if reference.y_test.shape != problem.data.y_test.shape or not torch.allclose(reference.y_test.double(), problem.data.y_test.double(), atol=1e-5):
        raise ValueError(f"the stored reference of {problem.reference} holds other test targets than the data read now: rebuild it (tools/reference_posteriors.py) or pass the data folder it was built from")
    out = runs_path(runs_dir, problem.name) if runs_dir is not None else None
    rows: List[dict] = []
    if out is not None and out.exists():
        previous = current_names(read_runs(out, RUN_COLUMNS, required=KEY + ["run_status", "budget", "reference_digest"], numeric=["seed", "seconds"]))
        stale = previous[previous.budget.astype(str) != digest]
        if len(stale):
            raise ValueError(f"{out} holds {len(stale)} runs made with another budget (digest {stale.budget.iloc[0]}, this run's {digest}): move it aside or pass another results folder")
        stale = previous[previous.reference_digest.astype(str) != reference.digest]
        if len(stale):
            raise ValueError(f"{out} holds {len(stale)} runs scored against another stored reference of {problem.reference} (file digest {stale.reference_digest.iloc[0]}, now {reference.digest}): move it aside to rerun them against this one")
        rows = previous.to_dict("records")
    done = {(r["prior"], r["guide"], r["objective"], int(r["seed"])) for r in rows}
    plan = planned_runs(problem, seeds, combos)
    todo = [(c, s) for c, s in plan if (c.prior, c.guide, c.objective, s) not in done]
    log(f"{problem.name}: {len(plan)} runs planned, {len(plan) - len(todo)} already done")
    # a refusal does not depend on the seed: a refused baseline's further seeds are not run
    refused = {Combination(r["prior"], r["guide"], r["objective"]) for r in rows if int(r["seed"]) == seeds[0] and r["run_status"] == "refused"}

    def run(todo, what=""):
        for i, (combo, seed) in enumerate(todo, 1):
            if seed != seeds[0] and combo in refused:
                continue
            row = run_combination(problem, combo, budget, seed, reference)
            if row["run_status"] == "refused":
                refused.add(combo)
            row["budget"], row["reference_digest"] = digest, reference.digest
            rows.append(row)
            shown = "  ".join(f"{k} {row[k]:.4g}" for k in ("test_ll", "w2", "total_variation") if isinstance(row.get(k), float) and math.isfinite(row[k]))
            note = "  " + row["message"][:100] if row["run_status"] != "ok" else ""
            log(f"{problem.name} {what}[{i}/{len(todo)}] {combo.label()} seed {seed}: {row['run_status']} {shown} ({row['seconds']:.1f} s){note}")
            if out is not None:
                atomic.write_csv(_frame(rows), out)

    run(todo)
    # a clean first seed below the bar is rechecked with the further seeds: the bar is a 99%
    # prediction interval, so among hundreds of sound combinations a few single runs miss it
    assessed = assess(_frame(rows))
    missed = assessed[(assessed.seed == seeds[0]) & (assessed.status == "below_quality")]
    done = {(r["prior"], r["guide"], r["objective"], int(r["seed"])) for r in rows}
    recheck = [(Combination(r.prior, r.guide, r.objective), s) for r in missed.itertuples() for s in seeds[1:] if (r.prior, r.guide, r.objective, s) not in done]
    if recheck:
        log(f"{problem.name}: {len(missed)} combination(s) below the bar on the first seed, rechecked with seeds {seeds[1:]}")
        run(recheck, "recheck ")
    return _frame(rows)


def collect(runs_dir, problems: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """The assessed matrix (:func:`assess`) from the runs files under ``runs_dir`` (all, or
    ``problems``'), in :func:`matrix_problems` order."""
    names = list(problems) if problems is not None else [p for p in matrix_problems() if runs_path(runs_dir, p).exists()]
    frames = [read_runs(runs_path(runs_dir, p), RUN_COLUMNS, required=KEY + ["run_status", "budget"], numeric=["seed", "seconds"], missing_ok=False) for p in names]
    if not frames:
        raise FileNotFoundError(f"no runs files under {runs_dir}: run the matrix first")
    return assess(pd.concat(frames, ignore_index=True))


def _frame(rows: List[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    for c in COLUMNS:
        if c not in frame.columns:
            frame[c] = math.nan if c not in ("status", "message", "warnings", "quality", "own_prior_quality") else ""
    return frame[COLUMNS]


def counts(table: pd.DataFrame) -> Dict[str, int]:
    """Per-combination counts over the seed-0 rows (baseline seeds beyond the first left out):
    ran (not refused), refused, warned, diverged, failed, below quality, ok, of the ok ones
    those below mean-field VI under their own prior alone (``ok_below_own_prior``, not judged),
    and the combinations a first seed's miss had rechecked with further seeds (``rechecked``)."""
    main = table[table.seed == table.seed.min()]
    status = main.status
    further = table[(table.seed != table.seed.min()) & ((table.guide != BASELINE.guide) | (table.objective != BASELINE.objective))]
    own = main.own_prior_quality if "own_prior_quality" in main else pd.Series("n/a", index=main.index)
    return {
        "combinations": len(main), "ran": int((status != "refused").sum()), "refused": int((status == "refused").sum()),
        "warned": int((status == "warned").sum()), "diverged": int((status == "diverged").sum()), "failed": int((status == "failed").sum()),
        "below_quality": int((status == "below_quality").sum()), "ok": int((status == "ok").sum()),
        "ok_below_own_prior": int(((status == "ok") & (own == "below")).sum()),
        "rechecked": len(further[KEY[:-1]].drop_duplicates()),
    }


def summary(table: pd.DataFrame, reference_dir=None, quick_reference: bool = False) -> pd.DataFrame:
    """Per problem: its reference (converged?), the baseline's bars and the status counts of its combinations (first seed)."""
    bars = quality_bars(table)
    out = []
    for problem, group in table.groupby("problem", sort=False):
        kind, reference = group.kind.iloc[0], group.reference.iloc[0]
        info = reference_predictive(reference, reference_dir, quick=quick_reference).info.get("diagnostics", {})
        distance = judged_scores(kind)[1]
        own = reference_bars(bars, problem)
        b_ll, b_d = own.get("test_ll", {}), own.get(distance, {})
        row = {
            "problem": problem, "reference": reference, "reference_converged": info.get("converged"),
            "reference_rhat_max": info.get("rhat_max", math.nan), "baseline_seeds": b_ll.get("n", 0),
            "baseline_test_ll": b_ll.get("mean", math.nan), "test_ll_margin": b_ll.get("margin", math.nan),
            "distance": distance, "baseline_distance": b_d.get("mean", math.nan), "distance_margin": b_d.get("margin", math.nan),
        }
        row.update(counts(group))  # its first seed's rows, and the combinations rechecked with more
        row["seconds"] = float(pd.to_numeric(group.seconds, errors="coerce").sum())
        out.append(row)
    return pd.DataFrame(out)


def wide_table(table: pd.DataFrame) -> pd.DataFrame:
    """The matrix as a page: one row per combination that ran on some problem, one column per
    problem (first seed), each cell its status and, where scored, ``z``, its test
    log-likelihood minus the mean of the baseline it is judged by (:func:`test_ll_bar`) in
    quality margins (below -1: under the bar)."""
    main = table[table.seed == table.seed.min()]
    bars = quality_bars(table)
    problems = list(dict.fromkeys(main.problem))
    cells: Dict[Tuple[str, str, str], Dict[str, str]] = {}
    for r in main.itertuples(index=False):
        b, _ = test_ll_bar(r._asdict(), bars)
        text = str(r.status)
        if r.status == "warned" and isinstance(r.warnings, str) and r.warnings:
            text += " (" + r.warnings.replace("Warning", "") + ")"
        if b and math.isfinite(_number(r.test_ll)):
            text += f" z={(_number(r.test_ll) - b['mean']) / b['margin']:+.1f}"
        cells.setdefault((r.prior, r.guide, r.objective), {})[r.problem] = text
    rows = [
        {"prior": k[0], "guide": k[1], "objective": k[2], **{p: v.get(p, "") for p in problems}}
        for k, v in cells.items()
        if any(not t.startswith("refused") for t in v.values())
    ]
    return pd.DataFrame(rows, columns=["prior", "guide", "objective", *problems])


def prior_effects(table: pd.DataFrame) -> pd.DataFrame:
    """What each prior does to the model, not judged: per problem and prior with a baseline bar
    (:func:`quality_bars`), its mean-field baseline's test log-likelihood (mean, sd, seeds)
    beside the reference prior's, their difference and that difference in the reference
    baseline's quality margins."""
    bars = quality_bars(table)
    out = []
    for problem, priors in bars.items():
        ref_ll = reference_bars(bars, problem).get("test_ll")
        for prior, scores in priors.items():
            ll = scores.get("test_ll")
            if ll is None or ref_ll is None:
                continue
            diff = ll["mean"] - ref_ll["mean"]
            out.append({
                "problem": problem, "prior": prior, "seeds": ll["n"], "test_ll": ll["mean"], "test_ll_sd": ll["sd"],
                "reference_prior_test_ll": ref_ll["mean"], "difference": diff, "difference_in_margins": diff / ref_ll["margin"],
            })
    return pd.DataFrame(out, columns=["problem", "prior", "seeds", "test_ll", "test_ll_sd", "reference_prior_test_ll", "difference", "difference_in_margins"])


def refusals(table: pd.DataFrame) -> pd.DataFrame:
    """The distinct refusal messages (first seed), each with the number of cells it refused and an example combination."""
    refused = table[(table.seed == table.seed.min()) & (table.status == "refused")]
    out = []
    for message, group in refused.groupby("message", sort=False):
        first = group.iloc[0]
        out.append({"cells": len(group), "problems": group.problem.nunique(), "example": f"{first.prior} / {first.guide} / {first.objective}", "message": message})
    return pd.DataFrame(out, columns=["cells", "problems", "example", "message"]).sort_values("cells", ascending=False, kind="stable")


# -- the comparison harness --------------------------------------------------------------------

#: the harness's per-run reference columns (:func:`harness_reference_metrics`)
HARNESS_COLUMNS = ["reference_w2_f"]


def harness_reference_metrics(dataset, seed: int, record, x_test: Optional[torch.Tensor] = None, reference_dir=None, *, quick: bool = False) -> Dict[str, float]:
    """The reference metrics of one run of the comparison harness (:func:`zoo_protocols.compare.compare`)
    on a UCI data set whose split :data:`~zoo_protocols.reference_posteriors.UCI_SPLIT` has a stored
    reference (``<dataset>_mlp``): ``reference_w2_f``, the 2-Wasserstein distance between the
    run's posterior predictive of the regression function ``f(x)`` and the reference's at each
    test input (standardised units; :func:`~pyrozoo.metrics.wasserstein2_predictive`), averaged.

    The harness's UCI protocol has its own model (its network width and a Gamma prior on the
    noise precision), the reference another (:data:`zoo_protocols.reference_posteriors.UCI_HIDDEN`
    hidden units, a fixed noise), so the distance is between the run's predictive and the
    reference model's exact-inference one: it counts the approximation's error and the models'
    difference together. It compares ``f`` and not ``y`` because the run's record
    (:class:`~pyrozoo.inference.prediction.PredictiveRecord`) carries the network outputs under
    its posterior (``outputs_at``), not its noise draws, and because the two noise models differ
    by construction.

    :param record: the run's predictive record; ``None``, a classification record or one
        without ``outputs_at`` give NaN.
    :param x_test: the run's (standardised) test inputs, checked to be the reference's; NaN
        when they are not (another split, a gap split, a user's data of the same name).
    :param reference_dir: where the references are (default: the committed ones); ``quick``:
        the quick smoke references there.
    :returns: ``{column: value}`` for every column of :data:`HARNESS_COLUMNS` (NaN where no
        reference applies).
    """
    out = {c: math.nan for c in HARNESS_COLUMNS}
    name = f"{dataset}_mlp" if isinstance(dataset, str) else None
    if name not in ref.PROBLEMS or int(seed) != ref.UCI_SPLIT or record is None or getattr(record, "kind", None) != "regression" or record.outputs_at is None:
        return out
    try:
        stored = ref.load_reference(name, reference_dir, quick=quick)
    except FileNotFoundError:
        return out
    reference_x = torch.as_tensor(stored.x_test)
    if x_test is None or tuple(x_test.shape) != tuple(reference_x.shape) or not torch.allclose(x_test.detach().cpu().float(), reference_x, atol=1e-4):
        return out
    with torch.no_grad():
        f = record.outputs_at(x_test).detach().cpu().double()
    f = f.reshape(f.shape[0], -1)
    out["reference_w2_f"] = metrics.wasserstein2_predictive(f, torch.as_tensor(stored["f_draws"], dtype=torch.float64)) if torch.isfinite(f).all() else math.nan
    return out


# -- the heat map -------------------------------------------------------------------------------

#: status colours of the heat map
STATUS_COLORS = {
    "ok": "#4daf4a", "below_quality": "#ff7f00", "warned": "#ffd92f", "diverged": "#e41a1c", "failed": "#984ea3", "refused": "#d9d9d9",
}


def plot_heatmap(table: pd.DataFrame):
    """Status (colour) and test log-likelihood relative to the baseline (text: its difference
    in units of the quality margin) of every combination (rows) on every problem (columns),
    the seed-0 rows; combinations refused on every problem are left out (counted in the title)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    main = table[table.seed == table.seed.min()].copy()
    main["combination"] = main.prior.astype(str) + " / " + main.guide.astype(str) + " / " + main.objective.astype(str)
    problems = list(dict.fromkeys(main.problem))
    refused_everywhere = main.groupby("combination", sort=False).status.apply(lambda s: (s == "refused").all())
    shown = [c for c in dict.fromkeys(main.combination) if not refused_everywhere[c]]
    codes = list(STATUS_COLORS)
    grid = np.full((len(shown), len(problems)), np.nan)
    text = [["" for _ in problems] for _ in shown]
    bars = quality_bars(table)
    index = {c: i for i, c in enumerate(shown)}
    for r in main.itertuples(index=False):
        if r.combination not in index:
            continue
        i, j = index[r.combination], problems.index(r.problem)
        grid[i, j] = codes.index(r.status) if r.status in codes else np.nan
        b, _ = test_ll_bar(r._asdict(), bars)
        if b and math.isfinite(_number(r.test_ll)):
            z = (_number(r.test_ll) - b["mean"]) / b["margin"]
            text[i][j] = f"{z:+.1f}" if abs(z) < 100 else ("+" if z > 0 else "-") + "inf"
    fig, ax = plt.subplots(figsize=(4.0 + 1.1 * len(problems), 2.0 + 0.14 * len(shown)))
    ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=ListedColormap([STATUS_COLORS[c] for c in codes]), vmin=-0.5, vmax=len(codes) - 0.5, interpolation="nearest")
    for i in range(len(shown)):
        for j in range(len(problems)):
            if text[i][j]:
                ax.text(j, i, text[i][j], ha="center", va="center", fontsize=5)
    ax.set_xticks(range(len(problems)))
    ax.set_xticklabels(problems, rotation=45, ha="left", fontsize=7)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(shown)))
    ax.set_yticklabels(shown, fontsize=5)
    ax.legend(handles=[Patch(color=STATUS_COLORS[c], label=c) for c in codes], loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    ax.set_title(
        f"{len(shown)} combinations that ran somewhere ({int(refused_everywhere.sum())} refused everywhere, not shown)\n"
        "colour: status; text: (test LL - baseline mean) / quality margin (below -1: under the bar)", fontsize=8, pad=60,
    )
    fig.tight_layout()
    return fig


__all__ = [
    "PRIORS", "GUIDES", "GUIDE_OPTIONS", "OBJECTIVES", "OBJECTIVE_OPTIONS", "SAMPLERS", "FORMER_NAMES", "current_names", "OWN_PRIOR", "SAMPLES", "PRIOR_KL_WARMUP", "Combination", "BASELINE", "PLAIN_BASELINE",
    "combinations", "matrix_problems", "MatrixProblem", "load_problem", "Budget", "QUICK_BUDGET", "run_combination",
    "reference_predictive", "score_predictive", "prior_baseline", "quality_bars", "reference_bars", "test_ll_bars", "test_ll_bar", "meets_bar", "own_prior_quality", "assess",
    "planned_runs", "run_problem", "runs_path", "collect", "counts", "summary", "wide_table", "prior_effects", "refusals", "plot_heatmap", "COLUMNS", "KEY", "HARNESS_COLUMNS", "harness_reference_metrics",
]
