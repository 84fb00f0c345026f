"""Priors: one sample site per selected parameter, named after it, on its device and dtype."""

import math

import numpy as np
import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch
from scipy import stats
from torch import nn

from pyrozoo.distributions import ScaleMixtureNormal
from pyrozoo.models import (
    FunctionPrior,
    IIDPrior,
    LayerwiseNormalPrior,
    NormalPrior,
    ParameterSelector,
    Prior,
    ScaleMixturePrior,
)
from pyrozoo.models.priors import INIT_VALUE_KEY


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.conv = nn.Conv2d(2, 4, 3)
        self.norm = nn.LayerNorm(5)
        self.fc2 = nn.Linear(5, 2, bias=False)


def _run_prior(prior, net):
    """Runs the prior as a Pyro model (module by module, as BayesianNeuralNetwork does)."""

    def model():
        groups = {}
        for module_name, module, param_name, param in prior.random_parameters(net):
            groups.setdefault(module_name, (module, {}))[1][param_name] = param
        return {
            f"{m}.{p}": v
            for m, (module, params) in groups.items()
            for p, v in prior.sample_module(m, module, params).items()
        }

    return poutine.trace(model).get_trace()


def _fn_prior(name, module, param):
    return dist.Laplace(torch.zeros_like(param), 0.5).to_event(param.dim())


# (id, factory, univariate reference log-density (value, param name, module) or None)
PRIOR_CASES = [
    ("iid-laplace", lambda **kw: IIDPrior(dist.Laplace(0.1, 0.3), **kw), lambda x, *_: stats.laplace.logpdf(x, 0.1, 0.3)),
    ("normal", lambda **kw: NormalPrior(scale=2.0, loc=-0.5, **kw), lambda x, *_: stats.norm.logpdf(x, -0.5, 2.0)),
    (
        "scale-mixture",
        lambda **kw: ScaleMixturePrior(0.25, 1.5, 0.1, **kw),
        lambda x, *_: np.log(0.25 * stats.norm.pdf(x, 0, 1.5) + 0.75 * stats.norm.pdf(x, 0, 0.1)),
    ),
    ("layerwise", lambda **kw: LayerwiseNormalPrior("xavier", **kw), None),
    ("function", lambda **kw: FunctionPrior(_fn_prior, **kw), lambda x, *_: stats.laplace.logpdf(x, 0.0, 0.5)),
]


@pytest.fixture(params=PRIOR_CASES, ids=[c[0] for c in PRIOR_CASES])
def prior_case(request):
    return request.param


def test_one_site_per_selected_parameter(prior_case, device, dtype):
    _, factory, reference = prior_case
    net = SmallNet().to(device=device, dtype=dtype)
    prior = factory(hide_types=[nn.LayerNorm])
    trace = _run_prior(prior, net)
    params = dict(net.named_parameters())
    expected = [n for n in params if not n.startswith("norm.")]
    sites = [name for name, site in trace.nodes.items() if site["type"] == "sample"]
    assert sites == expected
    for name in sites:
        site, param = trace.nodes[name], params[name]
        fn = site["fn"]
        assert fn.event_shape == param.shape and fn.batch_shape == ()
        assert site["value"].shape == param.shape
        assert site["value"].dtype == dtype and site["value"].device.type == device.type
        # the network's own value travels to the guide, detached and unchanged
        init = site["infer"][INIT_VALUE_KEY]
        assert torch.equal(init, param) and not init.requires_grad
        lp = fn.log_prob(site["value"])
        assert lp.shape == () and lp.dtype == dtype and lp.device.type == device.type


def test_log_density_matches_reference(prior_case):
    _, factory, reference = prior_case
    if reference is None:
        pytest.skip("checked in test_layerwise_scales")
    net = SmallNet().double()
    prior = factory()
    for module_name, module, param_name, param in prior.random_parameters(net):
        name = f"{module_name}.{param_name}"
        d = prior.distribution(name, module, param)
        x = torch.randn(param.shape, dtype=torch.float64)
        expected = reference(x.numpy(), param_name, module).sum()
        # hyperparameters given as Python floats are held in float32 (relative error ~1e-8)
        assert d.log_prob(x).item() == pytest.approx(float(expected), rel=1e-6)


def test_distribution_follows_parameter_dtype_and_device(prior_case, device):
    """The same site queried after the network moved to float64 (and to the device) gets a
    distribution there, not a stale cached one."""
    _, factory, _ = prior_case
    prior = factory()
    net = SmallNet()
    module, param = net.fc1, net.fc1.weight
    d32 = prior.distribution("fc1.weight", module, param)
    net = net.to(device=device, dtype=torch.float64)
    d64 = prior.distribution("fc1.weight", net.fc1, net.fc1.weight)
    x32 = d32.sample()
    assert x32.dtype == torch.float32
    x64 = d64.sample()
    assert x64.dtype == torch.float64 and x64.device.type == device.type
    assert d64.log_prob(x64).dtype == torch.float64


def test_selection_keywords_and_selector_object_are_equivalent():
    net = SmallNet()
    by_kwargs = NormalPrior(1.0, hide_parameters=["bias"]).random_parameters(net)
    by_object = NormalPrior(1.0, selector=ParameterSelector(hide_parameters=["bias"])).random_parameters(net)
    assert [(m, p) for m, _, p, _ in by_kwargs] == [(m, p) for m, _, p, _ in by_object]
    assert all(p == "weight" for _, _, p, _ in by_kwargs)


