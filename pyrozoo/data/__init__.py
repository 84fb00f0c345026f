"""Data: UCI regression with standard splits, MNIST / Fashion-MNIST from IDX files,
synthetic problems with known answers, and in-memory minibatching."""

from pyrozoo.data.batching import TensorBatches
from pyrozoo.data.idx import load_mnist, read_idx
from pyrozoo.data.paths import resolve_data_dir
from pyrozoo.data.synthetic import LinearRegressionProblem, linear_regression, toy_regression_1d
from pyrozoo.data.uci import UCI_DATASETS, UCIDataset, UCISplit, parse_splits
from pyrozoo.data.validation import check_finite, check_same_length

__all__ = [
    "TensorBatches",
    "load_mnist",
    "read_idx",
    "resolve_data_dir",
    "LinearRegressionProblem",
    "linear_regression",
    "toy_regression_1d",
    "UCI_DATASETS",
    "UCIDataset",
    "UCISplit",
    "parse_splits",
    "check_finite",
    "check_same_length",
]
from pyrozoo.data.cifar import find_cifar10, load_cifar10  # noqa: E402

__all__ += ["load_cifar10", "find_cifar10"]
