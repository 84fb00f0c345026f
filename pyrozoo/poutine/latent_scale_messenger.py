"""Scaling the latent (KL) part of an objective: KL warm-up and minibatch re-weighting."""

from typing import Union

import torch
from pyro.poutine.messenger import Messenger


class LatentScaleMessenger(Messenger):
    """Multiplies the ``scale`` of every unobserved sample site by ``scale``.

    Wrapped around an objective call, this scales the KL term (closed-form ELBOs read the
    guide site's scale) or the ``log p(z) - log q(z)`` term (Monte Carlo ELBOs read both
    sites' scales) and leaves the likelihood, whose data plate already carries the
    ``N / n`` factor, untouched. This is how KL warm-up (Sønderby et al. 2016;
    Molchanov et al. 2017's ``rw_linear``) and Blundell et al.'s minibatch weights
    ``pi_i`` are applied (see :mod:`pyrozoo.inference.schedules`).
    """

    def __init__(self, scale: Union[float, torch.Tensor]):
        super().__init__()
        if not torch.is_tensor(scale) and not scale >= 0:
            raise ValueError(f"latent scale must be non-negative, got {scale}")
        self.scale = scale

    def _process_message(self, msg):
        if msg["type"] == "sample" and not msg["is_observed"]:
            msg["scale"] = self.scale * msg["scale"]


def latent_scale(scale, fn=None):
    """``with latent_scale(w): loss = elbo.differentiable_loss(model, guide, ...)``."""
    msngr = LatentScaleMessenger(scale)
    return msngr(fn) if fn is not None else msngr
