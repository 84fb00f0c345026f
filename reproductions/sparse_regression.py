"""Large-p-small-n linear regression with SGLD-SA, SGLD-EM and SGLD (Deng et al. 2019, Sec. 5.1).

n = 100 training points, p = 1000 predictors with Sigma_ij = 0.6^|i-j|, y = X beta + eta with
eta ~ N(0, 3 I) and beta = (beta_1, beta_2, beta_3, 0, ..., 0), beta_j ~ N((3, 2, 1)_j, 0.2^2); a
test set of 50 points. The model is a bias-free ``nn.Linear(1000, 1)`` with the SSGL prior
(Laplace scale sigma v0, Gaussian variance sigma^2 v1 = 10 sigma^2, nu = lambda = 1, a = 1,
b = p), whose regression likelihood has noise variance sigma^2. The samplers run SGLD with
minibatches of 50 and the learning rate 0.001 k^(-1/3):

* ``sgld-sa``: stochastic approximation of (rho, kappa, sigma, delta) with
  omega_k = 10 (k + 1000)^(-0.7), delta from 0.5 under its Beta(1, p) prior; the paper's
  sentence "We fix tau = 1, lambda = 1, nu = 1, v1 = 10, delta = 0.5, b = p and set a = 1"
  can also be read as delta fixed at 0.5: ``--fix-delta`` runs that reading;
* ``sgld-em``: the same with omega = 1;
* ``sgld``: the same hierarchical model with the latent variables frozen at their initial
  values (kappa_0 = kappa_1 = 1, sigma = the initial sigma, as in the authors' script).

``--recipe authors-script`` runs the configuration of the authors' R script for this
simulation instead of the paper's text: full-batch gradients (batch 100) and a constant SA step
omega = 0.1 (their min(0.1, 1000 (100 + k)^(-0.7)) never leaves 0.1 within 518k iterations).
Two details of that script are not copied: it adds N(0, 0.01^2) noise to the full-batch gradient
(at the learning rates here that moves beta by at most 1e-5 per step, against a Langevin noise
of sd >= 5e-3) and it averages sigma^2 instead of sigma (the same fixed point).

``--sigma`` is the *initial* sigma (Table 1 shows robustness to it). Predictions are the
step-size-weighted posterior average of X_test beta over thinned samples after burn-in.
Writes one CSV row per run (``method, v0, sigma, seed, mae, mse``; the file's name carries
the configuration, e.g. ``sparse_regression_500k.csv``), a table of means over seeds beside
the published Table 1, the posterior of beta_1..beta_3 (Fig. 1 a-c), and the
paths of sigma and delta of the SA and EM runs (``*_trajectories.csv`` and ``.png``). Those
paths show the two fixed points of the SA recursion: one with the signals in the slab and
sigma near the noise sd, one with delta decaying to 0, every weight in the Laplace spike
and sigma at the sd of y, where the L1 pull kappa_0 / sigma exceeds the data's gradient.

Beyond the paper, ``--delta-prior A,B`` replaces delta's Beta(1, p) prior: with A = 1, Eq. 15's
update (sum rho + A - 1) / (A + B + p - 2) is 0 once every weight has left the slab, so a chain
that reaches the spike-only fixed point stays there; A > 1 keeps delta at least
(A - 1) / (A + B + p - 2). Its runs get files of their own (``sparse_regression_delta_prior_A_B_*``).

    python reproductions/sparse_regression.py --seeds 0-4 --iterations 500000
    python reproductions/sparse_regression.py --method sgld-sa --v0 0.01 --sigma 2 --seeds 0-19 --iterations 50000 --delta-prior 2,1000
    python reproductions/sparse_regression.py --method sgld-sa --v0 0.1 --sigma 1 --seeds 0
    python reproductions/sparse_regression.py --quick
"""

import argparse
import math
import time
from pathlib import Path
from typing import Optional

import pandas as pd
import pyro
import torch

