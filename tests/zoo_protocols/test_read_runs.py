"""zoo_protocols.read_runs: a per-run CSV read back (on --resume, or to build a table) is
a complete table, or an error naming the file and the rows at fault, never a result."""

import math

import pandas as pd
import pytest

from zoo_protocols import read_runs

COLUMNS = ["dataset", "method", "split", "rmse", "test_ll", "train_seconds"]
NUMERIC = ["split", "rmse", "test_ll", "train_seconds"]


def _runs(tmp_path, n=3):
    path = tmp_path / "runs.csv"
    pd.DataFrame({"dataset": ["concrete"] * n, "method": ["bbb"] * n, "split": range(n), "rmse": [5.1, 5.3, 4.9][:n],
                  "test_ll": [-3.1, -3.2, -3.0][:n], "train_seconds": [1.5, 1.25, 1.75][:n]}).to_csv(path, index=False)
    return path


def test_a_complete_file_is_read_back(tmp_path):
    path = _runs(tmp_path)
    runs = read_runs(path, COLUMNS, numeric=NUMERIC)
    assert list(runs.columns) == COLUMNS and list(runs.split) == [0, 1, 2] and runs.rmse.dtype.kind == "f"
    # no file yet: an empty table (a sweep not started), unless the file is required
    assert read_runs(tmp_path / "none.csv", COLUMNS).empty
    with pytest.raises(FileNotFoundError, match="none.csv"):
        read_runs(tmp_path / "none.csv", COLUMNS, missing_ok=False)
    # a header alone is an empty table, not an error
    (tmp_path / "header.csv").write_text(",".join(COLUMNS) + "\n")
    assert read_runs(tmp_path / "header.csv", COLUMNS).empty


def test_a_row_cut_short_mid_line_is_an_error_naming_the_file(tmp_path):
    """The disk filled while the runs CSV was written: the last row lost its end (even where
    what is left of its last number still parses)."""
    path = _runs(tmp_path)
    text = path.read_text()
    path.write_text(text[: -len("1.75\n") + 2])  # "...,-3.0,1." : train_seconds cut to "1."
    with pytest.raises(ValueError, match="runs.csv ends mid-row") as info:
        read_runs(path, COLUMNS, numeric=NUMERIC)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_truncated_row_is_not_a_result(tmp_path):
    """A row that lost its metrics (fields missing, but the line ended) names its line."""
    path = _runs(tmp_path)
    lines = path.read_text().splitlines()
    lines[2] = "concrete,bbb,1,5.3"  # test_ll and train_seconds lost
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"runs.csv has incomplete rows.*line 3: test_ll is blank; line 3: train_seconds is blank"):
        read_runs(path, COLUMNS, numeric=NUMERIC)


def test_blank_values_are_allowed_only_where_the_caller_says(tmp_path):
    path = tmp_path / "tuning.csv"
    path.write_text("dataset,method,lr,val_rmse\nyacht,sghmc,1e-5,0.7\nyacht,sghmc,1e-4,\n")
    tuning = read_runs(path, ["dataset", "method", "lr", "val_rmse"], required=["dataset", "method", "lr"], numeric=["lr", "val_rmse"])
    assert math.isnan(tuning.val_rmse[1])  # a diverged grid point: blank score, a key
    with pytest.raises(ValueError, match="line 3: val_rmse is blank"):
        read_runs(path, ["dataset", "method", "lr", "val_rmse"])


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "is empty"),
        ("dataset,method,split\n", r"has no column\(s\) \['rmse', 'test_ll', 'train_seconds'\]"),
        ("dataset,method,split,rmse,test_ll,train_seconds\nconcrete,bbb,0,5.1,-3.1,1.5,7,8\n", "not a readable CSV"),
        ("dataset,method,split,rmse,test_ll,train_seconds\nconcrete,bbb,0,5.1x,-3.1,1.5\n", "line 2: rmse = '5.1x' is not a number"),
        ("dataset,method,split,rmse,test_ll,train_seconds\n\x00\x00\x00\x00\n", "incomplete rows"),
    ],
    ids=["empty-file", "missing-columns", "extra-fields", "garbled-number", "zero-bytes-row"],
)
def test_corrupt_files_are_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "runs.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        read_runs(path, COLUMNS, numeric=NUMERIC)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
