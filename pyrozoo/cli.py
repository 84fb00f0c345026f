"""Command-line options shared by the example scripts."""

import argparse
from pathlib import Path

import torch

from pyrozoo.reporting import DEFAULT_RESULTS_DIR
from pyrozoo.utils import parse_int_ranges


def add_common_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--device --seed --data-dir --results-dir --quick --no-progress``."""
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (CUDA when available)")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--data-dir", type=Path, default=None, help="data root (default: $PYROZOO_DATA_DIR or ../shared/data)")
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

    return resolve_device(args.device)
