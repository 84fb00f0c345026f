"""Builds and checks ``docs/results/MANIFEST.csv``, the provenance of every results file.

Examples record their own rows as they write (:mod:`zoo_protocols.provenance`, through
``zoo_protocols.cli.run_main``). This script fills in the rest: for every results file without a row
written by a run, it reconstructs one from what the file and its history say:

* the command, commit and thread count of a provenance line in the file or in the Markdown
  table of its family (``command: `python ...`; commit <hash>; torch ...``, as
  ``tools/reference_matrix.py`` writes), or of the ``provenance`` object of its JSON sidecar
  (``tools/reference_posteriors.py``), with the sidecar's ``settings``;
* otherwise the script that writes such files (:data:`PRODUCERS`) with "arguments not
  recorded", and the commit that last wrote the file (``git log -1 -- <file>``);
* ``depends`` from the producing script's imports (:func:`zoo_protocols.provenance.depends_of`);
  ``created`` from the commit date (a file changed since: its modification time); ``device``
  ``cpu``: no GPU was used for a committed result before issue 23's runbook (those that say
  where they ran say CPU).

Rerunning it is idempotent: rows written by a run are kept (their code ``depends`` refreshed,
the results files they read kept), the backfilled ones are rebuilt (kept as they are in a
checkout without git history), every waiver is kept, and rows of files that are gone are dropped.
``--waive-stale ISSUE`` gives every stale row without a waiver one: that it is to be regenerated
under that issue, and the commits that changed its dependencies since it was written (edit a
row's waiver by hand for a more specific reason; the backfill keeps it).
``--verify FILE ... --command CMD`` runs the short command ``CMD`` (writing under ``{out}``) on
the code of the files' commit and on HEAD's (:mod:`zoo_protocols.equivalence`); when both write the
same numbers, the files' rows get ``verified`` (HEAD and the command) in place of their waiver,
and they count as current until their code changes again. When the numbers differ, nothing is
written: the files must be regenerated (``--bisect`` then names the commit that changed them).

    python tools/results_manifest.py                       # backfill, then report
    python tools/results_manifest.py --check               # report only; exit status 1 on a problem
    python tools/results_manifest.py --waive-stale 23         # waive what is stale today, to regenerate under issue 23
    python tools/results_manifest.py --verify compress_lenet_sparse-vd_lenet300.csv \
        --command "python reproductions/compress_lenet.py --method sparse-vd --arch lenet300 --quick --results-dir {out} --out {out}/runs.csv"
"""

import argparse
import json
import re
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from zoo_protocols import equivalence
from zoo_protocols import provenance as prov
from zoo_protocols.cli import positive_int, run_main

#: which script writes a results file, by its path under docs/results (first match wins; then
#: the example whose name is the longest prefix of the file's name, looked for in
#: ``examples/<folder>/`` for a file in ``docs/results/<folder>/`` and then in ``examples/``, so
#: ``gpu/classify_cnn_fgsm.csv`` is reproductions/classify_cnn.py's)
PRODUCERS = [
    (r"^reference/", "tools/reference_posteriors.py"),
    (r"(^|/)reference_matrix", "tools/reference_matrix.py"),
    (r"(^|/)rdp_\w+_pruning_histogram\.png$", "reproductions/rdp_pruning_histogram.py"),
    (r"(^|/)rdp_\w+_pruning_statistics\.json$", "reproductions/compress_lenet.py"),  # compress_lenet's rdp method (statistics_out)
    (r"(^|/)uci_rdp_comparison\.", "reproductions/uci_rdp_table.py"),
    (r"(^|/)uci_esbo_", "reproductions/uci_esbo_table.py"),
    (r"(^|/)uci_sgmcmc_", "reproductions/uci_sgmcmc_table.py"),
    (r"(^|/)uci_", "reproductions/uci_regression.py"),  # uci_<methods>.csv and _summary
    (r"(^|/)compare_objectives_notebook_", "notebooks/compare_objectives.ipynb"),
    (r"(^|/)compare_baselines_notebook_", "notebooks/compare_objectives_baselines.ipynb"),
    (r"(^|/)runbook_state\.json$", "tools/gpu_runbook.py"),
    (r"(^|/)claims\.", "tools/claims_ledger.py"),  # issue 23's claims ledger
]

#: producers that take no command line of their own: the notebooks run through
#: scripts/execute_notebook.py (README), with the torch threads their own code sets; their
#: settings are their own code (no options)
DOCUMENTED_NOTEBOOKS = ("notebooks/compare_objectives.ipynb", "notebooks/compare_objectives_baselines.ipynb")


