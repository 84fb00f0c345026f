"""A user's data set as one table (CSV or Parquet) with a named target column.

Every other numeric column is a feature (or those named in ``features``). The splits are
given by the user (a column of the table, or index files) or made reproducibly from a seed:
``k`` random 90/10 hold-outs, as in the UCI protocol of Hernández-Lobato & Adams (2015), or
``k``-fold cross-validation (:mod:`pyrozoo.data.splits`). Each split is standardised with its
training part's statistics:

* regression (:class:`RegressionTable`): inputs and target, exactly as the standard UCI
  splits are, returning the same :class:`~pyrozoo.data.UCISplit` (a ``RegressionTable`` *is*
  a :class:`~pyrozoo.data.UCIDataset`), so every UCI method and :func:`~pyrozoo.data.gap_split`
  runs on it and reports metrics in the target's original units;
* classification (:class:`ClassificationTable`): the inputs, with the labels (numbers or
  text) turned into class indices ``0 .. C - 1`` of the sorted distinct labels
  (:class:`~pyrozoo.data.splits.ClassificationSplit`).

A table that cannot work is refused when it is loaded, with what to do about it: a
non-numeric feature or a missing value (naming the column and the row), a target with a
single value, a missing target column (listing the columns there are), fewer rows than a
split needs. Rows are numbered from 0, the header not counted.
"""

import importlib.util
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import torch

from pyrozoo.data.splits import ClassificationSplit, column_splits, feature_statistics, kfold_splits, random_splits, read_index_splits
from pyrozoo.data.uci import UCIDataset, UCISplit

__all__ = ["TASKS", "SPLIT_SCHEMES", "read_table", "table_columns", "load_table", "RegressionTable", "ClassificationTable", "parse_splits_by"]

TASKS = ("regression", "classification")
#: how a table's rows are split: ``seed`` (random 90/10), ``kfold``, ``column:<name>``, ``files:<folder>``
SPLIT_SCHEMES = ("seed", "kfold", "column:<name>", "files:<folder>")
#: the number of splits when none is given: the UCI protocol's 20 random splits, 10 folds
DEFAULT_SPLITS = {"seed": 20, "kfold": 10}
#: the suffixes read as CSV (pandas reads the compressed ones too), as tab-separated text, as Parquet
CSV_SUFFIXES, TSV_SUFFIXES, PARQUET_SUFFIXES = (".csv",), (".tsv", ".tab"), (".parquet", ".pq")
_COMPRESSED = (".gz", ".bz2", ".xz", ".zip", ".zst")


