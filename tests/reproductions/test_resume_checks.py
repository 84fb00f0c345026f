"""A results file read back (``--resume``, a finished run skipped, a table rebuilt) is checked
first: a row cut short, as a full disk left one, is an error naming the file, never a result,
and nothing runs or is written after it.

The reported failure: the disk filled during ``uci_regression.py --resume``, the runs CSV kept
a truncated row, and the next ``--resume`` took it as that split's result and exited 0. Each
case here plants such a file where an example reads one, and makes the example's work (data
loading or training) fail loudly if it is reached: nothing here trains.
"""

import sys
from types import SimpleNamespace

import pandas as pd
import pytest

from zoo_protocols import cli
from tests.runner import script_path
from tests.reproductions.test_bad_options import _load

UCI_ROWS = pd.DataFrame({"dataset": ["bostonHousing"] * 2, "method": ["bbb"] * 2, "split": [0, 1], "rmse": [3.1, 2.9],
                         "test_ll": [-2.6, -2.5], "train_seconds": [10.5, 11.25]})


def cut_mid_row(path, frame):
    """``frame`` as CSV with its last row cut short mid-number, no line end (a write stopped by a full disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = frame.to_csv(index=False)
    path.write_text(text[:-4])
    return path


def drop_last_fields(path, frame, keep):
    """``frame`` as CSV whose last row lost all but its first ``keep`` fields (its line ended)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = frame.to_csv(index=False).splitlines()
    lines[-1] = ",".join(lines[-1].split(",")[:keep])
    path.write_text("\n".join(lines) + "\n")
    return path


def no_work(*args, **kwargs):
    raise AssertionError("the example started work after reading an incomplete results file")


