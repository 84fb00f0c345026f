"""Command-line options shared by the example scripts, and their defaults: the repository's
layout (``docs/results`` for tables and plots, the nearest ``shared/data`` for data), which
the library itself does not know."""

import argparse
import hashlib
import math
import os
import sys
from pathlib import Path
from typing import Optional

import torch

from pyrozoo.utils import parse_int_ranges
from zoo_protocols.paths import default_data_dir
from zoo_protocols.provenance import recording_outputs

#: where the examples write tables and plots unless ``--results-dir`` says otherwise
#: (relative: the repository's ``docs/results`` when run from its root, as ``make demo`` does)
DEFAULT_RESULTS_DIR = Path("docs") / "results"


def data_dir_default() -> Optional[Path]:
    """``--data-dir``'s default: :func:`zoo_protocols.paths.default_data_dir` (``$PYROZOO_DATA_DIR``,
    else the nearest ``shared/data``), or ``None`` when there is none; a script that then
    reads data fails with the library's message (pass a data directory or set the variable)."""
    try:
        return default_data_dir()
    except FileNotFoundError:
        return None


def add_common_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--device --seed --data-dir --results-dir --quick --no-progress``."""
    parser.add_argument("--device", type=device_spec, default="auto", help="cpu, cuda, cuda:N or auto (CUDA when available)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="random seed")
    parser.add_argument("--data-dir", type=existing_directory, default=data_dir_default(), help="data root (default: $PYROZOO_DATA_DIR, else the nearest shared/data beside the working directory or this checkout)")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR, help=f"where tables and plots are written (default: {DEFAULT_RESULTS_DIR})")
    parser.add_argument("--quick", action="store_true", help="a small smoke configuration (used by the test suite)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


class OptionError(argparse.ArgumentTypeError, ValueError):
    """A bad option value. Raised by an argparse ``type`` it reads ``argument --x: <message>``
    (exit status 2, before any work); raised anywhere else it is a ``ValueError``, which
    :func:`run_main` turns into one line."""


def int_ranges(spec: str) -> list:
    """argparse type: ``"0-4"`` or ``"0,2,7"`` -> list of ints >= 0; an empty selection or a
    range that runs backwards (``"5-2"``) is an error (:func:`pyrozoo.utils.parse_int_ranges`)."""
    try:
        return parse_int_ranges(spec)
    except ValueError as e:
        raise OptionError(str(e)) from None


def parse_seeds(spec: str):
    """``"0-4"`` or ``"0,2,7"`` -> list of ints (an argparse type; see :func:`int_ranges`)."""
    return int_ranges(spec)


def split_spec(spec: str) -> str:
    """argparse type: ``"all"`` or split indices such as ``"0-19"`` / ``"0,3,5"``, checked for
    syntax, order and emptiness here; returned as given (a data set checks its own range)."""
    if spec.strip() != "all":
        int_ranges(spec)
    return spec.strip()


def device_spec(value: str) -> str:
    """argparse type: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, available on this machine."""
    from pyrozoo.utils import resolve_device

    if value != "auto":
        try:
            torch.device(value)
        except (RuntimeError, ValueError, TypeError):
            raise OptionError(f"{value!r} is not a device (cpu, cuda, cuda:N or auto)") from None
    try:
        resolve_device(value)
    except RuntimeError as e:  # e.g. cuda without a GPU
        raise OptionError(str(e)) from None
    return value


def device_from_args(args) -> torch.device:
    from pyrozoo.utils import resolve_device

    try:
        return resolve_device(args.device)
    except RuntimeError as e:  # e.g. --device cuda without a GPU: the user's choice, not a bug
        raise ValueError(f"--device {args.device}: {e}") from e


def existing_directory(value: str) -> Path:
    """argparse type: a folder that exists."""
    path = Path(value)
    if not path.is_dir():
        raise OptionError(f"{value!r} is not an existing directory")
    return path


def existing_file(value: str) -> Path:
    """argparse type: a file that exists."""
    path = Path(value)
    if not path.is_file():
        raise OptionError(f"{value!r} is not an existing file")
    return path


def _number(text: str, convert, noun: str):
    try:
        return convert(text)
    except ValueError:
        raise OptionError(f"{text!r} is not {noun}") from None


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1 (epochs, batch sizes, sample counts, widths)."""
    number = _number(value, int, "an integer")
    if number < 1:
        raise OptionError(f"must be >= 1, got {number}")
    return number


