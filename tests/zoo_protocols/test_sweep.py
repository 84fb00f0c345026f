"""zoo_protocols.sweep: the UCI sweep over methods, data sets and splits that reproductions/uci_regression.py
and the UCI table scripts share (run here with fake data sets and runs: nothing trains)."""

from types import SimpleNamespace

import pandas as pd
import pytest

from zoo_protocols import sweep
from zoo_protocols.config import RunConfig


class _FakeDataset:
    """A data set with ``n_splits`` splits and no data (the sweep only indexes splits)."""

    SPLITS = {"bostonHousing": 3, "protein-tertiary-structure": 2}

    def __init__(self, name, data_dir):
        self.name, self.n_splits = name, self.SPLITS[name]

    def split(self, index):
        return SimpleNamespace(dataset=self.name, split=index)


@pytest.fixture
def fake_runs(monkeypatch):
    """``zoo_protocols.sweep.sweep`` with fake data sets and a ``run_split`` that records its calls."""
    calls = []

    def fake_run(method, split, config):
        calls.append((split.dataset, split.split, method, config))
        return {"rmse": float(split.split), "test_ll": -1.0, "train_seconds": 0.5}

    monkeypatch.setattr(sweep, "UCIDataset", _FakeDataset)
    monkeypatch.setattr(sweep, "run_split", fake_run)
    return calls


def test_sweep_runs_splits_outermost_with_per_run_settings(fake_runs, tmp_path):
    out = tmp_path / "runs.csv"
    base = RunConfig(seed=7, num_samples=5)
    lines = []
    table = sweep.sweep(["map", "bbb"], ["bostonHousing", "protein-tertiary-structure"], [0, 1, 2], out, config=base,
                      settings=lambda dataset, method: {"lr": 0.1 if method == "map" else 0.2}, data_dir=tmp_path, log=lines.append)
    # protein has two splits: its split 2 is skipped, not an error
    assert [(d[0], s, m) for d, s, m, _ in fake_runs] == [  # b: bostonHousing, p: protein
        ("b", 0, "map"), ("b", 0, "bbb"), ("p", 0, "map"), ("p", 0, "bbb"),
        ("b", 1, "map"), ("b", 1, "bbb"), ("p", 1, "map"), ("p", 1, "bbb"),
        ("b", 2, "map"), ("b", 2, "bbb"),
    ]
    assert all(c.seed == 7 and c.num_samples == 5 and c.lr == (0.1 if m == "map" else 0.2) for _, _, m, c in fake_runs)
    assert base.lr is None  # the caller's config is not changed
    assert list(table.columns) == sweep.RESULT_COLUMNS and len(table) == 10 and len(lines) == 10
    pd.testing.assert_frame_equal(sweep.read_results(out, missing_ok=False), table)


def test_sweep_resumes_and_can_run_data_sets_outermost(fake_runs, tmp_path):
    out = tmp_path / "runs.csv"
    sweep.sweep(["map"], ["bostonHousing"], [0], out, data_dir=tmp_path, log=None)
    fake_runs.clear()
    table = sweep.sweep(["map"], ["bostonHousing", "protein-tertiary-structure"], {"bostonHousing": [0, 1], "protein-tertiary-structure": [1]}, out,
                      data_dir=tmp_path, splits_outermost=False, log=None)
    assert [(d, s) for d, s, _, _ in fake_runs] == [("bostonHousing", 1), ("protein-tertiary-structure", 1)]
    assert list(zip(table.dataset, table.split)) == [("bostonHousing", 0), ("bostonHousing", 1), ("protein-tertiary-structure", 1)]
    # without resume the file starts afresh
    fresh = sweep.sweep(["map"], ["bostonHousing"], [2], out, data_dir=tmp_path, resume=False, log=None)
    assert list(fresh.split) == [2] and list(sweep.read_results(out).split) == [2]


