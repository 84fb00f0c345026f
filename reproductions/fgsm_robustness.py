"""Accuracy under fast-gradient-sign attacks: deterministic net, MC dropout, Sparse VD and a
variance network on MNIST (LeNet-300-100).

Each model is attacked through its own posterior-averaged predictive probabilities
(``pyrozoo.robustness``): the deterministic network with its softmax, MC dropout with the
average over dropout masks, Sparse VD and the variance network with the average over
weight samples from their guides. Writes ``<results-dir>/fgsm_robustness.{csv,md,png}``.

Examples::

    python reproductions/fgsm_robustness.py --epochs 50 --sparse-vd-checkpoint /tmp/svd_lenet300.pt
    python reproductions/fgsm_robustness.py --quick        # smoke run used by the tests
    python reproductions/fgsm_robustness.py --data digits.npz --epochs 20

``--data`` takes a user's images instead of MNIST (an ``.npz`` with ``x``, ``y``, optionally
``x_test``, ``y_test``; pixel values in [0, 1], which the attack clips to): every network is
LeNet-300-100 reading the flattened images, with an output per class, so any image size runs.
The files are named after the data set (``fgsm_robustness_<name>.*``).
"""

import argparse
import time
from pathlib import Path

import pandas as pd
import pyro
import torch
import torch.nn.functional as F
from torch import nn

from pyrozoo.data import TensorBatches, load_mnist
from pyrozoo.guides.variational_dropout import PARAMETERIZATIONS
from pyrozoo.inference import default_optimizer
from pyrozoo.reporting import save_figure, save_table, to_markdown
from pyrozoo.robustness import fgsm_accuracy
from pyrozoo.serialization import load_state
from pyrozoo.utils import set_seed
from zoo_protocols.cli import add_common_arguments, add_image_data_arguments, device_from_args, file_digest, fraction, image_data, image_data_note, non_negative_float_list, positive_int, run_main
from zoo_protocols.compress_sparse_vd import train_sparse_vd
from zoo_protocols.config import RunConfig
from zoo_protocols.lenet_recipes import MNIST_CLASSES, MNIST_INPUT_SHAPE, linear_to_zero
from zoo_protocols.variance_networks import train_variational_dropout

DEFAULT_EPSILONS = "0,0.02,0.05,0.1,0.15,0.2,0.3"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=positive_int, default=50, help="training epochs of every model")
    parser.add_argument("--epsilons", type=non_negative_float_list, default=DEFAULT_EPSILONS, help="attack strengths (inputs in [0, 1])")
    parser.add_argument("--num-samples", type=positive_int, default=20, help="posterior / dropout samples averaged per prediction")
    parser.add_argument("--test-size", type=positive_int, default=10000, help="attack the first N test images")
    parser.add_argument("--dropout", type=fraction, default=0.5, help="dropout rate of the MC-dropout network, in [0, 1)")
    parser.add_argument("--variance-parameterization", default="layer", choices=PARAMETERIZATIONS, help="parameterization of the variance network")
    parser.add_argument("--sparse-vd-checkpoint", type=Path, default=None, help="a checkpoint of reproductions/compress_lenet.py's sparse-vd lenet300 run to reuse (trained further to --epochs if shorter)")
    parser.add_argument("--variance-checkpoint", type=Path, default=None, help="a checkpoint of reproductions/variance_networks.py's lenet300 run of --variance-parameterization to reuse")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="resumable checkpoints of the models trained here")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    return parser.parse_args(argv)


def plain_mlp(in_features: int = 784, num_classes: int = MNIST_CLASSES) -> nn.Sequential:
    """LeNet-300-100 as a plain network."""
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, 300), nn.ReLU(), nn.Linear(300, 100), nn.ReLU(), nn.Linear(100, num_classes))


class DropoutMLP(nn.Sequential):
    """LeNet-300-100 with dropout on its inputs to each hidden and output layer (Gal & Ghahramani 2016)."""

    def __init__(self, p: float, in_features: int = 784, num_classes: int = MNIST_CLASSES):
        super().__init__(
            nn.Flatten(), nn.Linear(in_features, 300), nn.ReLU(), nn.Dropout(p), nn.Linear(300, 100), nn.ReLU(), nn.Dropout(p), nn.Linear(100, num_classes),
        )


def train_plain(net, train, epochs, device, seed, progress):
    """Cross-entropy training with Adam (lr 1e-3 decayed linearly to 0), batch 100."""
    net.to(device).train()
    batches = TensorBatches(*train, batch_size=100, seed=seed).to(device)
    opt = default_optimizer(net.parameters(), 1e-3)
    schedule = linear_to_zero(epochs)
    for epoch in range(epochs):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * schedule(epoch)
        for x, y, _ in batches:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
    return net


def deterministic_probs(net):
    net.eval()
    return lambda x: torch.softmax(net(x), -1)


def mc_dropout_probs(net, num_samples):
    def probs(x):
        net.train()  # dropout active: an average over masks
        return torch.stack([torch.softmax(net(x), -1) for _ in range(num_samples)]).mean(0)

    return probs


def posterior_probs(model, guide, num_samples):
    """Average over weight samples from the guide, differentiable in the input."""

    def probs(x):
        out = []
        for _ in range(num_samples):
            with torch.no_grad():
                values = {name: guide.posterior(name).sample() for name in guide.sites()}
            out.append(torch.softmax(model.net_output(values, x), -1))
        return torch.stack(out).mean(0)

    return probs


