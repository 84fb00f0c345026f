"""Deng et al. (2019)'s UCI table: SGHMC, SGHMC-EM and SGHMC-SA, each with and without
simulated annealing ("A-"), on Boston, Yacht, Energy, Wine and Concrete, beside the authors'
published test RMSE.

Three stages, each resumable (its results file is read back and finished work skipped):

1. **Learning rate by validation.** For every (data set, method), each learning rate of
   ``--lr-grid`` trains on 80 % of the training part of split ``--tune-split`` and is scored
   by RMSE on the other 20 % (:meth:`pyrozoo.data.UCISplit.validation`); the test rows are
   never seen. Written to ``uci_sgmcmc_lr.csv``. The authors used one learning rate for every
   data set on raw targets; on the protocol's standardised targets one rate does not fit
   all five (e.g. Yacht, whose noise is ~5 % of the target's sd, needs a larger one than
   Boston), so each method gets its own.
2. **The standard splits.** :func:`zoo_protocols.sweep.sweep` (as ``reproductions/uci_regression.py``)
   runs every method with its chosen rate on ``--splits`` of the standard Hernandez-Lobato &
   Adams splits (``uci_sgmcmc_runs.csv``, one row per run).
3. **The table** (``uci_sgmcmc_table.{csv,md}``) and a plot (``uci_sgmcmc_table.png``):
   mean ± standard error over splits of RMSE and test log-likelihood, the authors' RMSE
   (``zoo_protocols/data/deng2019_uci.csv``), the difference and its z-score, and the
   rank of each method within a data set, ours and theirs.

The authors' protocol differs (stated in the table's notes): random 90/10 splits, raw
targets, the last iterate instead of the posterior average, and for Energy the cooling load
(the standard splits' target is the heating load), so the comparison is of orderings and
magnitudes, not a replication of their splits. File names carry a digest of the settings
that change a run (grid, tuning split, epochs), so a changed setting never resumes stale runs.

    python reproductions/uci_sgmcmc_table.py                    # 20 splits, the five data sets
    python reproductions/uci_sgmcmc_table.py --no-run           # table from the existing runs only
    python reproductions/uci_sgmcmc_table.py --quick            # smoke run (tests)
    python reproductions/uci_sgmcmc_table.py --datasets ./mydata --splits 0-4   # a folder in the UCI layout
    python reproductions/uci_sgmcmc_table.py --data houses.csv --target price --n-splits 5

Besides the paper's data sets, ``--datasets`` takes any folder in the standard UCI layout (its
name under ``--data-dir``, or its path) and ``--data`` a user's CSV or Parquet table
(``--target``, split by ``--splits-by``); the authors' columns are blank for them (absent when
only such data sets are in the table), and the files of a table's runs are named after it.
"""

import argparse
import math
from pathlib import Path

import pandas as pd
import pyro

from pyrozoo import atomic
from pyrozoo.data import UCI_DATASETS, parse_splits
from pyrozoo.reporting import mean_and_stderr, save_figure, save_table, to_markdown
from zoo_protocols import read_runs, uci_sgmcmc
from zoo_protocols.cli import (
    add_common_arguments, add_user_data_arguments, check_uci_datasets, device_from_args, name_list, non_negative_int, own_data_note, positive_int,
    run_main, settings_digest, split_spec, uci_datasets, user_data,
)
from zoo_protocols.sweep import read_results, sweep
from zoo_protocols.methods import method as declaration
from zoo_protocols.config import RunConfig
from zoo_protocols.uci import run_split

DATASETS = ["bostonHousing", "yacht", "energy", "wine-quality-red", "concrete"]
METHODS = ["sghmc", "a-sghmc", "sghmc-em", "a-sghmc-em", "sghmc-sa", "a-sghmc-sa"]
LR_GRID = "2e-6,5e-6,1e-5,2e-5,5e-5,1e-4"
VALIDATION_FRACTION = 0.2
#: thinned posterior samples each run predicts with, in tuning and on the standard splits
NUM_SAMPLES = 100
LR_COLUMNS = ["dataset", "method", "lr", "val_rmse", "val_test_ll"]
#: the authors' readout of every run (the last stored draw), beside the posterior average
LAST_ITERATE_COLUMNS = ("rmse_last", "test_ll_last")
#: the columns that compare with the authors' table, absent when none of its data sets is
PAPER_COLUMNS = ["paper_rmse", "paper_rmse_se", "minus_paper", "z", "paper_rank"]


def paper_table() -> pd.DataFrame:
    return pd.read_csv(uci_sgmcmc.PAPER_TABLE)


