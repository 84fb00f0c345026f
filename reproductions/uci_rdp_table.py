"""RDP's UCI results beside the published baselines, one row per data set.

Reads the per-split results that ``reproductions/uci_regression.py --method rdp`` writes
(``--runs``, default ``<results-dir>/uci_rdp.csv``) and the published baselines of
``uci/published_baselines.csv``, and writes ``<results-dir>/uci_rdp_comparison.{csv,md}``:
test log-likelihood (mean ± standard error over splits, original units) of our RDP runs,
the published VI, PBP, MC dropout (2016 and the 2018 grid-searched re-run) and RDP (paper)
numbers, whether ours beats VI and PBP, and the gap to the 2018 dropout re-run. The notes
of the table state the training settings the runs used (read from the method's defaults)
and how they differ from the paper's.

    python reproductions/uci_rdp_table.py
    python reproductions/uci_rdp_table.py --runs /tmp/uci_rdp.csv --results-dir /tmp/out
    python reproductions/uci_rdp_table.py --data houses.csv --target price --splits-by kfold --n-splits 5

Runs on a user's data have no published columns. A folder in the UCI layout is found as its
runs name it (under ``--data-dir``, or by path). ``--data`` (with the options its runs were made
with: ``--target``, ``--splits-by``, ...) tabulates the runs on that table alone, in
``uci_rdp_comparison_<name>.{csv,md}``.
"""

import argparse
from pathlib import Path

import pandas as pd

from pyrozoo.data import UCI_DATASETS
from pyrozoo.reporting import format_mean_se, mean_and_stderr, save_table, to_markdown
from zoo_protocols import read_runs
from zoo_protocols.cli import add_common_arguments, add_user_data_arguments, own_data_note, run_main, user_data
from zoo_protocols.uci import published_baselines

PUBLISHED = ["VI", "PBP", "MC dropout (2016)", "MC dropout (grid search 2018)", "RDP (paper)"]