def _format(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSED:
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in CSV_SUFFIXES:
        return "csv"
    if last in TSV_SUFFIXES:
        return "tsv"
    if last in PARQUET_SUFFIXES and path.suffix.lower() in PARQUET_SUFFIXES:
        return "parquet"
    raise ValueError(f"{path}: unknown table format {path.suffix!r}; a table is a .csv (or .csv.gz), .tsv or .parquet file")


def _stem(path: Path) -> str:
    """The file name without its format suffix (and compression suffix): ``wine.csv.gz`` -> ``wine``."""
    name = path.name
    for suffix in (_COMPRESSED, CSV_SUFFIXES + TSV_SUFFIXES + PARQUET_SUFFIXES):
        if name.lower().endswith(suffix):
            name = name[: name.rfind(".")]
    return name


def read_table(path: Union[str, Path]) -> pd.DataFrame:
    """The table in ``path`` (CSV, tab-separated or Parquet, by its suffix), as pandas reads it.
    Parquet needs ``pyarrow``; without it the error says to install it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"table {path} does not exist")
    kind = _format(path)
    if kind == "parquet":
        if importlib.util.find_spec("pyarrow") is None:
            raise ImportError(f"reading the Parquet table {path} needs the package pyarrow: pip install pyarrow (or save the table as CSV)")
        table = pd.read_parquet(path, engine="pyarrow")
    else:
        try:
            table = pd.read_csv(path, sep="\t" if kind == "tsv" else ",")
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not a readable {kind.upper()} table: {str(e).strip()}") from None
    if len(table.columns) == 0 or len(table) == 0:
        raise ValueError(f"{path} holds no rows: a table needs a header line and at least one row of values")
    return table


def parse_splits_by(spec: str) -> Tuple[str, Optional[str]]:
    """``"seed"``, ``"kfold"``, ``"column:<name>"`` or ``"files:<folder>"`` -> ``(scheme, argument)``."""
    text = str(spec).strip()
    scheme, sep, argument = text.partition(":")
    scheme = scheme.strip().lower()
    if scheme in ("seed", "kfold") and not sep:
        return scheme, None
    if scheme in ("column", "files") and sep and argument.strip():
        return scheme, argument.strip()
    raise ValueError(f"unknown split scheme {spec!r}; choose one of {', '.join(SPLIT_SCHEMES)}")


def _columns_text(table: pd.DataFrame) -> str:
    return ", ".join(map(repr, map(str, table.columns)))


def _column(table: pd.DataFrame, name: str, path: Path, role: str) -> pd.Series:
    if name not in table.columns:
        raise ValueError(f"{path} has no {role} column {name!r}; its columns are: {_columns_text(table)}")
    return table[name].reset_index(drop=True)


def _first(mask) -> int:
    return int(np.argmax(np.asarray(mask)))


def _numeric_column(values: pd.Series, name: str, path: Path, role: str, advice: str) -> np.ndarray:
    """The column as float64, or an error naming it and its first bad row."""
    missing = values.isna().to_numpy()
    if not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)):
        numbers = pd.to_numeric(values, errors="coerce")
        bad = numbers.isna().to_numpy() & ~missing
        where = f" (row {_first(bad)}: {values[_first(bad)]!r})" if bad.any() else ""
        raise ValueError(f"{path}: {role} column {name!r} is not numeric{where}; {advice}")
    if missing.any():
        raise ValueError(f"{path}: {role} column {name!r} has {int(missing.sum())} missing value(s), first in row {_first(missing)}; fill them in or drop those rows")
    numbers = values.to_numpy(dtype=np.float64)
    infinite = ~np.isfinite(numbers)
    if infinite.any():
        raise ValueError(f"{path}: {role} column {name!r} has {int(infinite.sum())} infinite value(s), first in row {_first(infinite)}")
    return numbers


class _Table:
    """What a :class:`RegressionTable` and a :class:`ClassificationTable` share: the table read
    and checked, its features and target, and the rows of each split."""

    def _load(self, path, target, task, features, splits_by, n_splits, seed, test_fraction, name) -> pd.Series:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
        self.path = Path(path)
        self.task = task
        self.name = name if name is not None else _stem(self.path)
        scheme, argument = parse_splits_by(splits_by)
        table = read_table(self.path)
        y = _column(table, target, self.path, "target")
        split_column = argument if scheme == "column" else None
        if split_column is not None:
            _column(table, split_column, self.path, "split")
            if split_column == target:
                raise ValueError(f"{self.path}: the split column {split_column!r} is the target column")
        if features is None:
            features = [c for c in table.columns if c not in (target, split_column)]
        else:
            features = list(features)
            absent = [f for f in features if f not in table.columns]
            if absent:
                raise ValueError(f"{self.path} has no feature column(s) {', '.join(map(repr, absent))}; its columns are: {_columns_text(table)}")
            for role, column in (("target", target), ("split", split_column)):
                if column is not None and column in features:
                    raise ValueError(f"{self.path}: the {role} column {column!r} is also listed as a feature")
        if not features:
            raise ValueError(f"{self.path}: no feature columns besides the target {target!r}; its columns are: {_columns_text(table)}")
        advice = "every feature must be a number: encode it (e.g. as one-hot columns) or leave it out by listing the features to use"
        self.x = np.stack([_numeric_column(table[f].reset_index(drop=True), str(f), self.path, "feature", advice) for f in features], axis=1)
        self.feature_names = [str(f) for f in features]
        self.target = target
        n = len(table)
        if scheme in ("column", "files") and n_splits is not None:
            raise ValueError(f"the splits come from {scheme} {argument!r}, whose number is theirs: do not give n_splits")
        if scheme == "seed":
            self.n_splits = DEFAULT_SPLITS["seed"] if n_splits is None else n_splits
            self._rows = random_splits(n, self.n_splits, test_fraction, seed)
            self.splits_description = f"{self.n_splits} random {100 * (1 - test_fraction):g}/{100 * test_fraction:g} splits (seed {seed})"
        elif scheme == "kfold":
            self.n_splits = DEFAULT_SPLITS["kfold"] if n_splits is None else n_splits
            self._rows = kfold_splits(n, self.n_splits, seed)
            self.splits_description = f"{self.n_splits}-fold splits (seed {seed})"
        elif scheme == "column":
            self._rows = column_splits(table[split_column], split_column)
            self.splits_description = f"{len(self._rows)} split(s) given by the column {split_column!r}"
        else:
            self._rows = read_index_splits(argument, n)
            self.splits_description = f"{len(self._rows)} split(s) given by the index files in {argument}"
        self.n_splits = len(self._rows)
        self.splits_by = splits_by
        return y

    def __len__(self) -> int:
        return len(self.x)

    def rows(self, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """``(train, test)``: the 0-based table rows of split ``k``."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < self.n_splits:
            raise ValueError(f"{self.name} has splits 0..{self.n_splits - 1}, not {k!r}")
        return self._rows[int(k)]

    def describe(self) -> str:
        """One line saying where the data come from and how they are split (for a table's notes)."""
        return (
            f"{self.name}: table {self.path}, {len(self)} rows, {self.x.shape[1]} features, target {self.target!r} "
            f"({self.task}), {self.splits_description}"
        )


def _one_value(path: Path, target: str, value, n: int) -> ValueError:
    return ValueError(f"{path}: the target column {target!r} holds one value, {value!r}, in all {n} rows: there is nothing to learn")


class RegressionTable(_Table, UCIDataset):
    """A regression data set from a table: ``split(k)`` is a :class:`~pyrozoo.data.UCISplit`
    standardised exactly as the standard UCI splits are (inputs and target with the training
    part's statistics, :meth:`~pyrozoo.data.UCIDataset.split_rows`).

    :param path: a ``.csv`` (also compressed, e.g. ``.csv.gz``), ``.tsv`` or ``.parquet`` file
        with a header line.
    :param target: the name of the target column (numeric).
    :param features: the feature columns (default: every other column but the split column).
    :param splits_by: ``"seed"`` (``n_splits`` random hold-outs of ``test_fraction``),
        ``"kfold"`` (``n_splits`` folds), ``"column:<name>"`` (the column says ``train`` /
        ``test``, or each row's fold number) or ``"files:<folder>"`` (``index_train_<k>.txt``
        / ``index_test_<k>.txt`` there); see :mod:`pyrozoo.data.splits`.
    :param n_splits: for ``seed`` and ``kfold`` (default 20 and 10).
    :param seed: the seed of the ``seed`` and ``kfold`` splits.
    :param n_hidden, n_epochs: the UCI protocol's network width and training epochs for this
        data set (the protocol's 50 and 40 for all the bundled sets but protein).
    :param name: the data set's name in results (default: the file name without its suffixes).
    """

    def __init__(
        self, path: Union[str, Path], target: str, *, features: Optional[Sequence[str]] = None, splits_by: str = "seed",
        n_splits: Optional[int] = None, seed: int = 0, test_fraction: float = 0.1, n_hidden: int = 50, n_epochs: int = 40,
        name: Optional[str] = None,
    ):
        # UCIDataset.__init__ reads a layout folder; a table is read here, into the same attributes
        y = self._load(path, target, "regression", features, splits_by, n_splits, seed, test_fraction, name)
        self.y = _numeric_column(y, target, self.path, "target", "a regression target is a number; for class labels load the table with task='classification'")
        if np.ptp(self.y) == 0:
            raise _one_value(self.path, target, float(self.y[0]), len(self.y))
        self.folder = self.path.parent
        self.n_hidden, self.n_epochs = int(n_hidden), int(n_epochs)

    def split(self, k: int) -> UCISplit:
        train, test = self.rows(k)
        return self.split_rows(train, test, int(k))


class ClassificationTable(_Table):
    """A classification data set from a table: ``split(k)`` is a
    :class:`~pyrozoo.data.splits.ClassificationSplit` whose inputs are standardised with the
    training part's statistics and whose labels index :attr:`classes` (the distinct values of
    the target column, sorted: numbers or text). Parameters as :class:`RegressionTable`'s."""

    def __init__(
        self, path: Union[str, Path], target: str, *, features: Optional[Sequence[str]] = None, splits_by: str = "seed",
        n_splits: Optional[int] = None, seed: int = 0, test_fraction: float = 0.1, name: Optional[str] = None,
    ):
        labels = self._load(path, target, "classification", features, splits_by, n_splits, seed, test_fraction, name)
        missing = labels.isna().to_numpy()
        if missing.any():
            raise ValueError(f"{self.path}: target column {target!r} has {int(missing.sum())} missing label(s), first in row {_first(missing)}; label those rows or drop them")
        if pd.api.types.is_float_dtype(labels):
            values = labels.to_numpy(dtype=np.float64)
            fractional = ~np.isfinite(values) | (values != np.round(values))
            if fractional.any():
                raise ValueError(
                    f"{self.path}: target column {target!r} holds {labels[_first(fractional)]!r} (row {_first(fractional)}), not a class "
                    "label: labels are integers or text; for a numeric target load the table with task='regression'"
                )
            labels = labels.astype(np.int64)
        elif not pd.api.types.is_numeric_dtype(labels):
            labels = labels.astype(str)  # mixed types sort as text
        classes, y = np.unique(labels.to_numpy(), return_inverse=True)
        if len(classes) < 2:
            raise _one_value(self.path, target, classes.tolist()[0], len(labels))
        self.classes = tuple(classes.tolist())
        self.y = y.reshape(-1).astype(np.int64)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def split(self, k: int) -> ClassificationSplit:
        train, test = self.rows(k)
        mean, std = feature_statistics(self.x[train])
        as_t = lambda a: torch.as_tensor(a, dtype=torch.float32)  # noqa: E731
        return ClassificationSplit(
            self.name, int(k), as_t((self.x[train] - mean) / std), torch.as_tensor(self.y[train]),
            as_t((self.x[test] - mean) / std), torch.as_tensor(self.y[test]), self.classes, as_t(mean), as_t(std),
        )


def load_table(path: Union[str, Path], target: str, *, task: str = "regression", **kwargs) -> Union[RegressionTable, ClassificationTable]:
    """A :class:`RegressionTable` or :class:`ClassificationTable` (``task``) of the table in
    ``path``; ``kwargs`` as theirs."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    return (RegressionTable if task == "regression" else ClassificationTable)(path, target, **kwargs)


def table_columns(path: Union[str, Path]) -> List[str]:
    """The column names of the table in ``path`` (to say which there are)."""
    return [str(c) for c in read_table(path).columns]
