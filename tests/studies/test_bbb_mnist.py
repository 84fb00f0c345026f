"""The Bayes-by-Backprop controlled experiment (``studies/bbb_mnist.py``, issue 23,
item 2): a quick run writes its table with finite numbers and a verdict; the independent
implementation's Monte Carlo KL and pyrozoo's training objective estimate the same KL, the
exact one; the verdict follows the numbers."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from pyro import poutine

from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from zoo_protocols.bayes_by_backprop import SPEC, settings
from tests.runner import STUDIES, quick_study, script_globals

BBB = STUDIES / "bbb_mnist.py"


@pytest.fixture(scope="module")
def bbb_script():
    """The script's globals (its classes and functions), without running ``main``."""
    return script_globals(BBB)


def test_quick_run_writes_a_table_with_a_verdict(tmp_path, monkeypatch):
    table, text = quick_study(BBB, tmp_path, monkeypatch=monkeypatch)
    runs, summary = table[table.seed != "mean"], table[table.seed == "mean"]
    # --quick: 2 implementations x 2 seeds x (unpruned + 4 kept fractions); one summary row per pair
    assert len(runs) == 2 * 2 * 5 and len(summary) == 2 * 5
    assert set(runs.implementation) == {"independent", "pyrozoo"}
    errors = runs[["test_error", "test_error_posterior_mean", "fraction_kept"]].astype(float)
    assert errors.map(math.isfinite).all().all() and runs.test_error.between(0, 100).all()
    unpruned = runs[runs.target_kept == 1.0]
    assert unpruned.kl_per_example.astype(float).gt(0).all() and unpruned.seconds.astype(float).gt(0).all()
    # pruning keeps the asked fraction of the weights (up to ties), in both implementations
    pruned = runs[runs.target_kept < 1.0]
    assert (pruned.fraction_kept - pruned.target_kept).abs().max() < 1e-3
    for row in summary.itertuples():
        seeds = runs[(runs.implementation == row.implementation) & (runs.target_kept == row.target_kept)]
        assert row.test_error == pytest.approx(seeds.test_error.mean())
    assert "Verdict:" in text and "Provenance:" in text and "torch threads 1" in text


def _exact_kl(mu: np.ndarray, sigma: np.ndarray, prior) -> float:
    """``sum_j KL(N(mu_j, sigma_j^2) || scale mixture)`` by adaptive quadrature per entry, with
    a break point at 0, where the prior's narrow component makes ``log P`` change on a scale of
    ``sigma2``."""
    from scipy import integrate

    pi, s1, s2 = prior
    c = 0.5 * math.log(2 * math.pi)

    def integrand(w, m, sd):
        z = (w - m) / sd
        log_q = -0.5 * z * z - math.log(sd) - c
        log_p = np.logaddexp(math.log(pi) - math.log(s1) - 0.5 * (w / s1) ** 2, math.log1p(-pi) - math.log(s2) - 0.5 * (w / s2) ** 2) - c
        return math.exp(log_q) * (log_q - log_p)

    total = 0.0
    for m, sd in zip(mu, sigma):
        lo, hi = m - 12 * sd, m + 12 * sd
        points = [0.0] if lo < 0.0 < hi else None
        total += integrate.quad(integrand, lo, hi, args=(m, sd), points=points, limit=200, epsabs=1e-10)[0]
    return total


