"""``benchmarks/epoch_time.py``: every protocol's cases build the recipe's step and time it, and
the table's projected epoch is the steps' time plus the per-epoch work."""

import math
import runpy

import pytest

from tests.runner import ROOT

#: (options, the cases of the table in order) at the smoke settings; one LeNet-5 method per run
RUNS = [
    *[(["--protocols", "lenet5", "--lenet-methods", m], ["deterministic", m]) for m in ("sparse-vd", "bc-gnj", "bc-ghs", "rdp")],
    (["--protocols", "cnn"], ["deterministic", "sghmc", "sghmc-sa"]),
    (["--protocols", "vae"], ["deterministic", "normal", "vamp K=5", "dsivi K2=20 (uncached, before)", "dsivi K2=20 refresh_every=1", "dsivi K2=20 refresh_every=8"]),
]


@pytest.fixture(scope="module")
def benchmark():
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        yield runpy.run_path(str(ROOT / "benchmarks" / "epoch_time.py"), run_name="epoch_time")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.parametrize("options,cases", RUNS, ids=[cases[-1] if "lenet5" in o else o[1] for o, cases in RUNS])
def test_epoch_time_smoke(benchmark, options, cases):
    rows = benchmark["main"](["--smoke", *options])
    assert [r["case"] for r in rows] == cases
    base = rows[0]
    assert base["ratio"] == 1.0 and base["per_epoch_work_s"] == 0.0
    # the projected epoch: its steps plus the per-epoch work
    for r in rows:
        assert r["ms_per_step"] > 0 and math.isfinite(r["ms_per_step"])
        assert r["steps_per_epoch"] == rows[0]["steps_per_epoch"] > 1
        assert r["epoch_s"] == pytest.approx(r["steps_per_epoch"] * r["ms_per_step"] / 1e3 + r["per_epoch_work_s"], rel=1e-12)
        assert r["ratio"] == pytest.approx(r["epoch_s"] / base["epoch_s"], rel=1e-12)
    # every case but the baseline writes its checkpoint each epoch
    assert all(r["per_epoch_work_s"] > 0 and "checkpoint" in r["work"] for r in rows[1:])
