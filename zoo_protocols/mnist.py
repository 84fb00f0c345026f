"""MNIST classification with a small fully connected network, with a registry of methods.

The counterpart of :mod:`zoo_protocols.uci` for classification: a method is a
function ``run(data, config) -> dict`` that trains on ``data``'s training images (the IDX
files, pixels in [0, 1], flattened by the network) and returns at least ``error`` (test
classification error, percent) and ``test_ll`` (mean test log predictive density per
example, nats), computed with :func:`pyrozoo.inference.evaluate` from the posterior
predictive. Methods register with :func:`register_mnist_method` in modules
``zoo_protocols/mnist_*.py``; :func:`zoo_protocols.compare.compare` runs them
beside the UCI methods. (The LeNet *compression* protocol, which evaluates pruned networks,
is :mod:`zoo_protocols.lenet`.)
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from pyrozoo.data import load_mnist
from pyrozoo.inference.diagnostics import collect_events, run_status
from pyrozoo.utils import set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.paths import resolve_data_dir
from zoo_protocols.registry import Method, MethodRegistry


@dataclass
class MNISTData:
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    def to(self, device, dtype=torch.float32) -> "MNISTData":
        return MNISTData(self.x_train.to(device, dtype), self.y_train.to(device), self.x_test.to(device, dtype), self.y_test.to(device))


def load_mnist_data(data_dir=None, train_size: Optional[int] = None, test_size: Optional[int] = None) -> MNISTData:
    """MNIST from the IDX files; ``train_size`` / ``test_size`` keep the first examples
    (for smoke runs; the full sets are 60000 / 10000). ``data_dir``: the data root (default
    :func:`zoo_protocols.paths.default_data_dir`)."""
    data_dir = resolve_data_dir(data_dir)
    x_train, y_train = load_mnist("mnist", train=True, data_dir=data_dir)
    x_test, y_test = load_mnist("mnist", train=False, data_dir=data_dir)
    return MNISTData(x_train[:train_size], y_train[:train_size], x_test[:test_size], y_test[:test_size])


#: the MNIST protocol's methods: ``run(data, config) -> {"error", "test_ll", ...}``, in modules ``mnist_*.py``
MNIST_REGISTRY = MethodRegistry("MNIST", "mnist_")
MNIST_METHODS: Dict[str, Method] = MNIST_REGISTRY.methods


def register_mnist_method(name: str, description: str = ""):
    """Decorator registering ``run(data, config) -> {"error", "test_ll", ...}`` under ``name``."""
    return MNIST_REGISTRY.register(name, description)


def available_methods() -> Dict[str, Method]:
    return MNIST_REGISTRY.available()


def run_mnist(method: str, data: MNISTData, config: RunConfig) -> dict:
    """Runs one method; adds ``train_seconds`` (wall clock of the whole run, evaluation included)
    and ``status`` (``"ok"``, or what its training reported: :mod:`pyrozoo.inference.diagnostics`;
    such a run is not a valid result)."""
    MNIST_REGISTRY.get(method)
    set_seed(config.seed)  # the network's initialisation too, as for UCI runs
    with collect_events() as events:
        result = MNIST_REGISTRY.run_timed(method, data.to(config.device), config, required=("error", "test_ll"))
    result["status"] = run_status(events)
    return result


def shape(data: MNISTData) -> Tuple[int, int]:
    """``(input features, classes)`` of the flattened images."""
    # a class may be missing from a small data set's training part: count the test labels too
    return int(data.x_train[0].numel()), max(int(data.y_train.max()), int(data.y_test.max())) + 1