from pyrozoo import atomic
from pyrozoo.reporting import save_figure, save_table, to_markdown
from zoo_protocols import read_runs
from zoo_protocols.cli import add_common_arguments, device_from_args, fraction, name_list, parse_seeds, positive_float, positive_float_list, positive_int, run_main, select_methods
from zoo_protocols.intervals import mean_se
from zoo_protocols.sparse_regression import (
    COLUMNS,
    DEFAULT_BURN_IN,
    DEFAULT_LR,
    DEFAULT_THIN,
    MAE_BOUND,
    METHODS,
    NUM_PREDICTORS,
    NUM_TRAIN,
    PUBLISHED,
    RECIPES,
    RUN_KEY,
    SPIKE_ONLY_SLAB_COUNT,
    TRAJECTORY_COLUMNS,
    run_one,
    simulate,
)


def _v0_twin(rows, method, sigma, seed):
    """A finished run of plain SGLD with the same initial sigma and seed: its latent
    variables are frozen, so v0 does not change its chain."""
    if method != "sgld":
        return None
    return next((r for r in rows if r["method"] == method and float(r["sigma"]) == sigma and int(r["seed"]) == seed), None)


def end_states(paths: pd.DataFrame, num_sparse: int) -> pd.DataFrame:
    """Per run with a recorded path: the expected number of weights in the slab at the end
    (``sum rho``; the truth has 3) and whether it ended with none (``sum rho <
    SPIKE_ONLY_SLAB_COUNT``), the fixed point in which delta decays to 0."""
    last = paths.sort_values("step").groupby(RUN_KEY, sort=False).tail(1)
    slab = last.rho_mean * num_sparse
    return last.assign(slab=slab, spike_only=slab < SPIKE_ONLY_SLAB_COUNT)[RUN_KEY + ["slab", "spike_only"]]


def summary_table(results: pd.DataFrame, paths: Optional[pd.DataFrame] = None, num_sparse: int = NUM_PREDICTORS) -> pd.DataFrame:
    ends = end_states(paths, num_sparse) if paths is not None and len(paths) else None
    rows = []
    for (method, v0, sigma), group in results.groupby(["method", "v0", "sigma"], sort=False):
        published = PUBLISHED.get((method, float(v0), float(sigma)), (math.nan, math.nan))
        spike_only = slab = math.nan
        if ends is not None:
            recorded = group.merge(ends, on=RUN_KEY)
            if len(recorded) == len(group):  # a figure over only some of the seeds would mislead
                spike_only, slab = int(recorded.spike_only.sum()), recorded.slab.mean()
        (mae, mae_se, _), (mse, mse_se, _) = mean_se(group.mae), mean_se(group.mse)
        rows.append({
            "method": method, "v0": v0, "sigma": sigma, "seeds": len(group),
            "mae": mae, "mae_se": mae_se, "mse": mse, "mse_se": mse_se,
            "spike_only_runs": spike_only, "slab_weights": slab,
            "published_mae": published[0], "published_mse": published[1],
        })
    order = {m: i for i, m in enumerate(METHODS)}
    table = pd.DataFrame(rows)
    keys = {"sigma": lambda c: -c, "v0": lambda c: c, "method": lambda c: c.map(order)}
    return table.sort_values(["sigma", "v0", "method"], key=lambda c: keys[c.name](c), kind="stable").reset_index(drop=True)


