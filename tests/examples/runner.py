"""Runs an example (or benchmark) script in-process, as ``python <script> <args>`` would."""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(script, *args, monkeypatch):
    """Runs ``script`` as ``__main__`` with ``args`` and returns its globals; a zero exit
    status is success. ``script`` is a file name in ``examples/`` or a path."""
    path = Path(script) if Path(script).is_absolute() else EXAMPLES / script
    monkeypatch.setattr(sys, "argv", [str(path), *map(str, args)])
    try:
        return runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise
