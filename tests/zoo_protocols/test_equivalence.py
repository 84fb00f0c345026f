"""zoo_protocols.equivalence: a short command run at two commits of a throwaway repository. A refactor
that keeps the numbers is identical (timing columns and keys left out); a change of a number is
found and named; a command that fails, or that writes nowhere compared, verifies nothing. And
``tools/results_manifest.py --verify`` turns a stale row's waiver into ``verified``."""

import json
import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from zoo_protocols import equivalence as eq
from zoo_protocols import provenance as prov
from tests.zoo_protocols.git_repos import commit_all, git, write

ROOT = Path(__file__).resolve().parents[2]

#: a script writing a table, a JSON sidecar and arrays from ``zoo_protocols/shared.py``'s value, each
#: with a timing entry that differs between any two runs
SCRIPT = '''import argparse, json, time
from pathlib import Path
import numpy as np
from zoo_protocols.shared import value
p = argparse.ArgumentParser(); p.add_argument("--results-dir", type=Path); p.add_argument("--fail", action="store_true")
a = p.parse_args()
if a.fail:
    raise SystemExit("bad option")
a.results_dir.mkdir(parents=True, exist_ok=True)
(a.results_dir / "table.csv").write_text(f"name,test_time_averaging_accuracy,train_seconds\\nx,{value},{time.perf_counter()}\\n")
(a.results_dir / "table.md").write_text(f"took {time.perf_counter()} s\\n")
(a.results_dir / "side.json").write_text(json.dumps({"value": value, "provenance": {"created": time.time()}}))
np.savez(a.results_dir / "arrays.npz", draws=np.full(3, float(value)))
'''
COMMAND = "python examples/ex.py --results-dir {out}"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("PYROZOO_DATA_DIR", str(tmp_path))  # the runs look for no data; the variable must name a folder
    root = tmp_path / "repo"
    write(root, "zoo_protocols/__init__.py", "")
    write(root, "zoo_protocols/shared.py", "value = 0.1\n")
    write(root, "examples/ex.py", SCRIPT)
    write(root, "docs/results/table.csv", "name,test_time_averaging_accuracy\nx,0.1\n")
    git(root, "init", "-q")
    return root, commit_all(root, "first")


@pytest.mark.parametrize("name, timing", [
    ("train_seconds", True), ("seconds_per_epoch", True), ("minutes", True), ("wall_seconds", True), ("created", True), ("time", True), ("commit", True),
    ("test_time_averaging_accuracy", False), ("rmse", False), ("second_moment", False), ("epochs", False),
])
def test_timing_columns_are_told_from_results(name, timing):
    assert eq.is_timing(name) is timing


def test_a_commit_name_resolves_to_its_full_hash_and_nothing_else_does(repo):
    root, first = repo
    assert eq.resolve_commit(root, "HEAD") == first and eq.resolve_commit(root, f" {first[:7]}\n") == first
    tree = git(root, "rev-parse", "HEAD^{tree}").strip()
    for name in ("no-such-branch", tree):  # a name git does not know, and an object that is not a commit
        with pytest.raises(RuntimeError, match="rev-parse"):
            eq.resolve_commit(root, name)


def test_a_refactor_that_keeps_the_numbers_is_identical(repo):
    root, first = repo
    write(root, "zoo_protocols/shared.py", "# the same number, written differently\nvalue = 1 / 10\n")
    later = commit_all(root, "refactor")
    result = eq.verify(root, first, COMMAND, later)
    assert result.identical, result.summary()
    assert result.compared == ["arrays.npz", "side.json", "table.csv"] and result.unchecked == ["table.md"]
    assert (result.base, result.head) == (first, later)
    assert git(root, "worktree", "list").count("\n") == 1  # the temporary checkouts are gone


def test_a_changed_number_is_found_in_every_file_that_holds_it(repo):
    root, first = repo
    write(root, "zoo_protocols/shared.py", "value = 0.1 + 1e-12\n")
    later = commit_all(root, "a small change")
    result = eq.verify(root, first, COMMAND, later)
    assert not result.identical
    assert [d.split(":")[0] for d in result.differences] == ["arrays.npz", "side.json", "table.csv"]
    assert "column 'test_time_averaging_accuracy', row 0" in result.differences[-1]


def test_uncommitted_edits_take_no_part(repo):
    root, first = repo
    write(root, "zoo_protocols/shared.py", "value = 2.0\n")  # not committed: both runs see 0.1
    assert eq.verify(root, first, COMMAND, "HEAD").identical


