"""CIFAR-10 python batches: reading, layout, and clear errors when absent or malformed."""

import pickle

import numpy as np
import pytest
import torch

from pyrozoo.data import load_cifar10
from pyrozoo.data.cifar import FOLDER, TEST_BATCHES, TRAIN_BATCHES


def write_fake_batches(root, n=4):
    folder = root / FOLDER
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i, name in enumerate(TRAIN_BATCHES + TEST_BATCHES):
        data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": [(i + j) % 10 for j in range(n)]}, f)
    return folder


def test_reads_the_python_batches(tmp_path):
    folder = write_fake_batches(tmp_path)
    x, y = load_cifar10(train=True, data_dir=tmp_path)
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    assert 0 <= float(x.min()) and float(x.max()) <= 1
    with open(folder / TRAIN_BATCHES[0], "rb") as f:
        raw = pickle.load(f, encoding="bytes")[b"data"]
    # rows are channel-major: the first 1024 bytes are the red plane
    assert torch.allclose(x[0, 0].reshape(-1), torch.from_numpy(raw[0, :1024]).float() / 255)
    x_test, y_test = load_cifar10(train=False, data_dir=folder)
    assert x_test.shape == (4, 3, 32, 32) and y_test.tolist() == [5, 6, 7, 8]


def test_absent_data_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
        load_cifar10(data_dir=tmp_path)


def test_malformed_batch_is_a_clear_error(tmp_path):
    folder = write_fake_batches(tmp_path)
    (folder / TRAIN_BATCHES[1]).write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="not a CIFAR-10 python batch"):
        load_cifar10(data_dir=tmp_path)
