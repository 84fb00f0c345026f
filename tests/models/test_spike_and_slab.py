"""The SSGL prior (Deng et al. 2019, Eq. 4): its hierarchical sites, the conditional of a
weight given its indicator, the empirical-Bayes site whose log-density is the Q term of
Eq. 10, and bad hyperparameters."""

import math

import pyro
import pytest
import torch
from pyro import poutine
from torch import nn

from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior


def cnn_like(device="cpu", dtype=torch.float32):
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to(device=device, dtype=dtype)


def ssgl(**kwargs):
    defaults = dict(v0=0.1, v1=10.0, sparse={"expose_modules": ["0"], "hide_parameters": ["bias"]}, gaussian_scale=0.5, nu=2.0, lam=3.0, a=2.0, b=30.0)
    return SpikeAndSlabPrior(**{**defaults, **kwargs})


def trace_model(model, x):
    return poutine.trace(model).get_trace(x)


def test_hierarchical_sites_and_conditionals(device):
    prior = ssgl()
    model = BayesianNeuralNetwork(cnn_like(device), prior, CategoricalLikelihood(None))
    x = torch.randn(4, 6, device=device)
    trace = trace_model(model, x)
    names = [n for n, s in trace.nodes.items() if s["type"] == "sample"]
    assert names[:4] == ["ssgl.sigma_sq", "0.weight.delta", "0.weight.gamma", "0.weight"]
    assert {"0.bias", "2.weight", "2.bias", "obs"} <= set(names)
    sigma = trace.nodes["ssgl.sigma_sq"]["value"].sqrt()
    gamma = trace.nodes["0.weight.gamma"]["value"]
    weight_site = trace.nodes["0.weight"]
    w = torch.linspace(-2, 2, 30, device=device).reshape(5, 6)
    laplace = torch.distributions.Laplace(0.0, sigma * prior.v0).log_prob(w)
    normal = torch.distributions.Normal(0.0, sigma * math.sqrt(prior.v1)).log_prob(w)
    expected = torch.where(gamma > 0, normal, laplace).sum()
    assert torch.allclose(weight_site["fn"].log_prob(w), expected, rtol=1e-5)
    bias = trace.nodes["0.bias"]["fn"]
    assert torch.allclose(bias.base_dist.scale, torch.tensor(0.5, device=device))


def test_prior_draws_match_the_hierarchy():
    """Across prior draws, the Gaussian-indicator rate follows delta (mean a / (a + b))."""
    prior = ssgl(a=3.0, b=7.0, sparse={"hide_parameters": ["bias"]})
    model = BayesianNeuralNetwork(nn.Linear(50, 40), prior, CategoricalLikelihood(None))
    x = torch.randn(2, 50)
    rates = torch.stack([trace_model(model, x).nodes["weight.gamma"]["value"].mean() for _ in range(300)])
    # Var of the rate: Var(delta) + E[delta(1-delta)] / 2000 for Beta(3, 7)
    var = 3 * 7 / (10**2 * 11) + (0.3 - (3 * 7 / (10**2 * 11) + 0.09)) / 2000
    assert abs(float(rates.mean()) - 0.3) < 5 * math.sqrt(var / 300)


