"""Data: UCI regression with standard and gap splits, a user's own data sets (any folder in
the UCI layout, CSV / Parquet tables, image arrays), MNIST / Fashion-MNIST from IDX files,
rotated images, synthetic problems with known answers, and in-memory minibatching."""

from pyrozoo.data.batching import ShardedBatches, TensorBatches
from pyrozoo.data.gap import gap_rows, gap_split
from pyrozoo.data.idx import load_mnist, read_idx
from pyrozoo.data.images import check_input_shape, load_image_arrays
from pyrozoo.data.paths import resolve_data_dir
from pyrozoo.data.rotation import ROTATION_ANGLES, rotate_images
from pyrozoo.data.splits import ClassificationSplit, column_splits, kfold_splits, random_splits, read_index_splits
from pyrozoo.data.synthetic import LinearRegressionProblem, linear_regression, toy_regression_1d
from pyrozoo.data.tables import ClassificationTable, RegressionTable, load_table, read_table
from pyrozoo.data.uci import UCI_DATASETS, UCIDataset, UCISplit, dataset_folder, parse_splits
from pyrozoo.data.validation import check_finite, check_same_length

__all__ = [
    "TensorBatches",
    "ShardedBatches",
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
    "dataset_folder",
    "load_table",
    "read_table",
    "RegressionTable",
    "ClassificationTable",
    "ClassificationSplit",
    "random_splits",
    "kfold_splits",
    "column_splits",
    "read_index_splits",
    "load_image_arrays",
    "check_input_shape",
    "gap_rows",
    "gap_split",
    "rotate_images",
    "ROTATION_ANGLES",
    "check_finite",
    "check_same_length",
]
from pyrozoo.data.cifar import find_cifar10, load_cifar10  # noqa: E402

__all__ += ["load_cifar10", "find_cifar10"]
