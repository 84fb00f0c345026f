"""Image classification from a user's own arrays: an ``.npz`` archive (``numpy.savez``) with

* ``x``: the training images, ``(n, H, W)`` (one channel), ``(n, C, H, W)`` (channels
  first, as PyTorch's layers take them) or ``(n, d)`` (flat vectors);
* ``y``: their labels, ``(n,)``, integers or text;
* optionally ``x_test`` and ``y_test``: the test set, shaped alike. Without them a seeded
  random ``test_fraction`` of the training images is held out (:func:`pyrozoo.data.splits.random_splits`).

``uint8`` images are scaled to ``[0, 1]`` as :func:`pyrozoo.data.load_mnist` scales MNIST's;
other numbers are used as they are. Labels become indices of the sorted distinct labels of
both sets (:class:`~pyrozoo.data.splits.ClassificationSplit`). The archive is read with
``allow_pickle=False``: an array of Python objects would need a pickle, which can run code,
and is refused.

A network sized from its inputs (a fully connected one: ``split.num_features`` inputs) takes
any image size; one built for MNIST's ``1 x 28 x 28`` (LeNet-5) does not, and
:func:`check_input_shape` says so before any training.
"""

import zipfile
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import torch

from pyrozoo.data.splits import ClassificationSplit, random_splits

__all__ = ["IMAGE_ARRAYS", "load_image_arrays", "check_input_shape"]

#: the arrays an archive may hold; ``x`` and ``y`` are required, the test pair is optional
IMAGE_ARRAYS = ("x", "y", "x_test", "y_test")


def _read(path: Path) -> dict:
    with open(path, "rb") as f:
        magic = f.read(6)
    write = "write one with numpy.savez(path, x=images, y=labels)"
    if magic == b"\x93NUMPY":
        raise ValueError(f"{path} holds a single array, not an .npz archive of named arrays; {write}")
    if not magic.startswith(b"PK"):  # every .npz is a zip archive; np.load would try anything else as a pickle
        raise ValueError(f"{path} is not an .npz archive (a zip of arrays); {write}")
    try:
        archive = np.load(path, allow_pickle=False)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ValueError(f"{path} is not a readable .npz archive ({e}); {write}") from None
    with archive:
        keys = list(archive.keys())
        unknown = [k for k in keys if k not in IMAGE_ARRAYS]
        missing = [k for k in ("x", "y") if k not in keys]
        if unknown or missing:
            raise ValueError(f"{path} holds the arrays {keys}; expected x and y, and optionally x_test and y_test{f' (missing: {missing})' if missing else ''}{f' (not used: {unknown})' if unknown else ''}")
        if ("x_test" in keys) != ("y_test" in keys):
            raise ValueError(f"{path} holds {'x_test' if 'x_test' in keys else 'y_test'} without {'y_test' if 'x_test' in keys else 'x_test'}: give both test arrays or neither")
        arrays = {}
        for key in keys:
            try:
                arrays[key] = archive[key]
            except ValueError:  # numpy: "Object arrays cannot be loaded when allow_pickle=False"
                raise ValueError(f"{path}: array {key!r} holds Python objects, which are not read (unpickling can run code); store numbers or text") from None
    return arrays


def _images(path: Path, key: str, x: np.ndarray) -> torch.Tensor:
    if x.ndim < 2:
        raise ValueError(f"{path}: {key} has shape {x.shape}; images are (n, H, W), (n, C, H, W) or (n, d)")
    if x.dtype == np.uint8:
        values = x.astype(np.float32) / 255.0
    elif x.dtype == np.bool_ or np.issubdtype(x.dtype, np.number) and not np.issubdtype(x.dtype, np.complexfloating):
        values = x.astype(np.float32)
    else:
        raise ValueError(f"{path}: {key} holds {x.dtype} values; images are numbers")
    finite = np.isfinite(values)
    if not finite.all():
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{path}: {key} holds {int((~finite).sum())} NaN or infinite value(s), first at index {first} (its float32 value)")
    tensor = torch.from_numpy(np.ascontiguousarray(values))
    return tensor.unsqueeze(1) if tensor.dim() == 3 else tensor


def _labels(path: Path, key: str, y: np.ndarray, n: int, images: str) -> np.ndarray:
    if y.ndim != 1:
        raise ValueError(f"{path}: {key} has shape {y.shape}; labels are one per image, shape ({n},)")
    if len(y) != n:
        raise ValueError(f"{path}: {images} holds {n} images but {key} {len(y)} labels; there is one label per image")
    if np.issubdtype(y.dtype, np.floating):
        fractional = ~np.isfinite(y) | (y != np.round(y))
        if fractional.any():
            i = int(np.argmax(fractional))
            raise ValueError(f"{path}: {key}[{i}] is {y[i].item()!r}, not a class label; labels are integers or text")
        return y.astype(np.int64)
    if y.dtype == np.bool_ or np.issubdtype(y.dtype, np.integer) or y.dtype.kind in "US":
        return y
    raise ValueError(f"{path}: {key} holds {y.dtype} values; labels are integers or text")


def load_image_arrays(path: Union[str, Path], *, test_fraction: float = 0.1, seed: int = 0, name: Optional[str] = None) -> ClassificationSplit:
    """The train/test split of the arrays in ``path`` (see the module docstring); its ``split``
    is 0 and its ``dataset`` ``name`` (default: the file name without ``.npz``)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image arrays {path} do not exist")
    arrays = _read(path)
    x = _images(path, "x", arrays["x"])
    y = _labels(path, "y", arrays["y"], len(x), "x")
    if len(x) == 0:
        raise ValueError(f"{path}: x holds no images")
    if "x_test" in arrays:
        x_test = _images(path, "x_test", arrays["x_test"])
        if x_test.shape[1:] != x.shape[1:]:
            raise ValueError(f"{path}: the test images are {_shape(x_test.shape[1:])} but the training images {_shape(x.shape[1:])}; both sets need one shape")
        y_test = _labels(path, "y_test", arrays["y_test"], len(x_test), "x_test")
        if len(x_test) == 0:
            raise ValueError(f"{path}: x_test holds no images")
    else:
        train, test = random_splits(len(x), 1, test_fraction, seed)[0]
        x, x_test, y, y_test = x[torch.from_numpy(train)], x[torch.from_numpy(test)], y[train], y[test]
    if y.dtype.kind in "US" or y_test.dtype.kind in "US":
        y, y_test = y.astype(str), y_test.astype(str)
    present = np.unique(y)
    if len(present) < 2:
        raise ValueError(f"{path}: every training label is {present.tolist()[0]!r}: a classifier needs at least two classes to learn from")
    classes, index = np.unique(np.concatenate([y, y_test]), return_inverse=True)
    index = torch.from_numpy(index.reshape(-1).astype(np.int64))
    return ClassificationSplit(name if name is not None else path.name[: -len(".npz")] if path.name.lower().endswith(".npz") else path.stem, 0, x, index[: len(y)], x_test, index[len(y):], tuple(classes.tolist()))


def _shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


def check_input_shape(data: ClassificationSplit, expected: Sequence[int], network: str) -> None:
    """Raises ``ValueError`` unless one input of ``data`` has the shape ``expected`` (e.g.
    ``(1, 28, 28)``), saying that ``network`` (e.g. ``"LeNet-5"``) is built for that shape."""
    got, expected = tuple(data.input_shape), tuple(expected)
    if got != expected:
        raise ValueError(
            f"{network} is built for inputs of shape {_shape(expected)}, but the inputs of {data.dataset} are {_shape(got)}: "
            f"it cannot run on them; a fully connected network sized from the data ({data.num_features} inputs) can"
        )
