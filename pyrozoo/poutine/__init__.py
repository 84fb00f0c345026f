"""Effect handlers: variance reduction (local reparameterization, flipout), objective scaling and
subsampling a model's plates from outside it."""

from pyrozoo.poutine.latent_scale_messenger import LatentScaleMessenger, latent_scale
from pyrozoo.poutine.subsample import PlateScaleMessenger, SubsampleIndicesMessenger, plate_scale, subsample_indices
from pyrozoo.poutine.weight_noise import (
    FlipoutMessenger,
    LocalReparameterizationMessenger,
    NormalWeight,
    WeightMeansMessenger,
    WeightNoiseMessenger,
    WeightsPerExampleMessenger,
    flipout,
    local_reparameterization,
    weight_means,
    weights_per_example,
)

__all__ = [
    "LocalReparameterizationMessenger",
    "FlipoutMessenger",
    "local_reparameterization",
    "flipout",
    "NormalWeight",
    "WeightNoiseMessenger",
    "WeightsPerExampleMessenger",
    "WeightMeansMessenger",
    "weights_per_example",
    "weight_means",
    "LatentScaleMessenger",
    "latent_scale",
    "SubsampleIndicesMessenger",
    "subsample_indices",
    "PlateScaleMessenger",
    "plate_scale",
]
