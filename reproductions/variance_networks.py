"""Variance networks: variational dropout under five parameterisations (thesis Table 2).

Trains a LeNet on MNIST with Gaussian dropout posteriors parameterised as

    zero-mean  N(0, sigma_ij^2)          layer   N(mu_ij, alpha mu_ij^2)
    neuron     N(mu_ij, alpha_j mu_ij^2)  weight  N(mu_ij, alpha_ij mu_ij^2)
    additive   N(mu_ij, sigma_ij^2)

under a log-uniform (or ARD) prior (the declarations ``vd-<parameterization>`` of
``zoo_protocols/methods.py``; the protocol is ``zoo_protocols/variance_networks.py``), and reports the ELBO on the training set, its data
term and KL (nats), the accuracy of the network of posterior means (mean propagation) and
of the posterior predictive averaged over weight samples (test-time averaging). With
shared dropout rates (layer, neuron) the ELBO drives alpha to infinity and the network
passes a phase transition after which only the variances carry information: mean
propagation falls to chance while test-time averaging stays accurate. The zero-mean network
is zero-mean in its hidden layers; its output layer is a point estimate, as in the authors'
code (with zero-mean output weights the logits' mean is the bias whatever the input, and
no such network beats one that ignores its input: ``zoo_protocols.methods.HiddenLayerWeights``).

Each finished parameterization is a row of ``<stem>_runs.csv`` (``--runs``), with the
setting it ran under; ``--resume`` keeps the rows there of this setting, skips their
parameterizations and builds the table from all of them, so a subset
(``--parameterizations zero-mean``) can be run and merged into the table of the others.

``--data`` takes a user's images instead of MNIST (an ``.npz`` with ``x``, ``y``,
optionally ``x_test``, ``y_test``): the network reads them with an output per class
(LeNet-300-100 any image size, the LeNet-5s MNIST's 1x28x28 only); the files are named
after the data set (``<stem>_<name>.*``) and have no published rows.

Examples::

    python reproductions/variance_networks.py --arch lenet5-bn --epochs 20
    python reproductions/variance_networks.py --prior ard --parameterizations layer,neuron
    python reproductions/variance_networks.py --arch lenet300 --epochs 15 --parameterizations zero-mean --resume
    python reproductions/variance_networks.py --arch lenet300 --data digits.npz --epochs 20
    python reproductions/variance_networks.py --quick          # smoke run used by the tests
"""

import argparse
import time
from pathlib import Path

import pandas as pd

from pyrozoo import atomic
from pyrozoo.data import load_mnist
from pyrozoo.guides.variational_dropout import PARAMETERIZATIONS
from pyrozoo.reporting import save_figure, save_table, to_markdown
from zoo_protocols import read_runs
from zoo_protocols.cli import (
    add_common_arguments,
    add_image_data_arguments,
    device_from_args,
    file_digest,
    image_data,
    image_data_note,
    name_list,
    non_negative_int,
    positive_int,
    run_main,
)
from zoo_protocols.lenet_recipes import MNIST_CLASSES, MNIST_INPUT_SHAPE
from zoo_protocols.variance_networks import (
    ARCHITECTURES,
    PRIORS,
    PUBLISHED_EPOCHS,
    PUBLISHED_TABLE2,
    accuracy_tracker,
    check_variance_network_input,
    phase_transition_note,
    run,
)

