"""A user's own data: any folder in the standard UCI layout (by its path, or by its name under
a data root), a table, or image arrays, read by the library with the bundled sets' checks,
taken by the command-line options and the comparison harness, and run end to end by the
examples. The data are written by the tests themselves (tmp_path); the end-to-end run uses a
real data set shipped in a registry package (scikit-learn's diabetes data, in the test extra)."""

import argparse
import json

import numpy as np
import pandas as pd
import pytest
import torch

from pyrozoo.data import ClassificationSplit, ClassificationTable, RegressionTable, UCIDataset, check_input_shape, gap_split, load_image_arrays
from zoo_protocols import cli
from zoo_protocols.compare import budget_epochs, compare
from tests.runner import run_example

N = 60


def _data(n=N, seed=0):
    """A table of three features and a target, the target in column 2 (as in a layout's data.txt)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)) * [1.0, 10.0, 0.1] + [0.0, 50.0, 3.0]
    y = x @ [1.0, -0.2, 5.0] + rng.normal(size=n)
    return np.column_stack([x[:, :2], y, x[:, 2]])


def _layout(folder, data, splits, features=(0, 1, 3), target=2, n_hidden=7, n_epochs=3):
    """Writes ``data`` in the standard UCI layout: data.txt, the index files, the counts."""
    folder.mkdir(parents=True)
    np.savetxt(folder / "data.txt", data, fmt="%.17g")
    lines = lambda values: "".join(f"{int(v)}\n" for v in values)  # noqa: E731
    (folder / "index_features.txt").write_text(lines(features))
    (folder / "index_target.txt").write_text(lines([target]))
    for name, value in (("n_splits", len(splits)), ("n_hidden", n_hidden), ("n_epochs", n_epochs)):
        (folder / f"{name}.txt").write_text(f"{value}\n")
    for k, (train, test) in enumerate(splits):
        (folder / f"index_train_{k}.txt").write_text(lines(train))
        (folder / f"index_test_{k}.txt").write_text(lines(test))
    return folder


def _halves(n=N, count=2):
    rows = np.arange(n)
    return [(rows[(rows + k) % 4 != 0], rows[(rows + k) % 4 == 0]) for k in range(count)]


def _same_split(a, b):
    for field in ("x_train", "y_train", "x_test", "y_test", "x_mean", "x_std"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert (a.y_mean, a.y_std, a.split) == (b.y_mean, b.y_std, b.split)


# -- a folder in the standard layout ---------------------------------------------------------------


def test_a_folder_is_a_data_set_by_name_or_by_path(tmp_path, monkeypatch):
    data = _data()
    folder = _layout(tmp_path / "root" / "uci" / "mine", data, _halves())
    _layout(tmp_path / "root" / "top", data, _halves())  # directly under the root, too
    by_name = UCIDataset("mine", tmp_path / "root")
    monkeypatch.chdir(tmp_path)
    ways = [by_name, UCIDataset(folder), UCIDataset(str(folder)), UCIDataset("./root/uci/mine"), UCIDataset("top", tmp_path / "root")]
    for ds in ways:
        np.testing.assert_array_equal(ds.x, data[:, [0, 1, 3]])
        np.testing.assert_array_equal(ds.y, data[:, 2])
        assert (ds.n_splits, ds.n_hidden, ds.n_epochs) == (2, 7, 3)
        _same_split(ds.split(1), by_name.split(1))
    # the name as given is the data set's name in every results file
    assert [ds.name for ds in ways] == ["mine", str(folder), str(folder), "./root/uci/mine", "top"]
    assert by_name.split(0).dataset == "mine"


def test_an_unknown_name_says_what_a_data_set_is(tmp_path):
    (tmp_path / "uci").mkdir()
    with pytest.raises(ValueError, match=r"unknown UCI data set 'mine': there is no folder .*mine.*standard layout.*path"):
        UCIDataset("mine", tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        UCIDataset(tmp_path / "nowhere")


#: (id, what is taken out of a complete folder, what the message says)
MALFORMED = [
    ("empty", "*", r"holds none of the files of the standard UCI layout"),
    ("no-target-index", "index_target.txt", r"is not a complete data set in the standard UCI layout: missing \S*/index_target.txt\. The layout: data.txt"),
    ("no-counts", "n_hidden.txt n_epochs.txt", r"missing \S*/n_hidden.txt, \S*/n_epochs.txt"),
    ("no-split-0", "index_train_0.txt index_test_0.txt", r"missing \S*/index_train_0.txt, \S*/index_test_0.txt"),
    ("only-a-table", "* table.csv", r"holds none of the files.*pyrozoo.data.load_table"),
]


@pytest.mark.parametrize("remove, message", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_malformed_folder_lists_what_is_missing(tmp_path, remove, message):
    folder = _layout(tmp_path / "mine", _data(), _halves())
    for name in remove.split():
        if name == "*":
            for f in folder.iterdir():
                f.unlink()
        elif (folder / name).exists():
            (folder / name).unlink()
        else:
            (folder / name).write_text("a,y\n1,2\n")
    with pytest.raises(FileNotFoundError, match=message) as info:
        UCIDataset(folder)
    assert "\n" not in str(info.value)


# -- a table splits and standardises as the same data in the layout --------------------------------


@pytest.mark.parametrize("splits_by, n_splits", [("seed", 3), ("kfold", 4)])
def test_a_table_splits_exactly_as_its_rows_in_the_layout(tmp_path, splits_by, n_splits):
    data = _data()
    pd.DataFrame(data, columns=["a", "b", "y", "c"]).to_csv(tmp_path / "mine.csv", index=False)
    table = RegressionTable(tmp_path / "mine.csv", "y", splits_by=splits_by, n_splits=n_splits, seed=1, n_hidden=7, n_epochs=3)
    rows = [table.rows(k) for k in range(n_splits)]
    folder = UCIDataset(_layout(tmp_path / "mine", data, rows))
    assert isinstance(table, UCIDataset) and table.feature_names == ["a", "b", "c"]
    for k in range(n_splits):
        _same_split(table.split(k), folder.split(k))
    # the folder's own index files read as the table's splits give the same splits again
    from_files = RegressionTable(tmp_path / "mine.csv", "y", splits_by=f"files:{tmp_path / 'mine'}")
    _same_split(from_files.split(n_splits - 1), folder.split(n_splits - 1))
    # and the gap splits, which choose their own rows, agree too
    _same_split(gap_split(table, 2), gap_split(folder, 2))


# -- image arrays ----------------------------------------------------------------------------------


def _images(n, shape=(6, 5), seed=0):
    """uint8 images whose first pixel is the image's index (so a row can be recognised)."""
    x = np.random.default_rng(seed).integers(0, 256, size=(n, *shape), dtype=np.uint8)
    x.reshape(n, -1)[:, 0] = np.arange(n)
    return x


