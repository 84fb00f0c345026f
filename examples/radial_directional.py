"""Radial-directional posteriors (Oh et al. 2020) against mean-field VI on handwritten digits.

scikit-learn's digits (1797 8x8 images, flattened to 64 standardised pixels, 10 classes;
80/20 train/test split) are classified by a 64-128-10 Bayesian MLP in two ways:

* ``mean-field``: a Normal(0, 1) prior on every parameter, ``MeanFieldNormalGuide`` and local
  reparameterization (Bayes by Backprop with a closed-form KL);
* ``rdp``: ``RadialDirectionalPrior`` writes every row and every column of a weight matrix
  as a radius times a direction on the unit sphere ("double grouping"): half-Cauchy radii
  (each a Gamma x inverse-Gamma product) and von Mises-Fisher directions.
  ``RadialDirectionalGuide`` gives the radii log-normal posteriors and the directions vMF
  posteriors with one concentration per layer; the KLs are closed-form
  (``ClosedFormKL_ELBO``) and the KL weight is warmed up over the first tenth of training.

The table gives test accuracy, log-likelihood and calibration error (ECE) of the posterior
predictive, the final loss (the negative ELBO; lower is a tighter bound) and the training
time. For RDP it also prunes whole units, as the paper does: a hidden unit goes when the
log posterior mode of its radius falls below the widest gap of the layer's histogram
(``pyrozoo.compression.radial_directional.pruning_masks``), and the network of posterior
mean weights is exported without those units (``remove_pruned_units``).

Run::

    python examples/radial_directional.py              # under a minute on a CPU
    python examples/radial_directional.py --quick      # smoke test
    python examples/radial_directional.py --hidden 256 --epochs 200
"""

import argparse

import pandas as pd
import pyro
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pyrozoo.compression import apply_masks, remove_pruned_units
from pyrozoo.compression.radial_directional import pruning_masks, posterior_mean_weights
from pyrozoo.guides import MeanFieldNormalGuide, RadialDirectionalGuide
from pyrozoo.inference import ClosedFormKL_ELBO, LinearKLWarmup, evaluate, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior, RadialDirectionalPrior


def load_data(device):
    """Digits, split 80/20 (stratified, fixed seed), pixels standardised with the training statistics."""
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    mean, std = x_train.mean(0), x_train.std(0)
    std[std == 0] = 1.0  # pixels that are always blank
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std

    def tensors(x, y):
        return torch.tensor(x, dtype=torch.float32, device=device), torch.tensor(y, device=device)

    return tensors(x_train, y_train), tensors(x_test, y_test)


def build(method, args, num_train):
    """``(model, guide, extra fit arguments)`` of one method, from the same initial network."""
    torch.manual_seed(args.seed)
    net = MLP(64, [args.hidden], 10).to(args.device)
    if method == "mean-field":
        model = BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(num_train))
        return model, MeanFieldNormalGuide(model, init_scale=1e-3), {"estimator": "local"}
    # the weights are composed from radii and directions, so there is no Normal weight site
    # for local reparameterization to act on: the weights are sampled once per minibatch
    prior = RadialDirectionalPrior(grouping="double", local_scale=1.0, global_scale=1.0, direction_epsilon=0.5)
    model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(num_train))
    guide = RadialDirectionalGuide(model, init_scale=1e-3, init_direction_epsilon=0.005)
    warmup = LinearKLWarmup(0, max(0.1 * args.epochs, 1e-3))
    return model, guide, {"objective": ClosedFormKL_ELBO(), "kl_schedule": warmup}


@torch.no_grad()
def prune(model, guide, x_test, y_test):
    """Units kept per layer and test accuracy of RDP's pruned network of posterior means."""
    output = f"{len(model.net) - 1}.weight"  # the last Linear layer: its rows are the 10 outputs, never pruned
    _, masks, _ = pruning_masks(model, guide, "gap", keep_rows=[output])
    net = apply_masks(model.net, masks, values=posterior_mean_weights(model, guide)).eval()
    accuracy = (net(x_test).argmax(-1) == y_test).float().mean().item()
    if not all(bool(m.any()) for m in masks.values()):  # a layer pruned entirely: nothing to export
        return "constant", accuracy
    export = remove_pruned_units(net, x_test[:200])
    inputs = 64 if export.input_index is None else len(export.input_index)
    return "-".join(str(n) for n in [inputs, *export.architecture]), accuracy


def main(args):
    torch.set_num_threads(args.threads)
    pyro.set_rng_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.device)
    rows = []
    for method in ["mean-field", "rdp"]:
        pyro.clear_param_store()
        model, guide, options = build(method, args, len(x_train))
        history = fit(
            model, guide, (x_train, y_train), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
            seed=args.seed, progress=not args.quick, **options,
        )
        metrics = evaluate(model, guide, x_test, y_test, num_samples=args.num_samples)
        row = {
            "method": method,
            "status": history.attrs["status"],
            "test acc": metrics["accuracy"],
            "test LL": metrics["test_ll"],
            "ECE": metrics["ece"],
            "-ELBO": history["loss"].iloc[-5:].mean(),
            "train s": history["seconds"].sum(),
        }
        if method == "rdp":
            row["pruned net"], row["pruned acc"] = prune(model, guide, x_test, y_test)
            kappas = {site: guide.direction_parameters(site)[1].detach().item() for site in guide.direction_sites}
        rows.append(row)
    print(f"\ndigits, MLP 64-{args.hidden}-10, {args.epochs} epochs, {len(x_train)} training / {len(x_test)} test images")
    print(pd.DataFrame(rows).set_index("method").to_string(float_format=lambda v: f"{v:.4g}", na_rep="-"))
    print("pruned net: the layer sizes after RDP removed the units whose radius collapsed")
    print("posterior vMF concentrations:", ", ".join(f"{site} {k:.3g}" for site, k in kappas.items()))

    if args.plot:
        import matplotlib.pyplot as plt

        from pyrozoo.atomic import save_figure  # replaces the file only once it is complete
        from pyrozoo.compression.radial_directional import pruning_statistics

        stats = pruning_statistics(model, guide)
        fig, axes = plt.subplots(1, len(stats), figsize=(4 * len(stats), 3))
        for ax, (key, values) in zip(axes, stats.items()):
            ax.hist(values.cpu().numpy(), bins=30)
            ax.set_title(key)
            ax.set_xlabel("log mode of the radius")
        fig.tight_layout()
        save_figure(fig, "radial_directional.png", dpi=120)
        print("wrote radial_directional.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--num-samples", type=int, default=100, help="posterior draws for the test metrics")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a network this small runs fastest on one)")
    parser.add_argument("--plot", action="store_true", help="histograms of RDP's pruning statistic per layer and grouping")
    parser.add_argument("--quick", action="store_true", help="a few epochs only (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.num_samples = 2, 10
    main(args)