def _fixed_parameters(sizes, seed=0):
    """Posterior means and sds per (weight, bias) of each layer, the sds spanning the prior's narrow
    component (e^-6 = 0.0025) to well above it."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        for shape in ((b, a), (b,)):
            mu = 0.3 * torch.randn(shape, generator=g)
            sigma = torch.exp(torch.empty(shape).uniform_(math.log(0.002), math.log(0.3), generator=g))
            out.append((mu, sigma))
    return out


def test_both_implementations_estimate_the_exact_kl(bbb_script):
    """On the same fixed posterior, the mean of R one-sample KL estimates from pyrozoo's training
    objective (loss with the KL minus loss without, on one weight sample) and from the independent
    layer's ``log q - log P`` are both within 5 standard errors of the exact KL (quadrature)."""
    sizes = [6, 5, 5, 3]
    params = _fixed_parameters(sizes)
    prior = (0.5, 1.0, math.exp(-6.0))
    exact = sum(_exact_kl(mu.double().numpy().ravel(), s.double().numpy().ravel(), prior) for mu, s in params)
    # pyrozoo: the example's prior and guide declarations, parameters set to the fixed posterior
    s = settings(0.5, 0.0, 6.0, 0.01, "blundell")
    model = BayesianNeuralNetwork(MLP(sizes[0], sizes[1:-1], sizes[-1]), SPEC.prior(s), CategoricalLikelihood(100))
    guide = SPEC.guide(model, s)
    x, y = torch.zeros(4, sizes[0]), torch.zeros(4, dtype=torch.long)
    with poutine.block():
        guide(x, y)
    with torch.no_grad():
        for info, (mu, sigma) in zip(guide.sites().values(), params):
            guide.locs[info.key].copy_(mu)
            guide.log_scales[info.key].copy_(sigma.log())
    # the independent network, same posterior through its softplus parameterisation
    net = bbb_script["BayesMLP"](sizes, 0.01, prior)
    with torch.no_grad():
        for layer, ((mw, sw), (mb, sb)) in zip(net.layers, zip(params[::2], params[1::2])):
            layer.weight_mu.copy_(mw)
            layer.bias_mu.copy_(mb)
            layer.weight_rho.copy_(sw + torch.log(-torch.expm1(-sw)))
            layer.bias_rho.copy_(sb + torch.log(-torch.expm1(-sb)))
    torch.manual_seed(1)
    R = 400
    draws = {"pyrozoo": [bbb_script["_pyrozoo_kl"](model, guide, x, y, 1) for _ in range(R)],
             "independent": [bbb_script["independent_kl"](net, 1) for _ in range(R)]}
    for name, values in draws.items():
        values = torch.tensor(values, dtype=torch.float64)
        se = float(values.std() / math.sqrt(R))
        assert abs(float(values.mean()) - exact) < 5 * se, (name, float(values.mean()), exact, se)


def test_blundell_weights_match_the_recipe_schedule(bbb_script):
    """The independent eq.-9 weights equal the recipe's schedule (which returns M pi_i, as Pyro's
    data plate scales the likelihood by M) and sum to 1 over an epoch."""
    from pyrozoo.inference.schedules import BlundellKLReweighting

    M = 79
    mine = [bbb_script["kl_weight"]("blundell", i, M) for i in range(1, M + 1)]
    theirs = [BlundellKLReweighting()(0, i - 1, M) / M for i in range(1, M + 1)]
    assert mine == pytest.approx(theirs, rel=1e-12) and sum(mine) == pytest.approx(1.0, rel=1e-12)
    assert bbb_script["kl_weight"]("uniform", 5, M) == pytest.approx(1 / M)


def _summary(values):
    """A summary with 3 seeds per implementation: ``values[impl] = (test_error, kl, increase)`` with s.e. 0.1, 0.5, 2."""
    rows = []
    for impl, (err, kl, inc) in values.items():
        rows.append({"implementation": impl, "target_kept": 1.0, "seeds": 3, "test_error": err, "test_error_se": 0.1, "kl_per_example": kl, "kl_per_example_se": 0.5})
        rows.append({"implementation": impl, "target_kept": 0.223, "seeds": 3, "test_error": err * (1 + inc / 100), "test_error_se": 0.1, "relative_increase": inc, "relative_increase_se": 2.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("values,expected", [
    ({"pyrozoo": (3.0, 100.0, 10.0), "independent": (3.1, 100.4, 12.0)}, "Verdict: NOT A BUG"),
    ({"pyrozoo": (4.5, 100.0, 10.0), "independent": (3.0, 100.0, 10.0)}, "Verdict: BUG"),
    ({"pyrozoo": (3.0, 120.0, 10.0), "independent": (3.0, 100.0, 10.0)}, "Verdict: BUG"),
    ({"pyrozoo": (3.0, 100.0, 60.0), "independent": (3.0, 100.0, 10.0)}, "Verdict: BUG"),
])
def test_verdict_follows_the_numbers(bbb_script, values, expected):
    assert bbb_script["verdict"](_summary(values)).startswith(expected)


def test_verdict_needs_both_implementations_and_seeds(bbb_script):
    one = _summary({"pyrozoo": (3.0, 100.0, 10.0)})
    assert bbb_script["verdict"](one).startswith("Verdict: NO COMPARISON")
    single = _summary({"pyrozoo": (3.0, 100.0, 10.0), "independent": (3.0, 100.0, 10.0)}).assign(seeds=1)
    assert bbb_script["verdict"](single).startswith("Verdict: NO COMPARISON")
