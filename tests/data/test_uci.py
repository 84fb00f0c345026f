"""UCI loader: real files with the standard splits, training-statistics standardisation, and
clear errors for broken copies (built in tmp_path)."""

import math
import re
import shutil

import numpy as np
import pytest
import torch

from pyrozoo.data import UCIDataset, parse_splits

from tests.conftest import DATA
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


def _lines(path):
    return path.read_text().splitlines()


def _set_field(path, lineno, column, value):
    """Replaces one whitespace-separated field (1-based line and column)."""
    fields = _lines(path)[lineno - 1].split()
    fields[column - 1] = value
    _edit_line(path, lineno, " ".join(fields))


def _insert_line(path, lineno, text):
    lines = _lines(path)
    lines.insert(lineno - 1, text)
    path.write_text("\n".join(lines) + "\n")


def _keep_lines(path, n):
    path.write_text("\n".join(_lines(path)[:n]) + "\n")


def _merge_lines(path, lineno):
    """Two rows run together: line ``lineno`` and the next become one line."""
    lines = _lines(path)
    lines[lineno - 1 : lineno + 1] = [lines[lineno - 1] + " " + lines[lineno]]
    path.write_text("\n".join(lines) + "\n")


def _cut_mid_line(path):
    """The file cut short inside its last number: one digit and the line end lost."""
    text = path.read_text().rstrip()
    assert len(text.rsplit("\n", 1)[-1].split()[-1]) > 1  # the last number is still there, cut short
    path.write_text(text[:-1])


def _copy_line(path, src, dst):
    """Line ``dst`` of ``path`` replaced by line ``src`` of the same file."""
    _edit_line(path, dst, _lines(path)[src - 1])


def _train_row_in_test(folder):
    _edit_line(folder / "index_test_0.txt", 3, _lines(folder / "index_train_0.txt")[0])