def main(argv=None):
    args = parse_args(argv)
    device = device_from_args(args)
    epsilons = args.epsilons
    # a user's images, read and checked before any work
    own = image_data(args, bundled=("mnist",), pixels_in_unit_interval="FGSM clips the attacked images to [0, 1]")
    if own is not None:
        train, test = (own.x_train, own.y_train), (own.x_test, own.y_test)
        in_features, num_classes, data_name, input_shape = own.num_features, own.num_classes, own.dataset, own.input_shape
    else:
        train = load_mnist("mnist", train=True, data_dir=args.data_dir)
        test = load_mnist("mnist", train=False, data_dir=args.data_dir)
        in_features, num_classes, data_name, input_shape = 784, MNIST_CLASSES, "MNIST", MNIST_INPUT_SHAPE
    epochs, num_samples, test_size = args.epochs, args.num_samples, args.test_size
    if args.quick:
        train = (train[0][:500], train[1][:500])
        epochs, num_samples, test_size = 1, 2, 100
        epsilons = epsilons[:3]
    test_size = min(test_size, len(test[0]))  # the notes say how many were attacked
    x_test, y_test = test[0][:test_size].to(device), test[1][:test_size].to(device)
    # a user's data set: its name and contents in the file names, so a changed file never resumes a stale run
    tag = "" if own is None else f"{own.dataset}_{file_digest(args.data)}_"
    ckpt = (lambda model: str(args.checkpoint_dir / f"fgsm_{tag}{model}.pt")) if args.checkpoint_dir else (lambda model: None)
    if args.checkpoint_dir:
        args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress
    models = {}
    t0 = time.perf_counter()

    set_seed(args.seed)
    det = train_plain(plain_mlp(in_features, num_classes), train, epochs, device, args.seed, progress)
    models["deterministic"] = deterministic_probs(det)
    set_seed(args.seed)
    dropout_net = train_plain(DropoutMLP(args.dropout, in_features, num_classes), train, epochs, device, args.seed, progress)
    models[f"MC dropout (p={args.dropout})"] = mc_dropout_probs(dropout_net, num_samples)

    set_seed(args.seed)
    svd_checkpoint = str(args.sparse_vd_checkpoint) if args.sparse_vd_checkpoint and not args.quick else ckpt("sparse_vd")
    svd_epochs = epochs
    if args.sparse_vd_checkpoint and not args.quick and args.sparse_vd_checkpoint.exists():
        svd_epochs = max(epochs, int(load_state(args.sparse_vd_checkpoint, map_location="cpu")["epoch"]))
    shape = {} if own is None else {"input_shape": own.input_shape, "num_classes": num_classes}  # zoo_protocols.lenet_recipes.network_for
    config = RunConfig(arch="lenet300", device=device, seed=args.seed, progress=progress, extra={"checkpoint": svd_checkpoint, **shape})
    svd_model, svd_guide, _ = train_sparse_vd(train, config, svd_epochs)
    models["Sparse VD"] = posterior_probs(svd_model, svd_guide, num_samples)

    set_seed(args.seed)
    vn_epochs = epochs
    # the zero-mean network's output layer is a point estimate now: no checkpoint of the earlier,
    # all-zero-mean one may resume it
    vn_checkpoint = ckpt("variance_zero-mean-hidden" if args.variance_parameterization == "zero-mean" else f"variance_{args.variance_parameterization}")
    if args.variance_checkpoint and not args.quick:
        vn_checkpoint = str(args.variance_checkpoint)
        if args.variance_checkpoint.exists():
            vn_epochs = max(epochs, int(load_state(args.variance_checkpoint, map_location="cpu")["epoch"]))
    vn_model, vn_guide, _ = train_variational_dropout(
        "lenet300", args.variance_parameterization, train, epochs=vn_epochs, seed=args.seed, device=device,
        checkpoint=vn_checkpoint, progress=progress, input_shape=input_shape, num_classes=num_classes,
    )
    models[f"variance network ({args.variance_parameterization})"] = posterior_probs(vn_model, vn_guide, num_samples)

    frames = []
    for name, probs_fn in models.items():
        pyro.set_rng_seed(args.seed)
        table = fgsm_accuracy(probs_fn, x_test, y_test, epsilons, batch_size=500)
        table.insert(0, "model", name)
        frames.append(table)
        print(f"{name}: " + ", ".join(f"eps={e:g}: {a:.3f}" for e, a in zip(table.epsilon, table.accuracy)), flush=True)
    results = pd.concat(frames, ignore_index=True)
    wide = results.pivot(index="epsilon", columns="model", values="accuracy").reset_index()
    wide.columns.name = None
    print(to_markdown(wide, floatfmt=".4f"))
    network = "LeNet-300-100" if own is None else f"LeNet-300-100 ({in_features}-300-100-{num_classes})"
    notes = (
        f"Accuracy (fraction of the first {test_size} {data_name} test images) under FGSM attacks of strength epsilon "
        f"(max-norm, inputs in [0, 1]) on the posterior-averaged predictive ({num_samples} samples; for the "
        f"stochastic models the attack and the evaluation use different draws). {network}, {epochs} epochs "
        f"each (Sparse VD: {svd_epochs}, variance network: {vn_epochs}), "
        f"seed {args.seed}; {time.perf_counter() - t0:.0f} s in all. Produced by reproductions/fgsm_robustness.py."
    )
    if own is not None:
        notes += " " + image_data_note(own, args.data)
    stem = "fgsm_robustness" + ("" if own is None else f"_{own.dataset}")
    save_table(wide, stem, args.results_dir, title=f"FGSM robustness on {data_name}", notes=notes)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name in models:
        part = results[results.model == name]
        ax.plot(part.epsilon, part.accuracy, marker="o", label=name)
    ax.set_xlabel("attack strength epsilon")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"FGSM on {data_name}, LeNet-300-100")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, stem, args.results_dir)
    plt.close(fig)
    return results


if __name__ == "__main__":
    run_main(main)
