"""Train/test splits of a user's data set: made reproducibly from a seed, or read from what
the user gives, and the split object of a classification data set.

The standard UCI splits (Hernández-Lobato & Adams 2015) are 20 random 90/10 divisions of a
data set's rows, shipped as index files. A data set that has none gets its splits here:

* :func:`random_splits`: ``k`` random hold-outs of a fraction of the rows (90/10 by default),
  split ``i`` drawn from child ``i`` of the seed's stream, so it is the same whatever ``k`` is;
* :func:`kfold_splits`: one seeded permutation of the rows cut into ``k`` folds, each the test
  part of one split, so every row is tested exactly once;
* :func:`column_splits`: a column naming each row's part (``train`` / ``test``) or its fold;
* :func:`read_index_splits`: ``index_train_<k>.txt`` / ``index_test_<k>.txt`` files as in the
  UCI layout.

Each returns a list of ``(train, test)`` pairs of sorted 0-based row numbers. A split whose
training part has fewer than :data:`MIN_TRAIN_ROWS` rows, or whose test part is empty, is an
error that says how many rows the scheme needs.
"""

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import torch

from pyrozoo.data.uci import _check_indices, _read_int, _read_numbers

#: the fewest training rows a split may have: standardisation needs a spread of values
MIN_TRAIN_ROWS = 2

Rows = Tuple[np.ndarray, np.ndarray]


def _check_count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _test_size(n: int, fraction: float) -> int:
    # round half up, as 0.1 * 506 -> 51 test rows in the standard Boston splits
    return int(math.floor(fraction * n + 0.5))


def random_splits(n: int, n_splits: int, test_fraction: float = 0.1, seed: int = 0) -> List[Rows]:
    """``n_splits`` random hold-outs of ``round(test_fraction * n)`` of ``n`` rows; split ``i`` is
    a permutation drawn from child ``i`` of ``seed``'s :class:`numpy.random.SeedSequence` (its
    ``spawn_key``), so it does not change when ``n_splits`` does."""
    n_splits = _check_count("n_splits", n_splits, 1)
    seed = _check_count("seed", seed, 0)
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    n_test = _test_size(n, test_fraction)
    if n_test < 1 or n - n_test < MIN_TRAIN_ROWS:
        needed = next(m for m in itertools.count(1) if _test_size(m, test_fraction) >= 1 and m - _test_size(m, test_fraction) >= MIN_TRAIN_ROWS)
        raise ValueError(
            f"{n} rows are too few for a random {100 * (1 - test_fraction):g}/{100 * test_fraction:g} split: its test part "
            f"would hold {n_test} row(s) and its training part {n - n_test}; it needs at least {needed} rows (one test row, "
            f"{MIN_TRAIN_ROWS} training rows)"
        )
    out = []
    for i in range(n_splits):
        order = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,))).permutation(n)
        out.append((np.sort(order[n_test:]), np.sort(order[:n_test])))
    return out


def kfold_splits(n: int, k: int, seed: int = 0) -> List[Rows]:
    """``k``-fold cross-validation of ``n`` rows: one permutation drawn from ``seed``, cut into
    ``k`` folds whose sizes differ by at most one; split ``i`` tests on fold ``i``."""
    k = _check_count("the number of folds k", k, 2)
    seed = _check_count("seed", seed, 0)
    if n < k or n - math.ceil(n / k) < MIN_TRAIN_ROWS:
        needed = next(m for m in itertools.count(k) if m - math.ceil(m / k) >= MIN_TRAIN_ROWS)
        raise ValueError(f"{n} rows are too few for {k}-fold splits: they need at least {needed} rows (a row in every fold, {MIN_TRAIN_ROWS} training rows in every split)")
    folds = np.array_split(np.random.default_rng(seed).permutation(n), k)
    return [(np.sort(np.concatenate(folds[:i] + folds[i + 1:])), np.sort(fold)) for i, fold in enumerate(folds)]