def parse_grid(text: str) -> list:
    try:
        grid = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError as e:
        raise ValueError(f"--lr-grid takes comma-separated numbers ({e})") from None
    if not grid or min(grid) <= 0:
        raise ValueError(f"--lr-grid needs positive learning rates, got {text!r}")
    return grid


def stem_of(args) -> str:
    """The files' stem: ``uci_sgmcmc`` (``uci_sgmcmc_<table>`` for a user's table, ``--data``),
    with a digest of the settings that change a run when they are not the defaults."""
    base = "uci_sgmcmc" + (f"_{args.table_name}" if args.table_name else "")
    if args.quick:
        return base + "_quick"
    epochs = args.epochs or uci_sgmcmc.DEFAULTS["epochs"]
    default = (parse_grid(LR_GRID), 0, uci_sgmcmc.DEFAULTS["epochs"], 0)
    settings = (args.grid, args.tune_split, epochs, args.seed)
    return base if settings == default else f"{base}_{settings_digest(settings)}"


def read_tuning(path: Path, missing_ok: bool = True) -> pd.DataFrame:
    """The tuning CSV, checked (a diverged grid point's scores are blank, its key is not)."""
    return read_runs(path, LR_COLUMNS, required=["dataset", "method", "lr"], numeric=["lr", "val_rmse", "val_test_ll"], missing_ok=missing_ok)


def tune(datasets, methods, args, path: Path, loaded: dict) -> pd.DataFrame:
    """Stage 1: validation RMSE of every grid point; appended to ``path`` after every run."""
    rows = read_tuning(path).to_dict("records")
    done = {(r["dataset"], r["method"], float(r["lr"])) for r in rows}
    device = device_from_args(args)
    pyro.enable_validation(False)  # as in zoo_protocols.sweep.sweep: a diverged rate ends as FloatingPointError, not a validation error
    for dataset in datasets:
        split = loaded[dataset].split(args.tune_split).validation(VALIDATION_FRACTION, seed=args.seed)
        for method in methods:
            for lr in args.grid:
                if (dataset, method, lr) in done:
                    continue
                config = RunConfig(epochs=args.epochs, lr=lr, num_samples=NUM_SAMPLES, device=device, seed=args.seed, quick=args.quick)
                try:
                    result = run_split(method, split, config)
                except FloatingPointError as e:  # the sampler's report of a diverged chain: this rate is out
                    print(f"tuning {dataset:18s} {method:11s} lr {lr:<8g} diverged ({e})", flush=True)
                    result = {"rmse": math.nan, "test_ll": math.nan}
                rows.append({"dataset": dataset, "method": method, "lr": lr, "val_rmse": result["rmse"], "val_test_ll": result["test_ll"]})
                print(f"tuning {dataset:18s} {method:11s} lr {lr:<8g} validation rmse {result['rmse']:.4f}", flush=True)
                atomic.write_csv(pd.DataFrame(rows, columns=LR_COLUMNS), path)
    return pd.DataFrame(rows, columns=LR_COLUMNS)


def chosen_rates(tuning: pd.DataFrame, grid) -> pd.DataFrame:
    """The grid point of lowest validation RMSE per (data set, method); a non-finite score
    (a diverged run) never wins."""
    scored = tuning[tuning.lr.isin(grid)].dropna(subset=["val_rmse"])
    best = scored.loc[scored.groupby(["dataset", "method"], sort=False).val_rmse.idxmin()]
    return best.reset_index(drop=True)


def table(runs: pd.DataFrame, rates: pd.DataFrame) -> pd.DataFrame:
    if "rmse_last" not in runs:  # runs written before the last-iterate readout was recorded
        runs = runs.assign(rmse_last=math.nan)
    ours = mean_and_stderr(runs, ["dataset", "method"], ["rmse", "test_ll", "rmse_last"]).rename(columns={"n": "splits"})
    paper = paper_table()[["dataset", "method", "rmse", "rmse_se"]].rename(columns={"rmse": "paper_rmse", "rmse_se": "paper_rmse_se"})
    out = ours.merge(rates[["dataset", "method", "lr"]], on=["dataset", "method"], how="left").merge(paper, on=["dataset", "method"], how="left")
    out["minus_paper"] = out.rmse - out.paper_rmse
    out["z"] = out.minus_paper / (out.rmse_se.pow(2) + out.paper_rmse_se.pow(2)).pow(0.5)
    out["rank"] = out.groupby("dataset").rmse.rank(method="min").astype(int)
    out["rank_last"] = out.groupby("dataset").rmse_last.rank(method="min").astype("Int64")
    out["paper_rank"] = out.groupby("dataset").paper_rmse.rank(method="min").astype("Int64")
    order_d = {d: i for i, d in enumerate(DATASETS)}
    order_m = {m: i for i, m in enumerate(METHODS)}
    out = out.assign(_d=out.dataset.map(order_d), _m=out.method.map(order_m)).sort_values(["_d", "_m"]).drop(columns=["_d", "_m"])
    columns = ["dataset", "method", "lr", "splits", "rmse", "rmse_se", "test_ll", "test_ll_se", "rmse_last", "rmse_last_se", "paper_rmse", "paper_rmse_se",
               "minus_paper", "z", "rank", "rank_last", "paper_rank"]
    if out.paper_rmse.isna().all():  # only a user's data sets: nothing of the authors' to compare with
        columns = [c for c in columns if c not in PAPER_COLUMNS]
    return out[columns].reset_index(drop=True)


