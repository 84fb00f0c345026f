"""Metrics on hand-checkable cases."""

import math

import numpy as np
import pytest
import torch

from pyrozoo.metrics import accuracy, expected_calibration_error, interval_coverage, log_mean_exp, reliability_diagram, rmse


def test_rmse_hand_case(device, dtype):
    mean = torch.tensor([1.0, 2.0, 3.0], device=device, dtype=dtype)
    y = torch.tensor([1.0, 2.0, 5.0], device=device, dtype=dtype)
    assert rmse(mean, y) == pytest.approx(math.sqrt(4 / 3), rel=1e-6)
    assert rmse(y, y) == 0.0


def test_rmse_column_vector_against_flat_targets():
    """A (n, 1) prediction against (n,) targets is compared elementwise, not broadcast to (n, n)."""
    mean = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    y = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert rmse(mean, y) == pytest.approx(math.sqrt((1 + 0 + 1 + 4) / 4))


def test_accuracy_hand_case(device):
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.5, 0.3], [0.4, 0.35, 0.25]], device=device)
    y = torch.tensor([0, 2, 0, 1], device=device)
    assert accuracy(probs, y) == pytest.approx(0.5)


def test_ece_hand_case():
    """Bins of width 0.1: two examples at confidence 0.95 (one right) and two at 0.55 (both
    right): gaps |0.5 - 0.95| and |1 - 0.55|, each bin holds half the data -> ECE 0.45."""
    probs = torch.tensor([[0.95, 0.05], [0.95, 0.05], [0.55, 0.45], [0.45, 0.55]])
    y = torch.tensor([0, 1, 0, 1])
    assert expected_calibration_error(probs, y, num_bins=10) == pytest.approx(0.45)


def test_ece_zero_for_perfectly_calibrated_bins():
    """In every bin the accuracy equals the confidence: 8 of 10 right at 0.8, 3 of 5 at 0.6,
    all right at confidence 1."""
    probs = torch.cat([
        torch.tensor([[0.8, 0.2]]).expand(10, 2),
        torch.tensor([[0.4, 0.6]]).expand(5, 2),
        torch.tensor([[1.0, 0.0]]).expand(3, 2),
    ])
    y = torch.tensor([0] * 8 + [1] * 2 + [1] * 3 + [0] * 2 + [0] * 3)
    assert expected_calibration_error(probs, y, num_bins=15) == pytest.approx(0.0, abs=1e-7)


def test_ece_overconfident_is_positive_and_bounded():
    probs = torch.tensor([[0.99, 0.01]]).expand(100, 2)
    y = torch.cat([torch.zeros(50, dtype=torch.long), torch.ones(50, dtype=torch.long)])
    assert expected_calibration_error(probs, y) == pytest.approx(0.49, abs=1e-6)
    assert 0 <= expected_calibration_error(torch.softmax(torch.randn(50, 4), -1), torch.randint(0, 4, (50,))) <= 1


def test_ece_one_bin_is_the_overall_gap():
    probs = torch.softmax(torch.randn(64, 5, generator=torch.Generator().manual_seed(0)), -1)
    y = torch.randint(0, 5, (64,), generator=torch.Generator().manual_seed(1))
    gap = abs(accuracy(probs, y) - float(probs.max(-1).values.mean()))
    assert expected_calibration_error(probs, y, num_bins=1) == pytest.approx(gap, rel=1e-5)


def test_ece_bad_bins():
    with pytest.raises(ValueError):
        expected_calibration_error(torch.tensor([[0.5, 0.5]]), torch.tensor([0]), num_bins=0)


def test_log_mean_exp_against_numpy(dtype):
    x = torch.tensor([[0.0, 1.0], [2.0, -3.0], [0.5, 0.5]], dtype=dtype)
    expected = np.log(np.exp(x.double().numpy()).mean(0))
    np.testing.assert_allclose(log_mean_exp(x, 0).double().numpy(), expected, rtol=1e-6)
    expected = np.log(np.exp(x.double().numpy()).mean(1))
    np.testing.assert_allclose(log_mean_exp(x, 1).double().numpy(), expected, rtol=1e-6)


def test_log_mean_exp_is_stable():
    x = torch.tensor([1000.0, 1000.0 + math.log(3)])
    assert log_mean_exp(x).item() == pytest.approx(1000 + math.log(2), rel=1e-6)
    x = torch.tensor([-1000.0, -1000.0])
    assert log_mean_exp(x).item() == pytest.approx(-1000.0)


# (id, metric call, regex the ValueError must match)
BAD_METRIC_INPUTS = [
    ("rmse-empty", lambda: rmse(torch.zeros(0), torch.zeros(0)), "no targets"),
    ("rmse-sizes", lambda: rmse(torch.zeros(4, 2), torch.zeros(4)), r"predictions of shape \(4, 2\) do not match targets of shape \(4,\)"),
    ("accuracy-label-shape", lambda: accuracy(torch.full((4, 3), 1 / 3), torch.zeros(4, 1, dtype=torch.long)), r"expected labels of shape \(4,\)"),
    ("accuracy-empty", lambda: accuracy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)), "no examples"),
    ("accuracy-label-K", lambda: accuracy(torch.full((4, 3), 1 / 3), torch.tensor([0, 1, 3, 2])), r"outside the 3 classes 0\.\.2"),
    ("ece-negative-label", lambda: expected_calibration_error(torch.full((4, 3), 1 / 3), torch.tensor([0, -1, 2, 2])), r"labels range over \[-1, 2\]"),
    ("reliability-label-K", lambda: reliability_diagram(torch.full((4, 2), 0.5), torch.tensor([0, 1, 2, 1])), "outside the 2 classes"),
    ("coverage-nan-level", lambda: interval_coverage(torch.rand(5), [0.5, float("nan")]), r"levels must lie in \[0, 1\]"),
    ("coverage-empty", lambda: interval_coverage(torch.zeros(0), [0.5]), "pit is empty"),
]


@pytest.mark.parametrize("call,match", [c[1:] for c in BAD_METRIC_INPUTS], ids=[c[0] for c in BAD_METRIC_INPUTS])
def test_bad_metric_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
