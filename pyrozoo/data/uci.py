"""The UCI regression benchmark with its standard splits (Hernández-Lobato & Adams 2015).

Protocol: for each split, standardise inputs and target with the training split's mean
and standard deviation, train, predict, and report test RMSE and test log-likelihood per
example in the *original* target units (:meth:`UCISplit.to_original_units`).
"""

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

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


def _read_numbers(path: Path, dtype=float, one_per_line: bool = False, line_end: bool = False) -> np.ndarray:
    """The numbers of a whitespace-separated text file, one row per line: a 2-d float64 array,
    or with ``one_per_line`` the 1-d array of a file holding one number per line (``dtype=int``:
    int64, each an integer, written ``307`` or ``307.0``).

    Rows are counted from line 1 and only blank lines after the last row are allowed, so row
    ``i`` is line ``i + 1`` (which is how the index files' row numbers are checked against the
    rows). With ``line_end``, the last row must end with a line end: the standard files do, and a
    copy cut short mid-line does not (while its last number, cut short, may still parse).

    Raises ``ValueError`` naming the file and the line (1-based) for an empty file, a blank line
    before the last row, a row with a different number of fields from the others, a token that
    is not a number (or not an integer), and a NaN or infinite value.
    """
    if not path.is_file():
        raise FileNotFoundError(f"UCI file {path} is missing")
    raw = path.read_bytes()
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}:{line}: byte 0x{raw[e.start]:02x} is not ASCII text; the file should hold numbers "
            "only (a binary or corrupted copy?)"
        ) from None
    lines = text.split("\n")
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    if end == 0:
        raise ValueError(f"{path}:1: the file is empty (it holds no numbers); restore it from the original data set")
    if line_end and end == len(lines):
        raise ValueError(
            f"{path}:{end}: the last line has no line end, as in a copy cut short mid-line (its last number "
            "may be cut short too); restore the file, or end it with a newline if it is complete"
        )
    lines = lines[:end]
    widths = list(map(len, map(str.split, lines)))
    if 0 in widths:
        line = widths.index(0) + 1
        raise ValueError(
            f"{path}:{line}: blank line before the last row; rows are counted by line, so a blank line "
            "stands for a lost row (delete the line if no row is lost)"
        )
    distinct = set(widths)
    # the width most rows have is the right one: the odd row out may be the first
    width = 1 if one_per_line else widths[0] if len(distinct) == 1 else Counter(widths).most_common(1)[0][0]
    if distinct != {width}:
        line = next(i for i, w in enumerate(widths) if w != width) + 1
        expected = "one number per line" if one_per_line else f"{width} like the other rows (a row cut short, or two run together?)"
        raise ValueError(f"{path}:{line}: {widths[line - 1]} numbers on the line, expected {expected}")
    values = _parse_all(path, text, lines, width, dtype)
    if dtype is float:
        finite = np.isfinite(values)
        if not finite.all():
            row = int(np.argmin(finite.all(axis=1)))
            col = int(np.argmin(finite[row]))
            raise ValueError(
                f"{path}:{row + 1}: column {col + 1} is {lines[row].split()[col]!r}, not a finite number "
                f"(a missing or corrupted value); {int((~finite).sum())} such value(s) in the file"
            )
    return values.ravel() if one_per_line else values


def _parse_all(path: Path, text: str, lines: List[str], width: int, dtype) -> np.ndarray:
    """The numbers of ``text`` (whose rows are ``lines``, each of ``width`` fields), shaped
    ``(rows, width)``: a fast pass over all tokens at once, and where it fails, a pass line by
    line that names the first bad token."""
    np_dtype = np.float64 if dtype is float else np.int64
    shape = (len(lines), width)
    # float() and int() read 1_000 as 1000: no UCI file writes digits so, a corrupted one might
    if "_" not in text:
        tokens = text.split()
        try:
            return np.fromiter(map(dtype, tokens), np_dtype, len(tokens)).reshape(shape)
        except (ValueError, OverflowError):
            pass  # a bad token, or an integer written 307.0: look line by line
    out = []
    for lineno, line in enumerate(lines, 1):
        for col, token in enumerate(line.split(), 1):
            try:
                out.append(_parse_token(token, dtype))
            except ValueError as e:
                raise ValueError(f"{path}:{lineno}: column {col}: {e} (a number cut short, or a corrupted file?)") from None
    return np.array(out, dtype=np_dtype).reshape(shape)


