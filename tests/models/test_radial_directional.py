"""RDP's radial-directional prior: groupings, weight composition, fallbacks and constants."""

import math

import pyro
import pytest
import torch
from pyro import poutine
from scipy import stats
from torch import nn

from pyrozoo.distributions import HypersphericalUniform, VonMisesFisher
from pyrozoo.ops.special import bessel_iv_ratio
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, RadialDirectionalPrior
from pyrozoo.models.radial_directional import GROUPINGS, LOCATION_SITE_KEY, compose_weight, decompose_weight, weight_groups
from pyrozoo.models.priors import INIT_VALUE_KEY

#: (layer factory, input shape)
LAYER_CASES = {
    "linear": (lambda: nn.Linear(7, 5), (4, 7)),
    "conv2d": (lambda: nn.Conv2d(3, 4, 3), (2, 3, 6, 6)),
    "conv1d": (lambda: nn.Conv1d(2, 6, 2), (2, 2, 5)),
}


def _trace(prior, layer, x_shape, dtype=torch.float64, device="cpu"):
    net = nn.Sequential(layer).to(device=device, dtype=dtype)
    model = BayesianNeuralNetwork(net, prior, GaussianLikelihood(precision=1.0))
    x = torch.randn(x_shape, dtype=dtype, device=device)
    return model, poutine.trace(model).get_trace(x), net


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("layer_name", list(LAYER_CASES))
def test_sites_shapes_and_weight(grouping, layer_name, device, dtype):
    make, x_shape = LAYER_CASES[layer_name]
    model, trace, net = _trace(RadialDirectionalPrior(grouping=grouping), make(), x_shape, dtype, device)
    weight = net[0].weight
    out, inp, kernel = weight.shape[0], weight.shape[1], math.prod(weight.shape[2:])
    kinds = {"double": ["row", "column"], "row": ["row"], "column": ["column"]}[grouping]
    factors = {}
    for kind in kinds:
        n, d = (out, inp * kernel) if kind == "row" else (inp, out * kernel)
        prefix = f"0.weight.{kind}_"
        for part in ("global_gamma", "global_inverse_gamma"):
            assert trace.nodes[prefix + part]["value"].shape == ()
        for part in ("local_gamma", "local_inverse_gamma"):
            assert trace.nodes[prefix + part]["value"].shape == (n,)
        direction = trace.nodes[prefix + "direction"]
        assert isinstance(direction["fn"].base_dist, VonMisesFisher) and direction["value"].shape == (n, d)
        assert direction["infer"][LOCATION_SITE_KEY] == prefix + "mean_direction"
        assert direction["value"].dtype == dtype and direction["value"].device.type == device.type
        radius = torch.stack([trace.nodes[prefix + p]["value"].expand(n) for p in ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma")]).prod(0).sqrt()
        factors[kind] = (radius, direction["value"])
    assert "0.bias" in trace.nodes  # biases: Normal fallback, named after the parameter
    # the network ran with the composed weight: its output is the layer applied to it
    expected = compose_weight(weight.shape, factors)
    x = trace.nodes["_INPUT"]["args"][0]
    out_value = trace.nodes["_RETURN"]["value"]
    torch.testing.assert_close(out_value, net[0]._conv_forward(x, expected, trace.nodes["0.bias"]["value"]) if layer_name != "linear" else torch.nn.functional.linear(x, expected, trace.nodes["0.bias"]["value"]))


@pytest.mark.parametrize("grouping", GROUPINGS)
def test_row_and_column_norms_are_the_radii(grouping):
    shape = torch.Size([4, 3, 2, 2])
    g = torch.Generator().manual_seed(0)
    factors = {}
    for group in weight_groups("w", shape, grouping):
        u = torch.randn(group.num_groups, group.dim, generator=g, dtype=torch.float64)
        factors[group.kind] = (torch.rand(group.num_groups, generator=g, dtype=torch.float64) + 0.5, u / u.norm(dim=-1, keepdim=True))
    w = compose_weight(shape, factors)
    if grouping == "row":
        torch.testing.assert_close(w.flatten(1).norm(dim=-1), factors["row"][0])
    elif grouping == "column":
        torch.testing.assert_close(w.transpose(0, 1).flatten(1).norm(dim=-1), factors["column"][0])
    else:  # W[o, i, k] = r_o u_o[i, k] * r_i u_i[o, k]  (eq. 18, flattened convolution)
        (r_row, u_row), (r_col, u_col) = factors["row"], factors["column"]
        o, i, k = 2, 1, 3
        expected = r_row[o] * u_row[o].reshape(3, 4)[i, k] * r_col[i] * u_col[i].reshape(4, 4)[o, k]
        assert float(w.reshape(4, 3, 4)[o, i, k]) == pytest.approx(float(expected))


@pytest.mark.parametrize("grouping", GROUPINGS)
@pytest.mark.parametrize("shape", [(5, 7), (4, 3, 3, 3), (6, 2, 4)])
def test_decomposition_recomposes_the_weight(grouping, shape):
    w = torch.randn(shape, dtype=torch.float64)
    w.view(-1)[:3] = 0.0  # zeros, and possibly an all-zero column of the double grouping
    factors = decompose_weight(w, grouping)
    for radius, direction in factors.values():
        torch.testing.assert_close(direction.norm(dim=-1), torch.ones_like(radius))
    torch.testing.assert_close(compose_weight(torch.Size(shape), factors), w)


def test_initial_values_recompose_the_network_weight():
    prior = RadialDirectionalPrior(local_scale=0.1, global_scale=0.01)
    model, trace, net = _trace(prior, nn.Linear(6, 4), (3, 6))
    factors = {}
    for kind in ("row", "column"):
        log_r = sum(0.5 * trace.nodes[f"0.weight.{kind}_{p}"]["infer"][INIT_VALUE_KEY].log() for p in ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma"))
        factors[kind] = (log_r.expand(trace.nodes[f"0.weight.{kind}_direction"]["value"].shape[0]).exp(), trace.nodes[f"0.weight.{kind}_direction"]["infer"][INIT_VALUE_KEY])
        # the Gamma factors start at their prior scale tau^2
        assert float(trace.nodes[f"0.weight.{kind}_global_gamma"]["infer"][INIT_VALUE_KEY]) == pytest.approx(1e-4)
        assert torch.allclose(trace.nodes[f"0.weight.{kind}_local_gamma"]["infer"][INIT_VALUE_KEY], torch.tensor(1e-2, dtype=torch.float64))
    torch.testing.assert_close(compose_weight(net[0].weight.shape, factors), net[0].weight.detach())


def test_dimension_one_layers_and_biases_fall_back_to_normal():
    net = MLP(4, [6], 1)  # the UCI output layer 6 -> 1
    model = BayesianNeuralNetwork(net, RadialDirectionalPrior(fallback_scale=0.5), GaussianLikelihood(precision=1.0))
    trace = poutine.trace(model).get_trace(torch.randn(3, 4))
    for name in ("2.weight", "0.bias", "2.bias"):
        fn = trace.nodes[name]["fn"]
        assert isinstance(fn.base_dist, pyro.distributions.Normal) and float(fn.base_dist.scale.flatten()[0]) == 0.5
    assert "0.weight.row_direction" in trace.nodes and "2.weight.row_direction" not in trace.nodes
    conv = nn.Conv2d(1, 4, 3)  # one input channel: LeNet-5's conv1
    assert not RadialDirectionalPrior.is_grouped(conv, "weight", conv.weight)


def test_radius_prior_is_a_product_of_half_cauchys():
    """sqrt(alpha beta) with alpha ~ Gamma(1/2, rate tau^-2), beta ~ InvGamma(1/2, 1) is C+(0, tau)."""
    prior = RadialDirectionalPrior(local_scale=0.3, global_scale=2.5)
    priors = prior._radial_priors(40_000, torch.float64, torch.device("cpu"))
    torch.manual_seed(0)
    local = (priors["local_gamma"].sample() * priors["local_inverse_gamma"].sample()).sqrt()
    glob = (priors["global_gamma"].sample((40_000,)) * priors["global_inverse_gamma"].sample((40_000,))).sqrt()
    assert stats.kstest(local.numpy(), stats.halfcauchy(scale=0.3).cdf).pvalue > 1e-3
    assert stats.kstest(glob.numpy(), stats.halfcauchy(scale=2.5).cdf).pvalue > 1e-3
    # a rate of tau^2 instead (the slip RDP's argument name invites) is detectably wrong
    wrong = (torch.distributions.Gamma(0.5, 0.3**2).sample((40_000,)) * priors["local_inverse_gamma"].sample()).sqrt()
    assert stats.kstest(wrong.numpy(), stats.halfcauchy(scale=0.3).cdf).pvalue < 1e-6


@pytest.mark.parametrize("epsilon", [0.5, 0.1])
def test_direction_prior_concentration(epsilon):
    prior = RadialDirectionalPrior(direction_epsilon=epsilon)
    for d in (13, 50, 800):
        kappa = prior.prior_concentration(d)
        assert float(bessel_iv_ratio(d / 2, torch.tensor(kappa, dtype=torch.float64))) == pytest.approx(1 - epsilon, rel=1e-9)
    assert RadialDirectionalPrior(direction_concentration=7.0).prior_concentration(100) == 7.0


def test_mean_direction_adds_nothing_to_the_joint_density():
    model, trace, _ = _trace(RadialDirectionalPrior(), nn.Linear(5, 3), (2, 5))
    trace.compute_log_prob()
    assert float(trace.nodes["0.weight.row_mean_direction"]["log_prob_sum"]) == 0.0
    uniform_prior = RadialDirectionalPrior(direction_prior="uniform")
    _, trace, _ = _trace(uniform_prior, nn.Linear(5, 3), (2, 5))
    assert "0.weight.row_mean_direction" not in trace.nodes
    assert isinstance(trace.nodes["0.weight.row_direction"]["fn"].base_dist, HypersphericalUniform)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"grouping": "diagonal"}, ValueError),
        ({"local_scale": 0.0}, ValueError),
        ({"global_scale": float("inf")}, ValueError),
        ({"direction_epsilon": 1.0}, ValueError),
        ({"direction_concentration": -1.0}, ValueError),
        ({"direction_prior": "normal"}, ValueError),
        ({"fallback_scale": -2.0}, ValueError),
    ],
)
def test_invalid_hyperparameters_raise(kwargs, error):
    with pytest.raises(error):
        RadialDirectionalPrior(**kwargs)


def test_unsupported_modules_raise():
    class Bilinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(3, 4))

        def forward(self, x):
            return x @ self.weight.T

    with pytest.raises(TypeError, match="Linear and convolution"):
        BayesianNeuralNetwork(Bilinear(), RadialDirectionalPrior(expose_parameters=["weight"]), GaussianLikelihood(precision=1.0))
    with pytest.raises(NotImplementedError, match="grouped convolution"):
        BayesianNeuralNetwork(nn.Conv2d(4, 4, 3, groups=2), RadialDirectionalPrior(), CategoricalLikelihood())
