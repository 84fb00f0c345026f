"""Run-time failure detection (:mod:`pyrozoo.inference.diagnostics`): the rules on known
figures; fit and the samplers on real configurations that go wrong — SGLD with too large a
step on Boston housing (issue 22: RMSE 129 written as a valid result), SVI whose loss
diverges (finite and non-finite), importance weights that collapse, ARD / sparse VD collapsing
onto the prior without KL warm-up — and healthy configurations that must stay quiet."""

import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.data import UCIDataset
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide, SparseVariationalDropoutGuide, VariationalDropoutGuide
from pyrozoo.inference import SGHMC, SGLD, BlundellKLReweighting, ImportanceWeighted_ELBO, LinearKLWarmup, ReweightedWakeSleep, evaluate, fit
from pyrozoo.inference.diagnostics import (
    CHANCE_SDS,
    ENERGY_GROWTH,
    ESS_COLLAPSE,
    ESS_READINGS,
    KL_COLLAPSE,
    PREDICTION_GROWTH,
    DivergenceError,
    DivergenceWarning,
    PriorCollapseWarning,
    RunMonitor,
    RunWarning,
    SPIKE_ONLY_INCLUSION,
    SPIKE_ONLY_RATE,
    WeightCollapseWarning,
    classification_at_chance,
    collect_events,
    energy_blowup,
    posterior_check,
    prediction_blowup,
    prior_collapse,
    regression_at_chance,
    run_status,
    SpikeOnlyLeftWarning,
    SpikeOnlyWarning,
    spike_only,
    spike_only_left,
    weight_collapse,
)
from pyrozoo.inference.importance_weighted import weight_diagnostics
from pyrozoo.inference.sample_storage import InMemorySamples, SampleGuide
from pyrozoo.models import MLP, ARDPrior, BayesianNeuralNetwork, GaussianLikelihood, LogUniformPrior, NormalPrior
from pyrozoo.models.likelihoods import CategoricalLikelihood
from tests.inference.cases import conjugate_problem, linear_regression_model, small_bnn

from tests.conftest import DATA
needs_uci = pytest.mark.skipif(not (DATA / "uci" / "bostonHousing").is_dir(), reason="shared UCI data not available")


# -- the rules on known figures -------------------------------------------------------------
# (energy, best earlier energy, largest earlier magnitude, fires): just over / at / under the
# rule's rise of ENERGY_GROWTH times the magnitude, negative energies, no comparable row, the 1-nat floor
G = ENERGY_GROWTH
ENERGY_CASES = [
    (10.0 + G * 10.0 + 1e-6, 10.0, 10.0, True),
    (10.0 + G * 10.0, 10.0, 10.0, False),
    (-1000.0 + G * 1000.0 + 1.0, -1000.0, 1000.0, True),
    (-500.0, -1000.0, 1000.0, False),
    (1e9, None, 1.0, False),
    (G * 1.0 + 0.5, 0.0, 0.0, True),
    (G * 1.0 - 0.5, 0.0, 0.0, False),
]


@pytest.mark.parametrize("energy, best, scale, fires", ENERGY_CASES)
def test_energy_blowup_rule(energy, best, scale, fires):
    found = energy_blowup(energy, best, scale)
    assert (found is not None) == fires
    if fires:
        assert found["rise_over_scale"] == pytest.approx((energy - best) / max(scale, 1.0))


# (summed squared error, summed squared targets, the first step's ratio, fires)
PREDICTION_CASES = [
    (PREDICTION_GROWTH * 4.0 + 1e-6, 4.0, None, True),
    (PREDICTION_GROWTH * 4.0, 4.0, None, False),
    (PREDICTION_GROWTH * 4.0 + 1e-6, 4.0, 0.5, True),  # a start closer than the zero function changes nothing
    (3.0, 4.0, None, False),
    (1e12, 0.0, None, False),  # no scale to compare with: all-zero targets
    (PREDICTION_GROWTH * 4.0 * 50.0, 4.0, 50.0, False),  # badly scaled targets: judged against the start
    (PREDICTION_GROWTH * 4.0 * 50.0 + 1e-3, 4.0, 50.0, True),
]


