"""The phase-transition controlled experiment (``studies/phase_transition.py``): a
quick run writes the trajectories and a verdict, the re-implementation's objective is
pyrozoo's, and the verdict follows the numbers."""

import math

import pandas as pd
import pyro
import pytest
import torch
from torch.distributions import kl_divergence

from pyrozoo.guides import VariationalDropoutGuide
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.models.dropout_priors import LogUniformPrior
from tests.runner import STUDIES, quick_study, script_globals

SCRIPT = STUDIES / "phase_transition.py"


@pytest.fixture(scope="module")
def script():
    return script_globals(SCRIPT)


def test_quick_run_writes_trajectories_and_a_verdict(tmp_path, monkeypatch):
    table, text = quick_study(SCRIPT, tmp_path, "--parameterizations", "layer", monkeypatch=monkeypatch)
    runs, summary = table[table.seed != "mean"], table[table.seed == "mean"]
    # --quick: 2 epochs tracked every epoch, 2 seeds, both implementations
    assert len(runs) == 2 * 2 * 2 and len(summary) == 2
    assert set(runs.implementation) == {"independent", "pyrozoo"} and sorted(set(runs.epoch)) == [1, 2]
    for col in ("mean_propagation_accuracy", "test_time_averaging_accuracy"):
        assert runs[col].between(0, 100).all()
    alphas = [c for c in runs if c.startswith("mean_log_alpha[") and not c.endswith("_se")]
    assert len(alphas) == 3 and runs[alphas].map(math.isfinite).all().all()
    last = runs[runs.epoch == 2]
    for row in summary.itertuples():
        assert row.mean_propagation_accuracy == pytest.approx(last[last.implementation == row.implementation].mean_propagation_accuracy.mean())
    assert "Verdict:" in text and "Provenance:" in text


@pytest.mark.parametrize("shared", ["layer", "neuron"])
def test_the_re_implementations_kl_is_pyrozoos(script, shared):
    """Same ``theta`` and shared ``log alpha``: the summed KL of the plain layer equals
    pyrozoo's KL of the declared guide to the log-uniform prior (the constants of eq. 14
    written down twice)."""
    torch.manual_seed(0)
    layer = script["SharedRateLinear"](torch.nn.Linear(6, 4), shared)
    with torch.no_grad():
        layer.log_alpha.copy_(torch.linspace(-3, 2, layer.log_alpha.numel()).reshape(layer.log_alpha.shape))
    pyro.clear_param_store()
    net = torch.nn.Linear(6, 4)
    model = BayesianNeuralNetwork(net, LogUniformPrior(), CategoricalLikelihood(dataset_size=1))
    guide = VariationalDropoutGuide(model, parameterization=shared)
    guide(torch.zeros(1, 6), torch.zeros(1, dtype=torch.long))
    with torch.no_grad():
        next(iter(guide.locs.values())).copy_(layer.theta)
        next(iter(guide.log_alphas.values())).copy_(layer.log_alpha.reshape(next(iter(guide.log_alphas.values())).shape))
    prior = dict(model.latent_sites(torch.zeros(1, 6)))["weight"]
    expected = kl_divergence(guide.posterior("weight"), prior).sum()
    torch.testing.assert_close(layer.kl(), expected, rtol=1e-5, atol=1e-5)


def _summary(mean_prop, tta, se=0.5):
    rows = []
    for (param, impl), (m, t) in zip([(p, i) for p in ("layer", "neuron") for i in ("independent", "pyrozoo")], zip(mean_prop, tta)):
        rows.append({"parameterization": param, "implementation": impl, "mean_propagation_accuracy": m, "mean_propagation_accuracy_se": se,
                     "test_time_averaging_accuracy": t, "test_time_averaging_accuracy_se": se, "mean_log_alpha[0]": 3.0, "mean_log_alpha[0]_se": 0.1})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "mean_prop, tta, expected",
    [
        ((11, 12, 11, 12), (97, 97, 97, 97), "NOT A BUG (budget)"),
        ((98, 98, 98, 98), (98, 98, 98, 98), "NOT SHOWN"),
        ((11, 98, 11, 12), (97, 98, 97, 97), "BUG"),
        ((11, 11, 98, 98), (97, 97, 98, 98), "PARTLY SHOWN"),
        # mean propagation at chance with test-time averaging at chance too: a network that
        # stopped learning, not a variance network
        ((11, 11, 11, 11), (11, 11, 11, 11), "NOT SHOWN"),
    ],
)
def test_verdict_follows_the_numbers(script, mean_prop, tta, expected):
    text = script["verdict"](_summary(mean_prop, tta), steps=1000, gap=2.5)
    assert text.startswith(f"Verdict: {expected}")


def test_the_largest_gap_is_over_seeds_at_one_epoch(script):
    runs = pd.DataFrame({
        "parameterization": ["layer"] * 4, "implementation": ["pyrozoo"] * 4, "epoch": [1, 1, 2, 2],
        "test_time_averaging_accuracy": [90.0, 92.0, 95.0, 99.0], "mean_propagation_accuracy": [90.0, 90.0, 11.0, 95.0],
    })
    # epoch 2: gaps 84 and 4, mean 44; epoch 1: 0 and 2, mean 1
    assert script["largest_gap"](runs) == pytest.approx(44.0)
