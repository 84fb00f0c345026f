"""Choosing the members of a model's own subsampled plates from outside the model."""

from typing import Mapping

import torch
from pyro.poutine.messenger import Messenger
from pyro.poutine.subsample_messenger import _Subsample


class SubsampleIndicesMessenger(Messenger):
    """Sets the members of the plates named in ``indices`` (``{plate name: LongTensor}``).

    A model written the Pyro way subsamples itself, ``with pyro.plate("data", N,
    subsample_size=B) as idx: ... x[idx] ...``, drawing a random ``idx`` each call. Under
    this handler the plate's subsample site takes the given ``idx`` instead, so prediction
    can visit every example once, in order, in chunks of ``B``
    (:mod:`pyrozoo.inference.site_predictive`), and the plate still carries its ``N / B`` scale. Pyro checks that a
    given ``idx`` has the plate's ``subsample_size``: a chunk must have exactly ``B``
    members. Plates not named are left alone.
    """

    def __init__(self, indices: Mapping[str, torch.Tensor]):
        super().__init__()
        self.indices = dict(indices)

    def _process_message(self, msg):
        if msg["type"] == "sample" and isinstance(msg["fn"], _Subsample) and msg["name"] in self.indices:
            msg["value"] = self.indices[msg["name"]].to(msg["fn"].device or "cpu")
            msg["done"] = True


def subsample_indices(indices: Mapping[str, torch.Tensor], fn=None):
    """``with subsample_indices({"data": idx}): model(x)`` runs the plate ``"data"`` on ``idx``."""
    msngr = SubsampleIndicesMessenger(indices)
    return msngr(fn) if fn is not None else msngr


class PlateScaleMessenger(Messenger):
    """Multiplies the ``scale`` of every sample site inside the plate ``name`` by ``factor``.

    A model written for its whole data set, ``with pyro.plate("data", len(x)):``, knows
    nothing of minibatches: called on ``B`` of ``N`` examples its likelihood counts ``B``
    examples where the full-data objective counts ``N``. Under this handler, with
    ``factor = N / B``, the minibatch objective is unbiased for the full-data one, as a
    subsampled plate would make it (:func:`pyrozoo.inference.fit` applies it to such models).
    """

    def __init__(self, name: str, factor: float):
        super().__init__()
        if not factor > 0:
            raise ValueError(f"plate_scale: factor must be positive, got {factor}")
        self.name, self.factor = name, factor

    def _process_message(self, msg):
        if msg["type"] == "sample" and any(f.name == self.name for f in msg["cond_indep_stack"]):
            msg["scale"] = self.factor * msg["scale"]


def plate_scale(name: str, factor: float, fn=None):
    """``with plate_scale("data", N / B): loss = elbo.differentiable_loss(model, guide, xb, yb)``."""
    msngr = PlateScaleMessenger(name, factor)
    return msngr(fn) if fn is not None else msngr
