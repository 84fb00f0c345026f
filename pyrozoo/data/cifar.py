"""CIFAR-10 from the standard python batches (``cifar-10-batches-py``), without torchvision.

The archive ``cifar-10-python.tar.gz`` (https://www.cs.toronto.edu/~kriz/cifar.html)
extracts to ``cifar-10-batches-py/`` holding ``data_batch_1`` ... ``data_batch_5`` and
``test_batch``: pickled dictionaries with ``b"data"`` (uint8, 10000 x 3072, channel-major
rows) and ``b"labels"``. It is not shipped with the shared data; pass its location.

A pickle can run any code while it loads, so the batches are read with
:class:`_BatchUnpickler`, which builds only what a batch holds (dicts, lists, bytes, numbers,
NumPy arrays) and refuses every other import a pickle asks for.
"""

import codecs
import importlib
import os
import pickle
from pathlib import Path
from typing import Optional, Tuple, Union

import numpy as np
import torch

from pyrozoo.data.paths import ENV_VAR
from pyrozoo.data.validation import check_stored_labels

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCHES = ("test_batch",)
#: per-channel mean and standard deviation of the training images (for normalisation)
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
NUM_CLASSES = 10


def _numpy_core(module: str):
    # NumPy 2 moved numpy.core to numpy._core; pickles name either, depending on who wrote them
    try:
        return importlib.import_module(f"numpy._core.{module}")
    except ImportError:
        return importlib.import_module(f"numpy.core.{module}")


def _allowed_globals() -> dict:
    """What a CIFAR-10 batch's pickle may import, by (module, name) as the pickle spells them:
    NumPy's array and scalar reconstruction (both NumPy 1 and 2 spellings), and the builtins
    protocols 0-2 use for bytes. Dicts, lists, ints and bytes themselves need no import."""
    multiarray, numeric = _numpy_core("multiarray"), _numpy_core("numeric")
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for core in ("numpy.core", "numpy._core"):
        allowed[(f"{core}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{core}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{core}.numeric", "_frombuffer")] = numeric._frombuffer
    for builtins in ("builtins", "__builtin__"):  # Python 3's and Python 2's name
        allowed[(builtins, "bytes")] = bytes
        allowed[(builtins, "bytearray")] = bytearray
    allowed[("_codecs", "encode")] = _latin1_encode
    return allowed


def _latin1_encode(text: str, encoding: str) -> bytes:
    """``_codecs.encode`` as protocols 0-2 use it to write bytes (``encode(text, "latin1")``),
    and no other codec."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise _Refused(f"_codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, "latin1")


class _Refused(pickle.UnpicklingError):
    """An import a CIFAR-10 batch never needs (its message is the name asked for)."""


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR-10 batch, refusing (``pickle.UnpicklingError``) any import outside
    :func:`_allowed_globals`: a pickle runs what it imports, so a crafted file could otherwise
    run any code (``os.system``, ``builtins.open``, ...)."""

    _allowed = None

    def find_class(self, module: str, name: str):
        if _BatchUnpickler._allowed is None:
            _BatchUnpickler._allowed = _allowed_globals()
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise _Refused(f"{module}.{name}") from None


def find_cifar10(data_dir: Optional[Union[str, Path]] = None) -> Path:
    """The folder holding the batches: ``data_dir`` itself or ``data_dir/cifar-10-batches-py``
    (default data root: ``$PYROZOO_DATA_DIR``)."""
    if data_dir is None and os.environ.get(ENV_VAR):
        data_dir = os.environ[ENV_VAR]
    root = Path(data_dir) if data_dir is not None else None
    candidates = [] if root is None else [root, root / FOLDER]
    for folder in candidates:
        if (folder / TRAIN_BATCHES[0]).is_file():
            return folder
    where = ", ".join(str(c) for c in candidates) or f"(no data directory given: pass data_dir or set ${ENV_VAR})"
    raise FileNotFoundError(
        f"CIFAR-10 python batches not found (looked in {where}). Download "
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz, extract it, and pass the folder "
        f"containing '{FOLDER}' as data_dir (--data-dir of the example scripts)."
    )


def _read_batch(path: Path) -> Tuple[np.ndarray, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"CIFAR-10 batch {path} is missing")
    with open(path, "rb") as f:
        try:
            batch = _BatchUnpickler(f, encoding="bytes").load()
        except _Refused as e:
            raise ValueError(
                f"{path}: refused to load: the pickle asks to import {e}, which a CIFAR-10 python batch never "
                "needs (a pickle can run code: this file is not a CIFAR-10 batch, or has been tampered with); "
                "download the batches again from https://www.cs.toronto.edu/~kriz/cifar.html"
            ) from None
        except Exception as e:  # a truncated or foreign file
            raise ValueError(f"{path}: not a CIFAR-10 python batch ({e})") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise ValueError(f"{path}: not a CIFAR-10 python batch (no data/labels)")
    data = np.asarray(batch[b"data"], dtype=np.uint8)
    labels = np.asarray(batch[b"labels"], dtype=np.int64)
    if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ValueError(f"{path}: data of shape {data.shape} with {len(labels)} labels; expected (n, 3072) and n labels")
    check_stored_labels(str(path), labels, NUM_CLASSES)
    return data, labels


def load_cifar10(train: bool = True, data_dir: Optional[Union[str, Path]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Images as float32 in [0, 1] of shape ``(n, 3, 32, 32)`` and int64 labels."""
    folder = find_cifar10(data_dir)
    parts = [_read_batch(folder / name) for name in (TRAIN_BATCHES if train else TEST_BATCHES)]
    data = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    x = torch.from_numpy(data.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels)
