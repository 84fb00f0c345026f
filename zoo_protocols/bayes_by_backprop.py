"""Bayes by Backprop on MNIST (Blundell et al. 2015, sec. 5.1), with Graves-style pruning.

The method is the declaration ``bbb`` of :mod:`zoo_protocols.methods` (scale-mixture prior, eq. 7;
mean-field Gaussian posterior; one weight sample per minibatch; the minibatch KL weights of
eq. 9 on request); this protocol supplies the 784-h-h-10 MLP, the data and the training
budget, and scores the posterior predictive, the network at the posterior mean and the
signal-to-noise pruning curve. A user's images run the same network, sized from them.
"""

import math
from typing import Optional, Sequence

import pandas as pd

from pyrozoo.compression.graves import pruning_curve
from pyrozoo.inference import evaluate, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method

#: Blundell et al. (2015), Table 1: test error (%) of BBB with the scale-mixture prior
PUBLISHED_ERROR = {400: 1.36, 800: 1.34, 1200: 1.32}

SPEC = method("bbb")

#: the paper's initial posterior sd, softplus(-5)
INIT_SCALE = math.log1p(math.exp(-5.0))


def settings(pi: float, log_sigma1: float, log_sigma2: float, init_scale: float, kl_weights: str):
    """The declaration's settings from the paper's parameters: ``pi``, ``-log sigma1``,
    ``-log sigma2`` of the prior (eq. 7) and the minibatch KL weights (``"blundell"``: eq. 9)."""
    extra = {"mixture": (pi, math.exp(-log_sigma1), math.exp(-log_sigma2)), "blundell": kl_weights == "blundell", "init_scale": init_scale}
    return RunConfig(extra=extra).settings(SPEC.defaults)


def train(train_data, s, *, hidden: int, epochs: int, batch_size: int, lr: float, estimator: Optional[str] = None, device=None, seed: int = 0, checkpoint=None, progress: bool = False,
          num_classes: int = 10):
    """The BNN (inputs-``hidden``-``hidden``-``num_classes``, its inputs the features of
    ``train_data``: MNIST's 784) and its ``bbb`` posterior trained on ``train_data``
    (flattened images, labels) under settings ``s``; ``estimator="local"`` uses local
    reparameterization instead of the paper's weight sample per minibatch. Returns
    ``(model, guide, history)``."""
    x, y = train_data
    prior = SPEC.prior(s)
    model = BayesianNeuralNetwork(MLP(x.shape[-1], [hidden, hidden], num_classes).to(device), prior, CategoricalLikelihood(len(x)))
    guide = SPEC.guide(model, s)
    fit_arguments = SPEC.fit_arguments(s, epochs)
    if estimator is not None:
        fit_arguments["estimator"] = estimator
    history = fit(model, guide, (x, y), epochs=epochs, batch_size=batch_size, lr=lr, device=device, seed=seed, checkpoint=checkpoint, progress=progress, **fit_arguments)
    return model, guide, history


def scores(model, guide, x_test, y_test, num_samples: int) -> dict:
    """Test error (%) of the posterior predictive (``num_samples`` draws) and of the network at
    the posterior mean, and the predictive's test log-likelihood."""
    predictive = evaluate(model, guide, x_test, y_test, num_samples=num_samples, batch_size=2000)
    median = {name: value.unsqueeze(0) for name, value in guide.median().items()}
    mean_net = evaluate(model, guide, x_test, y_test, num_samples=1, batch_size=2000, samples=median)
    return {"test_error": predictive["error"], "test_error_posterior_mean": mean_net["error"], "test_ll": predictive["test_ll"]}


def pruning(model, guide, x_test, y_test, num_samples: int, thresholds: Sequence[float]) -> pd.DataFrame:
    """:func:`scores` with the weights (biases kept) of ``|mu/sigma|`` below each
    threshold set to zero (Graves 2011; Blundell et al. 2015, sec. 5.1)."""
    return pruning_curve(guide, thresholds, lambda: scores(model, guide, x_test, y_test, num_samples), include=lambda name: name.endswith("weight"))
