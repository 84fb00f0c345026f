"""MNIST / Fashion-MNIST from the gzip IDX files, and clear errors for broken files."""

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from pyrozoo.data import load_mnist, read_idx

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
if not (DATA / "MNIST").is_dir():
    DATA = Path("/work/shared/data")

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


def test_wrong_magic_names_path(tmp_path):
    path = tmp_path / "labels.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros(5))))  # a 1-d (labels) file
    with pytest.raises(ValueError, match=rf"{path}.*magic number 2049, expected 2051"):
        read_idx(path, 2051)


def test_truncated_data_names_path(tmp_path):
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros((3, 4, 4)))[:-5]))
    with pytest.raises(ValueError, match=rf"{path}.*48 values, file holds 43"):
        read_idx(path, 2051)


def test_extra_bytes_raise(tmp_path):
    path = tmp_path / "images.gz"
    path.write_bytes(gzip.compress(_idx_bytes(np.zeros((3, 4, 4))) + b"\x00"))
    with pytest.raises(ValueError, match=str(path)):
        read_idx(path, 2051)


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


def test_load_mnist_image_label_count_mismatch(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(np.zeros((4, 28, 28)))))
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(np.zeros(3))))
    with pytest.raises(ValueError, match="4 images but 3 labels"):
        load_mnist("fashion", train=False, data_dir=tmp_path)


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
