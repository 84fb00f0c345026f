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
one for MAP). The methods are the declarations of :mod:`zoo_protocols.methods`; ``config``
and ``config.extra`` override their defaults and :data:`DEFAULTS`.
"""

import pyro
import torch

from pyrozoo.inference import evaluate, fit
from pyrozoo.inference.sample_storage import InMemorySamples, SampleGuide
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import evaluated_by, method, MethodSpec, predicts_with_one_sample
from zoo_protocols.mnist import MNIST_REGISTRY, MNISTData, shape
from zoo_protocols.uci import decay_to_tenth

#: the protocol's schedule (a method's declared defaults and ``config`` override them)
DEFAULTS = {
    "epochs": 10,
    "batch_size": 128,
    "lr": 1e-3,
    "num_samples": 20,
    "hidden": (100,),
    # step sizes times the training-set size N: the log-joint's gradient grows with N, so
    # the step that moves the weights by a given amount shrinks as 1/N
    "sampler_lr_times_n": {"sgld": 0.25, "sghmc": 0.025},
    "eval_batch_size": 2000,
}

#: the declarations this protocol evaluates: those that name it (``protocols=("mnist", ...)``)
NAMES = evaluated_by("mnist")


def _model(data: MNISTData, prior, config: RunConfig, s) -> BayesianNeuralNetwork:
    torch.manual_seed(config.seed)
    features, classes = shape(data)
    net = MLP(features, list(s["hidden"]), classes).to(config.device, data.x_train.dtype)
    return BayesianNeuralNetwork(net, prior, CategoricalLikelihood(len(data.y_train)))


def _evaluate(model, guide, data: MNISTData, s, num_samples: int) -> dict:
    return evaluate(model, guide, data.x_test, data.y_test, num_samples=num_samples, batch_size=s["eval_batch_size"])


def run(spec: MethodSpec, data: MNISTData, config: RunConfig) -> dict:
    """Trains (or samples) ``spec`` on ``data``'s training images and evaluates it on the test set."""
    if spec.is_sampler:
        return _sample(spec, data, config)
    s = config.settings(spec.defaults, DEFAULTS)
    pyro.clear_param_store()
    model = _model(data, spec.prior(s), config, s)
    guide = spec.guide(model, s)
    epochs = s["epochs"]
    fit(
        model, guide, (data.x_train, data.y_train), epochs=epochs, batch_size=s["batch_size"], lr=s["lr"],
        lr_schedule=decay_to_tenth(epochs),  # as in the UCI runners
        device=config.device, seed=config.seed, progress=config.progress, **spec.fit_arguments(s, epochs),
    )
    return _evaluate(model, guide, data, s, 1 if predicts_with_one_sample(guide) else s["num_samples"])


def _sample(spec: MethodSpec, data: MNISTData, config: RunConfig) -> dict:
    s = config.settings(spec.defaults, DEFAULTS)
    pyro.clear_param_store()
    model = _model(data, spec.prior(s), config, s)
    lr = s.pick("sampler_lr_times_n", spec.sampler_family) / len(data.y_train) if config.lr is None else config.lr
    sampler = spec.sampler(model, s, lr)
    batch_size = s["batch_size"]
    steps = s["epochs"] * -(-len(data.y_train) // batch_size)
    burn_in = int(s["burn_in"] * steps)
    num_samples = max(1, min(s["num_samples"], steps - burn_in))
    sink = InMemorySamples()
    sampler.run(
        (data.x_train, data.y_train), num_steps=steps, batch_size=batch_size, burn_in=burn_in,
        thin=max(1, (steps - burn_in) // num_samples), sink=sink, seed=config.seed, progress=config.progress,
    )
    result = _evaluate(model, SampleGuide(sink.load(), device=config.device), data, s, len(sink))
    result["samples"] = len(sink)
    return result


for _name in NAMES:
    MNIST_REGISTRY.register_declaration(method(_name), run)
