"""The provenance manifest (issue 23, item 4): ``docs/results/MANIFEST.csv`` lists every results
file, every row says how it was made and what it depends on, and a result older than a change
to the code it depends on is reported stale. Whether the committed manifest is current is a
report (``make results-check``, ``tools/results_check.py``), not a test: the machinery is tested
on small throwaway repositories whose answers are known: the dependencies of a script, which
commits make a result stale, what a run records and what a backfill keeps, what the report says."""

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pyrozoo import atomic
from zoo_protocols import provenance as prov
from tests.zoo_protocols.git_repos import commit_all, git, write
from tests.runner import SCRIPT_FOLDERS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "results_manifest.py"


# -- the repository's manifest: a report, not a gate -----------------------------------------

def test_the_report_reads_the_repository_and_gates_nothing():
    """``make results-check`` reads this checkout's manifest, ledger and matrix and says what is
    not current; whatever it finds, it exits 0 unless asked to be strict (a code change never
    needs a results edit to pass CI)."""
    from tools import results_check

    sections = results_check.report(ROOT)
    assert list(sections) == ["manifest", "claims ledger", "reference matrix"]
    assert all(isinstance(f, str) and f for found in sections.values() for f in found)
    assert not any(f.startswith("could not be checked") for found in sections.values() for f in found), sections
    assert results_check.main([]) == 0


# -- throwaway repositories -------------------------------------------------------------------

#: a small checkout: a script importing a protocol whose registry loads the modules meth_*.py,
#: one of which imports a shared module; infrastructure (cli) that imports a helper
FILES = {
    ".gitignore": "runs/\n",
    "zoo_protocols/__init__.py": "def load_methods(prefix):\n    pass\n",
    "zoo_protocols/cli.py": "import zoo_protocols.helper\n",
    "zoo_protocols/helper.py": "",
    "zoo_protocols/registry.py": "class MethodRegistry:\n    def __init__(self, kind, module_prefix):\n        pass\n",
    "zoo_protocols/protocol.py": "from zoo_protocols import registry\nREGISTRY = registry.MethodRegistry('X', 'meth_')\n",
    "zoo_protocols/meth_a.py": "from zoo_protocols.shared import value\n",
    "zoo_protocols/shared.py": "value = 1\n",
    "zoo_protocols/unused.py": "",
    "reproductions/ex.py": "from zoo_protocols.protocol import REGISTRY\nfrom zoo_protocols.cli import run_main\n",
    "docs/results/ex_table.csv": "a\n1\n",
    "docs/results/sub/.gitignore": "*.partial\n",
}
#: what a result of reproductions/ex.py depends on, worked out by hand from FILES
EX_DEPENDS = ["reproductions/ex.py", "zoo_protocols/meth_a.py", "zoo_protocols/protocol.py", "zoo_protocols/registry.py", "zoo_protocols/shared.py"]


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    for name, text in FILES.items():
        write(root, name, text)
    git(root, "init", "-q")
    commit_all(root, "first")
    return root


def row(name, depends, waiver=""):
    return {"file": name, "command": "python reproductions/ex.py", "commit": "0" * 12, "settings": "{}", "device": "cpu", "threads": "1",
            "seconds": "1.0", "created": "2026-01-01T00:00:00+00:00", "depends": ";".join(depends), "waiver": waiver, "source": "run", "verified": ""}


def test_depends_follow_imports_and_registries_but_not_infrastructure(repo):
    assert prov.depends_of("reproductions/ex.py", repo) == EX_DEPENDS


def test_depends_of_a_notebook_reads_its_code_cells(repo):
    cells = [{"cell_type": "markdown", "source": ["from zoo_protocols import unused\n"]},
             {"cell_type": "code", "source": ["%matplotlib inline\n", "from zoo_protocols.protocol import REGISTRY\n"]}]
    write(repo, "notebooks/nb.ipynb", json.dumps({"cells": cells}))
    assert prov.depends_of("notebooks/nb.ipynb", repo) == ["notebooks/nb.ipynb"] + EX_DEPENDS[1:]


