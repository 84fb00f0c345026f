"""Sparse variational dropout on LeNet-300-100 / LeNet-5-Caffe (Molchanov et al. 2017).

The recipe of the authors' LeNet scripts: log-uniform prior on all weights, additive
parameterisation with ``log sigma^2 = -10`` at start, ``log alpha`` clipped to [-8, 8],
local reparameterization, the train-time clip mask, Adam (lr 1e-3, batch 100) with the
learning rate constant for 100 epochs then linear to 0 (LeNet-300-100) or linear to 0 from
the start (LeNet-5), the KL weight 0 for 5 epochs then linear to 1 at epoch 20, 200
epochs; then weights with ``log alpha > 3`` are removed and the pruned mean network is
evaluated. ``--extra '{"prior": "ard"}'`` trains with the ARD KL ``1/2 log(1 + 1/alpha)`` instead
of the log-uniform prior's.
"""

import pyro
import torch

from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.models.dropout_priors import ARDPrior, LogUniformPrior
from zoo_protocols.config import RunConfig
from zoo_protocols.lenet import CompressionResult, register_compression_method
from zoo_protocols.methods import method
from zoo_protocols.lenet_recipes import compressed_result, fit_recipe, kl_warmup, linear_to_zero, network_for, training_details, resolve_epochs

PRIORS = {"log-uniform": LogUniformPrior, "ard": ARDPrior}

#: published results (Molchanov et al. 2017 / Molchanov 2022, Table 1; pruned architectures
#: from Louizos et al. 2017, Table 1), labelled as published by reproductions/compress_lenet.py
PUBLISHED = [
    {"method": "sparse-vd", "arch": "lenet300", "test_error": 1.92, "compression_ratio": 68.0, "per_layer_sparsity": "98.9-97.2-62.0", "pruned_architecture": "512-114-72", "source": "Molchanov et al. 2017, Table 1; architecture: Louizos et al. 2017, Table 1"},
    {"method": "sparse-vd", "arch": "lenet5", "test_error": 0.75, "compression_ratio": 280.0, "per_layer_sparsity": "67-98-99.8-95", "pruned_architecture": "14-19-242-131", "source": "Molchanov et al. 2017, Table 1; architecture: Louizos et al. 2017, Table 1"},
]


#: this protocol's settings (``config.extra`` overrides them)
DEFAULTS = {"init": "molchanov", "prior": "log-uniform"}

SPEC = method("sparse-vd")


def build_sparse_vd(train, config: RunConfig, epochs: int):
    """The Sparse VD model and guide before training, the recipe's default learning rate and
    its :func:`~zoo_protocols.lenet_recipes.fit_recipe` options: ``(model, guide, lr, options)``
    (what :func:`train_sparse_vd` trains, and ``benchmarks/epoch_time.py`` times)."""
    s = config.settings(DEFAULTS, SPEC.defaults)
    pyro.clear_param_store()
    torch.manual_seed(config.seed)
    net = network_for(config, s["init"])
    prior = s["prior"]
    if prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r} for sparse-vd; choose from {sorted(PRIORS)}")
    model = BayesianNeuralNetwork(net, PRIORS[prior](), CategoricalLikelihood(dataset_size=len(train[0])))
    guide = SPEC.guide(model, s)
    hold = 0.5 if config.arch == "lenet300" else 0.0
    # the protocol's KL warm-up (Molchanov et al.'s rw_linear) instead of the declared one
    fit_arguments = {**SPEC.fit_arguments(s, epochs), "kl_schedule": kl_warmup(epochs)}
    return model, guide, 1e-3, {"lr_schedule": linear_to_zero(epochs, hold), **fit_arguments}


def train_sparse_vd(train, config: RunConfig, epochs: int):
    """Trains the Sparse VD model and guide; returns ``(model, guide, history)``."""
    model, guide, lr, options = build_sparse_vd(train, config, epochs)
    history = fit_recipe(model, guide, train, config, epochs, lr, **options)
    return model, guide, history


@register_compression_method(SPEC.name, "Sparse variational dropout (Molchanov et al. 2017), pruned at log alpha > 3")
def run_sparse_vd(train, test, config: RunConfig) -> CompressionResult:
    epochs = resolve_epochs(config)
    model, guide, history = train_sparse_vd(train, config, epochs)
    pruned = guide.mean_network(masked=True)
    return compressed_result(pruned, model.net, config.arch, test, details=training_details(history, epochs))
