"""Shared pieces of the LeNet compression recipes: the papers' initialisation, learning-rate
schedules, and the evaluation of a compressed network as a
:class:`~zoo_protocols.lenet.CompressionResult`.

The networks are MNIST's (``1 x 28 x 28`` inputs, 10 classes) unless a run's
``config.extra`` gives ``input_shape`` and ``num_classes`` (a user's images,
:func:`network_for`): LeNet-300-100 then reads the flattened inputs, whatever their shape;
LeNet-5-Caffe only takes MNIST's shape.
"""

import math
from typing import Dict, Optional, Tuple

import torch
from torch import nn

from pyrozoo.compression import count_network, format_sparsity, remove_pruned_units, sparse_storage_bytes, to_sparse
from pyrozoo.data import check_input_shape
from pyrozoo.inference import ClosedFormKL_ELBO, LinearKLWarmup, fit
from pyrozoo.models import LeNet5, LeNet300100
from zoo_protocols.config import RunConfig
from zoo_protocols.lenet import ARCHITECTURES, CompressionResult

#: epochs of the authors' LeNet scripts (Molchanov et al. 2017)
PAPER_EPOCHS = 200
#: MNIST's inputs and classes, for which the LeNets were designed; LeNet-5-Caffe's first fully
#: connected layer reads 50 maps of 4 x 4, which only 28 x 28 inputs leave
MNIST_INPUT_SHAPE, MNIST_CLASSES = (1, 28, 28), 10
#: the architectures by the names that errors give them
NAMES = {"lenet300": "LeNet-300-100", "lenet5": "LeNet-5-Caffe"}


def make_network(arch: str, init: str = "molchanov", input_shape=MNIST_INPUT_SHAPE, num_classes: int = MNIST_CLASSES) -> nn.Module:
    """LeNet-300-100 (reading ``input_shape`` flattened) or LeNet-5-Caffe (``input_shape``
    must be MNIST's), with ``num_classes`` outputs. ``init="molchanov"``: dense weights
    ``N(0, 0.01^2)``, convolutions Glorot-uniform, biases 0 (the Lasagne defaults of the
    Sparse VD scripts); ``"torch"``: PyTorch's default initialisation."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {ARCHITECTURES}")
    input_shape = tuple(int(d) for d in input_shape)
    if arch == "lenet5" and input_shape != MNIST_INPUT_SHAPE:
        shape = "x".join(map(str, input_shape))
        raise ValueError(f"{NAMES[arch]} is built for inputs of shape 1x28x28, not {shape}; lenet300 reads inputs of any shape")
    net = LeNet300100(int(math.prod(input_shape)), int(num_classes)) if arch == "lenet300" else LeNet5(num_classes=int(num_classes))
    if init == "torch":
        return net
    if init != "molchanov":
        raise ValueError(f"init must be 'molchanov' or 'torch', got {init!r}")
    with torch.no_grad():
        for module in net.modules():
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, 0.01)
                module.bias.zero_()
            elif isinstance(module, nn.Conv2d):
                nn.init.xavier_uniform_(module.weight)
                module.bias.zero_()
    return net


def check_network_input(data, arch: str) -> None:
    """``ValueError`` unless ``arch`` takes the inputs of ``data`` (a user's
    :class:`~pyrozoo.data.ClassificationSplit`), before any work: LeNet-5-Caffe takes MNIST's
    shape only (:func:`pyrozoo.data.check_input_shape`, pointing to LeNet-300-100, which takes any)."""
    if arch == "lenet5":
        try:
            check_input_shape(data, MNIST_INPUT_SHAPE, NAMES[arch])
        except ValueError as e:
            raise ValueError(f"{e} (--arch lenet300)") from None


def network_for(config: RunConfig, init: str) -> nn.Module:
    """:func:`make_network` of ``config.arch`` for the run's data: ``config.extra``'s
    ``input_shape`` and ``num_classes``, MNIST's when not given."""
    return make_network(config.arch, init, config.extra.get("input_shape", MNIST_INPUT_SHAPE), config.extra.get("num_classes", MNIST_CLASSES))


def example_input(arch: str, input_shape=MNIST_INPUT_SHAPE) -> torch.Tensor:
    """One input of zeros, which the structured export and the counting trace the network with."""
    return torch.zeros(1, *input_shape)


def linear_to_zero(epochs: int, hold_fraction: float = 0.0):
    """``epoch -> lr factor``: constant for ``hold_fraction`` of the run, then linear to 0
    (``lr_linear`` of the LeNet-300-100 script with 0.5, ``lr_linear_to0`` of LeNet-5 with 0)."""
    if not 0.0 <= hold_fraction < 1.0:
        raise ValueError(f"hold_fraction must be in [0, 1), got {hold_fraction}")
    hold = hold_fraction * epochs

    def factor(epoch: int) -> float:
        if epoch < hold:
            return 1.0
        return max(0.0, (epochs - epoch) / (epochs - hold))

    return factor


