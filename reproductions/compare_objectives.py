"""Compare inference methods (prior, guide, objective or kernel) under a matched budget.

Runs every requested method on every data set, seed and budget through
:func:`zoo_protocols.compare.compare` (budget = gradient evaluations, i.e. optimizer or
sampler steps on minibatches of the same size for every method), the zoo's methods beside
the baselines a user would pick instead (Laplace, IVON, deep ensembles: ``zoo_protocols.baselines``),
and writes

* ``<stem>.csv``: one row per run (``dataset, method, seed, budget, rmse_or_error, test_ll,
  seconds``, ..., the calibration curve as JSON, and for MNIST the Fashion-MNIST AUROCs and the
  rotated-MNIST curve); ``--resume`` keeps the runs already there;
* ``<stem>_summary.csv`` / ``.md``: mean ± standard error over seeds per (dataset, method, budget);
* ``<stem>_vs_budget.png`` (RMSE or test error against budget), ``<stem>_test_ll.png`` and
  ``<stem>_calibration.png`` (interval coverage / reliability diagram at the largest budget);
* with MNIST, ``<stem>_shift.png`` (error and ECE against the rotation angle); with gap splits
  (``--datasets concrete,concrete-gap``: the seeds are then also the held-out features),
  ``<stem>_gap.csv`` / ``.md`` (test log-likelihood on standard and gap splits).

Methods that are not (yet) registered for a data set are skipped with a message.

Examples::

    python reproductions/compare_objectives.py --datasets bostonHousing,concrete,mnist --budgets 500,2000 --seeds 0-2
    python reproductions/compare_objectives.py --methods map,mfvi,sgld --datasets energy --budgets 1000
    python reproductions/compare_objectives.py --methods map,mfvi,laplace-ll-kfac,ivon,ensemble --datasets concrete,concrete-gap,mnist
    python reproductions/compare_objectives.py --quick          # smoke run used by the tests
    python reproductions/compare_objectives.py --methods map,mfvi --data table.csv --target y --budgets 1000
    python reproductions/compare_objectives.py --methods map,mfvi --data table.csv --target label --task classification
    python reproductions/compare_objectives.py --methods map,mfvi --data images.npz --budgets 1000

Besides the bundled sets, ``--datasets`` takes any folder in the standard UCI layout (its name
under ``--data-dir``, or its path), and ``--data`` a user's table (regression or
classification, split by ``--splits-by``; ``--seeds`` are its split indices) or ``.npz`` of
images (``x``, ``y``, optionally ``x_test``, ``y_test``; ``--seeds`` are training seeds), which
the MNIST protocol's fully connected network takes whatever the image size.
"""

import argparse
from pathlib import Path

import pyro

