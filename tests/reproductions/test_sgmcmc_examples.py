"""Smoke runs (--quick) of the SG-MCMC-SA example scripts: they run end to end and write
their tables and figures where asked."""

import math

import pandas as pd
import pytest
import torch

from tests.runner import run_example


def test_sparse_regression_quick(tmp_path, monkeypatch):
    run_example("sparse_regression.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "sparse_regression_quick.csv")
    assert list(runs.columns) == ["method", "v0", "sigma", "seed", "mae", "mse"]
    assert sorted(runs.method) == ["sgld", "sgld-em", "sgld-sa"] and runs[["mae", "mse"]].notna().all().all()
    table = pd.read_csv(tmp_path / "sparse_regression_quick_table.csv")
    assert {"published_mae", "published_mse"} <= set(table.columns)
    assert (tmp_path / "sparse_regression_quick_posteriors.png").stat().st_size > 0
    # the latent variables' paths of the SA and EM runs (plain SGLD has none), their plot, and
    # the table's count of runs that ended with no weight expected in the slab
    paths = pd.read_csv(tmp_path / "sparse_regression_quick_trajectories.csv")
    assert list(paths.columns) == ["method", "v0", "sigma", "seed", "step", "sigma_k", "rho_mean", "delta_k"]
    assert set(paths.method) == {"sgld-sa", "sgld-em"} and (paths.sigma_k > 0).all() and paths.delta_k.between(0, 1).all()
    assert (tmp_path / "sparse_regression_quick_trajectories.png").stat().st_size > 0
    ends = paths.sort_values("step").groupby("method").tail(1).set_index("method")
    counts = table.set_index("method").spike_only_runs
    assert counts.isna()["sgld"]
    slab = table.set_index("method").slab_weights
    assert slab.isna()["sgld"]
    for method in ("sgld-sa", "sgld-em"):
        assert counts[method] == int(ends.rho_mean[method] * 1000 < 0.5)
        assert slab[method] == pytest.approx(ends.rho_mean[method] * 1000)
    # a second call finds every run in the CSV and does not repeat it
    run_example("sparse_regression.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert len(pd.read_csv(tmp_path / "sparse_regression_quick.csv")) == 3


def test_sparse_regression_authors_script_recipe_writes_its_own_table(tmp_path, monkeypatch):
    run_example("sparse_regression.py", "--quick", "--recipe", "authors-script", "--method", "sgld-sa", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert len(pd.read_csv(tmp_path / "sparse_regression_authors_script_quick.csv")) == 1
    notes = (tmp_path / "sparse_regression_authors_script_quick_table.md").read_text()
    assert "full-batch gradients" in notes and "omega = 0.1" in notes
    assert not (tmp_path / "sparse_regression_quick.csv").exists()


def test_sparse_regression_keeps_each_configuration_in_its_own_files(tmp_path, monkeypatch):
    # a finished run is skipped only when the CSV holds runs of the same configuration: a longer
    # or differently thinned sweep must not reuse (and relabel) the shorter one's rows
    common = ("--method", "sgld-sa", "--v0", "0.1", "--sigma", "1", "--seeds", "0", "--no-progress", "--results-dir", tmp_path)
    run_example("sparse_regression.py", "--iterations", "300", "--thin", "10", *common, monkeypatch=monkeypatch)
    run_example("sparse_regression.py", "--iterations", "400", "--thin", "10", *common, monkeypatch=monkeypatch)
    run_example("sparse_regression.py", "--iterations", "2000", "--thin", "100", *common, monkeypatch=monkeypatch)
    short, longer = pd.read_csv(tmp_path / "sparse_regression_300it_thin10.csv"), pd.read_csv(tmp_path / "sparse_regression_400it_thin10.csv")
    default_thin = pd.read_csv(tmp_path / "sparse_regression_2k.csv")
    assert len(short) == len(longer) == len(default_thin) == 1
    assert short.mae[0] != longer.mae[0]
    assert "400 SGLD iterations" in (tmp_path / "sparse_regression_400it_thin10_table.md").read_text()


def test_sparse_regression_rejects_bad_options(tmp_path, monkeypatch):
    for args in (["--method", "nuts"], ["--v0", "-1"], ["--iterations", "10", "--thin", "100"], ["--recipe", "rmd"], ["--batch-size", "101"]):
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
    # a second protocol on the finished runs: their checkpoints give the same predictive, no new run row
    run_example("classify_cnn.py", "--quick", "--method", "adam,sghmc-sa", "--fgsm", "--fgsm-protocol", "posterior,authors", "--no-progress",
                "--results-dir", tmp_path, "--run-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    assert pd.read_csv(tmp_path / "classify_cnn_quick.csv").accuracy.tolist() == runs.accuracy.tolist()
    curves = pd.read_csv(tmp_path / "classify_cnn_quick_fgsm.csv")
    assert sorted(curves.groupby(["method", "protocol"]).size().items()) == [(("adam", "authors"), 6), (("adam", "posterior"), 6), (("sghmc-sa", "authors"), 6), (("sghmc-sa", "posterior"), 6)]
    # the clean accuracy (epsilon 0) of a point estimate is the same under both protocols
    clean = curves[(curves.epsilon == 0) & (curves.method == "adam")]
    assert clean.accuracy.nunique() == 1


def test_classify_cnn_names_runs_and_curves_by_their_settings(tmp_path, monkeypatch):
    """A run with other training settings gets its own directory and result files, and FGSM
    curves written before the CSV recorded their run take that run's settings."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "reproductions"))
    sys.modules.pop("classify_cnn", None)
    import classify_cnn

    default = classify_cnn.parse_args(["--method", "sghmc"])
    other = classify_cnn.parse_args(["--method", "sghmc", "--tau", "500"])
    assert default.settings_tag == "" and other.settings_tag.startswith("_")
    assert classify_cnn.run_dir_name("sghmc", default) != classify_cnn.run_dir_name("sghmc", other)
    assert classify_cnn.run_dir_name("sghmc", default) != classify_cnn.run_dir_name("sghmc", classify_cnn.parse_args(["--method", "sghmc", "--thin", "50"]))
    with pytest.raises(SystemExit):
        classify_cnn.parse_args(["--fgsm-protocol", "posterior,pgd"])

    rows = [{"method": "sghmc", "dataset": "mnist", "seed": 0, "epochs": 100, "thin": 500, "burn_in": 0.3},
            {"method": "adam", "dataset": "mnist", "seed": 0, "epochs": 100, "thin": float("nan"), "burn_in": float("nan")}]
    legacy = tmp_path / "legacy_fgsm.csv"
    pd.DataFrame({"method": ["sghmc", "adam"], "dataset": "mnist", "seed": 0, "epsilon": 0.1, "accuracy": [0.7, 0.5]}).to_csv(legacy, index=False)
    curves = pd.DataFrame(classify_cnn.read_fgsm_rows(legacy, rows))
    assert list(curves.columns) == classify_cnn.FGSM_COLUMNS and (curves.protocol == "posterior").all()
    assert curves.epochs.tolist() == [100, 100] and curves.thin.iloc[0] == 500 and math.isnan(curves.thin.iloc[1])
    with pytest.raises(ValueError, match="move it aside"):
        classify_cnn.read_fgsm_rows(legacy, rows + [{**rows[0], "epochs": 10}])


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


def test_classify_cnn_runs_with_an_absolute_burn_in_can_be_extended(monkeypatch):
    """With --burn-in-epochs a sampler run's directory (its checkpoint, streamed samples and
    online average) does not depend on --epochs, so a larger --epochs resumes that chain."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "reproductions"))
    sys.modules.pop("classify_cnn", None)
    import classify_cnn

    from zoo_protocols import cnn

    def settings(*argv):
        args = classify_cnn.parse_args(["--method", "sghmc-sa", "--dataset", "fashion", *argv])
        return classify_cnn.run_dir_name("sghmc-sa", args), cnn.burn_in_steps(args, 60)

    short, longer = settings("--epochs", "10", "--burn-in-epochs", "4"), settings("--epochs", "50", "--burn-in-epochs", "4")
    assert short[0] == longer[0] and short[1] == longer[1] == 240
    # a burn-in given as a fraction of the run changes with --epochs, and so does the directory
    assert settings("--epochs", "10")[0] != settings("--epochs", "50")[0]
    assert settings("--epochs", "10")[1] == 180
    with pytest.raises(SystemExit):
        classify_cnn.parse_args(["--epochs", "5", "--burn-in-epochs", "-1"])


def test_classify_cnn_leg_before_burn_in_checkpoints_without_a_row(tmp_path, monkeypatch, capsys):
    run_example("classify_cnn.py", "--quick", "--method", "sghmc", "--burn-in-epochs", "5", "--no-progress", "--results-dir", tmp_path, "--run-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    assert "run again with a larger --epochs" in capsys.readouterr().out
    assert not (tmp_path / "classify_cnn_quick.csv").exists()
    assert list((tmp_path / "runs").glob("mnist-sghmc-seed0-burnin5ep-thin2/quick/checkpoint.pt"))


def test_sgmcmc_step_benchmark_times_every_case(monkeypatch, capsys):
    import runpy

    from tests.runner import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    namespace = runpy.run_path(str(ROOT / "benchmarks" / "sgmcmc_step.py"), run_name="sgmcmc_step")
    assert namespace["main"](["--batch-size", "8", "--rounds", "1", "--steps", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    assert "channels-last" in out
    for case in ("sgd", "sghmc", "sghmc-sa", "sghmc-sa-prune", "sghmc-sa-nchw"):
        assert f"| {case} " in out


def test_uci_sgmcmc_table_quick(tmp_path, monkeypatch):
    run_example("uci_sgmcmc_table.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    tuning = pd.read_csv(tmp_path / "uci_sgmcmc_quick_lr.csv")
    runs = pd.read_csv(tmp_path / "uci_sgmcmc_quick_runs.csv")
    table = pd.read_csv(tmp_path / "uci_sgmcmc_quick_table.csv")
    methods = ["sghmc", "a-sghmc", "sghmc-em", "a-sghmc-em", "sghmc-sa", "a-sghmc-sa"]
    # two grid points per method on the validation split, then one standard split per method
    assert sorted(tuning.groupby("method").lr.nunique().items()) == sorted((m, 2) for m in methods)
    assert sorted(runs.method) == sorted(methods) and (runs.split == 0).all()
    # each method ran with the grid point of lowest validation RMSE
    best = tuning.loc[tuning.groupby("method").val_rmse.idxmin()].set_index("method").lr
    assert table.set_index("method").lr.to_dict() == best.to_dict()
    # the authors' numbers come from the packaged table, beside ours
    from zoo_protocols.uci_sgmcmc import PAPER_TABLE

    paper = pd.read_csv(PAPER_TABLE).set_index(["dataset", "method"])
    for row in table.itertuples():
        assert row.paper_rmse == paper.loc[(row.dataset, row.method), "rmse"]
        assert math.isclose(row.minus_paper, row.rmse - row.paper_rmse, rel_tol=1e-9)
    assert sorted(table["rank"]) == sorted(table.rmse.rank(method="min").astype(int))
    assert "random 90/10" in (tmp_path / "uci_sgmcmc_quick_table.md").read_text()
    assert (tmp_path / "uci_sgmcmc_quick_table.png").stat().st_size > 0
    # the table rebuilds from the files alone, to the same numbers
    (tmp_path / "uci_sgmcmc_quick_table.csv").unlink()
    run_example("uci_sgmcmc_table.py", "--quick", "--no-run", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "uci_sgmcmc_quick_table.csv"), table)


def test_uci_sgmcmc_table_learning_rate_choice_skips_diverged_runs():
    import runpy

    from tests.runner import REPRODUCTIONS

    module = runpy.run_path(str(REPRODUCTIONS / "uci_sgmcmc_table.py"))
    tuning = pd.DataFrame({
        "dataset": ["yacht"] * 3 + ["concrete"] * 2, "method": ["sghmc"] * 5,
        "lr": [1e-6, 1e-5, 1e-4, 1e-6, 1e-5], "val_rmse": [2.0, 1.0, math.nan, 6.0, 7.0], "val_test_ll": [0.0] * 5,
    })
    chosen = module["chosen_rates"](tuning, [1e-6, 1e-5, 1e-4]).set_index("dataset").lr
    assert chosen.to_dict() == {"yacht": 1e-5, "concrete": 1e-6}
    # a grid point that is not in the grid asked for does not count
    assert module["chosen_rates"](tuning, [1e-6]).set_index("dataset").lr.to_dict() == {"yacht": 1e-6, "concrete": 1e-6}
    with pytest.raises(ValueError, match="positive"):
        module["parse_grid"]("1e-5,-1")
    with pytest.raises(ValueError, match="comma-separated"):
        module["parse_grid"]("1e-5,fast")


def test_uci_sgmcmc_table_no_run_without_files_says_what_is_missing(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="uci_sgmcmc_quick_lr.csv.*run without --no-run"):
        run_example("uci_sgmcmc_table.py", "--quick", "--no-run", "--results-dir", tmp_path, monkeypatch=monkeypatch)


def test_sparse_regression_delta_prior_is_a_named_option_beyond_the_paper(tmp_path, monkeypatch):
    """``--delta-prior A,B`` (Deng et al.'s Beta(1, p) replaced): Eq. 15's update then has the
    floor (A - 1) / (A + B + p - 2) > 0 once every weight has left the slab, where the paper's
    prior gives 0 (the absorbing spike-only state); its runs get files of their own."""
    from zoo_protocols import sparse_regression as sr
    from pyrozoo.inference.sgmcmc_sa import delta_tilde

    p = 1000
    paper, remedy = sr.protocol_settings(0.1, 1.0, p, True, 0.1), sr.protocol_settings(0.1, 1.0, p, True, 0.1, (2.0, float(p)))
    assert (paper["a"], paper["b"]) == (1.0, float(p)) and (remedy["a"], remedy["b"]) == (2.0, float(p))
    empty = torch.tensor(0.0)
    assert float(delta_tilde(empty, p, paper["a"], paper["b"])) == 0.0
    assert float(delta_tilde(empty, p, remedy["a"], remedy["b"])) == pytest.approx(1.0 / (2 * p))
    run_example("sparse_regression.py", "--quick", "--no-progress", "--delta-prior", "2,1000", "--method", "sgld-sa", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert not (tmp_path / "sparse_regression_quick.csv").exists()
    runs = pd.read_csv(tmp_path / "sparse_regression_delta_prior_2_1000_quick.csv")
    assert list(runs.method) == ["sgld-sa"] and runs[["mae", "mse"]].notna().all().all()
    assert "Beta(2, 1000) prior (beyond the paper" in (tmp_path / "sparse_regression_delta_prior_2_1000_quick_table.md").read_text()

