"""Joint vs marginal inference for a BNN with a hierarchical prior (Molchanov 2022, Eqs. 17-20,
Theorem 3, Figure 6) on a UCI regression data set.

Prior: ``w | λ ~ N(0, 1/λ)``, ``λ ~ Gamma(a, b)``, one precision per weight
(:class:`~pyrozoo.models.NormalGammaPrior`); Gaussian likelihood with a Gamma prior on the
noise precision (the UCI protocol). Methods (the declarations ``normal-gamma-joint``,
``normal-gamma-marginal`` and ``dsivi`` of ``zoo_protocols/methods.py``; the protocol is
``zoo_protocols/dsivi_hierarchical.py``):

* ``joint``: λ kept as latent variables with LogNormal posteriors (mean-field), trained with
  the joint bound (Eq. 18; all KLs in closed form);
* ``marginal``: λ integrated out, the prior of ``w`` semi-implicit, trained with the DSIVI
  bound from ``K2`` draws of λ (Eq. 19) and the same mean-field Normal posterior over ``w``;
* ``marginal+SI``: the same marginal bound with a semi-implicit (hypernetwork) posterior,
  ``K1`` guide draws.

Every trained posterior ``q(w)`` is scored by the same quantity, the *marginal* ELBO: exactly
(the Normal–Gamma marginal is a Student-t) for mean-field posteriors, and by DSIVI lower and
sandwich upper bounds with large ``K``; plus test RMSE and log-likelihood. Theorem 3 predicts a
higher marginal ELBO (a posterior closer to the true one) for the marginal objective.

Examples::

    python reproductions/dsivi_hierarchical_bnn.py --dataset concrete --splits 0-4 --epochs 500
    python reproductions/dsivi_hierarchical_bnn.py --dataset mydata --data-dir ~/data          # ~/data/mydata in the UCI layout
    python reproductions/dsivi_hierarchical_bnn.py --data houses.csv --target price --splits-by kfold --n-splits 5

Any folder in the standard UCI layout is a data set (``--dataset`` takes its name under
``--data-dir`` or its path), and so is a CSV or Parquet table (``--data``, ``--target``;
``--splits-by`` seed, kfold, column:<name> or files:<folder>); the files are named after it.
"""

import argparse
import math
from pathlib import Path

import pandas as pd
import torch

from pyrozoo.data import UCI_DATASETS, UCIDataset, parse_splits
from pyrozoo.reporting import mean_and_stderr, save_figure, save_table
from zoo_protocols.cli import add_common_arguments, add_user_data_arguments, device_from_args, file_digest, name_list, own_data_note, positive_float, positive_int, run_main, split_spec, user_data
from zoo_protocols.dsivi_hierarchical import METHODS, train


