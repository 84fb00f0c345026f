"""The speed experiment of local reparameterization (``studies/lrt_speed.py``, issue
23, item 2): a quick run writes its table with finite ratios and a verdict; the independent
per-example and local layers sample the same output distribution as pyrozoo's handlers; the
verdict follows the numbers."""

import math

import pandas as pd
import pytest
import torch
from pyro import poutine

from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior
from pyrozoo.poutine import local_reparameterization, weights_per_example
from tests.runner import STUDIES, quick_study, script_globals

LRT_SPEED = STUDIES / "lrt_speed.py"


@pytest.fixture(scope="module")
def speed_script():
    return script_globals(LRT_SPEED)


def test_quick_run_writes_a_table_with_a_verdict(tmp_path, monkeypatch):
    table, text = quick_study(LRT_SPEED, tmp_path, monkeypatch=monkeypatch)
    assert len(table) == 2 * 2 and set(table.implementation) == {"pyrozoo", "independent"}  # --quick: batch sizes 2 and 8
    numbers = table[["seconds_per_example_weights", "seconds_local_reparameterization", "ratio"]]
    assert numbers.map(math.isfinite).all().all() and (numbers > 0).all().all()
    assert torch.allclose(torch.tensor(table.ratio.values), torch.tensor((table.seconds_per_example_weights / table.seconds_local_reparameterization).values))
    assert "Verdict:" in text and "Provenance:" in text and "torch threads 1" in text


# the layer's posterior: means, sds of weights (out=2, in=3) and biases, and two inputs
MW = torch.tensor([[0.5, -1.0, 0.2], [0.0, 0.3, -0.7]])
SW = torch.tensor([[0.3, 0.1, 0.8], [0.5, 0.05, 0.2]])
MB, SB = torch.tensor([0.1, -0.2]), torch.tensor([0.4, 0.1])
A = torch.tensor([[1.0, 2.0, -1.0], [0.0, -0.5, 1.5]])


def _pyrozoo_outputs(handler, x):
    """Samples of the layer output under a pyrozoo handler, the guide set to the posterior above."""
    model = BayesianNeuralNetwork(torch.nn.Linear(3, 2), NormalPrior(1.0), CategoricalLikelihood(dataset_size=1))
    guide = MeanFieldNormalGuide(model)
    with poutine.block():
        guide(x[:1], torch.zeros(1, dtype=torch.long))
    with torch.no_grad():
        for info, (mu, sd) in zip(guide.sites().values(), ((MW, SW), (MB, SB))):
            guide.locs[info.key].copy_(mu)
            guide.log_scales[info.key].copy_(sd.log())
        with handler():
            trace = poutine.trace(guide).get_trace(x)
        return model.net_output({name: trace.nodes[name]["value"] for name in guide.sites()}, x)


@pytest.mark.parametrize("estimator", ["per-example", "local"])
def test_independent_and_pyrozoo_layers_have_the_same_output_moments(speed_script, estimator):
    """Output ``N(a mw^T + mb, (a * a)(sw^2)^T + sb^2)`` per example and unit, independent across
    examples, in the plain-PyTorch layer and under pyrozoo's handler alike: sample means within 5
    standard errors, sample variances within 5 standard errors of a normal sample's variance,
    and the correlation between two examples' outputs within 5 / sqrt(n) of 0."""
    torch.manual_seed(0)
    n = 20000
    x = A.repeat(n, 1)
    mean = A @ MW.T + MB
    var = (A * A) @ (SW * SW).T + SB * SB
    layer = speed_script["per_example_linear"] if estimator == "per-example" else speed_script["local_linear"]
    handler = weights_per_example if estimator == "per-example" else local_reparameterization
    with torch.no_grad():
        outputs = {"independent": layer(x, MW, SW, MB, SB), "pyrozoo": _pyrozoo_outputs(handler, x)}
    for name, out in outputs.items():
        out = out.reshape(n, 2, 2)
        assert ((out.mean(0) - mean).abs() <= 5 * (var / n).sqrt()).all(), name
        assert ((out.var(0) - var).abs() <= 5 * var * math.sqrt(2 / (n - 1))).all(), name
        corr = torch.corrcoef(torch.stack([out[:, 0, 0], out[:, 1, 0]]))[0, 1]
        assert abs(float(corr)) < 5 / math.sqrt(n), name


def test_crossing_interpolates_log_log(speed_script):
    crossing = speed_script["crossing"]
    # ratio = B: reaches 200 at B = 200 exactly on a log-log line
    assert crossing([100, 400], [100.0, 400.0], 200.0) == pytest.approx(200.0)
    assert crossing([10, 50], [5.0, 20.0], 200.0) is None
    assert crossing([10, 50], [300.0, 900.0], 200.0) == 10


def _table(pyrozoo, independent, batches=(10, 100, 500)):
    rows = [{"implementation": impl, "batch_size": b, "ratio": r} for impl, ratios in (("pyrozoo", pyrozoo), ("independent", independent)) for b, r in zip(batches, ratios)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("pyrozoo,independent,starts,contains", [
    ((20.0, 100.0, 300.0), (30.0, 110.0, 280.0), "Verdict: NOT A BUG", "reaches x200 at a minibatch of about"),
    ((20.0, 60.0, 90.0), (30.0, 70.0, 100.0), "Verdict: NOT A BUG", "stays below x200"),
    ((20.0, 30.0, 40.0), (30.0, 100.0, 300.0), "Verdict: BUG", "stays below x200"),
    ((20.0, 30.0, 400.0), (30.0, 100.0, 300.0), "Verdict: BUG", "reaches x200"),
])
def test_verdict_follows_the_numbers(speed_script, pyrozoo, independent, starts, contains):
    text = speed_script["verdict"](_table(pyrozoo, independent))
    assert text.startswith(starts) and contains in text


def test_verdict_needs_both_implementations_at_a_large_batch(speed_script):
    table = _table((20.0, 100.0, 300.0), (30.0, 110.0, 280.0))
    assert speed_script["verdict"](table[table.implementation == "pyrozoo"]).startswith("Verdict: NO COMPARISON")
    assert speed_script["verdict"](table[table.batch_size < 100]).startswith("Verdict: NO COMPARISON")
