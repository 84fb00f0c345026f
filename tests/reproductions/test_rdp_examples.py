"""Smoke runs (--quick) of the radial-directional (RDP) example scripts and benchmark."""

import json
import math

import pandas as pd

from tests.runner import ROOT, run_example


def test_uci_regression_rdp_quick(tmp_path, monkeypatch):
    run_example(ROOT / "reproductions" / "uci_regression.py", "--method", "rdp", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "uci_rdp_quick.csv")
    assert len(runs) == 1 and math.isfinite(runs.rmse.iloc[0]) and math.isfinite(runs.test_ll.iloc[0])
    summary = pd.read_csv(tmp_path / "uci_rdp_quick_summary.csv")
    assert "RDP (paper) (published)" in set(summary.method)
    run_example(ROOT / "reproductions" / "uci_rdp_table.py", "--runs", tmp_path / "uci_rdp_quick.csv", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "uci_rdp_comparison.csv")
    assert list(table.dataset) == ["bostonHousing"] and table["VI (published)"].iloc[0] == "-2.90 ± 0.07"
    notes = (tmp_path / "uci_rdp_comparison.md").read_text()
    assert "more steps than these runs" in notes and "bostonHousing (1 of 20)" in notes


def test_compress_lenet_rdp_quick_and_histogram(tmp_path, monkeypatch):
    stats_path = tmp_path / "stats.json"
    extra = json.dumps({"statistics_out": str(stats_path), "predictive_samples": 2})
    out = tmp_path / "runs.csv"
    run_example(ROOT / "reproductions" / "compress_lenet.py", "--method", "rdp", "--arch", "lenet5", "--quick", "--no-progress", "--extra", extra, "--out", out, "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(out)
    assert list(runs.columns) == ["method", "arch", "dataset", "seed", "test_error", "params_total", "params_kept", "compression_ratio", "flops", "pruned_architecture"]
    assert runs.method.iloc[0] == "rdp" and runs.params_total.iloc[0] == 430_500 and 0 <= runs.test_error.iloc[0] <= 100
    record = json.loads(stats_path.read_text())
    assert set(record["groupings"]) == {"conv2.weight.row", "conv2.weight.column", "fc1.weight.row", "fc1.weight.column", "fc2.weight.row", "fc2.weight.column"}
    assert len(record["groupings"]["fc1.weight.column"]["values"]) == 800
    run_example(ROOT / "reproductions" / "rdp_pruning_histogram.py", "--statistics", stats_path, "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert (tmp_path / "rdp_lenet5_pruning_histogram.png").stat().st_size > 1000


def test_vmf_sampling_benchmark_quick(monkeypatch, capsys):
    namespace = run_example(ROOT / "benchmarks" / "vmf_sampling.py", "--quick", monkeypatch=monkeypatch)
    assert "torch.randn" in capsys.readouterr().out
    assert namespace is not None
