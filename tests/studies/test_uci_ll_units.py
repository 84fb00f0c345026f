"""studies/uci_ll_units.py: the rescoring is the exact change of units, and the verdict
follows the numbers (nothing is trained)."""

import math

import pandas as pd
import pytest

from tests.runner import STUDIES, quick_study, run_example

SCRIPT = STUDIES / "uci_ll_units.py"


def _runs(tmp_path, values):
    """A per-split results file: ``{dataset: [test_ll per split]}``."""
    rows = [{"dataset": d, "method": "rdp", "split": k, "rmse": 1.0, "test_ll": ll, "train_seconds": 0.0} for d, lls in values.items() for k, ll in enumerate(lls)]
    path = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_quick_run_writes_a_table_with_a_verdict_and_provenance(tmp_path, monkeypatch):
    table, text = quick_study(SCRIPT, tmp_path, monkeypatch=monkeypatch)
    assert set(table.dataset) == {"power-plant", "yacht"}
    assert table[["ours", "log_sigma_y", "ours_standardised"]].map(math.isfinite).all().all()
    assert "Verdict:" in text and "Provenance:" in text


def test_the_standardised_score_is_ours_plus_each_splits_log_sigma_y(tmp_path, monkeypatch):
    from pyrozoo.data import UCIDataset
    from zoo_protocols.cli import data_dir_default

    lls = [-2.0, -3.0, -4.0]
    run_example(SCRIPT, "--runs", _runs(tmp_path, {"yacht": lls}), "--results-dir", tmp_path, monkeypatch=monkeypatch)
    row = pd.read_csv(tmp_path / "uci_ll_units.csv").iloc[0]
    data = UCIDataset("yacht", data_dir_default())
    shift = sum(math.log(data.split(k).y_std) for k in range(3)) / 3
    assert row.ours == pytest.approx(-3.0) and row.ours_se == pytest.approx(1.0 / math.sqrt(3))
    assert row.ours_standardised == pytest.approx(-3.0 + shift, abs=1e-12) and row.log_sigma_y == pytest.approx(shift)


@pytest.mark.parametrize("ours, head", [(-2.85, "A PAPER ISSUE FOR 1 OF THE 1 CLAIMED WINS"), (-0.5, "UNDECIDED")])
def test_the_verdict_follows_where_ours_lies(tmp_path, monkeypatch, ours, head):
    # power-plant: the paper's RDP -0.14 against baselines -2.89..-2.80; ours with them, or far above them
    run_example(SCRIPT, "--runs", _runs(tmp_path, {"power-plant": [ours, ours]}), "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert f"Verdict: {head}" in (tmp_path / "uci_ll_units.md").read_text()