def kl_warmup(epochs: int) -> LinearKLWarmup:
    """Molchanov et al.'s ``rw_linear``: KL weight 0 for 5 epochs, linear to 1 at epoch 20 —
    scaled down proportionally for runs shorter than the paper's 200 epochs' first tenth."""
    if epochs >= 40:
        return LinearKLWarmup(5, 20)
    scale = epochs / 40
    return LinearKLWarmup(5 * scale, max(20 * scale, 5 * scale + 1e-3))


def fit_recipe(model, guide, train, config: RunConfig, epochs: int, default_lr: float, **schedules):
    """``fit`` with the closed-form-KL ELBO and what ``config`` fixes for every recipe (batch
    size, learning rate unless the recipe's, device, seed, checkpoint, progress bar);
    ``schedules`` are the recipe's own ``fit`` options (``lr_schedule``, ``kl_schedule``,
    ``estimator``, or a declaration's ``objective``)."""
    s = config.settings({"batch_size": 100, "lr": default_lr})
    objective = schedules.pop("objective", None) or ClosedFormKL_ELBO()
    return fit(
        model,
        guide,
        train,
        epochs=epochs,
        objective=objective,
        batch_size=s["batch_size"],
        lr=s["lr"],
        device=config.device,
        seed=config.seed,
        checkpoint=config.extra.get("checkpoint"),
        progress=config.progress,
        **schedules,
    )


def quick_subset(data: Tuple[torch.Tensor, torch.Tensor], n: int) -> Tuple[torch.Tensor, torch.Tensor]:
    x, y = data
    return x[:n], y[:n]


@torch.no_grad()
def classification_error(net: nn.Module, data: Tuple[torch.Tensor, torch.Tensor], batch_size: int = 1000, device=None) -> float:
    """Percent of misclassified test examples of a deterministic network."""
    x, y = data
    device = device or next(net.parameters(), torch.empty(0)).device
    net.eval()
    wrong = 0
    for start in range(0, len(x), batch_size):
        logits = net(x[start : start + batch_size].to(device))
        wrong += int((logits.argmax(-1) != y[start : start + batch_size].to(device)).sum())
    return 100.0 * wrong / len(x)


@torch.no_grad()
def compressed_result(
    masked_net: nn.Module,
    dense_net: nn.Module,
    arch: str,
    test: Tuple[torch.Tensor, torch.Tensor],
    details: Optional[Dict] = None,
) -> CompressionResult:
    """Exports ``masked_net`` (pruned weights exactly zero) with the pruned units removed,
    checks that the export computes the same function on the test inputs, and reports its
    test error, kept weights, FLOPs and architecture (convention of
    :mod:`pyrozoo.compression.counting`) against the weights of ``dense_net``."""
    masked_net = masked_net.cpu().eval()
    x_example = example_input(arch, tuple(test[0].shape[1:]))
    export = remove_pruned_units(masked_net, x_example)
    compressed = export.module.eval()
    x_check = test[0][:500]
    gap = float((compressed(x_check) - masked_net(x_check)).abs().max())
    scale = float(masked_net(x_check).abs().max())
    if not gap <= 1e-4 * (1.0 + scale):
        raise RuntimeError(f"the structured export differs from the masked network by {gap:.3g}")
    # counted where it lives: moving the trained network to the CPU here would strand it there
    dense_counts = count_network(dense_net, x_example.to(next(dense_net.parameters()).device))
    counts = count_network(compressed, x_example)
    error = classification_error(compressed, test, device=torch.device("cpu"))
    info = {
        # of the export: weights of removed units count as pruned even where the masked
        # network still holds them (e.g. conv2 filters reading a pruned conv1 channel)
        "per_layer_sparsity": format_sparsity(counts.per_layer_sparsity(dense_counts)),
        "dense_flops_of_export": counts.dense_flops,
        # bytes of the export with CSR layers (float32 values, int32 indices) vs the dense float32 network
        "sparse_storage_bytes": sparse_storage_bytes(to_sparse(compressed)),
        "dense_storage_bytes": sum(p.numel() * 4 for p in dense_net.parameters()),
        "export_max_abs_diff": gap,
        **(details or {}),
    }
    return CompressionResult(
        test_error=error,
        params_total=dense_counts.params_total,
        params_kept=counts.params_kept,
        flops=counts.flops,
        pruned_architecture=counts.pruned_architecture,
        details=info,
        stored_weights=export.stored_weights,
    )


def resolve_epochs(config: RunConfig, default: int = PAPER_EPOCHS) -> int:
    if config.epochs is not None:
        if config.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {config.epochs}")
        return int(config.epochs)
    return 1 if config.quick else default


def training_details(history, epochs: int) -> Dict:
    """What every LeNet recipe reports of its training, from the ``fit`` history. The history
    travels in the checkpoint, so ``train_seconds`` covers all epochs of a run resumed across
    processes (and a finished checkpoint re-evaluated later reports the same figures)."""
    return {
        "epochs": epochs,
        "seconds_per_epoch": float(history.seconds.median()) if len(history) else math.nan,
        "train_seconds": float(history.seconds.sum()) if len(history) else math.nan,
        "final_loss": float(history.loss.iloc[-1]) if len(history) else math.nan,
    }
