"""Smoke run (--quick) of reproductions/compare_objectives.py: it writes the per-run CSV, the
summary and the plots, and skips unknown methods with a message."""

import pandas as pd

from zoo_protocols.compare import COLUMNS
from tests.runner import run_example


def test_compare_objectives_quick(tmp_path, monkeypatch, capsys):
    # a few methods keep the smoke run cheap; tests/zoo_protocols/test_compare.py covers the harness
    run_example(
        "compare_objectives.py", "--quick", "--no-progress", "--results-dir", tmp_path,
        "--methods", "map,mfvi,no-such-method", "--datasets", "bostonHousing,mnist", monkeypatch=monkeypatch,
    )
    assert "skipping 'no-such-method'" in capsys.readouterr().out
    runs = pd.read_csv(tmp_path / "compare_objectives_quick.csv")
    assert list(runs.columns) == COLUMNS
    assert len(runs) == 2 * 2 * 2  # datasets x methods x quick budgets, one seed
    for suffix in ("_summary.csv", "_summary.md", "_vs_budget.png", "_test_ll.png", "_calibration.png"):
        assert (tmp_path / f"compare_objectives_quick{suffix}").exists()
    assert "QUICK" in (tmp_path / "compare_objectives_quick_summary.md").read_text()
