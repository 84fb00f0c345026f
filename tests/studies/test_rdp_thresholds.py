"""studies/rdp_thresholds.py: the per-layer gaps and counts are read off the stored
statistics, and the verdict follows them (nothing is trained)."""

import json

import pandas as pd
import pytest

from tests.runner import STUDIES, run_example

SCRIPT = STUDIES / "rdp_thresholds.py"


def _statistics(tmp_path, upper, thresholds=None):
    """Two clusters per grouping: ``upper[g]`` units at 8, 9, ... and the rest at -5, cut at
    ``thresholds[g]`` (0 for every grouping unless given)."""
    thresholds = thresholds or {}
    sizes = {"conv2.weight.column": 20, "conv2.weight.row": 50, "fc1.weight.column": 800, "fc2.weight.column": 500}
    groupings = {g: {"values": [8.0 + 0.01 * i for i in range(upper[g])] + [-5.0] * (n - upper[g]), "threshold": thresholds.get(g, 0.0), "kept": upper[g]} for g, n in sizes.items()}
    path = tmp_path / "stats.json"
    path.write_text(json.dumps({"statistic": "test", "test_error": 1.0, "pruned_architecture": "x", "groupings": groupings}))
    return path


@pytest.mark.parametrize("upper, head, arch", [
    ({"conv2.weight.column": 13, "conv2.weight.row": 19, "fc1.weight.column": 167, "fc2.weight.column": 47},
     "THE THRESHOLD CANNOT REACH THE PAPER'S COUNTS: read off the histograms, a cut at each layer's largest gap gives the run's own architecture",
     "13-19-167-47"),
    ({"conv2.weight.column": 4, "conv2.weight.row": 7, "fc1.weight.column": 110, "fc2.weight.column": 66}, "NO DIFFERENCE", "4-7-110-66"),
])
def test_the_verdict_and_the_gap_architecture_follow_the_statistics(tmp_path, monkeypatch, upper, head, arch):
    run_example(SCRIPT, "--statistics", _statistics(tmp_path, upper), "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "rdp_thresholds.csv")
    assert table.threshold_in_gap.all() and list(table.kept) == list(table.upper_cluster)
    assert table.gap_low.eq(-5.0).all() and (table.gap_high >= 8.0).all()
    text = (tmp_path / "rdp_thresholds.md").read_text()
    assert f"Verdict: {head}" in text and f"gives {arch}" in text and "Provenance:" in text
    assert f"ours at one threshold of 0 nats {arch}" in text


def test_a_run_cut_at_each_layers_own_threshold_is_described_by_them(tmp_path, monkeypatch):
    upper = {"conv2.weight.column": 13, "conv2.weight.row": 19, "fc1.weight.column": 167, "fc2.weight.column": 47}
    thresholds = {"conv2.weight.column": 1.5, "conv2.weight.row": 1.5, "fc1.weight.column": -2.0, "fc2.weight.column": 3.0}
    run_example(SCRIPT, "--statistics", _statistics(tmp_path, upper, thresholds), "--results-dir", tmp_path, monkeypatch=monkeypatch)
    text = (tmp_path / "rdp_thresholds.md").read_text()
    assert ("ours at the run's thresholds (conv1 filters +1.50, conv2 filters +1.50, fc1 inputs -2.00, fc1 units +3.00 nats) 13-19-167-47"
            in text)


def test_a_run_that_kept_every_unit_of_some_layers_is_told_what_the_gaps_would_cut(tmp_path, monkeypatch):
    """conv1 and fc1's units kept whole (threshold -inf): 20-19-167-500 as run, 13-19-167-80 at the gaps."""
    upper = {"conv2.weight.column": 13, "conv2.weight.row": 19, "fc1.weight.column": 167, "fc2.weight.column": 80}
    thresholds = {"conv2.weight.column": float("-inf"), "fc2.weight.column": float("-inf")}
    run_example(SCRIPT, "--statistics", _statistics(tmp_path, upper, thresholds), "--results-dir", tmp_path, monkeypatch=monkeypatch)
    text = (tmp_path / "rdp_thresholds.md").read_text()
    assert ("a cut at each layer's largest gap keeps 427 fewer of the run's 706 units (gaps 13 to 13 nats wide); "
            "where the paper keeps fewer units, its counts lie inside the cluster above the gap") in text
    assert "gives 13-19-167-80, against ours at the run's thresholds" in text and "nats) 20-19-167-500" in text


def test_a_threshold_for_the_papers_count_lies_between_its_last_kept_and_first_cut_unit(tmp_path, monkeypatch):
    upper = {"conv2.weight.column": 13, "conv2.weight.row": 19, "fc1.weight.column": 167, "fc2.weight.column": 47}
    run_example(SCRIPT, "--statistics", _statistics(tmp_path, upper), "--results-dir", tmp_path, monkeypatch=monkeypatch)
    row = pd.read_csv(tmp_path / "rdp_thresholds.csv").set_index("layer").loc["conv1 filters"]
    # units at 8.12 ... 8.00 (then -5): keeping 4 cuts between 8.09 and 8.08, 0.085 above the gap
    assert row.threshold_for_paper_count == pytest.approx(8.085) and row.paper_threshold_above_gap_by == pytest.approx(8.085 - 8.0)  # above the lowest kept unit


def test_the_committed_statistics_give_a_table(tmp_path, monkeypatch):
    run_example(SCRIPT, "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "rdp_thresholds.csv")
    assert len(table) == 4 and (table.upper_cluster > 0).all()


def test_statistics_without_a_layer_are_refused_naming_it(tmp_path, monkeypatch):
    path = tmp_path / "stats.json"
    path.write_text(json.dumps({"groupings": {}}))
    with pytest.raises(SystemExit, match="conv2.weight.column"):  # run_main turns the ValueError into one line
        run_example(SCRIPT, "--statistics", path, "--results-dir", tmp_path, monkeypatch=monkeypatch)
