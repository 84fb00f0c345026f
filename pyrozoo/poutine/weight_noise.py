"""Effect handlers that move Gaussian weight noise from the weights to the layer outputs.

While a handler is active, every unobserved ``pyro.sample`` site whose distribution is a
Normal (possibly wrapped in ``Independent``) returns a :class:`NormalWeight` stand-in
instead of a sampled tensor. A stand-in remembers the Normal's ``loc`` and ``scale``.
When it is the weight of a linear or convolution call, the handler's estimator computes
the layer output directly:

* local reparameterization (Kingma, Salimans & Welling 2015, eq. 6): sample each
  pre-activation from its marginal ``N(x * mu, x^2 * sigma^2)``, independently per example;
* flipout (Wen et al. 2018, eq. 3): one weight perturbation per minibatch, decorrelated
  across examples by random sign flips of inputs and outputs.

Used anywhere else (a weight penalty, ``log_prob`` in a Monte Carlo KL, printing), a
stand-in turns into an ordinary sample ``loc + scale * eps``, drawn once and reused, so
code that does not know about the handler still sees a correct sample of the site.
The handlers work with any guide whose weight sites are Normal and any network that
calls ``F.linear`` / ``F.conv{1,2,3}d`` (``nn.Linear``, ``nn.Conv*d``), without patching
``torch.nn.functional``.
"""

from typing import Optional

import torch
import torch.nn.functional as F
from pyro.poutine.messenger import Messenger
from torch.autograd.function import once_differentiable
from torch.distributions import Independent, Normal

_LAYER_FUNCS = {F.linear, F.conv1d, F.conv2d, F.conv3d}

# Tensor attribute/metadata accessors that are answered by the stand-in itself
# (it shares the loc's shape, dtype and device) instead of drawing a sample.
_METADATA = {
    torch.Tensor.shape.__get__,
    torch.Tensor.dtype.__get__,
    torch.Tensor.device.__get__,
    torch.Tensor.requires_grad.__get__,
    torch.Tensor.is_cuda.__get__,
    torch.Tensor.ndim.__get__,
    torch.Tensor.grad_fn.__get__,
    torch.Tensor.layout.__get__,
    torch.Tensor.is_sparse.__get__,
    torch.Tensor.dim,
    torch.Tensor.size,
    torch.Tensor.numel,
    torch.Tensor.nelement,
    torch.Tensor.is_floating_point,
    torch.Tensor.is_complex,
    torch.Tensor.__len__,
    torch.Tensor.element_size,
    torch.Tensor.data_ptr,
    torch.Tensor.is_contiguous,
    torch.Tensor.stride,
    torch.Tensor.get_device,
}


