"""The FGSM unit experiment (``studies/fgsm_scale.py``, issue 23, item 2): its
independent FGSM and pyrozoo's are the same attack (bit for bit on a shared model), the attack
has the properties of its definition, a run writes finite numbers and a verdict, and the verdict
follows the numbers."""

import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, TwoConvTwoFCNet
from pyrozoo.robustness import fgsm_attack
from zoo_protocols.cnn import Predictor
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration
from tests.runner import STUDIES, run_example, script_globals

SCRIPT = STUDIES / "fgsm_scale.py"
#: attack strengths of the property tests: the experiment's smallest and largest, and a dyadic one
ZETAS = (0.1, 0.25, 0.5)
#: float32 rounding of x + zeta with both in [0, 1]: half an ulp of 2, twice over
ROUNDING = 2.5e-7


@pytest.fixture(scope="module")
def script():
    """The script's globals (its functions and constants), without running ``main``."""
    return script_globals(SCRIPT)


class SmallCNN(torch.nn.Module):
    """A fixed small convolutional classifier of 1 x 28 x 28 images (ReLU, so some gradients are exactly 0)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 5, stride=3)
        self.fc = torch.nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(F.relu(self.conv(x)).flatten(1))


class Linear(torch.nn.Module):
    """Multinomial logistic regression: every input gradient is nonzero (up to a null set)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(28 * 28, 10)

    def forward(self, x):
        return self.fc(x.flatten(1))


MODELS = {"small-cnn": SmallCNN, "linear": Linear}


def _fixed(name, n=16, seed=0):
    """A model with fixed weights and ``n`` images on the 1/256 grid with their labels."""
    torch.manual_seed(seed)
    net = MODELS[name]()
    for p in net.parameters():
        p.data.mul_(3.0)  # sharper than at initialisation: some inputs are confidently wrong, some right
    x = torch.randint(0, 257, (n, 1, 28, 28)).float() / 256
    y = torch.randint(0, 10, (n,))
    return net, x, y


def _loss(net, x, y):
    return F.cross_entropy(net(x), y, reduction="none")


# -- the two implementations are one attack -------------------------------------------------------------

@pytest.mark.parametrize("zeta", ZETAS)
@pytest.mark.parametrize("model", list(MODELS))
def test_independent_fgsm_equals_pyrozoo_bit_for_bit(script, model, zeta):
    """On the same class probabilities, the perturbed inputs are exactly equal (pixel units)."""
    net, x, y = _fixed(model)
    probs = lambda u: net(u).softmax(-1)  # noqa: E731
    ours = fgsm_attack(probs, x, y, zeta)
    theirs = script["independent_fgsm"](lambda u: probs(u).log(), x, y, zeta)
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, x)  # the attack moved the inputs


@pytest.mark.parametrize("zeta", ZETAS)
def test_normalised_units_are_pixel_units_times_std(script, zeta):
    """Attacking z = (x - mean) / std by zeta, clipped to z's valid range, is attacking x by
    zeta * std clipped to [0, 1] (the gradient's sign is the same in both units)."""
    net, x, y = _fixed("linear")
    mean, std = script["SCALES"]["normalised"]
    z_adv = script["independent_fgsm"](lambda u: net(u * std + mean).log_softmax(-1), (x - mean) / std, y, zeta,
                                       low=-mean / std, high=(1 - mean) / std)
    pixel = fgsm_attack(lambda u: net(u).softmax(-1), x, y, zeta * std)
    assert torch.allclose(z_adv * std + mean, pixel, atol=1e-6, rtol=0)
    assert (z_adv * std + mean - x).abs().max() == pytest.approx(zeta * std, abs=1e-6)


def test_experiment_ensemble_is_the_recipes_posterior_predictive(script):
    """The independent attack's ensemble (functional layers, log-sum-exp) gives the recipe's
    Predictor.probs (a weighted mean of the samples' probabilities) up to rounding."""
    predictor, x, _ = _predictor(n=6)
    ours = script["ensemble_log_probs"]([{k: v.detach() for k, v in d.items()} for d in predictor.draws], predictor.weights, x).exp()
    with torch.no_grad():
        assert torch.allclose(ours, predictor.probs(x), atol=1e-6, rtol=1e-5)


# -- properties of the attack (both implementations) -------------------------------------------------