def non_negative_int(value: str) -> int:
    """argparse type: an integer >= 0 (seeds, split indices, counts where 0 switches a feature off)."""
    number = _number(value, int, "an integer")
    if number < 0:
        raise OptionError(f"must be >= 0, got {number}")
    return number


def _finite(value: str) -> float:
    number = _number(value, float, "a number")
    if not math.isfinite(number):
        raise OptionError(f"must be a finite number, got {value}")
    return number


def finite_float(value: str) -> float:
    """argparse type: any finite number (not nan or inf)."""
    return _finite(value)


def positive_float(value: str) -> float:
    """argparse type: a finite number > 0 (learning rates, scales)."""
    number = _number(value, float, "a number")
    if not (number > 0 and number != float("inf")):
        raise OptionError(f"must be a finite number > 0, got {value}")
    return number


def bounded_float(low: float, high: float, *, low_inclusive: bool = True, high_inclusive: bool = False):
    """An argparse type for finite numbers in an interval, e.g. ``bounded_float(-1, 1,
    low_inclusive=False)`` for a correlation in (-1, 1)."""
    interval = f"{'[' if low_inclusive else '('}{low:g}, {high:g}{']' if high_inclusive else ')'}"

    def check(value: str) -> float:
        number = _finite(value)
        above = number >= low if low_inclusive else number > low
        below = number <= high if high_inclusive else number < high
        if not (above and below):
            raise OptionError(f"must be in {interval}, got {value}")
        return number

    check.__name__ = f"number in {interval}"
    return check


#: argparse type: a fraction in [0, 1) (burn-in fractions, dropout rates)
fraction = bounded_float(0.0, 1.0)
fraction.__name__ = "fraction"
#: argparse type: a probability in [0, 1] (mixture weights)
probability = bounded_float(0.0, 1.0, high_inclusive=True)
probability.__name__ = "probability"


def float_list(value: str) -> list:
    """argparse type: comma-separated finite numbers, e.g. ``"0,0.05,0.1"``."""
    numbers = [_number(v, float, "a number") for v in value.split(",") if v.strip()]
    if not numbers or not all(math.isfinite(n) for n in numbers):
        raise OptionError(f"{value!r}: need at least one finite number")
    return numbers


def non_negative_float_list(value: str) -> list:
    """argparse type: comma-separated finite numbers >= 0 (attack strengths, thresholds)."""
    numbers = float_list(value)
    if min(numbers) < 0:
        raise OptionError(f"{value!r}: every number must be >= 0")
    return numbers


def positive_float_list(value: str) -> list:
    """argparse type: comma-separated finite numbers > 0 (scales, learning rates)."""
    numbers = float_list(value)
    if min(numbers) <= 0:
        raise OptionError(f"{value!r}: every number must be > 0")
    return numbers


def positive_int_list(value: str) -> list:
    """argparse type: comma-separated integers >= 1 (layer widths, epochs, sample counts)."""
    parts = [v for v in value.split(",") if v.strip()]
    if not parts:
        raise OptionError(f"{value!r}: need at least one integer")
    numbers = [_number(v.strip(), int, "an integer") for v in parts]
    if min(numbers) < 1:
        raise OptionError(f"{value!r}: every number must be >= 1")
    return numbers


def name_list(value: str) -> list:
    """argparse type: comma-separated names (methods, data sets), at least one."""
    names = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not names:
        raise OptionError(f"{value!r}: need at least one name")
    return names


def subset_of(choices, what: str):
    """argparse type: a :func:`name_list` of ``choices`` only; another name is an error naming
    ``what`` and the choices (exit status 2, before any work)."""
    choices = list(choices)

    def parse(value: str) -> list:
        names = name_list(value)
        bad = [n for n in names if n not in choices]
        if bad:
            raise OptionError(f"unknown {what} {bad}; choose from {', '.join(choices)}")
        return names

    parse.__name__ = f"subset of the {what}"  # argparse names a type in its errors
    return parse


