"""Sparse variational dropout and Bayesian compression of an MLP on handwritten digits.

scikit-learn's digits (1797 8x8 images, flattened to 64 standardised pixels, 10 classes;
80/20 train/test split) are classified by a 64-256-128-10 MLP under two sparsifying
posteriors, both trained with local reparameterization and a linear KL warm-up:

* ``sparse-vd``: sparse variational dropout (Molchanov et al. 2017): the log-uniform prior
  ``LogUniformPrior`` on every weight and ``SparseVariationalDropoutGuide``, the
  posterior ``N(theta, alpha theta^2)`` per weight; a weight is pruned when its
  ``log alpha`` exceeds the guide's ``threshold`` (3), read off ``guide.keep_masks()``;
* ``bc-gnj`` / ``bc-ghs``: Bayesian compression (Louizos et al. 2017): a scale per input unit
  of every layer, with a normal-Jeffreys (``GroupNormalJeffreysPrior``) or horseshoe
  (``GroupHorseshoePrior``) prior, and ``BayesianCompressionGuide``; a unit is pruned when
  the log dropout rate of its scale exceeds ``--bc-threshold``, which removes whole columns.

For each method the table gives the test accuracy and log-likelihood of the posterior
predictive (``evaluate``), the accuracy of the pruned network of posterior means, the share
of weights pruned, the compression ratio ``|W| / |W != 0|`` and the units left in each layer
(``pyrozoo.compression.count_network`` and ``remove_pruned_units``).

Run::

    python examples/sparse_variational_dropout.py                       # under a minute on a CPU
    python examples/sparse_variational_dropout.py --quick               # smoke test
    python examples/sparse_variational_dropout.py --methods sparse-vd --epochs 300
"""

import argparse

import pandas as pd
import pyro
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pyrozoo.compression import apply_masks, count_network, format_sparsity, remove_pruned_units
from pyrozoo.compression.group_pruning import group_masks, weight_masks
from pyrozoo.guides import BayesianCompressionGuide, SparseVariationalDropoutGuide
from pyrozoo.inference import LinearKLWarmup, evaluate, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GroupHorseshoePrior, GroupNormalJeffreysPrior, LogUniformPrior

METHODS = ("sparse-vd", "bc-gnj", "bc-ghs")


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
    torch.manual_seed(args.seed)  # the same initial network for every method
    net = MLP(64, [256, 128], 10).to(args.device)
    if method == "sparse-vd":
        model = BayesianNeuralNetwork(net, LogUniformPrior(), CategoricalLikelihood(num_train))
        return model, SparseVariationalDropoutGuide(model)
    prior = GroupNormalJeffreysPrior() if method == "bc-gnj" else GroupHorseshoePrior(tau0=1e-5)
    model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(num_train))
    return model, BayesianCompressionGuide(model)


@torch.no_grad()
def pruned_network(method, model, guide, args):
    """The network of posterior means with the pruned weights set to exactly zero."""
    if method == "sparse-vd":
        return guide.mean_network(masked=True)  # weights with log alpha >= guide.threshold are zero
    masks = weight_masks(model.prior, group_masks(guide, thresholds=args.bc_threshold))
    means = {w: guide.weight_moments(w)[0] for w in guide.weight_names}
    return apply_masks(model.net, masks, values=means)


def main(args):
    torch.set_num_threads(args.threads)
    pyro.set_rng_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_data(args.device)
    rows, guides = [], {}
    for method in args.methods.split(","):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
        pyro.clear_param_store()
        model, guide = build(method, args, len(x_train))
        history = fit(
            model, guide, (x_train, y_train), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
            estimator="local", kl_schedule=LinearKLWarmup(0, args.warmup * args.epochs), seed=args.seed,
            progress=not args.quick,
        )
        guides[method] = guide
        metrics = evaluate(model, guide, x_test, y_test, num_samples=args.num_samples)
        pruned = pruned_network(method, model, guide, args).eval()
        counts = count_network(pruned, x_test[:1])
        with torch.no_grad():
            pruned_acc = (pruned(x_test).argmax(-1) == y_test).float().mean().item()
        if all(layer.weights_kept > 0 for layer in counts.layers):
            export = remove_pruned_units(pruned, x_test[:200])  # a smaller dense network, same outputs
            with torch.no_grad():
                export_acc = (export.module(x_test).argmax(-1) == y_test).float().mean().item()
            assert abs(pruned_acc - export_acc) < 1e-6, "the structured export should compute the same function"
            inputs = 64 if export.input_index is None else len(export.input_index)  # pixels the export reads
            export_sizes = "-".join(str(n) for n in [inputs, *export.architecture])
        else:  # a layer lost every weight: the network is constant (remove_pruned_units raises on it)
            export_sizes = "constant"
            print(f"{method}: a layer was pruned entirely; lower the threshold (--bc-threshold) or train longer")
        rows.append({
            "method": method,
            "status": history.attrs["status"],
            "test acc": metrics["accuracy"],
            "test LL": metrics["test_ll"],
            "pruned acc": pruned_acc,
            "weights pruned %": 100 * (1 - counts.params_kept / counts.params_total),
            "compression": counts.compression_ratio,
            "layer sparsity %": format_sparsity(counts.per_layer_sparsity(), digits=0),
            "units left": "-".join(str(layer.units) for layer in counts.layers),
            "export": export_sizes,
        })
    print(f"\ndigits, MLP 64-256-128-10 ({counts.params_total} weights), {args.epochs} epochs, "
          f"{len(x_train)} training / {len(x_test)} test images")
    print(pd.DataFrame(rows).set_index("method").to_string(float_format=lambda v: f"{v:.3f}"))
    print("units left: input features read by each layer; export: the layer sizes of the smaller network")

    if args.plot and "sparse-vd" in guides:
        import matplotlib.pyplot as plt

        from pyrozoo.atomic import save_figure  # replaces the file only once it is complete

        kept = guides["sparse-vd"].keep_masks()["0.weight"].float().sum(0).reshape(8, 8).cpu()  # per input pixel
        plt.imshow(kept, cmap="viridis")
        plt.colorbar(label="kept first-layer weights")
        plt.title("sparse VD: which pixels the network still reads")
        save_figure(plt.gcf(), "sparse_variational_dropout.png", dpi=120)
        print("wrote sparse_variational_dropout.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, from {','.join(METHODS)}")
    parser.add_argument("--epochs", type=int, default=120)
    parser.add_argument("--warmup", type=float, default=0.3, help="fraction of the epochs over which the KL weight rises from 0 to 1")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--bc-threshold", default="auto", help="log dropout rate above which BC prunes a unit: a number, or 'auto' (Otsu's cut per layer)")
    parser.add_argument("--num-samples", type=int, default=100, help="posterior draws for the test metrics")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a network this small runs fastest on one)")
    parser.add_argument("--plot", action="store_true", help="plot the kept first-layer weights per pixel (sparse VD)")
    parser.add_argument("--quick", action="store_true", help="a few epochs only (smoke test)")
    args = parser.parse_args()
    if args.bc_threshold != "auto":
        args.bc_threshold = float(args.bc_threshold)
    if args.quick:
        args.epochs, args.num_samples = 3, 10
    main(args)
