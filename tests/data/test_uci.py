"""UCI loader: real files with the standard splits, training-statistics standardisation, and
clear errors for broken copies (built in tmp_path)."""

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pyrozoo.data import UCIDataset, parse_splits

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
if not (DATA / "uci").is_dir():
    DATA = Path("/work/shared/data")
UCI = DATA / "uci"

pytestmark = pytest.mark.skipif(not (UCI / "bostonHousing").is_dir(), reason="shared UCI data not available")

# rows and features from shared/data/uci/README.md (independent of the loader)
SIZES = {"bostonHousing": (506, 13), "yacht": (308, 6), "energy": (768, 8), "concrete": (1030, 8)}


def _raw(name):
    """The data set read with numpy alone: (data, features, target)."""
    folder = UCI / name
    data = np.loadtxt(folder / "data.txt")
    features = np.loadtxt(folder / "index_features.txt", dtype=int).ravel()
    target = int(np.loadtxt(folder / "index_target.txt", dtype=int))
    return data, features, target


def _indices(name, kind, k):
    return np.loadtxt(UCI / name / f"index_{kind}_{k}.txt", dtype=int).ravel()


@pytest.fixture(scope="module")
def boston():
    return UCIDataset("bostonHousing", DATA)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_dataset_sizes(name):
    ds = UCIDataset(name, DATA)
    rows, features = SIZES[name]
    assert len(ds) == rows and ds.x.shape == (rows, features)
    assert ds.n_splits == 20 and ds.n_hidden == 50 and ds.n_epochs == 40


@pytest.mark.parametrize("k", [0, 7, 19])
def test_split_sizes_and_rows(boston, k):
    s = boston.split(k)
    train, test = _indices("bostonHousing", "train", k), _indices("bostonHousing", "test", k)
    assert len(s.x_train) == len(s.y_train) == len(train)
    assert len(s.x_test) == len(s.y_test) == len(test)
    assert len(train) + len(test) == len(boston)
    assert not set(train) & set(test)
    assert abs(len(test) - 0.1 * len(boston)) <= 1
    assert s.num_features == 13 and s.split == k and s.dataset == "bostonHousing"
    # the split holds exactly the rows its index files name, in original units after undoing
    data, features, target = _raw("bostonHousing")
    np.testing.assert_allclose(s.to_original_units(s.y_test).numpy(), data[test, target], rtol=1e-12)
    np.testing.assert_allclose(s.to_original_units(s.y_train).numpy(), data[train, target], rtol=1e-12)
    np.testing.assert_allclose((s.x_test * s.x_std + s.x_mean).numpy(), data[np.ix_(test, features)], rtol=1e-10, atol=1e-10)


def test_standardisation_uses_training_statistics(boston):
    s = boston.split(3)
    data, features, target = _raw("bostonHousing")
    train = _indices("bostonHousing", "train", 3)
    x_raw, y_raw = data[np.ix_(train, features)], data[train, target]
    np.testing.assert_allclose(s.x_mean.numpy(), x_raw.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s.x_std.numpy(), x_raw.std(0), rtol=1e-12)
    assert s.y_mean == pytest.approx(y_raw.mean(), rel=1e-12) and s.y_std == pytest.approx(y_raw.std(), rel=1e-12)
    torch.testing.assert_close(s.x_train.mean(0), torch.zeros(13, dtype=torch.float64), atol=1e-10, rtol=0)
    torch.testing.assert_close(s.x_train.std(0, unbiased=False), torch.ones(13, dtype=torch.float64))
    assert abs(float(s.y_train.mean())) < 1e-10 and float(s.y_train.std(unbiased=False)) == pytest.approx(1.0)
    # the test set is not re-standardised with its own statistics
    assert float(s.x_test.mean(0).abs().max()) > 1e-3
    assert s.log_y_std == pytest.approx(math.log(y_raw.std()))
    assert all(t.dtype == torch.float64 for t in (s.x_train, s.y_train, s.x_test, s.y_test))


def test_split_to_device_and_dtype(boston, device, dtype):
    s = boston.split(0).to(device, dtype)
    for t in (s.x_train, s.y_train, s.x_test, s.y_test, s.x_mean, s.x_std):
        assert t.device.type == device.type and t.dtype == dtype
    assert s.to_original_units(s.y_test).dtype == dtype


