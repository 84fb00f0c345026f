"""The own-model matrix (issue 42): every model of the registry (:data:`REGISTRY`) under every
exported guide x objective and every exported sampler, each cell ``ok`` (trained, predicted
and scored, every score finite, no site silently left to its prior) or ``refused`` before
training with a message that names the fix. Cells are generated from ``pyrozoo.guides.__all__``
and ``pyrozoo.inference.__all__``; Pyro's ``TraceEnum_ELBO`` is an objective where a model
enumerates (the only one that sums a discrete site out).

The default run is the smoke variant (a few steps per cell); ``--runslow`` adds the scored
variant on every model (:data:`SCORED`): every ok cell's test log-likelihood must come within a
tolerance of the exact (conjugate, Gibbs) or NUTS posterior predictive's, or, for a guide whose
family cannot reach it, of Pyro's own twin AutoGuide's (:func:`score_floor`)."""

import functools
import math
import re
import warnings
from typing import Tuple

import pyro
import pytest
from pyro import poutine
import torch
from pyro.infer import MCMC, NUTS, Predictive, Trace_ELBO, TraceEnum_ELBO
from pyro.infer.autoguide import AutoDelta, AutoNormal
from pyro.infer.elbo import ELBO

import pyrozoo.guides as guides
import pyrozoo.inference as inference
from pyrozoo.guides import CompositeGuide, SitewiseGuide
from pyrozoo.inference import PriorDrawnSiteWarning, RunWarning, StochasticGradientMCMC, evaluate, fit, importance_resampled_samples
from pyrozoo.inference.sample_storage import InMemorySamples
from tests.api_cases import exported_classes
from tests.inference.own_models import PROBLEM, REGISTRY, bayesian_lasso_draws, case


GUIDES = exported_classes(guides, SitewiseGuide, exclude=(SitewiseGuide,))
OBJECTIVES = exported_classes(inference, ELBO)
SAMPLERS = exported_classes(inference, StochasticGradientMCMC, exclude=(StochasticGradientMCMC,))

#: a refusal names what to do: one of these (case-insensitive) must be in its message
FIX = re.compile(r"\b(use|pass|write|give|put|wrap|train with|convert|hide|marginalise|compose|needs?)\b|CompositeGuide|TraceEnum_ELBO", re.I)


def test_the_axes_are_the_exports():
    assert guides.MeanFieldNormalGuide in GUIDES and CompositeGuide not in GUIDES
    assert inference.ClosedFormKL_ELBO in OBJECTIVES and inference.SGLD in SAMPLERS
    assert {"mixture", "hierarchical", "sparse_regression", "mlp_pyromodule"} <= set(REGISTRY)


def _objectives(c):
    return OBJECTIVES + ([TraceEnum_ELBO] if c.enumerated else [])


def _make_objective(cls):
    return cls(max_plate_nesting=1) if cls is TraceEnum_ELBO else cls()


def run_cell(c, guide_cls, objective_cls, *, epochs, lr=0.02, num_samples=8):
    """``(status, detail)`` of one guide x objective cell on the registry case ``c``. An
    importance-weighted objective fits the implied distribution of its K draws, not the guide
    (Domke & Sheldon 2018): its cells predict from importance-resampled draws."""
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        try:
            guide = guide_cls(c.full, hide=c.enumerated)
            history = fit(c.full, guide, (c.x, c.y), objective=_make_objective(objective_cls), epochs=epochs, batch_size=None, lr=lr, progress=False, seed=0)
        except (ValueError, TypeError, NotImplementedError) as refusal:
            return "refused", str(refusal)
        if issubclass(objective_cls, inference.RenyiELBO):
            draws = importance_resampled_samples(c.full, guide, c.x, c.y, num_samples=num_samples, num_proposals=_make_objective(objective_cls).num_particles)
            scores = evaluate(c.full, None, c.x, c.y, num_samples=num_samples, samples=draws)
        else:
            scores = evaluate(c.full, guide, c.x, c.y, num_samples=num_samples)
    return _status(history, scores, record)


