"""How :func:`~pyrozoo.inference.fit` calls a model on a minibatch: Pyro's conventions, read
off the model once before training.

Pyro documents three ways to write a model's data, and each needs its own call:

``"subsample"``
    the model takes ``subsample=`` or a required third argument (``model(x, y, subsample)``, as
    :class:`~pyrozoo.models.BayesianNeuralNetwork` does): it is given the minibatch and its
    indices and its plate (``pyro.plate("data", N, subsample=idx)``) scales by ``N / B``;
``"self-subsampling"``
    the model subsamples itself (``with pyro.plate("data", len(x), subsample_size=B) as idx:
    ... x[idx] ...``): it is given the whole data set at every step and draws its own ``B``
    members, so an epoch is ``ceil(N / B)`` steps;
``"minibatch"``
    the model is written for its whole data (``with pyro.plate("data", len(x)):``): it is
    given a minibatch, and :func:`~pyrozoo.poutine.plate_scale` scales its data plate by
    ``N / B`` so the objective is the full-data one's unbiased estimate; a model whose data
    plate holds latent sites of its own (per-example latents) cannot be minibatched this
    way (the guide's parameters would be per minibatch) and is refused with the fix;
``"full-batch"``
    ``batch_size=None``, or a model with no plate over the data (whose likelihood cannot be
    scaled per example): every step sees all the data.

A model that fits none of these (it does not take ``model(x, y)``) is refused with one error
naming the contract.
"""

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Optional

import torch
from pyro.poutine.util import site_is_subsample

from pyrozoo.data.batching import TensorBatches
from pyrozoo.data.validation import check_finite
from pyrozoo.inference.trace_checks import is_enumerated
from pyrozoo.inference.site_predictive import accepts_subsample, data_plate, probe_trace, signature
from pyrozoo.poutine.subsample import plate_scale

KINDS = ("subsample", "self-subsampling", "minibatch", "full-batch")

CONTRACT = (
    "pyrozoo calls a model the way Pyro documents it: model(x, y) with pyro.plate('data', len(x)) (minibatched for you), "
    "model(x, y) with pyro.plate('data', len(x), subsample_size=B) (it subsamples itself), or model(x, y, subsample=idx) "
    "with pyro.plate('data', N, subsample=idx) (it is given the minibatch and its indices)"
)


@dataclass
class ModelCall:
    """How each step calls the model (one of :data:`KINDS`), found by :func:`model_call_of`."""

    kind: str
    size: int
    plate: Optional[str] = None
    batch_size: Optional[int] = None
    data: tuple = ()

    def args(self, batch: tuple) -> tuple:
        """The model's (and guide's) arguments for the minibatch ``batch = (x, y, idx)``."""
        if self.kind == "subsample":
            return tuple(batch)
        if self.kind in ("self-subsampling", "full-batch"):
            return tuple(self.data)
        return tuple(batch[:-1])

    def handler(self, batch: tuple):
        """The handler a step runs under: the ``N / B`` scale of a minibatched plate."""
        if self.kind == "minibatch" and len(batch[0]) < self.size:
            return plate_scale(self.plate, self.size / len(batch[0]))
        return nullcontext()


def check_data_matches_model(model, x: torch.Tensor, caller: str = "fit") -> None:
    """Raises when floating-point inputs ``x`` have another dtype than the floating-point
    parameters of ``model`` (a module), or when ``x`` lies on a device that none of its
    parameters and buffers is on: torch would stop inside a layer (``F.linear``) with a
    message about neither."""
    if not isinstance(model, torch.nn.Module) or not torch.is_tensor(x):
        return
    tensors = list(model.parameters()) + list(model.buffers())
    devices = sorted({str(t.device) for t in tensors})
    if devices and str(x.device) not in devices:
        raise ValueError(
            f"{caller}: the inputs are on {x.device} but the model's parameters are on {devices[0]}: "
            f"move the data (x.to('{devices[0]}')) or the model (model.to('{x.device}'))")
    if not x.is_floating_point():
        return
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters() if p.is_floating_point()})
    given = str(x.dtype).replace("torch.", "")
    if dtypes and given not in dtypes:
        raise TypeError(
            f"{caller}: the inputs are {given} but the model's parameters are {dtypes[0]}: "
            f"convert the data (x.to(torch.{dtypes[0]})) or the model (model.to(torch.{given}))")


