"""Reporting: Markdown tables, CSV round trips, summaries over runs."""

import math

import numpy as np
import pandas as pd
import pytest

from pyrozoo.reporting import format_mean_se, mean_and_stderr, save_figure, save_table, to_markdown


@pytest.fixture
def runs():
    rng = np.random.default_rng(0)
    rows = []
    for dataset, k in [("boston", 5), ("yacht", 3), ("wine", 1)]:
        for method in ("map", "bbb"):
            for split in range(k):
                rows.append({"dataset": dataset, "method": method, "split": split, "rmse": rng.uniform(1, 5), "test_ll": rng.normal(-2.5, 0.3)})
    return pd.DataFrame(rows)


def _cells(line):
    assert line.startswith("| ") and line.endswith(" |")
    return [c.strip() for c in line[2:-2].split(" | ")]


def test_markdown_table_shape(runs):
    md = to_markdown(runs)
    lines = md.rstrip("\n").split("\n")
    assert md.endswith("\n")
    assert len(lines) == len(runs) + 2
    assert _cells(lines[0]) == list(runs.columns)
    assert all(set(c) == {"-"} for c in _cells(lines[1]))
    assert len({len(line) for line in lines}) == 1  # columns padded to a common width
    for line, row in zip(lines[2:], runs.itertuples(index=False)):
        cells = _cells(line)
        assert len(cells) == runs.shape[1]
        assert cells[0] == row.dataset and int(cells[2]) == row.split
        assert float(cells[3]) == pytest.approx(row.rmse, rel=1e-3)  # .4g


def test_markdown_formats_nan_as_empty_and_keeps_index():
    df = pd.DataFrame({"a": [1.23456789, float("nan")], "b": ["x", "y"]}, index=pd.Index([10, 20], name="id"))
    lines = to_markdown(df, floatfmt=".3f", index=True).rstrip("\n").split("\n")
    assert _cells(lines[0]) == ["id", "a", "b"]
    assert _cells(lines[2]) == ["10", "1.235", "x"]
    assert _cells(lines[3]) == ["20", "", "y"]


def test_markdown_empty_frame():
    lines = to_markdown(pd.DataFrame({"a": [], "b": []})).rstrip("\n").split("\n")
    assert len(lines) == 2 and _cells(lines[0]) == ["a", "b"]


def test_save_table_csv_round_trip(tmp_path, runs):
    path = save_table(runs, "uci", tmp_path / "results", title="UCI runs", notes="Published numbers are labelled.")
    assert path == tmp_path / "results" / "uci.csv"
    back = pd.read_csv(path)
    pd.testing.assert_frame_equal(back, runs, check_exact=False, rtol=1e-15)
    md = (tmp_path / "results" / "uci.md").read_text()
    assert md.startswith("# UCI runs\n")
    assert md.rstrip().endswith("Published numbers are labelled.")
    assert to_markdown(runs) in md


def test_mean_and_stderr_against_numpy(runs):
    summary = mean_and_stderr(runs, ["dataset", "method"], ["rmse", "test_ll"])
    assert list(summary.columns) == ["dataset", "method", "rmse", "rmse_se", "test_ll", "test_ll_se", "n"]
    assert len(summary) == 6
    # groups in order of first appearance
    assert list(zip(summary.dataset, summary.method))[:2] == [("boston", "map"), ("boston", "bbb")]
    for row in summary.itertuples(index=False):
        group = runs[(runs.dataset == row.dataset) & (runs.method == row.method)]
        assert row.n == len(group)
        for col in ("rmse", "test_ll"):
            values = group[col].to_numpy()
            assert getattr(row, col) == pytest.approx(values.mean(), rel=1e-12)
            se = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else math.nan
            assert getattr(row, f"{col}_se") == pytest.approx(se, rel=1e-12, abs=1e-15, nan_ok=True)


def test_mean_and_stderr_leaves_missing_values_out():
    runs = pd.DataFrame({"method": ["a", "a", "a", "b"], "x": [1.0, 2.0, math.nan, 5.0]})
    summary = mean_and_stderr(runs, ["method"], ["x"]).set_index("method")
    assert summary.loc["a", "x"] == 1.5 and summary.loc["a", "n"] == 3
    assert summary.loc["a", "x_se"] == pytest.approx(math.sqrt(0.5) / math.sqrt(2))  # two values, not three
    assert math.isnan(summary.loc["b", "x_se"])  # one run: unknown, not zero
    assert format_mean_se(5.0, summary.loc["b", "x_se"]) == "5.00"