def test_empirical_bayes_site_is_the_expected_log_density_of_eq_10(device, dtype):
    """The site's log_prob is E_gamma[log pi(beta | sigma, gamma)] with gamma ~ Bernoulli(rho),
    written with kappa_0, kappa_1 (Eq. 10, 13): when kappa = kappa~(rho) it is the rho-mixture
    of the two components' log-densities."""
    net = cnn_like(device, dtype)
    prior = ssgl()
    model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(None))
    state = prior.empirical_bayes(model, sigma=1.7)
    state.rho["0.weight"].uniform_(0.0, 1.0)
    state.kappa0["0.weight"].copy_((1 - state.rho["0.weight"]) / prior.v0)
    state.kappa1["0.weight"].copy_(state.rho["0.weight"] / prior.v1)
    trace = poutine.trace(poutine.condition(model, {"0.weight": net[0].weight.detach()})).get_trace(torch.randn(2, 6, device=device, dtype=dtype))
    site = trace.nodes["0.weight"]
    assert "0.weight.gamma" not in trace.nodes and "ssgl.sigma_sq" not in trace.nodes
    beta = torch.randn(5, 6, device=device, dtype=dtype) * 3
    sigma, rho = state.sigma, state.rho["0.weight"]
    laplace = torch.distributions.Laplace(torch.zeros((), device=device, dtype=dtype), sigma * prior.v0).log_prob(beta)
    normal = torch.distributions.Normal(torch.zeros((), device=device, dtype=dtype), sigma * math.sqrt(prior.v1)).log_prob(beta)
    expected = ((1 - rho) * laplace + rho * normal).sum()
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    assert torch.allclose(site["fn"].log_prob(beta), expected, rtol=tol, atol=tol)
    assert torch.allclose(site["infer"]["pyrozoo_init_value"], net[0].weight)
    with pytest.raises(NotImplementedError, match="hierarchical"):
        site["fn"].sample()