def test_bisection_finds_the_commit_that_changed_the_numbers(repo):
    root, first = repo
    commits = []
    for text in ("value = 1 / 10\n", "value = 0.2\n", "value = 2 / 10\n"):  # a refactor, a change, a refactor
        write(root, "zoo_protocols/shared.py", text)
        commits.append(commit_all(root, text))
    assert eq.first_difference(root, first, commits[-1], COMMAND) == commits[1]
    assert eq.first_difference(root, first, commits[0], COMMAND) is None


def test_a_failing_command_raises_with_its_output(repo):
    root, first = repo
    with pytest.raises(RuntimeError, match="bad option"):
        eq.verify(root, first, COMMAND + " --fail")


def test_a_command_that_does_not_write_under_out_is_refused(repo):
    root, first = repo
    with pytest.raises(ValueError, match=r"\{out\}"):
        eq.verify(root, first, "python examples/ex.py --results-dir docs/results")


def test_nothing_compared_verifies_nothing(tmp_path):
    for side in ("a", "b"):
        write(tmp_path, f"{side}/plot.png", "same bytes")
    result = eq.Verification("0" * 40, "1" * 40, COMMAND)
    eq.compare_outputs(tmp_path / "a", tmp_path / "b", result)
    assert result.unchecked == ["plot.png"] and not result.identical


@pytest.mark.parametrize("left, right, found", [
    ({"a": [1.0, np.nan]}, {"a": [1.0, np.nan]}, None),
    ({"a": [1.0, 2.0]}, {"a": [1.0, 2.0 + 1e-15]}, "column 'a', row 1"),
    ({"a": [1.0]}, {"a": [1.0], "b": [2.0]}, "columns"),
    ({"a": [1.0], "seconds": [1.0]}, {"a": [1.0], "seconds": [9.0]}, None),
    ({"a": [1.0]}, {"a": [1.0, 1.0]}, "rows"),
])
def test_csv_comparison(tmp_path, left, right, found):
    pd.DataFrame(left).to_csv(tmp_path / "l.csv", index=False)
    pd.DataFrame(right).to_csv(tmp_path / "r.csv", index=False)
    difference = eq.compare_csv(tmp_path / "l.csv", tmp_path / "r.csv")
    assert (difference is None) if found is None else (found in difference)


def test_json_and_npz_comparison_leave_out_timing_only(tmp_path):
    write(tmp_path, "l.json", json.dumps({"v": [1, {"x": 2, "wall_seconds": 3}]}))
    write(tmp_path, "r.json", json.dumps({"v": [1, {"x": 2, "wall_seconds": 4}]}))
    write(tmp_path, "s.json", json.dumps({"v": [1, {"x": 5, "wall_seconds": 3}]}))
    assert eq.compare_json(tmp_path / "l.json", tmp_path / "r.json") is None
    assert eq.compare_json(tmp_path / "l.json", tmp_path / "s.json") is not None
    np.savez(tmp_path / "l.npz", w=np.array([1.0, np.nan]), seconds=np.array(1.0))
    np.savez(tmp_path / "r.npz", w=np.array([1.0, np.nan]), seconds=np.array(2.0))
    np.savez(tmp_path / "s.npz", w=np.array([1.0, 0.0]), seconds=np.array(1.0))
    assert eq.compare_npz(tmp_path / "l.npz", tmp_path / "r.npz") is None
    assert eq.compare_npz(tmp_path / "l.npz", tmp_path / "s.npz") == "array 'w' differs"


def test_verify_files_gives_the_rows_verified_in_place_of_their_waiver(repo, capsys):
    root, first = repo
    write(root, "zoo_protocols/shared.py", "value = 1 / 10\n")
    commit_all(root, "refactor")
    script = runpy.run_path(str(ROOT / "tools" / "results_manifest.py"))
    rows = {"table.csv": {"file": "table.csv", "commit": first[:12], "waiver": "stale; to regenerate", "verified": ""}}
    updates = script["verify_files"](root, rows, prov.history(root), ["table.csv"], COMMAND)
    head = git(root, "rev-parse", "HEAD").strip()
    assert updates == {"table.csv": {"verified": f"{head[:12]} `{COMMAND}`", "waiver": ""}}
    write(root, "zoo_protocols/shared.py", "value = 0.2\n")
    change = commit_all(root, "a real change")
    write(root, "zoo_protocols/shared.py", "value = 2 / 10\n")
    commit_all(root, "a refactor after it")
    capsys.readouterr()
    assert script["verify_files"](root, rows, prov.history(root), ["table.csv"], COMMAND, bisect=True) is None
    assert f"first commit whose run differs from {first[:12]}'s: {change[:7]} a real change" in capsys.readouterr().out