def _parse_token(text: str, dtype) -> Union[float, int]:
    if "_" in text:
        raise ValueError(f"{text!r} is not a number")
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if dtype is float:
        return value
    if not value.is_integer():
        raise ValueError(f"{text!r} is not an integer")
    if abs(value) >= 2**62:
        raise ValueError(f"{text!r} is too large to be a row or column index")
    return int(value)


def _read_int(path: Path) -> int:
    """The single positive integer of a file such as ``n_splits.txt``."""
    values = _read_numbers(path, int, one_per_line=True)
    if values.size != 1:
        raise ValueError(f"{path}:2: holds {values.size} lines of numbers; it should hold a single integer")
    if values[0] < 1:
        raise ValueError(f"{path}:1: {int(values[0])} should be a positive integer")
    return int(values[0])


def _first_repeat(index: np.ndarray) -> Optional[Tuple[int, int]]:
    """The 0-based positions ``(earlier, later)`` of the first repeated value of ``index``, by the
    later position (the line where a reader of the file meets the repeat); ``None`` if none."""
    order = np.argsort(index, kind="stable")
    repeats = np.flatnonzero(index[order][1:] == index[order][:-1])
    if not repeats.size:
        return None
    # the stable sort keeps equal values in file order, so order[r] is the occurrence just before order[r + 1]
    first = int(np.argmin(order[repeats + 1]))
    return int(order[repeats[first]]), int(order[repeats[first] + 1])


def _check_indices(path: Path, index: np.ndarray, size: int, what: str, context: str = "") -> None:
    """Every entry of the one-per-line ``index`` (read from ``path``) in ``0..size - 1`` and
    listed once; ``what`` names the kind of entry (``"row"``, ``"column"``) in the messages."""
    outside = np.flatnonzero((index < 0) | (index >= size))
    if outside.size:
        line = int(outside[0]) + 1
        raise ValueError(
            f"{path}:{line}: {context}{what} {int(index[outside[0]])} is outside data.txt's {what}s 0..{size - 1} "
            f"({outside.size} such line(s); a data.txt cut short, or an index file from another data set?)"
        )
    repeat = _first_repeat(index)
    if repeat is not None:
        earlier, later = repeat
        raise ValueError(
            f"{path}:{later + 1}: {context}{what} {int(index[later])} is listed more than once (first on line "
            f"{earlier + 1}); each {what} must appear once"
        )


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


#: the files of a data set folder in the standard layout, besides the split files
#: ``index_train_<k>.txt`` / ``index_test_<k>.txt`` for ``k = 0 .. n_splits - 1``
LAYOUT_FILES = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "n_hidden.txt", "n_epochs.txt")

LAYOUT = (
    "data.txt (one row of whitespace-separated numbers per line), index_features.txt (the feature columns, 0-based, one "
    "per line), index_target.txt (the target column), n_splits.txt, n_hidden.txt, n_epochs.txt (one positive integer "
    "each), and for each split k = 0 .. n_splits - 1 index_train_<k>.txt and index_test_<k>.txt (its rows of data.txt, "
    "0-based, one per line)"
)


def _is_path(name: Union[str, Path]) -> bool:
    """A data set given by its folder's path rather than by a name under the data root."""
    text = str(name)
    return isinstance(name, Path) or "/" in text or (os.sep in text) or text.startswith(("~", "."))


def dataset_folder(name: Union[str, Path], data_dir: Optional[Union[str, Path]] = None) -> Path:
    """The folder of data set ``name``: ``name`` itself when it is a path (a :class:`~pathlib.Path`,
    or text with a path separator or starting with ``.`` or ``~``), else the folder ``<root>/<name>``
    or ``<root>/uci/<name>`` under the data root (:func:`~pyrozoo.data.paths.resolve_data_dir` of
    ``data_dir``). Any folder in the standard layout (:data:`LAYOUT_FILES`) is a data set, not
    only the bundled :data:`UCI_DATASETS`.

    :raises ValueError: for a name that is neither a folder under the root nor a bundled set.
    :raises FileNotFoundError: for a path, or a bundled set's folder, that does not exist.
    """
    if _is_path(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"data set folder {folder} does not exist")
        return folder
    root = resolve_data_dir(data_dir)
    for folder in (root / name, root / "uci" / name):
        if folder.is_dir():
            return folder
    if name in UCI_DATASETS:
        raise FileNotFoundError(f"UCI data set folder {root / 'uci' / name} does not exist")
    raise ValueError(
        f"unknown UCI data set {name!r}: there is no folder {root / name} (nor {root / 'uci' / name}); a data set is a "
        f"bundled one ({', '.join(UCI_DATASETS)}) or any folder in the standard layout, given by its path (e.g. ./{name}) "
        "or by its name under the data directory"
    )