def documented_run(notebook: str, root: Path) -> dict:
    threads = prov.declared_threads(root / notebook) if (root / notebook).is_file() else None
    return {"command": f"python scripts/execute_notebook.py {notebook}", "threads": "" if threads is None else str(threads), "settings": {}}

#: the reason --waive-stale gives
WAIVER = "stale: committed before the commits below changed the code it depends on; to regenerate under issue {issue}"
#: a provenance line: command: `python ...`; commit <hash>[ (... modified ...)]; torch <version>
PROVENANCE_LINE = re.compile(r"command: `(?P<command>[^`]+)`; commit (?P<commit>[0-9a-f]{7,40})(?P<modified> \([^)]*modified[^)]*\))?; torch (?P<torch>\S+?),")


def producer_of(name: str, root: Path):
    """The repository-relative script that writes ``name`` (a path under docs/results), or ``None``."""
    for pattern, script in PRODUCERS:
        if re.search(pattern, name):
            return script
    stem, folder = Path(name).name.split(".")[0], Path(name).parent
    # a file of docs/results/controlled/ comes from a study; the others from a reproduction or a tool
    places = [root / "studies"] if folder.as_posix() == "controlled" else [root / "reproductions", root / "tools"]
    for where in places:
        scripts = sorted(where.glob("*.py"), key=lambda p: len(p.stem), reverse=True)
        found = next((p for p in scripts if stem == p.stem or stem.startswith(p.stem + "_")), None)
        if found is not None:
            return found.relative_to(root).as_posix()
    return None


def _family(name: str, directory: Path):
    """The files that may hold ``name``'s provenance: itself (Markdown or JSON), its JSON sidecar,
    then the Markdown tables of its stem and of the stem's prefixes at ``_`` boundaries
    (``reference_matrix_refusals.csv`` -> ``reference_matrix_refusals.md``, ``reference_matrix.md``)."""
    path = directory / name
    out = [path] if path.suffix in (".md", ".json") else []
    out.append(path.with_suffix(".json"))
    parts = path.name.split(".")[0].split("_")
    out += [path.with_name("_".join(parts[:k]) + ".md") for k in range(len(parts), 0, -1)]
    return [p for p in dict.fromkeys(out) if p.is_file()]


def recorded_provenance(name: str, directory: Path) -> dict:
    """What a provenance line or a JSON sidecar of ``name``'s family records (``{}``: nothing)."""
    for path in _family(name, directory):
        if path.suffix == ".json":
            try:
                info = json.loads(path.read_text())
            except ValueError:
                continue
            record = info.get("provenance") if isinstance(info, dict) else None
            if isinstance(record, dict) and record.get("command"):
                commit = str(record.get("commit") or "")[: prov.SHORT_HASH]
                seconds = (info.get("diagnostics") or {}).get("wall_seconds")
                return {
                    "command": record["command"],
                    "commit": (commit + ("+dirty" if record.get("builder_modified_since_commit") else "")) if commit else "",
                    "threads": str(record.get("torch_threads", "")),
                    "settings": info.get("settings") if isinstance(info.get("settings"), dict) else None,
                    "seconds": f"{seconds:.1f}" if isinstance(seconds, (int, float)) else "",
                    "from": path.name,
                }
        else:
            match = PROVENANCE_LINE.search(path.read_text())
            if match:
                return {
                    "command": match["command"],
                    "commit": match["commit"][: prov.SHORT_HASH] + ("+dirty" if match["modified"] else ""),
                    "from": path.name,
                }
    return {}


def _changed_files(root: Path) -> set:
    """docs/results files that differ from HEAD or are untracked (their content is newer than
    their last commit), relative to docs/results."""
    return {path[len("docs/results/"):] for path in prov.changed_paths(root, ["docs/results"]) or ()}


