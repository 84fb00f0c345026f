"""A user's own data through the MNIST-style examples and the UCI table scripts (issue 27).

The MNIST-style examples take an ``.npz`` of images (``--data``): the fully connected networks
(LeNet-300-100, the MLPs) are sized from the images and their classes, whatever the shape; the
convolutional ones (the LeNet-5s, the 2-Conv-2-FC CNN) run on MNIST's 1 x 28 x 28 and stop
before any work on anything else, naming the shape they need. The table scripts take a table
(``--data``, ``--target``) or a folder in the standard UCI layout, without published columns.
The data are written by the tests: images with 12 classes (more than MNIST's 10, so a network
left at 10 outputs fails) whose class brightens its own band of pixels, and a small table.
"""

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from zoo_protocols import uci_vi
from zoo_protocols.cnn import EPSILONS
from tests.data.test_user_datasets import _data, _halves, _layout
from tests.runner import run_example

CLASSES = 12


def _stripes(path, shape, n=120, classes=CLASSES, test=True, seed=0):
    """uint8 images of ``shape``: noise, plus a bright band of pixels of the image's class."""
    rng = np.random.default_rng(seed)

    def draw(count):
        y = np.arange(count) % classes
        x = rng.integers(0, 60, size=(count, *shape), dtype=np.uint8)
        flat, d = x.reshape(count, -1), int(np.prod(shape))
        for i, c in enumerate(y):
            flat[i, c * d // classes : (c + 1) * d // classes] += 150
        return x, y

    x, y = draw(n)
    arrays = dict(zip(("x_test", "y_test"), draw(n // 4))) if test else {}
    np.savez(path, x=x, y=y, **arrays)
    return path


@pytest.fixture
def small(tmp_path):
    """12-class images of 8 x 8 pixels, with their test set (30 images)."""
    return _stripes(tmp_path / "stripes.npz", (8, 8))


@pytest.fixture
def mnist_shaped(tmp_path):
    """12-class images of MNIST's 28 x 28, without a test set (a --seed-drawn 10 % is held out)."""
    return _stripes(tmp_path / "digits.npz", (28, 28), test=False)


def _error(script, argv, monkeypatch, capsys):
    """The one-line message a user error ends ``script`` with (exit status 1 or 2)."""
    with pytest.raises(SystemExit) as info:
        run_example(script, *argv, monkeypatch=monkeypatch)
    if info.value.code == 2:  # argparse: usage, then "<script>: error: ..."
        return capsys.readouterr().err.strip().splitlines()[-1]
    assert isinstance(info.value.code, str) and "\n" not in info.value.code
    return info.value.code


# -- the MNIST-style examples ------------------------------------------------------------------------

#: ``(architecture, images, weights of the dense network)``: LeNet-300-100 reads 64 pixels,
#: LeNet-5-Caffe MNIST's shape (convolutions 20 x 1 x 5 x 5 and 50 x 20 x 5 x 5, fc 800 x 500);
#: both end in one output per class
LENETS = [
    ("lenet300", "small", 64 * 300 + 300 * 100 + 100 * CLASSES),
    ("lenet5", "mnist_shaped", 20 * 25 + 50 * 20 * 25 + 800 * 500 + 500 * CLASSES),
]


@pytest.mark.parametrize("arch, images, weights", LENETS, ids=[c[0] for c in LENETS])
def test_compress_lenet_sizes_the_network_from_the_images(arch, images, weights, request, tmp_path, monkeypatch):
    data = request.getfixturevalue(images)
    name = data.stem
    run_example("compress_lenet.py", "--quick", "--method", "sparse-vd", "--arch", arch, "--data", data, "--results-dir", tmp_path / "r", "--no-progress", monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "r" / f"compress_lenet_{name}_runs.csv")
    assert runs[["method", "arch", "dataset"]].values.tolist() == [["sparse-vd", arch, name]]
    assert runs.params_total[0] == weights and 0 <= runs.test_error[0] <= 100
    table = pd.read_csv(tmp_path / "r" / f"compress_lenet_{name}_sparse-vd_{arch}.csv")
    assert table.source.tolist() == ["measured (this repository)"]  # no published rows for a user's data
    text = (tmp_path / "r" / f"compress_lenet_{name}_sparse-vd_{arch}.md").read_text()
    assert text.startswith(f"# LeNet compression on {name}") and f"image arrays {data}" in text and f"{CLASSES} classes" in text


def test_classify_cnn_runs_mnist_shaped_images(mnist_shaped, tmp_path, monkeypatch):
    results = tmp_path / "r"
    run_example("classify_cnn.py", "--quick", "--method", "adam", "--fgsm", "--data", mnist_shaped, "--results-dir", results,
                "--run-dir", tmp_path / "runs", "--no-progress", monkeypatch=monkeypatch)
    # named after the data set, and a digest of its contents: a changed file never resumes these runs
    (stem,) = [p.stem for p in results.glob("*.csv") if re.fullmatch(r"classify_cnn_digits_quick_[0-9a-f]{8}", p.stem)]
    runs = pd.read_csv(results / f"{stem}.csv")
    assert runs[["method", "dataset", "samples"]].values.tolist() == [["adam", "digits", 1]]
    assert "published_accuracy" not in runs and 0 <= runs.accuracy[0] <= 100 and runs.test_ll[0] < 0
    curve = pd.read_csv(results / f"{stem}_fgsm.csv")
    assert curve.epsilon.tolist() == EPSILONS
    # unattacked, the 12 held-out images are scored as the run scored them
    assert 100 * curve.accuracy[0] == pytest.approx(runs.accuracy[0])
    assert (results / f"{stem}_fgsm.png").stat().st_size > 0
    assert "image arrays" in (results / f"{stem}.md").read_text()


def test_classify_cnn_samples_on_mnist_shaped_images(mnist_shaped, tmp_path, monkeypatch):
    """The samplers too: SG-MCMC with its SSGL prior over the 12-class network (burn-in 0
    epochs, so the quick run's one step an epoch averages a sample)."""
    run_example("classify_cnn.py", "--quick", "--method", "sghmc-sa", "--burn-in-epochs", "0", "--data", mnist_shaped, "--results-dir", tmp_path,
                "--run-dir", tmp_path / "runs", "--no-progress", monkeypatch=monkeypatch)
    (path,) = [p for p in tmp_path.glob("*.csv") if re.fullmatch(r"classify_cnn_digits_quick_[0-9a-f]{8}", p.stem)]
    runs = pd.read_csv(path)
    assert runs.method.tolist() == ["sghmc-sa"] and runs.samples[0] >= 1 and 0 <= runs.accuracy[0] <= 100


def test_fgsm_robustness_runs_any_image_size(small, tmp_path, monkeypatch):
    """Every model, the variance network too, is LeNet-300-100 sized from the images."""
    run_example("fgsm_robustness.py", "--quick", "--data", small, "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "fgsm_robustness_stripes.csv")
    assert list(table.columns) == ["epsilon", "MC dropout (p=0.5)", "Sparse VD", "deterministic", "variance network (layer)"]
    assert table.epsilon.tolist() == [0.0, 0.02, 0.05] and table.iloc[:, 1:].stack().between(0, 1).all()
    notes = (tmp_path / "fgsm_robustness_stripes.md").read_text()
    assert "first 30 stripes test images" in notes and "LeNet-300-100 (64-300-100-12)" in notes and "variance network: 1)" in notes
    assert (tmp_path / "fgsm_robustness_stripes.png").stat().st_size > 0


def test_variance_networks_size_the_network_from_the_images(small, tmp_path, monkeypatch):
    run_example("variance_networks.py", "--quick", "--arch", "lenet300", "--parameterizations", "layer,zero-mean", "--data", small,
                "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "variance_networks_stripes.csv")
    assert table.parameterization.tolist() == ["layer", "zero-mean"] and set(table.source) == {"measured (this repository)"}  # no published rows
    assert table.set_index("parameterization").kl["zero-mean"] == 0.0 and table.test_time_averaging_accuracy.between(0, 100).all()
    runs = pd.read_csv(tmp_path / "variance_networks_stripes_runs.csv")
    # the data set's name and contents: a changed file never merges with these runs (--resume)
    assert runs.dataset.str.fullmatch(r"stripes \(sha1 [0-9a-f]{8}\)").all() and runs.train_examples.tolist() == [120, 120]
    notes = (tmp_path / "variance_networks_stripes.md").read_text()
    assert "Measured: lenet300 on stripes (120 training examples)" in notes and f"image arrays {small}" in notes and "No published results" in notes


def test_bayes_by_backprop_sizes_the_network_from_the_images(small, tmp_path, monkeypatch):
    run_example("bayes_by_backprop_mnist.py", "--quick", "--data", small, "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "bayes_by_backprop_stripes_quick.csv")
    assert table.source.tolist() == ["measured (this repository)"] and 0 <= table.test_error[0] <= 100  # nothing published for it
    curve = pd.read_csv(tmp_path / "bayes_by_backprop_stripes_quick_pruning.csv")
    assert curve.weights_kept.iloc[0] == 64 * 32 + 32 * 32 + 32 * CLASSES  # unpruned: every weight of the 64-32-32-12 MLP
    text = (tmp_path / "bayes_by_backprop_stripes_quick.md").read_text()
    assert text.startswith("# Bayes by Backprop on stripes") and "64-32-32-12" in text and f"image arrays {small}" in text


def test_local_reparam_variance_runs_any_image_size(small, tmp_path, monkeypatch):
    run_example("local_reparam_variance.py", "--quick", "--data", small, "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "local_reparam_variance_stripes_quick.csv")
    assert len(table) == 4 and set(table.source) == {"measured (this repository)"}  # no published rows
    variances = table[[c for c in table.columns if "layer" in c]]  # a variance and its s.e. per cell
    assert variances.shape == (4, 8) and (variances > 0).all().all()
    assert "Measured: stripes, MLP 64-32-12" in (tmp_path / "local_reparam_variance_stripes_quick.md").read_text()


def test_rdp_pruning_histogram_runs_any_image_size(small, tmp_path, monkeypatch):
    run_example("rdp_pruning_histogram.py", "--quick", "--arch", "lenet300", "--data", small, "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    stem = "rdp_stripes_lenet300_pruning_histogram"
    record = json.loads((tmp_path / f"{stem}_statistics.json").read_text())
    # one statistic per input pixel of the first layer, one per class of the last
    sizes = {key: len(entry["values"]) for key, entry in record["groupings"].items()}
    assert sizes == {"0.weight.row": 300, "0.weight.column": 64, "2.weight.row": 100, "2.weight.column": 300, "4.weight.row": CLASSES, "4.weight.column": 100}
    assert (tmp_path / f"{stem}.png").stat().st_size > 1000


def _argv(script, tmp_path, *argv):
    """``argv`` and where ``script`` writes, all under ``tmp_path``: its results (and classify_cnn's runs)."""
    runs = ["--run-dir", tmp_path / "runs"] if script == "classify_cnn.py" else []
    return [*argv, "--results-dir", tmp_path / "r", *runs]


def _nothing_written(tmp_path):
    return not (tmp_path / "r").exists() and not (tmp_path / "runs").exists()


#: ``(script, its options besides --data, the network named)``: built for 1 x 28 x 28 only
CONVOLUTIONAL = [
    ("compress_lenet.py", ["--arch", "lenet300,lenet5"], "LeNet-5-Caffe"),
    ("rdp_pruning_histogram.py", ["--arch", "lenet5"], "LeNet-5-Caffe"),
    ("classify_cnn.py", ["--method", "adam"], "the 2-Conv-2-FC CNN"),
    ("variance_networks.py", ["--arch", "lenet5-bn"], "LeNet-5 with batch normalisation"),
    ("variance_networks.py", ["--arch", "lenet5"], "LeNet-5-Caffe"),
]


@pytest.mark.parametrize("script, argv, network", CONVOLUTIONAL, ids=[f"{c[0][:-3]}-{c[1][-1]}" for c in CONVOLUTIONAL])
def test_a_convolutional_network_names_the_shape_it_needs(script, argv, network, small, tmp_path, monkeypatch, capsys):
    message = _error(script, _argv(script, tmp_path, "--quick", *argv, "--data", small), monkeypatch, capsys)
    assert f"{network} is built for inputs of shape 1x28x28, but the inputs of stripes are 1x8x8" in message
    assert "a fully connected network sized from the data (64 inputs) can" in message
    assert ("(--arch lenet300)" in message) == (script != "classify_cnn.py")
    assert _nothing_written(tmp_path)  # refused before any work


def _float_images(folder):
    """Images of numbers in [-1, 2], used as they are (not scaled)."""
    np.savez(folder / "f.npz", x=np.linspace(-1.0, 2.0, 40 * 16).reshape(40, 4, 4), y=np.arange(40) % 2)
    return folder / "f.npz"


#: ``(script, options, writes the data file into a folder, what the message says)``
IMAGE_ERRORS = [
    ("compress_lenet.py", [], lambda folder: _table(folder / "t.csv"), r"takes images, an .npz with x and y .*not a table"),
    ("local_reparam_variance.py", [], lambda folder: _stripes(folder / "mnist.npz", (4, 4)), r"'mnist' is the name of a bundled data set.*rename the file"),
    ("fgsm_robustness.py", [], _float_images, r"the images hold values in \[-1, 2\], but FGSM clips the attacked images to \[0, 1\]: scale them"),
    ("classify_cnn.py", ["--fgsm"], _float_images, r"FGSM clips the attacked images to \[0, 1\]"),
    ("classify_cnn.py", ["--dataset", "mnist"], lambda folder: _stripes(folder / "s.npz", (4, 4)), r"give --dataset or --data, not both"),
    ("rdp_pruning_histogram.py", ["--statistics", __file__], lambda folder: _stripes(folder / "s.npz", (4, 4)), r"--statistics .* and --data .*: give one of them"),
    ("bayes_by_backprop_mnist.py", [], lambda folder: _table(folder / "t.csv"), r"takes images, an .npz with x and y .*not a table"),
    ("variance_networks.py", [], lambda folder: _stripes(folder / "mnist.npz", (4, 4)), r"'mnist' is the name of a bundled data set.*rename the file"),
]


@pytest.mark.parametrize("script, argv, write, message", IMAGE_ERRORS, ids=[f"{c[0][:-3]}-{i}" for i, c in enumerate(IMAGE_ERRORS)])
def test_images_that_cannot_work_are_refused_in_one_line(script, argv, write, message, tmp_path, monkeypatch, capsys):
    line = _error(script, _argv(script, tmp_path, *argv, "--data", write(tmp_path)), monkeypatch, capsys)
    assert re.search(message, line), line
    assert _nothing_written(tmp_path)


# -- the UCI table scripts ---------------------------------------------------------------------------


def _table(path):
    """Three features and a target ``y`` (60 rows), as a CSV."""
    pd.DataFrame(_data(), columns=["a", "b", "y", "c"]).to_csv(path, index=False)
    return path


@pytest.fixture
def table(tmp_path):
    return _table(tmp_path / "t.csv")


def test_uci_esbo_table_runs_a_table(table, tmp_path, monkeypatch):
    run_example("uci_esbo_table.py", "--quick", "--methods", "mfvi", "--data", table, "--target", "y", "--n-splits", "3",
                "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    out = pd.read_csv(tmp_path / "uci_esbo_table_t_quick.csv")  # named after the table: the bundled sets' table is left alone
    assert out.dataset.tolist() == ["t"] and out.source.tolist() == ["measured (this repository)"]  # no withdrawn or published rows
    assert out.steps.tolist() == [uci_vi.QUICK_EPOCHS]  # full batches of the 54 training rows: one step an epoch
    assert pd.read_csv(tmp_path / "uci_esbo_runs_t_quick.csv")[["dataset", "method", "split"]].values.tolist() == [["t", "mfvi", 0]]
    assert "Data without published baselines: t: table" in (tmp_path / "uci_esbo_table_t_quick.md").read_text()


def test_uci_esbo_table_runs_a_folder_by_path(tmp_path, monkeypatch):
    folder = _layout(tmp_path / "mine", _data(), _halves())
    run_example("uci_esbo_table.py", "--quick", "--methods", "mfvi", "--datasets", folder, "--results-dir", tmp_path / "r", "--no-progress", monkeypatch=monkeypatch)
    out = pd.read_csv(tmp_path / "r" / "uci_esbo_table_quick.csv")
    assert out.dataset.tolist() == [str(folder)] and out.source.tolist() == ["measured (this repository)"]
    assert f"the folder {folder} in the UCI layout" in (tmp_path / "r" / "uci_esbo_table_quick.md").read_text()


def test_uci_sgmcmc_table_runs_a_table(table, tmp_path, monkeypatch):
    run_example("uci_sgmcmc_table.py", "--quick", "--methods", "sghmc", "--data", table, "--target", "y", "--results-dir", tmp_path, "--no-progress", monkeypatch=monkeypatch)
    tuning = pd.read_csv(tmp_path / "uci_sgmcmc_t_quick_lr.csv")
    assert tuning[["dataset", "method"]].drop_duplicates().values.tolist() == [["t", "sghmc"]] and len(tuning) == 2  # the grid's first two rates
    out = pd.read_csv(tmp_path / "uci_sgmcmc_t_quick_table.csv")
    # nothing of the authors' to compare with: their columns are absent, not blank
    assert list(out.columns) == ["dataset", "method", "lr", "splits", "rmse", "rmse_se", "test_ll", "test_ll_se", "rmse_last", "rmse_last_se", "rank", "rank_last"]
    assert out[["dataset", "method", "splits", "rank", "rank_last"]].values.tolist() == [["t", "sghmc", 1, 1, 1]] and out.lr[0] in set(tuning.lr)
    assert "Not in the authors' table" in (tmp_path / "uci_sgmcmc_t_quick_table.md").read_text()
    assert (tmp_path / "uci_sgmcmc_t_quick_table.png").stat().st_size > 0


def _rdp_runs(path, dataset, test_ll):
    pd.DataFrame({"dataset": dataset, "method": "rdp", "split": range(len(test_ll)), "rmse": 1.0, "test_ll": test_ll, "train_seconds": 1.0}).to_csv(path, index=False)
    return path


def test_uci_rdp_table_reads_the_runs_on_a_table(table, tmp_path, monkeypatch):
    test_ll = [-1.25, -1.75]
    runs = _rdp_runs(tmp_path / "runs.csv", "t", test_ll)
    run_example("uci_rdp_table.py", "--runs", runs, "--data", table, "--target", "y", "--n-splits", "3", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    out = pd.read_csv(tmp_path / "uci_rdp_comparison_t.csv")
    se = np.std(test_ll, ddof=1) / math.sqrt(2)
    assert out.to_dict("records") == [{"dataset": "t", "splits": 2, "rdp_test_ll": f"-1.50 ± {se:.2f}", "rdp_rmse": "1.00 ± 0.00"}]  # no published columns
    notes = (tmp_path / "uci_rdp_comparison_t.md").read_text()
    assert "t (2 of 3)" in notes and "Data without published baselines: t: table" in notes


def test_uci_rdp_table_reads_the_runs_on_a_folder_by_name(tmp_path, monkeypatch):
    _layout(tmp_path / "data" / "uci" / "mine", _data(), _halves())
    runs = _rdp_runs(tmp_path / "runs.csv", "mine", [-1.0, -2.0])
    run_example("uci_rdp_table.py", "--runs", runs, "--data-dir", tmp_path / "data", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    out = pd.read_csv(tmp_path / "uci_rdp_comparison.csv")
    assert out.dataset.tolist() == ["mine"] and out.splits.tolist() == [2] and "VI (published)" not in out
    assert "Every data set was run on all of its standard splits" in (tmp_path / "uci_rdp_comparison.md").read_text()


TABLE_SCRIPTS = ["uci_esbo_table.py", "uci_rdp_table.py", "uci_sgmcmc_table.py"]


@pytest.mark.parametrize("script", TABLE_SCRIPTS)
@pytest.mark.parametrize("target", [None, "price"], ids=["no-target", "missing-target"])
def test_a_missing_target_column_lists_the_columns(script, target, table, tmp_path, monkeypatch, capsys):
    argv = ["--data", table] + (["--target", target] if target else []) + ["--results-dir", tmp_path / "r"]
    line = _error(script, argv + (["--runs", _rdp_runs(tmp_path / "runs.csv", "t", [-1.0])] if script == "uci_rdp_table.py" else []), monkeypatch, capsys)
    said = "needs --target, the column to predict" if target is None else "has no target column 'price'"
    assert said in line and ("a, b, y, c" in line if target is None else "'a', 'b', 'y', 'c'" in line), line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("script", TABLE_SCRIPTS)
def test_a_table_named_like_a_bundled_set_is_refused(script, tmp_path, monkeypatch, capsys):
    argv = ["--data", _table(tmp_path / "concrete.csv"), "--target", "y", "--results-dir", tmp_path / "r"]
    line = _error(script, argv + (["--runs", _rdp_runs(tmp_path / "runs.csv", "concrete", [-1.0])] if script == "uci_rdp_table.py" else []), monkeypatch, capsys)
    assert "'concrete' is the name of a bundled data set" in line and "rename the file" in line
    assert not (tmp_path / "r").exists()


def test_uci_rdp_table_says_how_to_find_the_runs_data(tmp_path, monkeypatch, capsys):
    runs = _rdp_runs(tmp_path / "runs.csv", "houses", [-1.0])
    line = _error("uci_rdp_table.py", ["--runs", runs, "--results-dir", tmp_path / "r"], monkeypatch, capsys)
    assert "holds runs on 'houses', which is neither bundled nor a folder in the UCI layout" in line and "--data <file> --target <column>" in line
    assert not (tmp_path / "r").exists()


# -- the DSIVI hierarchical BNN, the VAE priors and the ResNet-20 compression -------------------------

#: ``(case, writes the data set into a folder and returns its options, the files' name, hidden units)``:
#: a table (the protocol's 50 hidden units unless --hidden) and a folder in the UCI layout by path (its n_hidden.txt)
HIERARCHICAL_DATA = [
    ("table", lambda folder: ["--data", _table(folder / "t.csv"), "--target", "y", "--n-splits", "3", "--hidden", "8"], "t", 8),
    ("folder", lambda folder: ["--dataset", _layout(folder / "mine", _data(), _halves())], "mine", 7),
]


@pytest.mark.parametrize("case, write, name, hidden", HIERARCHICAL_DATA, ids=[c[0] for c in HIERARCHICAL_DATA])
def test_dsivi_hierarchical_bnn_runs_a_users_data(case, write, name, hidden, tmp_path, monkeypatch):
    run_example("dsivi_hierarchical_bnn.py", "--quick", "--methods", "joint,marginal", *write(tmp_path), "--results-dir", tmp_path / "r", "--no-progress", monkeypatch=monkeypatch)
    stem = f"dsivi_hierarchical_bnn_{name}_quick"  # named after the data set
    runs = pd.read_csv(tmp_path / "r" / f"{stem}_runs.csv")
    assert runs[["method", "split"]].values.tolist() == [["joint", 0], ["marginal", 0]]
    assert (runs.rmse > 0).all() and np.isfinite(runs[["elbo_exact", "elbo_dsivi_lower", "test_ll"]]).all().all()
    notes = (tmp_path / "r" / f"{stem}.md").read_text()
    assert f"MLP with {hidden} hidden units" in notes and "Data without published baselines: " in notes
    assert ("t: table" in notes) if case == "table" else (f"the folder {tmp_path / 'mine'} in the UCI layout" in notes)
    assert (tmp_path / "r" / f"{stem}.png").stat().st_size > 0


@pytest.mark.parametrize("target", [None, "price"], ids=["no-target", "missing-target"])
def test_dsivi_hierarchical_bnn_lists_the_columns_of_a_table_without_its_target(target, table, tmp_path, monkeypatch, capsys):
    line = _error("dsivi_hierarchical_bnn.py", ["--data", table, *(["--target", target] if target else []), "--results-dir", tmp_path / "r"], monkeypatch, capsys)
    said = "needs --target, the column to predict" if target is None else "has no target column 'price'"
    assert said in line and ("a, b, y, c" in line if target is None else "'a', 'b', 'y', 'c'" in line), line
    assert not (tmp_path / "r").exists()


def test_vae_dsivi_prior_sizes_the_vae_from_the_images(small, tmp_path, monkeypatch):
    run_example("vae_dsivi_prior.py", "--quick", "--priors", "normal,vamp:5,dsivi:5", "--data", small, "--checkpoint-dir", tmp_path / "runs",
                "--results-dir", tmp_path / "r", "--no-progress", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "r" / "vae_dsivi_prior_stripes_quick.csv")
    # the three measured rows and nothing of the thesis' (its rows are MNIST's)
    assert table[["prior", "K"]].values.tolist() == [["normal", 0], ["vamp", 5], ["dsivi", 5]] and set(table.source) == {"measured (this repository)"}
    assert (table.test_ll < 0).all() and np.isfinite(table.test_ll).all()
    notes = (tmp_path / "r" / "vae_dsivi_prior_stripes_quick.md").read_text()
    # one encoder input per pixel of the 8 x 8 images; the 30 test images of the file
    assert "Measured rows: stripes" in notes and "encoder/decoder 64-32-32-4" in notes and "120 training / 30 test images" in notes
    assert f"image arrays {small}" in notes and "Published rows" not in notes


def test_resnet_compression_runs_images_of_its_shape(tmp_path, monkeypatch):
    data = _stripes(tmp_path / "tiles.npz", (3, 32, 32), n=48)
    run_example("resnet_compression.py", "--quick", "--method", "sghmc-sa", "--data", data, "--run-dir", tmp_path / "runs",
                "--results-dir", tmp_path / "r", "--no-progress", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "r" / "resnet_compression_tiles_quick.csv")
    assert "published_accuracy" not in table and table.method.tolist() == ["sghmc-sa"]  # nothing published for these images
    assert 0 <= table.accuracy[0] <= 100 and 0 < table.sparsity[0] < 1
    (run_dir,) = (tmp_path / "runs").iterdir()  # named after the file's name and contents
    assert re.fullmatch(r"quick-tiles-[0-9a-f]{8}-seed0", run_dir.name)
    from pyrozoo.serialization import load_state

    assert load_state(run_dir / "pretrained.pt")["values"]["fc.weight"].shape == (CLASSES, 64)  # one output per class of the data
    assert f"image arrays {data}" in (tmp_path / "r" / "resnet_compression_tiles_quick.md").read_text()


#: ``(script, options, writes the data file into a folder, what the message says)``
VAE_RESNET_ERRORS = [
    ("resnet_compression.py", [], lambda folder: _stripes(folder / "s.npz", (3, 16, 16)),
     r"ResNet-20 is built for inputs of shape 3x32x32, but the inputs of s are 3x16x16"),
    ("resnet_compression.py", [], lambda folder: _stripes(folder / "s.npz", (32, 32)), r"ResNet-20 is built for inputs of shape 3x32x32, but the inputs of s are 1x32x32"),
    ("resnet_compression.py", ["--synthetic"], lambda folder: _stripes(folder / "s.npz", (3, 32, 32), n=8), r"give --synthetic or --data, not both"),
    ("vae_dsivi_prior.py", [], _float_images, r"the images hold values in \[-1, 2\], but dynamic binarisation draws each pixel as Bernoulli\(intensity\): scale them to \[0, 1\]"),
    ("vae_dsivi_prior.py", [], lambda folder: _stripes(folder / "mnist.npz", (4, 4)), r"'mnist' is the name of a bundled data set.*rename the file"),
]


@pytest.mark.parametrize("script, argv, write, message", VAE_RESNET_ERRORS, ids=[f"{c[0][:-3]}-{i}" for i, c in enumerate(VAE_RESNET_ERRORS)])
def test_vae_and_resnet_refuse_images_that_cannot_work(script, argv, write, message, tmp_path, monkeypatch, capsys):
    runs = ["--checkpoint-dir" if script == "vae_dsivi_prior.py" else "--run-dir", tmp_path / "runs"]
    line = _error(script, [*argv, "--data", write(tmp_path), *runs, "--results-dir", tmp_path / "r"], monkeypatch, capsys)
    assert re.search(message, line), line
    assert _nothing_written(tmp_path)