def notes(out: pd.DataFrame, args, runs_path: Path, loaded: dict) -> str:
    d = uci_sgmcmc.settings(declaration("sghmc-sa"))
    scale, power, offset = d["omega"]
    best = out.loc[out.groupby("dataset").rmse.idxmin()]
    best_text = "; ".join(f"{r.dataset}: {r.method}" for r in best.itertuples())
    best_last = out.dropna(subset=["rmse_last"])
    best_last = best_last.loc[best_last.groupby("dataset").rmse_last.idxmin()] if not best_last.empty else best_last
    best_last_text = "; ".join(f"{r.dataset}: {r.method}" for r in best_last.itertuples()) or "not recorded"

    paper = "paper_rmse" in out
    own = own_data_note(loaded[name] for name in dict.fromkeys(out.dataset))  # a user's data sets, which the authors did not run
    return "\n\n".join(part for part in [
        f"Measured columns (`rmse`, `test_ll`, mean ± standard error over `splits` standard Hernandez-Lobato & Adams splits, "
        f"original target units): `reproductions/uci_sgmcmc_table.py` (per-split rows in `{runs_path.name}`). Every method: one "
        f"hidden layer of 50 ReLU units, minibatches of {d['batch_size']}, {args.epochs or d['epochs']} epochs, SGHMC momentum "
        f"{d['momentum']}, the posterior average over {NUM_SAMPLES} thinned samples from the last {1 - d['burn_in']:.0%} of the run; "
        f"SSGL prior v1 = {d['v1']}, a = {d['a']}, b = {d['b']}, nu = lambda = {d['nu']}, v0 and tau_0 per data set as in the "
        f"authors' table (set for raw targets: on the standardised ones the hidden layer's v0 and v1 are multiplied by the "
        f"target's sd and its square, which is the authors' prior in these units; the output layer's are as printed), omega_k = {scale:g} * (k + {offset:g})^-{power:g} (SA) or 1 (EM); annealing tau_k = tau_0 * {uci_sgmcmc.ANNEAL_RATE}^k. "
        f"`lr`: the learning rate of lowest validation RMSE among {', '.join(f'{v:g}' for v in args.grid)} (20 % of split "
        f"{args.tune_split}'s training rows held out; `uci_sgmcmc_lr.csv`). `rmse_last`: the same runs read out as the authors "
        f"do, with the last stored draw alone (mean ± standard error over the splits); `rank_last` ranks by it."
        + (" QUICK SMOKE RUN: not a result." if args.quick else ""),
        "`paper_rmse`: Deng et al. (2019), UCI table of the appendix (published, as printed with its ± error). Their protocol: random "
        "90/10 scikit-learn splits (not the standard ones), raw targets, the last iterate at epoch 200, one learning rate for all "
        "data sets; their Energy is the cooling load, the standard splits' is the heating load, so that row compares different "
        "targets. `minus_paper` = ours - theirs; `z` divides it by the two standard errors combined. `rank`: 1 = lowest RMSE "
        "within the data set (ours); `paper_rank` the same in their table, where A-SGHMC-SA ranks first on all five." if paper else "",
        f"Lowest RMSE here: {best_text}; with the last iterate: {best_last_text}." + (f" {own} Not in the authors' table, so v0 = 0.1 and tau_0 = 1 for them." if own else ""),
    ] if part)