def _mtime_iso(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")


def backfill_row(name: str, root: Path, hist, changed: set) -> dict:
    """A row for ``name`` reconstructed from its provenance records and git (see the module docstring)."""
    directory = prov.results_dir(root)
    producer = producer_of(name, root)
    depends = prov.depends_of(producer, root) if producer else []
    documented = documented_run(producer, root) if producer in DOCUMENTED_NOTEBOOKS else {}
    recorded = {**documented, **recorded_provenance(name, directory)}
    written = hist.last_commit(f"docs/results/{name}") if hist is not None else None
    newer = name in changed or written is None
    command = recorded.get("command") or (f"{producer} (arguments not recorded)" if producer else "unknown (no script writes such a file)")
    if recorded.get("commit"):
        commit = recorded["commit"]
    else:
        commit = "uncommitted" if newer else written[: prov.SHORT_HASH]
    settings = recorded.get("settings")
    if settings is None:
        known = recorded.get("command")
        settings = prov.settings_from_argv(shlex.split(known)[2:]) if known and known.startswith("python ") else {}
    return {
        "file": name,
        "command": command,
        "commit": commit,
        "settings": json.dumps(settings, sort_keys=True, default=str),
        "device": "cpu",
        "threads": recorded.get("threads", ""),
        "seconds": recorded.get("seconds", ""),
        "created": _mtime_iso(directory / name) if newer else hist.dates[written],
        "depends": ";".join(depends),
        "waiver": "",
        "source": "backfill" + (f" ({recorded['from']})" if recorded.get("from") else ""),
        "verified": "",
    }


def _script_of(command: str) -> Optional[str]:
    """The script a ``python <script> ...`` command ran (None for another command). A command
    recorded with notes in words ("merged in the sweep's order") need not parse as a shell line."""
    if not command.startswith("python "):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return words[1] if len(words) > 1 else None


def backfill(root: Path, rows: dict, hist) -> dict:
    """The manifest after a backfill of ``rows`` (not written): every results file present gets
    a row; rows written by a run are kept with their ``depends`` refreshed, the rest rebuilt;
    waivers and verifications are kept; rows of files no longer present are dropped."""
    changed = _changed_files(root) if hist is not None else set()
    out = {}
    for name in prov.results_files(root):
        old = rows.get(name)
        if old is not None and hist is None:
            # without history (a shallow clone) a rebuilt row would lose its commit and date
            row = dict(old)
        elif old is not None and old.get("source") == "run":
            row = dict(old)
            script = _script_of(old["command"])
            if script and (root / script).is_file():  # the code is read again; the results it read stay as recorded
                row["depends"] = ";".join(prov.depends_of(script, root) + prov.code_and_inputs(prov.split_depends(old["depends"]))[1])
        else:
            row = backfill_row(name, root, hist, changed)
        row["waiver"] = old.get("waiver", "") if old else ""
        row["verified"] = old.get("verified", "") if old else ""
        out[name] = row
    return out


def waive_stale(rows: dict, hist, reason: str) -> list:
    """Gives every stale row without a waiver one: ``reason``, then the commits that changed its
    ``depends`` since it was written. Returns the files waived."""
    waived = []
    for name, stale in sorted(prov.staleness(rows, hist).items()):
        if rows[name]["waiver"].strip():
            continue
        commits = list(dict.fromkeys(c for c, _ in stale.changes))
        changes = ", ".join(f"{c[:7]} ({' '.join(p for cc, p in stale.changes if cc == c)})" for c in commits)
        rows[name]["waiver"] = f"{reason} [written at {stale.written[:7]}; changed since: {changes}]"
        waived.append(name)
    return waived


def results_file(value: str) -> str:
    """A file as the manifest lists it: a path under docs/results, relative, not leaving it."""
    path = Path(value.strip())
    if not value.strip() or path.is_absolute() or ".." in path.parts:
        raise argparse.ArgumentTypeError(f"{value!r} is not a file under docs/results as MANIFEST.csv lists it (e.g. uci_bbb.csv, controlled/fgsm_scale.md)")
    return path.as_posix()


def verify_command(value: str) -> str:
    """A short command for --verify: parsable, and writing under {out} (:func:`zoo_protocols.equivalence.command_argv`)."""
    try:
        equivalence.command_argv(value, "out")
    except ValueError as e:  # shlex's unbalanced quotes, or no {out}
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def base_commit(name: str, row: dict, hist) -> str:
    """The commit whose code wrote ``name``: its row's, when the history has it, else the
    file's last commit."""
    recorded = row.get("commit", "").split("+")[0]
    found = hist.commit(recorded) if re.fullmatch(r"[0-9a-f]{7,40}", recorded) else None
    if found is not None:
        return found
    written = hist.last_commit(f"docs/results/{name}")
    if written is None:
        raise ValueError(f"{name} has never been committed: there is nothing to verify")
    return written


def verify_files(root: Path, rows: dict, hist, names, command: str, timeout=None, bisect: bool = False):
    """``--verify``: one :func:`zoo_protocols.equivalence.verify` per distinct commit of ``names``
    (``bisect``: for each that differs, the first commit that changed the numbers,
    :func:`zoo_protocols.equivalence.first_difference`). Returns the rows' new ``verified`` and
    ``waiver`` values by file when every check found the same numbers, else None."""
    unknown = [n for n in names if n not in rows]
    if unknown:
        raise ValueError(f"not in {prov.MANIFEST_NAME}: {unknown} (give paths under docs/results, as its file column does)")
    head = prov.git(root, "rev-parse", "HEAD").strip()
    with equivalence.ShortRuns(root, command, timeout) as runs:  # HEAD's run serves every comparison and the bisection
        results = [runs.compare(base, head) for base in sorted({base_commit(n, rows[n], hist) for n in names})]
        for result in results:
            print(result.summary())
            if bisect and not result.identical:
                first = runs.first_difference(result.base, head)
                print(f"  first commit whose run differs from {result.base[:12]}'s: " + (prov.git(root, "log", "-1", "--format=%h %s", first) or first).strip()[:200])
    if not all(r.identical for r in results):
        return None
    return {name: {"verified": prov.verified_value(head, command), "waiver": ""} for name in names}


def report(result: prov.Report, hist, rows: dict, verbose: bool) -> str:
    lines = [f"{result.listed} files listed in {prov.MANIFEST_NAME}"]
    if not result.history_available:
        lines.append("staleness not checked: this checkout has no full git history (no git, or a shallow clone)")
    else:
        lines.append(f"{len(result.stale)} stale (a dependency changed after the file's last commit): {len(result.waived)} with a waiver, {len(result.unwaived)} without")
    lines += [f"PROBLEM {p}" for p in result.problems]
    if result.unwaived:
        lines += ["  " + result.stale[f].describe(hist) for f in result.unwaived]
    if verbose:
        lines += [f"waived: {result.stale[f].describe(hist)} -- waiver: {rows[f]['waiver']}" for f in result.waived]
        lines += [f"note: {f} has a waiver but is not stale (regenerated since?)" for f in result.needless_waivers]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check the manifest (exit status 1 on a problem); write nothing")
    parser.add_argument("--waive-stale", metavar="ISSUE", type=positive_int, default=None, help="waive every stale row without a waiver, to be regenerated under this issue (the waiver names the commits that made it stale)")
    parser.add_argument("--verbose", action="store_true", help="also list the waived stale files and needless waivers")
    parser.add_argument("--verify", nargs="+", metavar="FILE", type=results_file, default=None, help="files (as listed in the manifest) whose computation to check unchanged since their commit, with --command")
    parser.add_argument("--command", type=verify_command, default=None, help="for --verify: a short run of the files' script that writes under {out}")
    parser.add_argument("--timeout", type=positive_int, default=None, help="for --verify: seconds each of its runs may take")
    parser.add_argument("--bisect", action="store_true", help="for --verify: when the numbers differ, find the first commit that changed them (a bisection of short runs)")
    args = parser.parse_args(argv)
    if (args.verify is None) != (args.command is None):
        parser.error("--verify and --command go together")
    if args.bisect and args.verify is None:
        parser.error("--bisect goes with --verify")
    if args.verify is not None and args.check:
        parser.error("--check writes nothing; --verify writes the rows it verifies")
    root = prov.repo_root()
    path = prov.manifest_path(root)
    hist = prov.history(root)
    if (args.waive_stale is not None or args.verify is not None) and hist is None:
        parser.error("--waive-stale and --verify need the git history (this checkout has none, or a shallow one)")
    updates = {}
    if args.verify is not None:
        # the runs take minutes: they run before the manifest is locked, their rows are written after
        updates = verify_files(root, prov.read_manifest(path), hist, args.verify, args.command, args.timeout, args.bisect)
        if updates is None:
            print("NOT VERIFIED: the numbers differ, or nothing was compared; regenerate these files instead")
            return 1
    if args.check:
        rows = prov.read_manifest(path)
    else:
        def change(rows):
            rows = backfill(root, rows, hist)
            if args.waive_stale is not None:
                print(f"waived {len(waive_stale(rows, hist, WAIVER.format(issue=args.waive_stale)))} stale file(s)")
            for name, values in updates.items():
                rows[name].update(values)
            return rows

        # under the manifest's lock: an example finishing meanwhile waits, and its rows are kept
        rows = prov.update(path, change)
    result = prov.check_manifest(root, rows, hist)
    print(report(result, hist, rows, args.verbose))
    return 1 if result.problems else 0


if __name__ == "__main__":
    run_main(main)
