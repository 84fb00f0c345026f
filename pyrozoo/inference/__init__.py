"""Inference: objectives, KL schedules, the training loop, prediction (and, in later
modules, samplers)."""

from pyrozoo.inference.elbo import ClosedFormKL_ELBO
from pyrozoo.inference.prediction import evaluate, posterior_samples, predict
from pyrozoo.inference.schedules import BlundellKLReweighting, ConstantKL, KLSchedule, LinearKLWarmup
from pyrozoo.inference.training import collect_parameters, default_optimizer, fit

__all__ = [
    "ClosedFormKL_ELBO",
    "KLSchedule",
    "ConstantKL",
    "LinearKLWarmup",
    "BlundellKLReweighting",
    "fit",
    "default_optimizer",
    "collect_parameters",
    "predict",
    "posterior_samples",
    "evaluate",
]