#: scripts that load others with runpy.run_path, each path built as the examples build theirs
LOADERS = {
    "reproductions/sub/loads_sibling.py": "import runpy\nfrom pathlib import Path\nrunpy.run_path(str(Path(__file__).with_name('sibling.py')))\n",
    "reproductions/sub/sibling.py": "from zoo_protocols.shared import value\n",
    "reproductions/loads_by_name.py": ("import runpy\nfrom pathlib import Path\nOTHER = Path(__file__).resolve().parents[1] / 'reproductions' / 'ex.py'\n"
                                 "def f():\n    return runpy.run_path(str(OTHER))\n"),
    "reproductions/loads_unknown.py": "import runpy, sys\nrunpy.run_path(sys.argv[1])\nrunpy.run_path('/elsewhere/x.py')\n",
}


@pytest.mark.parametrize("script, loads", [("reproductions/sub/loads_sibling.py", ["reproductions/sub/sibling.py", "zoo_protocols/shared.py"]),
                                           ("reproductions/loads_by_name.py", EX_DEPENDS)])
def test_a_script_run_by_run_path_is_a_dependency_like_an_import(repo, script, loads):
    for name, text in LOADERS.items():
        write(repo, name, text)
    assert prov.depends_of(script, repo) == [script] + sorted(loads)


def test_a_run_path_the_code_does_not_name_is_reported_by_line(repo):
    write(repo, "reproductions/loads_unknown.py", LOADERS["reproductions/loads_unknown.py"])
    assert prov.script_loads(LOADERS["reproductions/loads_unknown.py"], repo, "reproductions/loads_unknown.py") == (set(), [2, 3])


def test_every_script_loaded_by_run_path_in_the_repository_is_named_in_its_code():
    """Else a result would not go stale when the script it runs changes; the runbook alone runs
    scripts chosen at run time (its legs), and writes no result of its own."""
    unresolved = {}
    for path in sorted([*(p for folder in SCRIPT_FOLDERS for p in folder.glob("**/*.py")), *ROOT.glob("notebooks/*.ipynb")]):
        rel = path.relative_to(ROOT).as_posix()
        lines = prov.script_loads(prov._code_of(path), ROOT, rel)[1]
        if lines:
            unresolved[rel] = lines
    assert list(unresolved) == ["tools/gpu_runbook.py"], unresolved


def test_results_files_are_the_unignored_ones_without_hidden_files_or_the_manifest(repo):
    write(repo, "docs/results/new.md", "x\n")  # not committed yet: still a result to list
    write(repo, "docs/results/sub/run.partial", "x\n")  # ignored by the nested .gitignore
    write(repo, "docs/results/.ex_table.csv.123.tmp", "x\n")  # an atomic write in flight
    write(repo, "docs/results/MANIFEST.csv", ",".join(prov.COLUMNS) + "\n")
    assert prov.results_files(repo) == ["ex_table.csv", "new.md"]


def test_check_finds_missing_and_unlisted_files(repo):
    rows = {"gone.csv": row("gone.csv", EX_DEPENDS)}
    result = prov.check_manifest(repo, rows, use_history=False)
    assert result.missing == ["gone.csv"] and result.unlisted == ["ex_table.csv"]
    assert len(result.problems) == 2


def test_a_change_to_a_dependency_makes_a_result_stale_until_waived_or_regenerated(repo):
    rows = {"ex_table.csv": row("ex_table.csv", EX_DEPENDS)}
    assert prov.check_manifest(repo, rows).stale == {}
    write(repo, "zoo_protocols/unused.py", "x = 2\n")  # not a dependency
    commit_all(repo, "unrelated")
    write(repo, "zoo_protocols/shared.py", "value = 2\n")  # reached through the registry's meth_a
    later = commit_all(repo, "change a dependency")
    result = prov.check_manifest(repo, rows)
    assert result.unwaived == ["ex_table.csv"] and result.stale["ex_table.csv"].changes == [(later, "zoo_protocols/shared.py")]
    assert result.problems == ["stale without a waiver: ex_table.csv"]

    rows["ex_table.csv"]["waiver"] = "known; to regenerate"
    result = prov.check_manifest(repo, rows)
    assert result.waived == ["ex_table.csv"] and result.problems == []

    write(repo, "docs/results/ex_table.csv", "a\n2\n")  # regenerated, not yet committed: the old commit's numbers are gone
    assert prov.check_manifest(repo, rows).stale == {}
    commit_all(repo, "regenerate")
    result = prov.check_manifest(repo, rows)
    assert result.stale == {} and result.needless_waivers == ["ex_table.csv"]


