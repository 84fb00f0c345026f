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
from pyrozoo.models import GaussianLikelihood
from zoo_protocols import baselines
from zoo_protocols import compare as harness
from zoo_protocols.uci import UCI_METHODS, register_uci_method

LEVELS = [0.1, 0.25, 0.5, 0.8, 0.9, 0.95, 0.99]


def _data_root_or_skip(*names):
    from zoo_protocols.paths import default_data_dir

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
    likelihood = GaussianLikelihood(n, precision=dist.Gamma(1.0, 1.0))
    pit = likelihood.predictive_cdf(f, y, {"precision": precision})
    assert pit.shape == (n, 1) and pit.dtype == dtype
    coverage = metrics.interval_coverage(pit, LEVELS)
    for level, c in zip(LEVELS, coverage.tolist()):
        assert abs(c - level) < _binomial_tolerance(level, n), (level, c)


def test_coverage_is_a_monotone_fraction_and_detects_overconfidence():
    torch.manual_seed(1)
    n = 3000
    y = torch.randn(n)
    likelihood = GaussianLikelihood(n, precision=4.0)  # predictive std 0.5 for unit-variance targets: overconfident
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
    model, guide, net = _model_with_known_predictive(GaussianLikelihood(n, precision=4.0), 1, device, torch.zeros(2, device=device))
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
    from pyrozoo.models import CategoricalLikelihood

    n = 4000
    model, guide, net = _model_with_known_predictive(CategoricalLikelihood(n), 4, device, torch.zeros(2, dtype=torch.long, device=device))
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


# -- out of distribution, shift, gap splits and baselines ----------------------------------------


def _half_brightness_classifier(draws):
    """``outputs_at`` of a posterior whose ``draws`` networks all call an image class 0 when
    its left half is brighter, class 1 when its right half is (logits +-20)."""

    def outputs_at(x):
        left, right = x[..., :14].sum((-3, -2, -1)), x[..., 14:].sum((-3, -2, -1))
        logits = 20.0 * torch.stack([torch.sign(left - right), torch.sign(right - left)], -1)
        return logits.expand(draws, *logits.shape)

    return outputs_at


def test_shift_and_ood_metrics_of_a_known_classifier():
    n = 40
    x = torch.zeros(n, 1, 28, 28)
    y = torch.arange(n) % 2
    x[y == 0, 0, 10, 3] = 1.0  # a bright pixel on the left: class 0
    x[y == 1, 0, 10, 24] = 1.0
    uniform = torch.zeros(n, 1, 28, 28)  # left = right: logits 0, the uniform prediction
    out = harness.shift_and_ood_metrics(_half_brightness_classifier(3), x, y, uniform, angles=(0, 180))
    # OOD inputs get maximal entropy, in-distribution ones almost none; identical draws: no mutual information
    assert out["ood_auroc_entropy"] == 1.0 and out["ood_auroc_mi"] == 0.5
    # turned upside down, left and right swap: every confident prediction becomes wrong
    curve = out["shift"]
    assert curve["angle"] == [0.0, 180.0] and curve["error"] == [0.0, 100.0]
    confidence = 1 / (1 + math.exp(-40))
    assert curve["ece"] == pytest.approx([1 - confidence, confidence], abs=1e-12)
    assert curve["test_ll"] == pytest.approx([math.log(confidence), -40 + math.log(confidence)], abs=1e-9)
    assert out["shift_error"] == 50.0 and out["shift_ece"] == pytest.approx(0.5)
    nothing = harness.shift_and_ood_metrics(_half_brightness_classifier(1), x, y, None, angles=())
    assert all(math.isnan(nothing[k]) for k in harness.OOD_METRICS) and nothing["shift"] is None


@pytest.fixture
def baseline_step_counter(monkeypatch):
    """Counts the baselines' optimizer steps (every ensemble member's)."""
    from pyrozoo.baselines import ivon, training as baseline_training

    counts = {"steps": 0}
    run_epochs = baseline_training.run_epochs

    def counted(step, *args, **kwargs):
        def counted_step(*a):
            counts["steps"] += 1
            return step(*a)

        return run_epochs(counted_step, *args, **kwargs)

    monkeypatch.setattr(baseline_training, "run_epochs", counted)
    monkeypatch.setattr(ivon, "run_epochs", counted)
    return counts


