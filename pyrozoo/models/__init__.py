"""Models: architectures (plain ``nn.Module``), priors (Pyro models over a module's
parameters), likelihoods, and :class:`BayesianNeuralNetwork`, which combines them."""

from pyrozoo.models.architectures import MLP, LeNet5, LeNet300100
from pyrozoo.models.bnn import BayesianNeuralNetwork
from pyrozoo.models.likelihoods import Categorical, Gaussian, Likelihood, PosteriorPredictive
from pyrozoo.models.priors import (
    FunctionPrior,
    IIDPrior,
    LayerwiseNormalPrior,
    NormalPrior,
    Prior,
    ScaleMixturePrior,
)
from pyrozoo.models.selection import ParameterSelector

__all__ = [
    "BayesianNeuralNetwork",
    "Prior",
    "IIDPrior",
    "NormalPrior",
    "ScaleMixturePrior",
    "LayerwiseNormalPrior",
    "FunctionPrior",
    "ParameterSelector",
    "Likelihood",
    "Gaussian",
    "Categorical",
    "PosteriorPredictive",
    "MLP",
    "LeNet300100",
    "LeNet5",
]
from pyrozoo.models.vae import VAE, AggregatedPosteriorPrior, AmortizedNormalGuide, GaussianEncoder, StandardNormalLatentPrior, VampPrior  # noqa: E402

__all__ += ["VAE", "GaussianEncoder", "AmortizedNormalGuide", "StandardNormalLatentPrior", "VampPrior", "AggregatedPosteriorPrior"]
from pyrozoo.models.architectures import ResNet20, TwoConvTwoFCNet  # noqa: E402
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior, SSGLState  # noqa: E402

__all__ += ["TwoConvTwoFCNet", "ResNet20", "SpikeAndSlabPrior", "SSGLState"]
from pyrozoo.models.normal_gamma_prior import NormalGammaPrior  # noqa: E402

__all__ += ["NormalGammaPrior"]
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior, GroupScalePrior  # noqa: E402
from pyrozoo.models.dropout_priors import ARDPrior, LogUniformPrior  # noqa: E402

__all__ += ["LogUniformPrior", "ARDPrior", "GroupScalePrior", "GroupNormalJeffreysPrior", "GroupHorseshoePrior"]
from pyrozoo.models.radial_directional import RadialDirectionalPrior  # noqa: E402

__all__ += ["RadialDirectionalPrior"]
