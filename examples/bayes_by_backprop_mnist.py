"""Bayes by Backprop on MNIST (Blundell et al. 2015), with Graves-style pruning.

An MLP (784-400-400-10 by default) with the scale-mixture prior (eq. 7) and a mean-field
Gaussian posterior is trained with the Monte Carlo ELBO (one weight sample per minibatch,
as in the paper; ``--estimator local`` for local reparameterization), optionally with the
minibatch KL weights of eq. 9 (``--kl-weights blundell``). Reported: test error with the
posterior predictive (``--num-samples`` draws) and at the posterior mean, then the
signal-to-noise pruning curve (weights with ``|mu/sigma|`` below a threshold removed):
weights kept and test error before and after.

Writes ``docs/results/bayes_by_backprop_mnist.{csv,md}``,
``bayes_by_backprop_mnist_pruning.{csv,md,png}``.

    python examples/bayes_by_backprop_mnist.py --epochs 50
    python examples/bayes_by_backprop_mnist.py --quick
"""

import argparse
import math
from pathlib import Path

import pandas as pd
import pyro

from pyrozoo.compression.graves import pruning_curve
from pyrozoo.data import load_mnist
from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import BlundellKLReweighting, ClosedFormKL_ELBO, evaluate, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, Categorical, ScaleMixturePrior
from pyrozoo.reporting import save_figure, save_table, to_markdown
from recipes.cli import add_common_arguments, device_from_args, finite_float, non_negative_float_list, positive_float, positive_int, probability, run_main

#: Blundell et al. (2015), Table 1: test error (%) of BBB with the scale-mixture prior
PUBLISHED_ERROR = {400: 1.36, 800: 1.34, 1200: 1.32}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=positive_int, default=400, help="units in each of the two hidden layers")
    parser.add_argument("--epochs", type=positive_int, default=50)
    parser.add_argument("--batch-size", type=positive_int, default=128)
    parser.add_argument("--lr", type=positive_float, default=1e-3)
    parser.add_argument("--pi", type=probability, default=0.5, help="weight of the wide mixture component, in [0, 1]")
    parser.add_argument("--log-sigma1", type=finite_float, default=0.0, help="-log sigma1 (wide component)")
    parser.add_argument("--log-sigma2", type=finite_float, default=6.0, help="-log sigma2 (narrow component)")
    parser.add_argument("--init-scale", type=positive_float, default=math.log1p(math.exp(-5.0)), help="initial posterior sd (softplus(-5) as in the paper)")
    parser.add_argument("--kl-weights", choices=["uniform", "blundell"], default="blundell", help="minibatch KL weighting (eq. 9)")
    parser.add_argument("--estimator", choices=["weights", "local"], default="weights", help="one weight sample per minibatch, or local reparameterization")
    parser.add_argument("--num-samples", type=positive_int, default=20, help="posterior draws for the predictive")
    parser.add_argument("--thresholds", type=non_negative_float_list, default="0.5,1,1.5,2,3", help="|mu/sigma| pruning thresholds")
    parser.add_argument("--checkpoint", type=Path, default=None, help="training checkpoint (resumed if present)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    device = device_from_args(args)
    pyro.enable_validation(False)
    pyro.set_rng_seed(args.seed)
    x_train, y_train = load_mnist("mnist", train=True, data_dir=args.data_dir)
    x_test, y_test = load_mnist("mnist", train=False, data_dir=args.data_dir)
    hidden, epochs = args.hidden, args.epochs
    if args.quick:
        x_train, y_train, x_test, y_test, hidden, epochs = x_train[:1000], y_train[:1000], x_test[:500], y_test[:500], 32, 2
    x_train, y_train = x_train.flatten(1).to(device), y_train.to(device)
    x_test, y_test = x_test.flatten(1).to(device), y_test.to(device)

    prior = ScaleMixturePrior(args.pi, math.exp(-args.log_sigma1), math.exp(-args.log_sigma2))
    model = BayesianNeuralNetwork(MLP(784, [hidden, hidden], 10).to(device), prior, Categorical(len(x_train)))
    guide = MeanFieldNormalGuide(model, init_scale=args.init_scale)
    history = fit(
        model, guide, (x_train, y_train), epochs=epochs, batch_size=args.batch_size, lr=args.lr,
        objective=ClosedFormKL_ELBO(), estimator="local" if args.estimator == "local" else None,
        kl_schedule=BlundellKLReweighting() if args.kl_weights == "blundell" else None,
        device=device, seed=args.seed, checkpoint=args.checkpoint, progress=not args.no_progress,
    )
    train_seconds = float(history.seconds.sum())  # over all epochs, also those before a resume

    def test_metrics():
        predictive = evaluate(model, guide, x_test, y_test, num_samples=args.num_samples, batch_size=2000)
        median = {name: value.unsqueeze(0) for name, value in guide.median().items()}
        mean_net = evaluate(model, guide, x_test, y_test, num_samples=1, batch_size=2000, samples=median)
        return {"test_error": predictive["error"], "test_error_posterior_mean": mean_net["error"], "test_ll": predictive["test_ll"]}

    metrics = test_metrics()
    stem = "bayes_by_backprop_mnist" + ("_quick" if args.quick else "")
    config = f"784-{hidden}-{hidden}-10, pi={args.pi}, -log sigma1={args.log_sigma1}, -log sigma2={args.log_sigma2}, {epochs} epochs, batch {args.batch_size}, Adam lr {args.lr}, KL weights {args.kl_weights}, estimator {args.estimator}"
    rows = [
        {"source": "measured (this repository)", "network": f"2x{hidden}", "epochs": len(history) and int(history.epoch.iloc[-1]), **metrics, "train_seconds": train_seconds},
    ]
    if hidden in PUBLISHED_ERROR:
        rows.append({"source": "Blundell et al. 2015, Table 1 (published)", "network": f"2x{hidden}", "test_error": PUBLISHED_ERROR[hidden]})
    table = pd.DataFrame(rows)
    save_table(table, stem, args.results_dir, title="Bayes by Backprop on MNIST", notes=f"Measured configuration: {config}. Test error in percent; `test_error` uses the posterior predictive with {args.num_samples} draws, `test_error_posterior_mean` the network at the posterior mean.")
    print(to_markdown(table))

    thresholds = args.thresholds
    curve = pruning_curve(guide, thresholds, test_metrics, include=lambda name: name.endswith("weight"))
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
        ax.set_title("BBB on MNIST: signal-to-noise pruning")
        ax.legend()
        save_figure(fig, stem + "_pruning", args.results_dir)
    except ImportError:
        print("matplotlib not installed: no plot")
    return table, curve


if __name__ == "__main__":
    run_main(main)