def main(argv=None):
    parser = add_common_arguments(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--dataset", default=None, help="a bundled UCI data set (default concrete), or any folder in the UCI layout, by its name under --data-dir or its path")
    parser.add_argument("--splits", type=split_spec, default="0-4")
    parser.add_argument("--methods", type=name_list, default=",".join(METHODS))
    parser.add_argument("--epochs", type=positive_int, default=500)
    parser.add_argument("--batch-size", type=positive_int, default=100)
    parser.add_argument("--lr", type=positive_float, default=5e-3)
    parser.add_argument("--hidden", type=positive_int, default=None, help="hidden units (default: the data set's protocol value)")
    parser.add_argument("--gamma-shape", type=positive_float, default=1.0, help="a of the Gamma hyperprior on the weight precision")
    parser.add_argument("--gamma-rate", type=positive_float, default=1.0, help="b of the Gamma hyperprior")
    parser.add_argument("--noise-shape", type=positive_float, default=6.0)
    parser.add_argument("--noise-rate", type=positive_float, default=6.0)
    parser.add_argument("--K1", type=positive_int, default=16, help="guide mixing draws (marginal+SI)")
    parser.add_argument("--K2", type=positive_int, default=16, help="prior mixing draws (training)")
    parser.add_argument("--init-scale", type=positive_float, default=0.01)
    parser.add_argument("--eval-k", type=positive_int, default=1000, help="K1 = K2 of the evaluation bounds")
    parser.add_argument("--eval-particles", type=positive_int, default=400)
    parser.add_argument("--curve-every", type=positive_int, default=None, help="epochs between marginal ELBO estimates for the plot (default 25; --quick: 2); they leave the training's draws as they were")
    parser.add_argument("--curve-k", type=positive_int, default=200)
    parser.add_argument("--curve-particles", type=positive_int, default=20)
    parser.add_argument("--num-samples", type=positive_int, default=100, help="posterior samples for test metrics")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="save every --checkpoint-every epochs and resume from there")
    parser.add_argument("--checkpoint-every", type=positive_int, default=50)
    add_user_data_arguments(parser, tasks=("regression",))
    args = parser.parse_args(argv)
    if args.quick:
        args.splits, args.epochs, args.eval_k, args.eval_particles = "0", 4, 20, 4
        args.curve_k, args.curve_particles, args.num_samples = 10, 2, 10
    args.curve_every = args.curve_every or (2 if args.quick else 25)
    methods = args.methods
    bad = [m for m in methods if m not in METHODS]
    if bad:
        parser.error(f"unknown methods {bad}; choose from {METHODS}")
    device = device_from_args(args)
    table = user_data(args, tasks=("regression",), bundled=UCI_DATASETS)
    if table is not None and args.dataset is not None:
        raise ValueError("give --dataset or --data, not both")
    data = table if table is not None else UCIDataset(args.dataset or "concrete", args.data_dir)
    # files are named after the data set (a folder given by path: its last part); checkpoints
    # of a table's runs also after its contents, so a changed file never resumes them
    name = Path(data.name).name
    args.run_name = name if table is None else f"{name}_{file_digest(args.data)}"
    splits = parse_splits(args.splits, data.n_splits)
    rows, curves = [], []
    for k in splits:
        split = data.split(k).to(device, torch.float32)
        for method in methods:
            row, curve = train(method, split, args.seed + k, args, device)
            rows.append(row)
            curves += curve
            if not args.no_progress:
                print({key: (round(v, 4) if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
    runs = pd.DataFrame(rows)
    columns = [c for c in ("elbo_exact", "elbo_dsivi_lower", "elbo_dsivi_upper", "elbo_joint", "rmse", "test_ll", "train_seconds") if c in runs]
    order = {m: i for i, m in enumerate(methods)}
    summary = mean_and_stderr(runs, ["method"], columns).sort_values("method", key=lambda s: s.map(order)).reset_index(drop=True)
    stem = f"dsivi_hierarchical_bnn_{name}" + ("_quick" if args.quick else "")
    notes = (
        f"{data.name}, splits {splits}; MLP with {args.hidden or data.n_hidden} hidden units; prior w | λ ~ N(0, 1/λ), "
        f"λ ~ Gamma({args.gamma_shape:g}, {args.gamma_rate:g}) per weight; noise precision ~ Gamma({args.noise_shape:g}, "
        f"{args.noise_rate:g}); {args.epochs} epochs, batch {args.batch_size}, Adam lr {args.lr:g}, initial posterior scale "
        f"{args.init_scale:g}; training K2 = {args.K2} (marginal), K1 = {args.K1} (semi-implicit guide). "
        "ELBO columns are per training example and all refer to the marginal model p(y, w) (λ integrated out), except "
        "elbo_joint (the joint model's own bound, Eq. 18, for the joint method): elbo_exact uses the closed-form Student-t "
        f"marginal ({args.eval_particles} particles; not available for the semi-implicit posterior), elbo_dsivi_lower/upper "
        f"are the DSIVI lower and sandwich upper bounds with K1 = K2 = {args.eval_k}; the three use the same posterior draws "
        "(common random numbers), so their order is meaningful beyond the Monte Carlo noise of each. rmse and test_ll (per test point) in "
        f"the original units from {args.num_samples} posterior samples. Mean and standard error over splits; all numbers "
        "produced by reproductions/dsivi_hierarchical_bnn.py (the thesis' Figure 6 uses its own data and architecture; only "
        "the ordering joint < marginal is comparable)."
    )
    own = own_data_note([data])
    if own:
        notes += " " + own
    if args.quick:
        notes = "QUICK SMOKE CONFIGURATION - not a result.\n\n" + notes
    save_table(summary, stem, args.results_dir, title=f"Hierarchical-prior BNN on {data.name}: joint vs marginal (DSIVI) inference", notes=notes)
    save_table(runs, stem + "_runs", args.results_dir, title="Every run")
    if curves:
        plot(pd.DataFrame(curves), methods, stem, args.results_dir)
    return runs


def plot(curves, methods, stem, results_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, method in enumerate(methods):
        sub = curves[curves["method"] == method]
        if sub.empty:
            continue
        column = "elbo_exact" if "elbo_exact" in sub and sub["elbo_exact"].notna().all() else "elbo_dsivi_lower"
        mean = sub.groupby("epoch")[column].mean()
        label = f"{method} ({'exact' if column == 'elbo_exact' else 'DSIVI lower bound'})"
        ax.plot(mean.index, mean.values, label=label, color=f"C{i}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("marginal ELBO per training example")
    ax.set_title("Estimates of the marginal ELBO during training")
    lo = curves[[c for c in ("elbo_exact", "elbo_dsivi_lower") if c in curves]].stack().quantile(0.1)
    hi = curves[[c for c in ("elbo_exact", "elbo_dsivi_lower") if c in curves]].stack().max()
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    ax.legend()
    fig.tight_layout()
    save_figure(fig, stem, results_dir)
    plt.close(fig)


if __name__ == "__main__":
    run_main(main)