def test_image_arrays_with_their_test_set(tmp_path):
    x, x_test = _images(30), _images(10, seed=1)
    y, y_test = np.array(["cat", "dog", "emu"] * 10), np.array(["dog", "ant"] * 5)
    np.savez(tmp_path / "pets.npz", x=x, y=y, x_test=x_test, y_test=y_test)
    data = load_image_arrays(tmp_path / "pets.npz")
    assert isinstance(data, ClassificationSplit) and data.dataset == "pets" and data.split == 0
    assert data.x_train.shape == (30, 1, 6, 5) and data.x_test.shape == (10, 1, 6, 5) and data.input_shape == (1, 6, 5)
    # uint8 pixels scaled to [0, 1] as MNIST's are, exactly
    assert torch.equal(data.x_train, torch.from_numpy(x).float().div(255.0).unsqueeze(1))
    assert data.classes == ("ant", "cat", "dog", "emu") and data.num_classes == 4
    assert [data.classes[i] for i in data.y_train.tolist()] == y.tolist()
    assert [data.classes[i] for i in data.y_test.tolist()] == y_test.tolist()


@pytest.mark.parametrize("shape", [(4, 4), (3, 4, 4), (12,)])
def test_image_arrays_without_a_test_set_hold_out_a_seeded_tenth(tmp_path, shape):
    n = 50
    x = _images(n, shape)
    np.savez(tmp_path / "a.npz", x=x, y=np.arange(n) % 2)
    data = load_image_arrays(tmp_path / "a.npz", seed=3)
    assert len(data.y_test) == 5 and len(data.y_train) == 45
    assert data.input_shape == ((1, *shape) if len(shape) == 2 else shape)
    index = lambda t: (t.reshape(len(t), -1)[:, 0] * 255).round().long()  # noqa: E731
    train, test = index(data.x_train), index(data.x_test)
    assert sorted(train.tolist() + test.tolist()) == list(range(n))
    assert torch.equal(data.y_test, test % 2)  # each label stays with its image
    assert torch.equal(index(load_image_arrays(tmp_path / "a.npz", seed=3).x_test), test)
    assert not torch.equal(index(load_image_arrays(tmp_path / "a.npz", seed=4).x_test), test)


