"""Compare inference methods (prior, guide, objective or kernel) under a matched budget.

Runs every requested method on every data set, seed and budget through
:func:`recipes.compare.compare` (budget = gradient evaluations, i.e. optimizer or
sampler steps on minibatches of the same size for every method), and writes

* ``<stem>.csv``: one row per run (``dataset, method, seed, budget, rmse_or_error, test_ll,
  seconds``, ..., the calibration curve as JSON); ``--resume`` keeps the runs already there;
* ``<stem>_summary.csv`` / ``.md``: mean ± standard error over seeds per (dataset, method, budget);
* ``<stem>_vs_budget.png`` (RMSE or test error against budget), ``<stem>_test_ll.png`` and
  ``<stem>_calibration.png`` (interval coverage / reliability diagram at the largest budget).

Methods that are not (yet) registered for a data set are skipped with a message.

Examples::

    python examples/compare_objectives.py --datasets bostonHousing,concrete,mnist --budgets 500,2000 --seeds 0-2
    python examples/compare_objectives.py --methods map,mfvi,sgld --datasets energy --budgets 1000
    python examples/compare_objectives.py --quick          # smoke run used by the tests
"""

import argparse
from pathlib import Path

import pyro

from pyrozoo.data import UCI_DATASETS
from pyrozoo.reporting import save_figure, save_table, to_markdown
from recipes.cli import add_common_arguments, device_from_args, int_ranges, name_list, parse_seeds, positive_int, positive_int_list, run_main
from recipes.compare import DEFAULT_METHODS, compare, plot_calibration, plot_metric_vs_budget, summarize


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", type=name_list, default=",".join(DEFAULT_METHODS), help="registry names, comma-separated")
    parser.add_argument("--datasets", type=name_list, default="bostonHousing,concrete,mnist", help="UCI data sets and/or mnist, comma-separated")
    parser.add_argument("--budgets", type=int_ranges, default="500,2000", help="gradient evaluations per run (>= 1), comma-separated")
    parser.add_argument("--seeds", type=parse_seeds, default="0-2", help="UCI split indices / MNIST seeds, e.g. 0-2")
    parser.add_argument("--uci-batch-size", type=positive_int, default=32)
    parser.add_argument("--mnist-batch-size", type=positive_int, default=128)
    parser.add_argument("--num-samples", type=positive_int, default=100, help="posterior draws for prediction")
    parser.add_argument("--mnist-hidden", type=positive_int_list, default="100", help="hidden layer sizes of the MNIST network, e.g. 300,100")
    parser.add_argument("--mnist-train-size", type=positive_int, default=None, help="first N training images (default: all 60000)")
    parser.add_argument("--out", type=Path, default=None, help="per-run CSV (default: <results-dir>/<stem>.csv)")
    parser.add_argument("--stem", default=None, help="file stem (default: compare_objectives[_quick])")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --out and skip them")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if 0 in args.budgets:
        parser.error(f"argument --budgets: budgets are >= 1 gradient evaluation, got {args.budgets}")
    unknown = [d for d in args.datasets if d != "mnist" and d not in UCI_DATASETS]
    if unknown:
        parser.error(f"argument --datasets: unknown data set(s) {unknown}; choose from {', '.join(UCI_DATASETS)} or mnist")
    return args


def main(argv=None):
    args = parse_args(argv)
    methods, datasets, budgets, seeds = args.methods, args.datasets, args.budgets, args.seeds
    mnist_test_size = None
    if args.quick:
        budgets, seeds, args.num_samples = [8, 16], [0], 10
        args.mnist_train_size, mnist_test_size = 512, 500
    stem = args.stem or "compare_objectives" + ("_quick" if args.quick else "")
    out = args.out or args.results_dir / f"{stem}.csv"
    pyro.enable_validation(False)
    runs = compare(
        methods, datasets, budgets, seeds,
        batch_size={"uci": args.uci_batch_size, "mnist": args.mnist_batch_size}, num_samples=args.num_samples,
        mnist_hidden=args.mnist_hidden, mnist_train_size=args.mnist_train_size, mnist_test_size=mnist_test_size,
        device=device_from_args(args), data_dir=args.data_dir, out=out, resume=args.resume, progress=not args.no_progress,
    )
    summary = summarize(runs)
    notes = (
        "Measured by `examples/compare_objectives.py` (this repository); mean ± standard error over seeds "
        f"({', '.join(map(str, seeds))}: UCI split indices / MNIST training seeds). `budget`: gradient evaluations "
        "(optimizer or sampler steps on minibatches of the same size for every method; a K-particle objective counts "
        "one per step); runs use whole epochs, so the steps taken exceed the budget by less than one epoch (`steps` "
        "in the per-run CSV). RMSE and test log-likelihood per example in original units (UCI); test error in percent "
        "and test log-likelihood per example (MNIST). `calibration_error`: mean |coverage - nominal| of central "
        "predictive intervals over the nominal levels (UCI), expected calibration error with 10 bins (MNIST). These "
        "budgets are far below the published protocols' (e.g. 40 epochs of UCI training for the standard baselines, "
        "hundreds of epochs for the compression methods): the numbers compare methods at equal short budgets and are "
        "not reproductions of published results."
    )
    if args.quick:
        notes += " QUICK smoke configuration: tiny budgets and data subsets; the numbers are meaningless."
    save_table(summary, f"{stem}_summary", args.results_dir, title="Inference methods under a matched budget", notes=notes)
    if len(runs):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        for name, fig in (("vs_budget", plot_metric_vs_budget(runs)), ("test_ll", plot_metric_vs_budget(runs, "test_ll")), ("calibration", plot_calibration(runs))):
            save_figure(fig, f"{stem}_{name}", args.results_dir)
            plt.close(fig)
    print()
    print(to_markdown(summary))
    print(f"per-run results: {out}")
    return runs


if __name__ == "__main__":
    run_main(main)