def _check_layout(folder: Path) -> None:
    """Every file of the standard layout present in ``folder`` (split 0's included; the other
    splits' files are checked when a split is read), else one error listing all that are missing."""
    wanted = [*LAYOUT_FILES, "index_train_0.txt", "index_test_0.txt"]
    missing = [folder / f for f in wanted if not (folder / f).is_file()]
    if missing:
        what = "holds none of the files of" if len(missing) == len(wanted) else "is not a complete data set in"
        raise FileNotFoundError(
            f"{folder} {what} the standard UCI layout: missing {', '.join(map(str, missing))}. The layout: {LAYOUT}. "
            "A single table (CSV or Parquet) is read by pyrozoo.data.load_table instead"
        )


class UCIDataset:
    """A regression data set in the standard UCI layout (Hernández-Lobato & Adams 2015):
    a folder holding ``data.txt``, ``index_features.txt``, ``index_target.txt``,
    ``index_train_<k>.txt`` / ``index_test_<k>.txt``, ``n_splits.txt``, ... (:data:`LAYOUT`).
    The bundled sets (:data:`UCI_DATASETS`) and a user's own folders are read and checked alike.

    :param name: a folder name under the data root (``<root>/<name>`` or ``<root>/uci/<name>``),
        or the path of the folder itself (:func:`dataset_folder`); :attr:`name` is it as given.
    :param data_dir: the data root (containing ``uci/``) or the ``uci`` folder itself;
        default ``$PYROZOO_DATA_DIR`` (:func:`pyrozoo.data.paths.resolve_data_dir`). Not used
        for a path.
    """

    def __init__(self, name: Union[str, Path], data_dir: Optional[Union[str, Path]] = None):
        folder = dataset_folder(name, data_dir)
        _check_layout(folder)
        # the name as given, so that a path names its data set the same way in every results file
        self.name = str(name)
        self.folder = folder
        data = _read_numbers(folder / "data.txt", line_end=True)
        ncol = data.shape[1]
        features_path, target_path = folder / "index_features.txt", folder / "index_target.txt"
        features = _read_numbers(features_path, int, one_per_line=True)
        target = _read_numbers(target_path, int, one_per_line=True)
        if target.size != 1:
            raise ValueError(f"{target_path}:2: holds {target.size} lines; it must hold exactly one column index")
        _check_indices(features_path, features, ncol, "column")
        _check_indices(target_path, target, ncol, "column")
        if int(target[0]) in features:
            line = int(np.flatnonzero(features == target[0])[0]) + 1
            raise ValueError(f"{features_path}:{line}: the target column {int(target[0])} ({target_path}) is also listed as a feature")
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
        train_path, test_path = self.folder / f"index_train_{k}.txt", self.folder / f"index_test_{k}.txt"
        train = _read_numbers(train_path, int, one_per_line=True, line_end=True)
        test = _read_numbers(test_path, int, one_per_line=True, line_end=True)
        n = len(self.y)
        # a repeated row would weigh twice; a row in both parts would leak test data into training;
        # a row in neither means an index file cut short (every bundled split covers all rows)
        _check_indices(train_path, train, n, "row", f"split {k}: ")
        _check_indices(test_path, test, n, "row", f"split {k}: ")
        in_train = np.zeros(n, dtype=bool)
        in_train[train] = True
        shared = np.flatnonzero(in_train[test])
        if shared.size:
            row = int(test[shared[0]])
            train_line = int(np.flatnonzero(train == row)[0]) + 1
            raise ValueError(
                f"{test_path}:{shared[0] + 1}: split {k} lists row {row} in both train and test (also "
                f"{train_path}:{train_line}); {shared.size} such row(s) would leak the test set into training"
            )
        if len(train) + len(test) != n:
            covered = in_train
            covered[test] = True
            missing = np.flatnonzero(~covered)
            raise ValueError(
                f"{train_path}:{len(train)}: split {k}'s train indices end here and its test indices at "
                f"{test_path}:{len(test)}, leaving {missing.size} of data.txt's {n} rows in neither part, first "
                f"row {int(missing[0])}; each row belongs to exactly one part (an index file cut short?)"
            )
        return self.split_rows(train, test, k)

    def split_rows(self, train: np.ndarray, test: np.ndarray, index: int) -> UCISplit:
        """The split with training rows ``train`` and test rows ``test`` (row numbers of
        ``data.txt``), standardised with the training rows' statistics and numbered ``index``
        (:meth:`split` reads the standard splits' rows; :func:`pyrozoo.data.gap.gap_split`
        chooses its own)."""
        k = index
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
