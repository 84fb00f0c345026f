"""The UCI protocol's variational methods, evaluated from their declarations
(:mod:`zoo_protocols.methods`): MAP, mean-field VI, Bayes by Backprop, the ELBO family taken
apart, DSIVI and sparse variational dropout.

All of them use the protocol's one-hidden-layer ReLU network (50 units; 100 for protein),
a Gaussian likelihood whose noise precision has a ``Gamma(6, 6)`` prior and is inferred,
and minibatch training with :func:`pyrozoo.inference.fit` under one schedule
(:data:`DEFAULTS`: 1000 epochs, minibatches of 32, Adam 1e-2 decayed linearly to a tenth),
so ``config.epochs`` / ``batch_size`` / ``lr`` mean the same for every method. Together they
separate what each ingredient does:

* ``map``: :class:`~pyrozoo.guides.DeltaGuide` under a ``N(0, 1)`` weight prior;
* ``mfvi``: mean-field Normal guide, ``N(0, 1)`` prior, closed-form KL *and* local
  reparameterization;
* ``mfvi-cf``: the same without local reparameterization (one weight sample per minibatch);
* ``mfvi-mc``: the same with Pyro's ``Trace_ELBO`` (the KL estimated by Monte Carlo);
* ``bbb``: Bayes by Backprop (Blundell et al. 2015): the scale-mixture prior (eq. 7), weight
  samples per minibatch, optionally the minibatch KL weights of eq. 9 (``extra["blundell"]``);
* ``dsivi``: the doubly semi-implicit bound (Molchanov 2022, Eq. 14): a semi-implicit
  posterior (``K1`` mixing draws) under the marginal of ``w | lambda ~ N(0, 1/lambda)``,
  ``lambda ~ Gamma(1, 1)`` (``K2`` draws);
* ``sparse-vd``: sparse variational dropout (Molchanov et al. 2017): log-uniform prior on
  the weight matrices, the additive parameterisation, the closed-form KL approximation, local
  reparameterization, a linear KL warm-up over the first fifth of the epochs.
"""

import pyro

from pyrozoo.data import UCISplit
from pyrozoo.inference import evaluate
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import evaluated_by, method, MethodSpec, predicts_with_one_sample
from zoo_protocols.uci import UCI_REGISTRY, decay_to_tenth, fit_split, uci_model

#: the protocol's schedule and likelihood (a method's declared defaults and ``config`` override them)
DEFAULTS = {
    "epochs": 1000,
    "batch_size": 32,
    "lr": 1e-2,
    "num_samples": 100,
    "precision_prior": (6.0, 6.0),  # Gamma(concentration, rate) on the noise precision
}

#: smoke runs (``config.quick``) train this many epochs at most
QUICK_EPOCHS = 5

#: the declarations this protocol evaluates: those that name it (``protocols=("uci", ...)``)
NAMES = evaluated_by("uci")


def run(spec: MethodSpec, split: UCISplit, config: RunConfig) -> dict:
    """Trains ``spec`` on ``split`` and evaluates it in the original target units."""
    s = config.settings(spec.defaults, DEFAULTS)
    pyro.clear_param_store()
    model = uci_model(split, spec.prior(s), s["precision_prior"], config)
    guide = spec.guide(model, s)
    epochs = min(s["epochs"], QUICK_EPOCHS) if config.quick else s["epochs"]
    fit_split(model, guide, split, config, epochs, lr_schedule=decay_to_tenth(epochs), batch_size=s["batch_size"], lr=s["lr"], **spec.fit_arguments(s, epochs))
    num_samples = 1 if predicts_with_one_sample(guide) else s["num_samples"]
    return evaluate(model, guide, split.x_test, split.y_test, num_samples=num_samples, y_scale=split.y_std, y_shift=split.y_mean)


for _name in NAMES:
    UCI_REGISTRY.register_declaration(method(_name), run)
