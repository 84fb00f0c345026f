"""Bayes by Backprop on MNIST (Blundell et al. 2015), with Graves-style pruning.

An MLP (784-400-400-10 by default) with the scale-mixture prior (eq. 7) and a mean-field
Gaussian posterior (the declaration ``bbb``; protocol in :mod:`zoo_protocols.bayes_by_backprop`)
is trained with the Monte Carlo ELBO (one weight sample per minibatch,
as in the paper; ``--estimator local`` for local reparameterization), optionally with the
minibatch KL weights of eq. 9 (``--kl-weights blundell``). Reported: test error with the
posterior predictive (``--num-samples`` draws) and at the posterior mean, then the
signal-to-noise pruning curve (weights with ``|mu/sigma|`` below a threshold removed):
weights kept and test error before and after.

Writes ``docs/results/bayes_by_backprop_mnist.{csv,md}``,
``bayes_by_backprop_mnist_pruning.{csv,md,png}``.

``--data`` takes a user's images instead of MNIST (an ``.npz`` with ``x``, ``y``, optionally
``x_test``, ``y_test``): the MLP reads them flattened, with an output per class, so any image
size runs; the files are named after the data set (``bayes_by_backprop_<name>*``) and have no
published rows.

    python reproductions/bayes_by_backprop_mnist.py --epochs 50
    python reproductions/bayes_by_backprop_mnist.py --data digits.npz --epochs 20
    python reproductions/bayes_by_backprop_mnist.py --quick
"""

import argparse
from pathlib import Path

import pandas as pd
import pyro

from pyrozoo.data import load_mnist
from pyrozoo.reporting import save_figure, save_table, to_markdown
from zoo_protocols.bayes_by_backprop import INIT_SCALE, PUBLISHED_ERROR, pruning, scores, settings, train
from zoo_protocols.cli import (
    add_common_arguments,
    add_image_data_arguments,
    device_from_args,
    finite_float,
    image_data,
    image_data_note,
    non_negative_float_list,
    positive_float,
    positive_int,
    probability,
    run_main,
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=positive_int, default=400, help="units in each of the two hidden layers")
    parser.add_argument("--epochs", type=positive_int, default=50)
    parser.add_argument("--batch-size", type=positive_int, default=128)
    parser.add_argument("--lr", type=positive_float, default=1e-3)
    parser.add_argument("--pi", type=probability, default=0.5, help="weight of the wide mixture component, in [0, 1]")
    parser.add_argument("--log-sigma1", type=finite_float, default=0.0, help="-log sigma1 (wide component)")
    parser.add_argument("--log-sigma2", type=finite_float, default=6.0, help="-log sigma2 (narrow component)")
    parser.add_argument("--init-scale", type=positive_float, default=INIT_SCALE, help="initial posterior sd (softplus(-5) as in the paper)")
    parser.add_argument("--kl-weights", choices=["uniform", "blundell"], default="blundell", help="minibatch KL weighting (eq. 9)")
    parser.add_argument("--estimator", choices=["weights", "local"], default="weights", help="one weight sample per minibatch, or local reparameterization")
    parser.add_argument("--num-samples", type=positive_int, default=20, help="posterior draws for the predictive")
    parser.add_argument("--thresholds", type=non_negative_float_list, default="0.5,1,1.5,2,3", help="|mu/sigma| pruning thresholds")
    parser.add_argument("--checkpoint", type=Path, default=None, help="training checkpoint (resumed if present)")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    device = device_from_args(args)
    # a user's images, read and checked before any work
    own = image_data(args, bundled=("mnist",))
    pyro.enable_validation(False)
    pyro.set_rng_seed(args.seed)
    if own is not None:
        (x_train, y_train), (x_test, y_test) = (own.x_train, own.y_train), (own.x_test, own.y_test)
        num_classes, data_name = own.num_classes, own.dataset
    else:
        x_train, y_train = load_mnist("mnist", train=True, data_dir=args.data_dir)
        x_test, y_test = load_mnist("mnist", train=False, data_dir=args.data_dir)
        num_classes, data_name = 10, "MNIST"
    hidden, epochs = args.hidden, args.epochs
    if args.quick:
        x_train, y_train, x_test, y_test, hidden, epochs = x_train[:1000], y_train[:1000], x_test[:500], y_test[:500], 32, 2
    x_train, y_train = x_train.flatten(1).to(device), y_train.to(device)
    x_test, y_test = x_test.flatten(1).to(device), y_test.to(device)

    s = settings(args.pi, args.log_sigma1, args.log_sigma2, args.init_scale, args.kl_weights)
    model, guide, history = train(
        (x_train, y_train), s, hidden=hidden, epochs=epochs, batch_size=args.batch_size, lr=args.lr, num_classes=num_classes,
        estimator="local" if args.estimator == "local" else None,
        device=device, seed=args.seed, checkpoint=args.checkpoint, progress=not args.no_progress,
    )
    train_seconds = float(history.seconds.sum())  # over all epochs, also those before a resume
    metrics = scores(model, guide, x_test, y_test, args.num_samples)
    stem = "bayes_by_backprop_" + ("mnist" if own is None else own.dataset) + ("_quick" if args.quick else "")
    config = f"{x_train.shape[-1]}-{hidden}-{hidden}-{num_classes}, pi={args.pi}, -log sigma1={args.log_sigma1}, -log sigma2={args.log_sigma2}, {epochs} epochs, batch {args.batch_size}, Adam lr {args.lr}, KL weights {args.kl_weights}, estimator {args.estimator}"
    rows = [
        {"source": "measured (this repository)", "network": f"2x{hidden}", "epochs": len(history) and int(history.epoch.iloc[-1]), **metrics, "train_seconds": train_seconds},
    ]
    if hidden in PUBLISHED_ERROR and own is None:  # nothing published for a user's data
        rows.append({"source": "Blundell et al. 2015, Table 1 (published)", "network": f"2x{hidden}", "test_error": PUBLISHED_ERROR[hidden]})
    table = pd.DataFrame(rows)
    notes = f"Measured configuration: {config}. Test error in percent; `test_error` uses the posterior predictive with {args.num_samples} draws, `test_error_posterior_mean` the network at the posterior mean."
    if own is not None:
        notes += " " + image_data_note(own, args.data)
    save_table(table, stem, args.results_dir, title=f"Bayes by Backprop on {data_name}", notes=notes)
    print(to_markdown(table))

    curve = pruning(model, guide, x_test, y_test, args.num_samples, args.thresholds)
    save_table(curve, stem + "_pruning", args.results_dir, title="Graves-style pruning of the BBB posterior by |mu/sigma|", notes="Threshold 0 is the unpruned network; weights with |mu/sigma| below the threshold are set to exactly zero. Biases are kept.")
    print(to_markdown(curve))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(100 * curve.fraction_kept, curve.test_error, "o-", label="posterior predictive")
        ax.plot(100 * curve.fraction_kept, curve.test_error_posterior_mean, "s--", label="posterior mean")
        ax.set_xscale("log")
        ax.set_xlabel("weights kept (%)")
        ax.set_ylabel("test error (%)")
        ax.set_title(f"BBB on {data_name}: signal-to-noise pruning")
        ax.legend()
        save_figure(fig, stem + "_pruning", args.results_dir)
    except ImportError:
        print("matplotlib not installed: no plot")
    return table, curve


if __name__ == "__main__":
    run_main(main)