def test_format_mean_se():
    assert format_mean_se(3.14159, 0.0271) == "3.14 ± 0.03"
    assert format_mean_se(-2.5, 0.125, digits=3) == "-2.500 ± 0.125"


def test_save_figure_writes_a_png(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, "curve", tmp_path / "figs")
    plt.close(fig)
    assert path == tmp_path / "figs" / "curve.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_empty_table_never_replaces_a_table(tmp_path):
    save_table(pd.DataFrame({"a": [1.0]}), "t", tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match="empty table t.csv"):
        save_table(pd.DataFrame({"a": []}), "t", tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    save_table(pd.DataFrame({"a": []}), "empty", tmp_path, allow_empty=True)
    assert (tmp_path / "empty.csv").read_text() == "a\n"


def test_the_results_folder_is_an_argument(tmp_path, monkeypatch):
    """The library has no default results folder: a writer without one writes nothing."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError):
        save_table(pd.DataFrame({"a": [1.0]}), "t")  # no folder given
    with pytest.raises(ValueError, match="results_dir is required"):
        save_table(pd.DataFrame({"a": [1.0]}), "t", None)
    assert list(tmp_path.iterdir()) == []


def _with_status(runs):
    """The fixture's runs with a status per run: two diverged and one collapsed boston/bbb
    split, and every wine/map run diverged."""
    runs = runs.copy()
    runs["status"] = "ok"
    bbb = runs.index[(runs.dataset == "boston") & (runs.method == "bbb")]
    runs.loc[bbb[:2], "status"] = "diverged"
    runs.loc[bbb[2], "status"] = "collapsed"
    runs.loc[(runs.dataset == "wine") & (runs.method == "map"), "status"] = "diverged"
    runs.loc[bbb[:3], "rmse"] = 129.0  # what a diverged run reports: it must not reach a mean
    return runs


def test_mean_and_stderr_leaves_out_runs_that_are_not_ok(runs):
    runs = _with_status(runs)
    summary = mean_and_stderr(runs, ["dataset", "method"], ["rmse", "test_ll"])
    assert list(summary.columns) == ["dataset", "method", "rmse", "rmse_se", "test_ll", "test_ll_se", "n", "excluded"]
    assert len(summary) == 6  # a group whose runs were all excluded keeps its row
    for row in summary.itertuples(index=False):
        group = runs[(runs.dataset == row.dataset) & (runs.method == row.method)]
        valid = group[group.status == "ok"]
        assert row.n == len(valid) and row.excluded == len(group) - len(valid)
        if len(valid) == 0:
            assert math.isnan(row.rmse) and math.isnan(row.rmse_se)
            continue
        values = valid.rmse.to_numpy()
        assert row.rmse == pytest.approx(values.mean(), rel=1e-12)
        se = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else math.nan
        assert row.rmse_se == pytest.approx(se, rel=1e-12, nan_ok=True)
    boston_bbb = summary[(summary.dataset == "boston") & (summary.method == "bbb")].iloc[0]
    assert (boston_bbb.n, boston_bbb.excluded) == (2, 3) and boston_bbb.rmse < 129.0


def test_a_blank_status_counts_as_ok():
    """Rows written before the status column existed (blank after a concatenation) stay valid."""
    runs = pd.DataFrame({"method": ["a", "a", "a"], "x": [1.0, 2.0, 50.0], "status": [None, "ok", "diverged"]})
    summary = mean_and_stderr(runs, ["method"], ["x"]).set_index("method")
    assert summary.loc["a", "x"] == 1.5 and summary.loc["a", "n"] == 2 and summary.loc["a", "excluded"] == 1


def test_save_table_lists_runs_that_are_not_ok_with_their_status(tmp_path, runs):
    runs = _with_status(runs)
    path = save_table(runs, "uci", tmp_path, notes="Published numbers are labelled.")
    back = pd.read_csv(path)
    assert list(back.status) == list(runs.status)  # every run stays in the per-run table, marked
    md = (tmp_path / "uci.md").read_text()
    failed = runs[runs.status != "ok"]
    assert f"{len(failed)} of {len(runs)} runs are not ok (diverged: {(failed.status == 'diverged').sum()}, collapsed: 1)" in md
    assert md.rstrip().endswith("Published numbers are labelled.")
    save_table(runs.assign(status="ok"), "clean", tmp_path)
    assert "not ok" not in (tmp_path / "clean.md").read_text()
