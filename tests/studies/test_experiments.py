"""The controlled experiments of ``studies/`` (issue 23, item 2): a quick run writes its
table with finite numbers and a verdict, the two implementations an experiment compares are the
same model, and the verdict follows the numbers."""

import math

import pandas as pd
import pytest
import torch
from pyro import poutine

from pyrozoo.guides import VariationalDropoutGuide
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.models.dropout_priors import LogUniformPrior
from pyrozoo.poutine import local_reparameterization
from tests.runner import STUDIES, quick_study, script_globals

ZERO_MEAN = STUDIES / "variance_network_zero_mean.py"


@pytest.fixture(scope="module")
def zero_mean_script():
    """The script's globals (its classes and functions), without running ``main``."""
    return script_globals(ZERO_MEAN)


def test_zero_mean_quick_run_writes_a_table_with_a_verdict(tmp_path, monkeypatch):
    variants = "mlp/zero-mean-output,mlp/mean-output"
    table, text = quick_study(ZERO_MEAN, tmp_path, "--variants", variants, monkeypatch=monkeypatch)
    runs = table[table.seed != "mean"]
    summary = table[table.seed == "mean"]
    # every variant x implementation x seed ran (--quick: 2 seeds), and the summary has one row each
    assert len(runs) == 2 * 2 * 2 and len(summary) == 2 * 2
    assert set(runs.implementation) == {"independent", "pyrozoo"} and set(runs.variant) == set(variants.split(","))
    numbers = runs[["test_time_averaging_accuracy", "train_cross_entropy", "seconds"]].astype(float)
    assert numbers.notna().all().all() and numbers.map(math.isfinite).all().all()
    assert runs.test_time_averaging_accuracy.between(0, 100).all()
    # the mean over seeds is the mean of the seeds' rows
    for row in summary.itertuples():
        seeds = runs[(runs.variant == row.variant) & (runs.implementation == row.implementation)]
        assert row.test_time_averaging_accuracy == pytest.approx(seeds.test_time_averaging_accuracy.mean())
        assert math.isfinite(row.test_time_averaging_accuracy_se)
    assert "Verdict:" in text and "Provenance:" in text and "torch threads 1" in text


def _pyrozoo_layer(sigma: torch.Tensor):
    """One linear layer, zero-mean under pyrozoo's guide, its scales set to ``sigma``."""
    net = torch.nn.Linear(sigma.shape[1], sigma.shape[0], bias=False)
    model = BayesianNeuralNetwork(net, LogUniformPrior(), CategoricalLikelihood(dataset_size=1))
    guide = VariationalDropoutGuide(model, parameterization="zero-mean")
    guide(torch.zeros(1, sigma.shape[1]), torch.zeros(1, dtype=torch.long))
    with torch.no_grad():
        next(iter(guide.scales.values())).copy_(sigma)
    return model, guide


def _pyrozoo_output(model, guide, x):
    # under the handler the guide's sites are stand-ins that the linear layer turns into
    # a sample of its output's marginal (the path fit(..., estimator="local") trains)
    with local_reparameterization():
        trace = poutine.trace(guide).get_trace(x)
    return model.net_output({name: trace.nodes[name]["value"] for name in guide.sites()}, x)


def test_both_implementations_sample_the_same_zero_mean_layer(zero_mean_script):
    """Output ``N(0, (a * a) @ (sigma * sigma)^T)`` per example and unit, in pyrozoo (guide +
    local reparameterization) and in the re-implementation alike; sample moments within
    5 standard errors of the exact ones."""
    torch.manual_seed(0)
    sigma = torch.tensor([[0.5, -1.0, 0.0, 2.0], [-0.3, 0.2, 1.5, 0.1]])
    a = torch.tensor([[1.0, 2.0, -1.0, 0.5], [0.0, 0.3, 0.7, -2.0]])
    exact = (a * a) @ (sigma * sigma).T
    n = 20000
    x = a.repeat(n, 1)
    model, guide = _pyrozoo_layer(sigma)
    layer = zero_mean_script["ZeroMeanLinear"](4, 2, bias=False)
    with torch.no_grad():
        layer.sigma.copy_(sigma)
        outputs = {"pyrozoo": _pyrozoo_output(model, guide, x).detach(), "independent": layer(x)}
    for name, out in outputs.items():
        out = out.reshape(n, 2, 2)
        mean, var = out.mean(0), out.var(0)
        assert (mean.abs() <= 5 * (exact / n).sqrt()).all(), name
        assert ((var - exact).abs() <= 5 * exact * math.sqrt(2 / (n - 1))).all(), name


def test_pyrozoo_zero_mean_scales_receive_gradient():
    """The signed scales are learnable: the gradient of a loss of the output reaches every one."""
    torch.manual_seed(0)
    sigma = torch.tensor([[0.5, -1.0, 0.25], [-0.3, 0.2, 1.5]])
    model, guide = _pyrozoo_layer(sigma)
    out = _pyrozoo_output(model, guide, torch.ones(8, 3))
    out.pow(2).sum().backward()
    grad = next(iter(guide.scales.values())).grad
    # d/dsigma of sum_m eps_m^2 sum_i a_i^2 sigma_i^2 = 2 sigma sum_m eps_m^2 a_i^2: sign of sigma, nonzero
    assert grad is not None and (grad != 0).all() and torch.equal(grad.sign(), sigma.sign())