def test_baselines_on_gap_splits_under_the_budget(tmp_path, baseline_step_counter):
    data_dir = _data_root_or_skip("uci")
    methods = ["ensemble", "ivon"] + (["laplace-ll-kfac"] if baselines.missing_dependency("laplace-ll-kfac") is None else [])
    runs = harness.compare(methods, ["bostonHousing-gap"], [12], [5], num_samples=5, data_dir=data_dir, extra={"ensemble": {"members": 2}}, log=lambda m: None)
    assert list(runs.method) == methods and (runs.seed == 5).all()
    # 337 training rows / 32 = 11 steps per epoch: 2 epochs, 22 steps; the ensemble's 2 members take them each
    assert (runs.steps == 22).all()
    assert baseline_step_counter["steps"] == 22 * (2 + (len(methods) - 1))
    assert (runs.rmse_or_error > 0).all() and runs.test_ll.map(math.isfinite).all()
    assert runs[harness.OOD_COLUMNS].isna().all().all()
    for curve in runs.calibration.map(json.loads):
        assert len(curve["coverage"]) == len(harness.DEFAULT_LEVELS)
    gap = harness.gap_comparison(runs)
    assert len(gap) == 0  # no standard-split runs of the same data set to compare with


def test_gap_comparison_pairs_standard_and_gap_runs():
    runs = pd.DataFrame({
        "dataset": ["yacht", "yacht", "yacht-gap", "yacht-gap", "mnist"], "method": ["map"] * 5, "budget": [10] * 5,
        "seed": [0, 1, 0, 1, 0], "rmse_or_error": [1.0, 3.0, 4.0, 6.0, 9.0], "test_ll": [-1.0, -2.0, -4.0, -5.0, -0.1],
    })
    table = harness.gap_comparison(runs)
    assert table.to_dict("records") == [{"dataset": "yacht", "method": "map", "budget": 10, "rmse": 2.0, "rmse_gap": 5.0, "test_ll": -1.5, "test_ll_gap": -4.5, "test_ll_drop": 3.0}]


def test_a_baseline_without_its_package_is_skipped(monkeypatch):
    monkeypatch.setitem(baselines.REQUIRES, "ivon", "no_such_module_for_pyrozoo_tests")
    monkeypatch.setitem(baselines.INSTALL, "no_such_module_for_pyrozoo_tests", "the-package")
    messages = []
    with pytest.raises(ValueError, match="none of the methods"):
        harness.compare(["no-such-method"], ["bostonHousing"], [5], [0], log=messages.append)
    data_dir = _data_root_or_skip("uci")
    runs = harness.compare(["ivon", "map"], ["yacht"], [3], [0], num_samples=2, data_dir=data_dir, log=messages.append)
    assert list(runs.method) == ["map"]
    assert any("'ivon'" in m and "the-package" in m for m in messages)


def test_mnist_runs_are_scored_out_of_distribution_and_under_rotation(tmp_path):
    data_dir = _data_root_or_skip("MNIST", "FashionMNIST")
    out = tmp_path / "runs.csv"
    kwargs = dict(
        num_samples=3, data_dir=data_dir, mnist_train_size=256, mnist_test_size=100, mnist_hidden=(16,), batch_size={"mnist": 64},
        rotation_angles=(0, 90), extra={"ensemble": {"members": 2}}, out=out, log=lambda m: None,
    )
    runs = harness.compare(["map", "ensemble"], ["mnist"], [4], [0], **kwargs)
    assert runs[["ood_auroc_entropy", "ood_auroc_mi"]].apply(lambda c: c.between(0, 1)).all().all()
    assert runs.set_index("method").ood_auroc_mi["map"] == 0.5  # one draw: no mutual information anywhere
    for r in runs.itertuples():
        curve = json.loads(r.shift)
        assert curve["angle"] == [0.0, 90.0] and all(0 <= e <= 100 for e in curve["error"])
        # deterministic predictives (one network, a fixed ensemble): at 0 degrees the test set's own error
        assert curve["error"][0] == pytest.approx(r.rmse_or_error, abs=1.0)  # up to one image in 100 flipped by interpolation rounding
        assert r.shift_error == pytest.approx(sum(curve["error"]) / 2)
    assert len(harness.shift_table(runs)) == 2 * 2
    summary = harness.summarize(runs)
    assert {"ood_auroc_entropy", "ood_auroc_mi_se", "shift_ece"} <= set(summary.columns)
    fig = harness.plot_shift(runs)
    assert len(fig.axes) == 2

    # a file written before these columns existed resumes: its runs are kept, with blank OOD metrics
    old = pd.read_csv(out)[harness.BASE_COLUMNS]
    old.to_csv(out, index=False)
    again = harness.compare(["map", "ensemble"], ["mnist"], [4], [0], resume=True, **kwargs)
    assert list(again.columns) == harness.COLUMNS and len(again) == 2 and again.ood_auroc_entropy.isna().all()


def test_unknown_dataset_is_an_error():
    with pytest.raises(ValueError, match="unknown dataset"):
        harness.compare(["map"], ["iris"], [5], [0])


def test_a_request_in_which_nothing_can_run_is_an_error():
    with pytest.raises(ValueError, match="none of the methods"):
        harness.compare(["no-such-method"], ["bostonHousing"], [5], [0])
    with pytest.raises(ValueError, match="budgets"):
        harness.compare(["map"], ["bostonHousing"], [0], [0])
