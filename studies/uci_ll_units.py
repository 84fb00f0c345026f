"""Controlled experiment (issue 23, item 2): is "RDP has the best test log-likelihood on 5 of 9
UCI sets" (Oh et al. 2020, Table 1) missed by a bug in pyrozoo, by our budget, or is the
paper's column on another scale?

Our RDP runs (``docs/results/uci_rdp.csv``, written by ``reproductions/uci_regression.py --method
rdp``) score Kin8nm 0.92, Power -2.85, Protein -2.99 and Wine -0.96 nats, within the range of
every baseline in the paper's own table (VI, PBP, Dropout, VMG), where the paper's RDP column
has 2.17, -0.14, 1.38 and -0.45: one to four nats above the best baseline on the sets where
every other method agrees within 0.2 nats. Nothing is trained here; the script reads our
per-split results and the splits' target scales and tests two explanations:

* **ours is off** (a bug or the budget): then our numbers leave the baselines' range as well.
  Tested: ours against the paper's worst and best baseline of each set.
* **the paper's column is on the standardised-target scale**: the authors' evaluation
  (``train_double_uci.py``; ``shared/notes/vmf-rdp.md``, section 1.7) learns the noise on
  standardised targets and adds no ``-log sigma_y`` Jacobian term, so a log-likelihood of
  standardised targets reads ``log sigma_y`` higher than the same fit in original units.
  Tested: ours plus the training split's ``log sigma_y`` (mean over splits) against the
  paper's RDP cell.

**Why this settles it without training.** The change of units is exact (a density of
``y / sigma_y`` is ``sigma_y`` times the density of ``y``), so the second test needs only
our committed per-split log-likelihoods and each split's training standard deviation of
``y``. A cell the paper has far outside every baseline and that neither explanation reaches
is not reachable by any sound model on these splits: a paper issue, not ours to reproduce.

Writes ``<results-dir>/uci_ll_units.{csv,md}`` (one row per data set of Table 1, with a
verdict generated from the numbers)::

    python studies/uci_ll_units.py
    python studies/uci_ll_units.py --quick      # two data sets (used by the tests)
"""

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pyrozoo.data import UCIDataset
from zoo_protocols.cli import run_main
from zoo_protocols.intervals import mean_se
from zoo_protocols.provenance import repo_root
from zoo_protocols.study import study_notes, study_parser, write_study

STEM = "uci_ll_units"
#: Oh et al. 2020, Table 1 (the paper's values, mean; transcribed in shared/notes/vmf-rdp.md):
#: data set -> (RDP, {baseline: value})
PAPER = {
    "bostonHousing": (-2.60, {"VI": -2.90, "PBP": -2.57, "Dropout": -2.46, "VMG": -2.46}),
    "concrete": (-2.61, {"VI": -3.33, "PBP": -3.16, "Dropout": -3.04, "VMG": -3.01}),
    "energy": (-1.18, {"VI": -2.39, "PBP": -2.04, "Dropout": -1.99, "VMG": -1.06}),
    "kin8nm": (2.17, {"VI": 0.90, "PBP": 0.90, "Dropout": 0.95, "VMG": 1.10}),
    "naval-propulsion-plant": (3.05, {"VI": 3.37, "PBP": 3.73, "Dropout": 3.80, "VMG": 2.46}),
    "power-plant": (-0.14, {"VI": -2.89, "PBP": -2.84, "Dropout": -2.80, "VMG": -2.82}),
    "protein-tertiary-structure": (1.38, {"VI": -2.99, "PBP": -2.97, "Dropout": -2.89, "VMG": -2.84}),
    "wine-quality-red": (-0.45, {"VI": -0.98, "PBP": -0.97, "Dropout": -0.93, "VMG": -0.95}),
    "yacht": (-2.36, {"VI": -3.43, "PBP": -1.63, "Dropout": -1.55, "VMG": -1.30}),
}
#: the sets the paper claims as RDP's wins (claim ``oh-uci-wins``)
CLAIMED_WINS = ["concrete", "kin8nm", "power-plant", "protein-tertiary-structure", "wine-quality-red"]
#: nats: a paper cell is "outside the baselines" when it is more than this above the best of
#: them (the largest lead of one baseline over the next in the table is VMG's 0.93 on Energy,
#: so a lead up to a nat is taken as a claim to test, not as a different scale)
OUTLIER = 1.0
#: nats: ours "within the baselines' range" and "matches" the paper's cell within this
MARGIN = 0.25