def add_subset_argument(parser: argparse.ArgumentParser, flag: str, choices, default=None) -> None:
    """A ``--flag a,b`` option taking a comma-separated subset of ``choices`` (by default all
    of them, in their order), as :func:`subset_of` checks it."""
    what = flag.lstrip("-").replace("-", " ")
    default = list(choices) if default is None else list(default)
    parser.add_argument(flag, type=subset_of(choices, what), default=",".join(default), help="comma-separated subset of " + ", ".join(choices))


def select_methods(parser: argparse.ArgumentParser, requested: list, methods) -> list:
    """The methods a ``--method`` :func:`name_list` names, ``all`` standing for every one of
    ``methods`` (in their order); a name not in ``methods`` is a usage error (exit status 2)."""
    chosen = list(methods) if requested == ["all"] else requested
    bad = [m for m in chosen if m not in methods]
    if bad:
        parser.error(f"unknown method(s) {bad}; choose from {', '.join(methods)}")
    return chosen


def settings_digest(settings) -> str:
    """Eight hex digits naming a run's settings (``repr`` of a list of pairs or values), for
    checkpoint and result file names that must change whenever the settings do."""
    return hashlib.sha1(repr(settings).encode()).hexdigest()[:8]


#: errors a user's input can cause (bad values, missing files, an unavailable device)
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError)


def run_main(main) -> None:
    """Runs an example's ``main()`` as a command: a :data:`USER_ERRORS` exception ends it with
    a one-line message and exit status 1 instead of a traceback (``PYROZOO_TRACEBACK=1``
    shows the traceback); an int returned is the exit status. The results files it wrote
    under this checkout's ``docs/results`` get their rows in ``docs/results/MANIFEST.csv``
    (:func:`zoo_protocols.provenance.recording_outputs`)."""
    try:
        with recording_outputs():
            code = main()
    except USER_ERRORS as e:
        if os.environ.get("PYROZOO_TRACEBACK"):
            raise
        sys.exit(f"{Path(sys.argv[0]).name}: error: {e} (PYROZOO_TRACEBACK=1 shows where)")
    sys.exit(code if isinstance(code, int) else 0)


# -- a user's own data ------------------------------------------------------------------------

#: the suffixes ``--data`` reads: tables (pyrozoo.data.tables) and image arrays (pyrozoo.data.images)
DATA_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".csv.zip", ".tsv", ".parquet", ".pq", ".npz")


def data_file(value: str) -> Path:
    """argparse type: an existing table (``.csv``, ``.csv.gz``, ``.tsv``, ``.parquet``) or
    ``.npz`` of image arrays."""
    path = existing_file(value)
    if not path.name.lower().endswith(DATA_SUFFIXES):
        raise OptionError(f"{value!r} is neither a table ({', '.join(s for s in DATA_SUFFIXES if s != '.npz')}) nor image arrays (.npz)")
    return path


def column_name(value: str) -> str:
    """argparse type: the name of a table's column (not blank)."""
    if not value.strip():
        raise OptionError("a column name must not be blank")
    return value


def splits_by_spec(value: str) -> str:
    """argparse type: how a table's rows are split: ``seed`` (random 90/10 splits), ``kfold``,
    ``column:<name>`` (a column of ``train`` / ``test`` or fold numbers) or ``files:<folder>``
    (``index_train_<k>.txt`` / ``index_test_<k>.txt`` there)."""
    from pyrozoo.data.tables import parse_splits_by

    try:
        scheme, argument = parse_splits_by(value)
    except ValueError as e:
        raise OptionError(str(e)) from None
    if scheme == "files" and not Path(argument).is_dir():
        raise OptionError(f"split index folder {argument!r} is not an existing directory")
    return value.strip()