@pytest.mark.parametrize("error, targets, initial, fires", PREDICTION_CASES)
def test_prediction_blowup_rule(error, targets, initial, fires):
    assert (prediction_blowup(error, targets, initial_ratio=initial) is not None) == fires


# (per-row mean ESS, readings per row, K, fires)
ESS_CASES = [
    ([1.0] * ESS_READINGS, 1, 8, True),
    ([1.0] * (ESS_READINGS - 1), 1, 8, False),  # too few readings to judge
    ([1.0] * ESS_READINGS, 1, 1, False),  # one particle: nothing to collapse
    ([1.2], ESS_READINGS, 8, True),  # one row averaging enough steps
    ([8.0] + [1.0] * ESS_READINGS, 1, 8, True),  # only the trailing readings count
    ([1.0] * ESS_READINGS + [8.0], 1, 8, False),  # (8 + 4 * 1) / 5 is not below 1.5
    ([ESS_COLLAPSE] * ESS_READINGS, 1, 8, False),
]


@pytest.mark.parametrize("ess, readings, k, fires", ESS_CASES)
def test_weight_collapse_rule(ess, readings, k, fires):
    assert (weight_collapse(ess, [readings] * len(ess), k) is not None) == fires


# (sum of rho per row, delta per row, fires) for p = 200 weights: the rule's two thresholds
# just under / at, a dip that recovers, a window of the last quarter of the rows
P = 200
LOW_RHO, LOW_DELTA = SPIKE_ONLY_INCLUSION * 0.99, SPIKE_ONLY_RATE / P * 0.99
SPIKE_CASES = [
    ([LOW_RHO] * 4, [LOW_DELTA] * 4, True),
    ([LOW_RHO] * 3, [LOW_DELTA] * 3, False),  # fewer rows than the rule's minimum
    ([SPIKE_ONLY_INCLUSION] * 4, [LOW_DELTA] * 4, False),
    ([LOW_RHO] * 4, [SPIKE_ONLY_RATE / P] * 4, False),
    ([100.0] * 12 + [LOW_RHO] * 4, [0.5] * 12 + [LOW_DELTA] * 4, True),  # the last quarter: 4 of 16 rows
    ([100.0] * 12 + [LOW_RHO] * 4 + [3.0], [0.5] * 12 + [LOW_DELTA] * 4 + [0.02], False),  # it left
    ([100.0] * 13 + [LOW_RHO] * 4, [0.5] * 13 + [LOW_DELTA] * 4, False),  # 17 rows: a window of 5
]


@pytest.mark.parametrize("rho_sums, deltas, fires", SPIKE_CASES)
def test_spike_only_rule(rho_sums, deltas, fires):
    assert (spike_only(rho_sums, deltas, P) is not None) == fires


# (sum of rho per row, whether the chain has left): four rows at least half a weight in the slab
LEFT_CASES = [
    ([LOW_RHO] * 8 + [SPIKE_ONLY_INCLUSION] * 4, True),
    ([LOW_RHO] * 8 + [SPIKE_ONLY_INCLUSION] * 3, False),
    ([LOW_RHO] * 8 + [5.0, 5.0, LOW_RHO, 5.0], False),  # one noisy row back
    ([5.0] * 3, False),
]


@pytest.mark.parametrize("rho_sums, left", LEFT_CASES)
def test_spike_only_left_rule(rho_sums, left):
    assert (spike_only_left(rho_sums) is not None) == left


def test_leaving_the_spike_only_state_clears_its_status_and_a_new_episode_warns_again():
    monitor = RunMonitor(energy="loss")
    for cls, expected in ((SpikeOnlyWarning, "collapsed"), (SpikeOnlyLeftWarning, "ok"), (SpikeOnlyWarning, "collapsed")):
        with pytest.warns(cls):
            assert monitor.report_once(cls, epoch=1, step=10, message="m") is not None
        assert run_status(monitor.events) == expected
        # the same episode is reported once
        assert monitor.report_once(cls, epoch=1, step=11, message="m") is None
    assert [e["kind"] for e in monitor.events] == ["spike_only", "spike_only_left", "spike_only"]