class NormalWeight(torch.Tensor):
    """A lazily sampled ``Normal(loc, scale)`` tensor used as a layer weight.

    Not created by users: the handlers below return it from ``pyro.sample``.
    """

    @staticmethod
    def __new__(cls, base: Normal, shape: torch.Size, estimator: str):
        loc = base.loc if base.loc.shape == shape else base.loc.expand(shape)
        # Share loc's storage only for metadata; values are never read from it.
        self = torch.Tensor._make_subclass(cls, loc.detach(), False)
        self.base = base
        self.loc = loc
        self.estimator = estimator
        self._sample: Optional[torch.Tensor] = None
        return self

    def materialize(self) -> torch.Tensor:
        """An ordinary reparameterized sample of the weight (drawn once, then cached)."""
        if self._sample is None:
            with torch._C.DisableTorchFunctionSubclass():
                self._sample = self.loc + self.scale * torch.randn_like(self.loc)
        return self._sample

    @property
    def scale(self) -> torch.Tensor:
        return self._expanded(self.base.scale)

    @property
    def variance(self) -> torch.Tensor:
        # LogScaleNormal caches exp(2 log_scale), which the closed-form KL reuses
        return self._expanded(self.base.variance)

    def _expanded(self, t: torch.Tensor) -> torch.Tensor:
        with torch._C.DisableTorchFunctionSubclass():
            shape = self.loc.shape
        return t if t.shape == shape else t.expand(shape)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if func in _LAYER_FUNCS:
            out = _layer_output(func, args, kwargs)
            if out is not NotImplemented:
                return out
        args, kwargs = _materialize_all(args), {k: _materialize_all(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)

    def __repr__(self, *, tensor_contents=None):
        return f"NormalWeight(shape={tuple(self.shape)}, estimator={self.estimator!r})"


def _materialize_all(obj):
    if isinstance(obj, NormalWeight):
        return obj.materialize()
    if isinstance(obj, (list, tuple)):
        return type(obj)(_materialize_all(o) for o in obj)
    return obj


def _split_layer_args(func, args, kwargs):
    args = list(args)
    x = args.pop(0) if args else kwargs.pop("input")
    weight = args.pop(0) if args else kwargs.pop("weight")
    bias = args.pop(0) if args else kwargs.pop("bias", None)
    return x, weight, bias, args, kwargs


def _layer_output(func, args, kwargs):
    """Output of ``func(x, W, b, ...)`` where ``W`` (and possibly ``b``) is a NormalWeight."""
    x, weight, bias, rest, kwargs = _split_layer_args(func, args, dict(kwargs))
    if not isinstance(weight, NormalWeight) or isinstance(x, NormalWeight):
        return NotImplemented
    expected_weight_dim = 2 if func is F.linear else {F.conv1d: 3, F.conv2d: 4, F.conv3d: 5}[func]
    if weight.loc.dim() != expected_weight_dim:
        return NotImplemented  # e.g. a batch of weights from vectorized particles
    with torch._C.DisableTorchFunctionSubclass():
        return _ESTIMATORS[weight.estimator](func, x, weight, bias, rest, kwargs)


def _gaussian_output(mean, out_var, eps, *, inplace: bool):
    """``(mean + sqrt(max(v, tiny)) * eps, std, clamped)``, the last step of local
    reparameterization; ``inplace`` clamps ``out_var`` itself (an intermediate of the caller's)."""
    tiny = torch.finfo(out_var.dtype).tiny
    # The clamp keeps sqrt's gradient finite where an input row is exactly zero (dead ReLUs).
    clamped = out_var < tiny
    std = (out_var.clamp_min_(tiny) if inplace else out_var.clamp(min=tiny)).sqrt_()
    return (std * eps).add_(mean), std, clamped


def _output_variance_gradient(grad, eps, std, clamped):
    """The gradient on ``v`` of :func:`_gaussian_output`: ``grad eps / (2 std)``, zero where
    ``v`` was clamped (halving after the division is exact)."""
    return (grad * eps).div_(std).mul_(0.5).masked_fill_(clamped, 0.0)


class _LocalReparameterizedLinear(torch.autograd.Function):
    r"""``F.linear`` under local reparameterization (Kingma et al. 2015, eq. 6) as one autograd node.

    Forward, the same operations as :func:`_local_reparameterization_reference`:
    ``out = mean + std * eps`` with ``mean = x W^T + b``, ``v = x^2 (sigma_W^2)^T + sigma_b^2``
    and ``std = sqrt(max(v, tiny))``. Backward, written out: with ``g`` the output's gradient,
    ``g_v = g eps / (2 std)`` (zero where ``v`` was clamped),
    ``dW = g^T x``, ``d sigma_W^2 = g_v^T x^2``, ``db = sum g``, ``d sigma_b^2 = sum g_v`` and
    ``dx = g W + 2 x (g_v sigma_W^2)``. Autograd's version of the same chain records eight
    nodes per layer, allocates an intermediate at each, and hands back the weight gradients
    as transposed views, which the accumulation with the KL's gradient then copies.
    """

    @staticmethod
    def forward(ctx, x, loc, var, bias_loc, bias_var, eps):
        x_sq = x * x
        out, std, clamped = _gaussian_output(F.linear(x, loc, bias_loc), F.linear(x_sq, var, bias_var), eps, inplace=True)
        ctx.save_for_backward(x, x_sq, loc, var, std, eps, clamped)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, x_sq, loc, var, std, eps, clamped = ctx.saved_tensors
        need_x, need_loc, need_var, need_bias_loc, need_bias_var, _ = ctx.needs_input_grad
        grad_v = _output_variance_gradient(grad, eps, std, clamped)
        g, g_v = grad.reshape(-1, grad.shape[-1]), grad_v.reshape(-1, grad_v.shape[-1])
        grads = [None] * 6
        if need_x:
            grads[0] = grad.matmul(loc).addcmul_(grad_v.matmul(var), x, value=2)
        if need_loc:
            grads[1] = g.t().mm(x.reshape(-1, x.shape[-1]))
        if need_var:
            grads[2] = g_v.t().mm(x_sq.reshape(-1, x_sq.shape[-1]))
        if need_bias_loc:
            grads[3] = g.sum(0)
        if need_bias_var:
            grads[4] = g_v.sum(0)
        return tuple(grads)


class _GaussianOutput(torch.autograd.Function):
    """``mean + sqrt(max(v, tiny)) * eps`` as one autograd node (the last step of
    :func:`_local_reparameterization_reference`): in place where autograd's chain allocates
    four activation-sized tensors forward and four backward (convolution outputs are large)."""

    @staticmethod
    def forward(ctx, mean, out_var, eps):
        out, std, clamped = _gaussian_output(mean, out_var, eps, inplace=False)
        ctx.save_for_backward(std, eps, clamped)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        std, eps, clamped = ctx.saved_tensors
        grad_var = _output_variance_gradient(grad, eps, std, clamped) if ctx.needs_input_grad[1] else None
        return grad, grad_var, None


def _local_reparameterization(func, x, weight, bias, rest, kwargs):
    if isinstance(bias, NormalWeight):
        bias_mean, bias_var = bias.loc, bias.variance
    else:
        bias_mean, bias_var = bias, None
    if func is not F.linear:
        mean = func(x, weight.loc, bias_mean, *rest, **kwargs)
        var = func(x * x, weight.variance, bias_var, *rest, **kwargs)
        return _GaussianOutput.apply(mean, var, torch.randn_like(mean))
    loc, var = weight.loc, weight.variance
    # the noise of the reference, drawn at the same point of the random stream
    eps = torch.randn(x.shape[:-1] + loc.shape[:1], dtype=torch.result_type(x, loc), device=x.device)
    return _LocalReparameterizedLinear.apply(x, loc, var, bias_mean, bias_var, eps)


def _local_reparameterization_reference(func, x, weight, bias, rest, kwargs):
    """Local reparameterization composed from autograd operations: the reference that
    :func:`_local_reparameterization` (one node per linear layer, one for a convolution's
    noise) equals to rounding."""
    if isinstance(bias, NormalWeight):
        bias_mean, bias_var = bias.loc, bias.variance
    else:
        bias_mean, bias_var = bias, None
    mean = func(x, weight.loc, bias_mean, *rest, **kwargs)
    var = func(x * x, weight.variance, bias_var, *rest, **kwargs)
    # The clamp keeps sqrt's gradient finite where an input row is exactly zero (dead ReLUs).
    std = var.clamp_min(torch.finfo(var.dtype).tiny).sqrt()
    return mean + std * torch.randn_like(mean)


def _random_signs(shape, like: torch.Tensor) -> torch.Tensor:
    return torch.randint(0, 2, shape, device=like.device).to(like.dtype).mul_(2).sub_(1)


def _flipout(func, x, weight, bias, rest, kwargs):
    if isinstance(bias, NormalWeight):
        bias = bias.materialize()
    mean = func(x, weight.loc, bias, *rest, **kwargs)
    perturbation = weight.scale * torch.randn_like(weight.loc)
    # Signs per example and channel (constant over spatial positions for convolutions),
    # so sign-flipping the conv input/output equals flipping the filter's in/out channels.
    spatial = (1,) * (x.dim() - 2)
    sign_in = _random_signs((x.shape[0], x.shape[1]) + spatial, x)
    noise = func(x * sign_in, perturbation, None, *rest, **kwargs)
    sign_out = _random_signs((noise.shape[0], noise.shape[1]) + spatial, noise)
    return mean + noise * sign_out


def _weights_per_example(func, x, weight, bias, rest, kwargs):
    """The exact but slow reference: an independent weight sample for every example."""
    M = x.shape[0]
    w = weight.loc + weight.scale * torch.randn((M,) + tuple(weight.loc.shape), dtype=weight.loc.dtype, device=weight.loc.device)
    if isinstance(bias, NormalWeight):
        b = bias.loc + bias.scale * torch.randn((M,) + tuple(bias.loc.shape), dtype=bias.loc.dtype, device=bias.loc.device)
    else:
        b = None if bias is None else bias.expand((M,) + tuple(bias.shape))
    if func is F.linear:
        if x.dim() != 2:
            return NotImplemented
        out = torch.bmm(w, x.unsqueeze(-1)).squeeze(-1)
        return out if b is None else out + b
    # convolutions: fold the examples into groups of one grouped convolution
    names = ["stride", "padding", "dilation", "groups"]
    options = dict(zip(names, rest))
    options.update(kwargs)
    groups = options.pop("groups", 1)
    folded = func(
        x.reshape((1, -1) + tuple(x.shape[2:])),
        w.reshape((-1,) + tuple(w.shape[2:])),
        None if b is None else b.reshape(-1),
        groups=groups * M,
        **options,
    )
    return folded.reshape((M, -1) + tuple(folded.shape[2:]))


def _weight_means(func, x, weight, bias, rest, kwargs):
    """No weight noise: the layer at the posterior mean (the minimal-variance reference)."""
    return func(x, weight.loc, bias.loc if isinstance(bias, NormalWeight) else bias, *rest, **kwargs)


_ESTIMATORS = {
    "local": _local_reparameterization,
    "local-reference": _local_reparameterization_reference,
    "flipout": _flipout,
    "per-example": _weights_per_example,
    "mean": _weight_means,
}


def normal_base(fn):
    """The Normal inside ``fn`` (through ``Independent`` wrappers), or ``None``."""
    while isinstance(fn, Independent):
        fn = fn.base_dist
    return fn if isinstance(fn, Normal) else None


class WeightNoiseMessenger(Messenger):
    """Base of the handlers that return :class:`NormalWeight` stand-ins for Normal sites."""

    estimator = None

    def _pyro_sample(self, msg):
        if msg["value"] is not None or msg["is_observed"] or msg["infer"].get("enumerate"):
            return
        base = normal_base(msg["fn"])
        if base is None:
            return
        msg["value"] = NormalWeight(base, msg["fn"].batch_shape + msg["fn"].event_shape, self.estimator)


class LocalReparameterizationMessenger(WeightNoiseMessenger):
    """Local reparameterization trick (Kingma, Salimans & Welling 2015, eq. 6) as a handler.

    Inside the handler, linear and convolution layers whose weights come from a Normal
    site output ``mu + sqrt(v) * eps`` with ``mu = f(x, loc_W) + loc_b`` and
    ``v = f(x^2, scale_W^2) + scale_b^2``, ``eps`` independent per example and output.
    The output's mean and per-unit variance equal those under weight sampling; outputs are
    independent across examples, which removes the covariance term of the minibatch
    gradient variance. For convolutions the noise is also independent across spatial
    positions (mean-field over locations; the standard approximation of Molchanov et al. 2017).
    """

    estimator = "local"


class LocalReparameterizationReferenceMessenger(LocalReparameterizationMessenger):
    """:class:`LocalReparameterizationMessenger` with linear layers composed from autograd
    operations instead of one fused node: the same numbers (to rounding) from the same random
    stream, kept as the reference of equality tests and the "before" of the step benchmarks."""

    estimator = "local-reference"


class FlipoutMessenger(WeightNoiseMessenger):
    """Flipout (Wen et al. 2018, eq. 3) as a handler: one weight perturbation per
    minibatch, decorrelated across examples by random sign flips. Outputs have exactly the
    moments of per-example weight sampling."""

    estimator = "flipout"


class WeightsPerExampleMessenger(WeightNoiseMessenger):
    """An independent weight sample per example in linear and convolution layers: the
    exact, slow estimator that local reparameterization approximates in distribution
    (Kingma et al. 2015, Sec. 2.3; "weight sample per data point" in their Table 1)."""

    estimator = "per-example"


class WeightMeansMessenger(WeightNoiseMessenger):
    """Linear and convolution layers use the posterior mean of Normal weights (no weight
    noise): the reference of minimal gradient variance in Kingma et al. (2015), Table 1."""

    estimator = "mean"


def local_reparameterization(fn=None):
    """``with local_reparameterization(): ...`` or ``local_reparameterization(model)``."""
    msngr = LocalReparameterizationMessenger()
    return msngr(fn) if fn is not None else msngr


def local_reparameterization_reference(fn=None):
    """``with local_reparameterization_reference(): ...``: the unfused reference of
    :func:`local_reparameterization` (for tests and benchmarks)."""
    msngr = LocalReparameterizationReferenceMessenger()
    return msngr(fn) if fn is not None else msngr


def flipout(fn=None):
    """``with flipout(): ...`` or ``flipout(model)``."""
    msngr = FlipoutMessenger()
    return msngr(fn) if fn is not None else msngr


def weights_per_example(fn=None):
    """``with weights_per_example(): ...``: an independent weight sample per example."""
    msngr = WeightsPerExampleMessenger()
    return msngr(fn) if fn is not None else msngr


def weight_means(fn=None):
    """``with weight_means(): ...``: layers at the posterior mean of their Normal weights."""
    msngr = WeightMeansMessenger()
    return msngr(fn) if fn is not None else msngr
