"""CIFAR-10 python batches: reading, layout, and clear errors when absent or malformed."""

import builtins
import os
import pickle
import re
import subprocess

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


# -- pickles that are not CIFAR-10 batches -------------------------------------------------------
# A pickle runs what it imports while it loads; the loader imports only what a batch needs.


class _Exploit:
    """Pickles as ``call(*args)``: what a crafted batch file would run on an unrestricted load."""

    def __init__(self, call, *args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


# (id, marker -> a payload whose unpickling creates the marker file, the import the refusal names)
EXPLOITS = [
    ("os.system", lambda marker: _Exploit(os.system, f"touch {marker}"), r"(posix|nt)\.system"),
    ("builtins.open", lambda marker: _Exploit(builtins.open, str(marker), "w"), r"io\.open"),  # builtins.open is io.open
    ("builtins.exec", lambda marker: _Exploit(builtins.exec, f"open({str(marker)!r}, 'w').close()"), r"builtins\.exec"),
    ("subprocess.call", lambda marker: _Exploit(subprocess.call, ["touch", str(marker)]), r"subprocess\.call"),
]


@pytest.mark.parametrize("exploit", EXPLOITS, ids=[e[0] for e in EXPLOITS])
@pytest.mark.parametrize("where", ["whole-file", "inside-the-data"])
def test_a_pickle_that_would_run_code_is_refused(tmp_path, exploit, where):
    folder = write_fake_batches(tmp_path)
    marker = tmp_path / "pwned"
    _, payload, imported = exploit
    batch = payload(marker) if where == "whole-file" else {b"data": payload(marker), b"labels": [0]}
    path = folder / TRAIN_BATCHES[2]
    with open(path, "wb") as f:
        pickle.dump(batch, f)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: refused to load: the pickle asks to import {imported},"):
        load_cifar10(data_dir=tmp_path)
    assert not marker.exists()


@pytest.mark.parametrize("exploit", EXPLOITS, ids=[e[0] for e in EXPLOITS])
def test_the_exploits_would_run_on_an_unrestricted_load(tmp_path, exploit):
    """The refused payloads are real: plain ``pickle.loads`` creates the marker."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(exploit[1](marker)))
    assert marker.exists()


def test_a_foreign_codec_is_refused(tmp_path):
    folder = write_fake_batches(tmp_path)
    path = folder / TEST_BATCHES[0]
    # protocol 2 writes bytes as _codecs.encode(text, "latin1"); another codec is no batch's
    blob = pickle.dumps({b"data": np.zeros((1, 3072), dtype=np.uint8), b"labels": [0]}, protocol=2)
    path.write_bytes(blob.replace(b"latin1", b"rot_13"))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: refused to load: .*_codecs.encode with encoding 'rot_13'"):
        load_cifar10(train=False, data_dir=tmp_path)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_batches_of_every_pickle_protocol_load(tmp_path, protocol):
    folder = write_fake_batches(tmp_path)
    data = np.random.default_rng(protocol).integers(0, 256, size=(3, 3072), dtype=np.uint8)
    batch = {b"batch_label": b"testing batch 1 of 1", b"labels": [3, np.int64(9), 0], b"data": data, b"filenames": [b"a.png", b"b.png", b""]}
    (folder / TEST_BATCHES[0]).write_bytes(pickle.dumps(batch, protocol=protocol))
    x, y = load_cifar10(train=False, data_dir=tmp_path)
    assert y.tolist() == [3, 9, 0]
    assert torch.equal(x.reshape(3, -1), torch.from_numpy(data).float() / 255)


def test_a_batch_written_by_numpy_1_loads(tmp_path):
    """NumPy 1 (and the Python 2 pickles CIFAR-10 ships) name numpy.core, NumPy 2 numpy._core."""
    folder = write_fake_batches(tmp_path)
    data = np.arange(2 * 3072).reshape(2, 3072).astype(np.uint8)
    blob = pickle.dumps({b"data": data, b"labels": [1, 2]}, protocol=2).replace(b"numpy._core.", b"numpy.core.")
    assert b"numpy.core.multiarray" in blob
    (folder / TEST_BATCHES[0]).write_bytes(blob)
    x, y = load_cifar10(train=False, data_dir=tmp_path)
    assert y.tolist() == [1, 2] and torch.equal(x.reshape(2, -1), torch.from_numpy(data).float() / 255)


def test_a_label_outside_the_classes_names_file_and_index(tmp_path):
    folder = write_fake_batches(tmp_path)
    path = folder / TRAIN_BATCHES[3]
    with open(path, "wb") as f:
        pickle.dump({b"data": np.zeros((4, 3072), dtype=np.uint8), b"labels": [1, 2, 10, -1]}, f)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: label 10 at index 2 is outside the classes 0..9 \(2 such"):
        load_cifar10(data_dir=tmp_path)
