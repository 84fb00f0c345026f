"""Group-scale priors of Bayesian compression: structure and the half-Cauchy decomposition."""

import math

import pyro
import pytest
import torch
from pyro import poutine
from torch import nn

from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, LeNet5
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior, group_dim

QUANTILES = [0.1, 0.25, 0.5, 0.75, 0.9]


def _half_cauchy_quantile_tolerance(q, scale, n, num_comparisons):
    """z-bound times the asymptotic standard error of an empirical quantile,
    sqrt(q (1 - q) / n) / f(x_q), with the half-Cauchy density f(x) = 2 / (pi b (1 + (x/b)^2))."""
    from tests.stats import z_bound

    x = scale * math.tan(math.pi * q / 2)
    density = 2 / (math.pi * scale * (1 + (x / scale) ** 2))
    return z_bound(num_comparisons) * math.sqrt(q * (1 - q) / n) / density


@pytest.mark.parametrize("tau0", [1e-5, 0.3, 1.0])
def test_half_cauchy_decomposition_quantiles(tau0, device):
    """sqrt(Gamma(1/2, rate b^-2) * InvGamma(1/2, 1)) is half-Cauchy(0, b): empirical quantiles
    of the prior's global (b = tau0) and local (b = 1) factors match b tan(pi q / 2)."""
    prior = GroupHorseshoePrior(tau0=tau0)
    parts = prior._site_priors(3, torch.float64, device)
    n = 200_000
    pyro.set_rng_seed(0)
    s = (parts["global_a"].sample((n,)) * parts["global_b"].sample((n,))).sqrt()
    z = (parts["local_a"].sample((n,)) * parts["local_b"].sample((n,))).sqrt()[:, 0]
    k = 2 * len(QUANTILES)
    for values, scale in ((s, tau0), (z, 1.0)):
        empirical = torch.quantile(values.cpu(), torch.tensor(QUANTILES, dtype=torch.float64))
        for q, e in zip(QUANTILES, empirical.tolist()):
            expected = scale * math.tan(math.pi * q / 2)
            assert abs(e - expected) <= _half_cauchy_quantile_tolerance(q, scale, n, k), (q, e, expected)


@pytest.mark.parametrize("prior_cls", [GroupNormalJeffreysPrior, GroupHorseshoePrior], ids=lambda c: c.__name__)
def test_sites_groups_and_scales(prior_cls):
    net = LeNet5()
    prior = prior_cls()
    model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(dataset_size=10))
    x = torch.rand(2, 1, 28, 28)
    from pyro.infer.autoguide.initialization import InitMessenger

    from pyrozoo.guides.initialization import init_to_network

    trace = poutine.trace(InitMessenger(init_to_network)(model)).get_trace(x)
    latent = [name for name, site in trace.nodes.items() if site["type"] == "sample" and not site["is_observed"]]
    for layer, module in (("conv1", net.conv1), ("conv2", net.conv2), ("fc1", net.fc1), ("fc2", net.fc2)):
        weight = f"{layer}.weight"
        factors = prior.scale_factors(weight)
        # the scale sites come before their weight, and groups follow Louizos et al.
        assert latent.index(weight) > max(latent.index(site) for site, _ in factors)
        G = module.weight.shape[group_dim(module)]
        assert G == (module.out_channels if isinstance(module, nn.Conv2d) else module.in_features)
        values = {site: trace.nodes[site]["value"] for site, _ in factors}
        scale = prior.weight_scale(weight, values)
        assert scale.shape == prior.group_shape(weight)
        prior_w = trace.nodes[weight]["fn"].base_dist
        torch.testing.assert_close(prior_w.scale, scale.abs().expand(module.weight.shape))
        assert torch.equal(prior_w.loc, torch.zeros_like(module.weight))
    assert "fc1.bias" not in latent  # biases stay point estimates


def test_initial_group_scale_of_the_horseshoe():
    prior = GroupHorseshoePrior(tau0=1e-4, init_scale=0.5)
    model = BayesianNeuralNetwork(MLP(3, [4], 2), prior, CategoricalLikelihood(dataset_size=10))
    from pyro.infer.autoguide.initialization import InitMessenger

    from pyrozoo.guides.initialization import init_to_network

    trace = poutine.trace(InitMessenger(init_to_network)(model)).get_trace(torch.rand(2, 3))
    values = {name: site["value"] for name, site in trace.nodes.items() if site["type"] == "sample"}
    torch.testing.assert_close(prior.weight_scale("0.weight", values), torch.full((1, 3), 0.5))


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="tau0"):
        GroupHorseshoePrior(tau0=0.0)
    with pytest.raises(ValueError, match="tau0"):
        GroupHorseshoePrior(tau0=-1.0)
    with pytest.raises(ValueError, match="init_scale"):
        GroupHorseshoePrior(init_scale=math.inf)
    with pytest.raises(ValueError, match="hide biases"):
        BayesianNeuralNetwork(MLP(3, [4], 2), GroupNormalJeffreysPrior(expose_parameters=["bias"]), CategoricalLikelihood(10))
    with pytest.raises(TypeError, match="Linear and Conv"):
        net = nn.Sequential(nn.Linear(3, 4), nn.Bilinear(4, 4, 2))
        BayesianNeuralNetwork(net, GroupNormalJeffreysPrior(expose_types=[nn.Linear, nn.Bilinear], hide_parameters=["bias"]), CategoricalLikelihood(10))
