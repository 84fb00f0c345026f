"""Controlled experiment (issue 23, item 4): did the code change between two commits move a
result, or only its random draws?

``tools/results_manifest.py --verify`` runs a result's short command on the code of the
result's commit and on HEAD's and asks for the same numbers, bit for bit. When they differ the
question is still open: a change that only reorders or batches random draws (one sampler call
for a whole layer instead of one per row) gives other numbers from the same distribution. This
script settles it by the seeds: the short command runs once per seed on each commit (each in a
clean worktree, one thread; :func:`zoo_protocols.equivalence.seed_spread`), and one number of each
run is compared. The change is within the seed noise when the 95 % t-interval (Welch) of the
difference of the two means contains 0; otherwise it moved the result, and the result must be
regenerated before it can stand for the current code.

Writes ``<results-dir>/<stem>.csv`` (one row per run: commit, side, seed, value) and
``<stem>.md`` (the verdict, the means and the interval)::

    python studies/code_change_seed_spread.py --base 6e34894 \\
        --command "python reproductions/compress_lenet.py --method rdp --arch lenet5 --quick --epochs 2 --seed {seed} --results-dir {out} --out {out}/runs.csv" \\
        --metric runs.csv:test_error --seeds 0-9 --stem rdp_lenet5_quick_since_6e34894
"""

import argparse
from pathlib import Path

import pandas as pd

from pyrozoo.reporting import save_table, to_markdown
from zoo_protocols.cli import DEFAULT_RESULTS_DIR, int_ranges, run_main
from zoo_protocols.equivalence import seed_spread
from zoo_protocols.provenance import provenance_line, repo_root

SCRIPT = "studies/code_change_seed_spread.py"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit of the result (a hash or any name git resolves)")
    parser.add_argument("--head", default="HEAD", help="the later commit (default: HEAD)")
    parser.add_argument("--command", required=True, help="the short command, with {seed} and {out} (where it writes)")
    parser.add_argument("--metric", required=True, help="FILE:COLUMN of a one-row CSV the command writes under {out}")
    parser.add_argument("--seeds", type=int_ranges, default=list(range(10)), help="seeds, e.g. 0-9 (default) or 0,3,5")
    parser.add_argument("--stem", required=True, help="the name of the files written")
    parser.add_argument("--timeout", type=float, default=None, help="seconds one run may take")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR / "controlled", help="where the files are written (default: %(default)s)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    spread = seed_spread(repo_root(), args.base, args.command, args.seeds, args.metric, head=args.head, timeout=args.timeout)
    d = spread.difference()
    means = pd.DataFrame([
        {"side": "base", "commit": spread.base[:12], "mean": d["base_mean"], "se": d["base_se"], "n": len(spread.seeds)},
        {"side": "head", "commit": spread.head[:12], "mean": d["head_mean"], "se": d["head_se"], "n": len(spread.seeds)},
        {"side": "head - base", "commit": "", "mean": d["difference"], "se": d["se"], "n": len(spread.seeds)},
    ])
    summary = spread.summary()
    notes = (
        f"Verdict: {summary}.\n\n{to_markdown(means, floatfmt='.4g')}\n\n"
        f"95 % interval of the difference: Welch's t with {d['dof']:.1f} degrees of freedom (rounded down). Each run in a clean "
        "worktree of its commit, one thread, the same data folder; the seed is the command's own --seed.\n\n"
        + provenance_line(SCRIPT, ["zoo_protocols/equivalence.py"], spread.seconds)
    )
    print(summary)
    save_table(spread.frame(), args.stem, args.results_dir, title=f"Seed spread of {args.metric} across a code change", notes=notes)
    return spread


if __name__ == "__main__":
    run_main(main)
