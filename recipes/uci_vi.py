"""UCI methods of the foundation: MAP, mean-field VI and Bayes by Backprop.

All three use the protocol's one-hidden-layer ReLU network (50 units; 100 for protein),
a Gaussian likelihood whose noise precision has a Gamma prior and is inferred, and
minibatch training with :func:`pyrozoo.inference.fit`:

* ``map``: :class:`~pyrozoo.guides.DeltaGuide` under a ``N(0, 1)`` weight prior;
* ``mfvi``: :class:`~pyrozoo.guides.MeanFieldNormalGuide`, ``N(0, 1)`` prior, closed-form
  KL, local reparameterization;
* ``bbb``: Bayes by Backprop (Blundell et al. 2015): mean-field Gaussian posterior, the
  scale-mixture prior (eq. 7) whose KL is estimated by Monte Carlo, weight samples per
  minibatch as in the paper (no local reparameterization), and optionally the minibatch
  KL weights of eq. 9 (``extra["blundell"] = True``).
"""

import math

import pyro

from pyrozoo.data import UCISplit
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import BlundellKLReweighting, ClosedFormKL_ELBO, evaluate
from pyrozoo.models import BayesianNeuralNetwork, NormalPrior, ScaleMixturePrior
from recipes.uci import UCIRunConfig, decay_to_tenth, fit_split, register_uci_method, uci_model

#: defaults shared by the three methods (``config`` and ``config.extra`` override them)
DEFAULTS = {
    "epochs": 1000,
    "batch_size": 32,
    "lr": 1e-2,
    "precision_prior": (6.0, 6.0),  # Gamma(concentration, rate) on the noise precision
    "init_scale": 1e-3,
    "prior_scale": 1.0,
    "mixture": (0.5, 1.0, math.exp(-6)),  # Bayes by Backprop's (pi, sigma1, sigma2)
}


def _setting(config: UCIRunConfig, key: str):
    value = getattr(config, key, None) if key in ("epochs", "batch_size", "lr") else None
    if value is None:
        value = config.extra.get(key, DEFAULTS[key])
    return value


def _model(split: UCISplit, prior, config: UCIRunConfig) -> BayesianNeuralNetwork:
    return uci_model(split, prior, _setting(config, "precision_prior"), config)


def _train_and_evaluate(split, config, model, guide, **fit_kwargs) -> dict:
    epochs = _setting(config, "epochs")
    if config.quick:
        epochs = min(epochs, 5)
    fit_split(model, guide, split, config, epochs, lr_schedule=decay_to_tenth(epochs), batch_size=_setting(config, "batch_size"), lr=_setting(config, "lr"), **fit_kwargs)
    num_samples = 1 if isinstance(guide, DeltaGuide) else config.num_samples
    return evaluate(model, guide, split.x_test, split.y_test, num_samples=num_samples, y_scale=split.y_std, y_shift=split.y_mean)


@register_uci_method("map", "MAP estimate (Delta guide) under a N(0, 1) weight prior")
def run_map(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(split, NormalPrior(_setting(config, "prior_scale")), config)
    return _train_and_evaluate(split, config, model, DeltaGuide(model))


@register_uci_method("mfvi", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, local reparameterization")
def run_mfvi(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(split, NormalPrior(_setting(config, "prior_scale")), config)
    guide = MeanFieldNormalGuide(model, init_scale=_setting(config, "init_scale"))
    return _train_and_evaluate(split, config, model, guide, estimator="local", objective=ClosedFormKL_ELBO())


@register_uci_method("bbb", "Bayes by Backprop: scale-mixture prior, Monte Carlo KL, weight sampling")
def run_bbb(split: UCISplit, config: UCIRunConfig) -> dict:
    pyro.clear_param_store()
    pi, sigma1, sigma2 = _setting(config, "mixture")
    model = _model(split, ScaleMixturePrior(pi, sigma1, sigma2), config)
    guide = MeanFieldNormalGuide(model, init_scale=_setting(config, "init_scale"))
    kl_schedule = BlundellKLReweighting() if config.extra.get("blundell", False) else None
    return _train_and_evaluate(split, config, model, guide, objective=ClosedFormKL_ELBO(), kl_schedule=kl_schedule)