@pytest.mark.parametrize("fraction", [0.1, 0.2])
def test_validation_split_partitions_the_training_rows(boston, fraction, device):
    s = boston.split(5).to(device)
    v = s.validation(fraction, seed=3)
    n = len(s.y_train)
    assert len(v.y_test) == round(fraction * n) and len(v.y_train) + len(v.y_test) == n
    # every training row lands in exactly one part, none of the test rows in either
    rows = lambda x, y: {tuple(r) for r in torch.cat([x, y.unsqueeze(-1)], -1).cpu().tolist()}  # noqa: E731
    train, held_out, full = rows(v.x_train, v.y_train), rows(v.x_test, v.y_test), rows(s.x_train, s.y_train)
    assert not train & held_out and train | held_out == full
    assert not (train | held_out) & rows(s.x_test, s.y_test)
    # the split's standardisation is kept, so metrics stay in the original units
    assert (v.y_mean, v.y_std) == (s.y_mean, s.y_std) and torch.equal(v.x_mean, s.x_mean)
    assert v.x_train.device.type == device.type
    # the same seed draws the same held-out rows, another seed others
    assert torch.equal(s.validation(fraction, seed=3).y_test, v.y_test)
    assert not torch.equal(s.validation(fraction, seed=4).y_test, v.y_test)


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1e-6])
def test_validation_split_rejects_empty_parts(boston, fraction):
    with pytest.raises(ValueError, match="fraction"):
        boston.split(0).validation(fraction)


def test_data_dir_may_be_the_uci_folder_itself():
    a = UCIDataset("yacht", DATA).split(2)
    b = UCIDataset("yacht", UCI).split(2)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)


# -- constant features -------------------------------------------------------------------------


def _copy(tmp_path, name="bostonHousing", splits=(0,)):
    """A writable copy of a data set's files (the shared ones are read-only)."""
    dst = tmp_path / "uci" / name
    dst.mkdir(parents=True)
    keep = {"data.txt", "index_features.txt", "index_target.txt", "n_splits.txt", "n_hidden.txt", "n_epochs.txt"}
    keep |= {f"index_{kind}_{k}.txt" for kind in ("train", "test") for k in splits}
    for f in keep:
        shutil.copyfile(UCI / name / f, dst / f)
    return dst


def _append_constant_column(folder, value):
    lines = [line.split() for line in (folder / "data.txt").read_text().splitlines() if line.strip()]
    (folder / "data.txt").write_text("\n".join(" ".join(fields + [repr(value)]) for fields in lines) + "\n")
    ncol = len(lines[0])
    features = np.loadtxt(folder / "index_features.txt", dtype=int).ravel().tolist() + [ncol]
    (folder / "index_features.txt").write_text("\n".join(map(str, features)) + "\n")



@pytest.mark.parametrize("value", [0.0, 288.0, 0.998])
def test_constant_feature_standardises_to_zero(tmp_path, value):
    folder = _copy(tmp_path)
    _append_constant_column(folder, value)
    s = UCIDataset("bostonHousing", tmp_path).split(0)
    assert s.num_features == 14
    assert torch.isfinite(s.x_train).all() and torch.isfinite(s.x_test).all()
    assert s.x_std[-1] == 1.0
    assert torch.equal(s.x_train[:, -1], torch.zeros(len(s.x_train), dtype=torch.float64))
    assert torch.equal(s.x_test[:, -1], torch.zeros(len(s.x_test), dtype=torch.float64))


def test_naval_constant_features():
    ds = UCIDataset("naval-propulsion-plant", DATA)
    constant = np.ptp(ds.x, axis=0) == 0
    assert constant.sum() == 2
    s = ds.split(0)
    assert torch.isfinite(s.x_train).all()
    assert (s.x_std[torch.from_numpy(constant)] == 1).all()
    assert (s.x_train[:, torch.from_numpy(constant)] == 0).all()


# -- broken files ----------------------------------------------------------------------------------


def _edit_line(path, lineno, new):
    lines = path.read_text().splitlines()
    lines[lineno - 1] = new
    path.write_text("\n".join(lines) + "\n")


def test_missing_data_file_names_the_path(tmp_path):
    folder = _copy(tmp_path)
    (folder / "data.txt").unlink()
    with pytest.raises(FileNotFoundError, match=str(folder / "data.txt")):
        UCIDataset("bostonHousing", tmp_path)


def test_missing_split_file_names_the_path(tmp_path):
    folder = _copy(tmp_path)
    ds = UCIDataset("bostonHousing", tmp_path)
    with pytest.raises(FileNotFoundError, match=str(folder / "index_train_4.txt")):
        ds.split(4)


