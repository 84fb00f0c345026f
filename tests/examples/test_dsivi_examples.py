"""Smoke runs (``--quick``) of the DSIVI examples and benchmark."""

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(relative):
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _data_dir_or_skip(name):
    from recipes.paths import default_data_dir

    try:
        root = default_data_dir()
    except FileNotFoundError:
        pytest.skip("no shared data directory")
    if not (root / name).exists():
        pytest.skip(f"{name} data not available")
    return root


def test_dsivi_toy_quick(tmp_path):
    runs = load("examples/dsivi_toy.py").main(["--quick", "--no-progress", "--results-dir", str(tmp_path)])
    for suffix in (".csv", ".md", ".png", "_runs.csv"):
        assert (tmp_path / f"dsivi_toy_quick{suffix}").exists()
    assert set(runs["method"]) == {"MC KL", "DSIVI K=1", "DSIVI K=10"}
    assert (runs["kl"] > -4 * runs["kl_mc_se"]).all() and runs["kl"].map(math.isfinite).all()
    assert "QUICK" in (tmp_path / "dsivi_toy_quick.md").read_text()


def test_dsivi_hierarchical_bnn_quick(tmp_path):
    data_dir = _data_dir_or_skip("uci")
    runs = load("examples/dsivi_hierarchical_bnn.py").main(["--quick", "--no-progress", "--data-dir", str(data_dir), "--results-dir", str(tmp_path)])
    stem = "dsivi_hierarchical_bnn_concrete_quick"
    for suffix in (".csv", ".md", ".png", "_runs.csv"):
        assert (tmp_path / f"{stem}{suffix}").exists()
    assert list(runs["method"]) == ["joint", "marginal", "marginal+SI"]
    for column in ("elbo_dsivi_lower", "elbo_dsivi_upper", "rmse", "test_ll"):
        assert runs[column].map(math.isfinite).all(), column
    joint = runs[runs.method == "joint"].iloc[0]
    assert joint["elbo_joint"] < joint["elbo_exact"]  # the joint bound is the looser one (Eq. 18 vs 19)


def test_vae_dsivi_prior_quick(tmp_path):
    data_dir = _data_dir_or_skip("MNIST")
    example = load("examples/vae_dsivi_prior.py")
    out = tmp_path / "runs.csv"
    argv = ["--quick", "--no-progress", "--data-dir", str(data_dir), "--results-dir", str(tmp_path), "--checkpoint-dir", str(tmp_path / "ckpt"), "--out", str(out)]
    first = example.main(argv)
    table = pd.read_csv(out)
    assert list(table.columns) == ["prior", "K", "seed", "test_ll", "epochs"]
    assert set(table["prior"]) == {"normal", "vamp", "dsivi"} and table["test_ll"].map(math.isfinite).all()
    text = (tmp_path / "vae_dsivi_prior_quick.md").read_text()
    assert "published" in text and "-82.38" in text
    gaps = first.loc[first.prior == "dsivi", [c for c in first.columns if c.startswith("prior_term_gap_K")]]
    assert set(gaps.columns) == {f"prior_term_gap_K{k}" for k in (20, *example.THESIS_KS)}
    assert gaps.map(math.isfinite).all().all()
    again = example.main(argv)  # finished runs are read back, not retrained
    assert list(again["test_ll"]) == list(first["test_ll"])


def test_dsivi_cost_benchmark_quick():
    times = load("benchmarks/dsivi_cost.py").main(["--quick"])
    assert all(t > 0 and math.isfinite(t) for t in times.values())