def test_a_monitor_judges_predictions_against_the_first_step_when_that_is_worse():
    """A sampler whose network starts 10^4 times further off (badly scaled) targets than the
    zero function warns only when its predictions get 100 times worse than that start."""
    monitor = RunMonitor(energy="log_joint", sign=-1.0, name="SGLD")
    history = []
    for epoch, ratio in enumerate([1e4, 5e5, 1e5, 2e6], start=1):
        history.append({"epoch": epoch, "log_joint": -100.0})
        figures = {"squared_error": ratio * 3.0, "squared_targets": 3.0}
        if epoch == 1:
            figures.update(initial_energy=-100.0, initial_squared_error=1e4 * 3.0, initial_squared_targets=3.0)
        if ratio > PREDICTION_GROWTH * 1e4:
            with pytest.warns(DivergenceWarning, match="at epoch 4: .* 2e\\+06 times their mean square"):
                monitor.check(history, figures, epoch=epoch)
        else:
            monitor.check(history, figures, epoch=epoch)
    assert [e["epoch"] for e in monitor.events] == [4] and run_status(monitor.events) == "diverged"


def test_an_ess_below_the_threshold_means_one_particle_holds_two_thirds():
    """The rule's reading: 1/max w <= ESS, so ESS < 1.5 forces the largest normalised weight
    above 2/3, on weights from even to fully collapsed."""
    g = torch.Generator().manual_seed(0)
    seen_collapsed = 0
    for spread in (0.1, 1.0, 3.0, 10.0, 30.0):
        log_w = spread * torch.randn(2000, 8, generator=g, dtype=torch.float64)
        for row in log_w:
            d = weight_diagnostics(row)
            assert float(d["ess"]) >= 1.0 / float(d["max_weight"]) - 1e-9
            if float(d["ess"]) < ESS_COLLAPSE:
                seen_collapsed += 1
                assert float(d["max_weight"]) > 2.0 / 3.0
    assert seen_collapsed > 100


@pytest.mark.parametrize("n", [100, 2000])
def test_chance_margins_are_three_standard_deviations(n):
    majority = 0.1
    margin = CHANCE_SDS * math.sqrt(majority * (1 - majority) / n)
    assert classification_at_chance(majority + 0.99 * margin, majority, n)
    assert not classification_at_chance(majority + 1.01 * margin, majority, n)
    assert classification_at_chance(0.07, majority, n)  # below chance is at chance too
    relative = CHANCE_SDS * math.sqrt(2.0 / n)
    assert regression_at_chance(2.0 * (1 - 0.99 * relative), 2.0, n)
    assert not regression_at_chance(2.0 * (1 - 1.01 * relative), 2.0, n)
    assert not regression_at_chance(1.0, 0.0, n)  # constant targets: no chance level


def test_prior_collapse_needs_both_chance_and_a_small_kl():
    assert prior_collapse(KL_COLLAPSE, True)
    assert not prior_collapse(KL_COLLAPSE * 1.01, True)
    assert not prior_collapse(0.0, False)
    assert not prior_collapse(None, True)  # KL unknown: no verdict
    assert not prior_collapse(0.0, True, kl_fixed=True)  # a KL no parameter moves cannot have collapsed


def test_run_status_is_the_most_severe_event():
    assert run_status([]) == "ok"
    weight = {"kind": "weight_collapse", "status": None}
    collapsed = {"kind": "prior_collapse", "status": "collapsed"}
    diverged = {"kind": "divergence", "status": "diverged"}
    assert run_status([weight]) == "ok"  # collapsed weights still measure the objective
    assert run_status([weight, collapsed]) == "collapsed"
    assert run_status([diverged, collapsed]) == "diverged"
    cleared = {"kind": "spike_only_left", "status": None, "clears": ["spike_only"]}
    spike = {"kind": "spike_only", "status": "collapsed", "clears": ["spike_only_left"]}
    assert run_status([spike, cleared]) == "ok" and run_status([spike, cleared, spike]) == "collapsed"
    assert run_status([collapsed, spike, cleared]) == "collapsed"  # it ends its own kind only


