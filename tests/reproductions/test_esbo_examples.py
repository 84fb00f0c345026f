"""Smoke runs (--quick) of the importance-weighted UCI examples ("Sagar 2020 (results withdrawn)")."""

import pandas as pd

from tests.runner import run_example


def test_uci_regression_quick_with_the_importance_weighted_methods(tmp_path, monkeypatch):
    run_example("uci_regression.py", "--method", "iwae,renyi,esbo", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "uci_iwae_renyi_esbo_quick.csv")
    assert sorted(runs.method) == ["esbo", "iwae", "renyi"] and runs.rmse.notna().all() and runs.test_ll.notna().all()


def test_uci_esbo_table_quick(tmp_path, monkeypatch):
    run_example("uci_esbo_table.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "uci_esbo_table_quick.csv")
    sources = set(table.source)
    assert "measured (this repository)" in sources
    assert any(s.startswith("Sagar 2020 (withdrawn") for s in sources)
    assert any(s.startswith("published") for s in sources)
    measured = table[table.source == "measured (this repository)"]
    assert len(measured) == 4 and measured.method.str.startswith("esbo: Sagar 2020 (results withdrawn)").any()
    withdrawn = table[table.source.str.startswith("Sagar 2020")]
    assert (withdrawn.test_ll < 0).all()  # the paper's NLLs, negated
    assert "withdrew" in (tmp_path / "uci_esbo_table_quick.md").read_text()