def test_the_report_names_a_stale_result_its_change_and_an_unlisted_file(repo):
    from tools import results_check

    prov.write_manifest(prov.manifest_path(repo), {"ex_table.csv": row("ex_table.csv", EX_DEPENDS)})
    write(repo, "docs/results/other.csv", "b\n1\n")
    commit_all(repo, "manifest")
    assert results_check.manifest_findings(repo) == ["not listed: other.csv"]
    write(repo, "zoo_protocols/shared.py", "value = 2\n")
    later = commit_all(repo, "change a dependency")
    (stale,) = [f for f in results_check.manifest_findings(repo) if f.startswith("stale: ")]
    assert "ex_table.csv" in stale and later[:7] in stale and "zoo_protocols/shared.py" in stale
    prov.manifest_path(repo).write_text(prov.manifest_path(repo).read_text() + "\n")  # a hand edit left a blank line
    assert any("canonical form" in f for f in results_check.manifest_findings(repo))


def test_a_verified_result_counts_as_current_until_its_code_changes_after_the_check(repo):
    rows = {"ex_table.csv": row("ex_table.csv", EX_DEPENDS)}
    write(repo, "zoo_protocols/shared.py", "value = 1  # a refactor\n")
    checked = commit_all(repo, "refactor")
    assert list(prov.check_manifest(repo, rows).stale) == ["ex_table.csv"]
    rows["ex_table.csv"]["verified"] = prov.verified_value(checked, "python reproductions/ex.py --quick --results-dir {out}")
    assert prov.check_manifest(repo, rows).stale == {}
    write(repo, "zoo_protocols/meth_a.py", "from zoo_protocols.shared import value\nother = 2\n")
    later = commit_all(repo, "a change after the check")
    assert prov.check_manifest(repo, rows).stale["ex_table.csv"].changes == [(later, "zoo_protocols/meth_a.py")]


def test_a_verification_at_a_commit_outside_the_history_counts_for_nothing(repo):
    rows = {"ex_table.csv": row("ex_table.csv", EX_DEPENDS)}
    write(repo, "zoo_protocols/shared.py", "value = 2\n")
    commit_all(repo, "change")
    rows["ex_table.csv"]["verified"] = prov.verified_value("f" * 40, "python reproductions/ex.py --results-dir {out}")
    assert list(prov.check_manifest(repo, rows).stale) == ["ex_table.csv"]


def test_a_verified_command_with_a_backquote_is_refused():
    with pytest.raises(ValueError, match="backquote"):
        prov.verified_value("a" * 12, "python `x`")


def test_a_manifest_written_before_the_verified_column_reads_with_it_blank(tmp_path):
    text = ",".join(prov.OLD_COLUMNS) + "\n" + ",".join(row("a.csv", ["x.py"])[c] for c in prov.OLD_COLUMNS) + "\n"
    rows = prov.parse_manifest(text, "old.csv")
    assert rows["a.csv"]["verified"] == "" and prov.manifest_text(rows).splitlines()[0] == ",".join(prov.COLUMNS)


def test_a_result_committed_with_its_code_change_is_not_stale(repo):
    rows = {"ex_table.csv": row("ex_table.csv", EX_DEPENDS)}
    write(repo, "zoo_protocols/shared.py", "value = 3\n")
    write(repo, "docs/results/ex_table.csv", "a\n3\n")
    commit_all(repo, "code and result together")
    assert prov.check_manifest(repo, rows).stale == {}


def test_a_shallow_clone_has_no_history_to_judge_by(repo, tmp_path):
    write(repo, "zoo_protocols/shared.py", "value = 4\n")
    commit_all(repo, "second")
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(clone)], check=True, capture_output=True)
    assert prov.history(clone) is None
    assert prov.history(repo) is not None
    assert prov.results_files(clone) == ["ex_table.csv"]  # the listing works without history


