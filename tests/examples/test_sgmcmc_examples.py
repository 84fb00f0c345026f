"""Smoke runs (--quick) of the SG-MCMC-SA example scripts: they run end to end and write
their tables and figures where asked."""

import pandas as pd
import pytest

from tests.examples.test_foundation_examples import run_example


def test_sparse_regression_quick(tmp_path, monkeypatch):
    run_example("sparse_regression.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "sparse_regression_quick.csv")
    assert list(runs.columns) == ["method", "v0", "sigma", "seed", "mae", "mse"]
    assert sorted(runs.method) == ["sgld", "sgld-em", "sgld-sa"] and runs[["mae", "mse"]].notna().all().all()
    table = pd.read_csv(tmp_path / "sparse_regression_quick_table.csv")
    assert {"published_mae", "published_mse"} <= set(table.columns)
    assert (tmp_path / "sparse_regression_quick_posteriors.png").stat().st_size > 0
    # a second call finds every run in the CSV and does not repeat it
    run_example("sparse_regression.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert len(pd.read_csv(tmp_path / "sparse_regression_quick.csv")) == 3


def test_sparse_regression_rejects_bad_options(tmp_path, monkeypatch):
    for args in (["--method", "nuts"], ["--v0", "-1"], ["--iterations", "10", "--thin", "100"]):
        with pytest.raises(SystemExit):
            run_example("sparse_regression.py", *args, "--results-dir", tmp_path, monkeypatch=monkeypatch)


def test_classify_cnn_quick_with_fgsm(tmp_path, monkeypatch):
    run_example("classify_cnn.py", "--quick", "--method", "adam,sghmc-sa", "--fgsm", "--no-progress", "--results-dir", tmp_path, "--run-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "classify_cnn_quick.csv")
    assert list(runs.method) == ["adam", "sghmc-sa"] and runs.accuracy.between(0, 100).all()
    assert (runs.samples >= 1).all()
    curve = pd.read_csv(tmp_path / "classify_cnn_quick_fgsm.csv")
    assert len(curve) == 12 and curve.accuracy.between(0, 1).all()
    assert list(curve.epsilon[:6]) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert (tmp_path / "classify_cnn_quick_fgsm.png").exists()
    # the streamed samples are on disk
    assert list((tmp_path / "runs").glob("**/samples/samples-*.pt"))


def test_resnet_compression_quick_on_synthetic_cifar(tmp_path, monkeypatch):
    run_example("resnet_compression.py", "--quick", "--method", "a-sghmc-sa", "--no-progress", "--results-dir", tmp_path, "--run-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "resnet_compression_quick.csv")
    assert list(runs.method) == ["a-sghmc-sa"] and 0 < runs.sparsity[0] < 0.9
    assert "SYNTHETIC" in (tmp_path / "resnet_compression_quick.md").read_text()


def test_resnet_compression_without_cifar_exits_with_a_clear_message(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as info:
        run_example("resnet_compression.py", "--data-dir", tmp_path, "--results-dir", tmp_path, "--run-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    assert not (tmp_path / "runs").exists()
    assert "cifar-10-python.tar.gz" in str(info.value.code)
