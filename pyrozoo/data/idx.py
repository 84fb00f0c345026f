"""MNIST and Fashion-MNIST from their gzip IDX files (no torchvision needed)."""

import gzip
import struct
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np
import torch

from pyrozoo.data.paths import resolve_data_dir
from pyrozoo.data.validation import check_stored_labels

_FOLDERS = {"mnist": "MNIST", "fashion": "FashionMNIST", "fashion-mnist": "FashionMNIST", "fashionmnist": "FashionMNIST"}
_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049
_KINDS = {_IMAGES_MAGIC: "images (uint8, 3 dimensions)", _LABELS_MAGIC: "labels (uint8, 1 dimension)"}
#: MNIST's digits and Fashion-MNIST's ten kinds of clothing are both labelled 0..9
NUM_CLASSES = 10
IMAGE_SIZE = (28, 28)


def read_idx(path: Union[str, Path], expected_magic: int) -> np.ndarray:
    """Reads a (gzipped) IDX file: big-endian magic, dimension sizes, then uint8 data.

    Raises ``ValueError`` naming the file for a magic number other than ``expected_magic`` and
    for data longer or shorter than the header's dimensions say (with the item it ends in).
    """
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
        what = _KINDS.get(expected_magic, "data")
        raise ValueError(
            f"{path}: IDX magic number {magic} (0x{magic & 0xFFFFFFFF:08x}), expected {expected_magic} "
            f"(0x{expected_magic:08x}, {what}); not the IDX file this should be, or a corrupted one"
        )
    ndim = magic & 0xFF
    if len(raw) < 4 + 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header ({len(raw)} bytes for {ndim} dimensions)")
    # sizes are unsigned: a corrupted one reads as a huge size, which the length check below names
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    expected = int(np.prod(dims, dtype=object))
    if data.size != expected:
        per_item = int(np.prod(dims[1:], dtype=object)) if ndim > 1 else 1
        if data.size < expected:
            where = f"{expected - data.size} bytes short, from item {data.size // max(per_item, 1)} of 0..{dims[0] - 1} on"
            why = "a file cut short, or a header naming too many items"
        else:
            where = f"{data.size - expected} bytes more than that"
            why = "a header naming too few items, or data appended"
        raise ValueError(f"{path}: header says {dims} = {expected} values, file holds {data.size}: {where} ({why})")
    return data.reshape(dims)


def load_mnist(kind: str = "mnist", train: bool = True, data_dir: Optional[Union[str, Path]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 in [0, 1] of shape ``(n, 1, 28, 28)`` and int64 labels.

    :param kind: ``"mnist"`` or ``"fashion"``.
    :param data_dir: root holding ``MNIST/raw`` and ``FashionMNIST/raw`` (torchvision's layout);
        default ``$PYROZOO_DATA_DIR`` (:func:`pyrozoo.data.paths.resolve_data_dir`).
    """
    folder_name = _FOLDERS.get(kind.lower())
    if folder_name is None:
        raise ValueError(f"unknown data set {kind!r}; choose 'mnist' or 'fashion'")
    root = resolve_data_dir(data_dir)
    folder = root / folder_name / "raw"
    prefix = "train" if train else "t10k"
    images_path, labels_path = folder / f"{prefix}-images-idx3-ubyte.gz", folder / f"{prefix}-labels-idx1-ubyte.gz"
    images = read_idx(images_path, _IMAGES_MAGIC)
    labels = read_idx(labels_path, _LABELS_MAGIC)
    if images.shape[1:] != IMAGE_SIZE:
        raise ValueError(f"{images_path}: images of {images.shape[1]}x{images.shape[2]} pixels, expected {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]}")
    if len(images) != len(labels):
        # the first example without its partner: the shorter file is cut short, or the two are from different releases
        raise ValueError(
            f"{images_path} holds {len(images)} images but {labels_path} holds {len(labels)} labels: "
            f"example {min(len(images), len(labels))} has no partner; the two files must come from the same release"
        )
    check_stored_labels(str(labels_path), labels, NUM_CLASSES)
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y
