"""The DSIVI-prior controlled experiment (``studies/vae_dsivi_prior.py``): a quick
run writes every run and a verdict, the re-implementation's densities are pyrozoo's, and the
verdict follows the numbers."""

import math

import pandas as pd
import pytest
import torch

from pyrozoo.distributions import semi_implicit_role
from pyrozoo.models import MLP, AggregatedPosteriorPrior, GaussianEncoder
from tests.runner import STUDIES, run_example, script_globals

SCRIPT = STUDIES / "vae_dsivi_prior.py"


@pytest.fixture(scope="module")
def script():
    return script_globals(SCRIPT)


def test_quick_run_writes_every_run_and_a_verdict(tmp_path, monkeypatch):
    run_example(SCRIPT, "--quick", "--results-dir", tmp_path, "--checkpoint-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    table = pd.read_csv(tmp_path / "vae_dsivi_prior_quick.csv")
    runs, summary = table[table.seed != "mean"], table[table.seed == "mean"]
    # --quick: 2 seeds of the five (prior, implementation) runs
    assert len(runs) == 2 * 5 and len(summary) == 5
    assert set(zip(summary.prior, summary.implementation)) == {("normal", "pyrozoo"), ("normal", "independent"), ("vamp", "pyrozoo"), ("dsivi", "pyrozoo"), ("dsivi", "independent")}
    assert runs.test_ll.map(math.isfinite).all() and (runs.test_ll < 0).all()
    for row in summary.itertuples():
        same = runs[(runs.prior == row.prior) & (runs.implementation == row.implementation)]
        assert row.test_ll == pytest.approx(same.test_ll.mean())
    text = (tmp_path / "vae_dsivi_prior_quick.md").read_text()
    assert "QUICK SMOKE" in text and "Verdict:" in text and "Provenance:" in text
    # a second invocation reads every run back instead of training it again
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")}
    run_example(SCRIPT, "--quick", "--results-dir", tmp_path, "--checkpoint-dir", tmp_path / "runs", monkeypatch=monkeypatch)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*.json")} == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_re_implementations_mixture_density_is_pyrozoos(script, dtype):
    """The same encoder and the same (deterministic) training points: the re-implementation's
    mixture density, by expanded squares in matrix products, equals pyrozoo's aggregated
    posterior and a brute-force sum over components."""
    torch.manual_seed(0)
    latent, n, d = 3, 37, 5
    encoder = GaussianEncoder(MLP(d, [8], 2 * latent), latent).to(dtype)
    data = torch.rand(n, d, dtype=dtype)
    z = torch.randn(11, latent, dtype=dtype)
    loc, log_scale = encoder(data)
    ours = script["mixture_log_density"](z, loc, log_scale, chunk=4)
    brute = torch.logsumexp(script["gaussian_log_density"](z.unsqueeze(1), loc, log_scale), -1) - math.log(n)
    with semi_implicit_role("model"), torch.no_grad():
        pyrozoos = AggregatedPosteriorPrior(encoder, data).empirical_distribution(None).log_prob(z)
    torch.testing.assert_close(ours, brute)
    torch.testing.assert_close(ours.detach(), pyrozoos)


def test_the_re_implementations_gaussian_density_is_torchs(script):
    torch.manual_seed(1)
    z, loc, log_scale = torch.randn(6, 4), torch.randn(6, 4), 0.3 * torch.randn(6, 4)
    expected = torch.distributions.Normal(loc, log_scale.exp()).log_prob(z).sum(-1)
    torch.testing.assert_close(script["gaussian_log_density"](z, loc, log_scale), expected)


def _runs(values):
    """Rows from ``{(prior, implementation): [test_ll per seed]}``."""
    return pd.DataFrame([
        {"prior": p, "implementation": i, "K": 0, "seed": s, "test_ll": v, "final_train_loss_per_example": -v}
        for (p, i), lls in values.items() for s, v in enumerate(lls)
    ])


@pytest.mark.parametrize(
    "normal, dsivi, vamp, dsivi_independent, expected",
    [
        ([-90, -90.3, -89.9], [-88, -88.2, -87.9], [-88.5, -88.6, -88.4], [-88.1, -88.0, -88.2], "NOT A BUG (budget)"),
        ([-90, -90.3, -89.9], [-91, -91.2, -90.8], [-89.0, -89.1, -88.9], [-91.1, -91.0, -90.9], "NOT SHOWN"),
        ([-90, -90.3, -89.9], [-89, -89.2, -88.9], [-88.0, -88.1, -87.9], [-89.1, -89.0, -89.2], "PARTLY SHOWN"),
        # the re-implementation puts DSIVI several nats elsewhere: a bug in one of them
        ([-90, -90.3, -89.9], [-88, -88.2, -87.9], [-88.5, -88.6, -88.4], [-93.0, -93.1, -92.9], "BUG"),
    ],
)
def test_verdict_follows_the_numbers(script, normal, dsivi, vamp, dsivi_independent, expected):
    runs = _runs({
        ("normal", "pyrozoo"): normal, ("normal", "independent"): [v + 0.05 for v in normal], ("vamp", "pyrozoo"): vamp,
        ("dsivi", "pyrozoo"): dsivi, ("dsivi", "independent"): dsivi_independent,
    })
    assert script["verdict"](runs).startswith(f"Verdict: {expected}")


def test_paired_differences_use_shared_seeds(script):
    runs = _runs({("normal", "pyrozoo"): [-90.0, -91.0, -92.0], ("dsivi", "pyrozoo"): [-89.0, -89.0]})
    mean, se, n = script["paired"](runs, ("dsivi", "pyrozoo"), ("normal", "pyrozoo"))
    assert n == 2 and mean == pytest.approx(1.5) and se == pytest.approx(0.5)
    assert script["paired"](runs, ("vamp", "pyrozoo"), ("normal", "pyrozoo")) is None


@pytest.mark.parametrize("vamp, caveat", [([-89.0, -89.1, -88.9], False), ([-92.0, -92.3, -91.8], True)])
def test_a_vampprior_below_normal_says_the_setting_cannot_decide(script, vamp, caveat):
    """The VampPrior's lead over the Normal prior is published; where it is missing too, the
    verdict says this setting neither shows nor refutes the thesis' ordering."""
    normal, dsivi = [-90.0, -90.3, -89.9], [-91.0, -91.2, -90.8]
    runs = _runs({
        ("normal", "pyrozoo"): normal, ("normal", "independent"): normal, ("vamp", "pyrozoo"): vamp,
        ("dsivi", "pyrozoo"): dsivi, ("dsivi", "independent"): dsivi,
    })
    text = script["verdict"](runs)
    assert text.startswith("Verdict: NOT SHOWN") and ("does not refute it" in text) == caveat