def add_user_data_arguments(parser: argparse.ArgumentParser, tasks=("regression", "classification")) -> argparse.ArgumentParser:
    """``--data --target --task --features --splits-by --n-splits``: a user's table (or, where
    ``classification`` is among ``tasks``, an ``.npz`` of images) instead of a bundled data set;
    read by :func:`user_data`."""
    group = parser.add_argument_group("your own data", "a table (CSV or Parquet) with a named target column, or an .npz of images (x, y, optionally x_test, y_test)")
    group.add_argument("--data", type=data_file, default=None, help="a .csv / .tsv / .parquet table" + (" or an .npz of images" if "classification" in tasks else ""))
    group.add_argument("--target", type=column_name, default=None, help="the table's target column (required with a table)")
    group.add_argument("--task", choices=tasks, default=None, help=f"what the target is (default: {tasks[0]}; .npz images: classification)")
    group.add_argument("--features", type=name_list, default=None, help="the feature columns, comma-separated (default: every other column)")
    group.add_argument("--splits-by", type=splits_by_spec, default="seed", help="seed (random 90/10 splits by --seed), kfold, column:<name> (train/test or fold numbers) or files:<folder> (index_train_<k>.txt / index_test_<k>.txt)")
    group.add_argument("--n-splits", type=positive_int, default=None, help="splits made by seed (default 20) or folds (default 10)")
    return parser


def user_data(args, tasks=("regression", "classification"), bundled=()):
    """The data set :func:`add_user_data_arguments`'s options name, or ``None`` without
    ``--data``: a :class:`~pyrozoo.data.RegressionTable` or :class:`~pyrozoo.data.ClassificationTable`
    (a table), or the :class:`~pyrozoo.data.ClassificationSplit` of an ``.npz`` of images (the
    ``--seed``-drawn 90/10 hold-out when it has no test arrays). ``ValueError`` (one line from
    :func:`run_main`) for options that do not fit together, data that cannot work, or data
    named like one of the ``bundled`` data sets (its results and published numbers would mix
    with theirs)."""
    data = _user_data(args, tasks)
    if data is not None:
        _not_bundled(args, getattr(data, "name", None) or data.dataset, bundled)
    return data


def _not_bundled(args, name: str, bundled) -> None:
    if name in bundled:
        raise ValueError(f"--data {args.data}: {name!r} is the name of a bundled data set, whose results would mix with these; rename the file")


def _user_data(args, tasks):
    from pyrozoo.data import load_image_arrays, load_table
    from pyrozoo.data.tables import table_columns

    table_options = {"--target": args.target, "--task": args.task, "--features": args.features, "--n-splits": args.n_splits}
    if args.data is None:
        given = [o for o, v in table_options.items() if v is not None] + (["--splits-by"] if args.splits_by != "seed" else [])
        if given:
            raise ValueError(f"{', '.join(given)} describe(s) the table of --data, which is not given")
        return None
    try:
        if args.data.name.lower().endswith(".npz"):
            if "classification" not in tasks:
                raise ValueError(f"--data {args.data}: image arrays (.npz) are a classification data set; this script takes a {' or '.join(tasks)} table")
            misplaced = [o for o, v in table_options.items() if v is not None and o != "--task"] + (["--splits-by"] if args.splits_by != "seed" else [])
            if misplaced or args.task not in (None, "classification"):
                raise ValueError(f"--data {args.data}: image arrays take no {', '.join(misplaced) or '--task ' + str(args.task)} (their labels are y, their test set x_test / y_test or a --seed-drawn 10%)")
            return load_image_arrays(args.data, seed=args.seed)
        if args.target is None:
            raise ValueError(f"--data {args.data} needs --target, the column to predict; its columns are: {', '.join(table_columns(args.data))}")
        task = args.task or tasks[0]
        return load_table(args.data, args.target, task=task, features=args.features, splits_by=args.splits_by, n_splits=args.n_splits, seed=args.seed)
    except ImportError as e:  # a Parquet table without pyarrow: the user's to install
        raise ValueError(str(e)) from None


