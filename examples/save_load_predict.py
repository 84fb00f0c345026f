"""Save a fitted posterior, load it in a new process, and predict with it.

Shows, on scikit-learn's diabetes data (442 patients, 10 features, standardised), a Bayesian
neural network (``BayesianNeuralNetwork``: random weights, point-estimate biases, a latent
noise precision) fitted with ``MeanFieldNormalGuide``, then

1. ``pyrozoo.save`` of the guide and of the model (the model holds the trained biases): data
   only, no pickled code, so a file from elsewhere cannot run anything when loaded;
2. a fresh Python process (this script, re-run with ``--load-from``) that builds the model and
   guide the same way, ``pyrozoo.load``s them and predicts the test rows; the script checks that
   its predictions are identical to those of the fitted objects;
3. ``predict`` (mean and sd per test row), ``evaluate`` (test LL, RMSE) and ``uncertainty``
   (aleatoric / epistemic split of the predictive variance), written to ``predictions.csv``
   in ``--out`` (default: a new temporary folder), beside ``guide.pt``, ``model.pt`` and the
   new process's ``loaded_predictions.pt``.

Run:

    python examples/save_load_predict.py                 # about 15 seconds on one CPU core
    python examples/save_load_predict.py --quick         # smoke test, a few seconds
    python examples/save_load_predict.py --out results/ --epochs 200
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

import pyrozoo
from pyrozoo import atomic
from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import evaluate, fit, predict, uncertainty
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, NormalPrior


def load_data(device):
    data = load_diabetes()
    x, y = torch.tensor(data.data, dtype=torch.float32), torch.tensor(data.target, dtype=torch.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    x_mean, x_std, y_mean, y_std = x_train.mean(0), x_train.std(0), float(y_train.mean()), float(y_train.std())
    tensors = ((x_train - x_mean) / x_std, ((y_train - y_mean) / y_std).unsqueeze(-1),
               (x_test - x_mean) / x_std, ((y_test - y_mean) / y_std).unsqueeze(-1))
    return [t.to(device) for t in tensors] + [y_mean, y_std]


def build(args, n_train):
    """Model and guide, built the same way in every process (a load needs objects of the same shapes)."""
    net = MLP(10, [args.hidden], 1)
    prior = NormalPrior(1.0, expose_parameters=["weight"])  # random weights; the biases stay point estimates
    model = BayesianNeuralNetwork(net, prior, GaussianLikelihood(n_train, precision=dist.Gamma(6.0, 6.0))).to(args.device)
    return model, MeanFieldNormalGuide(model, init_scale=0.01)


@torch.no_grad()
def predictions(model, guide, x, seed, num_samples):
    """Predictive mean and sd of each row, from ``num_samples`` guide draws (seeded: the same draws in every process)."""
    pyro.set_rng_seed(seed)
    summary = predict(model, guide, x, num_samples=num_samples)
    return {"mean": summary.mean.squeeze(-1).cpu(), "sd": summary.std.squeeze(-1).cpu()}


def load_and_predict(args):
    """The other process: fresh objects, the saved state loaded into them, predictions saved (as data too)."""
    x, y, x_test, _, _, _ = load_data(args.device)
    model, guide = build(args, len(x))
    folder = Path(args.load_from)
    pyrozoo.load(folder / "model.pt", into=model, map_location=args.device)
    # the guide creates its parameters on its first call: one batch of what it was fitted on sets it up
    pyrozoo.load(folder / "guide.pt", into=guide, args=(x[: args.batch_size], y[: args.batch_size]), map_location=args.device)
    pyrozoo.save(predictions(model, guide, x_test, args.seed, args.num_samples), folder / "loaded_predictions.pt")
    print(f"[new process] loaded {folder / 'model.pt'} and {folder / 'guide.pt'}, predicted {len(x_test)} test rows")


def main(args):
    torch.set_num_threads(args.threads)
    if args.load_from:
        return load_and_predict(args)
    out = Path(args.out or tempfile.mkdtemp(prefix="pyrozoo-save-load-"))
    out.mkdir(parents=True, exist_ok=True)
    x, y, x_test, y_test, y_mean, y_std = load_data(args.device)
    torch.manual_seed(args.seed)  # the network's initial weights
    model, guide = build(args, len(x))
    start = time.perf_counter()
    history = fit(model, guide, (x, y), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, seed=args.seed, device=args.device, progress=False)
    print(f"fitted {args.epochs} epochs in {time.perf_counter() - start:.1f} s (status {history.attrs['status']}, final loss {history['loss'].iloc[-1]:.1f})")

    pyrozoo.save(guide, out / "guide.pt")
    pyrozoo.save(model, out / "model.pt")  # the point-estimate biases are the model's parameters
    print(f"saved {out / 'guide.pt'} and {out / 'model.pt'}")
    command = [sys.executable, __file__, "--load-from", str(out), "--seed", str(args.seed), "--device", args.device,
               "--hidden", str(args.hidden), "--batch-size", str(args.batch_size), "--num-samples", str(args.num_samples),
               "--threads", str(args.threads)]
    subprocess.run(command, check=True)
    mine, loaded = predictions(model, guide, x_test, args.seed, args.num_samples), pyrozoo.load(out / "loaded_predictions.pt")
    same = all(torch.equal(mine[k], loaded[k]) for k in mine)
    largest = max(float((mine[k] - loaded[k]).abs().max()) for k in mine)
    print(f"predictions of the loaded posterior identical to the fitted one's: {same} (largest difference {largest:.3g})")

    pyro.set_rng_seed(args.seed)
    scores = evaluate(model, guide, x_test, y_test, num_samples=args.num_samples, y_scale=y_std, y_shift=y_mean)
    pyro.set_rng_seed(args.seed)  # the draws predictions() used: total = sd^2
    parts = {k: (v.squeeze(-1).sqrt().cpu() * y_std).double() for k, v in uncertainty(model, guide, x_test, num_samples=args.num_samples).items()}
    table = pd.DataFrame({
        "y": (y_test.squeeze(-1).cpu().double() * y_std + y_mean).numpy(),
        "mean": (mine["mean"].double() * y_std + y_mean).numpy(),
        "sd": (mine["sd"].double() * y_std).numpy(),
        "aleatoric sd": parts["aleatoric"].numpy(),
        "epistemic sd": parts["epistemic"].numpy(),
    })
    atomic.write_csv(table.round(4), out / "predictions.csv", index=True, index_label="test row")
    print(f"\ntest LL {scores['test_ll']:.3f}, test RMSE {scores['rmse']:.2f} (original units; target sd {y_std:.1f})")
    print(f"{out / 'predictions.csv'}, first rows (predictive sd, total^2 = aleatoric^2 + epistemic^2):")
    print(table.head(8).round(2).to_string())
    print(table[["sd", "aleatoric sd", "epistemic sd"]].mean().round(2).to_frame("mean over test rows").T.to_string())
    print(f"largest |sd - sqrt(aleatoric^2 + epistemic^2)|: {float((table['sd'] - parts['total'].numpy()).abs().max()):.2g}")
    if args.plot:
        import matplotlib.pyplot as plt

        plt.figure(figsize=(4, 4))
        plt.errorbar(table["y"], table["mean"], yerr=2 * table["sd"], fmt=".", alpha=0.6)
        plt.plot([table["y"].min(), table["y"].max()], [table["y"].min(), table["y"].max()], "k--", lw=0.8)
        plt.xlabel("observed")
        plt.ylabel("predicted (mean +- 2 sd)")
        plt.tight_layout()
        plt.show()
    if args.quick:
        print("(--quick: a few steps only, the numbers are not meaningful)")
    if not same:
        raise SystemExit("the loaded posterior predicts differently")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=50)
    parser.add_argument("--num-samples", type=int, default=200, help="posterior draws per prediction")
    parser.add_argument("--out", default=None, help="folder for the saved posterior and predictions.csv (default: a new temporary one)")
    parser.add_argument("--load-from", default=None, help=argparse.SUPPRESS)  # the new process's mode
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (a model this small runs fastest on one)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--plot", action="store_true", help="plot predictions against targets (needs matplotlib)")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.num_samples = 2, 20
    main(args)
