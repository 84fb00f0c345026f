"""MNIST / Fashion-MNIST with the 2-Conv-2-FC CNN (Deng et al. 2019, Sec. 5.2-5.3, Table 2, Fig. 2).

Methods (no data augmentation, no batch normalisation):

* ``adam``: the network trained with Adam (lr 1e-3), a point estimate ("Vanilla");
* ``dropout``: the same with 50% dropout on the hidden units after FC1;
* ``sghmc``: SGHMC on the SSGL model (FC1's weights sparse: v0 = 1, v1 = 0.1, sigma = 1,
  nu = lambda = 1000, a = b = p; the other parameters N(0, 1)) with its latent variables
  fixed at their initial values;
* ``sghmc-sa``: the same with the SSGL latent variables updated by stochastic
  approximation, omega_k = (k + 1000)^(-3/4).

The samplers use batch 1000, learning rate 5e-7 on the N/n-scaled log-joint, momentum 0.9,
inverse temperature 1000 (MNIST) or 2500 (Fashion-MNIST), thinning 500 iterations, and
predict with the step-size-weighted average of the class probabilities over the thinned
samples after burn-in (samples stream to disk, so ``--fgsm`` can attack the averaged
model). The Adam baselines minimise the same N/n-scaled negative log-joint under the
N(0, 1) prior with :func:`pyrozoo.inference.fit` and a Delta guide (MAP). ``--fgsm`` adds the
accuracy under one-step FGSM attacks of strength 0, 0.1, ..., 0.5 (Fig. 2), by one or both
protocols of ``--fgsm-protocol``:

* ``posterior``: white-box: each input is crafted against the posterior-averaged predictive
  (the mean of the samples' probabilities) and its true label, and that predictive is scored;
* ``authors``: what Deng et al.'s code does (``tools/attacker.py``): the inputs are crafted
  once against a single network (here the first averaged sample; a point estimate's own
  network), lowering the probability of that network's predicted class, and the ensemble of
  all averaged samples, pooled as the sum of their log-probabilities, is scored on them: a
  transfer attack from one sample to the ensemble. Their MNIST script is not released, so
  which network crafted the images is not known; the dropout baseline is scored here with
  dropout off, not with their Monte Carlo dropout.

Every run checkpoints each epoch under ``--run-dir`` and resumes from it. A sampler run with
``--burn-in-epochs`` (burn-in in epochs rather than a fraction of the run) can be extended
later: a larger ``--epochs`` continues the same chain and online average, and adds a row.

    python reproductions/classify_cnn.py --method sghmc-sa --dataset mnist --epochs 100
    python reproductions/classify_cnn.py --method adam,dropout,sghmc,sghmc-sa --dataset fashion --fgsm
    python reproductions/classify_cnn.py --method sghmc,sghmc-sa --fgsm --fgsm-protocol posterior,authors
    python reproductions/classify_cnn.py --method sghmc,sghmc-sa --dataset mnist --epochs 20 --burn-in-epochs 10
    python reproductions/classify_cnn.py --method adam,sghmc-sa --data digits.npz --epochs 20
    python reproductions/classify_cnn.py --quick

``--data`` takes a user's images instead (an ``.npz`` with ``x``, ``y``, optionally ``x_test``,
``y_test``): the network is built for MNIST's 1 x 28 x 28 inputs, so they must have that shape
(anything else stops before any work, saying so); its output is sized to their classes, the
samplers' inverse temperature is MNIST's unless ``--tau`` is given, and the results are named
after the data set and a digest of the file (``classify_cnn_<name>_<digest>.csv``: changed
images never resume or skip the runs on the old), without published numbers.
"""

import argparse
import math
from pathlib import Path

import pandas as pd
import pyro

from pyrozoo import atomic
from pyrozoo.data import check_input_shape
from pyrozoo.reporting import save_figure, save_table, to_markdown
from pyrozoo.utils import set_seed
from zoo_protocols import read_runs
from zoo_protocols.cli import (
    add_common_arguments, add_image_data_arguments, device_from_args, file_digest, fraction, image_data, image_data_note, name_list, non_negative_int,
    positive_float, positive_int, run_main, select_methods, settings_digest,
)
from zoo_protocols.cnn import DATASETS, FGSM_PROTOCOLS, INPUT_SHAPE, METHODS, NETWORK, NUM_CLASSES, PUBLISHED, fgsm_curve, is_sampler, load
from zoo_protocols.cnn import run as run_method