def plot(out: pd.DataFrame, results_dir: Path, stem: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(out.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(3.4 * len(datasets), 3.6), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        rows = out[out.dataset == dataset]
        x = range(len(rows))
        ax.errorbar([i - 0.12 for i in x], rows.rmse, yerr=rows.rmse_se, fmt="o", label="measured (standard splits)")
        if "paper_rmse" in rows:
            ax.errorbar([i + 0.12 for i in x], rows.paper_rmse, yerr=rows.paper_rmse_se, fmt="s", label="Deng et al. 2019 (published)")
        ax.set_xticks(list(x))
        ax.set_xticklabels(rows.method, rotation=60, ha="right", fontsize=8)
        ax.set_title(dataset)
        ax.set_ylabel("test RMSE")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, stem, results_dir)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--splits", type=split_spec, default="all", help="split indices, or all (default: every split, 0-19 of the bundled sets)")
    parser.add_argument("--datasets", type=name_list, default=None, help="the paper's five by default (none with --data); any folder in the UCI layout too (its name under --data-dir, or its path; no published numbers)")
    parser.add_argument("--methods", type=name_list, default=",".join(METHODS))
    parser.add_argument("--lr-grid", default=LR_GRID, help="learning rates tried on the validation split, comma-separated")
    parser.add_argument("--tune-split", type=non_negative_int, default=0, help="the standard split whose training rows are divided for validation")
    parser.add_argument("--epochs", type=positive_int, default=None, help=f"epochs per run (default {uci_sgmcmc.DEFAULTS['epochs']}, the authors' ~200)")
    parser.add_argument("--no-run", action="store_true", help="only build the table from the existing tuning and runs files")
    add_common_arguments(parser)
    add_user_data_arguments(parser, tasks=("regression",))
    args = parser.parse_args(argv)
    if args.datasets is None:
        args.datasets = [] if args.data is not None else list(DATASETS)
    try:
        args.grid = parse_grid(args.lr_grid)
    except ValueError as e:
        parser.error(str(e))
    unknown = [m for m in args.methods if m not in uci_sgmcmc.VARIANTS]
    if unknown:
        parser.error(f"unknown method(s) {unknown}; methods: {', '.join(uci_sgmcmc.VARIANTS)}")
    check_uci_datasets(parser, "--datasets", args.datasets, args.data_dir)
    args.table_name = None  # a user's table's, once read (main)
    return args


def main(argv=None):
    args = parse_args(argv)
    own = user_data(args, tasks=("regression",), bundled=UCI_DATASETS)  # a user's table, beside --datasets
    # every data set read and checked before the first run, known by its name
    loaded = uci_datasets(args.datasets, args.data_dir, own)
    args.datasets, args.table_name = list(loaded), None if own is None else own.name
    if args.quick:
        args.datasets, args.splits, args.grid = args.datasets[:1], "0", args.grid[:2]
    results_dir = Path(args.results_dir)
    stem = stem_of(args)
    tuning_path, runs_path = results_dir / f"{stem}_lr.csv", results_dir / f"{stem}_runs.csv"
    if not args.no_run:
        # every split asked for exists, checked before the first run
        for dataset in args.datasets:
            n_splits = loaded[dataset].n_splits
            try:
                parse_splits(args.splits, n_splits)
            except ValueError as e:
                raise ValueError(f"--splits {args.splits}: {dataset}: {e}") from None
            if args.tune_split >= n_splits:
                raise ValueError(f"--tune-split {args.tune_split}: {dataset} has splits 0..{n_splits - 1}")
    if args.no_run:
        if not (tuning_path.exists() and runs_path.exists()):
            raise FileNotFoundError(f"--no-run needs {tuning_path} and {runs_path}; run without --no-run first")
        tuning = read_tuning(tuning_path, missing_ok=False)
    else:
        tuning = tune(args.datasets, args.methods, args, tuning_path, loaded)
    rates = chosen_rates(tuning[tuning.dataset.isin(args.datasets) & tuning.method.isin(args.methods)], args.grid)
    if not args.no_run:
        lr = {(r.dataset, r.method): r.lr for r in rates.itertuples()}
        # split by split over every data set, resuming from the runs file
        splits = parse_splits(args.splits, max(loaded[d].n_splits for d in args.datasets))
        config = RunConfig(epochs=args.epochs, num_samples=NUM_SAMPLES, device=device_from_args(args), seed=args.seed, quick=args.quick, progress=not args.no_progress)
        sweep(args.methods, [loaded[d] for d in args.datasets], splits, runs_path, config=config, settings=lambda dataset, method: {"lr": lr[dataset, method]},
              data_dir=args.data_dir, extra_columns=LAST_ITERATE_COLUMNS)
    runs = read_results(runs_path, missing_ok=False)
    runs = runs[runs.dataset.isin(args.datasets) & runs.method.isin(args.methods)]
    if runs.empty:
        raise SystemExit(f"no runs of {args.methods} in {runs_path}")
    out = table(runs, rates)
    save_table(out, f"{stem}_table", results_dir, title="UCI regression: SG-MCMC-SA and its baselines beside Deng et al. (2019)'s appendix table", notes=notes(out, args, runs_path, loaded))
    print(to_markdown(out))
    print(f"plot: {plot(out, results_dir, stem + '_table')}")
    return out


if __name__ == "__main__":
    run_main(main)