from pyrozoo.data import ROTATION_ANGLES
from pyrozoo.reporting import save_figure, save_table, to_markdown
from zoo_protocols.cli import add_common_arguments, add_user_data_arguments, check_uci_datasets, device_from_args, float_list, int_ranges, name_list, parse_seeds, positive_int, positive_int_list, run_main, user_data
from zoo_protocols.compare import BASELINES, DEFAULT_METHODS, GAP_SUFFIX, compare, gap_comparison, plot_calibration, plot_metric_vs_budget, plot_shift, summarize


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", type=name_list, default=",".join(DEFAULT_METHODS + BASELINES), help="registry names and baselines, comma-separated (default: the zoo's methods and the baselines)")
    parser.add_argument("--datasets", type=name_list, default=None, help="UCI data sets (bundled, or folders in the UCI layout by name under --data-dir or path), their gap splits (<name>-gap) and/or mnist, comma-separated (default: bostonHousing,concrete,mnist; none with --data)")
    parser.add_argument("--budgets", type=int_ranges, default="500,2000", help="gradient evaluations per run (>= 1), comma-separated")
    parser.add_argument("--seeds", type=parse_seeds, default="0-2", help="UCI split indices / MNIST seeds, e.g. 0-2")
    parser.add_argument("--uci-batch-size", type=positive_int, default=32)
    parser.add_argument("--mnist-batch-size", type=positive_int, default=128)
    parser.add_argument("--num-samples", type=positive_int, default=100, help="posterior draws for prediction")
    parser.add_argument("--mnist-hidden", type=positive_int_list, default="100", help="hidden layer sizes of the MNIST network, e.g. 300,100")
    parser.add_argument("--mnist-train-size", type=positive_int, default=None, help="first N training images (default: all 60000)")
    parser.add_argument("--mnist-test-size", type=positive_int, default=None, help="first N test images, and as many Fashion-MNIST ones (default: all 10000)")
    parser.add_argument("--angles", type=float_list, default=",".join(map(str, ROTATION_ANGLES)), help="rotations of the MNIST test set, degrees (default: 0,15,...,180)")
    parser.add_argument("--no-ood", action="store_true", help="skip the Fashion-MNIST and rotated-MNIST scores of MNIST runs")
    parser.add_argument("--out", type=Path, default=None, help="per-run CSV (default: <results-dir>/<stem>.csv)")
    parser.add_argument("--stem", default=None, help="file stem (default: compare_objectives[_quick])")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --out and skip them")
    add_common_arguments(parser)
    add_user_data_arguments(parser)
    args = parser.parse_args(argv)
    if 0 in args.budgets:
        parser.error(f"argument --budgets: budgets are >= 1 gradient evaluation, got {args.budgets}")
    if args.datasets is None:
        args.datasets = [] if args.data is not None else ["bostonHousing", "concrete", "mnist"]
    check_uci_datasets(parser, "--datasets", [d[: -len(GAP_SUFFIX)] if d.endswith(GAP_SUFFIX) else d for d in args.datasets if d != "mnist"], args.data_dir)
    return args


def main(argv=None):
    args = parse_args(argv)
    methods, datasets, budgets, seeds = args.methods, args.datasets, args.budgets, args.seeds
    own = user_data(args)  # --data: a user's table or image arrays, beside --datasets
    datasets = datasets + ([own] if own is not None else [])
    mnist_test_size, angles = args.mnist_test_size, args.angles
    if args.quick:
        budgets, seeds, args.num_samples = [8, 16], [0], 10
        args.mnist_train_size, mnist_test_size, angles = 512, 500, [0.0, 90.0]
    stem = args.stem or "compare_objectives" + ("_quick" if args.quick else "")
    out = args.out or args.results_dir / f"{stem}.csv"
    pyro.enable_validation(False)
    runs = compare(
        methods, datasets, budgets, seeds,
        batch_size={"uci": args.uci_batch_size, "mnist": args.mnist_batch_size}, num_samples=args.num_samples,
        mnist_hidden=args.mnist_hidden, mnist_train_size=args.mnist_train_size, mnist_test_size=mnist_test_size, ood=not args.no_ood, rotation_angles=angles,
        device=device_from_args(args), data_dir=args.data_dir, out=out, resume=args.resume, progress=not args.no_progress,
    )
    summary = summarize(runs)
    notes = (
        "Measured by `reproductions/compare_objectives.py` (this repository); mean ± standard error over seeds "
        f"({', '.join(map(str, seeds))}: UCI split indices / MNIST training seeds). `budget`: gradient evaluations "
        "(optimizer or sampler steps on minibatches of the same size for every method; a K-particle objective counts "
        "one per step); runs use whole epochs, so the steps taken exceed the budget by less than one epoch (`steps` "
        "in the per-run CSV). RMSE and test log-likelihood per example in original units (UCI); test error in percent "
        "and test log-likelihood per example (MNIST). `calibration_error`: mean |coverage - nominal| of central "
        "predictive intervals over the nominal levels (UCI), expected calibration error with 10 bins (MNIST). "
        "MNIST runs only: `ood_auroc_entropy` / `ood_auroc_mi`, the AUROC of telling Fashion-MNIST test images from MNIST "
        "ones by the predictive entropy / the mutual information (0.5: chance; one-draw predictives have no mutual "
        f"information, 0.5); `shift_error` / `shift_ece`, test error (percent) and ECE of MNIST rotated by {', '.join(f'{a:g}' for a in angles)} "
        "degrees, averaged over the angles. `<name>-gap` data sets: the gap splits of Foong et al. 2019 (seed = the input "
        "feature whose middle third is held out). Baselines (laplace-*, ivon, ensemble) train under the same budget; an "
        "ensemble's members take the budget's steps each (as a K-particle objective, one evaluation per step). These "
        "budgets are far below the published protocols' (e.g. 40 epochs of UCI training for the standard baselines, "
        "hundreds of epochs for the compression methods): the numbers compare methods at equal short budgets and are "
        "not reproductions of published results."
    )
    if own is not None:
        notes += " Data: " + (own.describe() if hasattr(own, "describe") else f"{own.dataset}: image arrays {args.data}, {len(own.y_train)} training and {len(own.y_test)} test images of shape {'x'.join(map(str, own.input_shape))}, {own.num_classes} classes") + "."
    if args.quick:
        notes += " QUICK smoke configuration: tiny budgets and data subsets; the numbers are meaningless."
    save_table(summary, f"{stem}_summary", args.results_dir, title="Inference methods under a matched budget", notes=notes)
    if len(runs):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figures = [("vs_budget", plot_metric_vs_budget(runs)), ("test_ll", plot_metric_vs_budget(runs, "test_ll")), ("calibration", plot_calibration(runs))]
        if runs["shift"].notna().any():
            figures.append(("shift", plot_shift(runs)))
        for name, fig in figures:
            save_figure(fig, f"{stem}_{name}", args.results_dir)
            plt.close(fig)
    gap = gap_comparison(runs)
    if len(gap):
        save_table(gap, f"{stem}_gap", args.results_dir, title="Standard against gap splits (Foong et al. 2019)", notes="Mean over seeds of the test RMSE and log-likelihood on the standard splits and on the gap splits (seed = held-out feature); test_ll_drop = test_ll - test_ll_gap.")
    print()
    print(to_markdown(summary))
    print(f"per-run results: {out}")
    return runs


if __name__ == "__main__":
    run_main(main)