# (id, edit of a copy of Boston with split 0, the file named, its 1-based line, what the message says after it).
# Each is a ValueError whose message begins "<file>:<line>: ", from UCIDataset(...) or .split(0).
UCI_BAD = [
    # data.txt
    ("number-cut-short", lambda f: _set_field(f / "data.txt", 17, 14, "2.4e"), "data.txt", 17, "column 14: '2.4e' is not a number"),
    ("corrupted-number", lambda f: _set_field(f / "data.txt", 17, 8, "4.09O0"), "data.txt", 17, "column 8: '4.09O0' is not a number"),
    ("lone-minus", lambda f: _set_field(f / "data.txt", 2, 1, "-"), "data.txt", 2, "column 1: '-' is not a number"),
    ("underscored-digits", lambda f: _set_field(f / "data.txt", 9, 10, "2_96.0"), "data.txt", 9, "'2_96.0' is not a number"),
    ("nan", lambda f: _set_field(f / "data.txt", 5, 3, "nan"), "data.txt", 5, "column 3 is 'nan', not a finite number"),
    ("inf", lambda f: _set_field(f / "data.txt", 5, 3, "inf"), "data.txt", 5, "column 3 is 'inf', not a finite number"),
    ("minus-infinity", lambda f: _set_field(f / "data.txt", 5, 3, "-Infinity"), "data.txt", 5, "column 3 is '-Infinity'"),
    ("overflow-to-inf", lambda f: _set_field(f / "data.txt", 500, 14, "1e999"), "data.txt", 500, "column 14 is '1e999'"),
    ("row-too-short", lambda f: _edit_line(f / "data.txt", 10, " ".join(_lines(f / "data.txt")[9].split()[:-1])), "data.txt", 10, "13 numbers on the line, expected 14"),
    ("rows-run-together", lambda f: _merge_lines(f / "data.txt", 300), "data.txt", 300, "28 numbers on the line, expected 14"),
    ("first-row-is-the-odd-one", lambda f: _edit_line(f / "data.txt", 1, "1 2 3"), "data.txt", 1, "3 numbers on the line, expected 14"),
    ("blank-line-inside", lambda f: _insert_line(f / "data.txt", 30, "   "), "data.txt", 30, "blank line before the last row"),
    ("cut-short-mid-line", lambda f: _cut_mid_line(f / "data.txt"), "data.txt", 506, "the last line has no line end"),
    ("empty-data", lambda f: (f / "data.txt").write_text(""), "data.txt", 1, "the file is empty"),
    ("blank-data", lambda f: (f / "data.txt").write_text("\n  \n\n"), "data.txt", 1, "the file is empty"),
    ("not-ascii", lambda f: (f / "data.txt").write_bytes((f / "data.txt").read_bytes().replace(b"7.070", b"7.0\xb70", 1)), "data.txt", 2, "byte 0xb7 is not ASCII"),
    # split index files
    ("index-out-of-range", lambda f: _edit_line(f / "index_test_0.txt", 3, "506"), "index_test_0.txt", 3, "split 0: row 506 is outside data.txt's rows 0..505"),
    ("index-negative", lambda f: _edit_line(f / "index_train_0.txt", 5, "-1"), "index_train_0.txt", 5, "split 0: row -1 is outside"),
    ("index-repeated", lambda f: _copy_line(f / "index_train_0.txt", 2, 7), "index_train_0.txt", 7, r"split 0: row \d+ is listed more than once \(first on line 2\)"),
    ("index-in-train-and-test", _train_row_in_test, "index_test_0.txt", 3, r"split 0 lists row \d+ in both train and test \(also .*index_train_0.txt:1\)"),
    ("index-file-cut-short", lambda f: _keep_lines(f / "index_train_0.txt", 400), "index_train_0.txt", 400, r"split 0's train indices end here and its test indices at .*index_test_0.txt:51, leaving 55 of data.txt's 506 rows in neither part"),
    ("test-index-file-cut-short", lambda f: _keep_lines(f / "index_test_0.txt", 40), "index_train_0.txt", 455, r"test indices at .*index_test_0.txt:40, leaving 11 of"),
    ("index-cut-short-mid-line", lambda f: _cut_mid_line(f / "index_test_0.txt"), "index_test_0.txt", 51, "the last line has no line end"),
    ("index-not-an-integer", lambda f: _edit_line(f / "index_test_0.txt", 1, "307.5"), "index_test_0.txt", 1, "column 1: '307.5' is not an integer"),
    ("index-nan", lambda f: _edit_line(f / "index_test_0.txt", 4, "nan"), "index_test_0.txt", 4, "'nan' is not an integer"),
    ("index-two-per-line", lambda f: _edit_line(f / "index_train_0.txt", 4, "12 13"), "index_train_0.txt", 4, "2 numbers on the line, expected one number per line"),
    ("index-empty", lambda f: (f / "index_test_0.txt").write_text(""), "index_test_0.txt", 1, "the file is empty"),
    # column index files and the protocol's integers
    ("feature-outside-columns", lambda f: _edit_line(f / "index_features.txt", 4, "14"), "index_features.txt", 4, "column 14 is outside data.txt's columns 0..13"),
    ("feature-negative", lambda f: _edit_line(f / "index_features.txt", 3, "-1"), "index_features.txt", 3, "column -1 is outside"),
    ("feature-repeated", lambda f: _edit_line(f / "index_features.txt", 6, "2"), "index_features.txt", 6, r"column 2 is listed more than once \(first on line 3\)"),
    ("target-as-feature", lambda f: _edit_line(f / "index_features.txt", 2, "13"), "index_features.txt", 2, "the target column 13 .* is also listed as a feature"),
    ("target-outside-columns", lambda f: (f / "index_target.txt").write_text("14\n"), "index_target.txt", 1, "column 14 is outside"),
    ("two-targets", lambda f: (f / "index_target.txt").write_text("13\n12\n"), "index_target.txt", 2, "exactly one column index"),
    ("n-splits-empty", lambda f: (f / "n_splits.txt").write_text(""), "n_splits.txt", 1, "the file is empty"),
    ("n-splits-zero", lambda f: (f / "n_splits.txt").write_text("0\n"), "n_splits.txt", 1, "0 should be a positive integer"),
]


@pytest.mark.parametrize("case", UCI_BAD, ids=[c[0] for c in UCI_BAD])
def test_bad_file_is_named_with_its_line(tmp_path, case):
    _, edit, name, line, says = case
    folder = _copy(tmp_path)
    edit(folder)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(folder / name))}:{line}: .*{says}") as raised:
        UCIDataset("bostonHousing", tmp_path).split(0)
    assert str(folder / name) in str(raised.value)


def test_every_bundled_split_partitions_the_rows():
    """What the loader enforces holds for the real data: each split's train and test indices
    name every row of data.txt exactly once (read with numpy alone)."""
    for name in sorted(p.name for p in UCI.iterdir() if p.is_dir()):
        n = len(np.loadtxt(UCI / name / "data.txt"))
        n_splits = int(np.loadtxt(UCI / name / "n_splits.txt"))
        for k in range(n_splits):
            rows = np.concatenate([_indices(name, "train", k), _indices(name, "test", k)])
            assert np.array_equal(np.sort(rows), np.arange(n)), (name, k)


def test_integers_written_as_floats_and_trailing_blank_lines_are_read(tmp_path):
    folder = _copy(tmp_path)
    _edit_line(folder / "index_test_0.txt", 1, _lines(folder / "index_test_0.txt")[0] + ".0")
    (folder / "n_splits.txt").write_text("2e1")  # a small file need not end with a line end
    (folder / "data.txt").write_text((folder / "data.txt").read_text() + "\n  \n\r\n")
    ds = UCIDataset("bostonHousing", tmp_path)
    assert ds.n_splits == 20 and len(ds) == 506
    reference = UCIDataset("bostonHousing", DATA).split(0)
    assert torch.equal(ds.split(0).y_test, reference.y_test)


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