COLUMNS = ["method", "dataset", "seed", "epochs", "thin", "burn_in", "accuracy", "test_ll", "ece", "samples", "train_seconds"]
#: settings that change a run but are not columns of its CSV row: when they differ from the
#: defaults, a digest of them names the result files and the run directory, so that a changed
#: run never resumes or skips as a stale one
TRAINING_SETTINGS = ("batch_size", "lr", "adam_lr", "tau", "v0", "v1", "prior_scale")


def run_dir_name(method, args):
    """A sampler run with an absolute burn-in does not depend on ``--epochs`` up to the
    epochs it has run, so its directory leaves the epoch count out: a longer ``--epochs``
    resumes the chain (and its online average) from the last checkpoint. Every other setting
    that changes a run is in the name."""
    if is_sampler(method) and args.burn_in_epochs is not None:
        name = f"{args.dataset}-{method}-seed{args.seed}-burnin{args.burn_in_epochs}ep-thin{args.thin}"
    elif is_sampler(method):
        name = f"{args.dataset}-{method}-seed{args.seed}-epochs{args.epochs}-burnin{args.burn_in:g}-thin{args.thin}"
    else:
        name = f"{args.dataset}-{method}-seed{args.seed}-epochs{args.epochs}"
    return name + args.settings_tag


def plot_fgsm(table, results_dir, stem):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(table.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for (method, protocol, epochs), group in table[table.dataset == dataset].groupby(["method", "protocol", "epochs"], sort=False):
            label = method + (f", {protocol}" if table.protocol.nunique() > 1 else "") + (f", {epochs} epochs" if table.epochs.nunique() > 1 else "")
            ax.plot(group.epsilon, 100 * group.accuracy, marker="o", linestyle="--" if protocol == "authors" else "-", label=label)
        ax.set_title(f"FGSM, {DATASETS.get(dataset, dataset)}")
        ax.set_xlabel("attack strength epsilon")
        ax.set_ylabel("accuracy (%)")
        ax.legend()
    fig.tight_layout()
    return save_figure(fig, stem, results_dir)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=name_list, default="sghmc-sa", help=f"one of {', '.join(METHODS)}, a comma-separated list or 'all'")
    parser.add_argument("--dataset", default=None, choices=list(DATASETS), help="a bundled data set (default mnist; none with --data)")
    parser.add_argument("--epochs", type=positive_int, default=100)
    parser.add_argument("--batch-size", type=positive_int, default=1000, help="the paper: 1000")
    parser.add_argument("--lr", type=positive_float, default=5e-7, help="sampler step size on the N/n-scaled log-joint (the paper: 5e-7)")
    parser.add_argument("--adam-lr", type=positive_float, default=1e-3)
    parser.add_argument("--tau", type=positive_float, default=None, help="inverse temperature (default: 1000 MNIST and a user's images, 2500 Fashion-MNIST)")
    parser.add_argument("--thin", type=positive_int, default=500, help="iterations between averaged samples (the paper: 500)")
    parser.add_argument("--burn-in", type=fraction, default=0.3, help="fraction of the iterations before averaging starts")
    parser.add_argument("--burn-in-epochs", type=non_negative_int, default=None,
                        help="epochs before averaging starts (overrides --burn-in); such a run can be run in legs and extended by a larger "
                             "--epochs (a leg that ends before the first averaged sample writes no row)")
    parser.add_argument("--v0", type=positive_float, default=1.0)
    parser.add_argument("--v1", type=positive_float, default=0.1)
    parser.add_argument("--prior-scale", type=positive_float, default=1.0, help="sd of the Gaussian prior of the non-sparse parameters")
    parser.add_argument("--fgsm", action="store_true", help="also evaluate FGSM robustness (Fig. 2)")
    parser.add_argument("--fgsm-protocol", type=name_list, default="posterior",
                        help=f"comma-separated, from {', '.join(FGSM_PROTOCOLS)}: a white-box attack on the posterior predictive, "
                             "or the authors' transfer from one network to the log-pooled ensemble (see the module docstring)")
    parser.add_argument("--fgsm-examples", type=positive_int, default=10000, help="test examples attacked")
    parser.add_argument("--run-dir", type=Path, default=Path("runs") / "classify_cnn", help="checkpoints and streamed samples")
    parser.add_argument("--out", type=Path, default=None,
                        help="per-run CSV (default <results-dir>/classify_cnn.csv); runs already in it are skipped; its tables and plots are written beside it")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    if args.data is not None and args.dataset is not None:
        parser.error("give --dataset or --data, not both")
    args.dataset = args.dataset or ("mnist" if args.data is None else None)  # a user's: the name of its file, when it is read
    args.num_classes = NUM_CLASSES
    args.methods = select_methods(parser, args.method, METHODS)
    args.fgsm_protocols = args.fgsm_protocol
    if any(p not in FGSM_PROTOCOLS for p in args.fgsm_protocols):
        parser.error(f"--fgsm-protocol takes a comma-separated list from {', '.join(FGSM_PROTOCOLS)}, got {','.join(args.fgsm_protocol)!r}")
    changed = [(k, getattr(args, k)) for k in TRAINING_SETTINGS if getattr(args, k) != parser.get_default(k)]
    if args.data is not None:  # a run on changed images never resumes one on the old
        changed.append(("data", file_digest(args.data)))
    args.settings_tag = "_" + settings_digest(changed) if changed else ""
    if args.quick:
        args.epochs, args.batch_size, args.thin, args.burn_in, args.fgsm_examples = 2, 128, 2, 0.5, 64
    return args