def rescore(runs: pd.DataFrame, data_dir) -> pd.DataFrame:
    """One row per data set: our test log-likelihood (mean, s.e. over splits) in original units
    and on the standardised-target scale (plus each split's ``log sigma_y``), beside the paper's."""
    rows = []
    for name, group in runs.groupby("dataset", sort=False):
        if name not in PAPER:
            continue
        data = UCIDataset(name, data_dir)
        log_sd = np.array([math.log(data.split(int(k)).y_std) for k in group.split])
        ll = group.test_ll.to_numpy(float)
        standardised = ll + log_sd
        paper_rdp, baselines = PAPER[name]
        worst, best = min(baselines.values()), max(baselines.values())
        mean, se, n = mean_se(ll)
        std_mean = float(standardised.mean())
        rows.append({
            "dataset": name, "splits": n, "claimed_win": name in CLAIMED_WINS,
            "paper_rdp": paper_rdp, "paper_worst_baseline": worst, "paper_best_baseline": best,
            "ours": mean, "ours_se": se, "log_sigma_y": float(log_sd.mean()), "ours_standardised": std_mean,
            "paper_minus_ours": paper_rdp - mean, "paper_minus_ours_standardised": paper_rdp - std_mean,
            "paper_outside_baselines": paper_rdp > best + OUTLIER,
            "ours_within_baselines": worst - MARGIN <= mean <= best + MARGIN,
            "standardised_matches_paper": abs(paper_rdp - std_mean) <= MARGIN,
        })
    return pd.DataFrame(rows)


def verdict(table: pd.DataFrame) -> str:
    wins = table[table.claimed_win]
    outside = wins[wins.paper_outside_baselines]
    ours_in = outside[outside.ours_within_baselines]
    matched = outside[outside.standardised_matches_paper]
    unexplained = outside[~outside.standardised_matches_paper]
    parts = [
        f"{len(outside)} of the {len(wins)} claimed wins are paper cells more than {OUTLIER:g} nat above the best baseline of the paper's own table "
        f"({', '.join(f'{r.dataset} {r.paper_rdp:+.2f} vs {r.paper_best_baseline:+.2f}' for r in outside.itertuples()) or 'none'})",
        f"our RDP lies within the baselines' range (+-{MARGIN}) on {len(ours_in)} of them ({', '.join(f'{r.dataset} {r.ours:+.2f}' for r in ours_in.itertuples()) or 'none'})",
        f"on the standardised-target scale ours matches the paper's cell (within {MARGIN}) on {len(matched)} of them ({', '.join(f'{r.dataset} {r.ours_standardised:+.2f} vs {r.paper_rdp:+.2f}' for r in matched.itertuples()) or 'none'})",
    ]
    if len(unexplained):
        parts.append("no change of units explains " + ", ".join(f"{r.dataset} ({r.paper_rdp:+.2f}; ours standardised {r.ours_standardised:+.2f})" for r in unexplained.itertuples()))
    inside = wins[~wins.paper_outside_baselines]
    if len(inside):
        parts.append("the claimed wins inside the baselines' range are judged in the ledger as they stand: " + ", ".join(f"{r.dataset} paper {r.paper_rdp:+.2f}, ours {r.ours:+.2f}" for r in inside.itertuples()))
    if len(outside) and len(ours_in) == len(outside):
        head = (f"A PAPER ISSUE FOR {len(outside)} OF THE {len(wins)} CLAIMED WINS, NOT A BUG: where the paper's RDP wins are far "
                "outside every baseline, our RDP sits with the baselines, as any sound model on these splits does")
    elif len(outside):
        head = "UNDECIDED: some of the paper's outlying cells are not matched by ours within the baselines' range"
    else:
        head = "NO OUTLYING CELL: the claimed wins lie within the baselines' range and are judged as they stand"
    return head + ". " + "; ".join(parts) + "."


def parse_args(argv=None):
    parser = study_parser(__doc__, threads=False)
    parser.add_argument("--runs", type=Path, default=None, help="per-split RDP results (default: <repo>/docs/results/uci_rdp.csv)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    root = repo_root()
    runs_path = args.runs or root / "docs" / "results" / "uci_rdp.csv"
    runs = pd.read_csv(runs_path)
    runs = runs[runs.method == "rdp"]
    if args.quick:
        runs = runs[runs.dataset.isin(["power-plant", "yacht"])]
    if runs.empty:
        raise ValueError(f"{runs_path} holds no rdp rows: run reproductions/uci_regression.py --method rdp first")
    table = rescore(runs, args.data_dir)
    text = verdict(table)
    script = "studies/uci_ll_units.py"
    setting = (
        f"Setting: our RDP test log-likelihoods per split from {runs_path.name} (the standard splits; mean and s.e. over "
        "them), in original units as pyrozoo computes them (the predictive mixture over posterior draws, noise mapped back "
        "by sigma_y, the -log sigma_y Jacobian included); ours_standardised = ours + log sigma_y of each split's training "
        "targets (the same fit scored on standardised targets, the authors' evaluation). paper_* are the paper's Table 1 "
        f"values (labelled as the paper's; shared/notes/vmf-rdp.md). A paper cell is outside the baselines {OUTLIER:g} nat or more above "
        f"the best of them (the largest lead in the table among the baselines: 0.93, VMG on Energy); ours is within their range, "
        f"or matches, within {MARGIN} nats."
    )
    notes = study_notes(text, setting, script, [], time.perf_counter() - started)
    return write_study(table, STEM, args.results_dir, title="Controlled experiment: on which scale is the paper's RDP UCI column?", verdict=text, notes=notes, shown=[table])


if __name__ == "__main__":
    run_main(main)