# -- the seed spread ---------------------------------------------------------------------------

#: a run's test error: a draw of its seed's random numbers (``zoo_protocols/shared.py`` says how the
#: draws are made and where they are centred)
SPREAD_SCRIPT = '''import argparse
from pathlib import Path
import numpy as np
from zoo_protocols.shared import centre, stream
p = argparse.ArgumentParser(); p.add_argument("--seed", type=int); p.add_argument("--results-dir", type=Path)
a = p.parse_args()
a.results_dir.mkdir(parents=True, exist_ok=True)
draw = np.random.default_rng(a.seed + stream).normal()
(a.results_dir / "runs.csv").write_text(f"seed,test_error\\n{a.seed},{centre + draw}\\n")
'''
SPREAD_COMMAND = "python examples/spread.py --seed {seed} --results-dir {out}"


@pytest.fixture
def spread_repo(repo):
    root, _ = repo
    write(root, "zoo_protocols/shared.py", "centre, stream = 20.0, 0\n")
    write(root, "examples/spread.py", SPREAD_SCRIPT)
    return root, commit_all(root, "runs with a seed")


@pytest.mark.parametrize("change, within", [
    ("centre, stream = 20.0, 1000\n", True),  # other draws of the same distribution (a batched sampler)
    ("centre, stream = 23.0, 0\n", False),  # the same draws, moved by three standard deviations
])
def test_a_seed_spread_tells_other_draws_from_a_moved_result(spread_repo, change, within):
    root, first = spread_repo
    write(root, "zoo_protocols/shared.py", change)
    later = commit_all(root, "a change")
    seeds = list(range(10))
    assert not eq.verify(root, first, SPREAD_COMMAND.replace("{seed}", "0"), later).identical
    spread = eq.seed_spread(root, first, SPREAD_COMMAND, seeds, "runs.csv:test_error", head=later)
    rng = lambda offset: [float(np.random.default_rng(s + offset).normal()) for s in seeds]  # noqa: E731
    centre, stream = (float(v) for v in change.split("=")[1].split(","))
    assert spread.values["base"] == pytest.approx([20.0 + v for v in rng(0)]) and spread.values["head"] == pytest.approx([centre + v for v in rng(int(stream))])
    d = spread.difference()
    assert d["difference"] == pytest.approx(np.mean(spread.values["head"]) - np.mean(spread.values["base"]))
    assert d["se"] == pytest.approx(np.sqrt(np.var(spread.values["base"], ddof=1) / 10 + np.var(spread.values["head"], ddof=1) / 10))
    assert spread.within_noise() is within and spread.summary().startswith("within" if within else "BEYOND")
    assert list(spread.frame().columns) == ["commit", "side", "seed", "test_error"] and len(spread.frame()) == 20


@pytest.mark.parametrize("command, metric, message", [
    ("python examples/spread.py --seed 0 --results-dir {out}", "runs.csv:test_error", "seed"),
    (SPREAD_COMMAND, "runs.csv", "file:column"),
    (SPREAD_COMMAND, "table.csv:test_error", "no table.csv"),
    (SPREAD_COMMAND, "runs.csv:accuracy", "no column 'accuracy'"),
])
def test_a_seed_spread_refuses_what_it_cannot_read(spread_repo, command, metric, message):
    root, first = spread_repo
    with pytest.raises(ValueError, match=message):
        eq.seed_spread(root, first, command, [0, 1], metric)


def test_a_command_naming_a_moved_script_runs_where_each_commit_has_it(repo):
    """A script moved out of ``examples/`` (issue 43) with its numbers kept: the check of a
    command naming its new place runs the old commit's script from the old place, and back."""
    root, first = repo
    (root / "reproductions").mkdir()
    git(root, "mv", "examples/ex.py", "reproductions/ex.py")
    later = commit_all(root, "move")
    assert eq.script_at(root, "examples/ex.py") == "reproductions/ex.py"
    for command in (COMMAND, COMMAND.replace("examples/", "reproductions/")):
        result = eq.verify(root, first, command, later)
        assert result.identical, result.summary()
        assert result.compared == ["arrays.npz", "side.json", "table.csv"]
    assert eq.script_at(root, "studies/ex.py") == "studies/ex.py"  # no such move: left as named