RUN_KEY = ["method", "dataset", "seed", "epochs", "thin", "burn_in"]
FGSM_COLUMNS = RUN_KEY + ["protocol", "epsilon", "accuracy"]


def _key(row):
    """A run's identity in the CSVs (NaN thin and burn-in, a point estimate's, compare equal)."""
    return tuple(-1.0 if isinstance(row[c], float) and math.isnan(row[c]) else row[c] for c in RUN_KEY)


def read_fgsm_rows(path, rows):
    """The FGSM CSV's rows. A file written before it recorded the protocol and the run's
    settings holds white-box (``posterior``) curves, one per method, dataset and seed: they
    take the settings of the run with that method, dataset and seed in ``rows``."""
    if not path.exists():
        return []
    # the curve's key and numbers must be there; thin and burn-in are blank for a point estimate
    table = read_runs(path, ["method", "dataset", "seed", "epsilon", "accuracy"], numeric=["seed", "epsilon", "accuracy"])
    if "protocol" not in table:
        runs = pd.DataFrame(rows, columns=COLUMNS)[RUN_KEY]
        if runs.duplicated(["method", "dataset", "seed"]).any():
            raise ValueError(f"{path} does not record which run each curve belongs to, and {len(runs)} runs could be it: move it aside")
        table = table.merge(runs, on=["method", "dataset", "seed"], how="left").assign(protocol="posterior")
    return table[FGSM_COLUMNS].to_dict("records")