def _attack(script, impl, net, x, y, zeta):
    if impl == "pyrozoo":
        return fgsm_attack(lambda u: net(u).softmax(-1), x, y, zeta)
    return script["independent_fgsm"](lambda u: net(u).log_softmax(-1), x, y, zeta)


@pytest.mark.parametrize("impl", ["pyrozoo", "independent"])
@pytest.mark.parametrize("zeta", ZETAS)
@pytest.mark.parametrize("model", list(MODELS))
def test_perturbation_is_zeta_times_the_loss_gradients_sign_where_not_clipped(script, impl, model, zeta):
    net, x, y = _fixed(model)
    x_adv = _attack(script, impl, net, x, y, zeta)
    x_req = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_loss(net, x_req, y).sum(), x_req)
    step = x_adv - x
    inside = (x + zeta * grad.sign() > 0) & (x + zeta * grad.sign() < 1) & (grad != 0)
    assert inside.any()
    # max-norm zeta where not clipped, in the direction that raises the loss of the true label
    assert torch.allclose(step[inside].abs(), torch.full_like(step[inside], zeta), atol=ROUNDING, rtol=0)
    assert torch.equal(step[inside].sign(), grad[inside].sign())
    assert step.abs().max() <= zeta + ROUNDING
    # clipped to the valid range, and a zero gradient leaves the pixel where it was
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert torch.equal(x_adv[grad == 0], x[grad == 0])
    clipped = ~inside & (grad != 0)
    assert torch.equal(x_adv[clipped], (x + zeta * grad.sign())[clipped].clamp(0, 1))


@pytest.mark.parametrize("impl", ["pyrozoo", "independent"])
@pytest.mark.parametrize("model", list(MODELS))
def test_a_small_step_raises_the_loss(script, impl, model):
    """First order: a step of 1e-3 along the sign of the gradient raises every input's loss by
    about zeta * ||grad||_1 (a wrong sign would lower it)."""
    net, x, y = _fixed(model)
    x = x.clamp(0.01, 0.99)  # no clipping at this strength
    zeta = 1e-3
    x_req = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_loss(net, x_req, y).sum(), x_req)
    with torch.no_grad():
        rise = _loss(net, _attack(script, impl, net, x, y, zeta), y) - _loss(net, x, y)
    predicted = zeta * grad.abs().flatten(1).sum(1)
    assert (rise > 0).all()
    assert torch.allclose(rise, predicted, rtol=0.1, atol=1e-5)


# -- a run: finite numbers and a verdict ------------------------------------------------------------

def _predictor(n=8, draws=2, seed=0):
    """A recipe Predictor over ``draws`` random networks of the example's CNN, and ``n`` test images."""
    torch.manual_seed(seed)
    net = TwoConvTwoFCNet(channels_last=False)
    spec = declaration("map")
    model = BayesianNeuralNetwork(net, spec.prior(RunConfig().settings({"prior_scale": 1.0}, spec.defaults)), CategoricalLikelihood(100))
    values = [{name: torch.randn_like(p) * 0.05 for name, p in net.named_parameters()} for _ in range(draws)]
    x = torch.randint(0, 257, (n, 1, 28, 28)).float() / 256
    y = torch.randint(0, 10, (n,))
    return Predictor(model, values, [1.0 + i for i in range(draws)]), x, y


def _check_table(table):
    runs, summary = table[table.seed != "mean"], table[table.seed == "mean"]
    numbers = runs[["accuracy", "pixel_epsilon"]].astype(float)
    assert numbers.map(math.isfinite).all().all() and runs.accuracy.between(0, 100).all()
    assert set(runs.attack) == {"pyrozoo", "independent", "authors"} and {"pixel", "normalised"} <= set(runs.scale)
    assert runs[runs.attack == "independent"].same_pixels.astype(float).between(0, 1).all()
    for row in summary.itertuples():
        seeds = runs[(runs.method == row.method) & (runs.attack == row.attack) & (runs.scale == row.scale) & (runs.zeta == row.zeta)]
        assert row.accuracy == pytest.approx(seeds.accuracy.astype(float).mean())
        assert math.isfinite(row.accuracy_se)
    return runs