def test_no_git_means_no_history_and_a_rough_listing(repo, monkeypatch):
    import shutil

    shutil.rmtree(repo / ".git")
    write(repo, "docs/results/sub/run.partial", "x\n")
    write(repo, "docs/results/sub/kept.csv", "x\n")
    assert prov.history(repo) is None
    assert prov.results_files(repo) == ["ex_table.csv", "sub/kept.csv"]


# -- the manifest file ------------------------------------------------------------------------

def test_write_then_read_gives_the_rows_back_sorted(tmp_path):
    rows = {name: row(name, ["a.py", "b.py"], waiver='why, with "quotes"') for name in ("b.csv", "a/c.md")}
    path = prov.write_manifest(tmp_path / prov.MANIFEST_NAME, rows)
    assert prov.read_manifest(path) == rows
    assert [line.split(",")[0] for line in path.read_text().splitlines()] == ["file", "a/c.md", "b.csv"]


BAD_MANIFESTS = {
    "wrong columns": "file,command\nx,y\n",
    "listed twice": ",".join(prov.COLUMNS) + "\n" + "a.csv" + "," * (len(prov.COLUMNS) - 1) + "\n" + "a.csv" + "," * (len(prov.COLUMNS) - 1) + "\n",
    "short row": ",".join(prov.COLUMNS) + "\na.csv,cmd\n",
}


@pytest.mark.parametrize("case", BAD_MANIFESTS)
def test_a_malformed_manifest_is_refused_naming_the_file(tmp_path, case):
    path = write(tmp_path, prov.MANIFEST_NAME, BAD_MANIFESTS[case])
    with pytest.raises(ValueError, match=prov.MANIFEST_NAME):
        prov.read_manifest(path)


def test_upsert_replaces_its_rows_and_keeps_the_others(tmp_path):
    path = tmp_path / prov.MANIFEST_NAME
    prov.upsert(path, [row("a.csv", ["x.py"]), row("b.csv", ["x.py"])])
    prov.upsert(path, [dict(row("b.csv", ["y.py"]), command="python again")])
    rows = prov.read_manifest(path)
    assert rows["a.csv"]["depends"] == "x.py" and rows["b.csv"]["depends"] == "y.py" and rows["b.csv"]["command"] == "python again"


ARGV_CASES = [
    (["--epochs", "3", "--quick"], {"--epochs": "3", "--quick": True}),
    (["--summarize", "a.csv", "b.csv", "--x=1"], {"--summarize": ["a.csv", "b.csv"], "--x": "1"}),
    (["pos", "--lr", "-0.5", "--flag"], {"": ["pos"], "--lr": "-0.5", "--flag": True}),  # a negative number is a value
]


@pytest.mark.parametrize("argv, expected", ARGV_CASES)
def test_settings_from_argv(argv, expected):
    assert prov.settings_from_argv(argv) == expected


# -- recording a run --------------------------------------------------------------------------

def test_a_run_records_the_results_it_wrote_and_nothing_else(repo, tmp_path):
    argv = [str(repo / "reproductions" / "ex.py"), "--epochs", "3", "--quick"]
    with prov.recording_outputs(argv=argv, root=repo):
        atomic.write_text(repo / "docs" / "results" / "ex_table.md", "# t\n")
        atomic.write_text(repo / "docs" / "results" / "sub" / "x.partial", "ignored\n")
        atomic.write_text(tmp_path / "elsewhere.csv", "not a result\n")
    rows = prov.read_manifest(prov.manifest_path(repo))
    assert list(rows) == ["ex_table.md"]
    got = rows["ex_table.md"]
    assert got["command"] == "python reproductions/ex.py --epochs 3 --quick"
    assert json.loads(got["settings"]) == {"--epochs": "3", "--quick": True}
    assert got["commit"] == git(repo, "rev-parse", "HEAD").strip()[: prov.SHORT_HASH]
    assert got["depends"] == ";".join(EX_DEPENDS)
    assert got["device"] == prov.device_label(None) and got["threads"] == str(torch.get_num_threads())
    assert float(got["seconds"]) >= 0 and got["source"] == "run" and got["waiver"] == ""


