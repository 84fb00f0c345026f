"""The notebooks execute top to bottom in their quick configuration (``PYROZOO_NOTEBOOK_QUICK=1``)."""

import os
from pathlib import Path

import nbclient
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_quick(path, tmp_path, monkeypatch):
    from recipes.paths import default_data_dir

    try:
        default_data_dir()
    except FileNotFoundError:
        pytest.skip("no shared data directory")
    # the kernel inherits the environment: quick configuration, outputs into the test's directory
    monkeypatch.setenv("PYROZOO_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("PYROZOO_NOTEBOOK_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("PYROZOO_NOTEBOOK_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    notebook = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    written = {p.name for p in tmp_path.iterdir()}
    if path.stem == "compare_objectives":
        assert {"compare_objectives_notebook_quick_summary.csv", "compare_objectives_notebook_quick_uci_calibration.png"} <= written