# -- posterior_check on models with a known answer ------------------------------------------
def _logistic(x, y=None, idx=None, classes=3):
    w = pyro.sample("w", dist.Normal(torch.zeros(classes, x.shape[1]), 1.0).to_event(2))
    with pyro.plate("data", len(x)):
        return pyro.sample("obs", dist.Categorical(logits=x @ w.T), obs=y)


def _guide(loc, scale):
    def guide(x, y=None, idx=None, classes=3):
        pyro.sample("w", dist.Normal(torch.full((classes, x.shape[1]), loc), scale).to_event(2))

    return guide


@pytest.mark.parametrize("loc, scale", [(0.0, 1.0), (3.0, 0.1)])
def test_posterior_check_figures(loc, scale):
    """The guide equal to the prior has KL 0 and, on labels that ignore x, is at chance;
    N(3, 0.1^2) against N(0, 1) has the closed-form KL log 10 + (0.01 + 9) / 2 - 1/2."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 4, generator=g)
    y = torch.randint(0, 3, (600,), generator=g)
    figures = posterior_check(_logistic, _guide(loc, scale), (x, y, torch.arange(600)))
    kl = math.log(1 / scale) + (scale**2 + loc**2) / 2 - 0.5
    assert figures["kl_per_parameter"] == pytest.approx(kl, abs=1e-6)
    assert figures["n"] == 600
    assert figures["majority_rate"] == float(torch.bincount(y).max()) / 600
    if loc == 0.0:
        assert figures["at_chance"] and prior_collapse(figures["kl_per_parameter"], figures["at_chance"])


# -- the concrete case of issue 22: SGLD with too large a step on Boston housing ------------
def _boston_sgld(lr, epochs=20):
    split = UCIDataset("bostonHousing", DATA / "uci").split(0).to("cpu", torch.float32)
    pyro.set_rng_seed(0)
    net = MLP(split.num_features, [split.n_hidden], 1)
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), GaussianLikelihood(len(split.y_train), precision=dist.Gamma(6.0, 6.0)))
    steps = epochs * math.ceil(len(split.y_train) / 50)
    sink = InMemorySamples()
    history = SGLD(model, lr=lr).run(
        (split.x_train, split.y_train.unsqueeze(-1)), num_steps=steps, batch_size=50, burn_in=steps // 2, thin=steps // 2 // 20, sink=sink, seed=0, progress=False,
    )
    result = evaluate(model, SampleGuide(sink.load()), split.x_test, split.y_test.unsqueeze(-1), num_samples=len(sink), y_scale=split.y_std, y_shift=split.y_mean)
    return history, result, float(split.y_std)


@needs_uci
def test_sgld_with_too_large_a_step_on_boston_warns_and_is_marked_diverged():
    """100 times the recipe's step (2e-5): the chain shrinks its noise precision and stays
    finite with a moderate log-joint, while its predictions blow up."""
    with pytest.warns(DivergenceWarning, match="SGLD diverged .* mean prediction"):
        history, result, y_std = _boston_sgld(2e-3)
    assert history.attrs["status"] == "diverged"
    (event,) = history.attrs["events"]
    assert event["rule"] == "prediction_blowup" and event["squared_error_over_targets"] > PREDICTION_GROWTH
    assert math.isfinite(result["rmse"]) and result["rmse"] > 3 * y_std  # the result the warning marks: worse than a constant


@needs_uci
def test_sgld_at_the_recipes_step_on_boston_is_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        history, result, y_std = _boston_sgld(2e-5)
    assert history.attrs["status"] == "ok" and history.attrs["events"] == []
    assert result["rmse"] < y_std


# -- SVI whose loss diverges ----------------------------------------------------------------
def _regression(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    return x, x[:, :1] * 2 + 0.3 * torch.randn(n, 1, generator=g)


def test_svi_loss_going_to_nan_raises_with_the_event():
    pyro.enable_validation(False)  # let the NaN reach the loss (validation would refuse the NaN parameter first)
    model = small_bnn(precision="fixed", dataset_size=200)
    with pytest.raises(DivergenceError, match="the loss became nan in epoch 0") as info:
        fit(model, MeanFieldNormalGuide(model), _regression(), epochs=5, batch_size=50, lr=100.0, seed=0, progress=False)
    assert isinstance(info.value, FloatingPointError)
    assert [e["kind"] for e in info.value.events] == ["divergence"] and run_status(info.value.events) == "diverged"
    assert info.value.events[0]["epoch"] == 1


def test_a_non_finite_parameter_ends_the_run():
    """The last step leaves a parameter at inf: the loss it reported was finite."""
    model = small_bnn(precision="fixed", dataset_size=200)

    class Poisoned(torch.optim.Adam):
        steps = 0

        def step(self, closure=None):
            super().step(closure)
            Poisoned.steps += 1
            if Poisoned.steps == 8:  # the last step of the second (last) epoch
                with torch.no_grad():
                    self.param_groups[0]["params"][0].view(-1)[0] = float("inf")

    with pytest.raises(DivergenceError, match="a parameter became non-finite in epoch 1"):
        fit(model, MeanFieldNormalGuide(model), _regression(), epochs=2, batch_size=50, optimizer=lambda p: Poisoned(p, lr=1e-3), seed=0, progress=False)


@pytest.mark.parametrize("guide_class", [MeanFieldNormalGuide, DeltaGuide])
def test_svi_loss_blowing_up_warns_and_is_marked_diverged(guide_class):
    """Adam at lr 3 on a small regression: the loss leaves its initial value by orders of
    magnitude and stays finite."""
    pyro.enable_validation(False)
    model = small_bnn(precision="fixed", dataset_size=200)
    with pytest.warns(DivergenceWarning, match="fit diverged at epoch .*: the loss rose to"):
        history = fit(model, guide_class(model), _regression(), epochs=10, batch_size=50, lr=3.0, seed=0, progress=False)
    assert history.attrs["status"] == "diverged"
    assert [e["rule"] for e in history.attrs["events"]] == ["energy_blowup"]
    assert history.attrs["events"][0]["rise_over_scale"] > ENERGY_GROWTH


def test_a_resumed_run_keeps_its_events_and_warns_once(tmp_path):
    pyro.enable_validation(False)
    data, ckpt = _regression(), tmp_path / "run.ckpt"
    model = small_bnn(precision="fixed", dataset_size=200)
    guide = MeanFieldNormalGuide(model)
    with pytest.warns(DivergenceWarning):
        first = fit(model, guide, data, epochs=6, batch_size=50, lr=3.0, seed=0, progress=False, checkpoint=ckpt)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)  # already reported: not again
        resumed = fit(model, guide, data, epochs=8, batch_size=50, lr=3.0, seed=0, progress=False, checkpoint=ckpt)
    assert list(resumed.epoch) == list(range(1, 9))
    assert resumed.attrs["events"][0] == first.attrs["events"][0] and resumed.attrs["status"] == "diverged"


# -- importance-weight collapse -------------------------------------------------------------
@pytest.mark.parametrize("objective", [ImportanceWeighted_ELBO(8), ReweightedWakeSleep(8)], ids=["iwae", "rws"])
def test_importance_weights_collapsing_in_many_dimensions_warn(objective):
    """A BNN of ~400 weights on 100 examples: one of the 8 draws takes all the weight."""
    x, y = _regression(100)
    model = small_bnn(hidden=60, dataset_size=100)
    with pytest.warns(WeightCollapseWarning, match=r"effective sample size 1(\.\d*)? of K = 8"):
        history = fit(model, MeanFieldNormalGuide(model, init_scale=0.05), (x, y), epochs=20, batch_size=100, lr=0.01, objective=objective, seed=0, progress=False)
    (event,) = history.attrs["events"]
    assert event["kind"] == "weight_collapse" and event["ess"] < ESS_COLLAPSE and event["readings"] >= ESS_READINGS
    assert event["epoch"] == 20  # judged on the end of the run
    assert history.attrs["status"] == "ok"  # a measurement of the objective all the same
    assert history.ess_mean.between(1.0 - 1e-9, 8.0 + 1e-9).all()


# -- the posterior collapsing onto the prior ------------------------------------------------
def _synthetic_classification(n=1000, d=200, classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, (x @ torch.randn(d, classes, generator=g)).argmax(-1)


@pytest.mark.filterwarnings("ignore:.*trained at full KL weight")  # the priors' own up-front advice
@pytest.mark.parametrize("prior", [ARDPrior, LogUniformPrior], ids=["ard", "log-uniform"])
def test_dropout_priors_without_kl_warmup_collapse_onto_the_prior_with_a_warning(prior):
    """Issue 22: ARD / sparse VD on a wide network without KL warm-up end with uniform
    predictions; the fit says so. With the warm-up the same fit learns and is quiet."""
    x, y = _synthetic_classification()
    model = BayesianNeuralNetwork(MLP(200, [300], 10), prior(), CategoricalLikelihood())
    with pytest.warns(PriorCollapseWarning, match="collapsed onto the prior .* at chance"):
        history = fit(model, SparseVariationalDropoutGuide(model), (x, y), epochs=10, batch_size=100, lr=1e-2, estimator="local", seed=0, progress=False)
    (event,) = history.attrs["events"]
    assert history.attrs["status"] == "collapsed"
    assert event["kl_per_parameter"] <= KL_COLLAPSE and event["accuracy"] <= event["majority_rate"] + CHANCE_SDS * math.sqrt(0.25 / event["n"])

    pyro.clear_param_store()
    model = BayesianNeuralNetwork(MLP(200, [300], 10), prior(), CategoricalLikelihood())
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        history = fit(model, SparseVariationalDropoutGuide(model), (x, y), epochs=10, batch_size=100, lr=1e-2, estimator="local", kl_schedule=LinearKLWarmup(0, 5), seed=0, progress=False)
    assert history.attrs["status"] == "ok"


def _param_guide(x, y=None, idx=None, classes=3):
    loc = pyro.param("loc", torch.zeros(classes, x.shape[1]))
    pyro.sample("w", dist.Normal(loc, 1.0).to_event(2))


@pytest.mark.parametrize("guide, fixed", [(_guide(0.0, 1.0), True), (_param_guide, False)], ids=["constants", "a-parameter"])
def test_posterior_check_says_whether_the_kl_moves_with_the_guide(guide, fixed):
    """Both guides equal the prior (KL 0, at chance on labels that ignore x); only the one
    with a parameter has a KL an optimizer could have driven there."""
    pyro.clear_param_store()
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 4, generator=g), torch.randint(0, 3, (300,), generator=g)
    figures = posterior_check(_logistic, guide, (x, y, torch.arange(300)))
    assert figures["kl_per_parameter"] == pytest.approx(0.0, abs=1e-6) and figures["at_chance"]
    assert figures["kl_fixed"] is fixed
    assert prior_collapse(figures["kl_per_parameter"], figures["at_chance"], kl_fixed=figures["kl_fixed"]) is not fixed


@pytest.mark.parametrize("prior", [ARDPrior, LogUniformPrior], ids=["ard", "log-uniform"])
def test_a_zero_mean_network_at_chance_is_no_prior_collapse(prior):
    """Every layer zero-mean (alpha infinite): the KL is 0 whatever the guide's parameters,
    and the network cannot beat one that ignores its input (its logits' mean is the bias), so
    the fit ends at chance with KL 0, which is no collapse onto the prior: no warning."""
    pyro.clear_param_store()
    x, y = _synthetic_classification(n=300, d=20, classes=4)
    model = BayesianNeuralNetwork(MLP(20, [30], 4), prior(), CategoricalLikelihood())
    guide = VariationalDropoutGuide(model, parameterization="zero-mean")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        history = fit(model, guide, (x, y), epochs=5, batch_size=100, lr=1e-2, estimator="local", kl_schedule=LinearKLWarmup(0, 2), seed=0, progress=False)
    assert history.attrs["status"] == "ok" and history.attrs["events"] == []
    figures = posterior_check(model, guide, (x, y, torch.arange(len(y))))
    assert figures["at_chance"] and figures["kl_per_parameter"] == 0.0 and figures["kl_fixed"]  # what the rule saw


# -- healthy runs stay quiet ----------------------------------------------------------------
def _fit_regression(guide_class, **kwargs):
    def run():
        model = small_bnn(dataset_size=200)
        return fit(model, guide_class(model), _regression(), epochs=30, batch_size=50, lr=0.02, seed=0, progress=False, **kwargs)

    return run


def _fit_classification():
    x, y = _synthetic_classification(n=400, d=10, classes=4)
    model = BayesianNeuralNetwork(MLP(10, [20], 4), NormalPrior(1.0), CategoricalLikelihood())
    return fit(model, MeanFieldNormalGuide(model), (x, y), epochs=30, batch_size=50, lr=0.02, estimator="local", seed=0, progress=False)


def _fit_iwae_conjugate():
    problem = conjugate_problem(n=40)
    model = linear_regression_model(problem, dataset_size=40)
    guide = MeanFieldNormalGuide(model, init_scale=1e-3)
    return fit(model, guide, (problem.x, problem.y.unsqueeze(-1)), epochs=100, batch_size=40, lr=0.05, objective=ImportanceWeighted_ELBO(8), seed=0, progress=False)


def _sample(sampler_class, **kwargs):
    def run():
        model = small_bnn(dataset_size=200)
        return sampler_class(model, **kwargs).run(_regression(), epochs=30, batch_size=50, seed=0, progress=False)

    return run


HEALTHY = {
    "mean-field": _fit_regression(MeanFieldNormalGuide, estimator="local"),
    "map": _fit_regression(DeltaGuide),
    "kl-warmup": _fit_regression(MeanFieldNormalGuide, kl_schedule=LinearKLWarmup(0, 10)),
    "blundell": _fit_regression(MeanFieldNormalGuide, kl_schedule=BlundellKLReweighting()),
    "classification": _fit_classification,
    "iwae-conjugate": _fit_iwae_conjugate,
    "sgld": _sample(SGLD, lr=1e-4),
    "sghmc": _sample(SGHMC, lr=1e-5, momentum=0.9),
}


@pytest.mark.parametrize("name", list(HEALTHY))
def test_healthy_runs_do_not_warn(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RunWarning)
        history = HEALTHY[name]()
    assert history.attrs["status"] == "ok" and history.attrs["events"] == []


def test_collect_events_gathers_every_run_inside_the_block(tmp_path):
    """An experiment's result row takes its status from every run it made: here a healthy
    fit and a diverging one, and a resumed run republishes the events it loads."""
    pyro.enable_validation(False)
    data, ckpt = _regression(), tmp_path / "run.ckpt"
    def diverging():
        pyro.clear_param_store()
        model = small_bnn(precision="fixed", dataset_size=200)
        return fit(model, MeanFieldNormalGuide(model), data, epochs=6, batch_size=50, lr=3.0, seed=0, progress=False, checkpoint=ckpt)

    with collect_events() as events:
        HEALTHY["map"]()
        assert run_status(events) == "ok"
        with pytest.warns(DivergenceWarning):
            diverging()
    assert [e["kind"] for e in events] == ["divergence"] and run_status(events) == "diverged"
    with collect_events() as resumed:
        diverging()  # finished: nothing to run, the checkpoint's events only
    assert resumed == events
