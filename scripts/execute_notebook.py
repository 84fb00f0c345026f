"""Executes a notebook top to bottom and saves it in place with its outputs: how the committed,
executed notebooks in ``notebooks/`` are produced (their outputs are never edited by hand).

Usage::

    python scripts/execute_notebook.py notebooks/compare_objectives.ipynb
    python scripts/execute_notebook.py notebooks/compare_objectives.ipynb --runs-dir /tmp/runs   # resumable
    python scripts/execute_notebook.py notebooks/compare_objectives.ipynb --quick --out /tmp/q.ipynb

The notebooks read ``PYROZOO_NOTEBOOK_QUICK`` (smoke configuration), ``PYROZOO_NOTEBOOK_RESULTS_DIR``
(tables and plots; default ``docs/results``) and ``PYROZOO_NOTEBOOK_RUNS_DIR`` (per-run CSVs that
an interrupted execution resumes from). The kernel inherits this process's environment.
"""

import argparse
import os
import sys
import time
from pathlib import Path


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
    t0 = time.time()
    client = nbclient.NotebookClient(notebook, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": str(args.notebook.resolve().parent)}})
    client.execute()
    out = args.out or args.notebook
    nbformat.write(notebook, out)
    print(f"executed {args.notebook} in {time.time() - t0:.0f} s; saved {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