COLUMNS = ["parameterization", "source", "epochs", "elbo", "data_term", "kl", "mean_propagation_accuracy", "test_time_averaging_accuracy", "mean_log_alpha"]
#: the setting a run belongs to: ``--resume`` merges only runs of one setting
SETTING = ["dataset", "arch", "prior", "train_examples", "epochs", "seed", "num_samples"]
METRICS = ["elbo", "data_term", "kl", "mean_propagation_accuracy", "test_time_averaging_accuracy", "mean_log_alpha"]
RUN_COLUMNS = ["parameterization", *SETTING, *METRICS, "train_seconds"]
#: what a run read back must have (``train_seconds`` may be blank: a run carried over from a table)
RUN_REQUIRED = ["parameterization", *SETTING, *METRICS]
INTEGER_SETTINGS = ("train_examples", "epochs", "seed", "num_samples")


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
    parser.add_argument("--runs", type=Path, default=None, help="CSV of one row per parameterization run (default: <results-dir>/<stem>_runs.csv)")
    parser.add_argument("--resume", action="store_true", help="keep the runs of this setting already in --runs, skip their parameterizations and table them all")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    bad = [p for p in args.parameterizations if p not in PARAMETERIZATIONS]
    if bad:
        parser.error(f"argument --parameterizations: unknown {bad}; choose from {', '.join(PARAMETERIZATIONS)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    names = args.parameterizations
    device = device_from_args(args)
    # a user's images, read and checked before any work
    own = image_data(args, bundled=("mnist",))
    if own is not None:
        check_variance_network_input(own, args.arch)
        train, test = (own.x_train, own.y_train), (own.x_test, own.y_test)
        # its name and contents name its runs and checkpoints: a changed file never resumes or merges with them
        digest = file_digest(args.data)
        shape, dataset = {"input_shape": own.input_shape, "num_classes": own.num_classes}, f"{own.dataset} (sha1 {digest})"
    else:
        train = load_mnist("mnist", train=True, data_dir=args.data_dir)
        test = load_mnist("mnist", train=False, data_dir=args.data_dir)
        shape, dataset = {"input_shape": MNIST_INPUT_SHAPE, "num_classes": MNIST_CLASSES}, "mnist"
    epochs, num_samples = args.epochs, args.num_samples
    if args.train_size:
        train = (train[0][: args.train_size], train[1][: args.train_size])
    if args.quick:
        train, test = (train[0][:500], train[1][:500]), (test[0][:200], test[1][:200])
        epochs, num_samples = 1, 2
    stem = args.stem + ("" if own is None else f"_{own.dataset}")
    runs_path = args.runs or args.results_dir / f"{stem}_runs.csv"
    setting = {"dataset": dataset, "arch": args.arch, "prior": args.prior, "train_examples": len(train[0]), "epochs": epochs, "seed": args.seed, "num_samples": num_samples}
    # the finished runs of this setting (kept with --resume), checked before any training
    rows = previous_runs(runs_path, setting) if args.resume else []
    done = {r["parameterization"] for r in rows}
    trajectories = []
    tracker = accuracy_tracker((test[0][: args.track_size], test[1][: args.track_size]), num_samples=min(num_samples, 10)) if args.track_every else None
    tag = "" if own is None else f"{own.dataset}_{digest}_"
    for p in names:
        if p in done:
            print(f"{p}: kept from {runs_path}", flush=True)
            continue
        t0 = time.perf_counter()
        # the zero-mean network's output layer is a point estimate now: no checkpoint of the
        # earlier, all-zero-mean one may resume it
        checkpoint = f"{args.checkpoint_dir}/variance_networks_{tag}{args.arch}_{args.prior}_{'zero-mean-hidden' if p == 'zero-mean' else p}.pt" if args.checkpoint_dir else None
        row, trajectory = run(
            args.arch, p, train, test, epochs=epochs, prior=args.prior, num_samples=num_samples, seed=args.seed, device=device,
            checkpoint=checkpoint, progress=not args.no_progress, tracker=tracker, track_every=max(args.track_every, 1), **shape,
        )
        trajectories += trajectory
        row = {**row, **setting, "train_seconds": time.perf_counter() - t0}
        rows.append(row)
        atomic.write_csv(pd.DataFrame(rows)[RUN_COLUMNS], runs_path)
        print(f"{p}: " + ", ".join(f"{k}={v:.4g}" for k, v in row.items() if isinstance(v, float)), flush=True)
    measured = [{**{c: r[c] for c in COLUMNS if c in r}, "source": "measured (this repository)"} for r in rows]
    published = [] if own is not None else [
        {"parameterization": r["parameterization"], "source": "published: Molchanov 2022, Table 2", **PUBLISHED_TABLE2[r["parameterization"]]} for r in rows
    ]
    table = pd.DataFrame(measured + published)
    for c in COLUMNS:
        if c not in table:
            table[c] = float("nan")
    table = table[COLUMNS]
    print(to_markdown(table, floatfmt=".4g"))
    data_name = "MNIST" if own is None else own.dataset
    notes = (
        f"Measured: {args.arch} on {data_name} ({len(train[0])} training examples), prior {args.prior}, {epochs} epochs per "
        f"parameterization, batch 100, Adam 1e-3 decayed linearly to 0, KL warm-up, local reparameterization, log alpha "
        f"clipped to [-20, 20]; ELBO, data term (one weight sample per batch of the training set) and KL in nats over "
        f"the training set; accuracies in percent on the {len(test[0])} test images; test-time averaging over "
        f"{num_samples} weight samples."
    )
    if any(r["parameterization"] == "zero-mean" for r in rows):
        notes += (
            " The zero-mean network: every hidden layer zero-mean, the output layer a point estimate, as in the authors' code (with "
            "zero-mean output weights the logits' mean is the bias whatever the input, and by Jensen's inequality such a "
            "network cannot beat one that ignores its input)."
        )
    if own is None:
        notes += (
            " Published rows: the thesis' Table 2, whose setup and units are not stated "
            "there, so only the pattern (mean propagation near chance for zero-mean, layer- and neuron-wise rates; "
            "test-time averaging accurate for all) is comparable."
        )
    if done:
        notes += f" Kept from {Path(runs_path).name} (--resume; run earlier, in this setting): {', '.join(r['parameterization'] for r in rows if r['parameterization'] in done)}."
    notes += f" {phase_transition_note(rows, epochs)} Produced by reproductions/variance_networks.py."
    if own is not None:
        notes += " " + image_data_note(own, args.data) + " No published results exist for it."
    save_table(table, stem, args.results_dir, title="Variance networks: ELBO and accuracy by parameterization", notes=notes)
    if trajectories:
        trajectory = pd.DataFrame(trajectories)
        path = Path(args.results_dir) / f"{stem}_trajectory.csv"
        if args.resume and path.exists():  # the curves of the runs kept, from the call that ran them
            before = read_runs(path, ["parameterization", "epoch"], numeric=["epoch"])
            kept = before[before.parameterization.isin(done)]
            trajectory = pd.concat([kept, trajectory], ignore_index=True, sort=False)
        save_trajectory(trajectory, args, min(num_samples, 10), stem)
    return table


def previous_runs(path: Path, setting: dict) -> list:
    """The rows of ``path`` (``--runs``), all of which must be of ``setting``: a table mixes no
    two settings."""
    runs = read_runs(path, RUN_COLUMNS, required=RUN_REQUIRED, numeric=[*INTEGER_SETTINGS, *METRICS])
    rows = runs.to_dict("records")
    for r in rows:
        theirs = {k: int(r[k]) if k in INTEGER_SETTINGS else str(r[k]) for k in SETTING}
        if theirs != setting:
            differ = ", ".join(f"{k} {theirs[k]} (now {setting[k]})" for k in SETTING if theirs[k] != setting[k])
            raise ValueError(
                f"{path} holds a run of {r['parameterization']} in another setting: {differ}; a table mixes no two settings: "
                "give another --runs (or --stem), or leave out --resume to start afresh"
            )
    return rows


def save_trajectory(trajectory: pd.DataFrame, args, num_samples: int, table_stem: str) -> None:
    """Mean-propagation vs test-time-averaging accuracy during training (the phase transition)."""
    stem = f"{table_stem}_trajectory"
    notes = (
        f"Accuracy (percent) on the first {args.track_size} test images during training: mean propagation (the network of "
        f"posterior means) and test-time averaging ({num_samples} weight samples); mean log alpha per layer. "
        "Produced by reproductions/variance_networks.py --track-every."
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
