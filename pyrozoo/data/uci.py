"""The UCI regression benchmark with its standard splits (Hernández-Lobato & Adams 2015).

Protocol: for each split, standardise inputs and target with the training split's mean
and standard deviation, train, predict, and report test RMSE and test log-likelihood per
example in the *original* target units (:meth:`UCISplit.to_original_units`).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Union

import numpy as np
import torch

from pyrozoo.data.paths import resolve_data_dir
from pyrozoo.utils import parse_int_ranges

UCI_DATASETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)


def _read_numbers(path: Path, dtype=float) -> np.ndarray:
    if not path.is_file():
        raise FileNotFoundError(f"UCI file {path} is missing")
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                rows.append([float(v) if dtype is float else _parse_int(v) for v in fields])
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: malformed number ({e})") from None
    if not rows:
        raise ValueError(f"{path} holds no numbers")
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        raise ValueError(f"{path}: rows have different numbers of fields {sorted(widths)}")
    return np.asarray(rows, dtype=np.float64 if dtype is float else np.int64)


def _parse_int(text: str) -> int:
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"{text!r} is not an integer")
    return int(value)


def _read_int(path: Path) -> int:
    values = _read_numbers(path, int).ravel()
    if values.size != 1:
        raise ValueError(f"{path} should hold a single integer")
    return int(values[0])


@dataclass
class UCISplit:
    """One train/test split, standardised with the training statistics.

    Tensors are float64 on the CPU; move them with :meth:`to`.
    """

    dataset: str
    split: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_mean: torch.Tensor
    x_std: torch.Tensor
    y_mean: float
    y_std: float
    n_hidden: int
    n_epochs: int

    def to(self, device=None, dtype=None) -> "UCISplit":
        def move(t):
            return t.to(device=device, dtype=dtype)

        return UCISplit(
            self.dataset, self.split, move(self.x_train), move(self.y_train), move(self.x_test), move(self.y_test),
            move(self.x_mean), move(self.x_std), self.y_mean, self.y_std, self.n_hidden, self.n_epochs,
        )

    def validation(self, fraction: float = 0.2, seed: int = 0) -> "UCISplit":
        """This split's training data, divided into a training part and a held-out
        ``fraction`` that takes the place of the test set, for choosing hyperparameters
        without looking at the test set. The standardisation stays this split's (the
        training statistics), so metrics remain in the original units."""
        if not 0 < fraction < 1:
            raise ValueError(f"fraction must lie in (0, 1), got {fraction!r}")
        n = len(self.y_train)
        held_out = int(round(fraction * n))
        if not 0 < held_out < n:
            raise ValueError(f"a fraction {fraction} of {n} training rows leaves an empty part")
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).to(self.y_train.device)
        val, train = order[:held_out], order[held_out:]
        return UCISplit(
            self.dataset, self.split, self.x_train[train], self.y_train[train], self.x_train[val], self.y_train[val],
            self.x_mean, self.x_std, self.y_mean, self.y_std, self.n_hidden, self.n_epochs,
        )

    def to_original_units(self, y_standardised: torch.Tensor) -> torch.Tensor:
        return y_standardised * self.y_std + self.y_mean

    @property
    def log_y_std(self) -> float:
        """Subtract from a standardised-unit log density to get the original-unit one."""
        return float(np.log(self.y_std))

    @property
    def num_features(self) -> int:
        return self.x_train.shape[1]


class UCIDataset:
    """A UCI regression data set in the layout of ``shared/data/uci/<name>/``.

    :param str name: folder name, one of :data:`UCI_DATASETS`.
    :param data_dir: the data root (containing ``uci/``) or the ``uci`` folder itself;
        default :func:`pyrozoo.data.paths.default_data_dir`.
    """

    def __init__(self, name: str, data_dir: Optional[Union[str, Path]] = None):
        if name not in UCI_DATASETS:
            raise ValueError(f"unknown UCI data set {name!r}; choose from {', '.join(UCI_DATASETS)}")
        root = resolve_data_dir(data_dir)
        folder = root / name if (root / name).is_dir() else root / "uci" / name
        if not folder.is_dir():
            raise FileNotFoundError(f"UCI data set folder {folder} does not exist")
        self.name = name
        self.folder = folder
        data = _read_numbers(folder / "data.txt")
        if not np.isfinite(data).all():
            bad = np.argwhere(~np.isfinite(data))[0]
            raise ValueError(f"{folder / 'data.txt'}: non-finite value at row {bad[0] + 1}, column {bad[1] + 1}")
        features = _read_numbers(folder / "index_features.txt", int).ravel()
        target = _read_numbers(folder / "index_target.txt", int).ravel()
        ncol = data.shape[1]
        if target.size != 1:
            raise ValueError(f"{folder / 'index_target.txt'} must hold exactly one column index")
        if features.size == 0 or features.min() < 0 or features.max() >= ncol or not 0 <= target[0] < ncol:
            raise ValueError(f"{folder}: feature/target indices do not fit data.txt's columns 0..{ncol - 1}")
        if int(target[0]) in set(features.tolist()):
            raise ValueError(f"{folder}: the target column {int(target[0])} is also listed as a feature")
        self.x = data[:, features]
        self.y = data[:, int(target[0])]
        self.n_splits = _read_int(folder / "n_splits.txt")
        self.n_hidden = _read_int(folder / "n_hidden.txt")
        self.n_epochs = _read_int(folder / "n_epochs.txt")

    def __len__(self) -> int:
        return len(self.y)

    def split(self, k: int) -> UCISplit:
        if not 0 <= k < self.n_splits:
            raise ValueError(f"{self.name} has splits 0..{self.n_splits - 1}, not {k}")
        train = _read_numbers(self.folder / f"index_train_{k}.txt", int).ravel()
        test = _read_numbers(self.folder / f"index_test_{k}.txt", int).ravel()
        n = len(self.y)
        if train.max() >= n or test.max() >= n or train.min() < 0 or test.min() < 0:
            raise ValueError(f"{self.folder}: split {k} indexes rows outside 0..{n - 1}")
        # a row in both parts would leak test data into training; a repeated row would weigh twice
        for part, index in (("train", train), ("test", test)):
            if len(np.unique(index)) != len(index):
                raise ValueError(f"{self.folder}: split {k} lists a row more than once in its {part} indices")
        shared = np.intersect1d(train, test)
        if len(shared):
            raise ValueError(f"{self.folder}: split {k} has {len(shared)} row(s) in both train and test, e.g. row {shared[0]}")
        x_train, y_train = self.x[train], self.y[train]
        x_test, y_test = self.x[test], self.y[test]
        x_mean, x_std = x_train.mean(0), x_train.std(0)
        # Constant features (e.g. in Naval) map to 0, not to rounding noise divided by a
        # rounding-sized std: detect them exactly, by their range.
        constant = np.ptp(x_train, axis=0) == 0
        x_mean[constant] = x_train[0, constant]
        x_std[constant] = 1.0
        y_mean, y_std = float(y_train.mean()), float(y_train.std())
        if y_std == 0:
            raise ValueError(f"{self.name} split {k}: the training targets are constant")
        as_t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
        return UCISplit(
            self.name, k,
            as_t((x_train - x_mean) / x_std), as_t((y_train - y_mean) / y_std),
            as_t((x_test - x_mean) / x_std), as_t((y_test - y_mean) / y_std),
            as_t(x_mean), as_t(x_std), y_mean, y_std, self.n_hidden, self.n_epochs,
        )


def parse_splits(spec: str, n_splits: int) -> List[int]:
    """``"0-19"``, ``"0,3,5"``, ``"all"`` -> split indices (checked against ``n_splits``)."""
    if spec == "all":
        return list(range(n_splits))
    out = parse_int_ranges(spec)
    bad = [k for k in out if not 0 <= k < n_splits]
    if bad:
        raise ValueError(f"splits {bad} out of range 0..{n_splits - 1}")
    return out
