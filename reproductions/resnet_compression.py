"""ResNet-20 on CIFAR-10 compressed with SG-MCMC-SA, magnitude pruning and simulated annealing
(Deng et al. 2019, Sec. 5.4, Table 3).

1. Dense pretraining: SGHMC (batch 1000, momentum 0.9, lr 2e-6 on the N/n-scaled log-joint,
   i.e. SGD's 0.1 on the mean loss; lr / 10 at 70% and 90% of the epochs; inverse
   temperature 20000) under a N(0, 0.2^2) prior on every parameter (the authors' weight decay
   5e-4 * N / 2 = 25 / 2 in the paper's units). Saved and reused by every method.
2. Sparse fine-tuning from the pretrained network: the SSGL prior on the 18 3x3 convolutions
   of the residual blocks (v0, v1 by target sparsity as in Table 3; nu = lambda = 1000,
   a = b = 2.7e5; initial sigma = 1, rho = 0.5, kappa = 5e-4, delta = 0.5), the other
   parameters N(0, 0.2^2); lr 2e-9 (/10 at 70% and 90%); pruning of those convolutions to the
   per-layer sparsity that makes the whole network's sparsity S, with s_k = S'(1 - 0.99^(k/50)),
   re-pruned every step as in the authors' code; methods

   * ``a-sghmc``: latent variables frozen (kappa = 5e-4, sigma = 1), annealing tau = 1000 * 1.005^epoch;
   * ``a-sghmc-em``: omega = 1, annealing;
   * ``sghmc-sa``: omega_k = 0.02 (1000 + k)^(-3/4), fixed tau = 1000;
   * ``a-sghmc-sa``: omega as above, annealing.

Augmentation: random crop (padding 4) and horizontal flip (the authors also use random
erasing). Reported: the test accuracy of the final pruned network (not the best epoch) and its
sparsity. CIFAR-10 is read from the python batches under ``--data-dir``; ``--synthetic`` (and
``--quick``) use random tensors of CIFAR's shape to exercise the pipeline.

``--data images.npz`` runs on a user's images instead (``x``, ``y``, optionally ``x_test``,
``y_test``; ``uint8`` scaled to [0, 1]): 3 x 32 x 32 images only, ResNet-20's input (any other
shape is refused before any work), with one output per class of the data and the images
standardised by their own per-channel mean and standard deviation. The files are named after
the data set and have no published column.

    python reproductions/resnet_compression.py --data-dir /data --method a-sghmc-sa --sparsity 0.9
    python reproductions/resnet_compression.py --quick
    python reproductions/resnet_compression.py --data images.npz --method sghmc-sa --sparsity 0.7
"""

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
import pyro
import torch

from pyrozoo import atomic
from pyrozoo.data import check_input_shape, load_cifar10
from pyrozoo.data.cifar import MEAN, STD
from pyrozoo.reporting import save_table, to_markdown
from zoo_protocols import read_runs
from zoo_protocols.cli import add_common_arguments, add_image_data_arguments, device_from_args, file_digest, image_data, image_data_note, name_list, positive_float, positive_int, run_main, select_methods
from zoo_protocols.resnet import METHODS, PRIOR_BY_SPARSITY, PUBLISHED, channel_statistics, finetune, pretrain

COLUMNS = ["method", "target_sparsity", "seed", "pretrain_epochs", "epochs", "accuracy", "sparsity", "sigma", "train_seconds"]


