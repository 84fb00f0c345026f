"""studies/code_change_seed_spread.py on a throwaway repository: a change that only
draws other random numbers is within the seed noise, and the files say so with the runs."""

import pandas as pd

from zoo_protocols import provenance as prov
from tests.runner import STUDIES, run_example
from tests.zoo_protocols.git_repos import commit_all, git, write
from tests.zoo_protocols.test_equivalence import SPREAD_COMMAND, SPREAD_SCRIPT

SCRIPT = STUDIES / "code_change_seed_spread.py"


def test_other_draws_of_the_same_runs_are_written_up_as_within_the_noise(tmp_path, monkeypatch):
    monkeypatch.setenv("PYROZOO_DATA_DIR", str(tmp_path))
    root = tmp_path / "repo"
    write(root, "zoo_protocols/__init__.py", "")
    write(root, "zoo_protocols/shared.py", "centre, stream = 20.0, 0\n")
    write(root, "examples/spread.py", SPREAD_SCRIPT)
    git(root, "init", "-q")
    base = commit_all(root, "first")
    write(root, "zoo_protocols/shared.py", "centre, stream = 20.0, 1000\n")
    head = commit_all(root, "batched draws")
    monkeypatch.setattr(prov, "repo_root", lambda: root)
    out = tmp_path / "results"
    run_example(SCRIPT, "--base", base[:7], "--command", SPREAD_COMMAND, "--metric", "runs.csv:test_error", "--seeds", "0-5",
                "--stem", "spread", "--results-dir", out, monkeypatch=monkeypatch)
    runs = pd.read_csv(out / "spread.csv")
    assert list(runs.side) == ["base"] * 6 + ["head"] * 6 and set(runs.commit) == {base, head} and list(runs.seed) == list(range(6)) * 2
    text = (out / "spread.md").read_text()
    assert "Verdict: within the seed noise" in text and "Provenance:" in text and head[:12] in text
