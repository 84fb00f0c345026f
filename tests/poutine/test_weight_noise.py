"""Local reparameterization and flipout: unbiased layer outputs, per-example noise, fallbacks."""

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.poutine import NormalWeight, flipout, local_reparameterization, weight_means, weights_per_example
from tests.stats import gaussian_variance_rel_tolerance, mean_tolerance

HANDLERS = {"local": local_reparameterization, "flipout": flipout, "per-example": weights_per_example}

# (layer function, input shape, weight shape, bias shape, keyword arguments)
LAYER_CASES = [
    ("linear", F.linear, (6, 5), (4, 5), (4,), {}),
    ("linear-no-bias", F.linear, (6, 5), (4, 5), None, {}),
    ("conv1d", F.conv1d, (3, 2, 7), (4, 2, 3), (4,), {"padding": 1}),
    ("conv2d", F.conv2d, (3, 2, 6, 6), (5, 2, 3, 3), (5,), {"stride": 2}),
    ("conv2d-groups", F.conv2d, (2, 4, 5, 5), (4, 2, 3, 3), None, {"groups": 2}),
]


def _sample_outputs(func, x, w_loc, w_scale, b_loc, b_scale, handler, num_samples, kwargs):
    """Outputs of ``func`` with weights drawn through a Pyro site under ``handler``."""

    def layer():
        w = pyro.sample("w", dist.Normal(w_loc, w_scale).to_event(w_loc.dim()))
        b = None if b_loc is None else pyro.sample("b", dist.Normal(b_loc, b_scale).to_event(1))
        return func(x, w, b, **kwargs)

    outs = []
    for _ in range(num_samples):
        if handler is None:
            outs.append(layer())
        else:
            with HANDLERS[handler]():
                outs.append(layer())
    return torch.stack(outs)


@pytest.mark.parametrize("handler", ["local", "flipout", "per-example"])
@pytest.mark.parametrize("name,func,x_shape,w_shape,b_shape,kwargs", LAYER_CASES, ids=[c[0] for c in LAYER_CASES])
def test_output_moments_match_weight_sampling(handler, name, func, x_shape, w_shape, b_shape, kwargs, device):
    """Mean and per-unit variance of the handler's outputs equal the exact moments under
    weight sampling: mean f(x, loc) and variance f(x^2, scale^2) (+ bias variance)."""
    torch.manual_seed(0)
    dtype = torch.float64
    x = torch.randn(x_shape, dtype=dtype, device=device)
    w_loc = torch.randn(w_shape, dtype=dtype, device=device)
    w_scale = torch.rand(w_shape, dtype=dtype, device=device) + 0.1
    b_loc = None if b_shape is None else torch.randn(b_shape, dtype=dtype, device=device)
    b_scale = None if b_shape is None else torch.rand(b_shape, dtype=dtype, device=device) + 0.1
    exact_mean = func(x, w_loc, b_loc, **kwargs)
    exact_var = func(x * x, w_scale**2, None if b_scale is None else b_scale**2, **kwargs)
    S = 4000
    outs = _sample_outputs(func, x, w_loc, w_scale, b_loc, b_scale, handler, S, kwargs)
    k = exact_mean.numel()
    assert (outs.mean(0) - exact_mean).abs().le(mean_tolerance(exact_var, S, k)).all()
    rel = outs.var(0) / exact_var - 1
    assert rel.abs().max() < gaussian_variance_rel_tolerance(S, k)


@pytest.mark.parametrize("handler", ["local", "flipout", "per-example"])
def test_examples_get_independent_noise(handler):
    """Identical inputs in one minibatch get different outputs (per-example noise); under
    plain weight sampling they would coincide."""
    torch.manual_seed(0)
    x = torch.randn(1, 5).expand(8, 5)
    outs = _sample_outputs(F.linear, x, torch.zeros(3, 5), torch.ones(3, 5), None, None, handler, 1, {})[0]
    assert torch.unique(outs[:, 0]).numel() == 8
    plain = _sample_outputs(F.linear, x, torch.zeros(3, 5), torch.ones(3, 5), None, None, None, 1, {})[0]
    assert torch.unique(plain[:, 0]).numel() == 1


def test_other_uses_see_one_consistent_sample():
    """Outside linear/conv calls the stand-in is an ordinary sample, drawn once."""
    torch.manual_seed(0)
    with local_reparameterization():
        w = pyro.sample("w", dist.Normal(torch.zeros(4, 3), 1.0).to_event(2))
    assert isinstance(w, NormalWeight)
    a, b = w * 1.0, w + 0.0
    assert torch.equal(a, b) and a.std() > 0.1
    assert w.shape == (4, 3) and w.dtype == torch.float32


def test_log_scale_normal_sites_use_cached_variance():
    loc, log_scale = torch.zeros(2, 3), torch.full((2, 3), -1.0)
    with local_reparameterization():
        w = pyro.sample("w", LogScaleNormal(loc, log_scale).to_event(2))
    assert torch.allclose(w.variance, torch.exp(2 * log_scale))


def test_gradients_reach_loc_and_scale():
    loc = torch.randn(3, 4, requires_grad=True)
    log_scale = torch.full((3, 4), -1.0, requires_grad=True)
    x = torch.randn(5, 4)
    with local_reparameterization():
        w = pyro.sample("w", LogScaleNormal(loc, log_scale).to_event(2))
        out = F.linear(x, w)
    out.square().sum().backward()
    assert loc.grad.abs().sum() > 0 and log_scale.grad.abs().sum() > 0


def test_zero_input_rows_give_finite_gradients():
    """A dead-ReLU row (all inputs zero) has zero output variance; the gradient stays finite."""
    log_scale = torch.full((3, 4), -1.0, requires_grad=True)
    x = torch.zeros(2, 4)
    with local_reparameterization():
        w = pyro.sample("w", LogScaleNormal(torch.zeros(3, 4), log_scale).to_event(2))
        F.linear(x, w).sum().backward()
    assert torch.isfinite(log_scale.grad).all()


def test_non_normal_sites_are_untouched():
    with local_reparameterization():
        z = pyro.sample("z", dist.Laplace(torch.zeros(3), 1.0).to_event(1))
    assert not isinstance(z, NormalWeight)


@pytest.mark.parametrize("name,func,x_shape,w_shape,b_shape,kwargs", LAYER_CASES, ids=[c[0] for c in LAYER_CASES])
def test_weight_means_is_the_layer_at_the_posterior_mean(name, func, x_shape, w_shape, b_shape, kwargs):
    x = torch.randn(x_shape)
    w_loc, b_loc = torch.randn(w_shape), None if b_shape is None else torch.randn(b_shape)

    def layer():
        w = pyro.sample("w", dist.Normal(w_loc, 1.0).to_event(len(w_shape)))
        b = None if b_loc is None else pyro.sample("b", dist.Normal(b_loc, 1.0).to_event(1))
        return func(x, w, b, **kwargs)

    with weight_means():
        assert torch.allclose(layer(), func(x, w_loc, b_loc, **kwargs))


def test_per_example_weights_differ_between_examples_of_a_conv():
    """The grouped-convolution folding gives each example its own filter: two identical
    images get different outputs, and a single image has the same statistics as before."""
    x = torch.randn(1, 2, 5, 5).expand(3, 2, 5, 5)
    with weights_per_example():
        w = pyro.sample("w", dist.Normal(torch.zeros(4, 2, 3, 3), 1.0).to_event(4))
        out = F.conv2d(x, w)
    assert out.shape == (3, 4, 3, 3)
    assert not torch.allclose(out[0], out[1])