def test_float_images_are_used_as_they_are(tmp_path):
    x = np.random.default_rng(0).normal(size=(20, 2, 3, 3)).astype(np.float64)
    np.savez(tmp_path / "f.npz", x=x, y=np.arange(20) % 4, x_test=x[:3], y_test=np.array([0, 1, 2]))
    data = load_image_arrays(tmp_path / "f.npz")
    assert torch.equal(data.x_test, torch.from_numpy(x[:3]).float()) and data.classes == (0, 1, 2, 3)


#: (id, the arrays saved, what the message says)
BAD_ARRAYS = [
    ("no-labels", {"x": _images(10)}, r"holds the arrays \['x'\]; expected x and y.*\(missing: \['y'\]\)"),
    ("test-images-alone", {"x": _images(10), "y": np.arange(10) % 2, "x_test": _images(3)}, r"holds x_test without y_test"),
    ("unknown-array", {"X": _images(10), "y": np.arange(10) % 2}, r"\(missing: \['x'\]\) \(not used: \['X'\]\)"),
    ("objects", {"x": _images(10), "y": np.array([1, "a", None] * 3 + [2], dtype=object)}, r"array 'y' holds Python objects"),
    ("label-count", {"x": _images(10), "y": np.arange(9) % 2}, r"x holds 10 images but y 9 labels"),
    ("one-class", {"x": _images(10), "y": np.zeros(10, dtype=int)}, r"every training label is 0: a classifier needs at least two classes"),
    ("fractional-labels", {"x": _images(10), "y": np.arange(10) / 2}, r"y\[1\] is 0.5, not a class label"),
    ("test-shape", {"x": _images(10), "y": np.arange(10) % 2, "x_test": _images(4, (5, 6)), "y_test": np.arange(4) % 2}, r"the test images are 1x5x6 but the training images 1x6x5"),
    ("nan-pixels", {"x": np.full((10, 2, 2), np.nan), "y": np.arange(10) % 2}, r"x holds 40 NaN or infinite value\(s\), first at index \(0, 0, 0\)"),
    ("too-few-to-hold-out", {"x": _images(4), "y": np.arange(4) % 2}, r"4 rows are too few for a random 90/10 split"),
]


@pytest.mark.parametrize("arrays, message", [c[1:] for c in BAD_ARRAYS], ids=[c[0] for c in BAD_ARRAYS])
def test_image_arrays_that_cannot_work_are_refused(tmp_path, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match=message) as info:
        load_image_arrays(tmp_path / "bad.npz")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("write, message", [
    (lambda p: p.write_bytes(b"not a zip archive"), r"is not an .npz archive \(a zip of arrays\)"),
    (lambda p: p.write_bytes(b"PK\x03\x04 cut short"), r"is not a readable .npz archive"),
    (lambda p: np.save(open(p, "wb"), np.zeros(3)), r"holds a single array, not an .npz archive"),
])
def test_a_file_that_is_not_an_archive(tmp_path, write, message):
    write(tmp_path / "x.npz")
    with pytest.raises(ValueError, match=message):
        load_image_arrays(tmp_path / "x.npz")


def test_a_network_built_for_another_input_shape_says_so(tmp_path):
    np.savez(tmp_path / "small.npz", x=_images(20, (3, 8, 8)), y=np.arange(20) % 2)
    data = load_image_arrays(tmp_path / "small.npz")
    check_input_shape(data, (3, 8, 8), "a 3x8x8 CNN")
    with pytest.raises(ValueError, match=r"LeNet-5 is built for inputs of shape 1x28x28, but the inputs of small are 3x8x8.*\(192 inputs\)"):
        check_input_shape(data, (1, 28, 28), "LeNet-5")


