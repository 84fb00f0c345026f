"""BayesianNeuralNetwork: sites from the prior's selection, point estimates in the param
store, the network left untouched, and the direct-evaluation API agreeing with a trace."""

import copy

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
from pyro.poutine.util import site_is_subsample
import pytest
import torch
from torch import nn
from torch.func import functional_call

from pyrozoo.models import (
    MLP,
    BayesianNeuralNetwork,
    CategoricalLikelihood,
    GaussianLikelihood,
    IIDPrior,
    NormalPrior,
    Prior,
    ScaleMixturePrior,
)

N = 40


def _regression(device, dtype, n=10):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=dtype).to(device)
    y = torch.randn(n, 1, generator=g, dtype=dtype).to(device)
    return x, y


def _classification(device, dtype, n=10):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g, dtype=dtype).to(device)
    y = torch.randint(0, 2, (n,), generator=g).to(device)
    return x, y


# (id, prior factory, likelihood factory, data factory)
MODEL_CASES = [
    ("normal-all-gaussian-fixed", lambda: NormalPrior(1.0), lambda: GaussianLikelihood(N, precision=2.0), _regression),
    ("normal-weights-gaussian-gamma", lambda: NormalPrior(1.0, hide_parameters=["bias"]), lambda: GaussianLikelihood(N, precision=dist.Gamma(2.0, 1.0)), _regression),
    ("mixture-first-layer-categorical", lambda: ScaleMixturePrior(expose_modules=["0"]), lambda: CategoricalLikelihood(N), _classification),
    ("laplace-last-weight-categorical", lambda: IIDPrior(dist.Laplace(0.0, 1.0), expose_parameters=["2.weight"]), lambda: CategoricalLikelihood(N), _classification),
]


@pytest.fixture(params=MODEL_CASES, ids=[c[0] for c in MODEL_CASES])
def model_case(request, device, dtype):
    _, prior, likelihood, data = request.param
    out = 1 if data is _regression else 2
    torch.manual_seed(0)
    net = MLP(3, [4], out).to(device=device, dtype=dtype)
    model = BayesianNeuralNetwork(net, prior(), likelihood())
    x, y = data(device, dtype)
    return model, x, y


def _latent_names(trace):
    return [
        name
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
    ]


def test_sites_match_the_prior_selection(model_case):
    model, x, y = model_case
    trace = poutine.trace(model).get_trace(x, y)
    selected = [f"{m}.{p}" if m else p for m, _, p, _ in model.prior.random_parameters(model.net)]
    assert selected == model.random_parameter_names
    latent = _latent_names(trace)
    assert latent == selected + [name for name, _ in model.likelihood.latent_sites(x).values()]
    params = dict(model.net.named_parameters())
    for name in selected:
        assert trace.nodes[name]["value"].shape == params[name].shape
    assert trace.nodes["obs"]["is_observed"]
    assert sorted(model.deterministic_parameter_names) == sorted(set(params) - set(selected))


def test_deterministic_parameters_are_in_the_param_store(model_case):
    model, x, y = model_case
    trace = poutine.trace(model).get_trace(x, y)
    store = pyro.get_param_store()
    params = dict(model.net.named_parameters())
    for name in model.deterministic_parameter_names:
        key = f"net.{name}"
        assert key in store
        torch.testing.assert_close(store[key], params[name])
        assert trace.nodes[key]["type"] == "param"
    for name in model.random_parameter_names:
        assert f"net.{name}" not in store


def test_param_store_values_are_used(model_case):
    """SVI trains the point estimates through the param store: a changed value there changes
    the model's output, and the network itself still holds its own value."""
    model, x, y = model_case
    if not model.deterministic_parameter_names:
        pytest.skip("every parameter is random")
    name = model.deterministic_parameter_names[0]
    model(x, y)
    original = dict(model.net.named_parameters())[name].detach().clone()
    new_value = torch.full_like(original, 0.37)
    pyro.get_param_store()[f"net.{name}"] = new_value
    trace = poutine.trace(model).get_trace(x, y)
    values = {n: trace.nodes[n]["value"] for n in model.random_parameter_names}
    values[name] = new_value
    expected = functional_call(model.net, values, (x,), strict=False)
    torch.testing.assert_close(trace.nodes["_RETURN"]["value"], expected)
    torch.testing.assert_close(dict(model.net.named_parameters())[name].detach(), original)