def _takes_two(model) -> bool:
    sig = signature(model)
    if sig is None:  # no signature to read: let the call say
        return True
    try:
        sig.bind(None, None)
        return True
    except TypeError:
        return False


def model_call_of(model, x: torch.Tensor, y: torch.Tensor, batch_size: Optional[int]) -> ModelCall:
    """The convention of ``model`` on the training data ``(x, y)`` (see the module
    docstring), from its signature and one blocked trace on the whole data."""
    n = len(x)
    if accepts_subsample(model):
        return ModelCall("subsample", n, batch_size=batch_size)
    if not _takes_two(model):
        raise TypeError(f"{getattr(model, '__name__', type(model).__name__)} cannot be called as model(x, y): {CONTRACT}")
    trace = probe_trace(model, x, y)
    plate = data_plate(trace, n)
    data = (x, y)
    if plate.subsample_size is not None:
        return ModelCall("self-subsampling", n, plate.name, plate.subsample_size, data)
    if batch_size is None or batch_size >= n:
        return ModelCall("full-batch", n, plate.name, n, data)
    if plate.name is None:
        raise ValueError(
            f"the model has no plate over the {n} examples, so a minibatch of {batch_size} cannot be scaled to the data set: "
            "put the observation in pyro.plate('data', len(x)) (Pyro's idiom), or pass batch_size=None to train on all the data at each step")
    # (an enumerated site is summed out per example, not learned: it minibatches like an observation)
    local = [k for k, site in trace.nodes.items() if site["type"] == "sample" and not site["is_observed"] and not site_is_subsample(site)
             and not is_enumerated(site) and any(f.vectorized and f.name == plate.name for f in site["cond_indep_stack"])]
    if local:
        raise ValueError(
            f"the model samples {local} per example inside its data plate {plate.name!r}, which fit cannot minibatch from outside "
            f"(the guide would hold parameters for one minibatch only): let the model subsample itself, "
            f"pyro.plate({plate.name!r}, len(x), subsample_size={batch_size}), or pass batch_size=None")
    return ModelCall("minibatch", n, plate.name, batch_size)


def batches_of(model, data, batch_size: Optional[int], seed: Optional[int] = None, caller: str = "fit", device=None):
    """``(ModelCall, TensorBatches)`` for training ``model`` on ``data``: ``(x, y)`` tensors
    (checked finite and of the model's dtype; minibatches of ``batch_size``, or of the
    model's own subsample size when it subsamples itself, so that an epoch is ``ceil(N / B)``
    steps), or a :class:`~pyrozoo.data.TensorBatches` (which keeps its own shuffling: ``seed``
    does not reseed it). ``device``: where the training runs; the data are moved there before
    the model is first called (else they stay where they are and must lie where the model's
    parameters are). :attr:`ModelCall.data` is set once the batches are on their device."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int, or None to train on all the data at each step, got {batch_size!r}")
    if isinstance(data, TensorBatches):
        if device is not None:
            data.to(device)
        check_data_matches_model(model, data.tensors[0], caller)
        for name, t in zip(("x", "y"), data.tensors):
            check_finite(f"training {name}", t)
        return model_call_of(model, *data.tensors[:2], data.batch_size), data
    if isinstance(data, (str, bytes)) or not hasattr(data, "__len__") or len(data) != 2:
        raise ValueError("data must be (x, y) tensors or a TensorBatches")
    x, y = data
    for name, t in (("x", x), ("y", y)):
        if not torch.is_tensor(t):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if device is not None:
        x, y = x.to(device), y.to(device)
    check_data_matches_model(model, x, caller)  # (before reading values: data on another device cannot be read here)
    for name, t in (("x", x), ("y", y)):
        check_finite(f"training {name}", t)
    call = model_call_of(model, x, y, batch_size)
    return call, TensorBatches(x, y, batch_size=call.batch_size or len(x), seed=seed if seed is not None else 0)


__all__ = ["CONTRACT", "KINDS", "ModelCall", "batches_of", "check_data_matches_model", "model_call_of"]
