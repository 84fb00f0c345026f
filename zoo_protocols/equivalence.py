"""Whether the code changed a result's numbers since the result was written: one short command, run
on the code of the result's commit and on the code of a later one, must write the same tables
(issue 23, item 4).

A result is stale when code it depends on changed after it was committed
(:func:`zoo_protocols.provenance.staleness`). Most such changes are refactors: the architecture step
moved every method into one declaration without touching a number. Regenerating the result
proves nothing more in that case and can cost CPU hours (a 200-epoch LeNet run). A short run
of the same script costs seconds: a few epochs on a subset, or ``--quick``. If the two
commits write the same numbers, bit for bit, the changes in between did not alter the
computation the short run goes through: the same model, prior, guide, objective, schedule,
data pipeline and evaluation, only less of it. That covers the library as well, which
``depends`` leaves out. If they differ, the result has to be regenerated.

The check compares every CSV, JSON and ``.npz`` file the two runs write. It leaves out columns
and keys that are meant to differ (wall-clock times, dates, commits) and lists the files it
could not compare (Markdown and figures render the same tables). Both runs use one thread,
the same data folder (:func:`zoo_protocols.paths.default_data_dir`), and a clean ``git worktree``
of their commit, so uncommitted edits take no part.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Union

import numpy as np
import pandas as pd

from zoo_protocols.paths import default_data_dir

PathLike = Union[str, Path]

#: the placeholder for the run's output folder in a command
OUT = "{out}"
#: parts of a column or key name (split at ``_``, ``-``, spaces) that mark a value allowed to
#: differ between two runs of the same computation: when it ran, for how long, at which commit
TIMING_PARTS = frozenset({"seconds", "minutes", "hours", "elapsed", "wall", "created", "timestamp", "duration", "date", "commit", "provenance"})
#: whole names with that meaning whose parts are too common to list above ("test_time_averaging")
TIMING_NAMES = frozenset({"time"})


def is_timing(name: str) -> bool:
    """Whether a column or key holds a value that may differ between identical computations."""
    name = str(name).strip().lower()
    return name in TIMING_NAMES or bool(TIMING_PARTS & set(re.split(r"[_\-\s\[\]().]+", name)))


@dataclass
class Verification:
    """The outcome of :func:`verify`: ``identical`` when every compared file agrees."""

    base: str  # the result's commit
    head: str  # the commit checked against
    command: str
    differences: List[str] = field(default_factory=list)
    compared: List[str] = field(default_factory=list)
    unchecked: List[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def identical(self) -> bool:
        return bool(self.compared) and not self.differences

    def summary(self) -> str:
        verdict = "identical" if self.identical else ("nothing compared" if not self.compared else "DIFFERENT")
        lines = [f"{verdict}: `{self.command}` at {self.base[:12]} and {self.head[:12]} ({self.seconds:.0f} s)",
                 f"  compared: {', '.join(self.compared) or 'none'}"]
        if self.unchecked:
            lines.append(f"  not compared: {', '.join(self.unchecked)}")
        lines += [f"  {d}" for d in self.differences]
        return "\n".join(lines)


def _git(root: PathLike, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {root}: {done.stderr.strip()}")
    return done.stdout.strip()


def resolve_commit(root: PathLike, commit: str) -> str:
    """The full hash of ``commit`` (a hash, branch, tag or ``HEAD~n``) in the repository at ``root``;
    a name that is not a commit is a ``RuntimeError`` that says so."""
    return _git(root, "rev-parse", f"{commit.strip()}^{{commit}}")


@contextmanager
def worktree(root: PathLike, commit: str) -> Iterator[Path]:
    """A clean checkout of ``commit`` (``git worktree add --detach``) in a temporary folder,
    removed afterwards."""
    parent = Path(tempfile.mkdtemp(prefix="pyrozoo-verify-"))
    tree = parent / commit[:12]
    _git(root, "worktree", "add", "--detach", "--quiet", str(tree), commit)
    try:
        yield tree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=root, capture_output=True)


def command_argv(command: str, out: PathLike) -> List[str]:
    """``command`` as an argument list: ``{out}`` replaced by the output folder, a leading
    ``python`` by this interpreter.

    :raises ValueError: when the command does not write under ``{out}`` (the runs would write
        into their checkouts' results folders, where nothing is compared)."""
    if OUT not in command:
        raise ValueError(f"the command must write its files under {OUT} (e.g. --results-dir {OUT}): {command!r}")
    argv = [token.replace(OUT, str(out)) for token in shlex.split(command)]
    if argv and argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return argv


#: where the scripts of ``examples/`` went (issue 43), as (before, after) folder prefixes: a
#: command names its script where it is at one commit, and runs at another where it was
RELOCATED = (("examples/controlled/", "studies/"), ("examples/", "reproductions/"), ("examples/", "tools/"))


def script_at(tree: Path, script: str) -> str:
    """``script`` (a repository-relative path) as checkout ``tree`` names it: itself when it is
    there, else its place before or after a move of :data:`RELOCATED` that ``tree`` has."""
    if (tree / script).is_file():
        return script
    for before, after in RELOCATED:
        for old, new in ((before, after), (after, before)):
            if script.startswith(old) and (tree / new / script[len(old):]).is_file():
                return new + script[len(old):]
    return script


def run_at(tree: Path, command: str, out: Path, timeout: Optional[float] = None) -> None:
    """Runs ``command`` in checkout ``tree`` on its own code (``PYTHONPATH``), one thread; a
    script that moved (:data:`RELOCATED`) runs from where ``tree`` has it.

    :raises RuntimeError: with the output's end when the command fails or times out."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYROZOO_DATA_DIR": str(default_data_dir())}
    try:
        argv = command_argv(command, out)
        if len(argv) > 1 and argv[0] == sys.executable:
            argv[1] = script_at(tree, argv[1])
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"`{command}` ran past {timeout} s in {tree.name}") from e
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
        raise RuntimeError(f"`{command}` failed (exit {done.returncode}) at {tree.name}:\n" + "\n".join(tail))


def _without_timing(value):
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if not is_timing(k)}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def compare_csv(a: Path, b: Path) -> Optional[str]:
    """The first difference between two CSV tables outside their timing columns (None: equal)."""
    left, right = pd.read_csv(a), pd.read_csv(b)
    left = left[[c for c in left.columns if not is_timing(c)]]
    right = right[[c for c in right.columns if not is_timing(c)]]
    if list(left.columns) != list(right.columns):
        return f"columns {list(left.columns)} vs {list(right.columns)}"
    if len(left) != len(right):
        return f"{len(left)} rows vs {len(right)}"
    for column in left.columns:
        x, y = left[column], right[column]
        same = (x == y) | (x.isna() & y.isna())
        if not bool(same.all()):
            row = int(np.flatnonzero(~same.to_numpy())[0])
            return f"column {column!r}, row {row}: {x.iloc[row]!r} vs {y.iloc[row]!r}"
    return None


def compare_json(a: Path, b: Path) -> Optional[str]:
    left, right = (_without_timing(json.loads(p.read_text())) for p in (a, b))
    return None if left == right else "values differ (timing keys left out)"


def compare_npz(a: Path, b: Path) -> Optional[str]:
    with np.load(a, allow_pickle=False) as left, np.load(b, allow_pickle=False) as right:
        if sorted(left.files) != sorted(right.files):
            return f"arrays {sorted(left.files)} vs {sorted(right.files)}"
        for key in sorted(left.files):
            if is_timing(key):
                continue
            x, y = left[key], right[key]
            if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
                return f"array {key!r} differs"
    return None


#: how each kind of file is compared value by value; other files are listed as not compared
COMPARERS = {".csv": compare_csv, ".json": compare_json, ".npz": compare_npz}


def compare_outputs(old: Path, new: Path, result: Verification) -> None:
    """Fills ``result`` with what the two output folders hold and how they differ."""
    names = lambda d: {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}  # noqa: E731
    before, after = names(old), names(new)
    for name in sorted(before ^ after):
        result.differences.append(f"{name}: written {'only at the result commit' if name in before else 'only at the later commit'}")
    for name in sorted(before & after):
        suffix = Path(name).suffix
        if suffix not in COMPARERS:
            result.unchecked.append(name)
            continue
        result.compared.append(name)
        difference = COMPARERS[suffix](old / name, new / name)
        if difference is not None:
            result.differences.append(f"{name}: {difference}")


class ShortRuns:
    """One short command's outputs by commit: each commit's run happens once (in a clean
    worktree, :func:`run_at`) and is kept in a scratch folder while the object is open, so a
    comparison and a bisection between the same commits share their runs.

    :raises ValueError: at construction, for a command that does not write under ``{out}``."""

    def __init__(self, root: PathLike, command: str, timeout: Optional[float] = None):
        command_argv(command, "out")  # refused before anything is checked out
        self.root, self.command, self.timeout = Path(root), command, timeout
        self._scratch = tempfile.TemporaryDirectory(prefix="pyrozoo-verify-out-")
        self._outputs = {}

    def __enter__(self) -> "ShortRuns":
        return self

    def __exit__(self, *exc) -> None:
        self._scratch.cleanup()

    def resolve(self, commit: str) -> str:
        return resolve_commit(self.root, commit)

    def output(self, commit: str) -> Path:
        """The folder of ``commit``'s run (a full hash), running it the first time."""
        if commit not in self._outputs:
            out = Path(self._scratch.name) / commit
            with worktree(self.root, commit) as tree:
                run_at(tree, self.command, out, self.timeout)
            self._outputs[commit] = out
        return self._outputs[commit]

    def compare(self, base: str, head: str) -> Verification:
        """What the runs at ``base`` and ``head`` write, compared (:class:`Verification`)."""
        base, head = self.resolve(base), self.resolve(head)
        start = time.perf_counter()
        result = Verification(base, head, self.command)
        compare_outputs(self.output(base), self.output(head), result)
        result.seconds = time.perf_counter() - start
        return result

    def first_difference(self, base: str, head: str) -> Optional[str]:
        """The first commit on the ancestry path from ``base`` to ``head`` whose run differs
        from ``base``'s (a bisection: about log2(commits) runs), or None when ``head``'s does
        not. Assumes a single change point; with several, it finds one of them, and a rerun
        from the commit found finds the next."""
        base, head = self.resolve(base), self.resolve(head)
        commits = _git(self.root, "rev-list", "--reverse", "--ancestry-path", f"{base}..{head}").split()
        if not commits or self.compare(base, commits[-1]).identical:
            return None
        lo, hi = -1, len(commits) - 1  # commits[lo] (base when -1) gives base's numbers, commits[hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.compare(base, commits[mid]).identical else (lo, mid)
        return commits[hi]


def verify(root: PathLike, base: str, command: str, head: str = "HEAD", timeout: Optional[float] = None) -> Verification:
    """Runs ``command`` (writing under ``{out}``) on the code of ``base`` and of ``head`` and
    compares what they write (:meth:`ShortRuns.compare`)."""
    with ShortRuns(root, command, timeout) as runs:
        return runs.compare(base, head)


def first_difference(root: PathLike, base: str, head: str, command: str, timeout: Optional[float] = None) -> Optional[str]:
    """:meth:`ShortRuns.first_difference` of ``command`` between ``base`` and ``head``."""
    with ShortRuns(root, command, timeout) as runs:
        return runs.first_difference(base, head)


# -- beyond bit for bit: a change against the seed noise -----------------------------------------

#: the placeholder for a run's seed in a command
SEED = "{seed}"


@dataclass
class SeedSpread:
    """One number of a short command's output (``metric``: ``file:column`` of a one-row CSV)
    over the same seeds at two commits (:func:`seed_spread`). A change that moves a short run's
    numbers (:func:`verify` says DIFFERENT) may only have moved its random draws; the spread says
    whether the difference of the means stands out of the seeds' noise."""

    base: str
    head: str
    command: str
    metric: str
    seeds: List[int]
    values: Dict[str, List[float]]  # base / head -> one value per seed, in the order of seeds
    seconds: float = 0.0

    def frame(self) -> pd.DataFrame:
        """One row per run: ``commit`` (the full hash), ``side`` (base or head), ``seed``, the value."""
        column = self.metric.split(":", 1)[1]
        return pd.DataFrame([{"commit": getattr(self, side), "side": side, "seed": seed, column: value}
                             for side in ("base", "head") for seed, value in zip(self.seeds, self.values[side])])

    def difference(self) -> Dict[str, float]:
        """head minus base: the difference of the means, its standard error (Welch), the
        Welch-Satterthwaite degrees of freedom and the 95 % t-interval."""
        from zoo_protocols.intervals import t_quantile_975

        a, b = np.asarray(self.values["base"], float), np.asarray(self.values["head"], float)
        if min(len(a), len(b)) < 2:
            raise ValueError("a seed spread needs at least two seeds on each side")
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        se = float(np.sqrt(va + vb))
        dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb > 0 else float("inf")
        q = t_quantile_975(None if not np.isfinite(dof) else max(1, int(dof)))  # rounding df down: a wider interval
        diff = float(b.mean() - a.mean())
        return {"base_mean": float(a.mean()), "base_se": float(np.sqrt(va)), "head_mean": float(b.mean()), "head_se": float(np.sqrt(vb)),
                "difference": diff, "se": se, "dof": float(dof), "low": diff - q * se, "high": diff + q * se}

    def within_noise(self) -> bool:
        """Whether the 95 % interval of the difference of the means contains 0."""
        d = self.difference()
        return d["low"] <= 0.0 <= d["high"]

    def summary(self) -> str:
        d = self.difference()
        verdict = "within the seed noise" if self.within_noise() else "BEYOND the seed noise"
        return (f"{verdict}: {self.metric} of `{self.command}` over seeds {self.seeds[0]}-{self.seeds[-1]} ({len(self.seeds)}): "
                f"{d['base_mean']:.4g} ± {d['base_se']:.2g} at {self.base[:12]}, {d['head_mean']:.4g} ± {d['head_se']:.2g} at {self.head[:12]} "
                f"(mean ± s.e.); difference {d['difference']:+.3g}, 95 % interval [{d['low']:+.3g}, {d['high']:+.3g}] ({self.seconds:.0f} s)")


def _metric_parts(metric: str):
    name, sep, column = metric.partition(":")
    if not sep or not name or not column:
        raise ValueError(f"a metric is file:column of a one-row CSV the command writes under {OUT}, e.g. runs.csv:test_error; got {metric!r}")
    return name, column


def read_metric(out: Path, metric: str) -> float:
    """The value of ``metric`` (``file:column``) in a run's output folder: the file must be a CSV
    of one row.

    :raises ValueError: naming the file, for a metric not of that form, a missing file or
        column, or a file of more or fewer than one row."""
    name, column = _metric_parts(metric)
    path = out / name
    if not path.is_file():
        raise ValueError(f"the run wrote no {name} under {OUT} (it wrote {sorted(str(p.relative_to(out)) for p in out.rglob('*') if p.is_file())})")
    table = pd.read_csv(path)
    if column not in table.columns:
        raise ValueError(f"{name} has no column {column!r} (it has {list(table.columns)})")
    if len(table) != 1:
        raise ValueError(f"{name} holds {len(table)} rows; a seed spread reads one value per run (a file of one row)")
    return float(table[column].iloc[0])


def seed_spread(root: PathLike, base: str, command: str, seeds: List[int], metric: str, head: str = "HEAD",
                timeout: Optional[float] = None) -> SeedSpread:
    """Runs ``command`` once per seed (``{seed}`` in it, and ``{out}``) on the code of ``base`` and
    of ``head`` (each in a clean worktree, :func:`run_at`) and collects ``metric`` of every run
    (:func:`read_metric`).

    :raises ValueError: for a command without ``{seed}`` or ``{out}`` (before anything runs)."""
    if SEED not in command:
        raise ValueError(f"the command must take its seed from {SEED} (e.g. --seed {SEED}): {command!r}")
    command_argv(command, "out")
    _metric_parts(metric)
    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError("a seed spread needs at least two seeds")
    commits = {"base": resolve_commit(root, base), "head": resolve_commit(root, head)}
    start = time.perf_counter()
    values = {}
    with tempfile.TemporaryDirectory(prefix="pyrozoo-spread-") as scratch:
        for side, commit in commits.items():
            with worktree(root, commit) as tree:
                values[side] = []
                for seed in seeds:
                    out = Path(scratch) / side / str(seed)
                    run_at(tree, command.replace(SEED, str(seed)), out, timeout)
                    values[side].append(read_metric(out, metric))
    return SeedSpread(commits["base"], commits["head"], command, metric, seeds, values, time.perf_counter() - start)


__all__ = ["OUT", "SEED", "RELOCATED", "script_at", "SeedSpread", "read_metric", "seed_spread", "COMPARERS", "is_timing", "Verification", "worktree", "command_argv", "run_at", "compare_csv", "compare_json", "compare_npz",
           "compare_outputs", "ShortRuns", "verify", "first_difference"]
