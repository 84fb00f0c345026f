"""Controlled experiment (issue 23, item 2): does our pruning threshold explain why RDP's LeNet-5
keeps more units than Oh et al. (2020, Table 2)'s 4-7-110-66?

The claims ``oh-lenet5`` and ``oh-lenet5-vs-bc`` compare the FLOPs and parameters of our
200-epoch run with the paper's. The run prunes every group at a threshold on the exact log
posterior mode of each unit's radius (by default at the widest gap of each layer's histogram;
a fixed one when asked), while the authors pick a threshold per layer from histograms
(``shared/notes/vmf-rdp.md``, section 1.8). Nothing is trained here; the script reads the
per-unit statistics the run stored (``rdp_lenet5_e200_pruning_statistics.json``, written by
``reproductions/compress_lenet.py``) and asks, per layer:

* where the statistic's largest gap lies (the paper's Fig. 7 shows two clusters per layer: the
  units the posterior switched off, at the prior, and the ones it keeps), and whether our
  threshold falls inside it: then every threshold in the gap gives the same architecture;
* how many units the upper cluster holds against the paper's count, and which threshold would
  keep the paper's count: a threshold above the gap cuts into the cluster of units the
  posterior keeps, which a histogram reader would not choose.

**Why this settles the threshold question without training.** The architecture is a function
of the statistics and the thresholds alone. If our threshold lies in the gap and the upper
cluster holds more units than the paper keeps, no threshold read off these histograms gives
the paper's architecture: the difference is in what training left on, not in where we cut.

Writes ``<results-dir>/rdp_thresholds.{csv,md}`` (one row per layer, verdict generated from the
numbers)::

    python studies/rdp_thresholds.py
    python studies/rdp_thresholds.py --statistics other_statistics.json
"""

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pyrozoo.compression.radial_directional import widest_gap
from zoo_protocols.cli import run_main
from zoo_protocols.provenance import repo_root
from zoo_protocols.study import study_notes, study_parser, write_study

STEM = "rdp_thresholds"
#: the layers of LeNet-5-Caffe's architecture string (Louizos et al. 2017's units: conv1's and
#: conv2's filters, fc1's inputs and units), each with the grouping whose kept count it is, and
#: Oh et al. 2020, Table 2's count (the paper's: 4-7-110-66)
LAYERS = [
    ("conv1 filters", "conv2.weight.column", 4),
    ("conv2 filters", "conv2.weight.row", 7),
    ("fc1 inputs", "fc1.weight.column", 110),
    ("fc1 units", "fc2.weight.column", 66),
]


def layer_rows(stats: dict) -> pd.DataFrame:
    """Per layer: our threshold and kept count, the statistic's largest gap, the upper cluster's
    size, and the threshold that would keep the paper's count."""
    rows = []
    for layer, grouping, paper in LAYERS:
        g = stats["groupings"][grouping]
        values = np.sort(np.asarray(g["values"], dtype=float))[::-1]  # descending: kept units first
        threshold = float(g["threshold"])
        low, high = widest_gap(values)
        upper = int((values >= high).sum())
        # the threshold keeping exactly the paper's count: midway between its last kept and first cut unit
        if 0 < paper < len(values):
            paper_threshold = float(0.5 * (values[paper - 1] + values[paper]))
        else:
            paper_threshold = float("nan")
        rows.append({
            "layer": layer, "grouping": grouping, "units": len(values), "threshold": threshold,
            "kept": int((values > threshold).sum()), "paper_kept": paper,
            "gap_low": low, "gap_high": high, "gap_width": high - low,
            "threshold_in_gap": bool(low < threshold < high), "upper_cluster": upper,
            "threshold_for_paper_count": paper_threshold,
            "paper_threshold_above_gap_by": paper_threshold - high if paper < upper else float("nan"),
        })
    return pd.DataFrame(rows)


def _gap_cut_change(table: pd.DataFrame) -> str:
    """What cutting every layer at its largest gap does to the run's architecture, in units."""
    ours, at_gaps = int(table.kept.sum()), int(table.upper_cluster.sum())
    if list(table.kept) == list(table.upper_cluster):
        return "read off the histograms, a cut at each layer's largest gap gives the run's own architecture"
    change = f"{ours - at_gaps} fewer" if at_gaps <= ours else f"{at_gaps - ours} more"
    return (f"read off the histograms, a cut at each layer's largest gap keeps {change} of the run's {ours} units "
            f"(gaps {table.gap_width.min():.2g} to {table.gap_width.max():.2g} nats wide)")


