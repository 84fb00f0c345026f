"""Effect handlers: variance reduction (local reparameterization, flipout) and objective scaling."""

from pyrozoo.poutine.latent_scale import LatentScaleMessenger, latent_scale
from pyrozoo.poutine.weight_noise import (
    FlipoutMessenger,
    LocalReparameterizationMessenger,
    NormalWeight,
    flipout,
    local_reparameterization,
)

__all__ = [
    "LocalReparameterizationMessenger",
    "FlipoutMessenger",
    "local_reparameterization",
    "flipout",
    "NormalWeight",
    "LatentScaleMessenger",
    "latent_scale",
]