def test_empirical_bayes_defaults_follow_eq_13():
    prior = ssgl()
    model = BayesianNeuralNetwork(cnn_like(), prior, CategoricalLikelihood(None))
    state = prior.empirical_bayes(model, rho=0.25)
    assert torch.allclose(state.kappa0["0.weight"], torch.full((5, 6), 0.75 / 0.1))
    assert torch.allclose(state.kappa1["0.weight"], torch.full((5, 6), 0.25 / 10.0))
    assert state.num_sparse == 30 and state.names == ["0.weight"]
    prior.hierarchical()
    assert "ssgl.sigma_sq" in trace_model(model, torch.randn(2, 6)).nodes


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"v0": 0.0}, "v0"),
        ({"v1": -1.0}, "v1"),
        ({"a": 0.5}, "a must be >= 1"),
        ({"nu": float("inf")}, "nu"),
        ({"sparse": "fc1"}, "ParameterSelector"),
        ({"layer_scale": {"0.weight": 0.0}}, "layer_scale"),
        ({"layer_scale": [2.0]}, "layer_scale must be a dict"),
    ],
)
def test_invalid_hyperparameters_raise(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ssgl(**kwargs)


def test_sparse_selection_must_select_something():
    with pytest.raises(ValueError, match="no sparse layer"):
        BayesianNeuralNetwork(cnn_like(), ssgl(sparse={"expose_modules": ["fc9"]}), CategoricalLikelihood(None))


@pytest.mark.parametrize("kwargs, match", [({"rho": 1.5}, "rho"), ({"sigma": 0.0}, "sigma"), ({"kappa0": 0.0, "kappa1": 0.0}, "both be 0"), ({"kappa1": -1.0}, "kappa1")])
def test_invalid_empirical_bayes_initial_values_raise(kwargs, match):
    prior = ssgl()
    model = BayesianNeuralNetwork(cnn_like(), prior, CategoricalLikelihood(None))
    with pytest.raises(ValueError, match=match):
        prior.empirical_bayes(model, **kwargs)


def test_layer_scale_must_name_sparse_parameters():
    with pytest.raises(ValueError, match=r"layer_scale names \['2.weight'\], which are not sparse.*\['0.weight'\]"):
        BayesianNeuralNetwork(cnn_like(), ssgl(layer_scale={"2.weight": 2.0}), CategoricalLikelihood(None))


@pytest.mark.parametrize("form", ["empirical-bayes", "hierarchical"])
def test_layer_scale_carries_the_prior_to_rescaled_targets(form, device):
    """Dividing the targets by s divides sigma and the output layer's weights by s and leaves
    the hidden layer's alone. With layer_scale {hidden: s} the prior is the same prior in the
    new units: the hidden weights' log-density (under sigma / s) is unchanged, the output
    weights' (divided by s) changes by exactly the Jacobian numel * log s, and the SA's
    conditional probabilities rho~ and kappa~ (Eq. 12-13) are the same numbers."""
    from pyrozoo.inference.sgmcmc_sa import kappa_tilde, rho_tilde

    dtype, s, sigma = torch.float64, 7.3, 1.9
    sparse = {"hide_parameters": ["bias"]}
    net = cnn_like(device, dtype)
    weights = {"0.weight": net[0].weight.detach() * 5, "2.weight": net[2].weight.detach() * 5}
    rescaled = {"0.weight": weights["0.weight"], "2.weight": weights["2.weight"] / s}
    raw, scaled = ssgl(sparse=sparse), ssgl(sparse=sparse, layer_scale={"0.weight": s})
    log_prob = {}
    for key, prior, sig, w in (("raw", raw, sigma, weights), ("scaled", scaled, sigma / s, rescaled)):
        model = BayesianNeuralNetwork(cnn_like(device, dtype), prior, CategoricalLikelihood(None))
        x = torch.randn(2, 6, device=device, dtype=dtype)
        if form == "empirical-bayes":
            state = prior.empirical_bayes(model, sigma=sig, rho=0.3)
            trace = poutine.trace(poutine.condition(model, w)).get_trace(x)
        else:
            gammas = {f"{n}.gamma": (torch.arange(v.numel(), device=device).reshape(v.shape) % 3 == 0).to(dtype) for n, v in w.items()}
            fixed = {**w, **gammas, "ssgl.sigma_sq": torch.tensor(sig**2, device=device, dtype=dtype)}
            trace = poutine.trace(poutine.condition(model, fixed)).get_trace(x)
        log_prob[key] = {n: trace.nodes[n]["fn"].log_prob(w[n]).sum() for n in w}
        if form == "empirical-bayes":
            assert torch.allclose(state.kappa0["0.weight"], torch.full_like(w["0.weight"], 0.7 / prior.v0_of("0.weight")))
            log_prob[key]["rho"] = {n: rho_tilde(w[n], state.sigma, state.delta[n], prior.v0_of(n), prior.v1_of(n)) for n in w}
    assert torch.allclose(log_prob["scaled"]["0.weight"], log_prob["raw"]["0.weight"], rtol=1e-12)
    jacobian = weights["2.weight"].numel() * math.log(s)
    assert torch.allclose(log_prob["scaled"]["2.weight"], log_prob["raw"]["2.weight"] + jacobian, rtol=1e-12)
    if form == "empirical-bayes":
        for n in weights:
            rho_raw, rho_scaled = log_prob["raw"]["rho"][n], log_prob["scaled"]["rho"][n]
            assert torch.allclose(rho_scaled, rho_raw, rtol=1e-10) and 0.01 < float(rho_raw.mean()) < 0.99
            k_raw = kappa_tilde(rho_raw, raw.v0_of(n), raw.v1_of(n))
            k_scaled = kappa_tilde(rho_scaled, scaled.v0_of(n), scaled.v1_of(n))
            # kappa~ is in the units of v0 and v1: times c and c^2 over the layer's own units
            c = s if n == "0.weight" else 1.0
            assert torch.allclose(k_scaled[0] * c, k_raw[0], rtol=1e-10) and torch.allclose(k_scaled[1] * c**2, k_raw[1], rtol=1e-10)
        assert scaled.v0_of("0.weight") == raw.v0 * s and scaled.v1_of("0.weight") == raw.v1 * s**2 and scaled.v0_of("2.weight") == raw.v0


def test_prior_must_be_attached_before_sampling():
    with pytest.raises(RuntimeError, match="attached"):
        ssgl().sample_module("0", nn.Linear(2, 2), {"weight": torch.zeros(2, 2)})
    pyro.clear_param_store()
