"""The comparison harness: calibration quantities, budgets, skipping, failures and resume."""

import json
import math

import pandas as pd
import pytest
import pyro.distributions as dist
import torch
from pyro import poutine

from pyrozoo import metrics
from pyrozoo.inference import training
from pyrozoo.inference.prediction import PredictiveRecord, record_predictive
from pyrozoo.inference.sgmcmc import StochasticGradientMCMC
from pyrozoo.models import Gaussian
from recipes import compare as harness
from recipes.uci import UCI_METHODS, register_uci_method

LEVELS = [0.1, 0.25, 0.5, 0.8, 0.9, 0.95, 0.99]


def _data_root_or_skip(*names):
    from recipes.paths import default_data_dir

    try:
        root = default_data_dir()
    except FileNotFoundError:
        pytest.skip("no shared data directory")
    for name in names:
        if not (root / name).exists():
            pytest.skip(f"{name} data not available")
    return root


def _binomial_tolerance(p, n, z=4.5):
    return z * math.sqrt(max(p * (1 - p), 1e-12) / n)


# -- calibration quantities ---------------------------------------------------------------


@pytest.mark.parametrize("num_draws", [1, 7])
def test_coverage_of_exact_predictive_is_nominal(num_draws, device, dtype):
    """Targets drawn from the predictive itself (a mixture of Gaussians over posterior
    draws with their noise precisions): the PIT is uniform, so each central interval covers
    a Binomial(n, level) / n fraction of them."""
    torch.manual_seed(0)
    n = 4000
    f = torch.randn(num_draws, n, 1, device=device, dtype=dtype) * 0.7 + 2.0
    precision = torch.rand(num_draws, device=device, dtype=dtype) * 3 + 0.5
    component = torch.randint(num_draws, (n,), device=device)
    y = f[component, torch.arange(n, device=device), 0] + precision[component].rsqrt() * torch.randn(n, device=device, dtype=dtype)
    likelihood = Gaussian(n, precision=dist.Gamma(1.0, 1.0))
    pit = likelihood.predictive_cdf(f, y, {"precision": precision})
    assert pit.shape == (n, 1) and pit.dtype == dtype
    coverage = metrics.interval_coverage(pit, LEVELS)
    for level, c in zip(LEVELS, coverage.tolist()):
        assert abs(c - level) < _binomial_tolerance(level, n), (level, c)


def test_coverage_is_a_monotone_fraction_and_detects_overconfidence():
    torch.manual_seed(1)
    n = 3000
    y = torch.randn(n)
    likelihood = Gaussian(n, precision=4.0)  # predictive std 0.5 for unit-variance targets: overconfident
    pit = likelihood.predictive_cdf(torch.zeros(1, n, 1), y, {})
    levels = torch.linspace(0, 1, 21)
    coverage = metrics.interval_coverage(pit, levels)
    assert ((coverage >= 0) & (coverage <= 1)).all()
    assert (coverage[1:] >= coverage[:-1]).all()
    # the 50% interval of N(0, 0.5^2) is +-0.337, which holds P(|Z| < 0.337) = 0.264 of N(0, 1) targets
    c50 = float(metrics.interval_coverage(pit, [0.5]))
    assert abs(c50 - 0.2639) < _binomial_tolerance(0.2639, n)
    with pytest.raises(ValueError):
        metrics.interval_coverage(pit, [1.5])


def test_reliability_diagram_of_calibrated_probabilities():
    """Labels drawn from the predicted probabilities: per bin, accuracy matches mean
    confidence within binomial error; the ECE is the count-weighted gap."""
    torch.manual_seed(2)
    n, k = 20000, 4
    probs = torch.distributions.Dirichlet(torch.full((k,), 0.5)).sample((n,)).double()
    y = torch.multinomial(probs, 1).squeeze(-1)
    confidence, accuracy, count = metrics.reliability_diagram(probs, y, num_bins=10)
    assert int(count.sum()) == n
    for c, a, m in zip(confidence.tolist(), accuracy.tolist(), count.tolist()):
        if m >= 200:
            assert abs(a - c) < _binomial_tolerance(c, m), (c, a, m)
    filled = count > 0
    ece = float((count[filled] / n * (accuracy[filled] - confidence[filled]).abs()).sum())
    assert ece == pytest.approx(metrics.expected_calibration_error(probs, y, 10), rel=1e-5)  # the ECE averages correctness in float32


