"""UCI regression benchmark on the standard splits (Hernández-Lobato & Adams 2015 protocol).

For every (dataset, method, split): standardise with the training split's statistics,
train, and report test RMSE and test log-likelihood per example in the original target
units. Writes one CSV row per run and prints (and saves) mean ± standard error over
splits beside the published baselines of ``uci/published_baselines.csv``.

Examples::

    python examples/uci_regression.py --method bbb --dataset bostonHousing --splits 0-19
    python examples/uci_regression.py --method map,mfvi --dataset all --splits 0-4 --epochs 200
    python examples/uci_regression.py --quick          # smoke run used by the tests

Methods are registered in ``pyrozoo/experiments/uci_*.py`` (``--list-methods``).
"""

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterable, List, Optional

import pandas as pd
import pyro
import torch

from pyrozoo import atomic
from pyrozoo.cli import add_common_arguments, device_from_args, name_list, positive_float, positive_int, run_main, split_spec
from pyrozoo.data import UCI_DATASETS, UCIDataset, parse_splits
from pyrozoo.experiments import read_runs
from pyrozoo.experiments.uci import UCIRunConfig, available_methods, run_split, summarize
from pyrozoo.reporting import save_table, to_markdown

RESULT_COLUMNS = ["dataset", "method", "split", "rmse", "test_ll", "train_seconds"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=name_list, default="bbb", help="method name(s), comma-separated (see --list-methods)")
    parser.add_argument("--dataset", type=name_list, default="bostonHousing", help=f"a data set, comma-separated list, or 'all' ({', '.join(UCI_DATASETS)})")
    parser.add_argument("--splits", type=split_spec, default="0-19", help="split indices, e.g. 0-19, 0,3,5 or all")
    parser.add_argument("--epochs", type=positive_int, default=None, help="training epochs (default: the method's own)")
    parser.add_argument("--batch-size", type=positive_int, default=None)
    parser.add_argument("--lr", type=positive_float, default=None)
    parser.add_argument("--num-samples", type=positive_int, default=100, help="posterior samples for prediction")
    parser.add_argument("--float64", action="store_true", help="train in double precision")
    parser.add_argument("--out", type=Path, default=None, help="CSV of one row per run (default: <results-dir>/uci_<methods>.csv)")
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--list-methods", action="store_true")
    add_common_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    methods = available_methods()
    if args.list_methods:
        for name, m in sorted(methods.items()):
            print(f"{name:12s} {m.description}")
        return 0
    requested = args.method
    unknown = [m for m in requested if m not in methods]
    if unknown:
        sys.exit(f"unknown method(s) {unknown}; available: {', '.join(sorted(methods))}")
    datasets = list(UCI_DATASETS) if args.dataset == ["all"] else args.dataset
    for d in datasets:
        if d not in UCI_DATASETS:
            sys.exit(f"unknown dataset {d!r}; choose from {', '.join(UCI_DATASETS)} or 'all'")
    if args.quick:
        datasets, args.splits = datasets[:1], "0"
    pyro.enable_validation(False)
    device = device_from_args(args)
    stem = "uci_" + "_".join(requested) + ("_quick" if args.quick else "")
    out = args.out or args.results_dir / f"{stem}.csv"
    # every data set's splits are checked before the first run, and an unreadable --out is
    # an error, not a result (nor silently overwritten)
    loaded = {name: UCIDataset(name, args.data_dir) for name in datasets}
    splits = {}
    for name, d in loaded.items():
        try:
            splits[name] = parse_splits(args.splits, d.n_splits)
        except ValueError as e:
            raise ValueError(f"--splits {args.splits}: {name}: {e}") from None
    rows = read_runs(out, RESULT_COLUMNS, numeric=["split", "rmse", "test_ll", "train_seconds"]).to_dict("records") if args.resume else []
    done = {(r["dataset"], r["method"], int(r["split"])) for r in rows}

    for dataset_name in datasets:
        dataset = loaded[dataset_name]
        for split_index in splits[dataset_name]:
            split = dataset.split(split_index)
            for method in requested:
                if (dataset_name, method, split_index) in done:
                    continue
                config = UCIRunConfig(
                    epochs=args.epochs, num_samples=args.num_samples, batch_size=args.batch_size, lr=args.lr,
                    device=device, dtype=torch.float64 if args.float64 else torch.float32,
                    seed=args.seed, quick=args.quick, progress=not args.no_progress,
                )
                result = run_split(method, split, config)
                row = {"dataset": dataset_name, "method": method, "split": split_index, **{k: result[k] for k in ("rmse", "test_ll", "train_seconds")}}
                rows.append(row)
                print(f"{dataset_name:28s} {method:10s} split {split_index:2d}  rmse {row['rmse']:.4f}  test_ll {row['test_ll']:.4f}  ({row['train_seconds']:.1f} s)", flush=True)
                # written after every run, so an interrupted sweep loses nothing (--resume continues it)
                atomic.write_csv(pd.DataFrame(rows, columns=RESULT_COLUMNS), out)

    results = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    results = results[results.dataset.isin(datasets) & results.method.isin(requested)]
    summary = summarize(results, args.data_dir)
    notes = (
        "Rows labelled 'measured' were produced by `examples/uci_regression.py` "
        f"({', '.join(requested)}; splits {args.splits}); mean ± standard error over splits, RMSE and "
        "test log-likelihood per example in the original target units. Rows labelled '(published)' are "
        "copied from `uci/published_baselines.csv` with their sources."
    )
    save_table(summary, stem + "_summary", args.results_dir, title=f"UCI regression: {', '.join(requested)}", notes=notes)
    print()
    print(to_markdown(summary))
    print(f"per-run results: {out}")
    return 0


def sweep(methods: Iterable[str], datasets: Iterable[str], splits: str, out: Path, args, run_arguments: Optional[Callable[[str, str], List[str]]] = None):
    """Runs :func:`main` once per (split, data set, method), splits outermost (so an
    interrupted sweep has every data set and method on the splits it finished), appending to
    ``out`` with ``--resume`` semantics: runs already there are skipped. ``args`` carries the
    common options (``seed``, ``device``, ``data_dir``, ``quick``, ``no_progress``);
    ``run_arguments(dataset, method)`` adds per-run ones (e.g. ``--epochs``, ``--lr``). The
    per-call summaries go to a scratch folder: the caller writes its own table."""
    methods, datasets = list(methods), list(datasets)
    if not methods or not datasets:
        raise ValueError(f"nothing to run: methods {methods}, data sets {datasets}")
    scratch = tempfile.mkdtemp(prefix="uci_sweep_")
    common = ["--results-dir", scratch, "--seed", str(args.seed), "--device", args.device]
    common += ["--data-dir", str(args.data_dir)] if args.data_dir else []
    common += ["--quick"] if args.quick else []
    common += ["--no-progress"] if args.no_progress else []
    n_splits = {d: UCIDataset(d, args.data_dir).n_splits for d in datasets}
    for split in parse_splits(splits, max(n_splits.values())):
        for dataset in datasets:
            if split >= n_splits[dataset]:
                continue
            for method in methods:
                extra = run_arguments(dataset, method) if run_arguments else []
                main(["--method", method, "--dataset", dataset, "--splits", str(split), "--out", str(out), "--resume", *extra, *common])


if __name__ == "__main__":
    run_main(main)
