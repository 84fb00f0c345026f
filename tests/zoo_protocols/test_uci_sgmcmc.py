"""The registered UCI SG-MCMC methods run on a standard split and report metrics in the
original target units."""

import math

import pytest
import torch

from zoo_protocols.config import RunConfig
from zoo_protocols.uci import available_methods, run_split

METHODS = ["sgld", "sghmc", "sgld-sa", "sghmc-sa", "sghmc-em", "a-sghmc", "a-sghmc-em", "a-sghmc-sa"]


def test_methods_are_registered():
    assert set(METHODS) <= set(available_methods())


@pytest.mark.parametrize("method", METHODS)
def test_quick_run_reports_original_unit_metrics(method, boston_split):
    result = run_split(method, boston_split, RunConfig(quick=True, num_samples=10))
    assert math.isfinite(result["rmse"]) and math.isfinite(result["test_ll"])
    # a model that learnt something beats predicting the training mean, in the target's units (thousands of dollars)
    baseline = float((boston_split.to_original_units(boston_split.y_test) - boston_split.y_mean).square().mean().sqrt())
    assert 0 < result["rmse"] < baseline
    assert result["samples"] == 10
    # the authors' readout too: the last draw alone, a different (noisier) prediction
    assert math.isfinite(result["rmse_last"]) and math.isfinite(result["test_ll_last"]) and result["rmse_last"] != result["rmse"]


def test_overrides_reach_the_sampler(boston_split):
    with pytest.raises(ValueError, match="step size"):
        run_split("sgld", boston_split, RunConfig(quick=True, lr=-1.0))
    result = run_split("sghmc-sa", boston_split, RunConfig(quick=True, num_samples=5, extra={"anneal": 1.003}, dtype=torch.float64))
    assert math.isfinite(result["rmse"])


@pytest.mark.parametrize("method", ["sghmc", "sghmc-em", "sghmc-sa", "a-sghmc", "a-sghmc-em", "a-sghmc-sa"])
def test_variants_reach_the_sampler(method, boston_split, monkeypatch):
    """EM steps every latent variable with omega = 1, SA with the decaying omega_k; the "a-"
    methods anneal tau from the authors' tau_0 by 1.003 per iteration, the others keep tau = 1."""
    from zoo_protocols import methods, uci_sgmcmc

    seen = {}

    class Recording(methods.SGHMC):
        def __init__(self, model, **kwargs):
            seen.update(kwargs)
            super().__init__(model, **kwargs)

    monkeypatch.setattr(methods, "SGHMC", Recording)  # the declarations build the sampler
    run_split(method, boston_split, RunConfig(quick=True, num_samples=2))
    tau = seen["inverse_temperature"]
    if method.startswith("a-"):
        tau_0 = uci_sgmcmc.PAPER_SETTINGS["bostonHousing"][0]
        assert tau(1) == pytest.approx(tau_0) and tau(101) == pytest.approx(tau_0 * 1.003**100)
    else:
        assert tau == 1.0
    adaptations = seen["adaptations"]
    if method.endswith("sghmc"):
        assert adaptations == []
    else:
        (sa,) = adaptations
        omegas = [sa.step_size(k) for k in (1, 1000)]
        assert omegas == [1.0, 1.0] if method.endswith("-em") else omegas == pytest.approx([101.0**-0.7, 1100.0**-0.7])


def test_paper_settings_come_from_the_authors_table():
    import pandas as pd

    from zoo_protocols import uci_sgmcmc

    table = pd.read_csv(uci_sgmcmc.PAPER_TABLE)
    # six methods per data set, each with its RMSE and the data set's (tau_0, v0)
    assert table.groupby("dataset").method.apply(sorted).map(tuple).nunique() == 1
    assert sorted(table.method.unique()) == sorted(["sghmc", "a-sghmc", "sghmc-em", "a-sghmc-em", "sghmc-sa", "a-sghmc-sa"])
    assert set(table.method) <= set(uci_sgmcmc.VARIANTS)
    for dataset, (tau_0, v0) in uci_sgmcmc.PAPER_SETTINGS.items():
        rows = table[table.dataset == dataset]
        assert (rows.tau0 == tau_0).all() and (rows.v0 == v0).all()
    assert uci_sgmcmc.PAPER_SETTINGS["wine-quality-red"] == (0.5, 0.01)


def test_the_authors_raw_target_v0_is_carried_to_the_standardised_targets(boston_split):
    """The hidden layer's components widen by the target's sd (the authors' prior in these
    units), the output layer's keep the table's v0 and v1; a run's prior is built with it."""
    from zoo_protocols import uci_sgmcmc
    from zoo_protocols.methods import method as declaration

    spec = declaration("sghmc-sa")
    s = uci_sgmcmc.settings(spec, RunConfig(quick=True), split=boston_split)
    assert s["layer_scale"] == {"0.weight": pytest.approx(float(boston_split.y_std))}
    model, _ = uci_sgmcmc._model(spec, boston_split, RunConfig(quick=True), s)
    prior, v0 = model.prior, uci_sgmcmc.PAPER_SETTINGS["bostonHousing"][1]
    assert prior.v0_of("0.weight") == pytest.approx(v0 * boston_split.y_std) and prior.v0_of("2.weight") == v0
    assert prior.v1_of("0.weight") == pytest.approx(prior.v1 * boston_split.y_std**2) and prior.v1_of("2.weight") == prior.v1
