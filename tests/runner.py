"""Runs a script of the repository (a user example, a paper reproduction, a controlled study, a
tool or a benchmark) in-process, as ``python <script> <args>`` would."""

import runpy
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
#: the short scripts a user copies
EXAMPLES = ROOT / "examples"
#: the paper reproductions, the controlled studies and the tools (results manifest, claims
#: ledger, GPU runbook, reference builds): they drive the repository-only ``zoo_protocols``
REPRODUCTIONS = ROOT / "reproductions"
STUDIES = ROOT / "studies"
TOOLS = ROOT / "tools"
#: where :func:`run_example` looks for a script named without a folder
SCRIPT_FOLDERS = (EXAMPLES, REPRODUCTIONS, TOOLS, STUDIES)

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
    """The file names of the paper reproductions and the tools (every script of
    ``reproductions/`` and ``tools/``; :func:`script_path` finds each)."""
    return sorted(p.name for folder in (REPRODUCTIONS, TOOLS) for p in folder.glob("*.py"))


def script_path(script) -> Path:
    """``script`` as a path: an absolute path as it is, a path relative to the repository root
    (``reproductions/uci_regression.py``), or a bare file name found in :data:`SCRIPT_FOLDERS` (the
    first folder that has it)."""
    path = Path(script)
    if path.is_absolute():
        return path
    if (ROOT / path).is_file():
        return ROOT / path
    found = [folder / path for folder in SCRIPT_FOLDERS if (folder / path).is_file()]
    if not found:
        raise FileNotFoundError(f"{script}: no script of that name in {[f.name for f in SCRIPT_FOLDERS]}")
    return found[0]  # a study named like a reproduction is reached by its path (STUDIES / name)


def run_example(script, *args, monkeypatch):
    """Runs ``script`` as ``__main__`` with ``args`` and returns its globals; a zero exit
    status is success. ``script`` is as :func:`script_path` takes it."""
    path = script_path(script)
    monkeypatch.setattr(sys, "argv", [str(path), *map(str, args)])
    try:
        return runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            raise


def script_globals(script) -> dict:
    """The globals of ``script`` (its functions, classes and constants) without running its
    ``main``; ``script`` is as :func:`script_path` takes it."""
    path = script_path(script)
    return runpy.run_path(str(path), run_name=path.stem)


def quick_study(script, results_dir, *args, monkeypatch, stem=None):
    """Runs a study's ``--quick --no-progress`` configuration (with ``args``) into
    ``results_dir`` and returns its table and its results page's text, after checking that the
    page states a verdict and its provenance. ``stem``: the table's name (default the script's)."""
    path = script_path(script)
    run_example(path, "--quick", "--no-progress", *args, "--results-dir", results_dir, monkeypatch=monkeypatch)
    stem = stem or path.stem
    text = (Path(results_dir) / f"{stem}.md").read_text()
    assert "Verdict:" in text and "Provenance:" in text, f"{path.name}: its results page lacks a verdict or a provenance line"
    return pd.read_csv(Path(results_dir) / f"{stem}.csv"), text