def test_a_rewrite_byte_for_byte_at_a_clean_head_records_itself_as_verified(repo, monkeypatch):
    """git keeps a rewritten-but-identical file's older commit: the row says the run at HEAD checked it."""
    argv = [str(repo / "reproductions" / "ex.py"), "--quick"]
    write(repo, "zoo_protocols/shared.py", "value = 1  # a change since the table was committed\n")
    head = commit_all(repo, "refactor")[: prov.SHORT_HASH]
    assert list(prov.check_manifest(repo, {"ex_table.csv": row("ex_table.csv", EX_DEPENDS)}).stale) == ["ex_table.csv"]
    with prov.recording_outputs(argv=argv, root=repo):
        atomic.write_text(repo / "docs" / "results" / "ex_table.csv", FILES["docs/results/ex_table.csv"])  # the same bytes
        atomic.write_text(repo / "docs" / "results" / "new.csv", "b\n")  # never committed
    rows = prov.read_manifest(prov.manifest_path(repo))
    assert rows["ex_table.csv"]["verified"] == f"{head} `python reproductions/ex.py --quick`" and rows["new.csv"]["verified"] == ""
    assert prov.check_manifest(repo, rows).stale == {}

    with prov.recording_outputs(argv=argv, root=repo):
        atomic.write_text(repo / "docs" / "results" / "ex_table.csv", "a\n2\n")  # other numbers: a regeneration, not a check
    assert prov.read_manifest(prov.manifest_path(repo))["ex_table.csv"]["verified"] == ""

    write(repo, "zoo_protocols/shared.py", "value = 1  # uncommitted\n")  # code that is not HEAD's checks nothing
    with prov.recording_outputs(argv=argv, root=repo):
        atomic.write_text(repo / "docs" / "results" / "ex_table.csv", FILES["docs/results/ex_table.csv"])
    assert prov.read_manifest(prov.manifest_path(repo))["ex_table.csv"]["verified"] == ""


def test_a_notebook_execution_records_what_its_kernel_wrote(repo):
    """The kernel is another process: the executor records the files that changed under the
    results folder while it ran, as made by the notebook's code and the threads it sets."""
    executor = runpy.run_path(str(ROOT / "scripts" / "execute_notebook.py"), run_name="execute_notebook")
    notebook = write(repo, "notebooks/nb.ipynb", json.dumps({"cells": [
        {"cell_type": "code", "source": ["import torch\n", "torch.set_num_threads(2)\n", "from zoo_protocols.protocol import REGISTRY\n"]}]}))
    head = commit_all(repo, "a notebook")[: prov.SHORT_HASH]
    results = repo / "docs" / "results"
    before = executor["_stamps"](results)
    for name, text in (("ex_table.csv", FILES["docs/results/ex_table.csv"]), ("nb_table.csv", "b\n")):  # the same bytes; a new file
        path = atomic.write_text(results / name, text)
        os.utime(path, ns=(0, before.get(path, 0) + 1))
    argv = ["scripts/execute_notebook.py", "notebooks/nb.ipynb"]
    executor["record_written"](notebook, results, before, 3.0, argv=argv, root=repo)
    rows = prov.read_manifest(prov.manifest_path(repo))
    assert sorted(rows) == ["ex_table.csv", "nb_table.csv"]
    for got in rows.values():
        assert got["command"] == "python scripts/execute_notebook.py notebooks/nb.ipynb" and got["commit"] == head
        assert got["depends"] == "notebooks/nb.ipynb;zoo_protocols/meth_a.py;zoo_protocols/protocol.py;zoo_protocols/registry.py;zoo_protocols/shared.py"
        assert got["threads"] == "2" and got["device"] == "cpu"
    assert rows["ex_table.csv"]["verified"] == f"{head} `python scripts/execute_notebook.py notebooks/nb.ipynb`" and rows["nb_table.csv"]["verified"] == ""


