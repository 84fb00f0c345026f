"""Tables (CSV / Parquet) as data sets, and the splits made for them: the splits partition the
rows as their scheme says, standardisation uses each training part's statistics, labels map
back to the table's, and every table that cannot work is refused with a message that names
the problem. Every table is written by the test itself (tmp_path)."""

import importlib.util
import math

import numpy as np
import pandas as pd
import pytest
import torch

from pyrozoo.data import ClassificationTable, RegressionTable, UCISplit, column_splits, kfold_splits, load_table, random_splits, read_index_splits
from pyrozoo.data import tables as tables_module
from pyrozoo.data.splits import MIN_TRAIN_ROWS

N = 60


def _frame(n=N, seed=0, label=False):
    """Three numeric features (one integer, one boolean), a linear target, and with ``label``
    a text label made from the first feature."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.integers(0, 9, size=n)
    flag = rng.random(n) < 0.5
    frame = pd.DataFrame({"a": a, "b": b, "flag": flag, "y": 2.0 * a - 0.5 * b + flag})
    if label:
        frame["label"] = np.where(a > 0, "pos", np.where(a > -0.5, "mid", "neg"))
    return frame


def _csv(tmp_path, frame, name="table.csv"):
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return path


@pytest.fixture
def table_path(tmp_path):
    return _csv(tmp_path, _frame())


# -- splits made by seed, by folds, by a column, by index files ----------------------------------


@pytest.mark.parametrize("n, fraction", [(N, 0.1), (506, 0.1), (7, 0.3), (5, 0.1)])
def test_random_splits_partition_the_rows(n, fraction):
    splits = random_splits(n, 4, fraction, seed=3)
    expected_test = math.floor(fraction * n + 0.5)  # round half up: 506 rows -> 51 test rows, as the standard Boston splits
    for train, test in splits:
        assert len(test) == expected_test and len(train) == n - expected_test
        assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(n))
        assert np.all(np.diff(train) > 0) and np.all(np.diff(test) > 0)


def test_random_splits_are_reproducible_and_independent_of_their_number():
    five, twenty = random_splits(N, 5, seed=1), random_splits(N, 20, seed=1)
    for (a_train, a_test), (b_train, b_test) in zip(five, twenty):
        assert np.array_equal(a_train, b_train) and np.array_equal(a_test, b_test)
    # another seed, or another split of the same seed, holds out other rows
    assert not np.array_equal(random_splits(N, 1, seed=2)[0][1], five[0][1])
    assert len({tuple(test) for _, test in twenty}) == 20


@pytest.mark.parametrize("n, k", [(N, 10), (N, 7), (11, 2), (4, 2)])
def test_kfold_tests_every_row_exactly_once(n, k):
    splits = kfold_splits(n, k, seed=5)
    assert len(splits) == k
    tested = np.concatenate([test for _, test in splits])
    assert np.array_equal(np.sort(tested), np.arange(n))
    sizes = [len(test) for _, test in splits]
    assert max(sizes) - min(sizes) <= 1
    for train, test in splits:
        assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(n))
    assert [t.tolist() for _, t in kfold_splits(n, k, seed=5)] == [t.tolist() for _, t in splits]


def test_column_splits_train_test_and_folds():
    parts = column_splits(pd.Series([" Train", "test", "TRAIN", "train", "Test"]), "part")
    assert len(parts) == 1
    assert parts[0][0].tolist() == [0, 2, 3] and parts[0][1].tolist() == [1, 4]
    folds = column_splits(pd.Series([2, 0, 2, 0, 5, 5, 0]), "fold")
    assert [test.tolist() for _, test in folds] == [[1, 3, 6], [0, 2], [4, 5]]  # folds in increasing order
    assert [train.tolist() for train, _ in folds] == [[0, 2, 4, 5], [1, 3, 4, 5, 6], [0, 1, 2, 3, 6]]


def _write_index(folder, k, train, test):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"index_train_{k}.txt").write_text("".join(f"{i}\n" for i in train))
    (folder / f"index_test_{k}.txt").write_text("".join(f"{i}\n" for i in test))


def test_index_files_give_the_splits(tmp_path):
    _write_index(tmp_path / "idx", 0, [3, 0, 1, 2], [4, 5])
    _write_index(tmp_path / "idx", 1, [5, 4, 1], [0])  # rows 2 and 3 in neither part: allowed
    splits = read_index_splits(tmp_path / "idx", 6)
    assert [(a.tolist(), b.tolist()) for a, b in splits] == [([0, 1, 2, 3], [4, 5]), ([1, 4, 5], [0])]


# -- regression tables -----------------------------------------------------------------------------


@pytest.mark.parametrize("splits_by, n_splits, count", [("seed", None, 20), ("seed", 3, 3), ("kfold", None, 10), ("kfold", 4, 4)])
def test_regression_table_splits_and_standardisation(table_path, splits_by, n_splits, count):
    frame = _frame()
    table = load_table(table_path, "y", splits_by=splits_by, n_splits=n_splits, seed=2)
    assert isinstance(table, RegressionTable) and table.n_splits == count and len(table) == N
    assert table.feature_names == ["a", "b", "flag"] and table.name == "table"
    for k in (0, count - 1):
        train, test = table.rows(k)
        s = table.split(k)
        assert isinstance(s, UCISplit) and s.split == k and s.dataset == "table"
        x = frame[["a", "b", "flag"]].to_numpy(dtype=float)
        # the rows the split names, back in the table's own units
        np.testing.assert_allclose(s.to_original_units(s.y_test).numpy(), frame.y.to_numpy()[test], rtol=1e-12)
        np.testing.assert_allclose((s.x_train * s.x_std + s.x_mean).numpy(), x[train], rtol=1e-12, atol=1e-12)
        # standardised with the training part's statistics, not the test part's
        np.testing.assert_allclose(s.x_mean.numpy(), x[train].mean(0), rtol=1e-12)
        assert s.y_mean == pytest.approx(frame.y.to_numpy()[train].mean(), rel=1e-12)
        assert s.y_std == pytest.approx(frame.y.to_numpy()[train].std(), rel=1e-12)
    # the same seed gives the same splits, reading the file again
    again = load_table(table_path, "y", splits_by=splits_by, n_splits=n_splits, seed=2)
    assert all(np.array_equal(again.rows(k)[1], table.rows(k)[1]) for k in range(count))


def test_split_column_is_not_a_feature(tmp_path):
    frame = _frame().assign(part=["test" if i % 5 == 0 else "train" for i in range(N)])
    table = RegressionTable(_csv(tmp_path, frame), "y", splits_by="column:part")
    assert table.feature_names == ["a", "b", "flag"] and table.n_splits == 1
    assert table.rows(0)[1].tolist() == list(range(0, N, 5))


def test_features_chosen_by_name(table_path):
    table = RegressionTable(table_path, "y", features=["b", "a"])
    assert table.feature_names == ["b", "a"] and table.x.shape == (N, 2)
    np.testing.assert_array_equal(table.x[:, 0], _frame().b.to_numpy())


def test_index_file_splits_of_a_table(tmp_path, table_path):
    _write_index(tmp_path / "idx", 0, range(10, N), range(10))
    table = RegressionTable(table_path, "y", splits_by=f"files:{tmp_path / 'idx'}")
    assert table.n_splits == 1 and table.rows(0)[1].tolist() == list(range(10))


def test_describe_says_where_the_data_come_from(table_path):
    text = load_table(table_path, "y", splits_by="kfold", n_splits=5, seed=4).describe()
    for part in (str(table_path), "60 rows", "3 features", "'y'", "regression", "5-fold", "seed 4"):
        assert part in text


def test_compressed_csv_and_tsv_read_alike(tmp_path):
    frame = _frame(n=30)
    frame.to_csv(tmp_path / "t.csv.gz", index=False)
    frame.to_csv(tmp_path / "t.tsv", index=False, sep="\t")
    a, b = RegressionTable(tmp_path / "t.csv.gz", "y", n_splits=2), RegressionTable(tmp_path / "t.tsv", "y", n_splits=2)
    assert a.name == b.name == "t"
    np.testing.assert_array_equal(a.x, b.x)
    assert torch.equal(a.split(1).y_test, b.split(1).y_test)


# -- classification tables ------------------------------------------------------------------------


def test_classification_labels_map_back_to_the_table(tmp_path):
    frame = _frame(label=True)
    table = load_table(_csv(tmp_path, frame), "label", task="classification", features=["a", "b"], n_splits=3, seed=1)
    assert isinstance(table, ClassificationTable) and table.classes == ("mid", "neg", "pos") and table.num_classes == 3
    s = table.split(2)
    train, test = table.rows(2)
    assert [table.classes[i] for i in s.y_test.tolist()] == frame.label.to_numpy()[test].tolist()
    assert s.y_train.dtype == torch.int64 and s.x_train.dtype == torch.float32
    assert s.input_shape == (2,) and s.num_features == 2 and s.num_classes == 3
    x = frame[["a", "b"]].to_numpy()
    np.testing.assert_allclose(s.x_mean.numpy(), x[train].mean(0), rtol=1e-6)
    np.testing.assert_allclose(s.x_train.double().mean(0).numpy(), 0.0, atol=1e-6)
    assert s.to("cpu", torch.float64).x_test.dtype == torch.float64 and s.to("cpu", torch.float64).y_test.dtype == torch.int64


def test_integer_labels_sort_as_numbers(tmp_path):
    frame = _frame().assign(cls=lambda d: np.where(d.a > 0, 10, 2))
    table = ClassificationTable(_csv(tmp_path, frame), "cls", features=["a"], n_splits=1)
    assert table.classes == (2, 10)
    assert [table.classes[i] for i in table.y] == frame.cls.tolist()


# -- Parquet ---------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow not installed")
def test_parquet_reads_as_the_csv(tmp_path, table_path):
    frame = _frame()
    frame.to_parquet(tmp_path / "t.parquet")
    a, b = RegressionTable(tmp_path / "t.parquet", "y", n_splits=2), RegressionTable(table_path, "y", n_splits=2)
    np.testing.assert_array_equal(a.x, b.x)
    assert torch.equal(a.split(1).x_test, b.split(1).x_test)


def test_parquet_without_pyarrow_says_to_install_it(tmp_path, monkeypatch):
    (tmp_path / "t.parquet").write_bytes(b"PAR1")
    real = importlib.util.find_spec
    monkeypatch.setattr(tables_module.importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(ImportError, match="pip install pyarrow"):
        RegressionTable(tmp_path / "t.parquet", "y")


# -- tables that cannot work -----------------------------------------------------------------------


def _with(**columns):
    return lambda: _frame().assign(**columns)


#: (id, table, keyword arguments of load_table, error, what the message says)
BAD_TABLES = [
    ("text-feature", _with(city=["Paris" if i == 2 else "Rome" for i in range(N)]), {"target": "y"}, r"feature column 'city' is not numeric \(row 0: 'Rome'\).*encode it"),
    ("mixed-feature", _with(b=[str(i) if i != 7 else "seven" for i in range(N)]), {"target": "y"}, r"feature column 'b' is not numeric \(row 7: 'seven'\)"),
    ("missing-feature-value", _with(a=[np.nan if i in (4, 9) else 1.0 * i for i in range(N)]), {"target": "y"}, r"column 'a' has 2 missing value\(s\), first in row 4"),
    ("one-target-value", _with(y=3.5), {"target": "y"}, r"target column 'y' holds one value, 3.5, in all 60 rows"),
    ("one-class", _with(label="same"), {"target": "label", "task": "classification", "features": ["a"]}, r"target column 'label' holds one value, 'same'"),
    ("text-target", lambda: _frame(label=True), {"target": "label"}, r"target column 'label' is not numeric.*task='classification'"),
    ("fractional-label", _frame, {"target": "y", "task": "classification", "features": ["a"]}, r"not a class label.*task='regression'"),
    ("missing-label", _with(label=[None if i == 3 else "x" if i % 2 else "z" for i in range(N)]), {"target": "label", "task": "classification", "features": ["a"]}, r"1 missing label\(s\), first in row 3"),
    ("no-target-column", _frame, {"target": "price"}, r"no target column 'price'; its columns are: 'a', 'b', 'flag', 'y'$"),
    ("no-feature-column", _frame, {"target": "y", "features": ["a", "z"]}, r"no feature column\(s\) 'z'; its columns are: 'a', 'b', 'flag', 'y'$"),
    ("target-as-feature", _frame, {"target": "y", "features": ["a", "y"]}, r"target column 'y' is also listed as a feature"),
    ("too-few-for-90-10", lambda: _frame(n=4), {"target": "y", "features": ["a"]}, r"4 rows are too few for a random 90/10 split.*at least 5 rows"),
    ("too-few-for-folds", lambda: _frame(n=8), {"target": "y", "features": ["a"], "splits_by": "kfold", "n_splits": 10}, r"8 rows are too few for 10-fold splits: they need at least 10"),
    ("too-few-per-fold", lambda: _frame(n=3), {"target": "y", "features": ["a"], "splits_by": "kfold", "n_splits": 2}, r"3 rows are too few for 2-fold splits: they need at least 4"),
    ("one-fold", _with(fold=1), {"target": "y", "splits_by": "column:fold"}, r"puts every row in fold 1"),
    ("bad-split-value", _with(part=["train"] * 5 + ["validation"] + ["test"] * (N - 6)), {"target": "y", "splits_by": "column:part"}, r"row 5 holds 'validation'"),
    ("no-split-column", _frame, {"target": "y", "splits_by": "column:part"}, r"no split column 'part'; its columns are"),
    ("empty-test-part", _with(part="train"), {"target": "y", "splits_by": "column:part"}, r"60 training row\(s\) and 0 test row\(s\)"),
    ("n-splits-with-column", _with(part="train"), {"target": "y", "splits_by": "column:part", "n_splits": 3}, r"do not give n_splits"),
    ("unknown-scheme", _frame, {"target": "y", "splits_by": "random"}, r"unknown split scheme 'random'"),
    ("unknown-task", _frame, {"target": "y", "task": "ranking"}, r"unknown task 'ranking'"),
]


@pytest.mark.parametrize("make, kwargs, message", [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES])
def test_a_table_that_cannot_work_is_refused_naming_the_problem(tmp_path, make, kwargs, message):
    path = _csv(tmp_path, make())
    kwargs = dict(kwargs)
    with pytest.raises(ValueError, match=message) as info:
        load_table(path, kwargs.pop("target"), **kwargs)
    assert "\n" not in str(info.value)  # one line: the examples print it as their error


@pytest.mark.parametrize("name, text, message", [
    ("t.xlsx", "a,y\n1,2\n", "unknown table format '.xlsx'"),
    ("t.csv", "a,y\n", "holds no rows"),
    ("t.csv", "", "not a readable CSV table"),
])
def test_unreadable_tables(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        load_table(tmp_path / name, "y")


def test_a_missing_table_is_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        load_table(tmp_path / "nowhere.csv", "y")


def test_split_indices_out_of_range(table_path):
    table = load_table(table_path, "y", n_splits=3)
    for k in (3, -1):
        with pytest.raises(ValueError, match=r"has splits 0\.\.2"):
            table.split(k)


def test_the_smallest_tables_a_scheme_accepts():
    # one row fewer is refused (BAD_TABLES): 5 rows make a 90/10 split of 4 + 1, 4 rows two folds of 2
    assert [(len(a), len(b)) for a, b in random_splits(5, 2)] == [(4, 1), (4, 1)]
    assert [(len(a), len(b)) for a, b in kfold_splits(4, 2)] == [(MIN_TRAIN_ROWS, 2), (MIN_TRAIN_ROWS, 2)]