def test_network_is_unchanged_by_calls(model_case):
    model, x, y = model_case
    before = copy.deepcopy(model.net.state_dict())
    ids = {n: id(p) for n, p in model.net.named_parameters()}
    for _ in range(3):
        out = model(x, y)
        out.sum().backward() if out.requires_grad else None
    model(x)  # predicting
    after = model.net.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    assert {n: id(p) for n, p in model.net.named_parameters()} == ids
    assert all(isinstance(p, nn.Parameter) for p in model.net.parameters())
    # the network is still a usable deterministic network
    assert model.net(x).shape[0] == x.shape[0]


def test_return_value_is_the_network_output_with_sampled_parameters(model_case):
    model, x, y = model_case
    trace = poutine.trace(model).get_trace(x, y)
    values = {n: trace.nodes[n]["value"] for n in model.random_parameter_names}
    out = trace.nodes["_RETURN"]["value"]
    torch.testing.assert_close(out, functional_call(model.net, values, (x,), strict=False))
    torch.testing.assert_close(out, model.net_output(values, x))
    # sampled weights are not the network's own
    assert not torch.allclose(out, model.net(x))


def test_latent_sites_agree_with_the_trace(model_case):
    model, x, y = model_case
    trace = poutine.trace(model).get_trace(x, y)
    trace.compute_log_prob()
    sites = model.latent_sites(x)
    assert [name for name, _ in sites] == _latent_names(trace)
    for name, prior in sites:
        site = trace.nodes[name]
        assert prior.event_shape == site["fn"].event_shape and prior.batch_shape == site["fn"].batch_shape
        torch.testing.assert_close(prior.log_prob(site["value"]), site["log_prob"])


@pytest.mark.parametrize("minibatch", [False, True], ids=["full", "minibatch"])
def test_log_likelihood_agrees_with_the_trace(model_case, minibatch):
    model, x, y = model_case
    subsample = None
    if minibatch:
        subsample = torch.arange(2, 7, device=x.device)
        x, y = x[2:7], y[2:7]
    trace = poutine.trace(model).get_trace(x, y, subsample)
    trace.compute_log_prob()
    values = {name: trace.nodes[name]["value"] for name in _latent_names(trace)}
    expected = trace.log_prob_sum(lambda name, site: name == "obs")
    torch.testing.assert_close(model.log_likelihood(values, x, y, subsample), expected)
    # and the full log joint of the trace is latent priors + this
    priors = sum(prior.log_prob(values[name]) for name, prior in model.latent_sites(x))
    torch.testing.assert_close(trace.log_prob_sum(), priors + expected)


def test_predictive_sampling_more_points_than_the_dataset(device):
    model = BayesianNeuralNetwork(MLP(3, [4], 1).to(device), NormalPrior(1.0), GaussianLikelihood(5, precision=1.0))
    x = torch.randn(12, 3, device=device)
    samples = pyro.infer.Predictive(model, num_samples=4, return_sites=["obs", "_RETURN", "0.weight"])(x)
    assert samples["obs"].shape == (4, 12, 1)
    assert samples["_RETURN"].shape == (4, 12, 1)
    assert samples["0.weight"].shape[-2:] == (4, 3) and samples["0.weight"].numel() == 4 * 12


def test_structured_prior_has_no_direct_evaluation():
    class GroupScale(Prior):
        one_site_per_parameter = False

        def sample_module(self, module_name, module, params):
            s = pyro.sample(f"{module_name}.scale", dist.HalfNormal(1.0))
            return {k: pyro.sample(f"{module_name}.{k}", dist.Normal(0.0, s).expand(p.shape).to_event(p.dim())) for k, p in params.items()}

    model = BayesianNeuralNetwork(MLP(3, [4], 1), GroupScale(expose_modules=["0"]), GaussianLikelihood(precision=1.0))
    x, y = _regression("cpu", torch.float32)
    assert model.latent_sites(x) is None
    trace = poutine.trace(model).get_trace(x, y)
    assert _latent_names(trace) == ["0.scale", "0.weight", "0.bias"]


def test_constructor_errors():
    net = MLP(3, [4], 1)
    with pytest.raises(ValueError, match="selects no parameter"):
        BayesianNeuralNetwork(net, NormalPrior(1.0, expose_parameters=["nonexistent"]), GaussianLikelihood())
    with pytest.raises(TypeError, match="nn.Module"):
        BayesianNeuralNetwork(lambda x: x, NormalPrior(1.0), GaussianLikelihood())
    with pytest.raises(TypeError, match="Prior"):
        BayesianNeuralNetwork(net, dist.Normal(0.0, 1.0), GaussianLikelihood())
    with pytest.raises(TypeError, match="Likelihood"):
        BayesianNeuralNetwork(net, NormalPrior(1.0), dist.Normal(0.0, 1.0))
