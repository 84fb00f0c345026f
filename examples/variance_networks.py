"""Variance networks: variational dropout under five parameterisations (thesis Table 2).

Trains a LeNet on MNIST with Gaussian dropout posteriors parameterised as

    zero-mean  N(0, sigma_ij^2)          layer   N(mu_ij, alpha mu_ij^2)
    neuron     N(mu_ij, alpha_j mu_ij^2)  weight  N(mu_ij, alpha_ij mu_ij^2)
    additive   N(mu_ij, sigma_ij^2)

under a log-uniform (or ARD) prior, and reports the ELBO on the training set, its data
term and KL (nats), the accuracy of the network of posterior means (mean propagation) and
of the posterior predictive averaged over weight samples (test-time averaging). With
shared dropout rates (layer, neuron) the ELBO drives alpha to infinity and the network
passes a phase transition after which only the variances carry information: mean
propagation falls to chance while test-time averaging stays accurate.

Examples::

    python examples/variance_networks.py --arch lenet5-bn --epochs 20
    python examples/variance_networks.py --prior ard --parameterizations layer,neuron
    python examples/variance_networks.py --quick          # smoke run used by the tests
"""

import argparse
import time
from pathlib import Path

import pandas as pd

from pyrozoo.data import load_mnist
from pyrozoo.guides.variational_dropout import PARAMETERIZATIONS
from pyrozoo.reporting import save_figure
from pyrozoo.reporting import save_table, to_markdown
from pyrozoo.utils import set_seed
from recipes.cli import add_common_arguments, device_from_args, name_list, non_negative_int, positive_int, run_main
from recipes.variance_networks import ARCHITECTURES
from recipes.variance_networks import PRIORS, PUBLISHED_TABLE2, accuracy_tracker, evaluate_parameterization, train_variational_dropout

COLUMNS = ["parameterization", "source", "epochs", "elbo", "data_term", "kl", "mean_propagation_accuracy", "test_time_averaging_accuracy", "mean_log_alpha"]
#: the authors' training length (epochs)
PUBLISHED_EPOCHS = 200
#: mean propagation counts as collapsed (past the phase transition) below this accuracy (percent)
COLLAPSED_ACCURACY = 20.0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=ARCHITECTURES, default="lenet5-bn", help="lenet5-bn: the authors' LeNet-5 with batch normalisation (default)")
    parser.add_argument("--prior", choices=sorted(PRIORS), default="log-uniform")
    parser.add_argument("--parameterizations", type=name_list, default=",".join(PARAMETERIZATIONS), help="comma-separated subset of " + ", ".join(PARAMETERIZATIONS))
    parser.add_argument("--epochs", type=positive_int, default=PUBLISHED_EPOCHS, help="training epochs per parameterization (the authors': 200)")
    parser.add_argument("--train-size", type=positive_int, default=None, help="use the first N training examples")
    parser.add_argument("--num-samples", type=positive_int, default=20, help="weight samples for test-time averaging")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="keep a resumable checkpoint per parameterization here")
    parser.add_argument("--track-every", type=non_negative_int, default=0, help="every N epochs, record mean-propagation and test-time-averaging accuracy on --track-size test images (0: off); saved as <stem>_trajectory.{csv,md,png}")
    parser.add_argument("--track-size", type=positive_int, default=2000)
    parser.add_argument("--stem", default="variance_networks", help="stem of the saved table")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    bad = [p for p in args.parameterizations if p not in PARAMETERIZATIONS]
    if bad:
        parser.error(f"argument --parameterizations: unknown {bad}; choose from {', '.join(PARAMETERIZATIONS)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    names = args.parameterizations
    device = device_from_args(args)
    train = load_mnist("mnist", train=True, data_dir=args.data_dir)
    test = load_mnist("mnist", train=False, data_dir=args.data_dir)
    epochs, num_samples = args.epochs, args.num_samples
    if args.train_size:
        train = (train[0][: args.train_size], train[1][: args.train_size])
    if args.quick:
        train, test = (train[0][:500], train[1][:500]), (test[0][:200], test[1][:200])
        epochs, num_samples = 1, 2
    rows, trajectories = [], []
    tracker = accuracy_tracker((test[0][: args.track_size], test[1][: args.track_size]), num_samples=min(num_samples, 10)) if args.track_every else None
    for p in names:
        set_seed(args.seed)
        t0 = time.perf_counter()
        checkpoint = f"{args.checkpoint_dir}/variance_networks_{args.arch}_{args.prior}_{p}.pt" if args.checkpoint_dir else None
        model, guide, history = train_variational_dropout(
            args.arch, p, train, epochs=epochs, prior=args.prior, seed=args.seed, device=device,
            checkpoint=checkpoint, progress=not args.no_progress, tracker=tracker, track_every=max(args.track_every, 1),
        )
        for point in history.attrs.get("trajectory", []):
            trajectories.append({"parameterization": p, **point})
        row = {"parameterization": p, "source": "measured (this repository)", "epochs": len(history), **evaluate_parameterization(model, guide, train, test, num_samples)}
        row["train_seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(f"{p}: " + ", ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)), flush=True)
    published = [{"parameterization": p, "source": "published: Molchanov 2022, Table 2", **PUBLISHED_TABLE2[p]} for p in names]
    table = pd.DataFrame(rows + published)
    for c in COLUMNS:
        if c not in table:
            table[c] = float("nan")
    table = table[COLUMNS]
    print(to_markdown(table, floatfmt=".4g"))
    notes = (
        f"Measured: {args.arch} on MNIST ({len(train[0])} training examples), prior {args.prior}, {epochs} epochs per "
        f"parameterization, batch 100, Adam 1e-3 decayed linearly to 0, KL warm-up, local reparameterization, log alpha "
        f"clipped to [-20, 20]; ELBO, data term (one weight sample per batch of the training set) and KL in nats over "
        f"the training set; accuracies in percent on the {len(test[0])} test images; test-time averaging over "
        f"{num_samples} weight samples. Published rows: the thesis' Table 2, whose setup and units are not stated "
        f"there, so only the pattern (mean propagation near chance for zero-mean, layer- and neuron-wise rates; "
        f"test-time averaging accurate for all) is comparable. {phase_transition_note(rows, epochs)} "
        f"Produced by examples/variance_networks.py."
    )
    save_table(table, args.stem, args.results_dir, title="Variance networks: ELBO and accuracy by parameterization", notes=notes)
    if trajectories:
        save_trajectory(pd.DataFrame(trajectories), args, min(num_samples, 10))
    return table


