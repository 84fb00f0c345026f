"""Inference: objectives (closed-form-KL ELBO, SIVI/DSIVI), KL schedules, the training loop
(and the epoch loop core it shares with the samplers),
prediction (with the aleatoric/epistemic split of its uncertainty), and stochastic-gradient MCMC samplers (SGLD, SGHMC, SG-MCMC-SA)."""

from pyrozoo.inference.elbo import ClosedFormKL_ELBO
from pyrozoo.inference.prediction import evaluate, posterior_samples, predict
from pyrozoo.inference.schedules import BlundellKLReweighting, ConstantKL, KLSchedule, LinearKLWarmup
from pyrozoo.inference.training import collect_parameters, default_optimizer, fit
from pyrozoo.inference.dsivi import DSIVI_ELBO, SIVI_ELBO
from pyrozoo.inference.importance_weighted import ImportanceWeighted_ELBO, RenyiELBO, weight_diagnostics
from pyrozoo.inference.rws import ReweightedWakeSleep
from pyrozoo.inference.importance_resampling import importance_resampled_samples
from pyrozoo.inference.sgmcmc import SGHMC, SGLD, Adaptation, StochasticGradientMCMC
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.inference.mcmc_kernel import SGMCMCKernel
from pyrozoo.inference.pruning import MagnitudePruning
from pyrozoo.inference.posterior_averaging import StepSizeWeightedAverage, ensemble_probs
from pyrozoo.inference.sample_storage import DiskSamples, InMemorySamples, SampleGuide
from pyrozoo.inference.uncertainty_decomposition import classification_uncertainty, regression_uncertainty, uncertainty
from pyrozoo.inference.trace_checks import PriorDrawnSiteWarning
from pyrozoo.inference.diagnostics import DivergenceError, DivergenceWarning, PriorCollapseWarning, RunWarning, SpikeOnlyLeftWarning, SpikeOnlyWarning, WeightCollapseWarning, collect_events
from pyrozoo.utils import deprecated_aliases

__all__ = [
    "RunWarning",
    "DivergenceWarning",
    "WeightCollapseWarning",
    "PriorCollapseWarning",
    "SpikeOnlyLeftWarning",
    "SpikeOnlyWarning",
    "DivergenceError",
    "PriorDrawnSiteWarning",
    "collect_events",
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
    "DSIVI_ELBO",
    "SIVI_ELBO",
    "RenyiELBO",
    "ImportanceWeighted_ELBO",
    "ReweightedWakeSleep",
    "weight_diagnostics",
    "importance_resampled_samples",
    "SGLD",
    "SGHMC",
    "StochasticGradientMCMC",
    "Adaptation",
    "StochasticApproximation",
    "PolynomialDecay",
    "SGMCMCKernel",
    "MagnitudePruning",
    "StepSizeWeightedAverage",
    "ensemble_probs",
    "DiskSamples",
    "InMemorySamples",
    "SampleGuide",
    "uncertainty",
    "classification_uncertainty",
    "regression_uncertainty",
]


# former names (one release): Pyro's own spelling is RenyiELBO and ReweightedWakeSleep
__getattr__ = deprecated_aliases("pyrozoo.inference", {"Renyi_ELBO": lambda: RenyiELBO, "ReweightedWakeSleepLoss": lambda: ReweightedWakeSleep})