def test_attack_run_on_fixed_networks_gives_finite_rows_and_a_verdict(script):
    """The fast variant of the quick run: two 'seeds' of two 'methods' with fixed random
    networks, attacked as the experiment does, summarized and judged."""
    rows, zetas = [], (0.1, 0.5)
    for method in ("adam", "sghmc-sa"):
        for seed in (0, 1):
            predictor, x, y = _predictor(n=2, draws=1 if method == "adam" else 2, seed=seed)
            for row in script["attack_run"](predictor, x, y, zetas):
                rows.append({"method": method, "seed": seed, "clean_accuracy": 10.0, **row})
    runs = pd.DataFrame(rows)
    assert len(runs) == 2 * 2 * len(script["SCALES"]) * len(zetas) * len(script["ATTACKS"])
    summary = script["summarize"](runs)
    _check_table(pd.concat([summary.assign(seed="mean"), runs], ignore_index=True))
    # the same definition on the same networks: every adversarial image alike up to rounding
    assert runs[runs.attack == "independent"].same_pixels.min() >= script["AGREE_PIXELS"]
    pixel = runs[runs.scale == "pixel"]
    assert (pixel.pixel_epsilon == pixel.zeta).all()
    normalised = runs[runs.scale == "normalised"]
    assert torch.allclose(torch.tensor(normalised.pixel_epsilon.values), torch.tensor(normalised.zeta.values) * script["MNIST_STD"])
    assert script["verdict"](runs, summary).startswith("Verdict: NOT A BUG in the attack.")


@pytest.mark.slow
def test_quick_run_writes_a_table_with_a_verdict(tmp_path, monkeypatch):
    run_example(SCRIPT, "--quick", "--no-progress", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    runs = _check_table(pd.read_csv(tmp_path / "fgsm_scale.csv"))
    assert set(runs.method) == {"adam", "sghmc", "sghmc-sa"} and set(runs.seed.astype(int)) == {0, 1}
    assert runs.clean_accuracy.astype(float).map(math.isfinite).all()
    text = (tmp_path / "fgsm_scale.md").read_text()
    assert "Verdict:" in text and "Provenance:" in text and "torch threads 1" in text


# -- the verdict follows the numbers ---------------------------------------------------------------

def _runs(script, accuracy, independent_shift=0.0, same_pixels=1.0, seeds=3):
    """Synthetic runs: ``accuracy(method, scale, zeta, seed)`` for pyrozoo and the authors' protocol,
    the independent attack shifted by ``independent_shift``."""
    rows = []
    for method in ("adam", "sghmc", "sghmc-sa"):
        for seed in range(seeds):
            for scale, (_, std) in script["SCALES"].items():
                for zeta in script["ZETAS"]:
                    acc = accuracy(method, scale, zeta, seed)
                    base = {"method": method, "seed": seed, "scale": scale, "zeta": zeta, "pixel_epsilon": zeta * std, "clean_accuracy": 97.0}
                    rows += [{**base, "attack": "pyrozoo", "accuracy": acc},
                             {**base, "attack": "independent", "accuracy": acc + independent_shift, "same_images": 1.0, "same_pixels": same_pixels},
                             {**base, "attack": "authors", "accuracy": acc}]
    return pd.DataFrame(rows)


def _low_everywhere(method, scale, zeta, seed):
    return 2.0 + 0.5 * seed


def _published_in_normalised_units(method, scale, zeta, seed):
    if scale != "normalised":
        return 1.0 + 0.5 * seed
    return {"adam": 10.0, "sghmc": 20.0, "sghmc-sa": 22.0}[method] + 0.5 * seed


def _published_in_pixel_units(method, scale, zeta, seed):
    return {"adam": 10.0, "sghmc": 20.0, "sghmc-sa": 22.0}[method] + 0.5 * seed


@pytest.mark.parametrize("accuracy,shift,same,expected", [
    (_low_everywhere, 0.0, 1.0, "Neither unit nor protocol reproduces"),
    (_published_in_normalised_units, 0.0, 1.0, "Only normalised units reproduce"),
    (_published_in_pixel_units, 0.0, 1.0, "Pixel units reproduce"),
    (_low_everywhere, 5.0, 1.0, "Verdict: BUG."),
    (_low_everywhere, 0.0, 0.99, "Verdict: BUG."),
])
def test_verdict_follows_the_numbers(script, accuracy, shift, same, expected):
    runs = _runs(script, accuracy, shift, same)
    text = script["verdict"](runs, script["summarize"](runs))
    assert expected in text
    assert text.startswith("Verdict: BUG.") == expected.startswith("Verdict: BUG.")
