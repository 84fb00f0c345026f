"""Runs an example (or benchmark) script in-process, as ``python <script> <args>`` would."""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: the short scripts a user copies (issue 43), each with the command line of its smoke run:
#: self-contained (pyrozoo, pyro, torch and common scientific packages only), 60-200 lines
USER_EXAMPLES = {
    "mean_field_lrt.py": ["--quick"],
    "sparse_variational_dropout.py": ["--quick"],
    "radial_directional.py": ["--quick"],
    "semi_implicit.py": ["--quick"],
    "sgmcmc.py": ["--quick"],
    "importance_weighted.py": ["--quick"],
    "pyromodule_guides.py": ["--quick"],
    "save_load_predict.py": ["--quick"],
}


def experiment_drivers():
    """The scripts of ``examples/`` that drive the experiment framework (they import
    ``recipes``; they move to their own places, issue 43) and none of :data:`USER_EXAMPLES`."""
    return sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in USER_EXAMPLES and "recipes" in p.read_text())


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