def _model_with_known_predictive(likelihood, out_features, device, y_example):
    """A network whose Delta guide sits at the network's own weights: its predictive is the
    generative model itself, so data drawn from the model are calibrated by construction."""
    from pyrozoo.guides import DeltaGuide
    from pyrozoo.models import MLP, BayesianNeuralNetwork, NormalPrior

    torch.manual_seed(3)
    net = MLP(3, [], out_features).to(device)
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), likelihood)
    guide = DeltaGuide(model)
    with poutine.block():
        guide(torch.zeros(2, 3, device=device), y_example)  # sets the guide up (as fit would) at the network's values
    return model, guide, net


def test_evaluate_records_a_calibrated_predictive(device):
    from pyrozoo.inference import evaluate

    n = 3000
    model, guide, net = _model_with_known_predictive(Gaussian(n, precision=4.0), 1, device, torch.zeros(2, device=device))
    x = torch.randn(n, 3, device=device)
    with torch.no_grad():
        y = (net(x) + 0.5 * torch.randn(n, 1, device=device)).squeeze(-1)
    with record_predictive() as records:
        result = evaluate(model, guide, x, y, num_samples=1, y_scale=3.0, y_shift=1.0)
    assert set(result) == {"rmse", "test_ll"}  # the return value is unchanged
    (record,) = records
    assert record.kind == "regression" and record.pit.shape == (n, 1) and record.pit.device.type == "cpu"
    for level, c in zip(LEVELS, metrics.interval_coverage(record.pit, LEVELS).tolist()):
        assert abs(c - level) < _binomial_tolerance(level, n), (level, c)


def test_evaluate_records_classification(device):
    from pyrozoo.inference import evaluate
    from pyrozoo.models import Categorical

    n = 4000
    model, guide, net = _model_with_known_predictive(Categorical(n), 4, device, torch.zeros(2, dtype=torch.long, device=device))
    x = 2 * torch.randn(n, 3, device=device)
    with torch.no_grad():
        y = torch.distributions.Categorical(logits=net(x)).sample()
    with record_predictive() as records:
        result = evaluate(model, guide, x, y, num_samples=1)
    (record,) = records
    assert record.kind == "classification" and record.probs.shape == (n, 4) and torch.equal(record.labels, y.cpu())
    confidence, accuracy, count = metrics.reliability_diagram(record.probs.double(), record.labels, 10)
    for c, a, m in zip(confidence.tolist(), accuracy.tolist(), count.tolist()):
        if m >= 200:
            assert abs(a - c) < _binomial_tolerance(c, m), (c, a, m)
    assert result["ece"] == pytest.approx(metrics.expected_calibration_error(record.probs, record.labels, 15), abs=1e-6)


def test_calibration_summary_shapes():
    pit = torch.rand(500)
    error, curve = harness.calibration_summary(PredictiveRecord("regression", pit=pit), LEVELS)
    assert curve["level"] == LEVELS and len(curve["coverage"]) == len(LEVELS) and 0 <= error <= 1
    probs = torch.softmax(torch.randn(300, 3), -1)
    error, curve = harness.calibration_summary(PredictiveRecord("classification", probs=probs, labels=torch.randint(3, (300,))), num_bins=5)
    assert sum(curve["count"]) == 300 and len(curve["confidence"]) == 5 and 0 <= error <= 1


def test_record_predictive_is_scoped():
    from pyrozoo.inference import prediction

    with record_predictive() as outer:
        with record_predictive() as inner:
            prediction._record(PredictiveRecord("regression", pit=torch.rand(3)))
        prediction._record(PredictiveRecord("regression", pit=torch.rand(3)))
    prediction._record(PredictiveRecord("regression", pit=torch.rand(3)))  # no recorder: dropped
    assert len(inner) == 1 and len(outer) == 2 and not prediction._RECORDERS


def test_budget_epochs():
    assert harness.budget_epochs(30, 455, 32) == (2, 30)  # 15 steps per epoch
    assert harness.budget_epochs(31, 455, 32) == (3, 45)
    assert harness.budget_epochs(5, 10, 32) == (5, 5)  # a batch larger than the data: full batch
    with pytest.raises(ValueError):
        harness.budget_epochs(0, 10, 2)


# -- the harness on real data ---------------------------------------------------------------


@pytest.fixture
def step_counter(monkeypatch):
    """Counts optimizer steps of ``fit`` and sampler iterations."""
    counts = {"steps": 0}
    fit_step, sampler_step = training.training_step, StochasticGradientMCMC.step

    def counted_fit_step(*args, **kwargs):
        counts["steps"] += 1
        return fit_step(*args, **kwargs)

    def counted_sampler_step(self, *args, **kwargs):
        counts["steps"] += 1
        return sampler_step(self, *args, **kwargs)

    monkeypatch.setattr(training, "training_step", counted_fit_step)
    monkeypatch.setattr(StochasticGradientMCMC, "step", counted_sampler_step)
    return counts


def test_compare_rows_budget_skip_and_resume(tmp_path, step_counter):
    data_dir = _data_root_or_skip("uci")
    out = tmp_path / "runs.csv"
    messages = []
    kwargs = dict(num_samples=5, data_dir=data_dir, out=out, log=messages.append)
    runs = harness.compare(["map", "no-such-method", "sgld"], ["bostonHousing"], [10, 20], [0, 1], **kwargs)

    assert list(runs.columns) == harness.COLUMNS
    assert {"dataset", "method", "seed", "budget", "rmse_or_error", "test_ll", "seconds"} <= set(runs.columns)
    assert len(runs) == 2 * 2 * 2 and not runs.duplicated(harness.KEY).any()
    assert set(runs.method) == {"map", "sgld"}
    assert any("no-such-method" in m and "skipping" in m for m in messages)
    # the budget reaches both kinds of method: steps actually taken = reported steps, which
    # meet the budget and exceed it by less than one epoch (455 training points / 32 = 15 steps)
    assert step_counter["steps"] == runs.steps.sum()
    assert (runs.steps >= runs.budget).all() and (runs.steps - runs.budget < 15).all()
    assert (runs.metric == "rmse").all() and (runs.rmse_or_error > 0).all() and runs.test_ll.map(math.isfinite).all()
    for curve in runs.calibration.map(json.loads):
        coverage = curve["coverage"]
        assert all(0 <= c <= 1 for c in coverage) and coverage == sorted(coverage)
    assert set(runs.prior) == {"N(0, 1)"} and runs.objective.str.len().gt(0).all()
    pd.testing.assert_frame_equal(pd.read_csv(out), runs, check_dtype=False)

    # resume: nothing is rerun, the new runs are added
    step_counter["steps"] = 0
    again = harness.compare(["map", "sgld"], ["bostonHousing"], [10, 20, 30], [0, 1], resume=True, **kwargs)
    assert len(again) == 12 and step_counter["steps"] == again[again.budget == 30].steps.sum()
    pd.testing.assert_frame_equal(again[again.budget < 30].reset_index(drop=True), runs, check_dtype=False)
    assert len(pd.read_csv(out)) == 12

    long = harness.calibration_table(again)
    assert len(long) == 12 * len(harness.DEFAULT_LEVELS)
    assert len(harness.summarize(again)) == 2 * 3


def test_a_failing_method_fails_loudly(tmp_path):
    data_dir = _data_root_or_skip("uci")

    @register_uci_method("broken-for-test")
    def broken(split, config):
        raise ArithmeticError("deliberate")

    try:
        with pytest.raises(RuntimeError, match="broken-for-test.*bostonHousing.*deliberate"):
            harness.compare(["broken-for-test"], ["bostonHousing"], [5], [0], data_dir=data_dir, log=lambda m: None)
    finally:
        del UCI_METHODS["broken-for-test"]


def test_compare_on_mnist(tmp_path):
    data_dir = _data_root_or_skip("MNIST")
    messages = []
    runs = harness.compare(
        ["map", "mfvi", "rdp"], ["mnist"], [4], [0], num_samples=3, data_dir=data_dir, mnist_train_size=256, mnist_test_size=200,
        mnist_hidden=(16,), batch_size={"mnist": 64}, log=messages.append,
    )
    assert any("'rdp'" in m for m in messages)  # no MNIST runner: skipped
    assert list(runs.method) == ["map", "mfvi"] and (runs.steps == 4).all()
    assert (runs.metric == "error_percent").all() and runs.rmse_or_error.between(0, 100).all()
    assert (runs.test_ll < 0).all()
    for curve in runs.calibration.map(json.loads):
        assert sum(curve["count"]) == 200
    fig = harness.plot_calibration(runs)
    assert len(fig.axes) == 1


def test_unknown_dataset_is_an_error():
    with pytest.raises(ValueError, match="unknown dataset"):
        harness.compare(["map"], ["iris"], [5], [0])


def test_a_request_in_which_nothing_can_run_is_an_error():
    with pytest.raises(ValueError, match="none of the methods"):
        harness.compare(["no-such-method"], ["bostonHousing"], [5], [0])
    with pytest.raises(ValueError, match="budgets"):
        harness.compare(["map"], ["bostonHousing"], [0], [0])
