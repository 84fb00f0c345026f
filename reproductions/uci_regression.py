"""UCI regression benchmark on the standard splits (Hernández-Lobato & Adams 2015 protocol).

For every (dataset, method, split): standardise with the training split's statistics,
train, and report test RMSE and test log-likelihood per example in the original target
units. Writes one CSV row per run and prints (and saves) mean ± standard error over
splits beside the published baselines of ``uci/published_baselines.csv``.

Examples::

    python reproductions/uci_regression.py --method bbb --dataset bostonHousing --splits 0-19
    python reproductions/uci_regression.py --method map,mfvi --dataset all --splits 0-4 --epochs 200
    python reproductions/uci_regression.py --quick          # smoke run used by the tests
    python reproductions/uci_regression.py --method map --dataset mydata --data-dir ~/data   # ~/data/mydata in the UCI layout
    python reproductions/uci_regression.py --method map --data table.csv --target y --splits-by kfold --n-splits 5

Any folder in the standard UCI layout is a data set (``--dataset`` takes its name under
``--data-dir`` or its path), and so is a CSV or Parquet table (``--data``, ``--target``;
``--splits-by`` seed, kfold, column:<name> or files:<folder>). Published baselines appear only
for the bundled data sets.

Methods are registered in ``zoo_protocols/uci_*.py`` (``--list-methods``).
"""

import argparse
import sys
from pathlib import Path

import torch

from pyrozoo import distributed
from pyrozoo.data import UCI_DATASETS, UCIDataset, parse_splits
from pyrozoo.reporting import save_table, to_markdown
from zoo_protocols.cli import add_common_arguments, add_user_data_arguments, device_from_args, name_list, positive_float, positive_int, run_main, split_spec, user_data
from zoo_protocols.sweep import sweep
from zoo_protocols.config import RunConfig
from zoo_protocols.uci import available_methods, summarize


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=name_list, default="bbb", help="method name(s), comma-separated (see --list-methods)")
    parser.add_argument("--dataset", type=name_list, default=None, help=f"data set(s), comma-separated, or 'all' (default bostonHousing): bundled ({', '.join(UCI_DATASETS)}), or any folder in the UCI layout, by its name under --data-dir or its path")
    parser.add_argument("--splits", type=split_spec, default=None, help="split indices, e.g. 0-19, 0,3,5 or all (default: all, 20 for the bundled sets)")
    parser.add_argument("--epochs", type=positive_int, default=None, help="training epochs (default: the method's own)")
    parser.add_argument("--batch-size", type=positive_int, default=None)
    parser.add_argument("--lr", type=positive_float, default=None)
    parser.add_argument("--num-samples", type=positive_int, default=100, help="posterior samples for prediction")
    parser.add_argument("--float64", action="store_true", help="train in double precision")
    parser.add_argument("--out", type=Path, default=None, help="CSV of one row per run (default: <results-dir>/uci_<methods>.csv)")
    parser.add_argument("--resume", action="store_true", help="skip runs already in --out")
    parser.add_argument("--list-methods", action="store_true")
    add_common_arguments(parser)
    add_user_data_arguments(parser, tasks=("regression",))
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
    table = user_data(args, tasks=("regression",))
    if table is not None and args.dataset is not None:
        raise ValueError("give --dataset or --data, not both")
    # a name or path each (UCIDataset reads and checks them below), or the table of --data
    datasets = [table] if table is not None else list(UCI_DATASETS) if args.dataset == ["all"] else args.dataset or ["bostonHousing"]
    args.splits = args.splits or "all"
    if args.quick:
        datasets, args.splits = datasets[:1], "0"
    device = device_from_args(args)
    if distributed.init_from_env(device):  # under torchrun: data-parallel training, one GPU per rank
        device = distributed.rank_device(device)
    stem = "uci_" + "_".join(requested) + ("_quick" if args.quick else "")
    out = args.out or args.results_dir / f"{stem}.csv"
    # every data set is read and its splits checked before the first run
    datasets = [UCIDataset(d, args.data_dir) if isinstance(d, str) else d for d in datasets]
    splits = {}
    for dataset in datasets:
        try:
            splits[dataset.name] = parse_splits(args.splits, dataset.n_splits)
        except ValueError as e:
            raise ValueError(f"--splits {args.splits}: {dataset.name}: {e}") from None
    config = RunConfig(
        epochs=args.epochs, num_samples=args.num_samples, batch_size=args.batch_size, lr=args.lr,
        device=device, dtype=torch.float64 if args.float64 else torch.float32,
        seed=args.seed, quick=args.quick, progress=not args.no_progress,
    )
    # data sets outermost; ``out`` is rewritten after every run, so an interrupted sweep loses
    # nothing (--resume continues it; an unreadable --out is an error, not a result)
    results = sweep(requested, datasets, splits, out, config=config, data_dir=args.data_dir, resume=args.resume, splits_outermost=False)
    if not distributed.is_main():
        return 0  # every rank computed the same results: rank 0 reports them
    results = results[results.dataset.isin([d.name for d in datasets]) & results.method.isin(requested)]
    summary = summarize(results, args.data_dir)
    notes = (
        "Rows labelled 'measured' were produced by `reproductions/uci_regression.py` "
        f"({', '.join(requested)}; splits {args.splits}); mean ± standard error over splits, RMSE and "
        "test log-likelihood per example in the original target units. Rows labelled '(published)' are "
        "copied from `uci/published_baselines.csv` with their sources."
    )
    own = [d.describe() if hasattr(d, "describe") else f"{d.name}: the folder {d.folder} in the UCI layout" for d in datasets if d.name not in UCI_DATASETS]
    if own:
        notes += " Data without published baselines: " + "; ".join(own) + "."
    save_table(summary, stem + "_summary", args.results_dir, title=f"UCI regression: {', '.join(requested)}", notes=notes)
    print()
    print(to_markdown(summary))
    print(f"per-run results: {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
