"""CIFAR-10 from the standard python batches (``cifar-10-batches-py``), without torchvision.

The archive ``cifar-10-python.tar.gz`` (https://www.cs.toronto.edu/~kriz/cifar.html)
extracts to ``cifar-10-batches-py/`` holding ``data_batch_1`` ... ``data_batch_5`` and
``test_batch``: pickled dictionaries with ``b"data"`` (uint8, 10000 x 3072, channel-major
rows) and ``b"labels"``. It is not shipped with the shared data; pass its location.
"""

import pickle
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np
import torch

from pyrozoo.data.paths import default_data_dir

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCHES = ("test_batch",)
#: per-channel mean and standard deviation of the training images (for normalisation)
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def find_cifar10(data_dir: Optional[Union[str, Path]] = None) -> Path:
    """The folder holding the batches: ``data_dir`` itself or ``data_dir/cifar-10-batches-py``
    (default data root: :func:`~pyrozoo.data.paths.default_data_dir`)."""
    try:
        root = Path(data_dir) if data_dir is not None else default_data_dir()
    except FileNotFoundError:
        root = None
    candidates = [] if root is None else [root, root / FOLDER]
    for folder in candidates:
        if (folder / TRAIN_BATCHES[0]).is_file():
            return folder
    where = ", ".join(str(c) for c in candidates) or "(no data directory)"
    raise FileNotFoundError(
        f"CIFAR-10 python batches not found (looked in {where}). Download "
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz, extract it, and pass the folder "
        f"containing '{FOLDER}' with --data-dir."
    )


def _read_batch(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"CIFAR-10 batch {path} is missing")
    with open(path, "rb") as f:
        try:
            batch = pickle.load(f, encoding="bytes")
        except Exception as e:  # a truncated or foreign file
            raise ValueError(f"{path}: not a CIFAR-10 python batch ({e})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ValueError(f"{path}: not a CIFAR-10 python batch (no data/labels)")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{path}: data of shape {data.shape} with {len(labels)} labels; expected (n, 3072) and n labels")
    return data, labels


def load_cifar10(train: bool = True, data_dir: Optional[Union[str, Path]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 in [0, 1] of shape ``(n, 3, 32, 32)`` and int64 labels."""
    folder = find_cifar10(data_dir)
    parts = [_read_batch(folder / name) for name in (TRAIN_BATCHES if train else TEST_BATCHES)]
    data = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    x = torch.from_numpy(data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels)