def main(argv=None):
    args = parse_args(argv)
    device = device_from_args(args)
    pyro.enable_validation(False)
    # a user's images, read and checked before any work
    own = image_data(args, bundled=DATASETS, pixels_in_unit_interval="FGSM clips the attacked images to [0, 1]" if args.fgsm else None)
    if own is not None:
        check_input_shape(own, INPUT_SHAPE, NETWORK)
        args.dataset, args.num_classes = own.dataset, own.num_classes
    prefix = "classify_cnn" + (f"_{own.dataset}" if own is not None else "")
    out = args.out or args.results_dir / f"{prefix}{'_quick' if args.quick else ''}{args.settings_tag}.csv"
    stem, tables_dir = out.stem, out.parent
    fgsm_path = out.with_name(stem + "_fgsm.csv")
    # finished runs are skipped: a row without its key or numbers is an error, never a result
    rows = read_runs(out, COLUMNS, required=["method", "dataset", "seed", "epochs", "accuracy", "test_ll", "ece", "samples", "train_seconds"],
                     numeric=[c for c in COLUMNS if c not in ("method", "dataset")]).to_dict("records")
    fgsm_rows = read_fgsm_rows(fgsm_path, rows)
    done = {_key(r) for r in rows}
    curves_done = {(_key(r), r["protocol"]) for r in fgsm_rows}
    data = None
    for method in args.methods:
        burn_in = args.burn_in_epochs / args.epochs if args.burn_in_epochs is not None else args.burn_in
        sampler_settings = {"thin": args.thin, "burn_in": burn_in} if is_sampler(method) else {"thin": math.nan, "burn_in": math.nan}
        run = {"method": method, "dataset": args.dataset, "seed": args.seed, "epochs": args.epochs, **sampler_settings}
        curves = [p for p in args.fgsm_protocols if (_key(run), p) not in curves_done] if args.fgsm else []
        if _key(run) in done and not curves:
            print(f"{method} on {args.dataset} (seed {args.seed}, {args.epochs} epochs) is already in {out}; skipped")
            continue
        data = data or load(args.dataset, args.data_dir, args.quick, device, images=own)
        run_dir = args.run_dir / run_dir_name(method, args) / ("quick" if args.quick else "full")
        run_dir.mkdir(parents=True, exist_ok=True)
        set_seed(args.seed)
        pyro.clear_param_store()
        # a finished run resumes from its last checkpoint without training (FGSM curves it lacks)
        result, predictor = run_method(method, data, args, device, run_dir)
        if result is None:
            print(f"{method} on {args.dataset}: {args.epochs} epochs run, no sample averaged yet (burn-in {args.burn_in_epochs} epochs, "
                  f"thinning {args.thin} iterations); the chain is checkpointed in {run_dir}: run again with a larger --epochs", flush=True)
            continue
        if _key(run) not in done:
            row = {**run, **result}  # the runners time every leg of the run (train_seconds)
            print(f"{method:9s} {args.dataset:8s} accuracy {row['accuracy']:.2f}%  test_ll {row['test_ll']:.4f}  ({row['samples']} sample(s), {row['train_seconds']:.0f} s)", flush=True)
            rows.append(row)
            atomic.write_csv(pd.DataFrame(rows, columns=COLUMNS), out)
        x_test, y_test = data[2][: args.fgsm_examples], data[3][: args.fgsm_examples]
        for protocol in curves:
            curve = fgsm_curve(predictor, x_test, y_test, protocol)
            fgsm_rows.extend({**run, "protocol": protocol, **r} for r in curve.to_dict("records"))
            atomic.write_csv(pd.DataFrame(fgsm_rows, columns=FGSM_COLUMNS), fgsm_path)
            print(f"{method:9s} FGSM ({protocol}): " + ", ".join(f"{r['epsilon']:g}: {r['accuracy']:.4f}" for r in curve.to_dict("records")), flush=True)

    if not rows:
        return 0
    results = pd.DataFrame(rows, columns=COLUMNS)
    published = [PUBLISHED.get((m, d), math.nan) for m, d in zip(results.method, results.dataset)]
    if not all(math.isnan(p) for p in published):  # a user's data set has no published column
        results["published_accuracy"] = published
    notes = (
        "Measured by `reproductions/classify_cnn.py` (test accuracy in %, test log-likelihood and ECE of the predictive; "
        "samplers: the step-size-weighted posterior average over `samples` thinned samples). "
        + ("`published_accuracy` is Deng et al. (2019), Table 2 (published; Vanilla = adam, Dropout = dropout; thinning 500 iterations; their epoch "
           "count is not stated). " if "published_accuracy" in results else "")
        + "`epochs`, `thin` (iterations between averaged samples) and `burn_in` (fraction of the "
        "iterations before averaging starts) give each run's length here; the paper's other settings (batch 1000, lr 5e-7, "
        "omega_k = (k + 1000)^(-3/4), tau = 1000 / 2500) are this script's defaults. `train_seconds` covers every leg of a run."
    )
    title = "2-Conv-2-FC CNN without augmentation (Deng et al. 2019, Table 2)"
    if own is not None:
        notes += " " + image_data_note(own, args.data) + (f" Inverse temperature {args.tau:g}." if args.tau is not None else " Inverse temperature 1000 (MNIST's).")
        title = f"2-Conv-2-FC CNN without augmentation on {own.dataset} (the protocol of Deng et al. 2019)"
    save_table(results, stem, tables_dir, title=title, notes=notes)
    print()
    print(to_markdown(results))
    if fgsm_rows:
        table = pd.DataFrame(fgsm_rows, columns=FGSM_COLUMNS)
        images = "MNIST / Fashion-MNIST" if own is None else own.dataset
        save_table(table, stem + "_fgsm", tables_dir, title=f"FGSM accuracy (fraction) on {images} test images (Deng et al. 2019, Fig. 2)",
                   notes="Measured by `reproductions/classify_cnn.py --fgsm`. protocol `posterior`: x_adv = clip(x + epsilon sign(grad_x -log p(y|x)), 0, 1) "
                         "against the posterior-averaged p (mean of the samples' probabilities) and the true label y, scored by that p. "
                         "protocol `authors` (Deng et al.'s tools/attacker.py): x_adv crafted once against the first averaged sample "
                         "(a point estimate: its own network), lowering the probability of the class it predicts; scored by the ensemble of "
                         "all averaged samples pooled as the sum of their log-probabilities. The paper's Fig. 2 (published, read off the "
                         "poster; MNIST, epsilon = 0.5): SGHMC-SA about 22 %, SGHMC about 20 %, Dropout about 12 %, Vanilla about 10 %.")
        plot_fgsm(table, tables_dir, stem + "_fgsm")
    return 0


if __name__ == "__main__":
    run_main(main)