def plot_trajectories(paths: pd.DataFrame, results: pd.DataFrame, results_dir: Path, stem: str):
    """sigma_k and delta_k of every SGLD-SA run, one column of panels per (v0, initial sigma)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    method = "sgld-sa" if (paths.method == "sgld-sa").any() else paths.method.iloc[0]
    paths = paths[paths.method == method].merge(results, on=RUN_KEY)
    cells = list(dict.fromkeys(zip(paths.v0, paths.sigma)))
    fig, axes = plt.subplots(2, len(cells), figsize=(4.2 * len(cells), 6), squeeze=False, sharex=True)
    for (v0, sigma), (top, bottom) in zip(cells, axes.T):
        cell = paths[(paths.v0 == v0) & (paths.sigma == sigma)]
        for miss, outcome in cell.groupby(cell.mae > MAE_BOUND):
            style = {"linestyle": "--" if miss else "-", "color": "C3" if miss else "C0", "alpha": 0.7, "linewidth": 1}
            # one legend entry per outcome: twenty seeds' labels would hide the paths
            label = f"MAE {'>' if miss else '<='} {MAE_BOUND:g} ({outcome.seed.nunique()} runs)"
            for i, (_, run) in enumerate(outcome.groupby("seed")):
                top.plot(run.step, run.sigma_k, label=None if i else label, **style)
                bottom.semilogy(run.step, run.delta_k.clip(lower=1e-300), **style)
        top.axhline(math.sqrt(3.0), color="k", linewidth=0.8, linestyle=":", label="true noise sd")
        top.set_title(f"{method}, v0 = {v0:g}, initial sigma = {sigma:g}")
        top.set_ylabel("sigma_k")
        top.legend(fontsize=7)
        bottom.set_ylabel("delta_k")
        bottom.set_xlabel("iteration")
    fig.tight_layout()
    return save_figure(fig, stem, results_dir)


def plot_posteriors(draws: pd.DataFrame, truth, results_dir: Path, stem: str, setting: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for j, ax in enumerate(axes):
        for method in METHODS:
            values = draws.loc[draws.method == method, f"beta{j + 1}"]
            if len(values):
                ax.hist(values, bins=40, density=True, alpha=0.5, label=method)
        ax.axvline(truth[j], color="k", linestyle="--", label="true value")
        ax.set_title(f"posterior of beta_{j + 1}")
        ax.set_xlabel(f"beta_{j + 1} (thinned draws after burn-in)")
    axes[0].set_ylabel("density")
    axes[0].legend()
    if setting:
        fig.suptitle(setting)
    fig.tight_layout()
    return save_figure(fig, stem, results_dir)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=name_list, default="all", help="sgld-sa, sgld-em, sgld, a comma-separated list or 'all'")
    parser.add_argument("--v0", type=positive_float_list, default="0.01,0.1", help="Laplace scale factor(s), comma-separated")
    parser.add_argument("--sigma", type=positive_float_list, default="2,1", help="initial sigma(s), comma-separated")
    parser.add_argument("--seeds", type=parse_seeds, default="0-4", help="e.g. 0-4 (a new data set and chain per seed)")
    parser.add_argument("--iterations", type=positive_int, default=500000, help="SGLD iterations per run (the paper: 500,000)")
    parser.add_argument("--thin", type=positive_int, default=DEFAULT_THIN, help="thinning of the averaged samples (the authors: 100)")
    parser.add_argument("--burn-in", type=fraction, default=DEFAULT_BURN_IN, help="fraction of iterations discarded (the authors: 100k of 500k)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default="paper", help="SA step size and batch size: the paper's text (omega_k = 10 (k + 1000)^(-0.7), batch 50) or the authors' R script (omega = 0.1, full batch)")
    parser.add_argument("--batch-size", type=positive_int, default=None, help="minibatch size (default: the recipe's: 50, or the full 100 for authors-script)")
    parser.add_argument("--lr", type=positive_float, default=DEFAULT_LR, help="epsilon_k = lr * k^(-1/3)")
    parser.add_argument("--fix-delta", action="store_true", help="keep delta at 0.5 instead of updating it by SA (Eq. 15)")
    parser.add_argument(
        "--delta-prior", type=beta_hyperparameters, default=None, metavar="A,B",
        help="beyond the paper: Beta(A, B) prior on delta instead of the paper's (1, p); A > 1 keeps Eq. 15's delta away from 0, "
        "where a chain that lost every slab weight stays spike-only (A >= 1 required: below, Eq. 15 can give delta < 0)",
    )
    parser.add_argument("--out", type=Path, default=None, help="per-run CSV (default <results-dir>/<stem>.csv, the stem naming the configuration, e.g. sparse_regression_500k.csv); existing rows are kept and their runs skipped")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    args.methods = select_methods(parser, args.method, METHODS)
    args.v0s, args.sigmas = list(dict.fromkeys(args.v0)), list(dict.fromkeys(args.sigma))
    if args.batch_size is None:
        args.batch_size = RECIPES[args.recipe][1]
    if args.batch_size is not None and args.batch_size > NUM_TRAIN:
        parser.error(f"--batch-size {args.batch_size} exceeds the {NUM_TRAIN} training points")
    if args.quick:
        args.v0s, args.sigmas, args.seeds = args.v0s[-1:], args.sigmas[-1:], args.seeds[:1]
        args.iterations, args.thin = 300, 10
    if args.iterations * (1 - args.burn_in) < args.thin:
        parser.error("no sample would be kept: raise --iterations or lower --thin / --burn-in")
    return args


def beta_hyperparameters(text: str):
    """``"A,B"`` -> ``(A, B)``, the Beta prior on delta; Eq. 15's maximiser needs ``A >= 1``, ``B > 0``."""
    try:
        a, b = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two numbers A,B (e.g. 2,1000), got {text!r}") from None
    if not (a >= 1.0 and b > 0.0 and math.isfinite(a) and math.isfinite(b)):
        raise argparse.ArgumentTypeError(f"need A >= 1 (Eq. 15's delta would go below 0) and B > 0, got A={a:g}, B={b:g}")
    return a, b