SOURCE_COMMITS = {"a short hash": ("abc1234", "abc1234"), "a full hash": ("f" * 40, "f" * 12)}


@pytest.mark.parametrize("case", SOURCE_COMMITS)
def test_a_copy_that_names_its_commit_is_recorded_at_that_commit(repo, monkeypatch, case):
    # the GPU machine's copy of the tree: its .git lags (here: a later, dirty tree than HEAD)
    given, recorded = SOURCE_COMMITS[case]
    write(repo, "reproductions/ex.py", "# changed\n" + FILES["reproductions/ex.py"])
    assert prov.commit_label(repo, EX_DEPENDS).endswith("+dirty")
    monkeypatch.setenv(prov.SOURCE_COMMIT_VARIABLE, given)
    assert prov.commit_label(repo, EX_DEPENDS) == recorded


@pytest.mark.parametrize("value", ["HEAD", "abc12", "abc1234+dirty", "g" * 12])
def test_a_named_commit_that_is_not_a_hash_is_refused_naming_the_variable(repo, monkeypatch, value):
    monkeypatch.setenv(prov.SOURCE_COMMIT_VARIABLE, value)
    with pytest.raises(ValueError, match=prov.SOURCE_COMMIT_VARIABLE):
        prov.commit_label(repo, EX_DEPENDS)


def test_an_interrupted_run_records_what_it_wrote_and_restores_the_writers(repo):
    argv = [str(repo / "reproductions" / "ex.py")]
    write(repo, "zoo_protocols/shared.py", "value = 5\n")  # uncommitted change to a dependency
    with pytest.raises(KeyboardInterrupt):
        with prov.recording_outputs(argv=argv, root=repo):
            atomic.write_text(repo / "docs" / "results" / "partial_runs.csv", "a\n")
            raise KeyboardInterrupt
    assert atomic.atomic_path.__module__ == "pyrozoo.atomic"
    got = prov.read_manifest(prov.manifest_path(repo))["partial_runs.csv"]
    assert got["commit"].endswith("+dirty")


def test_rows_a_script_records_itself_are_not_replaced(repo):
    argv = [str(repo / "reproductions" / "ex.py"), "--quick"]
    with prov.recording_outputs(argv=argv, root=repo):
        path = atomic.write_text(repo / "docs" / "results" / "ex_table.md", "# t\n")
        prov.record_outputs([path], argv=argv, settings={"epochs": 200, "resolved": True}, root=repo)
    assert json.loads(prov.read_manifest(prov.manifest_path(repo))["ex_table.md"]["settings"]) == {"epochs": 200, "resolved": True}


def test_a_run_records_the_results_files_it_read_among_its_depends(repo, tmp_path):
    """A table built from committed runs depends on them: pandas, numpy and plain reads are all
    seen; its own file read back (a resume), ignored files and files outside the results are not."""
    import numpy as np
    import pandas as pd

    results = repo / "docs" / "results"
    write(repo, "docs/results/runs.csv", "a\n1\n")
    write(repo, "docs/results/stats.json", "{}")
    np.savez(results / "arrays.npz", x=np.zeros(2))
    write(repo, "docs/results/sub/x.partial", "ignored\n")
    (tmp_path / "outside.csv").write_text("a\n1\n")
    commit_all(repo, "inputs")
    argv = [str(repo / "reproductions" / "ex.py")]
    with prov.recording_outputs(argv=argv, root=repo, track_reads=True):
        pd.read_csv(results / "runs.csv")
        (results / "stats.json").read_text()
        np.load(results / "arrays.npz")
        (results / "sub" / "x.partial").read_text()
        pd.read_csv(tmp_path / "outside.csv")
        pd.read_csv(results / "ex_table.csv")  # read back, then rewritten: its own file
        atomic.write_text(results / "ex_table.csv", "a\n3\n")
    got = prov.read_manifest(prov.manifest_path(repo))["ex_table.csv"]
    inputs = ["docs/results/arrays.npz", "docs/results/runs.csv", "docs/results/stats.json"]
    assert prov.split_depends(got["depends"]) == EX_DEPENDS + inputs
    assert got["commit"] == git(repo, "rev-parse", "HEAD").strip()[: prov.SHORT_HASH]  # code, not inputs, makes a commit label