def load_data(args, device, own=None):
    if own is not None:
        return own.x_train.to(device), own.y_train.to(device), own.x_test.to(device), own.y_test.to(device)
    if args.synthetic:
        g = torch.Generator().manual_seed(args.seed)
        n, n_test = (256, 64) if args.quick else (50000, 10000)
        x = torch.rand(n, 3, 32, 32, generator=g)
        x_test = torch.rand(n_test, 3, 32, 32, generator=g)
        return x.to(device), torch.randint(0, 10, (n,), generator=g).to(device), x_test.to(device), torch.randint(0, 10, (n_test,), generator=g).to(device)
    try:
        x, y = load_cifar10(True, args.data_dir)
        x_test, y_test = load_cifar10(False, args.data_dir)
    except FileNotFoundError as e:
        sys.exit(f"resnet_compression: {e}\n(use --synthetic to run the pipeline on random tensors of CIFAR's shape)")
    return x.to(device), y.to(device), x_test.to(device), y_test.to(device)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=name_list, default="a-sghmc-sa", help=f"one of {', '.join(METHODS)}, a comma-separated list or 'all'")
    parser.add_argument("--sparsity", type=float, default=0.9, choices=sorted(PRIOR_BY_SPARSITY), help="target sparsity S of the whole network")
    parser.add_argument("--pretrain-epochs", type=positive_int, default=1000)
    parser.add_argument("--epochs", type=positive_int, default=1000, help="sparse fine-tuning epochs")
    parser.add_argument("--batch-size", type=positive_int, default=1000)
    parser.add_argument("--pretrain-lr", type=positive_float, default=2e-6)
    parser.add_argument("--pretrain-tau", type=positive_float, default=20000.0)
    parser.add_argument("--lr", type=positive_float, default=2e-9)
    parser.add_argument("--tau", type=positive_float, default=1000.0, help="initial inverse temperature of fine-tuning")
    parser.add_argument("--gaussian-scale", type=positive_float, default=0.2, help="prior sd of the non-sparse parameters")
    parser.add_argument("--synthetic", action="store_true", help="random tensors of CIFAR-10's shape instead of CIFAR-10")
    parser.add_argument("--run-dir", type=Path, default=Path("runs") / "resnet_compression")
    parser.add_argument("--out", type=Path, default=None, help="per-run CSV (default <results-dir>/resnet_compression.csv)")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    args.methods = select_methods(parser, args.method, METHODS)
    if args.synthetic and args.data is not None:
        parser.error("give --synthetic or --data, not both")
    if args.quick:
        args.synthetic, args.pretrain_epochs, args.epochs, args.batch_size = args.data is None, 1, 2, 64
    return args


def main(argv=None):
    args = parse_args(argv)
    own = image_data(args, bundled=("cifar10", "cifar-10"))
    if own is not None:  # before any work: ResNet-20's three input channels and the protocol's 32 x 32 crops fix the shape
        check_input_shape(own, (3, 32, 32), "ResNet-20")
    args.num_classes = 10 if own is None else own.num_classes
    args.normalisation = (MEAN, STD) if own is None else channel_statistics(own.x_train)
    device = device_from_args(args)
    pyro.enable_validation(False)
    # a user's images by name and contents: a changed file never resumes these runs
    data_tag = "" if own is None else f"{own.dataset}-{file_digest(args.data)}-"
    tag = ("quick-" if args.quick else "") + ("synthetic-" if args.synthetic else "") + data_tag + f"seed{args.seed}"
    stem = "resnet_compression" + ("" if own is None else f"_{own.dataset}") + ("_quick" if args.quick else "")
    out = args.out or args.results_dir / f"{stem}.csv"
    # the rows of earlier calls are kept: checked before any work, never half-read
    rows = read_runs(out, COLUMNS, numeric=COLUMNS[1:]).to_dict("records")
    data = load_data(args, device, own)
    run_dir = args.run_dir / tag
    run_dir.mkdir(parents=True, exist_ok=True)
    pretrained = pretrain(data, args, device, run_dir)
    for method in args.methods:
        t0 = time.perf_counter()
        result = finetune(method, pretrained, data, args, device, run_dir)
        row = {"method": method, "target_sparsity": args.sparsity, "seed": args.seed, "pretrain_epochs": args.pretrain_epochs, "epochs": args.epochs, **result, "train_seconds": time.perf_counter() - t0}
        rows.append(row)
        print(f"{method:11s} S={args.sparsity}: accuracy {row['accuracy']:.2f}%  sparsity {row['sparsity']:.4f}", flush=True)
        atomic.write_csv(pd.DataFrame(rows, columns=COLUMNS), out)
    table = pd.DataFrame(rows, columns=COLUMNS)
    notes = (
        "Measured by `reproductions/resnet_compression.py`: accuracy (%) of the final pruned network on the test set and its "
        "sparsity over all parameters." + (" SYNTHETIC DATA (random tensors): a pipeline check, not a result." if args.synthetic else "")
    )
    if own is None:
        table["published_accuracy"] = [PUBLISHED[m].get(s, math.nan) for m, s in zip(table.method, table.target_sparsity)]
        notes += " `published_accuracy` is Deng et al. (2019), Table 3 (published; best test accuracy over epochs, 1000 + 1000 epochs)."
    else:  # nothing published for a user's images
        notes += f" {image_data_note(own, args.data)} Images standardised by their training part's per-channel mean and standard deviation."
    title = "ResNet-20 / CIFAR-10 compression (Deng et al. 2019, Table 3)" if own is None else f"ResNet-20 / {own.dataset} compression (protocol of Deng et al. 2019, Table 3)"
    save_table(table, stem, args.results_dir, title=title, notes=notes)
    print(to_markdown(table))
    return 0


if __name__ == "__main__":
    run_main(main)
