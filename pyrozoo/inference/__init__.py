"""Inference: objectives, KL schedules, the training loop, prediction (and, in later
modules, samplers)."""

from pyrozoo.inference.elbo import ClosedFormKL_ELBO
from pyrozoo.inference.prediction import evaluate, posterior_samples, predict
from pyrozoo.inference.schedules import BlundellKLReweighting, ConstantKL, KLSchedule, LinearKLWarmup
from pyrozoo.inference.training import collect_parameters, default_optimizer, fit, training_step

__all__ = [
    "ClosedFormKL_ELBO",
    "KLSchedule",
    "ConstantKL",
    "LinearKLWarmup",
    "BlundellKLReweighting",
    "fit",
    "training_step",
    "default_optimizer",
    "collect_parameters",
    "predict",
    "posterior_samples",
    "evaluate",
]
from pyrozoo.inference.dsivi import DSIVI_ELBO, SIVI_ELBO  # noqa: E402

__all__ += ["DSIVI_ELBO", "SIVI_ELBO"]
from pyrozoo.inference.sgmcmc import SGHMC, SGLD, Adaptation, StochasticGradientMCMC  # noqa: E402
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation  # noqa: E402
from pyrozoo.inference.pruning import MagnitudePruning  # noqa: E402
from pyrozoo.inference.posterior_averaging import StepSizeWeightedAverage  # noqa: E402
from pyrozoo.inference.sample_storage import DiskSamples, InMemorySamples, SampleGuide  # noqa: E402

__all__ += ["SGLD", "SGHMC", "StochasticGradientMCMC", "Adaptation", "StochasticApproximation", "MagnitudePruning", "StepSizeWeightedAverage", "DiskSamples", "InMemorySamples", "SampleGuide"]
