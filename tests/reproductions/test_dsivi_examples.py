"""Smoke runs (``--quick``) of the DSIVI examples and benchmark."""

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

import zoo_protocols.vae_priors
from pyrozoo.distributions import PriorComponentCache
from pyrozoo.distributions.semi_implicit import current_settings
from pyrozoo.models import VAE, AggregatedPosteriorPrior
from zoo_protocols.vae_priors import THESIS_KS, declared

ROOT = Path(__file__).resolve().parents[2]


def load(relative):
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _data_dir_or_skip(name):
    from zoo_protocols.paths import default_data_dir

    try:
        root = default_data_dir()
    except FileNotFoundError:
        pytest.skip("no shared data directory")
    if not (root / name).exists():
        pytest.skip(f"{name} data not available")
    return root


def test_dsivi_toy_quick(tmp_path):
    runs = load("reproductions/dsivi_toy.py").main(["--quick", "--no-progress", "--results-dir", str(tmp_path)])
    for suffix in (".csv", ".md", ".png", "_runs.csv"):
        assert (tmp_path / f"dsivi_toy_quick{suffix}").exists()
    assert set(runs["method"]) == {"MC KL", "DSIVI K=1", "DSIVI K=10"}
    assert (runs["kl"] > -4 * runs["kl_mc_se"]).all() and runs["kl"].map(math.isfinite).all()
    assert "QUICK" in (tmp_path / "dsivi_toy_quick.md").read_text()


def test_dsivi_hierarchical_bnn_quick(tmp_path):
    data_dir = _data_dir_or_skip("uci")
    runs = load("reproductions/dsivi_hierarchical_bnn.py").main(["--quick", "--no-progress", "--data-dir", str(data_dir), "--results-dir", str(tmp_path)])
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
    example = load("reproductions/vae_dsivi_prior.py")
    out = tmp_path / "runs.csv"
    argv = ["--quick", "--no-progress", "--data-dir", str(data_dir), "--results-dir", str(tmp_path), "--checkpoint-dir", str(tmp_path / "ckpt"), "--out", str(out)]
    first = example.main(argv)
    table = pd.read_csv(out)
    assert list(table.columns) == ["prior", "K", "seed", "test_ll", "epochs"]
    assert set(table["prior"]) == {"normal", "vamp", "dsivi"} and table["test_ll"].map(math.isfinite).all()
    text = (tmp_path / "vae_dsivi_prior_quick.md").read_text()
    assert "published" in text and "-82.38" in text
    gaps = first.loc[first.prior == "dsivi", [c for c in first.columns if c.startswith("prior_term_gap_K")]]
    assert set(gaps.columns) == {f"prior_term_gap_K{k}" for k in (20, *THESIS_KS)}
    assert gaps.map(math.isfinite).all().all()
    again = example.main(argv)  # finished runs are read back, not retrained
    assert list(again["test_ll"]) == list(first["test_ll"])


#: the prior-cache refresh intervals a cached run of the VAE example is checked with (None: uncached)
REFRESH_CASES = [None, 2]