def _iterations_tag(iterations: int) -> str:
    return f"{iterations // 1000}k" if iterations % 1000 == 0 else f"{iterations}it"


def results_stem(args) -> str:
    """The file stem of a sweep's CSVs, tables and plots. It names every sampler option that
    changes a run (recipe, delta, iterations, and thinning, burn-in, learning rate or batch size
    where they differ from the defaults; not ``--device``, which changes only rounding), so that
    the per-run CSV's finished rows, which a later call skips, come from the configuration
    asked for."""
    parts = ["sparse_regression"]
    if args.recipe != "paper":
        parts.append(args.recipe.replace("-", "_"))
    if args.fix_delta:
        parts.append("fixed_delta")
    if args.delta_prior is not None:
        parts.append("delta_prior_{:g}_{:g}".format(*args.delta_prior).replace(".", "p"))
    if args.quick:
        parts.append("quick")
        return "_".join(parts)
    parts.append(_iterations_tag(args.iterations))
    if args.thin != DEFAULT_THIN:
        parts.append(f"thin{args.thin}")
    if args.burn_in != DEFAULT_BURN_IN:
        parts.append(f"burnin{args.burn_in:g}")
    if args.lr != DEFAULT_LR:
        parts.append(f"lr{args.lr:g}")
    if args.batch_size != RECIPES[args.recipe][1]:
        parts.append(f"batch{args.batch_size}")
    return "_".join(parts)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)  # the model is tiny: threads only add overhead
    device = device_from_args(args)
    stem = results_stem(args)
    out = args.out or args.results_dir / f"{stem}.csv"
    draws_path = out.with_name(out.stem + "_beta_draws.csv")
    paths_path = out.with_name(out.stem + "_trajectories.csv")
    # the finished runs (skipped), checked: an incomplete row is an error, never a result
    rows = read_runs(out, COLUMNS, numeric=COLUMNS[1:]).to_dict("records")
    draw_columns = ["method", "seed", "draw", "beta1", "beta2", "beta3"]
    draw_rows = read_runs(draws_path, draw_columns, numeric=draw_columns[1:]).to_dict("records") if rows else []
    path_rows = read_runs(paths_path, TRAJECTORY_COLUMNS, required=RUN_KEY + ["step"], numeric=TRAJECTORY_COLUMNS[1:]).to_dict("records") if rows else []
    done = {(r["method"], float(r["v0"]), float(r["sigma"]), int(r["seed"])) for r in rows}
    figure_setting = (args.v0s[-1], args.sigmas[-1], args.seeds[0])  # the paper's Fig. 1: v0 = 0.1, sigma = 1
    truth = simulate(args.seeds[0])[4][:3].tolist()
    pyro.enable_validation(False)
    # seeds outermost: an interrupted sweep has every setting for the seeds it finished
    for seed in args.seeds:
        for v0 in args.v0s:
            for sigma in args.sigmas:
                for method in args.methods:
                    if (method, v0, sigma, seed) in done:
                        continue
                    t0 = time.perf_counter()
                    twin = _v0_twin(rows, method, sigma, seed) if (v0, sigma, seed) != figure_setting else None
                    if twin is not None:
                        # frozen kappa_0 = kappa_1 = 1: v0 enters neither the gradient nor any update,
                        # so the chain (same seed, same data) is the same for every v0
                        metrics, reused = {"mae": twin["mae"], "mse": twin["mse"]}, f"same chain as v0={twin['v0']:g}"
                    else:
                        (metrics, draws, _, path), reused = run_one(method, v0, sigma, seed, args, device), None
                        if path is not None:
                            path_rows.extend({"method": method, "v0": v0, "sigma": sigma, "seed": seed, **r} for r in path.to_dict("records"))
                            atomic.write_csv(pd.DataFrame(path_rows, columns=TRAJECTORY_COLUMNS), paths_path)
                    rows.append({"method": method, "v0": v0, "sigma": sigma, "seed": seed, **metrics})
                    print(f"{method:8s} v0={v0:<5g} sigma={sigma:<3g} seed={seed}  MAE {metrics['mae']:.3f}  MSE {metrics['mse']:.3f}  ({reused or f'{time.perf_counter() - t0:.0f} s'})", flush=True)
                    if reused:
                        atomic.write_csv(pd.DataFrame(rows, columns=COLUMNS), out)
                        continue
                    if (v0, sigma, seed) == figure_setting:
                        draw_rows.extend({"method": method, "seed": seed, "draw": i, "beta1": float(d[0]), "beta2": float(d[1]), "beta3": float(d[2])} for i, d in enumerate(draws))
                        atomic.write_csv(pd.DataFrame(draw_rows), draws_path)
                    # after every run, so an interrupted sweep loses nothing (runs in the CSV are skipped)
                    atomic.write_csv(pd.DataFrame(rows, columns=COLUMNS), out)

    results = pd.DataFrame(rows, columns=COLUMNS)
    # the table summarises the requested sweep; the CSV keeps every run
    results = results[results.method.isin(args.methods) & results.v0.isin(args.v0s) & results.sigma.isin(args.sigmas) & results.seed.isin(args.seeds)]
    paths = pd.DataFrame(path_rows, columns=TRAJECTORY_COLUMNS)
    paths = paths.merge(results[RUN_KEY], on=RUN_KEY)
    table = summary_table(results, paths)
    notes = (
        f"Measured by `reproductions/sparse_regression.py --recipe {args.recipe}` ({args.iterations} SGLD iterations per run, "
        f"{'full-batch gradients' if args.batch_size is None else f'minibatch {args.batch_size}'}, SA step size "
        f"{'omega_k = 10 (k + 1000)^(-0.7)' if args.recipe == 'paper' else 'omega = 0.1'} (SGLD-EM: 1), thinning "
        f"{args.thin}, burn-in {args.burn_in:.0%}; delta "
        f"{'fixed at 0.5' if args.fix_delta else 'updated by SA (Eq. 15)'}"
        f"{'' if args.delta_prior is None else ' under a Beta({:g}, {:g}) prior (beyond the paper, whose prior is Beta(1, p))'.format(*args.delta_prior)}; mean and standard error over seeds, "
        "each seed a new data set and chain). `published_mae` / `published_mse` are Deng et al. (2019), Table 1 "
        "(published; 500,000 iterations, one data set). sigma is the initial value of sigma. MSE is floored by the "
        "noise variance 3. Plain SGLD keeps its latent variables frozen (kappa_0 = kappa_1 = 1), so v0 does not "
        "enter its chain: its runs for a second v0 reuse the first v0's run of the same seed and sigma. "
        f"`spike_only_runs` counts the runs (SA and EM) that ended with sum(rho) < {SPIKE_ONLY_SLAB_COUNT:g}, i.e. with no "
        "weight expected in the slab: delta has decayed towards 0, the signals are shrunk to 0 and sigma has grown to the "
        "sd of y; `slab_weights` is the mean over runs of the final sum(rho), the expected number of weights in the slab "
        "(the truth has 3 nonzero coefficients); the paths of sigma and delta are in the `_trajectories` CSV and plot (blank: a path was not recorded "
        "for every seed)."
    )
    save_table(table, stem + "_table", args.results_dir, title="Large-p-small-n regression: test MAE / MSE (Deng et al. 2019, Sec. 5.1)", notes=notes)
    print()
    print(to_markdown(table))
    if len(paths):
        print(f"latent-variable paths: {plot_trajectories(paths, results, args.results_dir, stem + '_trajectories')}")
    if draw_rows:
        v0, sigma, seed = figure_setting
        path = plot_posteriors(pd.DataFrame(draw_rows), truth, args.results_dir, stem + "_posteriors", f"v0 = {v0:g}, initial sigma = {sigma:g}, seed {seed} (Deng et al. 2019, Fig. 1 a-c)")
        print(f"posterior plot: {path}")
    print(f"per-run results: {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
