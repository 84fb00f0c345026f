"""Smoke runs (--quick) of the foundation's example scripts: they run end to end on the
real data and write their tables where asked."""

import pandas as pd
import pytest

from tests.runner import run_example


@pytest.mark.parametrize("method", ["map", "mfvi", "bbb"])
def test_uci_regression_quick(method, tmp_path, monkeypatch):
    run_example("uci_regression.py", "--method", method, "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / f"uci_{method}_quick.csv")
    assert list(runs.columns) == ["dataset", "method", "split", "rmse", "test_ll", "train_seconds", "status"] and set(runs.status) == {"ok"}
    assert len(runs) == 1 and runs.rmse.notna().all() and runs.test_ll.notna().all()
    summary = pd.read_csv(tmp_path / f"uci_{method}_quick_summary.csv")
    assert {"measured (this repository)"} <= set(summary.source)
    assert summary.method.str.contains("(published)", regex=False).any()


def test_uci_regression_rejects_unknown_names(tmp_path, monkeypatch):
    with pytest.raises(SystemExit):
        run_example("uci_regression.py", "--method", "nope", "--quick", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    with pytest.raises(SystemExit):
        run_example("uci_regression.py", "--dataset", "iris", "--quick", "--results-dir", tmp_path, monkeypatch=monkeypatch)


def test_uci_regression_missing_data_dir_is_a_clear_error(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit) as info:
        run_example("uci_regression.py", "--quick", "--data-dir", tmp_path / "nowhere", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert info.value.code == 2 and "not an existing directory" in capsys.readouterr().err


def test_uci_regression_bad_values_end_in_one_line_errors(tmp_path, monkeypatch, capsys):
    for bad in (["--epochs", "0"], ["--lr", "-1"], ["--batch-size", "0"], ["--num-samples", "0"]):
        with pytest.raises(SystemExit) as info:
            run_example("uci_regression.py", "--quick", *bad, "--results-dir", tmp_path, monkeypatch=monkeypatch)
        assert info.value.code == 2 and bad[0] in capsys.readouterr().err
    # a value argparse cannot judge (a split the data set does not have) ends in run_main's message
    monkeypatch.delenv("PYROZOO_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as info:
        run_example("uci_regression.py", "--splits", "25", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert "uci_regression.py: error:" in str(info.value.code) and "25" in str(info.value.code)


def test_bayes_by_backprop_mnist_quick(tmp_path, monkeypatch):
    run_example("bayes_by_backprop_mnist.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "bayes_by_backprop_mnist_quick.csv")
    assert 0 <= table.test_error.iloc[0] <= 100
    curve = pd.read_csv(tmp_path / "bayes_by_backprop_mnist_quick_pruning.csv")
    assert curve.weights_kept.is_monotonic_decreasing and curve.fraction_kept.iloc[0] == 1.0


def test_local_reparam_variance_quick(tmp_path, monkeypatch):
    run_example("local_reparam_variance.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "local_reparam_variance_quick.csv")
    measured = table[table.source == "measured (this repository)"]
    cells = ["top layer, epoch 1", "top layer, epoch 2", "bottom layer, epoch 1", "bottom layer, epoch 2"]
    values, errors = measured[cells].to_numpy(), measured[[c + ", s.e." for c in cells]].to_numpy()
    assert len(measured) == 4 and (values > 0).all() and (errors > 0).all()