def add_image_data_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--data``: an ``.npz`` of images (``x``, ``y``, optionally ``x_test``, ``y_test``) instead
    of the bundled MNIST, for the MNIST-style examples; read by :func:`image_data`."""
    group = parser.add_argument_group("your own data", "an .npz of images: x, y, optionally x_test and y_test (pyrozoo.data.load_image_arrays)")
    group.add_argument("--data", type=data_file, default=None, help="an .npz of images to use instead of MNIST (uint8 pixels are scaled to [0, 1]; without x_test / y_test a --seed-drawn 10%% is held out)")
    return parser


def image_data(args, bundled=(), pixels_in_unit_interval: Optional[str] = None):
    """The :class:`~pyrozoo.data.ClassificationSplit` of ``--data``'s image arrays (the
    ``--seed``-drawn 90/10 hold-out when they have no test arrays), or ``None`` without
    ``--data``. ``ValueError`` (one line from :func:`run_main`) for a table, for arrays named
    like one of the ``bundled`` data sets (their results would mix), and, where
    ``pixels_in_unit_interval`` gives the reason (e.g. an attack that clips to [0, 1]), for
    images with values outside [0, 1]."""
    from pyrozoo.data import load_image_arrays

    if args.data is None:
        return None
    if not args.data.name.lower().endswith(".npz"):
        raise ValueError(f"--data {args.data}: this script takes images, an .npz with x and y (and optionally x_test, y_test), not a table")
    data = load_image_arrays(args.data, seed=args.seed)
    _not_bundled(args, data.dataset, bundled)
    if pixels_in_unit_interval is not None:
        low = min(float(data.x_train.min()), float(data.x_test.min()))
        high = max(float(data.x_train.max()), float(data.x_test.max()))
        if low < 0.0 or high > 1.0:
            raise ValueError(f"--data {args.data}: the images hold values in [{low:g}, {high:g}], but {pixels_in_unit_interval}: scale them to [0, 1] (uint8 images are scaled when read)")
    return data


def image_data_note(data, path) -> str:
    """One sentence saying where a user's images come from (for a table's notes)."""
    shape = "x".join(map(str, data.input_shape))
    return f"Data: {data.dataset}: image arrays {path}, {len(data.y_train)} training and {len(data.y_test)} test images of shape {shape}, {data.num_classes} classes."


def file_digest(path) -> str:
    """Eight hex digits of a file's contents: named in the checkpoints of runs on a user's data,
    so that a run on a changed file never resumes one on the old."""
    digest = hashlib.sha1()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:8]


def uci_datasets(names, data_dir, table=None) -> dict:
    """``{name: data set}``: each of ``names`` read as a folder in the UCI layout
    (:class:`~pyrozoo.data.UCIDataset`, by name under ``data_dir`` or by path), then ``table``
    (a user's loaded :class:`~pyrozoo.data.RegressionTable`), if given, by its name."""
    from pyrozoo.data import UCIDataset

    loaded = {name: UCIDataset(name, data_dir) for name in names}
    if table is not None:
        loaded[table.name] = table
    return loaded


def own_data_note(datasets) -> str:
    """A sentence describing the data sets of ``datasets`` (loaded) that are not bundled and so
    have no published numbers (``""`` when all are bundled), for a table's notes."""
    from pyrozoo.data import UCI_DATASETS

    own = [d.describe() if hasattr(d, "describe") else f"{d.name}: the folder {d.folder} in the UCI layout" for d in datasets if d.name not in UCI_DATASETS]
    return "Data without published baselines: " + "; ".join(own) + "." if own else ""


def check_uci_datasets(parser: argparse.ArgumentParser, option: str, names, data_dir) -> None:
    """Each of ``names`` is a data set in the UCI layout (:func:`pyrozoo.data.dataset_folder`): a
    bundled one, a folder under ``data_dir`` (or its ``uci/``), or the path of one; else a usage
    error naming ``option`` (exit status 2, before any work). The files are checked when read."""
    from pyrozoo.data import dataset_folder

    for name in names:
        try:
            dataset_folder(name, data_dir)
        except (ValueError, FileNotFoundError) as e:
            parser.error(f"argument {option}: {e}")
