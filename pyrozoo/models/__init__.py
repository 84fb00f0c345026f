"""Models: architectures (plain ``nn.Module``), priors (Pyro models over a module's
parameters), likelihoods, and :class:`BayesianNeuralNetwork`, which combines them."""

from pyrozoo.models.architectures import MLP, LeNet5, LeNet5BatchNorm, LeNet300100
from pyrozoo.models.bnn import BayesianNeuralNetwork
from pyrozoo.models.likelihoods import CategoricalLikelihood, GaussianLikelihood, Likelihood, PosteriorPredictive
from pyrozoo.models.priors import (
    FunctionPrior,
    IIDPrior,
    LayerwiseNormalPrior,
    NormalPrior,
    Prior,
    ScaleMixturePrior,
)
from pyrozoo.models.selection import ParameterSelector
from pyrozoo.utils import deprecated_aliases
from pyrozoo.models.vae import (
    VAE,
    AggregatedPosteriorPrior,
    AmortizedNormalGuide,
    GaussianEncoder,
    StandardNormalLatentPrior,
    VampPrior,
)
from pyrozoo.models.architectures import ResNet20, TwoConvTwoFCNet
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior, SSGLState
from pyrozoo.models.normal_gamma_prior import NormalGammaPrior
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior, GroupScalePrior
from pyrozoo.models.dropout_priors import ARDPrior, LogUniformPrior
from pyrozoo.models.radial_directional import RadialDirectionalPrior

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
    "GaussianLikelihood",
    "CategoricalLikelihood",
    "PosteriorPredictive",
    "MLP",
    "LeNet300100",
    "LeNet5",
    "LeNet5BatchNorm",
    "VAE",
    "GaussianEncoder",
    "AmortizedNormalGuide",
    "StandardNormalLatentPrior",
    "VampPrior",
    "AggregatedPosteriorPrior",
    "TwoConvTwoFCNet",
    "ResNet20",
    "SpikeAndSlabPrior",
    "SSGLState",
    "NormalGammaPrior",
    "LogUniformPrior",
    "ARDPrior",
    "GroupScalePrior",
    "GroupNormalJeffreysPrior",
    "GroupHorseshoePrior",
    "RadialDirectionalPrior",
]

# the likelihoods' former names, which shadowed pyro.distributions.Categorical (issue 43)
__getattr__ = deprecated_aliases("pyrozoo.models", {"Gaussian": lambda: GaussianLikelihood, "Categorical": lambda: CategoricalLikelihood})