def column_splits(values: Sequence, column: str = "split") -> List[Rows]:
    """The splits a column of the table gives: ``train`` / ``test`` for each row (one split;
    case and surrounding blanks ignored), or an integer fold number for each row (one split per
    distinct number, in increasing order, testing on that fold's rows)."""
    values = pd.Series(values).reset_index(drop=True)
    missing = values.isna()
    if missing.any():
        raise ValueError(f"split column {column!r}: row {int(np.argmax(missing.to_numpy()))} has no value ({int(missing.sum())} such row(s)); each row needs 'train', 'test' or a fold number")
    if pd.api.types.is_bool_dtype(values) or not (pd.api.types.is_numeric_dtype(values) or pd.api.types.is_object_dtype(values) or pd.api.types.is_string_dtype(values)):
        raise ValueError(f"split column {column!r} holds {values.dtype} values; it needs 'train' / 'test' or integer fold numbers")
    if pd.api.types.is_numeric_dtype(values):
        numbers = values.to_numpy(dtype=float)
        fractional = ~np.isfinite(numbers) | (numbers != np.round(numbers))
        if fractional.any():
            row = int(np.argmax(fractional))
            raise ValueError(f"split column {column!r}: row {row} holds {values[row]!r}, not a fold number (an integer)")
        folds = numbers.astype(np.int64)
        ids = np.unique(folds)
        if len(ids) < 2:
            raise ValueError(f"split column {column!r} puts every row in fold {int(ids[0])}: fold numbers need at least two distinct values, so that each fold can be tested on the others")
        parts = [(np.flatnonzero(folds != i), np.flatnonzero(folds == i)) for i in ids]
        labels = [f"fold {int(i)}" for i in ids]
    else:
        text = values.astype(str).str.strip().str.lower()
        bad = ~text.isin(["train", "test"])
        if bad.any():
            row = int(np.argmax(bad.to_numpy()))
            raise ValueError(f"split column {column!r}: row {row} holds {values[row]!r}; the column takes 'train' or 'test' (or integer fold numbers)")
        parts = [(np.flatnonzero(text == "train"), np.flatnonzero(text == "test"))]
        labels = ["its split"]
    for (train, test), label in zip(parts, labels):
        if len(test) == 0 or len(train) < MIN_TRAIN_ROWS:
            raise ValueError(f"split column {column!r}: {label} has {len(train)} training row(s) and {len(test)} test row(s); each split needs at least {MIN_TRAIN_ROWS} training rows and one test row")
    return parts


def read_index_splits(folder: Union[str, Path], n: int) -> List[Rows]:
    """The splits of ``index_train_<k>.txt`` / ``index_test_<k>.txt`` in ``folder`` (0-based row
    numbers, one per line, as in the UCI layout), for ``k = 0 ..`` as long as both files exist, or
    ``0 .. n_splits - 1`` when ``n_splits.txt`` says how many. Each row number lies in
    ``0 .. n - 1`` and appears once per file, and no row is in both parts of a split; unlike the
    UCI layout, a row may be in neither part."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"split index folder {folder} does not exist")
    if (folder / "n_splits.txt").is_file():
        count = _read_int(folder / "n_splits.txt")
    else:
        count = 0
        while (folder / f"index_train_{count}.txt").is_file() and (folder / f"index_test_{count}.txt").is_file():
            count += 1
        if count == 0:
            raise FileNotFoundError(f"{folder} holds no split index files: expected index_train_0.txt and index_test_0.txt (0-based row numbers, one per line), index_train_1.txt, ...")
    out = []
    for k in range(count):
        paths = folder / f"index_train_{k}.txt", folder / f"index_test_{k}.txt"
        train, test = (_read_numbers(p, int, one_per_line=True) for p in paths)
        for path, rows in zip(paths, (train, test)):
            _check_indices(path, rows, n, "row", f"split {k}: ")
        shared = np.intersect1d(train, test)
        if shared.size:
            raise ValueError(f"{paths[1]}: split {k} lists row {int(shared[0])} in both train and test ({shared.size} such row(s)); they would leak the test set into training")
        if len(train) < MIN_TRAIN_ROWS:
            raise ValueError(f"{paths[0]}: split {k} has {len(train)} training row(s); a split needs at least {MIN_TRAIN_ROWS}")
        out.append((np.sort(train), np.sort(test)))
    return out


def feature_statistics(x_train: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(mean, std)`` of the training inputs' columns, as :meth:`pyrozoo.data.UCIDataset.split_rows`
    standardises them: a constant column (detected exactly, by its range) gets mean = its value
    and std = 1, so it maps to 0 rather than to rounding noise over a rounding-sized spread."""
    mean, std = x_train.mean(0), x_train.std(0)
    constant = np.ptp(x_train, axis=0) == 0
    mean[constant] = x_train[0, constant]
    std[constant] = 1.0
    return mean, std


@dataclass
class ClassificationSplit:
    """One train/test split of a classification data set: inputs (float32 unless moved with
    :meth:`to`; standardised with the training part's statistics for tables, as they are for
    images) and int64 class indices into :attr:`classes`, the original labels in sorted order.

    Its fields and :meth:`to` are those the classification protocol of the recipes uses for
    MNIST (``x_train``, ``y_train``, ``x_test``, ``y_test``), so its methods run on it.
    """

    dataset: str
    split: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple
    x_mean: Optional[torch.Tensor] = None
    x_std: Optional[torch.Tensor] = None

    def to(self, device=None, dtype=torch.float32) -> "ClassificationSplit":
        """Inputs moved to ``device`` and ``dtype``; labels to ``device`` only (they stay int64)."""
        def move(t):
            return None if t is None else t.to(device=device, dtype=dtype)

        return ClassificationSplit(
            self.dataset, self.split, move(self.x_train), self.y_train.to(device), move(self.x_test), self.y_test.to(device),
            self.classes, move(self.x_mean), move(self.x_std),
        )

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def input_shape(self) -> tuple:
        """The shape of one input, e.g. ``(1, 28, 28)`` for an MNIST image or ``(d,)`` for a table row."""
        return tuple(self.x_train.shape[1:])

    @property
    def num_features(self) -> int:
        return int(np.prod(self.input_shape))
