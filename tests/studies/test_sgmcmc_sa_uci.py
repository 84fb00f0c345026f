"""studies/sgmcmc_sa_uci.py: the quick run writes a finite table with a verdict, the
script's run is the recipe's, pyrozoo's SA step equals an independent one written from the
paper's equations, and the verdict follows the numbers."""

import math
import re

import numpy as np
import pandas as pd
import pytest
from scipy import optimize

from tests.runner import STUDIES, quick_study, script_globals

SCRIPT = STUDIES / "sgmcmc_sa_uci.py"


@pytest.fixture(scope="module")
def script():
    return script_globals(SCRIPT)


def test_quick_run_writes_a_finite_table_with_a_verdict_and_provenance(tmp_path, monkeypatch, script):
    table, text = quick_study(SCRIPT, tmp_path, monkeypatch=monkeypatch)
    runs = pd.read_csv(tmp_path / "sgmcmc_sa_uci_runs.csv")
    assert list(table.variant) == list(script["VARIANTS"])
    assert len(runs) == 2 * len(script["VARIANTS"])
    assert table[["rmse", "rmse_last", "test_ll", "rmse_minus_a_sghmc"]].map(math.isfinite).all().all()
    sa = runs[runs.variant != "a-sghmc"].dropna(subset=["spike_fraction"])
    ssgl_variants = [name for name, (decl, _, _) in script["VARIANTS"].items() if decl == "sghmc-sa"]
    assert len(sa) == 2 * len(ssgl_variants) >= 2 * 7  # every SSGL variant records its SA state
    assert sa.spike_fraction.between(0, 1).all() and (sa.sigma > 0).all()
    assert (runs[runs.variant == "sa-off"].sigma == 1.0).all()  # omega = 0: sigma stays at its start
    assert "Verdict:" in text and "Provenance:" in text


def test_the_scripts_run_is_the_recipes_run(script):
    """Same split, seed and settings: the script's run_variant reproduces zoo_protocols.uci.run_split."""
    from pyrozoo.data import UCIDataset
    from zoo_protocols.cli import data_dir_default
    from zoo_protocols.config import RunConfig
    from zoo_protocols.uci import run_split

    split = UCIDataset("bostonHousing", data_dir_default()).split(0)
    split = split.to(RunConfig().device, RunConfig().dtype)
    config = RunConfig(epochs=1, num_samples=100, quick=True)
    for name in ("a-sghmc", "a-sghmc-sa"):
        ours = script["run_variant"](name, split, 5e-6, config)
        recipe = run_split(name, split, RunConfig(epochs=1, num_samples=100, quick=True, lr=5e-6))
        assert ours["rmse"] == recipe["rmse"] and ours["test_ll"] == recipe["test_ll"]