def test_extra_columns_are_written_and_kept_on_resume(monkeypatch, tmp_path):
    """A second readout a method reports travels into the file after the standard columns; a run
    that does not report it gets a blank, and resumed rows keep theirs."""

    def run(method, split, config):
        extra = {"rmse_last": 10.0 + split.split} if method == "map" else {}
        return {"rmse": float(split.split), "test_ll": -1.0, "train_seconds": 0.5, **extra}

    monkeypatch.setattr(sweep, "UCIDataset", _FakeDataset)
    monkeypatch.setattr(sweep, "run_split", run)
    out = tmp_path / "runs.csv"
    sweep.sweep(["map"], ["bostonHousing"], [0], out, data_dir=tmp_path, log=None, extra_columns=["rmse_last"])
    table = sweep.sweep(["map", "mfvi"], ["bostonHousing"], [0, 1], out, data_dir=tmp_path, log=None, extra_columns=["rmse_last"])
    assert list(table.columns) == sweep.RESULT_COLUMNS + ["rmse_last"]
    read = sweep.read_results(out).set_index(["method", "split"])
    assert read.loc[("map", 0), "rmse_last"] == 10.0 and read.loc[("map", 1), "rmse_last"] == 11.0
    assert read.loc[("mfvi", 0), "rmse_last"] != read.loc[("mfvi", 0), "rmse_last"]  # blank: NaN


def test_sweep_refuses_what_it_cannot_run_before_any_run(fake_runs, tmp_path):
    for methods, datasets, splits, match in [
        ([], ["bostonHousing"], [0], "nothing to run"),
        (["no-such-method"], ["bostonHousing"], [0], "unknown UCI method"),
        (["map"], ["bostonHousing"], [3], r"splits \[3\] out of range 0..2"),
        (["map"], ["protein-tertiary-structure"], {"protein-tertiary-structure": [2]}, r"protein-tertiary-structure: splits \[2\] out of range 0..1"),
    ]:
        with pytest.raises(ValueError, match=match):
            sweep.sweep(methods, datasets, splits, tmp_path / "runs.csv", data_dir=tmp_path, log=None)
    assert fake_runs == [] and not (tmp_path / "runs.csv").exists()


def test_a_run_that_goes_wrong_is_kept_as_such_and_left_out_of_summaries(monkeypatch, tmp_path):
    """A run whose training said it diverged, or that went non-finite, is written with its
    status (so a resumed sweep does not rerun it) and never counted as a result."""
    from zoo_protocols.uci import summarize

    def run(method, split, config):
        if method == "exploding":
            raise FloatingPointError("loss became nan at epoch 3")
        status = "diverged" if (method, split.split) == ("bad", 1) else "ok"
        return {"rmse": 100.0 if status != "ok" else 1.0 + split.split, "test_ll": -1.0, "train_seconds": 0.5, "status": status}

    monkeypatch.setattr(sweep, "UCIDataset", _FakeDataset)
    monkeypatch.setattr(sweep, "run_split", run)
    monkeypatch.setattr(sweep, "available_methods", lambda: {"bad": None, "exploding": None})
    out, lines = tmp_path / "runs.csv", []
    table = sweep.sweep(["bad", "exploding"], ["bostonHousing"], [0, 1, 2], out, data_dir=tmp_path, log=lines.append)
    assert list(table.status) == ["ok", "diverged", "diverged", "diverged", "ok", "diverged"]  # splits outermost
    assert table[table.method == "exploding"].rmse.isna().all()
    assert sum("DIVERGED: not a valid result" in line for line in lines) == 4 and sum("(loss became nan at epoch 3)" in line for line in lines) == 3
    read = sweep.read_results(out, missing_ok=False)
    assert list(read.status) == list(table.status)
    summary = summarize(read, include_published=False).set_index("method")
    assert summary.loc["bad", "rmse"] == pytest.approx(2.0)  # mean of splits 0 and 2: the diverged 100 is left out
    assert summary.loc["bad", "excluded"] == 1 and summary.loc["exploding", "n"] == 0


def test_results_written_before_runs_had_a_status_read_as_valid_runs(tmp_path):
    out = tmp_path / "old.csv"
    out.write_text("dataset,method,split,rmse,test_ll,train_seconds\nbostonHousing,map,0,2.5,-2.4,1.0\n")
    assert list(sweep.read_results(out).status) == ["ok"]
    out.write_text("dataset,method,split,rmse,test_ll,train_seconds,status\nbostonHousing,map,0,,-2.4,1.0,ok\n")
    with pytest.raises(ValueError, match="line 2: rmse is blank"):
        sweep.read_results(out)