# -- the command-line options --------------------------------------------------------------------


def _parse(argv, tasks=("regression", "classification")):
    parser = cli.add_user_data_arguments(argparse.ArgumentParser(), tasks)
    parser.add_argument("--seed", type=cli.non_negative_int, default=0)
    return cli.user_data(parser.parse_args([str(a) for a in argv]), tasks)


@pytest.fixture
def files(tmp_path):
    frame = pd.DataFrame(_data(), columns=["a", "b", "y", "c"]).assign(label=lambda d: np.where(d.a > 0, "up", "down"))
    frame.to_csv(tmp_path / "t.csv", index=False)
    np.savez(tmp_path / "i.npz", x=_images(40), y=np.arange(40) % 3)
    return tmp_path / "t.csv", tmp_path / "i.npz"


def test_options_name_a_table_or_image_arrays(files):
    table, images = files
    assert _parse([]) is None
    reg = _parse(["--data", table, "--target", "y", "--features", "a,b,c", "--splits-by", "kfold", "--n-splits", "3", "--seed", "2"])
    assert isinstance(reg, RegressionTable) and reg.n_splits == 3 and reg.describe().endswith("3-fold splits (seed 2)")
    cls = _parse(["--data", table, "--target", "label", "--task", "classification", "--features", "a,b"])
    assert isinstance(cls, ClassificationTable) and cls.classes == ("down", "up") and cls.n_splits == 20
    img = _parse(["--data", images])
    assert isinstance(img, ClassificationSplit) and len(img.y_test) == 4


@pytest.mark.parametrize("argv, tasks, message", [
    (["--target", "y"], None, r"--target describe\(s\) the table of --data, which is not given"),
    (["--data", "{table}"], None, r"needs --target, the column to predict; its columns are: a, b, y, c, label"),
    (["--data", "{table}", "--target", "y"], None, r"feature column 'label' is not numeric"),
    (["--data", "{images}", "--target", "y"], None, r"image arrays take no --target"),
    (["--data", "{images}"], ("regression",), r"image arrays \(.npz\) are a classification data set; this script takes a regression table"),
])
def test_options_that_do_not_fit_together(files, argv, tasks, message):
    table, images = files
    argv = [a.format(table=table, images=images) for a in argv]
    with pytest.raises(ValueError, match=message):
        _parse(argv, tasks or ("regression", "classification"))


