"""Structured compression of LeNet-5-Caffe / LeNet-300-100 with radial-directional posteriors
(Oh, Adamczewski & Park 2020, Sec. 5.2).

Every Linear/Conv2d weight with both dimensions above 1 is double-grouped (rows = output
units / channels, columns = input units / channels, convolutions flattened per channel);
conv1 of LeNet-5 (one input channel) and all biases are mean-field Gaussians with ``N(0, 1)``
priors, as in the paper. Radius prior: local half-Cauchy ``tau_local = 0.01`` and global
``tau_global = 0.001`` (the values in the authors' configuration file); direction prior: vMF
with expected cosine 0.9 to its mean (their MNIST setting). Adam, minibatches of 100,
closed-form KLs with a linear KL warm-up. The authors train 200 epochs with learning rate
1e-3, a warm-up over the first half and log-normal posteriors starting at a standard
deviation of 1e-4; on this project's CPU an epoch costs several minutes, so the defaults are
made for runs of 10-20 epochs: learning rate 3e-3, warm-up over the first 20% of the epochs,
initial standard deviation 1e-2 (with ``--epochs 200 --lr 1e-3`` and
``{"warmup_fraction": 0.5, "init_scale": 1e-4}`` the authors' schedule is recovered).

After training, rows and columns are pruned by the log posterior mode of their local radius
(:mod:`pyrozoo.compression.radial_directional`), at the widest gap of each layer's histogram
(``"gap"``) unless thresholds are given; the output layer's rows (the classes) are kept. The
network of posterior means is exported with the pruned units removed and evaluated, and
counted by the convention of :mod:`pyrozoo.compression.counting`.

Settings (``--extra`` JSON of ``reproductions/compress_lenet.py``): ``thresholds`` (number, list,
dict, ``"gap"``, ``"otsu"``), ``min_gap`` (nats, default 2), ``tau_local``, ``tau_global``,
``direction_epsilon``, ``init_direction_epsilon``, ``warmup_fraction``, ``statistics_out`` (a
JSON file for the per-unit statistics and thresholds, which ``reproductions/rdp_pruning_histogram.py``
plots as the paper's Fig. 7), ``checkpoint``, ``predictive_samples`` (posterior samples for the
Bayesian-model-average error reported beside the exported network's, default 10).
"""

import pyro
import torch

from pyrozoo import atomic
from pyrozoo.compression import apply_masks
from pyrozoo.compression.radial_directional import posterior_mean_weights, pruning_masks, pruning_statistics
from pyrozoo.inference import evaluate
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood
from zoo_protocols.config import RunConfig, Settings
from zoo_protocols.lenet import CompressionResult, register_compression_method
from zoo_protocols.methods import method
from zoo_protocols.lenet_recipes import compressed_result, fit_recipe, network_for, training_details, resolve_epochs

_SOURCE = "Oh et al. 2020, Table 2 (their counting convention for params/FLOPs is not stated)"

#: published results, labelled as published by reproductions/compress_lenet.py
PUBLISHED = [
    {"method": "rdp", "arch": "lenet5", "test_error": 1.0, "pruned_architecture": "4-7-110-66", "flops": 125_000, "params_kept": 20_000, "source": _SOURCE},
]

#: this protocol's settings of the ``rdp`` declaration (:mod:`zoo_protocols.methods`) and of its pruning;
#: ``config.extra`` overrides them
DEFAULTS = {
    "local_scale": 1e-2,  # tau of the half-Cauchy local radius scales
    "global_scale": 1e-3,  # tau of the global one
    "direction_epsilon": 0.1,
    "init_direction_epsilon": 0.1,
    "init_scale": 1e-2,
    "warmup_fraction": 0.2,
    "lr": 3e-3,
    "thresholds": "gap",
    "min_gap": 2.0,
    "predictive_samples": 10,
}

SPEC = method("rdp")


def settings(config: RunConfig) -> Settings:
    return config.settings(DEFAULTS, SPEC.defaults)


def build_rdp(train, config: RunConfig, epochs: int):
    """The RDP model and guide before training, the recipe's default learning rate and its
    :func:`~zoo_protocols.lenet_recipes.fit_recipe` options: ``(model, guide, lr, options)`` (what
    :func:`train_rdp` trains, and ``benchmarks/epoch_time.py`` times)."""
    s = settings(config)
    pyro.clear_param_store()
    torch.manual_seed(config.seed)
    net = network_for(config, "torch")
    model = BayesianNeuralNetwork(net, SPEC.prior(s), CategoricalLikelihood(dataset_size=len(train[0])))
    guide = SPEC.guide(model, s)
    return model, guide, float(s["lr"]), SPEC.fit_arguments(s, epochs)


def train_rdp(train, config: RunConfig, epochs: int):
    model, guide, lr, options = build_rdp(train, config, epochs)
    history = fit_recipe(model, guide, train, config, epochs, lr, **options)
    return model, guide, history


def _output_layer(model) -> str:
    """The last grouped weight in the prior's order: the layer whose rows are the outputs
    when the network ends in a grouped layer (LeNet's fc2)."""
    return list(model.prior.groups)[-1]


@torch.no_grad()
def compress(model, guide, config: RunConfig, test, details=None) -> CompressionResult:
    """Prune, export, evaluate and count a trained RDP model."""
    s = settings(config)
    thresholds = s["thresholds"]
    group_masks, masks, resolved = pruning_masks(model, guide, thresholds, keep_rows=[_output_layer(model)], min_gap=float(s["min_gap"]))
    means = posterior_mean_weights(model, guide)
    masked = apply_masks(model.net, masks, values=means)
    result = compressed_result(masked, model.net, config.arch, test, details=details)
    stats = pruning_statistics(model, guide)
    result.details.update(
        {
            "thresholds": "/".join(f"{resolved[k]:.3g}" for k in stats),
            "groups_kept": "/".join(f"{k}:{int(group_masks[k].sum())}of{group_masks[k].numel()}" for k in stats),
        }
    )
    samples = int(s["predictive_samples"])
    if samples > 0:
        x, y = test
        metrics = evaluate(model, guide, x.to(config.device), y.to(config.device), num_samples=samples, batch_size=1000)
        result.details["bayesian_average_error_unpruned"] = metrics["error"]
    out = config.extra.get("statistics_out")
    if out:
        record = {
            "arch": config.arch,
            "seed": config.seed,
            "statistic": "log posterior mode of the local radius, 0.5 (mu_a + mu_b) - 0.25 (s_a^2 + s_b^2)",
            "groupings": {k: {"values": stats[k].cpu().tolist(), "threshold": resolved[k], "kept": int(group_masks[k].sum())} for k in stats},
            "test_error": result.test_error,
            "pruned_architecture": result.pruned_architecture,
        }
        atomic.write_json(out, record, indent=1, allow_nan=True)
    return result


@register_compression_method("rdp", "radial-directional posteriors (Oh et al. 2020): double-grouped vMF directions, half-Cauchy radii")
def run_rdp(train, test, config: RunConfig) -> CompressionResult:
    epochs = resolve_epochs(config)
    model, guide, history = train_rdp(train, config, epochs)
    return compress(model, guide, config, test, training_details(history, epochs))