def _fails_naming(script, argv, path, monkeypatch, capsys):
    """``script`` ends with one line that names ``path``; the file is as it was."""
    before = path.read_bytes()
    monkeypatch.setattr(sys, "argv", [str(script_path(script))])
    monkeypatch.delenv("PYROZOO_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as info:
        cli.run_main(lambda: _load(script).main([str(a) for a in argv]))
    message = info.value.code
    assert isinstance(message, str) and "\n" not in message, message
    assert str(path) in message and ("ends mid-row" in message or "incomplete rows" in message), message
    assert "Traceback" not in capsys.readouterr().err
    assert path.read_bytes() == before
    return message


@pytest.mark.parametrize("damage", ["cut-mid-row", "row-lost-its-metrics"])
def test_uci_regression_resume_refuses_a_truncated_runs_csv(damage, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("zoo_protocols.sweep.run_split", no_work)
    out = tmp_path / "uci_bbb.csv"
    (cut_mid_row if damage == "cut-mid-row" else lambda p, f: drop_last_fields(p, f, 4))(out, UCI_ROWS)
    argv = ["--method", "bbb", "--dataset", "bostonHousing", "--splits", "0-2", "--resume", "--out", out, "--results-dir", tmp_path / "results"]
    message = _fails_naming("uci_regression.py", argv, out, monkeypatch, capsys)
    if damage == "row-lost-its-metrics":
        assert "line 3: test_ll is blank" in message
    assert not (tmp_path / "results").exists()  # no summary of a result that is not one


def test_uci_regression_resume_continues_from_a_complete_runs_csv(tmp_path, monkeypatch):
    """The check passes a complete file: the runs in it are skipped, the others run."""
    module = _load("uci_regression.py")
    ran = []

    def fake_run(method, split, config):
        ran.append(split.split)
        return {"rmse": 3.0, "test_ll": -2.7, "train_seconds": 1.0}

    monkeypatch.setattr("zoo_protocols.sweep.run_split", fake_run)
    monkeypatch.setattr(module, "save_table", lambda *args, **kwargs: None)
    out = tmp_path / "uci_bbb.csv"
    UCI_ROWS.to_csv(out, index=False)
    module.main(["--method", "bbb", "--dataset", "bostonHousing", "--splits", "0-2", "--resume", "--out", str(out), "--results-dir", str(tmp_path), "--no-progress"])
    assert ran == [2] and list(pd.read_csv(out).split) == [0, 1, 2]


def test_compare_resume_refuses_a_truncated_runs_csv(tmp_path):
    from zoo_protocols import compare as harness

    out = tmp_path / "compare.csv"
    row = {c: 1 for c in harness.COLUMNS} | {"dataset": "bostonHousing", "method": "map", "metric": "rmse", "prior": "p", "guide": "g", "objective": "o", "calibration": "{}"}
    drop_last_fields(out, pd.DataFrame([row, row | {"seed": 2}], columns=harness.COLUMNS), 9)
    with pytest.raises(ValueError, match=r"compare.csv has incomplete rows.*line 3: test_ll is blank"):
        harness.compare(["map"], ["bostonHousing"], [5], [0], out=out, resume=True, log=lambda m: None)


def test_sparse_regression_refuses_a_truncated_runs_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_load("sparse_regression.py"), "run_one", no_work)
    out = cut_mid_row(tmp_path / "sparse.csv", pd.DataFrame({"method": ["sgld-sa"] * 2, "v0": [0.1] * 2, "sigma": [1.0] * 2, "seed": [0, 1], "mae": [1.5, 1.6], "mse": [3.5, 3.7]}))
    _fails_naming("sparse_regression.py", ["--quick", "--out", out, "--results-dir", tmp_path / "results"], out, monkeypatch, capsys)


def test_sparse_regression_refuses_truncated_trajectories(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_load("sparse_regression.py"), "run_one", no_work)
    out = tmp_path / "sparse.csv"
    pd.DataFrame({"method": ["sgld-sa"], "v0": [0.1], "sigma": [1.0], "seed": [0], "mae": [1.5], "mse": [3.5]}).to_csv(out, index=False)
    paths = cut_mid_row(tmp_path / "sparse_trajectories.csv", pd.DataFrame({"method": ["sgld-sa"] * 2, "v0": [0.1] * 2, "sigma": [1.0] * 2, "seed": [0] * 2,
                                                                            "step": [6, 12], "sigma_k": [1.5, 1.4], "rho_mean": [0.01, 0.02], "delta_k": [0.4, 0.3]}))
    _fails_naming("sparse_regression.py", ["--quick", "--out", out, "--results-dir", tmp_path / "results"], paths, monkeypatch, capsys)


def test_classify_cnn_refuses_a_truncated_runs_csv(tmp_path, monkeypatch, capsys):
    module = _load("classify_cnn.py")
    monkeypatch.setattr(module, "load", no_work)
    rows = pd.DataFrame([{"method": "adam", "dataset": "mnist", "seed": 0, "epochs": 2, "thin": float("nan"), "burn_in": float("nan"), "accuracy": 91.5,
                          "test_ll": -0.3, "ece": 0.02, "samples": 1, "train_seconds": 3.5}] * 2, columns=module.COLUMNS)
    out = drop_last_fields(tmp_path / "classify_cnn.csv", rows, 7)  # accuracy kept, test_ll onwards lost
    _fails_naming("classify_cnn.py", ["--quick", "--method", "adam", "--out", out, "--run-dir", tmp_path / "runs", "--results-dir", tmp_path / "results"], out, monkeypatch, capsys)
    assert not (tmp_path / "runs").exists()


def test_compress_lenet_resume_refuses_truncated_details(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_load("compress_lenet.py"), "load_mnist", no_work)
    out = tmp_path / "runs.csv"
    row = {"method": "sparse-vd", "arch": "lenet300", "dataset": "mnist", "seed": 0, "test_error": 1.9, "params_total": 266200, "params_kept": 8000,
           "compression_ratio": 33.3, "flops": 8000, "pruned_architecture": "784-300-100", "wall_seconds": 10.0}
    details = cut_mid_row(tmp_path / "runs_details.csv", pd.DataFrame([row, row | {"seed": 1}]))
    argv = ["--quick", "--resume", "--seeds", "0-2", "--out", out, "--results-dir", tmp_path / "results"]
    _fails_naming("compress_lenet.py", argv, details, monkeypatch, capsys)


def test_compress_lenet_summarize_refuses_a_truncated_runs_csv(tmp_path, monkeypatch, capsys):
    runs = drop_last_fields(tmp_path / "runs.csv", pd.DataFrame({"method": ["rdp"] * 2, "arch": ["lenet5"] * 2, "seed": [0, 1], "test_error": [0.8, 0.9]}), 3)
    _fails_naming("compress_lenet.py", ["--summarize", runs, "--results-dir", tmp_path / "results"], runs, monkeypatch, capsys)
    assert not (tmp_path / "results").exists()


def test_resnet_compression_refuses_a_truncated_runs_csv(tmp_path, monkeypatch, capsys):
    module = _load("resnet_compression.py")
    monkeypatch.setattr(module, "load_data", no_work)
    rows = pd.DataFrame([{"method": "a-sghmc-sa", "target_sparsity": 0.9, "seed": 0, "pretrain_epochs": 1, "epochs": 2, "accuracy": 10.0,
                          "sparsity": 0.5, "sigma": 1.0, "train_seconds": 5.0}] * 2, columns=module.COLUMNS)
    out = cut_mid_row(tmp_path / "resnet.csv", rows)
    _fails_naming("resnet_compression.py", ["--quick", "--out", out, "--run-dir", tmp_path / "runs", "--results-dir", tmp_path / "results"], out, monkeypatch, capsys)
    assert not (tmp_path / "runs").exists()


def test_uci_sgmcmc_table_refuses_a_truncated_tuning_csv(tmp_path, monkeypatch, capsys):
    module = _load("uci_sgmcmc_table.py")
    monkeypatch.setattr(module, "run_split", no_work)
    tuning = drop_last_fields(tmp_path / "uci_sgmcmc_quick_lr.csv", pd.DataFrame({"dataset": ["bostonHousing"] * 2, "method": ["sghmc"] * 2, "lr": [2e-6, 5e-6],
                                                                                  "val_rmse": [0.5, 0.4], "val_test_ll": [-1.0, -0.9]}), 2)
    _fails_naming("uci_sgmcmc_table.py", ["--quick", "--results-dir", tmp_path], tuning, monkeypatch, capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["uci_sgmcmc_quick_lr.csv"]


def test_uci_sgmcmc_table_no_run_refuses_a_truncated_runs_csv(tmp_path, monkeypatch, capsys):
    pd.DataFrame({"dataset": ["bostonHousing"], "method": ["sghmc"], "lr": [2e-6], "val_rmse": [0.5], "val_test_ll": [-1.0]}).to_csv(tmp_path / "uci_sgmcmc_quick_lr.csv", index=False)
    runs = cut_mid_row(tmp_path / "uci_sgmcmc_quick_runs.csv", UCI_ROWS.assign(method="sghmc"))
    _fails_naming("uci_sgmcmc_table.py", ["--quick", "--no-run", "--results-dir", tmp_path], runs, monkeypatch, capsys)
    assert not (tmp_path / "uci_sgmcmc_quick_table.csv").exists()


def test_local_reparam_variance_refuses_truncated_measurements(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_load("local_reparam_variance.py"), "load_mnist", no_work)
    checkpoint = tmp_path / "lrv.ckpt"
    measured = cut_mid_row(tmp_path / "lrv.ckpt.variances.csv", pd.DataFrame({"estimator": ["local reparameterization"] * 2, "epoch": [1, 2],
                                                                              "var_top": [7.8e3, 1.2e3], "var_bottom": [190.0, 110.0], "seconds_per_estimate": [0.01, 0.01]}))
    _fails_naming("local_reparam_variance.py", ["--quick", "--checkpoint", checkpoint, "--results-dir", tmp_path / "results"], measured, monkeypatch, capsys)


@pytest.mark.parametrize("script", ["uci_rdp_table.py", "uci_esbo_table.py"])
def test_table_builders_refuse_a_truncated_runs_csv(script, tmp_path, monkeypatch, capsys):
    runs = cut_mid_row(tmp_path / "runs.csv", UCI_ROWS.assign(method="rdp" if script == "uci_rdp_table.py" else "iwae"))
    extra = ["--no-run", "--methods", "iwae", "--datasets", "bostonHousing"] if script == "uci_esbo_table.py" else []
    _fails_naming(script, ["--runs", runs, *extra, "--results-dir", tmp_path / "results"], runs, monkeypatch, capsys)
    assert not (tmp_path / "results").exists()


def test_vae_dsivi_prior_refuses_a_truncated_cached_result(tmp_path):
    """A finished run's result JSON (read back instead of evaluating again) cut short."""
    module = _load("vae_dsivi_prior.py")
    args = SimpleNamespace(settings_tag="", prior_points=None, checkpoint_dir=tmp_path, epochs=1, ll_samples=20)
    done = tmp_path / "normal_K0_seed0_epochs1_ll20_n5.json"
    done.write_text('{"prior": "normal", "K": 0, "seed": 0, "test_ll": -9')
    with pytest.raises(ValueError, match="normal_K0_seed0_epochs1_ll20_n5.json is not a complete result"):
        module.run_one("normal", 0, 0, args, (None, None, [0] * 5), "cpu")
