"""The notebooks execute top to bottom in their quick configuration (``PYROZOO_NOTEBOOK_QUICK=1``),
and the committed ones are executed (every code cell has run, none failed)."""

import os
from pathlib import Path

import pytest

# the test extra installs both; a machine without them (a GPU image) skips the notebook tests
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: text each notebook's quick run must print (its last table or summary), so a notebook whose
#: cells stopped early, or whose result cells print nothing, fails
EXPECTED_OUTPUT = {
    "tutorial_own_model": ["ImportanceWeighted_ELBO(K=8)", "objective: ImportanceWeighted_ELBO(K=4)", "QUICK smoke configuration"],
    "tutorial_sgmcmc": ["max split R-hat", "spike-and-slab, SGHMC-SA", "SGHMC on the network", "QUICK smoke configuration"],
    "tutorial_compression": ["Bayesian compression (GNJ)", "RDP", "KB export (CSR)", "QUICK smoke configuration"],
}

#: files a notebook's quick run must write into PYROZOO_NOTEBOOK_RESULTS_DIR
EXPECTED_FILES = {
    "compare_objectives": {"compare_objectives_notebook_quick_summary.csv", "compare_objectives_notebook_quick_uci_calibration.png"},
}


def _outputs(notebook):
    return [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return data.get("text/markdown", "") + data.get("text/plain", "")


def test_every_tutorial_is_checked():
    tutorials = {p.stem for p in NOTEBOOKS if p.stem.startswith("tutorial_")}
    assert tutorials == set(EXPECTED_OUTPUT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_executed(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, f"{path.name} has no code cells"
    not_run = [i for i, cell in enumerate(code) if cell.get("execution_count") is None]
    assert not not_run, f"{path.name}: code cells {not_run} were not executed (run scripts/execute_notebook.py {path.relative_to(ROOT)})"
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name} was not executed top to bottom in one kernel: execution counts {counts}"
    errors = [o.get("ename") for o in _outputs(notebook) if o.get("output_type") == "error"]
    assert not errors, f"{path.name} was saved with errors: {errors}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_quick(path, tmp_path, monkeypatch):
    from zoo_protocols.paths import default_data_dir

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
    errors = [o for o in _outputs(notebook) if o.get("output_type") == "error"]
    assert not errors
    printed = "\n".join(_text(o) for o in _outputs(notebook))
    missing = [text for text in EXPECTED_OUTPUT.get(path.stem, []) if text not in printed]
    assert not missing, f"{path.name} did not print {missing}"
    written = {p.name for p in tmp_path.iterdir()}
    assert EXPECTED_FILES.get(path.stem, set()) <= written
