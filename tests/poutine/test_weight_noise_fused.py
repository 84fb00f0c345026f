"""The fused local-reparameterization layers (issue 26) against their autograd reference:
the same output bit for bit from the same random stream, the same gradients to rounding."""

import pyro
import pytest
import torch
import torch.nn.functional as F

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.poutine import local_reparameterization
from pyrozoo.poutine.weight_noise import _GaussianOutput, _LocalReparameterizedLinear, local_reparameterization_reference

# (name, input shape, weight shape, bias: "normal" | "point" | None, input needs grad)
CASES = [
    ("batch", (6, 5), (4, 5), "normal", True),
    ("first-layer", (6, 5), (4, 5), "normal", False),
    ("no-bias", (6, 5), (4, 5), None, True),
    ("point-bias", (6, 5), (4, 5), "point", True),
    ("leading-dims", (2, 3, 5), (4, 5), "normal", True),
    ("one-example", (5,), (4, 5), "normal", True),
]


def _layer(x, w_loc, w_log_scale, b_loc, b_log_scale, bias):
    w = pyro.sample("w", LogScaleNormal(w_loc, w_log_scale).to_event(2))
    if bias == "normal":
        b = pyro.sample("b", LogScaleNormal(b_loc, b_log_scale).to_event(1))
    else:
        b = b_loc if bias == "point" else None
    return F.linear(x, w, b)


def _output_and_grads(handler, x, params, bias, seed):
    torch.manual_seed(seed)
    with handler():
        out = _layer(x, *params, bias)
    inputs = [t for t in (x, *params) if t is not None and t.requires_grad]
    # a fixed, non-constant output gradient
    weights = torch.linspace(-1.0, 2.0, out.numel(), dtype=out.dtype).reshape(out.shape)
    return out, torch.autograd.grad((out * weights).sum(), inputs)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("name,x_shape,w_shape,bias,x_grad", CASES, ids=[c[0] for c in CASES])
def test_fused_layer_equals_the_reference(name, x_shape, w_shape, bias, x_grad, dtype):
    """Same seed: identical outputs (the same operations on the same noise), gradients of the
    input, means and log-scales equal to rounding (only summation orders differ)."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(x_shape, generator=gen, dtype=dtype)
    if x.dim() > 1:
        x[0] = 0.0  # a dead input row: clamped variance, zero gradient through the noise
    x.requires_grad_(x_grad)
    w_loc = torch.randn(w_shape, generator=gen, dtype=dtype).requires_grad_()
    w_log_scale = (torch.rand(w_shape, generator=gen, dtype=dtype) - 2.0).requires_grad_()
    b_loc = None if bias is None else torch.randn(w_shape[0], generator=gen, dtype=dtype).requires_grad_()
    b_log_scale = (torch.rand(w_shape[0], generator=gen, dtype=dtype) - 2.0).requires_grad_() if bias == "normal" else None
    params = (w_loc, w_log_scale, b_loc, b_log_scale)
    out, grads = _output_and_grads(local_reparameterization, x, params, bias, seed=3)
    ref_out, ref_grads = _output_and_grads(local_reparameterization_reference, x, params, bias, seed=3)
    assert torch.equal(out, ref_out)
    assert len(grads) == len(ref_grads)
    eps = torch.finfo(dtype).eps
    for g, r in zip(grads, ref_grads):
        # a few roundings of sums of at most 6 terms, relative to the gradient's scale
        torch.testing.assert_close(g, r, rtol=16 * eps, atol=16 * eps * r.abs().max().item())


def test_fused_layer_gradcheck():
    """The written-out backward pass is the derivative of the forward (finite differences in
    float64, the noise held fixed), including the dead-row zero."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    x[1] = 0.0
    x.requires_grad_()
    loc = torch.randn(2, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    var = (torch.rand(2, 3, generator=gen, dtype=torch.float64) + 0.1).requires_grad_()
    b_loc = torch.randn(2, generator=gen, dtype=torch.float64, requires_grad=True)
    b_var = (torch.rand(2, generator=gen, dtype=torch.float64) + 0.1).requires_grad_()
    eps = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    fn = lambda *a: _LocalReparameterizedLinear.apply(*a, eps)  # noqa: E731
    # the dead row's variance is exactly the bias variance: away from the clamp, differentiable
    assert torch.autograd.gradcheck(fn, (x, loc, var, b_loc, b_var))
    # without a bias variance the dead row's output variance is 0: clamped, and its gradient is zero
    out = _LocalReparameterizedLinear.apply(x, loc, var, None, None, eps)
    (g_var,) = torch.autograd.grad(out[1].sum(), (var,))
    assert torch.equal(g_var, torch.zeros_like(g_var))


@pytest.mark.parametrize("func,x_shape,w_shape,kwargs", [(F.conv2d, (2, 3, 6, 6), (4, 3, 3, 3), {"padding": 1}), (F.conv1d, (3, 2, 7), (4, 2, 3), {})], ids=["conv2d", "conv1d"])
def test_convolutions_equal_the_reference(func, x_shape, w_shape, kwargs):
    """Convolutions keep autograd's convolutions and fuse only the noise: the same output bit
    for bit from the same seed, gradients of input, means and log-scales to rounding."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(x_shape, generator=gen)
    x[0] = 0.0  # a dead example: clamped variance (no bias)
    x.requires_grad_()
    w_loc = torch.randn(w_shape, generator=gen).requires_grad_()
    w_log_scale = (torch.rand(w_shape, generator=gen) - 2.0).requires_grad_()

    def run(handler):
        torch.manual_seed(0)
        with handler():
            w = pyro.sample("w", LogScaleNormal(w_loc, w_log_scale).to_event(len(w_shape)))
            out = func(x, w, None, **kwargs)
        weights = torch.linspace(-1.0, 2.0, out.numel()).reshape(out.shape)
        return out, torch.autograd.grad((out * weights).sum(), (x, w_loc, w_log_scale))

    out, grads = run(local_reparameterization)
    ref, ref_grads = run(local_reparameterization_reference)
    assert torch.equal(out, ref)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-6 * r.abs().max().item())


def test_gaussian_output_gradcheck():
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    var = (torch.rand(3, 4, generator=gen, dtype=torch.float64) + 0.1).requires_grad_()
    eps = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda m, v: _GaussianOutput.apply(m, v, eps), (mean, var))