@pytest.mark.parametrize("regression", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sa_step_equals_the_independent_one(script, seed, regression):
    # float32 state against float64 numpy: agreement to float32 rounding of O(1) values
    assert script["sa_step_discrepancy"](seed, regression=regression) <= script["SA_TOLERANCE"]


def test_the_reference_sigma_maximises_q1(script):
    """The reference's Eq. 14 root (omega = 1) is the maximiser of Q_1 over sigma (Eq. 10)."""
    rng = np.random.default_rng(0)
    betas = {"w": rng.normal(0, 0.4, size=(5, 3))}
    theta = {"rho": {"w": rng.uniform(size=(5, 3))}, "kappa0": {"w": rng.uniform(0, 5, (5, 3))}, "kappa1": {"w": rng.uniform(0, 0.1, (5, 3))},
             "delta": {"w": 0.3}, "sigma": 0.7}
    out = script["reference_sa_step"](betas, theta, 1.0, v0=0.1, v1=10.0, a=1.0, b=10.0, nu=1.0, lam=1.0, residual=40.0, num_observations=100.0)
    beta = betas["w"]
    r_b, j, p = (out["kappa0"]["w"] * np.abs(beta)).sum(), (out["kappa1"]["w"] * beta ** 2).sum(), beta.size

    def minus_q1(sigma):
        return (100.0 + p + 1.0 + 2.0) / 2 * math.log(sigma ** 2) + r_b / sigma + (40.0 + j + 1.0) / (2 * sigma ** 2)

    best = optimize.minimize_scalar(minus_q1, bounds=(1e-3, 10.0), method="bounded", options={"xatol": 1e-10})
    assert out["sigma"] == pytest.approx(best.x, rel=1e-6)


#: (name, gap of the recipe's A-SGHMC-SA, {variant: its gap}, gap of the last iterates, SA discrepancy, verdict head, the change named as closing)
VERDICT_CASES = [
    ("setting", 0.6, {"sa-raw-scale-prior": 0.0}, 0.6, 1e-7, "SETTING, NOT A BUG", "sa-raw-scale-prior"),
    ("readout", 0.6, {}, -0.3, 1e-7, "SETTING, NOT A BUG", "last-iterate readout"),
    ("undecided", 0.6, {"sa-raw-scale-prior": 0.55}, 0.6, 1e-7, "UNDECIDED", None),
    # A-SGHMC at SA's rate matching A-SGHMC is no explanation of SA's gap
    ("rate-alone-is-no-explanation", 0.6, {"a-sghmc-lr-of-sa": 0.0}, 0.6, 1e-7, "UNDECIDED", None),
    ("no-gap", 0.0, {}, 0.0, 1e-7, "NO GAP IN THIS SETTING", None),
    ("bug", 0.6, {"sa-raw-scale-prior": 0.0}, 0.6, 1e-2, "BUG SUSPECTED", None),
]


def synthetic_runs(script, gap, gaps, last_gap):
    noise = np.array([0.05, -0.04, 0.02, -0.03, 0.0])  # split-to-split noise of the differences
    base = np.array([2.4, 2.6, 3.1, 2.2, 4.0])
    shift = {v: gap for v in script["VARIANTS"]}
    shift.update({"a-sghmc": 0.0, **gaps})
    rows = []
    for v, d in shift.items():
        for k in range(5):
            jitter = noise[k] if v != "a-sghmc" else 0.0
            rmse = base[k] + d + jitter
            rmse_last = base[k] + (last_gap if v == "a-sghmc-sa" else d) + jitter
            rows.append({"variant": v, "split": k, "lr": 1e-5, "rmse": rmse, "rmse_last": rmse_last, "test_ll": -2.5, "status": "ok",
                         "spike_fraction": 0.9, "rho_mean": 0.1, "sigma": 0.3, "delta_mean": 0.1, "small_weight_fraction": 0.8})
    return rows


@pytest.mark.parametrize("name, gap, gaps, last_gap, discrepancy, head, named", VERDICT_CASES, ids=[c[0] for c in VERDICT_CASES])
def test_the_verdict_follows_synthetic_numbers(script, name, gap, gaps, last_gap, discrepancy, head, named):
    summary = script["summarise"](pd.DataFrame(synthetic_runs(script, gap, gaps, last_gap)))
    text = script["verdict"](summary, discrepancy)
    assert text.startswith(head)
    first = text.split(". ")[0]
    for variant in list(script["VARIANTS"]) + ["last-iterate readout"]:
        assert (variant in first) == (variant == named)


def test_a_variant_that_diverged_is_named_and_closes_nothing(script):
    """The "setting" case, but the closing variant diverged on a sixth split: its mean is over
    the five valid runs, the verdict names the divergence and does not credit it."""
    rows = synthetic_runs(script, 0.6, {"sa-raw-scale-prior": 0.0}, 0.6)
    rows.append({"variant": "sa-raw-scale-prior", "split": 5, "lr": 1e-5, "status": "diverged"})
    summary = script["summarise"](pd.DataFrame(rows)).set_index("variant")
    assert summary.loc["sa-raw-scale-prior", "diverged"] == 1 and summary.loc["sa-raw-scale-prior", "splits"] == 5
    assert math.isfinite(summary.loc["sa-raw-scale-prior", "rmse"]) and summary.loc["a-sghmc-sa", "diverged"] == 0
    text = script["verdict"](summary.reset_index(), 1e-7)
    assert text.startswith("UNDECIDED") and re.search(r"sa-raw-scale-prior [+-]0\.0\d\d \+- [\d.]+ \([^)]*\), DIVERGED on 1 split\(s\)", text)
