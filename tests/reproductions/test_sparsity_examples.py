"""Smoke runs (--quick) of the sparsity and compression examples: compress_lenet.py,
variance_networks.py and fgsm_robustness.py run end to end on MNIST and write their tables."""

import runpy

import pandas as pd
import pytest

from zoo_protocols.lenet import CSV_COLUMNS
from tests.runner import ROOT, run_example


@pytest.mark.parametrize("method,arch", [("sparse-vd", "lenet300"), ("bc-gnj", "lenet5"), ("bc-ghs", "lenet300")])
def test_compress_lenet_quick(method, arch, tmp_path, monkeypatch):
    out = tmp_path / "runs.csv"
    run_example("compress_lenet.py", "--method", method, "--arch", arch, "--quick", "--no-progress", "--results-dir", tmp_path, "--out", out, monkeypatch=monkeypatch)
    runs = pd.read_csv(out)
    assert list(runs.columns) == CSV_COLUMNS
    row = runs.iloc[0]
    assert (row.method, row.arch, row.dataset) == (method, arch, "mnist")
    assert 0 <= row.test_error <= 100 and 0 < row.params_kept <= row.params_total
    assert row.compression_ratio == pytest.approx(row.params_total / row.params_kept)
    table = pd.read_csv(tmp_path / f"compress_lenet_{method}_{arch}.csv")
    assert set(table.source.str.split(":").str[0]) >= {"measured (this repository)"}
    assert table.source.str.startswith("published").any()
    if method.startswith("bc-"):
        # 1 + exponent + t_l bits per stored weight: the ratio with bits lies between the
        # pruning ratio scaled by 32 bits over the widest and the narrowest layer format
        details = pd.read_csv(out.with_name(out.stem + "_details.csv")).iloc[0]
        bits = [int(b) for b in str(details.bits).split("-")]
        widths = [1 + int(details.exponent_bits) + b for b in bits]
        ratio = details.compression_with_bits / row.compression_ratio
        assert 32 / max(widths) * (1 - 1e-9) <= ratio <= 32 / min(widths) * (1 + 1e-9)
        assert 0 <= details.test_error_quantized <= 100
    # the summary mode rebuilds the table from run CSVs
    run_example("compress_lenet.py", "--summarize", out, "--table-stem", "summary", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert (tmp_path / "summary.md").read_text().count("measured (this repository)") == 1


def test_compress_lenet_checkpoints_and_resumes(tmp_path, monkeypatch, capsys):
    """With --checkpoint-dir every run keeps a per-epoch checkpoint (a rerun evaluates the finished
    one instead of training again), and --resume keeps the finished rows and skips their runs."""
    out, ckpt = tmp_path / "runs.csv", tmp_path / "ckpt"
    args = ["--method", "sparse-vd", "--arch", "lenet300", "--quick", "--no-progress", "--results-dir", tmp_path, "--out", out, "--checkpoint-dir", ckpt]
    run_example("compress_lenet.py", *args, monkeypatch=monkeypatch)
    first = pd.read_csv(out)
    saved = list(ckpt.glob("sparse-vd_lenet300_seed0_*.pt"))
    assert len(saved) == 1
    stamp = saved[0].stat().st_mtime_ns
    run_example("compress_lenet.py", *args, monkeypatch=monkeypatch)  # finished checkpoint: evaluated, not retrained
    assert saved[0].stat().st_mtime_ns == stamp
    pd.testing.assert_frame_equal(pd.read_csv(out), first)
    capsys.readouterr()
    run_example("compress_lenet.py", *args, "--seeds", "0-1", "--resume", monkeypatch=monkeypatch)
    runs = pd.read_csv(out)
    assert list(runs.seed) == [0, 1] and "seed 0" not in capsys.readouterr().out  # seed 0 was not run again
    pd.testing.assert_frame_equal(runs.iloc[:1], first)


def test_compress_lenet_rejects_unknown_names(tmp_path, monkeypatch):
    with pytest.raises(SystemExit):
        run_example("compress_lenet.py", "--method", "nope", "--quick", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    with pytest.raises(SystemExit):
        run_example("compress_lenet.py", "--arch", "vgg", "--quick", "--results-dir", tmp_path, monkeypatch=monkeypatch)


def test_variance_networks_quick(tmp_path, monkeypatch):
    run_example("variance_networks.py", "--quick", "--arch", "lenet300", "--parameterizations", "layer,zero-mean", "--track-every", "1", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "variance_networks.csv")
    measured = table[table.source.str.startswith("measured")]
    assert list(measured.parameterization) == ["layer", "zero-mean"]
    assert (measured.elbo - (measured.data_term - measured.kl)).abs().max() < 1e-6 * measured.elbo.abs().max()
    assert measured.set_index("parameterization").kl["zero-mean"] == 0.0
    assert table.source.str.startswith("published").sum() == 2
    trajectory = pd.read_csv(tmp_path / "variance_networks_trajectory.csv")
    assert list(trajectory.parameterization) == ["layer", "zero-mean"] and list(trajectory.epoch) == [1, 1]
    assert (tmp_path / "variance_networks_trajectory.png").exists()


def test_fgsm_robustness_quick(tmp_path, monkeypatch):
    run_example("fgsm_robustness.py", "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "fgsm_robustness.csv")
    assert list(table.epsilon) == [0.0, 0.02, 0.05]
    assert table.shape[1] == 5 and ((table.drop(columns="epsilon") >= 0) & (table.drop(columns="epsilon") <= 1)).all().all()
    assert (tmp_path / "fgsm_robustness.png").exists()


def test_step_overhead_benchmark_runs_the_sparsity_cases(monkeypatch):
    """The benchmark's Sparse VD and Bayesian-compression cases build and time the step of ``fit``."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    namespace = runpy.run_path(str(ROOT / "benchmarks" / "step_overhead.py"), run_name="step_overhead")
    rows = namespace["main"](["--arch", "lenet300", "--batch-size", "16", "--cases", "sparse-vd-lrt,bc-gnj-lrt,bc-ghs-lrt", "--rounds", "1", "--steps", "1"])
    assert [r["case"] for r in rows] == ["deterministic", "sparse-vd-lrt", "bc-gnj-lrt", "bc-ghs-lrt"]
    assert all(r["ms_per_step"] > 0 and r["ratio"] > 0 for r in rows)


@pytest.mark.parametrize("arch", ["lenet300", "lenet5"])
def test_step_overhead_benchmark_times_the_floor_and_the_plain_pytorch_step(arch, monkeypatch):
    """The reference cases wrap every linear and convolutional layer: the floor doubles the
    parameters; both time a step on a fully connected and a convolutional network."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    namespace = runpy.run_path(str(ROOT / "benchmarks" / "step_overhead.py"), run_name="step_overhead")
    net = namespace["ARCHS"][arch][0]()
    floor = namespace["_with_two_passes"](namespace["ARCHS"][arch][0]())
    assert sum(p.numel() for p in floor.parameters()) == 2 * sum(p.numel() for p in net.parameters())
    rows = namespace["main"](["--arch", arch, "--batch-size", "8", "--cases", "floor (two products per layer),plain-pytorch-lrt", "--rounds", "1", "--steps", "1"])
    assert [r["case"] for r in rows] == ["deterministic", "floor (two products per layer)", "plain-pytorch-lrt"]
    assert all(r["ms_per_step"] > 0 for r in rows)
