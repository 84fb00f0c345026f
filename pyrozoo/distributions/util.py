"""Small helpers shared by the distributions and the priors that use them."""

import numbers

import torch
from torch.distributions import Distribution, Independent
from torch.distributions.utils import broadcast_all


def innermost(d: Distribution) -> Distribution:
    """The distribution under any ``Independent``/``Expanded``/``Masked``/``Transformed``
    wrappers (whatever has a ``base_dist``): the family a site was written with."""
    while hasattr(d, "base_dist"):
        d = d.base_dist
    return d


def broadcast_params(family: str, **params):
    """``broadcast_all`` of the named parameters, with a ``ValueError`` that names the family and
    every parameter's shape where they do not broadcast (torch's is a ``RuntimeError`` about
    "tensor a" and "tensor b")."""
    for name, v in params.items():
        if not (torch.is_tensor(v) or isinstance(v, numbers.Real)):
            raise TypeError(f"{family}: {name} must be a tensor or a real number, got {type(v).__name__}")
    try:
        return broadcast_all(*params.values())
    except RuntimeError:
        shapes = ", ".join(f"{name} {tuple(v.shape) if torch.is_tensor(v) else ()}" for name, v in params.items())
        raise ValueError(f"{family}: parameters of shapes {shapes} do not broadcast to one batch shape") from None


def check_shape(family: str, name: str, shape) -> torch.Size:
    """``shape`` as a ``torch.Size`` of non-negative ints, else a ``ValueError`` naming ``name``
    (``torch.Size`` itself accepts negative sizes)."""
    try:
        size = torch.Size(shape if not isinstance(shape, int) else (shape,))
    except TypeError:
        raise TypeError(f"{family}: {name} must be a sequence of ints, got {shape!r}") from None
    if any(s < 0 for s in size):
        raise ValueError(f"{family}: {name} must have non-negative sizes, got {tuple(size)}")
    return size


def distribution_to(d: Distribution, device=None, dtype=None) -> Distribution:
    """Rebuilds a distribution with its parameters on ``device`` / cast to ``dtype``.

    Works for distributions whose constructor takes the names listed in ``arg_constraints``
    (all of torch's and Pyro's standard families, and pyrozoo's). Where both ``probs`` and
    ``logits`` have been materialised, ``logits`` is used.
    """
    if isinstance(d, Independent):
        return distribution_to(d.base_dist, device, dtype).to_event(d.reinterpreted_batch_ndims)
    kwargs = {}
    for name in d.arg_constraints:
        if name == "probs" and "logits" in d.__dict__:
            continue
        if name in ("probs", "logits") and name not in d.__dict__:
            continue  # the parameterisation this instance was not built with
        # most families store their parameters on the instance; transformed ones
        # (LogNormal, InverseGamma, HalfCauchy, ...) expose them as properties
        value = d.__dict__[name] if name in d.__dict__ else getattr(d, name, None)
        if value is None:
            continue
        if torch.is_tensor(value):
            value = value.to(device=device, dtype=dtype if value.is_floating_point() else None)
        kwargs[name] = value
    if not kwargs:
        raise TypeError(f"cannot move {type(d).__name__} to another device: it has no tensor parameters in arg_constraints")
    return type(d)(**kwargs, validate_args=d._validate_args)


def sum_rightmost(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sums the ``dim`` rightmost dimensions of ``x`` (no-op for ``dim == 0``)."""
    if dim == 0:
        return x
    return x.reshape(x.shape[: x.dim() - dim] + (-1,)).sum(-1)
