"""The claims ledger (issue 23): every headline claim of the five source works, with a verdict
computed from the committed results.

Evaluates the claims declared in ``zoo_protocols/claims.py`` against the results files in
``--results-dir`` (default ``docs/results``) and writes there ``claims.csv`` (one row per
claim: source, claim, the paper's value, ours with its interval, verdict, the reason in
words, tolerance, setting, files read) and ``claims.md`` (counts by verdict, then one section
per source work). Nothing is trained; the ledger only reads. A results file, column or row a
claim names that is missing stops it with an error naming the claim, before anything is
written, so a renamed results file cannot silently drop a claim.

    python tools/claims_ledger.py
    python tools/claims_ledger.py --results-dir /tmp/results   # reads and writes there
"""

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

import pandas as pd

from pyrozoo import atomic
from zoo_protocols import claims
from zoo_protocols import provenance as prov
from zoo_protocols.cli import add_common_arguments, run_main

ROOT = Path(__file__).resolve().parents[1]
#: the code the ledger's verdicts depend on (besides the results files)
CODE = ("zoo_protocols/claims.py", "tools/claims_ledger.py")


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def provenance(argv) -> str:
    """Command, commit (and whether the ledger's code differs from it) and date."""
    commit = _git("rev-parse", "HEAD")[:12] or "unknown"
    modified = bool(_git("status", "--porcelain", "--", *CODE))
    return (f"Written by `python tools/claims_ledger.py{''.join(' ' + a for a in argv)}` at commit {commit}"
            f"{' (the ledger code modified since)' if modified else ''} on {datetime.date.today().isoformat()}.")


def stale_evidence(results_dir: Path) -> dict:
    """The results files whose code changed after they were written (neither regenerated nor
    verified since, :func:`zoo_protocols.provenance.staleness`), with the first clause of their
    waiver: a verdict read off them may not be what today's code gives. Empty outside this
    checkout's results folder or without its git history."""
    if results_dir.resolve() != prov.results_dir(ROOT).resolve():
        return {}
    hist = prov.history(ROOT)
    if hist is None:
        return {}
    rows = prov.read_manifest(prov.manifest_path(ROOT))
    return {name: _stale_reason(rows[name], found) for name, found in prov.staleness(rows, hist).items()}


def _stale_reason(row, found: "prov.Stale") -> str:
    """The first clause of the row's waiver, else which code changed since the file was written."""
    waiver = row.get("waiver", "").split(";")[0].split(" [")[0].strip()
    if waiver:
        return waiver
    paths = list(dict.fromkeys(path for _, path in found.changes))
    more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    return f"written at {found.written[:7]}; changed since: {', '.join(paths[:3])}{more}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


RULES = """How to read it. Each claim is one or more comparisons ("parts") of our number, read from the
committed results files listed with it, with the paper's (labelled as the paper's). A part holds,
holds in direction only, or fails: within the stated tolerance of the paper's value (doing better
than the paper holds); an ordering holds when the 95 % intervals do not overlap (a paired
difference: its t-interval excludes 0), in direction only when the order is right but the intervals
overlap or a side is a single run. Verdict: every part holds, reproduced; none, not reproduced;
anything between, partly. A claim tested only in a proxy setting (another data set, network, attack
or reading of the method) is at best partly; a claim no committed result can test is not testable
here, with the reason. Means over several seeds, splits or data sets come with their standard error
and 95 % Student-t interval, and n. Verdicts are computed by `zoo_protocols/claims.py` from the files,
never typed in."""


def markdown(table: pd.DataFrame, argv, stale: dict = None) -> str:
    """The ledger in Markdown; ``stale``: :func:`stale_evidence`, flagged under each claim that reads such a file."""
    stale = stale or {}
    counts = claims.counts(table)
    flagged = [r.id for r in table.itertuples() if isinstance(r.files, str) and any(f in stale for f in r.files.split())]
    out = ["# Claims ledger: the headline claims of the five source works\n", provenance(argv) + "\n",
           "**" + " · ".join(f"{v}: {n}" for v, n in counts.items()) + f"** ({len(table)} claims)\n", RULES + "\n"]
    if flagged:
        out.append(f"{len(flagged)} claims read a results file whose code changed after it was written and that has been neither "
                   f"regenerated nor verified unchanged since (`docs/results/MANIFEST.csv`; each is flagged under its claim, "
                   f"with the reason): {', '.join(flagged)}.\n")
    per_work = [[name] + [int(((table.work == name) & (table.verdict == v)).sum()) for v in claims.VERDICTS] for name in claims.WORKS.values()]
    out.append(_table(["source work", *claims.VERDICTS], per_work))
    for name in claims.WORKS.values():
        rows = table[table.work == name]
        out.append(f"\n## {name}\n")
        out.append(_table(["claim", "source", "in words", "paper value", "verdict"], [[f"[{r.id}](#{r.id})", r.source, r.claim, r.paper_value, f"**{r.verdict}**"] for r in rows.itertuples()]))
        for r in rows.itertuples():
            # the heading is the id alone, so GitHub's and MyST's heading slugs are the id the table links to
            out.append(f"\n### {r.id}\n")
            items = [("Verdict", f"**{r.verdict}**"), ("Source", r.source), ("Claim", r.claim), ("Paper", r.paper_value)]
            if r.our_value:
                items += [("Ours", r.our_value), ("95 % interval", r.interval)]
            items += [("Why", r.evidence)]
            if r.tolerance:
                items.append(("Tolerance", r.tolerance))
            items.append(("Setting", r.setting))
            if isinstance(r.diagnosis, str) and r.diagnosis:
                items.append(("Bug or budget", r.diagnosis))
            if r.files:
                items.append(("Files", ", ".join(f"`{f}`" for f in r.files.split())))
                old = [f for f in r.files.split() if f in stale]
                if old:
                    items.append(("Evidence stale", "; ".join(f"`{f}`: {stale[f]}" for f in old)))
            out.append("\n".join(f"- **{k}:** {v}" for k, v in items) + "\n")
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)  # only --results-dir matters: the ledger reads and writes there
    args = parser.parse_args(argv)
    results_dir = Path(args.results_dir)
    table = claims.ledger(results_dir=results_dir)
    claims.write_csv(table, results_dir / "claims.csv")
    atomic.write_text(results_dir / "claims.md", markdown(table, argv, stale_evidence(results_dir)))
    print(", ".join(f"{v}: {n}" for v, n in claims.counts(table).items()) + f" ({len(table)} claims)")
    for r in table.itertuples():
        print(f"  {r.verdict:<18} {r.id}")
    return table


if __name__ == "__main__":
    run_main(main)