def phase_transition_note(rows, epochs: int) -> str:
    """Whether the shared-rate networks have passed the phase transition, read off the results."""
    shared = [r for r in rows if r["parameterization"] in ("layer", "neuron")]
    note = f"Training length: {epochs} epochs per parameterization, against the authors' {PUBLISHED_EPOCHS}"
    note += "." if epochs >= PUBLISHED_EPOCHS else f" ({PUBLISHED_EPOCHS / max(epochs, 1):.3g}x shorter)."
    untrained = [r["parameterization"] for r in rows if r["test_time_averaging_accuracy"] < COLLAPSED_ACCURACY]
    if untrained:
        note += f" Not learned in this run (test-time averaging near chance): {', '.join(untrained)}."
    if not shared:
        return note
    accs = ", ".join(f"{r['parameterization']} {r['mean_propagation_accuracy']:.1f}%" for r in shared)
    if all(r["mean_propagation_accuracy"] < COLLAPSED_ACCURACY for r in shared):
        return note + f" The phase transition is visible: mean propagation of the shared-rate networks is near chance ({accs})."
    return note + (
        f" The phase transition has NOT happened in this run: mean propagation of the shared-rate networks is still "
        f"accurate ({accs}), so this table does not reproduce the thesis' pattern for them."
    )


def save_trajectory(trajectory: pd.DataFrame, args, num_samples: int) -> None:
    """Mean-propagation vs test-time-averaging accuracy during training (the phase transition)."""
    stem = f"{args.stem}_trajectory"
    notes = (
        f"Accuracy (percent) on the first {args.track_size} test images during training: mean propagation (the network of "
        f"posterior means) and test-time averaging ({num_samples} weight samples); mean log alpha per layer. "
        "Produced by examples/variance_networks.py --track-every."
    )
    save_table(trajectory, stem, args.results_dir, title="Variance networks during training", notes=notes)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for i, (p, part) in enumerate(trajectory.groupby("parameterization", sort=False)):
        color = f"C{i}"
        ax.plot(part.epoch, part.test_time_averaging_accuracy, color=color, marker="o", label=f"{p}: test-time averaging")
        ax.plot(part.epoch, part.mean_propagation_accuracy, color=color, linestyle="--", marker="x", label=f"{p}: mean propagation")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"Variance networks ({args.arch}, {args.prior} prior)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, stem, args.results_dir)
    plt.close(fig)


if __name__ == "__main__":
    run_main(main)
