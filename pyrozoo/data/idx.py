"""MNIST and Fashion-MNIST from their gzip IDX files (no torchvision needed)."""

import gzip
import struct
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np
import torch

from pyrozoo.data.paths import resolve_data_dir

_FOLDERS = {"mnist": "MNIST", "fashion": "FashionMNIST", "fashion-mnist": "FashionMNIST", "fashionmnist": "FashionMNIST"}
_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049


def read_idx(path: Union[str, Path], expected_magic: int) -> np.ndarray:
    """Reads a (gzipped) IDX file: big-endian magic, dimension sizes, then uint8 data."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"IDX file {path} is missing")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot read ({e})") from None
    if len(raw) < 8:
        raise ValueError(f"{path}: too short to be an IDX file")
    magic = struct.unpack(">i", raw[:4])[0]
    if magic != expected_magic:
        raise ValueError(f"{path}: IDX magic number {magic}, expected {expected_magic}")
    ndim = magic & 0xFF
    if len(raw) < 4 + 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes for {ndim} dimensions)")
    dims = struct.unpack(">" + "i" * ndim, raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: header says {dims} = {int(np.prod(dims))} values, file holds {data.size}")
    return data.reshape(dims)


def load_mnist(kind: str = "mnist", train: bool = True, data_dir: Optional[Union[str, Path]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 in [0, 1] of shape ``(n, 1, 28, 28)`` and int64 labels.

    :param kind: ``"mnist"`` or ``"fashion"``.
    :param data_dir: root holding ``MNIST/raw`` and ``FashionMNIST/raw`` (torchvision's layout).
    """
    folder_name = _FOLDERS.get(kind.lower())
    if folder_name is None:
        raise ValueError(f"unknown data set {kind!r}; choose 'mnist' or 'fashion'")
    root = resolve_data_dir(data_dir)
    folder = root / folder_name / "raw"
    prefix = "train" if train else "t10k"
    images = read_idx(folder / f"{prefix}-images-idx3-ubyte.gz", _IMAGES_MAGIC)
    labels = read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", _LABELS_MAGIC)
    if len(images) != len(labels):
        raise ValueError(f"{folder}: {len(images)} images but {len(labels)} labels")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y
