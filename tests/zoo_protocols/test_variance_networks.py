"""The variance-network protocol (zoo_protocols/variance_networks.py) and its zero-mean declaration
(``vd-zero-mean`` of zoo_protocols/methods.py).

A zero-mean output layer makes the logits' mean the bias whatever the input, and by Jensen's
inequality (the cross-entropy is convex in the logits) the expected cross-entropy is then at
least that of a network that ignores its input, whose best is the entropy of the labels: the
committed table's zero-mean row sat at chance for this reason. The declaration keeps the output
layer out of the zero-mean prior (a point estimate, as in the authors' ``lenet5-vn.py``); the
tests train both settings on a problem the hidden layers can solve from the squares of the
inputs (a zero-mean layer sees nothing else: its output is ``N(0, sum_i x_i^2 sigma_i^2)``).
"""

import pyro
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import DROPOUT_PRIORS, HiddenLayerWeights, method, variance_network_prior
from zoo_protocols.variance_networks import ARCHITECTURES, make_variance_network, train_variational_dropout
from tests.stats import mean_tolerance

PRIORS = sorted(DROPOUT_PRIORS)
CLASSES = 4
SHAPE = (1, 4, 4)
#: weight draws of the expected cross-entropy
DRAWS = 50


def _bands(n=200, seed=0):
    """4 x 4 images: noise in [0, 0.3], plus 0.7 on the four pixels of the image's class."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % CLASSES
    x = 0.3 * torch.rand(n, 16, generator=g)
    width = 16 // CLASSES
    for c in range(CLASSES):
        x[y == c, c * width : (c + 1) * width] += 0.7
    return x.reshape(n, *SHAPE), y


def _label_entropy(y) -> float:
    """The least mean cross-entropy of a network that ignores its input: log-probabilities
    the training labels' frequencies."""
    p = torch.bincount(y).double() / len(y)
    return float(-(p * p.log()).sum())


@torch.no_grad()
def _fit_figures(model, guide, x, y):
    """The expected training cross-entropy over ``DRAWS`` weight draws, its tolerance from
    the spread of the draws, and the accuracy of the averaged predictive."""
    per_draw, probs = [], 0.0
    for _ in range(DRAWS):
        logits = model.net_output({name: guide.posterior(name).sample() for name in guide.sites()}, x)
        per_draw.append(float(F.cross_entropy(logits, y)))
        probs = probs + logits.softmax(-1) / DRAWS
    per_draw = torch.tensor(per_draw, dtype=torch.float64)
    return float(per_draw.mean()), mean_tolerance(float(per_draw.var()), DRAWS), float((probs.argmax(-1) == y).double().mean())


def _train(prior, zero_mean_output):
    x, y = _bands()
    # 40 steps (10 epochs of 4 batches); lr 1e-2 decayed linearly to 0, the KL warmed up
    model, guide, _ = train_variational_dropout(
        "lenet300", "zero-mean", (x, y), epochs=10, batch_size=50, lr=1e-2, prior=prior, seed=0,
        input_shape=SHAPE, num_classes=CLASSES, zero_mean_output=zero_mean_output,
    )
    return (x, y), model, guide


@pytest.mark.parametrize("prior", PRIORS)
def test_zero_mean_hidden_layers_learn(prior):
    (x, y), model, guide = _train(prior, zero_mean_output=False)
    assert "4.weight" in model.deterministic_parameter_names  # the output layer keeps its mean
    cross_entropy, tolerance, accuracy = _fit_figures(model, guide, x, y)
    assert accuracy >= 0.9  # chance: 0.25
    assert cross_entropy < _label_entropy(y) - tolerance  # beats every input-ignoring network


@pytest.mark.parametrize("prior", PRIORS)
def test_an_all_zero_mean_network_cannot_beat_one_that_ignores_its_input(prior):
    """The Jensen bound: E_w[CE(logits)] >= CE(E_w logits) = CE(bias) >= the labels' entropy,
    after the same training as above (it holds at any parameters)."""
    (x, y), model, guide = _train(prior, zero_mean_output=True)
    assert "4.weight" in model.random_parameter_names
    cross_entropy, tolerance, _ = _fit_figures(model, guide, x, y)
    assert cross_entropy >= _label_entropy(y) - tolerance


def _weights(net):
    return {f"{name}.weight": m.weight for name, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))}


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("parameterization, zero_mean_output", [("zero-mean", False), ("zero-mean", True), ("layer", False)])
def test_only_the_zero_mean_declaration_leaves_out_the_output_layer(arch, parameterization, zero_mean_output):
    """12 classes, so the output layer is the one weight with 12 rows."""
    spec = method(f"vd-{parameterization}")
    extra = {"zero_mean_output": zero_mean_output} if parameterization == "zero-mean" else {}
    net = make_variance_network(arch, num_classes=12)
    model = BayesianNeuralNetwork(net, spec.prior(RunConfig(extra=extra).settings(spec.defaults)), CategoricalLikelihood(10))
    weights = _weights(net)
    left_out = sorted(set(weights) - set(model.random_parameter_names))
    if parameterization == "zero-mean" and not zero_mean_output:
        assert len(left_out) == 1 and weights[left_out[0]].shape[0] == 12
    else:
        assert left_out == []
    assert all(name in weights for name in model.random_parameter_names)  # weights only: no biases, no batch norm


def test_a_network_without_a_hidden_layer_has_nothing_zero_mean():
    s = RunConfig().settings(method("vd-zero-mean").defaults)
    with pytest.raises(ValueError, match=r"needs a hidden layer under its output layer, but MLP has weights in 1 layer\(s\)"):
        BayesianNeuralNetwork(MLP(3, [], 2), variance_network_prior(s), CategoricalLikelihood(10))
    assert [entry[0] for entry in HiddenLayerWeights().select(MLP(3, [4], 2))] == ["0"]  # one hidden layer: the first of MLP's


def test_networks_are_sized_from_the_data():
    net = make_variance_network("lenet300", (1, 8, 8), 12)
    assert net(torch.zeros(2, 1, 8, 8)).shape == (2, 12) and _weights(net)["0.weight"].shape == (300, 64)
    assert make_variance_network("lenet5-bn", num_classes=12)(torch.zeros(2, 1, 28, 28)).shape == (2, 12)
    for arch in ("lenet5-bn", "lenet5"):
        with pytest.raises(ValueError, match=r"built for inputs of shape 1x28x28, not 1x8x8; lenet300 reads inputs of any shape"):
            make_variance_network(arch, (1, 8, 8), 12)


def test_zero_mean_output_belongs_to_the_zero_mean_parameterization():
    pyro.clear_param_store()
    with pytest.raises(ValueError, match="zero_mean_output applies to the zero-mean parameterization only, not 'layer'"):
        train_variational_dropout("lenet300", "layer", _bands(8), epochs=1, zero_mean_output=True)