@pytest.mark.parametrize("method", ["radford", "xavier", "kaiming"])
def test_layerwise_scales(method):
    """Scales from each layer's fan-in / fan-out (Neal 1996; Glorot & Bengio 2010; He et al.
    2015); biases take their module's weight scale."""
    net = SmallNet()
    # fan_in, fan_out of fc1 (Linear 3->5), conv (2->4, 3x3 kernels), fc2 (Linear 5->2)
    fans = {"fc1": (3, 5), "conv": (2 * 9, 4 * 9), "fc2": (5, 2)}
    expected_scale = {
        "radford": lambda fi, fo: 1 / math.sqrt(fi),
        "xavier": lambda fi, fo: math.sqrt(2 / (fi + fo)),
        "kaiming": lambda fi, fo: math.sqrt(2 / fi),
    }[method]
    prior = LayerwiseNormalPrior(method, expose_types=[nn.Linear, nn.Conv2d])
    trace = _run_prior(prior, net)
    names = [n for n, s in trace.nodes.items() if s["type"] == "sample"]
    assert names == ["fc1.weight", "fc1.bias", "conv.weight", "conv.bias", "fc2.weight"]
    for name in names:
        fn = trace.nodes[name]["fn"]
        scale = expected_scale(*fans[name.split(".")[0]])
        torch.testing.assert_close(fn.mean, torch.zeros(fn.event_shape))
        torch.testing.assert_close(fn.variance, torch.full(fn.event_shape, scale**2))


def test_scale_mixture_prior_uses_the_mixture():
    prior = ScaleMixturePrior(0.3, 2.0, 0.05)
    d = prior.distribution("w", nn.Linear(2, 2), torch.zeros(4, 2))
    base = d.base_dist.base_dist if isinstance(d.base_dist, torch.distributions.Independent) else d.base_dist
    while not isinstance(base, ScaleMixtureNormal):
        base = base.base_dist
    assert base.pi.unique().tolist() == pytest.approx([0.3])
    assert d.event_shape == (4, 2)
    torch.testing.assert_close(d.variance, torch.full((4, 2), 0.3 * 4.0 + 0.7 * 0.05**2))


def test_function_prior_is_evaluated_every_call():
    """FunctionPrior may depend on learnable hyperparameters: no caching across calls."""
    scale = torch.tensor(1.0)
    prior = FunctionPrior(lambda name, module, p: dist.Normal(torch.zeros_like(p), scale).to_event(p.dim()))
    param = torch.zeros(3)
    x = torch.ones(3)
    before = prior.distribution("b", nn.Linear(3, 3), param).log_prob(x)
    scale.fill_(2.0)
    after = prior.distribution("b", nn.Linear(3, 3), param).log_prob(x)
    assert after.item() == pytest.approx(float(stats.norm.logpdf(1.0, 0, 2.0) * 3), rel=1e-6)
    assert before.item() != pytest.approx(after.item())


def test_function_prior_wrong_shape_raises():
    prior = FunctionPrior(lambda name, module, p: dist.Normal(0.0, 1.0).expand(p.shape))  # batch, not event
    with pytest.raises(ValueError, match="fc1.weight"):
        prior.distribution("fc1.weight", nn.Linear(2, 3), torch.zeros(3, 2))
    prior = FunctionPrior(lambda name, module, p: dist.Normal(0.0, 1.0).expand((7,)).to_event(1))
    with pytest.raises(ValueError, match="event_shape"):
        prior.distribution("b", nn.Linear(2, 3), torch.zeros(3))


def test_structured_prior_must_override():
    with pytest.raises(NotImplementedError):
        Prior().distribution("w", nn.Linear(2, 2), torch.zeros(2, 2))


@pytest.mark.parametrize(
    "make,error",
    [
        (lambda: NormalPrior(scale=0.0), ValueError),
        (lambda: NormalPrior(scale=-1.0), ValueError),
        (lambda: NormalPrior(scale=float("nan")), ValueError),
        (lambda: NormalPrior(scale=float("inf")), ValueError),
        (lambda: NormalPrior(scale="1"), ValueError),
        (lambda: IIDPrior(torch.zeros(3)), TypeError),
        (lambda: IIDPrior(dist.Normal(torch.zeros(2), 1.0)), ValueError),
        (lambda: IIDPrior(dist.MultivariateNormal(torch.zeros(2), torch.eye(2))), ValueError),
        (lambda: ScaleMixturePrior(pi=1.5), ValueError),
        (lambda: ScaleMixturePrior(sigma1=-1.0), ValueError),
        (lambda: ScaleMixturePrior(sigma2=0.0), ValueError),
        (lambda: LayerwiseNormalPrior("glorot"), ValueError),
        (lambda: FunctionPrior("not callable"), TypeError),
        (lambda: NormalPrior(1.0, selector=ParameterSelector(), hide_parameters=["bias"]), ValueError),
        (lambda: NormalPrior(1.0, expose_types=["Linear"]), TypeError),
    ],
    ids=[
        "normal-zero-scale", "normal-negative-scale", "normal-nan-scale", "normal-inf-scale", "normal-string-scale",
        "iid-not-a-distribution", "iid-batched", "iid-multivariate", "mixture-pi", "mixture-sigma1", "mixture-sigma2",
        "layerwise-method", "function-not-callable", "selector-and-kwargs", "bad-selector-kwarg",
    ],
)
def test_invalid_hyperparameters_raise(make, error):
    with pytest.raises(error):
        make()