def test_missing_folder_and_data_dir(tmp_path):
    (tmp_path / "uci").mkdir()
    with pytest.raises(FileNotFoundError, match="yacht"):
        UCIDataset("yacht", tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        UCIDataset("yacht", tmp_path / "nowhere")


def test_malformed_number_names_path_and_line(tmp_path):
    folder = _copy(tmp_path)
    _edit_line(folder / "data.txt", 17, " 0.1  18.00   2.310  0  0.5380  6.5750  65.20  4.09O0   1  296.0  15.30 396.90   4.98  24.00")
    with pytest.raises(ValueError, match=f"{folder / 'data.txt'}:17: malformed number"):
        UCIDataset("bostonHousing", tmp_path)


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity"])
def test_non_finite_value_names_path_row_and_column(tmp_path, bad):
    folder = _copy(tmp_path)
    fields = (folder / "data.txt").read_text().splitlines()[4].split()
    fields[2] = bad
    _edit_line(folder / "data.txt", 5, " ".join(fields))
    with pytest.raises(ValueError, match=rf"{folder / 'data.txt'}.*row 5, column 3"):
        UCIDataset("bostonHousing", tmp_path)


def test_ragged_rows_raise(tmp_path):
    folder = _copy(tmp_path)
    fields = (folder / "data.txt").read_text().splitlines()[9].split()
    _edit_line(folder / "data.txt", 10, " ".join(fields[:-1]))
    with pytest.raises(ValueError, match=str(folder / "data.txt")):
        UCIDataset("bostonHousing", tmp_path)


def test_empty_data_file_raises(tmp_path):
    folder = _copy(tmp_path)
    (folder / "data.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="holds no numbers"):
        UCIDataset("bostonHousing", tmp_path)


def test_feature_index_outside_the_columns_raises(tmp_path):
    folder = _copy(tmp_path)
    (folder / "index_target.txt").write_text("14\n")
    with pytest.raises(ValueError, match=str(folder)):
        UCIDataset("bostonHousing", tmp_path)


@pytest.mark.parametrize("features", ["0\n1\n-1\n", "0\n1\n13\n"], ids=["negative", "target-as-feature"])
def test_feature_index_must_be_a_non_target_column(tmp_path, features):
    folder = _copy(tmp_path)
    (folder / "index_features.txt").write_text(features)
    with pytest.raises(ValueError, match=str(folder)):
        UCIDataset("bostonHousing", tmp_path)


def test_non_integer_index_raises(tmp_path):
    folder = _copy(tmp_path)
    _edit_line(folder / "index_test_0.txt", 1, "307.5")
    with pytest.raises(ValueError, match=str(folder / "index_test_0.txt")):
        UCIDataset("bostonHousing", tmp_path).split(0)


def test_split_index_outside_the_rows_raises(tmp_path):
    folder = _copy(tmp_path)
    _edit_line(folder / "index_test_0.txt", 3, "506")
    with pytest.raises(ValueError, match=rf"{folder}.*split 0"):
        UCIDataset("bostonHousing", tmp_path).split(0)


@pytest.mark.parametrize("part, match", [("test", "both train and test"), ("train", "more than once")])
def test_overlapping_or_repeated_split_indices_raise(tmp_path, part, match):
    folder = _copy(tmp_path)
    train_rows = (folder / "index_train_0.txt").read_text().split()
    # the test part gets a training row (leakage), or the train part one of its own rows twice
    _edit_line(folder / f"index_{part}_0.txt", 3, train_rows[0] if part == "test" else train_rows[1])
    with pytest.raises(ValueError, match=rf"{folder}.*split 0.*{match}"):
        UCIDataset("bostonHousing", tmp_path).split(0)


def test_constant_target_raises(tmp_path):
    folder = _copy(tmp_path)
    (folder / "index_target.txt").write_text("3\n")  # CHAS is 0 on most rows...
    rows = [line.split() for line in (folder / "data.txt").read_text().splitlines() if line.strip()]
    (folder / "data.txt").write_text("\n".join(" ".join(r[:3] + ["1"] + r[4:]) for r in rows) + "\n")  # ...now on all
    with pytest.raises(ValueError, match="constant"):
        UCIDataset("bostonHousing", tmp_path).split(0)


@pytest.mark.parametrize("k", [20, -1, 100])
def test_out_of_range_split_raises(boston, k):
    with pytest.raises(ValueError, match=r"splits 0\.\.19"):
        boston.split(k)


def test_unknown_dataset_raises():
    with pytest.raises(ValueError, match="unknown UCI data set"):
        UCIDataset("boston", DATA)


# -- split specifications --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,expected",
    [("0-19", list(range(20))), ("all", list(range(20))), ("0,3,5", [0, 3, 5]), ("2-4, 7", [2, 3, 4, 7]), ("19", [19])],
)
def test_parse_splits(spec, expected):
    assert parse_splits(spec, 20) == expected


@pytest.mark.parametrize("spec", ["0-20", "20", "-1", "3,25"])
def test_parse_splits_out_of_range(spec):
    with pytest.raises(ValueError):
        parse_splits(spec, 20)