def test_dataset_names_are_checked_before_any_work(tmp_path, capsys):
    _layout(tmp_path / "uci" / "mine", _data(), _halves())
    parser = argparse.ArgumentParser(prog="x")
    cli.check_uci_datasets(parser, "--datasets", ["mine", str(tmp_path / "uci" / "mine")], tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.check_uci_datasets(parser, "--datasets", ["mine", "theirs"], tmp_path)
    assert info.value.code == 2 and "argument --datasets: unknown UCI data set 'theirs'" in capsys.readouterr().err


# -- the comparison harness ------------------------------------------------------------------------


def test_the_harness_runs_a_users_folders_tables_and_images(files, tmp_path):
    table, images = files
    folder = str(_layout(tmp_path / "mine", _data(), _halves()))
    reg = RegressionTable(table, "y", features=["a", "b", "c"], n_splits=2)
    cls = ClassificationTable(table, "label", features=["a", "b", "c"], n_splits=2, name="t-label")
    img = load_image_arrays(images)
    runs = compare(["map"], [folder, reg, cls, img], [4], [1], num_samples=2, batch_size={"uci": 16, "mnist": 16}, log=lambda line: None)
    # whole epochs of minibatches of 16 reach the budget: 45 training rows of the folder's split 1, 54 of each table, 36 images
    assert runs.dataset.tolist() == [folder, "t", "t-label", "i"]
    assert runs.steps.tolist() == [budget_epochs(4, n, 16)[1] for n in (45, 54, 54, 36)] == [6, 4, 4, 6]
    assert runs.metric.tolist() == ["rmse", "rmse", "error_percent", "error_percent"]
    assert runs.rmse_or_error.between(0, 100).all() and np.isfinite(runs.test_ll).all()
    assert runs.ood_auroc_entropy.isna().all()  # MNIST-only scores stay blank for a user's data
    folder_curve, regression, table_curve, image_curve = runs.calibration.map(json.loads)
    assert "level" in folder_curve and "level" in regression
    assert sum(table_curve["count"]) == len(cls.rows(1)[1]) and sum(image_curve["count"]) == len(img.y_test)


def test_the_harness_checks_the_data_sets_before_any_run(files):
    cls = ClassificationTable(files[0], "label", features=["a"], n_splits=2)
    with pytest.raises(ValueError, match=r"has splits 0\.\.1, not 2"):
        compare(["map"], [cls], [4], [0, 2], log=lambda line: None)
    with pytest.raises(ValueError, match=r"two data sets are named 't'"):
        compare(["map"], [cls, RegressionTable(files[0], "y", features=["a"])], [4], [0], log=lambda line: None)


# -- the examples, end to end ---------------------------------------------------------------------


def _diabetes():
    """scikit-learn's bundled diabetes data (442 patients, 10 features, a disease progression
    target in its own units): ``(x, y)``."""
    datasets = pytest.importorskip("sklearn.datasets")
    bunch = datasets.load_diabetes(scaled=False)
    return bunch.data, bunch.target


def test_uci_regression_runs_a_folder_in_the_standard_layout(tmp_path, monkeypatch):
    x, y = _diabetes()
    data = np.column_stack([x, y])
    splits = [(rows[44:], rows[:44]) for rows in (np.random.default_rng(k).permutation(len(y)) for k in range(3))]
    _layout(tmp_path / "data" / "uci" / "diabetes", data, splits, features=range(10), target=10)
    results = tmp_path / "results"
    run_example("uci_regression.py", "--method", "map", "--quick", "--epochs", "1", "--dataset", "diabetes", "--data-dir", tmp_path / "data",
                "--results-dir", results, "--no-progress", monkeypatch=monkeypatch)
    runs = pd.read_csv(results / "uci_map_quick.csv")
    assert runs[["dataset", "method", "split"]].values.tolist() == [["diabetes", "map", 0]]
    # metrics in the target's own units: its spread is ~77, far from the standardised units' ~1
    assert y[splits[0][1]].std() > 50 and 20 < runs.rmse[0] < 5 * y.std()
    assert runs.test_ll[0] < -3  # a log density per unit of a target spread over ~100 units
    summary = pd.read_csv(results / "uci_map_quick_summary.csv")
    assert summary.dataset.tolist() == ["diabetes"] and summary.source.tolist() == ["measured (this repository)"]  # no published rows
    notes = (results / "uci_map_quick_summary.md").read_text()
    assert "diabetes: the folder" in notes and "in the UCI layout" in notes


def test_uci_regression_runs_a_table(tmp_path, monkeypatch):
    pd.DataFrame(_data(), columns=["a", "b", "y", "c"]).to_csv(tmp_path / "mine.csv", index=False)
    results = tmp_path / "results"
    run_example("uci_regression.py", "--method", "map", "--quick", "--epochs", "1", "--data", tmp_path / "mine.csv", "--target", "y",
                "--splits-by", "kfold", "--n-splits", "3", "--results-dir", results, "--no-progress", monkeypatch=monkeypatch)
    runs = pd.read_csv(results / "uci_map_quick.csv")
    assert runs[["dataset", "split"]].values.tolist() == [["mine", 0]]
    assert "mine: table" in (results / "uci_map_quick_summary.md").read_text()


def test_the_harness_example_runs_image_arrays(tmp_path, monkeypatch):
    np.savez(tmp_path / "digits.npz", x=_images(120, (5, 5)), y=np.arange(120) % 3)
    results = tmp_path / "results"
    run_example("compare_objectives.py", "--quick", "--methods", "map", "--data", tmp_path / "digits.npz", "--results-dir", results, "--no-progress", monkeypatch=monkeypatch)
    summary = pd.read_csv(results / "compare_objectives_quick_summary.csv")
    assert summary.dataset.unique().tolist() == ["digits"] and (summary.metric == "error_percent").all()
    assert sorted(summary.budget) == [8, 16]
    for name in ("vs_budget", "test_ll", "calibration"):
        assert (results / f"compare_objectives_quick_{name}.png").stat().st_size > 0
    assert "image arrays" in (results / "compare_objectives_quick_summary.md").read_text()