@pytest.mark.parametrize("refresh", REFRESH_CASES)
def test_vae_dsivi_prior_cache_trains_only(refresh, tmp_path, monkeypatch):
    """--prior-refresh-every R reaches the training objective of the dsivi run (a cache that
    encodes K/R points per step after the first), and nothing else: the reported evaluation
    calls the same functions with the same arguments as an uncached run, and no cache serves
    it any component."""
    data_dir = _data_dir_or_skip("MNIST")
    example = load("reproductions/vae_dsivi_prior.py")
    phase, objectives, draws, evaluations = ["train"], [], [], []
    real_fit, real_draws = zoo_protocols.vae_priors.fit, PriorComponentCache.draws
    real_ll, real_gap = VAE.log_likelihood, AggregatedPosteriorPrior.estimate_gap

    def fit(*args, objective, **kwargs):
        objectives.append(objective)
        history = real_fit(*args, objective=objective, **kwargs)
        phase[0] = "evaluate"
        return history

    def spy_draws(cache, *args, **kwargs):
        draws.append(phase[0])
        return real_draws(cache, *args, **kwargs)

    def log_likelihood(model, guide, x, num_samples, **kwargs):
        evaluations.append(("log_likelihood", num_samples, kwargs, current_settings().component_cache))
        return real_ll(model, guide, x, num_samples, **kwargs)

    def estimate_gap(prior, z, k, **kwargs):
        evaluations.append(("estimate_gap", k, kwargs, current_settings().component_cache))
        return real_gap(prior, z, k, **kwargs)

    monkeypatch.setattr(zoo_protocols.vae_priors, "fit", fit)
    monkeypatch.setattr(PriorComponentCache, "draws", spy_draws)
    monkeypatch.setattr(VAE, "log_likelihood", log_likelihood)
    monkeypatch.setattr(AggregatedPosteriorPrior, "estimate_gap", estimate_gap)
    argv = ["--quick", "--no-progress", "--priors", "dsivi", "--data-dir", str(data_dir), "--results-dir", str(tmp_path), "--checkpoint-dir", str(tmp_path / "ckpt")]
    df = example.main(argv + ([] if refresh is None else ["--prior-refresh-every", str(refresh)]))
    K, steps = 20, 6  # --quick: K capped at 20, one epoch of 600 images in batches of 100
    (objective,) = objectives
    assert len(df) == 1 and df.test_ll.map(math.isfinite).all()
    (done,) = (tmp_path / "ckpt").glob("*.json")
    if refresh is None:
        assert objective.prior_cache is None and draws == []
        assert "prior_refresh_every" not in df.columns and done.name.startswith(f"dsivi_K{K}_seed0")
    else:
        cache = objective.prior_cache
        assert cache.refresh_every == refresh and set(draws) == {"train"}
        # the first evaluation encodes all K, every later step (a parameter change) K/R of them
        assert cache.drawn == K + (steps - 1) * K // refresh
        assert list(df.prior_refresh_every) == [refresh] and done.name.startswith(f"dsivi_K{K}_R{refresh}_seed0")
    # quick: 20 importance samples, a 50-point prior mixture; gaps at the run's K and the thesis' Ks
    expected = [("log_likelihood", 20, {"prior_points": 50}, None)] + [("estimate_gap", k, {}, None) for k in sorted({K, *THESIS_KS})]
    assert evaluations == expected


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "eight"])
def test_vae_dsivi_prior_refresh_every_must_be_a_positive_int(value, capsys):
    with pytest.raises(SystemExit):
        load("reproductions/vae_dsivi_prior.py").main(["--quick", "--prior-refresh-every", value])
    assert "--prior-refresh-every" in capsys.readouterr().err


@pytest.mark.parametrize("prior", ["normal", "vamp"])
def test_prior_refresh_every_is_refused_for_the_explicit_priors(prior):
    with pytest.raises(ValueError, match=f"applies to the dsivi prior.*not to '{prior}'"):
        declared(prior, 10, 0, prior_refresh_every=4)


def test_dsivi_cost_benchmark_quick():
    """The benchmark returns, per candidate (named as it prints them), one step-time ratio to
    the plain ELBO per repeat: the uncached bound, the cached one at each refresh_every, and
    the two references."""
    benchmark = load("benchmarks/dsivi_cost.py")
    ratios = benchmark.main(["--quick", "--refresh", "1", "8"])
    assert list(ratios) == [
        benchmark.BASE,
        "DSIVI K2=5000 uncached (before)",
        "DSIVI K2=5000 cached, refresh_every=1",
        "DSIVI K2=5000 cached, refresh_every=8",
        "DSIVI K2=500 uncached",
        "DSIVI K2=5000, components precomputed",
    ]
    assert all(len(r) == 1 for r in ratios.values())  # --quick: one repeat
    assert ratios[benchmark.BASE] == [1.0]  # each repeat's ratios are to its own plain-ELBO time
    assert all(r > 0 and math.isfinite(r) for rs in ratios.values() for r in rs)


def test_hierarchical_bnn_runs_do_not_depend_on_how_often_the_curve_is_measured(tmp_path):
    # a curve point reseeded the global streams, so training drew the same noise after each one
    data_dir = _data_dir_or_skip("uci")
    example = load("reproductions/dsivi_hierarchical_bnn.py")
    runs = [example.main(["--quick", "--no-progress", "--methods", "joint,marginal", "--curve-every", every, "--data-dir", str(data_dir),
                          "--results-dir", str(tmp_path / every)]) for every in ("1", "3")]
    scores = [r.drop(columns="train_seconds") for r in runs]
    pd.testing.assert_frame_equal(*scores)
