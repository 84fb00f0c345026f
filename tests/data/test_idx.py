"""MNIST / Fashion-MNIST from the gzip IDX files, and clear errors for broken files."""

import gzip
import re
import struct

import numpy as np
import pytest
import torch

from pyrozoo.data import load_mnist, read_idx

from tests.conftest import DATA

needs_data = pytest.mark.skipif(not (DATA / "MNIST" / "raw").is_dir(), reason="shared MNIST data not available")


@pytest.fixture(scope="module")
def test_splits():
    return {kind: load_mnist(kind, train=False, data_dir=DATA) for kind in ("mnist", "fashion")}


@pytest.fixture(params=["mnist", "fashion"])
def test_split(request, test_splits):
    return request.param, test_splits[request.param]


@needs_data
def test_test_split_shapes_and_ranges(test_split):
    kind, (x, y) = test_split
    assert x.shape == (10000, 1, 28, 28) and x.dtype == torch.float32
    assert y.shape == (10000,) and y.dtype == torch.int64
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    # pixels are k/255 exactly (as float32)
    k = x * 255
    assert float((k - k.round()).abs().max()) < 1e-4
    counts = torch.bincount(y, minlength=10)
    assert counts.numel() == 10 and (counts >= 800).all()  # every class present, roughly balanced


@needs_data
def test_mnist_train_split():
    x, y = load_mnist("mnist", train=True, data_dir=DATA)
    assert x.shape == (60000, 1, 28, 28) and y.shape == (60000,)
    assert int(y.min()) == 0 and int(y.max()) == 9


@needs_data
def test_the_two_datasets_differ(test_splits):
    mnist, fashion = test_splits["mnist"][0], test_splits["fashion"][0]
    assert not torch.equal(mnist[:10], fashion[:10])
    # digits are mostly background; clothing covers more of the image
    assert float((fashion > 0).float().mean()) > float((mnist > 0).float().mean())


@needs_data
def test_read_idx_matches_a_manual_parse():
    path = DATA / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz"
    raw = gzip.decompress(path.read_bytes())
    assert struct.unpack(">ii", raw[:8]) == (2049, 10000)
    np.testing.assert_array_equal(read_idx(path, 2049), np.frombuffer(raw[8:], dtype=np.uint8))


# -- broken files ----------------------------------------------------------------------------------


def _idx_bytes(data: np.ndarray, magic=None):
    magic = magic if magic is not None else 0x0800 + data.ndim
    return struct.pack(">i", magic) + struct.pack(">" + "i" * data.ndim, *data.shape) + data.astype(np.uint8).tobytes()


@pytest.mark.parametrize("compressed", [True, False], ids=["gz", "raw"])
def test_small_valid_file_round_trips(tmp_path, compressed):
    data = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("x.idx.gz" if compressed else "x.idx")
    path.write_bytes(gzip.compress(_idx_bytes(data)) if compressed else _idx_bytes(data))
    np.testing.assert_array_equal(read_idx(path, 2051), data)


IMAGES, LABELS = "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"
_GOOD_IMAGES = np.arange(4 * 28 * 28).reshape(4, 28, 28) % 256
_GOOD_LABELS = np.array([7, 2, 0, 9])


def _with_header(data, dims, magic):
    """An IDX file whose header says ``dims`` (and ``magic``), followed by ``data``'s bytes."""
    return struct.pack(">i", magic) + struct.pack(">" + "i" * len(dims), *dims) + np.asarray(data, dtype=np.uint8).tobytes()


