"""Reports how current the committed results in ``docs/results`` are: a report to read, not a
gate. No test fails on what it finds, and a code change never needs a results edit to pass CI.

Three sections, each a list of findings (empty: current):

* **manifest**: every results file has a row in ``MANIFEST.csv`` saying how it was made
  (command, commit, settings, device, threads) and every row names an existing file; results
  whose code or inputs changed after them, with or without a waiver
  (:func:`zoo_protocols.provenance.check_manifest`; needs the git history);
* **claims ledger**: ``claims.csv`` is what ``tools/claims_ledger.py`` computes today from
  the committed files (:func:`zoo_protocols.claims.currency_problems`);
* **reference matrix**: ``reference_matrix.csv`` covers every exported combination with valid
  rows (:func:`zoo_protocols.reference_matrix.coverage_problems`).

    make results-check                              # the report
    python tools/results_check.py --strict          # exit status 1 when a section has findings
    python tools/results_check.py --out report.md   # also written to a file

Each finding names the command that brings it current.
"""

import argparse
from pathlib import Path
from typing import Dict, List, Optional

from pyrozoo import atomic
from zoo_protocols import provenance as prov
from zoo_protocols.cli import run_main

ROOT = Path(__file__).resolve().parents[1]


def manifest_findings(root: Path, verbose: bool = False) -> List[str]:
    hist = prov.history(root)
    result = prov.check_manifest(root, hist=hist, use_history=hist is not None)
    found = [p if not p.startswith("stale") else "stale: " + result.stale[p.split(": ", 1)[1]].describe(hist) for p in result.problems]
    path = prov.manifest_path(root)
    if path.is_file() and path.read_text() != prov.manifest_text(prov.read_manifest(path)):
        found.append(f"{prov.MANIFEST_NAME} is not in its canonical form (sorted, columns in order): python tools/results_manifest.py rewrites it")
    if not result.history_available:
        found.append("staleness not judged: this checkout has no full git history (no git, or a shallow clone)")
    elif verbose:
        found += ["stale, waived: " + result.stale[f].describe(hist) for f in result.waived]
    return found


def ledger_findings(root: Path, verbose: bool = False) -> List[str]:
    from zoo_protocols import claims

    return claims.currency_problems(prov.results_dir(root))


def matrix_findings(root: Path, verbose: bool = False) -> List[str]:
    from zoo_protocols import read_runs
    from zoo_protocols import reference_matrix as rm

    path = prov.results_dir(root) / "reference_matrix.csv"
    if not path.is_file():
        return [f"{path.relative_to(root)} is missing: run python tools/reference_matrix.py"]
    table = read_runs(path, rm.COLUMNS, required=rm.KEY + ["status", "run_status"], missing_ok=False)
    return [f + " (python tools/reference_matrix.py)" for f in rm.coverage_problems(table)]


SECTIONS = {"manifest": manifest_findings, "claims ledger": ledger_findings, "reference matrix": matrix_findings}


def report(root: Path = ROOT, verbose: bool = False) -> Dict[str, List[str]]:
    """``{section: findings}``; a section that cannot be read reports why instead of stopping
    the others."""
    out = {}
    for name, findings in SECTIONS.items():
        try:
            out[name] = findings(root, verbose)
        except Exception as e:  # noqa: BLE001 - a report reports
            out[name] = [f"could not be checked: {type(e).__name__}: {e}"]
    return out


def markdown(sections: Dict[str, List[str]]) -> str:
    lines = ["# Results check", ""]
    for name, findings in sections.items():
        lines.append(f"## {name}: {'current' if not findings else f'{len(findings)} finding(s)'}")
        lines += [f"- {f}" for f in findings]
        lines.append("")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strict", action="store_true", help="exit status 1 when any section has findings")
    parser.add_argument("--verbose", action="store_true", help="also list stale results that have a waiver")
    parser.add_argument("--out", type=Path, default=None, help="also write the report (Markdown) to this file")
    args = parser.parse_args(argv)
    sections = report(ROOT, args.verbose)
    text = markdown(sections)
    print(text)
    if args.out is not None:
        atomic.write_text(args.out, text)
    return 1 if args.strict and any(sections.values()) else 0


if __name__ == "__main__":
    run_main(main)