def verdict(table: pd.DataFrame) -> str:
    ours = "-".join(str(k) for k in table.kept)
    at_gaps = "-".join(str(k) for k in table.upper_cluster)
    paper = "-".join(str(k) for k in table.paper_kept)
    fewer = table[table.paper_kept < table.kept]  # the layers where the paper keeps fewer units than we do
    inside = fewer[fewer.paper_kept < fewer.upper_cluster]  # ... fewer than the upper cluster holds
    thresholds = sorted(set(float(t) for t in table.threshold))
    rule = f"one threshold of {thresholds[0]:g} nats" if len(thresholds) == 1 else "the run's thresholds (" + ", ".join(
        f"{r.layer} {r.threshold:+.2f}" for r in table.itertuples()) + " nats)"
    parts = [
        f"cutting every layer at its statistic's largest gap gives {at_gaps}, against ours at {rule} {ours} "
        f"and the paper's {paper}; our threshold lies in that gap in {int(table.threshold_in_gap.sum())} of {len(table)} layers "
        "(gaps: " + ", ".join(f"{r.layer} {r.gap_low:+.2f} to {r.gap_high:+.2f} nats" for r in table.itertuples()) + ")",
    ]
    if len(inside):
        parts.append("the paper's counts need thresholds inside the cluster of kept units ("
                     + ", ".join(f"{r.layer}: {r.paper_kept} of {r.upper_cluster}, {r.threshold_for_paper_count:+.2f} nats, "
                                 f"{r.paper_threshold_above_gap_by:.2f} above the gap" for r in inside.itertuples()) + ")")
    if len(fewer) and len(inside) == len(fewer):
        head = (f"THE THRESHOLD CANNOT REACH THE PAPER'S COUNTS: {_gap_cut_change(table)}; where the paper keeps fewer "
                "units, its counts lie inside the cluster above the gap, so what remains is in training (the run's recipe, "
                "one seed), not in where we cut")
    elif len(fewer):
        head = "PARTLY THE THRESHOLD: in some layers a cut at the histogram's gap reaches the paper's count"
    else:
        head = "NO DIFFERENCE: we keep no more units than the paper in any layer"
    return head + ". " + "; ".join(parts) + "."


def parse_args(argv=None):
    parser = study_parser(__doc__, threads=False)
    parser.add_argument("--statistics", type=Path, default=None,
                        help="per-unit pruning statistics (default: <repo>/docs/results/rdp_lenet5_e200_pruning_statistics.json)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    path = args.statistics or repo_root() / "docs" / "results" / "rdp_lenet5_e200_pruning_statistics.json"
    stats = json.loads(Path(path).read_text())
    missing = [g for _, g, _ in LAYERS if g not in stats.get("groupings", {})]
    if missing:
        raise ValueError(f"{path} has no statistics for {missing}: it must come from reproductions/compress_lenet.py --method rdp --arch lenet5")
    table = layer_rows(stats)
    text = verdict(table)
    script = "studies/rdp_thresholds.py"
    setting = (
        f"Setting: the per-unit statistics of {Path(path).name} ({stats.get('statistic', '')}; test error {stats.get('test_error')} %, "
        f"architecture {stats.get('pruned_architecture')}); a layer's units as in Louizos et al. (2017)'s architecture strings. "
        "gap_low / gap_high: the statistic's values on either side of its largest gap (nats); upper_cluster: the units above it; "
        "threshold_for_paper_count: the threshold that keeps Oh et al. (2020, Table 2)'s count (the paper's 4-7-110-66), "
        "paper_threshold_above_gap_by: how far it lies above the gap (inside the kept cluster)."
    )
    notes = study_notes(text, setting, script, ["reproductions/compress_lenet.py"], time.perf_counter() - started)
    return write_study(table, STEM, args.results_dir, title="Controlled experiment: does the threshold explain RDP's LeNet-5 architecture?", verdict=text, notes=notes, shown=[table])


if __name__ == "__main__":
    run_main(main)