def test_an_ordinary_run_installs_no_audit_hook_and_keeps_the_inputs_recorded_before(repo, monkeypatch):
    """Reads are tracked only when ``PYROZOO_RECORD_INPUTS=1`` asks: an untracked rerun of a
    table keeps the inputs its row had (less the file itself), and its code depends are fresh."""
    write(repo, "docs/results/runs.csv", "a\n1\n")
    commit_all(repo, "inputs")
    prov.write_manifest(prov.manifest_path(repo), {"ex_table.csv": row("ex_table.csv", ["reproductions/old.py", "docs/results/runs.csv", "docs/results/ex_table.csv"])})
    code = (
        "import sys\n"
        "from zoo_protocols import provenance as prov\n"
        "from pyrozoo import atomic\n"
        f"with prov.recording_outputs(argv=[{str(repo / 'reproductions' / 'ex.py')!r}], root={str(repo)!r}):\n"
        f"    open({str(repo / 'docs' / 'results' / 'runs.csv')!r}).read()\n"
        f"    atomic.write_text({str(repo / 'docs' / 'results' / 'ex_table.csv')!r}, 'a\\n4\\n')\n"
        "print(prov._audit_hook_added, prov._reads)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != prov.READS_VARIABLE}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "None"]
    got = prov.read_manifest(prov.manifest_path(repo))["ex_table.csv"]
    assert prov.split_depends(got["depends"]) == EX_DEPENDS + ["docs/results/runs.csv"]
    monkeypatch.setenv(prov.READS_VARIABLE, "1")
    assert prov.tracking_requested()
    monkeypatch.setenv(prov.READS_VARIABLE, "0")
    assert not prov.tracking_requested()


def test_reads_outside_a_recording_are_not_noted():
    with prov.tracking_reads() as outer:
        with prov.tracking_reads() as inner:
            Path(__file__).read_text()
        assert inner == [str(Path(__file__).resolve())] and outer == inner  # an inner block's reads are the outer's too
    Path(__file__).read_text()
    assert outer == inner and prov._reads is None


def test_a_result_is_stale_when_a_results_file_it_read_is_rewritten_after_it(repo):
    """uci_ll_units read uci_rdp.csv, which was regenerated after it: nothing in its code
    changed, but its numbers were the old runs'."""
    rows = {"ex_table.csv": row("ex_table.csv", EX_DEPENDS + ["docs/results/runs.csv"])}
    write(repo, "docs/results/runs.csv", "a\n1\n")
    commit_all(repo, "the runs")  # then the table built from them: current
    write(repo, "docs/results/ex_table.csv", "a\n5\n")
    commit_all(repo, "the table rebuilt")
    assert prov.check_manifest(repo, rows).stale == {}
    write(repo, "zoo_protocols/shared.py", "value = 1  # a refactor\n")
    checked = commit_all(repo, "refactor")
    write(repo, "docs/results/runs.csv", "a\n2\n")
    rerun = commit_all(repo, "the runs regenerated")
    # a short run verified at a later commit checks the code, not the runs the table was built from
    rows["ex_table.csv"]["verified"] = prov.verified_value(rerun, "python reproductions/ex.py --quick --results-dir {out}")
    result = prov.check_manifest(repo, rows)
    assert result.unwaived == ["ex_table.csv"] and result.stale["ex_table.csv"].changes == [(rerun, "docs/results/runs.csv")]
    rows["ex_table.csv"]["verified"] = ""
    assert prov.check_manifest(repo, rows).stale["ex_table.csv"].changes == [(rerun, "docs/results/runs.csv"), (checked, "zoo_protocols/shared.py")]
    # its own command, run after the new runs, wrote the same bytes: they did not change it
    rows["ex_table.csv"]["verified"] = prov.verified_value(rerun, rows["ex_table.csv"]["command"])
    assert prov.check_manifest(repo, rows).stale == {}


def test_a_deleted_input_is_reported(repo):
    rows = {"ex_table.csv": row("ex_table.csv", EX_DEPENDS + ["docs/results/gone.csv"])}
    assert prov.check_manifest(repo, rows).unknown_depends == ["ex_table.csv"]


# -- the backfill script ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def script():
    return runpy.run_path(str(SCRIPT), run_name="results_manifest")


def test_backfill_reads_provenance_lines_and_is_idempotent(repo, script):
    write(repo, "docs/results/ex_table.md", "| a |\n\ncommand: `python reproductions/ex.py --epochs 7`; commit 0123456789abcdef; torch 2.13.0+cpu, Python 3.11\n")
    write(repo, "docs/results/ex_plot.png", "png")
    first = commit_all(repo, "results")
    hist = prov.history(repo)
    rows = script["backfill"](repo, {}, hist)
    assert sorted(rows) == ["ex_plot.png", "ex_table.csv", "ex_table.md"]
    for name in ("ex_table.csv", "ex_table.md"):  # the table's family shares its provenance line
        assert rows[name]["command"] == "python reproductions/ex.py --epochs 7" and rows[name]["commit"] == "0123456789ab"
        assert json.loads(rows[name]["settings"]) == {"--epochs": "7"}
    plot = rows["ex_plot.png"]
    assert plot["command"] == "reproductions/ex.py (arguments not recorded)" and plot["commit"] == first[: prov.SHORT_HASH]
    assert plot["depends"] == ";".join(EX_DEPENDS) and plot["created"] == hist.dates[first] and plot["source"] == "backfill"

    rows["ex_plot.png"]["waiver"] = "known"
    # a command recorded with notes in words, an apostrophe among them, is still read for its script
    rows["ex_table.csv"] = dict(row("ex_table.csv", ["stale.py", "docs/results/ex_plot.png"]), source="run",
                                command="python reproductions/ex.py (two processes, merged in the sweep's order)")
    again = script["backfill"](repo, rows, hist)
    assert again["ex_plot.png"]["waiver"] == "known"
    # the code is read again, the results file the run read is kept
    assert again["ex_table.csv"]["command"] == rows["ex_table.csv"]["command"]
    assert again["ex_table.csv"]["depends"] == ";".join(EX_DEPENDS + ["docs/results/ex_plot.png"])
    assert script["backfill"](repo, again, hist) == again


def test_a_notebooks_results_get_its_documented_command_and_thread_count(repo, script):
    """A notebook has no command line of its own: its files' rows say how the README runs it."""
    notebook = "notebooks/compare_objectives.ipynb"
    write(repo, notebook, json.dumps({"cells": [{"cell_type": "code", "source": ["import torch\n", "torch.set_num_threads(1)\n"]}]}))
    write(repo, "docs/results/compare_objectives_notebook_summary.csv", "a\n1\n")
    commit_all(repo, "notebook results")
    rows = script["backfill"](repo, {}, prov.history(repo))
    got = rows["compare_objectives_notebook_summary.csv"]
    assert got["command"] == f"python scripts/execute_notebook.py {notebook}" and got["threads"] == "1" and json.loads(got["settings"]) == {}


def test_waive_stale_names_the_commits(repo, script):
    hist = prov.history(repo)
    rows = script["backfill"](repo, {}, hist)
    write(repo, "zoo_protocols/meth_a.py", "from zoo_protocols.shared import value\nother = 1\n")
    later = commit_all(repo, "change")
    hist = prov.history(repo)
    assert script["waive_stale"](rows, hist, "to regenerate") == ["ex_table.csv"]
    assert rows["ex_table.csv"]["waiver"].startswith("to regenerate [") and f"{later[:7]} (zoo_protocols/meth_a.py)" in rows["ex_table.csv"]["waiver"]
    assert prov.check_manifest(repo, rows, hist).problems == []


def test_check_mode_reports_and_writes_nothing(script, capsys):
    path = prov.manifest_path(ROOT)
    before = path.read_bytes()
    code = script["main"](["--check"])
    out = capsys.readouterr().out
    assert path.read_bytes() == before
    assert out.startswith(f"{len(prov.read_manifest(path))} files listed in {prov.MANIFEST_NAME}")
    assert code == (1 if "PROBLEM" in out else 0)