def comparison(runs: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    ours = mean_and_stderr(runs, ["dataset"], ["rmse", "test_ll"]).set_index("dataset")
    rows = []
    # the bundled sets in their order, then a user's own (which have no published columns)
    for dataset in [d for d in UCI_DATASETS if d in ours.index] + [d for d in ours.index if d not in UCI_DATASETS]:
        o = ours.loc[dataset]
        row = {"dataset": dataset, "splits": int(o["n"]), "rdp_test_ll": format_mean_se(o["test_ll"], o["test_ll_se"]), "rdp_rmse": format_mean_se(o["rmse"], o["rmse_se"])}
        values = {}
        for method in PUBLISHED:
            p = published[(published.dataset == dataset) & (published.method == method)]
            if len(p):
                values[method] = float(p.test_ll.iloc[0])
                row[f"{method} (published)"] = format_mean_se(p.test_ll.iloc[0], p.test_ll_se.iloc[0])
        row["beats VI"] = bool(o["test_ll"] > values["VI"]) if "VI" in values else None
        row["beats PBP"] = bool(o["test_ll"] > values["PBP"]) if "PBP" in values else None
        if "MC dropout (grid search 2018)" in values:
            row["minus dropout 2018"] = round(float(o["test_ll"] - values["MC dropout (grid search 2018)"]), 3)
        rows.append(row)
    table = pd.DataFrame(rows)
    # only a user's data sets: nothing published to beat
    return table.drop(columns=[c for c in ("beats VI", "beats PBP") if table[c].isna().all()])


def settings_note(datasets, loaded: dict) -> str:
    import math

    from zoo_protocols import uci_rdp

    d = uci_rdp.settings()
    # the paper's Adam steps per split (400 epochs of minibatches of 5) over ours
    ratios = {name: 400 * math.ceil(0.9 * len(loaded[name]) / 5) / d["steps"] for name in datasets}
    low, high = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
    return (
        "Settings of the measured runs (defaults of `zoo_protocols/uci_rdp.py`): one hidden ReLU layer "
        "(50 units, 100 for protein), double-grouped RDP hidden layer, N(0, 1) mean-field output layer and biases, "
        f"Gamma{tuple(d['precision_prior'])} noise-precision prior, half-Cauchy radius scales tau = {d['local_scale']}, "
        f"vMF direction prior with expected cosine {1 - d['direction_epsilon']:.2g} (posterior initialised at {1 - d['init_direction_epsilon']:.3g}), "
        f"Adam with learning rate {d['lr']} ({d['noise_lr_factor']:g}x for the noise precision's posterior), "
        f"about {d['steps']} steps per split (minibatches of 32, or 256 from 5000 training points), KL warm-up over the first "
        f"{int(100 * d['warmup_fraction'])}% of the epochs, 100 posterior samples for prediction. The paper trains 400 epochs "
        f"with minibatches of 5 (learning rate 1e-3, 50 warm-up epochs): {ratios[low]:.0f}x ({low}) to {ratios[high]:.0f}x ({high}) more steps than these "
        "runs, which the shared two-core CPU of this project could not afford; the numbers are therefore those of a much "
        "shorter training than the paper's."
    )


def splits_note(table: pd.DataFrame, loaded: dict) -> str:
    """Which data sets were run on fewer than their standard splits (20; protein 5)."""
    short = []
    for dataset, splits in zip(table.dataset, table.splits):
        standard = loaded[dataset].n_splits
        if splits < standard:
            short.append(f"{dataset} ({splits} of {standard})")
    if not short:
        return "Every data set was run on all of its standard splits (20; protein-tertiary-structure 5); 'splits' gives the number."
    return (
        "'splits' is the number of standard splits each mean is over. Run on fewer than the standard splits "
        f"(CPU budget): {', '.join(short)}; their standard errors are over those splits only."
    )


def datasets_of(names, own, data_dir, runs_path: Path) -> dict:
    """``{name: data set}`` of the runs' data sets: ``own`` (a user's table, ``--data``) by its
    name, the others as folders in the UCI layout (bundled, under ``data_dir``, or by path)."""
    from pyrozoo.data import UCIDataset

    loaded = {}
    for name in names:
        if own is not None and name == own.name:
            loaded[name] = own
            continue
        try:
            loaded[name] = UCIDataset(name, data_dir)
        except (ValueError, FileNotFoundError):
            raise ValueError(
                f"{runs_path} holds runs on {name!r}, which is neither bundled nor a folder in the UCI layout (under --data-dir {data_dir}, "
                "or at that path); if its runs were on a table, give it as they did: --data <file> --target <column> (and their --splits-by, --n-splits)"
            ) from None
    return loaded


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=None, help="per-split CSV of reproductions/uci_regression.py --method rdp")
    add_common_arguments(parser)
    add_user_data_arguments(parser, tasks=("regression",))
    args = parser.parse_args(argv)
    own = user_data(args, tasks=("regression",), bundled=UCI_DATASETS)  # a user's table whose runs are in --runs
    runs_path = args.runs or Path(args.results_dir) / "uci_rdp.csv"
    runs = read_runs(runs_path, ["dataset", "method", "split", "rmse", "test_ll"], numeric=["split", "rmse", "test_ll"], missing_ok=False)
    runs = runs[runs.method == "rdp"]
    if own is not None:
        runs = runs[runs.dataset == own.name]
    if runs.empty:
        raise SystemExit(f"no rdp runs{'' if own is None else ' on ' + own.name} in {runs_path}")
    loaded = datasets_of(runs.dataset.unique(), own, args.data_dir, runs_path)
    table = comparison(runs, published_baselines(args.data_dir, runs.dataset.unique()))
    published = "beats VI" in table or "beats PBP" in table
    wins_vi = int(table["beats VI"].fillna(False).sum()) if "beats VI" in table else 0
    wins_pbp = int(table["beats PBP"].fillna(False).sum()) if "beats PBP" in table else 0
    notes = "\n\n".join(
        part for part in [
            f"'rdp' columns: measured by `reproductions/uci_regression.py --method rdp` (per-split results in `{runs_path.name}`), "
            "test log-likelihood and RMSE per example in the original target units, mean ± standard error over the splits. "
            "Columns marked '(published)' are test log-likelihoods copied from `uci/published_baselines.csv` with their "
            "sources (the RDP paper's Kin8nm, Power, Protein and Wine entries were computed in normalised units and are not comparable).",
            f"Higher is better. RDP (ours) beats VI on {wins_vi} and PBP on {wins_pbp} of {len(table)} data sets; "
            "'minus dropout 2018' is our mean minus the grid-searched MC-dropout re-run's." if published else "",
            splits_note(table, loaded),
            settings_note(list(table.dataset), loaded),
        ] if part
    )
    own_note = own_data_note(loaded[name] for name in table.dataset)
    if own_note:
        notes += "\n\n" + own_note
    save_table(table, "uci_rdp_comparison" + ("" if own is None else f"_{own.name}"), args.results_dir, title="UCI regression: RDP beside the published baselines (test log-likelihood)", notes=notes)
    print(to_markdown(table))
    return table


if __name__ == "__main__":
    run_main(main)
