"""MNIST methods on a fully connected ReLU network (``784 -> hidden -> 10``, default one
hidden layer of 100 units), a categorical likelihood, minibatches of 128 and Adam:

* ``map``: :class:`~pyrozoo.guides.DeltaGuide` under a ``N(0, 1)`` weight prior;
* ``mfvi``: mean-field Normal guide, ``N(0, 1)`` prior, closed-form KL, local reparameterization;
* ``mfvi-mc``: the same with Pyro's ``Trace_ELBO`` (Monte Carlo KL) and one weight sample
  per minibatch;
* ``sparse-vd``: log-uniform prior on the weights, sparse variational dropout guide
  (Molchanov et al. 2017), local reparameterization, KL warm-up over the first fifth of the
  epochs (evaluated as the full stochastic posterior predictive, not pruned);
* ``sgld`` / ``sghmc``: the ``N(0, 1)``-prior network sampled by SGLD / SGHMC on the
  ``N/n``-scaled minibatch log-joint, the second half of the run kept (thinned to
  ``config.num_samples`` draws).

Training goes through :func:`pyrozoo.inference.fit` or the samplers' ``run``; test error
and log-likelihood through :func:`pyrozoo.inference.evaluate` (``config.num_samples`` draws;
one for MAP). ``config.extra`` overrides :data:`DEFAULTS`.
"""

import pyro
import torch

from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide
from pyrozoo.inference import SGHMC, SGLD, ClosedFormKL_ELBO, LinearKLWarmup, evaluate, fit
from pyrozoo.inference.sample_storage import InMemorySamples, SampleGuide
from pyrozoo.models import MLP, BayesianNeuralNetwork, Categorical, NormalPrior
from pyrozoo.models.dropout_priors import LogUniformPrior
from recipes.mnist import MNISTData, MNISTRunConfig, register_mnist_method, shape
from recipes.uci import decay_to_tenth

DEFAULTS = {
    "epochs": 10,
    "batch_size": 128,
    "lr": 1e-3,
    # step sizes times the training-set size N: the log-joint's gradient grows with N, so
    # the step that moves the weights by a given amount shrinks as 1/N
    "sampler_lr_times_n": {"sgld": 0.25, "sghmc": 0.025},
    "momentum": 0.9,
    "burn_in": 0.5,
    "init_scale": 1e-3,
    "prior_scale": 1.0,
    "warmup_fraction": 0.2,
    "eval_batch_size": 2000,
}


def _setting(config: MNISTRunConfig, key: str):
    value = getattr(config, key, None) if key in ("epochs", "batch_size", "lr") else None
    return config.extra.get(key, DEFAULTS[key]) if value is None else value


def _model(data: MNISTData, prior, config: MNISTRunConfig) -> BayesianNeuralNetwork:
    torch.manual_seed(config.seed)
    features, classes = shape(data)
    net = MLP(features, list(config.hidden), classes).to(config.device, data.x_train.dtype)
    return BayesianNeuralNetwork(net, prior, Categorical(len(data.y_train)))


def _evaluate(model, guide, data: MNISTData, config: MNISTRunConfig, num_samples: int) -> dict:
    return evaluate(model, guide, data.x_test, data.y_test, num_samples=num_samples, batch_size=_setting(config, "eval_batch_size"))


def _train_and_evaluate(data: MNISTData, config: MNISTRunConfig, model, guide, **fit_kwargs) -> dict:
    epochs = _setting(config, "epochs")
    fit(
        model, guide, (data.x_train, data.y_train), epochs=epochs, batch_size=_setting(config, "batch_size"), lr=_setting(config, "lr"),
        lr_schedule=decay_to_tenth(epochs),  # as in the UCI runners
        device=config.device, seed=config.seed, progress=config.progress, **fit_kwargs,
    )
    return _evaluate(model, guide, data, config, 1 if isinstance(guide, DeltaGuide) else config.num_samples)


@register_mnist_method("map", "MAP estimate (Delta guide) under a N(0, 1) weight prior")
def run_map(data: MNISTData, config: MNISTRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(data, NormalPrior(_setting(config, "prior_scale")), config)
    return _train_and_evaluate(data, config, model, DeltaGuide(model))


@register_mnist_method("mfvi", "mean-field Gaussian VI, N(0, 1) prior, closed-form KL, local reparameterization")
def run_mfvi(data: MNISTData, config: MNISTRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(data, NormalPrior(_setting(config, "prior_scale")), config)
    guide = MeanFieldNormalGuide(model, init_scale=_setting(config, "init_scale"))
    return _train_and_evaluate(data, config, model, guide, objective=ClosedFormKL_ELBO(), estimator="local")


@register_mnist_method("mfvi-mc", "mean-field Gaussian VI, N(0, 1) prior, Pyro Trace_ELBO (Monte Carlo KL), weight sampling")
def run_mfvi_mc(data: MNISTData, config: MNISTRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(data, NormalPrior(_setting(config, "prior_scale")), config)
    guide = MeanFieldNormalGuide(model, init_scale=_setting(config, "init_scale"))
    return _train_and_evaluate(data, config, model, guide, objective=pyro.infer.Trace_ELBO())


@register_mnist_method("sparse-vd", "sparse variational dropout: log-uniform prior on weights, additive parameterisation, local reparameterization")
def run_sparse_vd(data: MNISTData, config: MNISTRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(data, LogUniformPrior(), config)
    guide = SparseVariationalDropoutGuide(model)
    warmup = LinearKLWarmup(0.0, max(_setting(config, "warmup_fraction") * _setting(config, "epochs"), 1e-3))
    return _train_and_evaluate(data, config, model, guide, objective=ClosedFormKL_ELBO(), estimator="local", kl_schedule=warmup)


def _sample(name: str, data: MNISTData, config: MNISTRunConfig) -> dict:
    pyro.clear_param_store()
    model = _model(data, NormalPrior(_setting(config, "prior_scale")), config)
    lr = _setting(config, "sampler_lr_times_n")[name] / len(data.y_train) if config.lr is None else config.lr
    sampler = SGHMC(model, lr=lr, momentum=_setting(config, "momentum")) if name == "sghmc" else SGLD(model, lr=lr)
    batch_size = _setting(config, "batch_size")
    steps = _setting(config, "epochs") * -(-len(data.y_train) // batch_size)
    burn_in = int(_setting(config, "burn_in") * steps)
    num_samples = max(1, min(config.num_samples, steps - burn_in))
    sink = InMemorySamples()
    sampler.run(
        (data.x_train, data.y_train), num_steps=steps, batch_size=batch_size, burn_in=burn_in,
        thin=max(1, (steps - burn_in) // num_samples), sink=sink, seed=config.seed, progress=config.progress,
    )
    result = _evaluate(model, SampleGuide(sink.load(), device=config.device), data, config, len(sink))
    result["samples"] = len(sink)
    return result


@register_mnist_method("sgld", "SGLD on a N(0, 1) weight prior")
def run_sgld(data: MNISTData, config: MNISTRunConfig) -> dict:
    return _sample("sgld", data, config)


@register_mnist_method("sghmc", "SGHMC (momentum 0.9) on a N(0, 1) weight prior")
def run_sghmc(data: MNISTData, config: MNISTRunConfig) -> dict:
    return _sample("sghmc", data, config)
