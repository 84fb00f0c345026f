"""Executes a notebook top to bottom and saves it in place with its outputs: how the committed,
executed notebooks in ``notebooks/`` are produced (their outputs are never edited by hand).

Usage::

    python scripts/execute_notebook.py notebooks/compare_objectives.ipynb
    python scripts/execute_notebook.py notebooks/compare_objectives.ipynb --runs-dir /tmp/runs   # resumable
    python scripts/execute_notebook.py notebooks/compare_objectives.ipynb --quick --out /tmp/q.ipynb

The notebooks read ``PYROZOO_NOTEBOOK_QUICK`` (smoke configuration), ``PYROZOO_NOTEBOOK_RESULTS_DIR``
(tables and plots; default ``docs/results``) and ``PYROZOO_NOTEBOOK_RUNS_DIR`` (per-run CSVs that
an interrupted execution resumes from). The kernel inherits this process's environment.

The results files the notebook wrote (changed during its execution) under ``docs/results`` get
their rows in ``docs/results/MANIFEST.csv`` like any example's (:func:`zoo_protocols.provenance.record_outputs`),
with the notebook's imports as what they depend on, so a regeneration that rewrites a file byte
for byte still records that it was made by this code.
"""

import argparse
import os
import sys
import time
from pathlib import Path


def _stamps(directory: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()} if directory.is_dir() else {}


def record_written(notebook: Path, results: Path, before: dict, seconds: float, argv=None, root=None) -> None:
    """Manifest rows for the files under ``results`` that changed since ``before`` (the command
    ``argv``, default this one); a failure to record warns (the results stand as written)."""
    written = [p for p, stamp in _stamps(results).items() if before.get(p) != stamp]
    if written:
        from zoo_protocols import provenance

        provenance.record_outputs_or_warn(written, argv=argv, seconds=seconds, root=root, script=notebook,
                                          threads=provenance.declared_threads(notebook), device="cpu")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="where to save the executed notebook (default: in place)")
    parser.add_argument("--quick", action="store_true", help="the notebook's smoke configuration")
    parser.add_argument("--runs-dir", type=Path, default=None, help="per-run CSVs (kept, so a rerun only does missing runs)")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--timeout", type=int, default=None, help="seconds per cell (default: none)")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        sys.exit(f"no notebook at {args.notebook}")
    import nbclient
    import nbformat

    os.environ["PYROZOO_NOTEBOOK_QUICK"] = "1" if args.quick else "0"
    for name, value in (("PYROZOO_NOTEBOOK_RUNS_DIR", args.runs_dir), ("PYROZOO_NOTEBOOK_RESULTS_DIR", args.results_dir)):
        if value is not None:
            value.mkdir(parents=True, exist_ok=True)
            os.environ[name] = str(value.resolve())
    # inline figures in the saved outputs
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(args.notebook, as_version=4)
    results = Path(os.environ.get("PYROZOO_NOTEBOOK_RESULTS_DIR") or Path(__file__).resolve().parents[1] / "docs" / "results")
    before = _stamps(results)
    t0 = time.time()
    client = nbclient.NotebookClient(notebook, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(args.notebook.resolve().parent)}})
    client.execute()
    # before the notebook is saved: its code, as committed, is what made the results
    record_written(args.notebook, results, before, time.time() - t0)
    out = args.out or args.notebook
    nbformat.write(notebook, out)
    print(f"executed {args.notebook} in {time.time() - t0:.0f} s; saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