#: the samplers' step sizes (those that draw the conjugate posterior in tests/inference/test_own_models.py)
SAMPLER_LR = {"SGLD": 1e-4, "SGHMC": 1e-5}


def run_sampler_cell(c, sampler_cls, *, steps, thin=1):
    pyro.set_rng_seed(0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sink = InMemorySamples()
        try:
            history = sampler_cls(c.full, lr=SAMPLER_LR.get(sampler_cls.__name__, 1e-5)).run((c.x, c.y), num_steps=steps, batch_size=None, burn_in=steps // 2, thin=thin, sink=sink, progress=False, seed=0)
        except (ValueError, TypeError, NotImplementedError) as refusal:
            return "refused", str(refusal)
        draws = sink.load()
        scores = evaluate(c.full, None, c.x, c.y, num_samples=len(next(iter(draws.values()))), samples=draws)
    return _status(history, scores, record)


def _status(history, scores, record):
    prior_drawn = [str(w.message) for w in record if issubclass(w.category, PriorDrawnSiteWarning)]
    if prior_drawn:
        return "prior-drawn", prior_drawn[0]
    if not all(math.isfinite(v) for v in scores.values()):
        return "non-finite", str(scores)
    run = [w.category.__name__ for w in record if issubclass(w.category, RunWarning)]
    if run:
        # a run-time warning must mark the run's status (its result is not written up as valid)
        return ("warned", run) if history.attrs["status"] != "ok" or run == ["WeightCollapseWarning"] else ("unmarked", run)
    return "ok", scores


def _check(status, detail, where):
    assert status in ("ok", "refused", "warned"), f"{where}: {status}: {detail}"
    if status == "refused":
        assert FIX.search(detail), f"{where}: the refusal does not name a fix: {detail}"


CELLS = [(name, g, o) for name in REGISTRY for g in GUIDES for o in _objectives(case(name))]


@pytest.mark.parametrize("name, guide_cls, objective_cls", CELLS, ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_every_guide_and_objective_cell_is_ok_or_refused_naming_the_fix(name, guide_cls, objective_cls):
    c = case(name)
    status, detail = run_cell(c, guide_cls, objective_cls, epochs=3)
    _check(status, detail, f"{name} x {guide_cls.__name__} x {objective_cls.__name__}")


@pytest.mark.parametrize("name", REGISTRY)
@pytest.mark.parametrize("sampler_cls", SAMPLERS, ids=lambda c: c.__name__)
def test_every_sampler_cell_is_ok_or_refused_naming_the_fix(name, sampler_cls):
    status, detail = run_sampler_cell(case(name), sampler_cls, steps=6)
    _check(status, detail, f"{name} x {sampler_cls.__name__}")


# -- scored: against the exact or a NUTS posterior predictive ------------------------------------

#: the models scored: all of the registry. The linear model's and the sparse regression's
#: references are exact (conjugate; Gibbs), the others' NUTS
SCORED = REGISTRY
#: how far an ok cell's test log-likelihood may fall below the reference's, in nats per point:
#: the approximation gap a mean-field family or a point estimate is allowed at n = 120
GAP = 0.05


def _exact_test_ll(c):
    mean, cov = PROBLEM.posterior()
    f_var = (c.x @ cov * c.x).sum(-1)
    return float(torch.distributions.Normal(c.x @ mean, (f_var + PROBLEM.noise_scale**2).sqrt()).log_prob(c.y).mean())


@functools.lru_cache(maxsize=None)
def reference_test_ll(name: str) -> Tuple[float, float]:
    """``(test log-likelihood, its Monte Carlo sd)`` of the reference posterior predictive:
    exact for the linear model, from 1000 exact Gibbs draws for the sparse regression
    (:func:`~tests.inference.own_models.bayesian_lasso_draws`), else from 1000 NUTS draws
    (one chain after 500 warm-up steps; enumerated sites summed out, as NUTS does with
    ``max_plate_nesting``). The sd is that of the mean over examples of the per-example
    log-mean-exp, from 10 blocks of 100 draws."""
    c = case(name)
    if name == "linear":
        return _exact_test_ll(c), 0.0
    if name == "sparse_regression":
        draws = {"w": bayesian_lasso_draws(c.x, c.y, num_samples=1000)}
    else:
        pyro.set_rng_seed(0)
        mcmc = MCMC(NUTS(c.full, max_plate_nesting=1), num_samples=1000, warmup_steps=500, disable_progbar=True)
        mcmc.run(c.x, c.y)
        draws = mcmc.get_samples()
    return _test_ll_and_sd(c, draws)


def _test_ll_and_sd(c, draws):
    """``(test log-likelihood, its Monte Carlo sd)`` under 1000 posterior ``draws``: the sd is
    that of the mean over examples of the per-example log-mean-exp, from 10 blocks of 100."""
    whole = evaluate(c.full, None, c.x, c.y, num_samples=1000, samples=draws)["test_ll"]
    blocks = [evaluate(c.full, None, c.x, c.y, num_samples=100, samples={k: v[i::10] for k, v in draws.items()})["test_ll"] for i in range(10)]
    return whole, float(torch.tensor(blocks).std()) / math.sqrt(10)


def _fit_twin(c, twin_cls):
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    # (an enumerated site is summed out, as the zoo cells' TraceEnum_ELBO does)
    guide = twin_cls(poutine.block(c.full, hide=list(c.enumerated))) if c.enumerated else twin_cls(c.full)
    objective = TraceEnum_ELBO(max_plate_nesting=1) if c.enumerated else Trace_ELBO()
    fit(c.full, guide, (c.x, c.y), objective=objective, epochs=SCORED_EPOCHS.get(c.name, DEFAULT_SCORED_EPOCHS), batch_size=None, lr=0.02, progress=False, seed=0)
    return guide


@functools.lru_cache(maxsize=None)
def twin_test_ll(name: str, twin_name: str) -> Tuple[float, float]:
    """``(test log-likelihood, its Monte Carlo sd)`` of Pyro's own AutoGuide ``twin_name``
    trained as a scored cell is (:data:`SCORED_EPOCHS` full-batch steps, the same step size),
    scored as the reference is, from 1000 of its draws."""
    c = case(name)
    guide = _fit_twin(c, TWINS[twin_name])
    pyro.set_rng_seed(1)
    # (an AutoGuide's own auxiliary sites, e.g. AutoNormal's ``<site>_unconstrained``, are not the model's)
    latent = poutine.trace(c.full).get_trace(c.x, c.y).nodes
    return _test_ll_and_sd(c, {k: v for k, v in Predictive(guide, num_samples=1000)(c.x, c.y).items() if k in latent})


#: Pyro's AutoGuides a zoo family is held to where the family cannot reach the reference
#: posterior (docs/own_models.md, "Which guide covers which site"): AutoDelta for the point
#: estimate, else mean-field AutoNormal, the weakest family a user of the field accepts
TWINS = {"AutoNormal": AutoNormal, "AutoDelta": AutoDelta}
#: full-batch steps of a scored cell and of its twin: 600, and 3000 on the p = 200 regression,
#: whose sparse-VD cells (starting at log sigma^2 = -10) are still 0.08 nats per point short
#: of AutoNormal at 600 steps and level with it at 3000
SCORED_EPOCHS = {"sparse_regression": 3000}
DEFAULT_SCORED_EPOCHS = 600
#: guides whose family is held to neither on a model, with the measured reason: a strict
#: xfail of the cells that fit the guide by the exclusive KL, the ELBO (importance-weighted
#: cells predict from resampled draws, and reweighted wake-sleep fits the guide by the
#: inclusive KL: both close the gap), so that one which starts to pass fails the run and the
#: list cannot go stale
FAMILY_GAPS = {
    ("sparse_regression", "VariationalDropoutGuide"): (
        "one log alpha per site (the layer parameterisation, Kingma et al. 2015) ties every weight's sd to its "
        "mean: the 197 null weights of p = 200 cannot sit near zero with a small sd, and the in-sample predictive "
        "ends ~0.2 nats per point below AutoNormal's (-1.54 after 600 steps, -1.76 after 3000, against -1.36); "
        "SparseVariationalDropoutGuide (a log alpha per weight) is the dropout family for a sparse design"
    ),
}


def score_floor(name: str, guide_cls) -> Tuple[float, float, str]:
    """``(floor, its Monte Carlo sd, what it is)`` for a zoo guide's cell: the reference
    posterior predictive's test log-likelihood, or the twin AutoGuide's where that is lower
    (the family gap: a mean-field MLP or a p > n regression)."""
    reference, sd = reference_test_ll(name)
    twin = "AutoDelta" if guide_cls is guides.DeltaGuide else "AutoNormal"
    score, twin_sd = twin_test_ll(name, twin)
    return (reference, sd, "reference") if reference <= score else (score, twin_sd, twin)


def _exclusive_kl(objective_cls) -> bool:
    return not issubclass(objective_cls, (inference.RenyiELBO, inference.ReweightedWakeSleep))


SCORED_CELLS = [
    pytest.param(name, g, o, marks=pytest.mark.xfail(reason=FAMILY_GAPS[name, g.__name__], strict=True) if (name, g.__name__) in FAMILY_GAPS and _exclusive_kl(o) else ())
    for name in SCORED for g in GUIDES for o in _objectives(case(name))
]


@pytest.mark.slow
@pytest.mark.parametrize("name, guide_cls, objective_cls", SCORED_CELLS, ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_every_ok_cell_scores_the_reference_predictive(name, guide_cls, objective_cls):
    """After :data:`SCORED_EPOCHS` (default 600) full-batch steps an ok cell's test
    log-likelihood (200 draws) is at most :data:`GAP` nats per point below its floor
    (:func:`score_floor`: the reference posterior predictive's, or Pyro's twin AutoGuide's
    where the family cannot reach the reference), less four Monte Carlo sds of the floor and of the cell's own
    estimate (its sd bounded by the floor's times sqrt(1000 / 200))."""
    c = case(name)
    status, detail = run_cell(c, guide_cls, objective_cls, epochs=SCORED_EPOCHS.get(name, DEFAULT_SCORED_EPOCHS), num_samples=200)
    _check(status, detail, f"{name} x {guide_cls.__name__} x {objective_cls.__name__}")
    if status == "ok":
        floor, sd, what = score_floor(name, guide_cls)
        tolerance = GAP + 4 * sd * (1 + math.sqrt(1000 / 200))
        assert detail["test_ll"] >= floor - tolerance, (detail, what, floor, tolerance, reference_test_ll(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", SCORED)
@pytest.mark.parametrize("sampler_cls", SAMPLERS, ids=lambda c: c.__name__)
def test_every_ok_sampler_cell_scores_the_reference_predictive(name, sampler_cls):
    """A sampler is held to the reference itself (it is asymptotically exact): the 1000
    draws (every second) of the last half of a 4000-step full-batch chain (step sizes
    :data:`SAMPLER_LR`) come within :data:`GAP` nats per point of the reference posterior
    predictive's test log-likelihood, less four Monte Carlo sds of each (the chain's taken
    as twice the reference's, for its autocorrelation)."""
    c = case(name)
    status, detail = run_sampler_cell(c, sampler_cls, steps=4000, thin=2)
    _check(status, detail, f"{name} x {sampler_cls.__name__}")
    if status == "ok":
        reference, sd = reference_test_ll(name)
        tolerance = GAP + 4 * sd * (1 + 2)
        assert detail["test_ll"] >= reference - tolerance, (detail, reference, tolerance)