# (id, images file bytes, labels file bytes, the file named ("images" or "labels"), what the message says).
IDX_BAD = [
    ("images-bad-magic", _idx_bytes(_GOOD_IMAGES, magic=0x12345603), _idx_bytes(_GOOD_LABELS), "images", "IDX magic number 305419779 .*expected 2051"),
    ("images-file-is-labels", _idx_bytes(_GOOD_LABELS), _idx_bytes(_GOOD_LABELS), "images", "magic number 2049 .*expected 2051"),
    ("labels-file-is-images", _idx_bytes(_GOOD_IMAGES), _idx_bytes(_GOOD_IMAGES), "labels", "magic number 2051 .*expected 2049"),
    ("images-header-too-many", _with_header(_GOOD_IMAGES, (5, 28, 28), 2051), _idx_bytes(_GOOD_LABELS), "images",
     r"header says \(5, 28, 28\) = 3920 values, file holds 3136: 784 bytes short, from item 4 of 0..4 on"),
    ("images-cut-short", _idx_bytes(_GOOD_IMAGES)[:-100], _idx_bytes(_GOOD_LABELS), "images", "100 bytes short, from item 3 of 0..3 on"),
    ("images-too-long", _idx_bytes(_GOOD_IMAGES) + bytes(10), _idx_bytes(_GOOD_LABELS), "images", "file holds 3146: 10 bytes more than that"),
    ("images-header-too-few", _with_header(_GOOD_IMAGES, (3, 28, 28), 2051), _idx_bytes(_GOOD_LABELS), "images", "784 bytes more"),
    ("labels-header-too-many", _idx_bytes(_GOOD_IMAGES), _with_header(_GOOD_LABELS, (5,), 2049), "labels", "1 bytes short, from item 4 of 0..4 on"),
    ("labels-too-long", _idx_bytes(_GOOD_IMAGES), _idx_bytes(_GOOD_LABELS) + b"\x01", "labels", "1 bytes more than that"),
    ("label-10", _idx_bytes(_GOOD_IMAGES), _idx_bytes(np.array([7, 2, 10, 9])), "labels", r"label 10 at index 2 is outside the classes 0..9 \(1 such"),
    ("label-255", _idx_bytes(_GOOD_IMAGES), _idx_bytes(np.array([7, 2, 0, 255])), "labels", "label 255 at index 3 is outside"),
    ("more-images-than-labels", _idx_bytes(_GOOD_IMAGES), _idx_bytes(_GOOD_LABELS[:3]), "images", "holds 4 images but .* holds 3 labels: example 3 has no partner"),
    ("more-labels-than-images", _idx_bytes(_GOOD_IMAGES[:3]), _idx_bytes(_GOOD_LABELS), "images", "holds 3 images but .* holds 4 labels: example 3 has no partner"),
    ("images-not-28x28", _idx_bytes(np.zeros((4, 32, 32))), _idx_bytes(_GOOD_LABELS), "images", "images of 32x32 pixels, expected 28x28"),
]


@pytest.mark.parametrize("case", IDX_BAD, ids=[c[0] for c in IDX_BAD])
def test_bad_idx_file_is_named(tmp_path, case):
    _, images, labels, bad, says = case
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / IMAGES).write_bytes(gzip.compress(images))
    (raw / LABELS).write_bytes(gzip.compress(labels))
    path = raw / (IMAGES if bad == "images" else LABELS)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}:? .*{says}") as raised:
        load_mnist("mnist", train=False, data_dir=tmp_path)
    assert str(path) in str(raised.value)
    if "partner" in says:  # a count mismatch names both files
        assert str(raw / LABELS) in str(raised.value)


def test_the_good_tiny_files_of_the_cases_load(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / IMAGES).write_bytes(gzip.compress(_idx_bytes(_GOOD_IMAGES)))
    (raw / LABELS).write_bytes(gzip.compress(_idx_bytes(_GOOD_LABELS)))
    x, y = load_mnist("mnist", train=False, data_dir=tmp_path)
    assert x.shape == (4, 1, 28, 28) and y.tolist() == [7, 2, 0, 9]


def test_truncated_gzip_stream_names_path(tmp_path):
    path = tmp_path / "images.gz"
    blob = gzip.compress(_idx_bytes(np.random.randint(0, 255, (20, 28, 28))))
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(ValueError, match=rf"{path}: cannot read"):
        read_idx(path, 2051)


def test_not_gzip_names_path(tmp_path):
    path = tmp_path / "images.gz"
    path.write_bytes(b"this is not a gzip file at all")
    with pytest.raises(ValueError, match=str(path)):
        read_idx(path, 2051)


def test_too_short_file_names_path(tmp_path):
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08"))
    with pytest.raises(ValueError, match=rf"{path}: too short"):
        read_idx(path, 2051)


def test_truncated_header_names_path(tmp_path):
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(struct.pack(">ii", 2051, 10)))
    with pytest.raises(ValueError, match=str(path)):
        read_idx(path, 2051)


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "t10k-images-idx3-ubyte.gz"
    with pytest.raises(FileNotFoundError, match=str(path)):
        read_idx(path, 2051)


def test_load_mnist_missing_files_name_the_path(tmp_path):
    (tmp_path / "MNIST" / "raw").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz")):
        load_mnist("mnist", train=False, data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_mnist("mnist", data_dir=tmp_path / "nowhere")


def test_load_mnist_tiny_copy(tmp_path):
    """The loader's conversion (scale to [0, 1], channel dim, int64 labels) on known bytes."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = np.zeros((2, 28, 28), dtype=np.uint8)
    images[0, 3, 4], images[1, 27, 27] = 255, 51
    (raw / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(images)))
    (raw / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(np.array([7, 2]))))
    x, y = load_mnist("MNIST", train=True, data_dir=tmp_path)
    assert x.shape == (2, 1, 28, 28) and y.tolist() == [7, 2]
    assert x[0, 0, 3, 4] == 1.0 and x[1, 0, 27, 27] == pytest.approx(0.2) and float(x.sum()) == pytest.approx(1.2)


def test_unknown_kind_raises():
    with pytest.raises(ValueError, match="unknown data set"):
        load_mnist("cifar10", data_dir=DATA)
