"""Command-line options shared by the example scripts."""

import argparse
import hashlib
import os
import sys
from pathlib import Path

import torch

from pyrozoo.reporting import DEFAULT_RESULTS_DIR
from pyrozoo.utils import parse_int_ranges


def add_common_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--device --seed --data-dir --results-dir --quick --no-progress``."""
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA when available)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--data-dir", type=existing_directory, default=None, help="data root (default: $PYROZOO_DATA_DIR or ../shared/data)")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR, help="where tables and plots are written")
    parser.add_argument("--quick", action="store_true", help="a small smoke configuration (used by the test suite)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    return parser


def parse_seeds(spec: str):
    """``"0-4"`` or ``"0,2,7"`` -> list of ints."""
    out = parse_int_ranges(spec)
    if not out:
        raise argparse.ArgumentTypeError(f"no seeds in {spec!r}")
    return out


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
        raise argparse.ArgumentTypeError(f"{value!r} is not an existing directory")
    return path


def _number(text: str, convert, noun: str):
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None


def positive_int(value: str) -> int:
    """argparse type: an integer >= 1 (epochs, batch sizes, sample counts, widths)."""
    number = _number(value, int, "an integer")
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {number}")
    return number


def positive_float(value: str) -> float:
    """argparse type: a finite number > 0 (learning rates, scales)."""
    number = _number(value, float, "a number")
    if not (number > 0 and number != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {value}")
    return number


def float_list(value: str) -> list:
    """argparse type: comma-separated finite numbers, e.g. ``"0,0.05,0.1"``."""
    numbers = [_number(v, float, "a number") for v in value.split(",") if v.strip()]
    if not numbers or not all(abs(n) != float("inf") and n == n for n in numbers):
        raise argparse.ArgumentTypeError(f"{value!r}: need at least one finite number")
    return numbers


def settings_digest(settings) -> str:
    """Eight hex digits naming a run's settings (``repr`` of a list of pairs or values), for
    checkpoint and result file names that must change whenever the settings do."""
    return hashlib.sha1(repr(settings).encode()).hexdigest()[:8]


#: errors a user's input can cause (bad values, missing files, an unavailable device)
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError)


def run_main(main) -> None:
    """Runs an example's ``main()`` as a command: a :data:`USER_ERRORS` exception ends it with
    a one-line message and exit status 1 instead of a traceback (``PYROZOO_TRACEBACK=1``
    shows the traceback); an int returned is the exit status."""
    try:
        code = main()
    except USER_ERRORS as e:
        if os.environ.get("PYROZOO_TRACEBACK"):
            raise
        sys.exit(f"{Path(sys.argv[0]).name}: error: {e} (PYROZOO_TRACEBACK=1 shows where)")
    sys.exit(code if isinstance(code, int) else 0)