def _summary(accuracies):
    rows = [
        {"variant": v, "implementation": i, "seeds": 3, "test_time_averaging_accuracy": acc, "test_time_averaging_accuracy_se": 0.5,
         "train_cross_entropy": 2.3 if acc < 20 else 1.0, "train_cross_entropy_se": 0.01}
        for (v, i), acc in accuracies.items()
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("accuracies,expected", [
    ({("mlp/zero-mean-output", "independent"): 11.0, ("mlp/zero-mean-output", "pyrozoo"): 11.5,
      ("mlp/mean-output", "independent"): 60.0, ("mlp/mean-output", "pyrozoo"): 58.0}, "NOT A BUG"),
    ({("mlp/zero-mean-output", "independent"): 80.0, ("mlp/zero-mean-output", "pyrozoo"): 11.5}, "BUG."),
    ({("mlp/mean-output", "independent"): 11.0, ("mlp/mean-output", "pyrozoo"): 60.0}, "BUG."),
])
def test_verdict_follows_the_numbers(zero_mean_script, accuracies, expected):
    text = zero_mean_script["verdict"](_summary(accuracies), chance=11.35, prior_entropy=2.30)
    assert text.startswith(f"Verdict: {expected}")


# -- the scale of Kingma et al.'s gradient-variance table (local_reparam_variance_scale.py) ----------

LRT_SCALE = STUDIES / "local_reparam_variance_scale.py"


@pytest.fixture(scope="module")
def lrt_scale_script():
    return script_globals(LRT_SCALE)


def test_lrt_scale_quick_run_checks_the_definition(tmp_path, monkeypatch):
    table, text = quick_study(LRT_SCALE, tmp_path, monkeypatch=monkeypatch)
    assert set(table.epoch) == {1, 4} and len(table) == 2 * 4  # --quick: two checkpoints, the example's four estimators
    # the example's data term is N x the mean cross-entropy at full batch (the (N / M) sum convention)
    assert (table.data_term_over_N_ce - 1).abs().max() < 1e-5
    # the closed-form KL is deterministic: on the same noise it leaves the variance unchanged
    lrt = table[table.estimator == "local reparameterization"]
    assert (lrt.ratio_top_kl - 1).abs().max() < 1e-4
    # estimators with independent examples: variance ~ 1 / M; the log of a ratio of two variances
    # from R draws has sd <= 2 / sqrt(R - 1), so 3 sd bounds a correct measurement
    iid = table[table.predicted_batch_ratio.notna()]
    assert len(iid) == 2 * 2
    assert ((iid.ratio_top_batch / iid.predicted_batch_ratio).map(math.log).abs() < 3 * 2 / math.sqrt(table.repeats.iloc[0] - 1)).all()
    # per-example variance is the variance converted by M / N^2 exactly
    assert torch.allclose(torch.tensor(table.per_example_var_top.values), torch.tensor((table.var_top_batch_small * table.batch_small / 400**2).values))
    assert "Verdict: NOT A DEFINITION BUG" in text and "Provenance:" in text


def _lrt_table(batch_ratio, kl_ratio, scale):
    rows = []
    for epoch, a2, misfit, var in ((10, 1.0, 0.5, 100.0), (100, 5.0, 0.2, 400.0)):
        for est, pred, share in (("local reparameterization", 10.0, 1.0), ("weight sample per minibatch (standard)", float("nan"), 1.5),
                                 ("no weight noise (minimal variance)", 10.0, 0.5)):
            rows.append({"method": "mfvi", "epoch": epoch, "estimator": est, "repeats": 101, "batch_small": 100, "batch_large": 1000, "var_top_batch_small": var * share,
                         "var_top_batch_large": var * share / 10, "var_bottom_batch_large": var * share / 100,
                         "ratio_top_batch": batch_ratio, "predicted_batch_ratio": pred, "ratio_top_kl": kl_ratio, "data_term_over_N_ce": scale,
                         "top_input_second_moment": a2, "misfit_at_mean": misfit})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("batch_ratio,kl_ratio,scale,expected", [
    (10.0, 1.0, 1.0, "Verdict: NOT A DEFINITION BUG"),
    (1.0, 1.0, 1.0, "Verdict: CHECK FAILED (1/M law)"),
    (10.0, 1.5, 1.0, "Verdict: CHECK FAILED (KL-free variance)"),
    (10.0, 1.0, 0.01, "Verdict: CHECK FAILED (N/M scaling)"),
])
def test_lrt_scale_verdict_follows_the_numbers(lrt_scale_script, batch_ratio, kl_ratio, scale, expected):
    published = lrt_scale_script["example_globals"]()["PUBLISHED"]
    ours = {"top layer, epoch 10": 8.0e5, "top layer, epoch 100": 2.6e6}
    table = _lrt_table(batch_ratio, kl_ratio, scale)
    text = lrt_scale_script["verdict"](table, published, ours, "mfvi")
    assert text.startswith(expected)
    # another method's rows are reported as the counterfactual and do not change the verdict
    other = table.assign(method="vd-weight", ratio_top_batch=1.0, ratio_top_kl=2.0, data_term_over_N_ce=0.5)
    both = lrt_scale_script["verdict"](pd.concat([table, other]), published, ours, "mfvi")
    assert both.startswith(expected) and "Counterfactual posterior vd-weight" in both
    # a counterfactual whose variance falls where the example's rises is named as the cause of the direction
    falling = other.assign(var_top_batch_small=other.var_top_batch_small.where(other.epoch == 10, other.var_top_batch_small / 8))
    falling = falling.assign(var_top_batch_large=falling.var_top_batch_small / 10, var_bottom_batch_large=falling.var_top_batch_small / 100)
    text = lrt_scale_script["verdict"](pd.concat([table, falling]), published, ours, "mfvi")
    assert "rises under mfvi and falls under vd-weight" in text
    assert "mfvi: 0 of 6 (estimator, layer) variances fall" in text and "vd-weight: 6 of 6" in text
