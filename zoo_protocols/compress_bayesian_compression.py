"""Bayesian compression on LeNet-300-100 / LeNet-5-Caffe: BC-GNJ and BC-GHS (Louizos et al. 2017).

Group normal-Jeffreys or group horseshoe priors (groups: input features of linear layers,
output channels of convolutions) with :class:`~pyrozoo.guides.BayesianCompressionGuide`,
trained with local reparameterization, a KL warm-up and Adam (lr 1e-3, constant for the first
half of the run, then linear to 0; ``lr_hold`` in ``--extra`` sets the fraction); groups whose scale has
``log alpha`` above the layer's threshold are pruned, the network of posterior means is
exported with the pruned units removed, and the bit precision of each layer is inferred
from the posterior variances of the weights the export stores. ``compression_with_bits``
charges ``1 + exponent + t_l`` bits per stored weight, and ``test_error_quantized`` is the
error of the network with its stored weights rounded to exactly that floating-point format
(:func:`~pyrozoo.compression.precision.round_to_bits` with a bounded exponent; the authors'
``special_round`` rounds to an absolute grid ``2^-t`` instead, which is not the format their
ratio charges for).

Known deviation: the group scales ``z`` are drawn once per minibatch (see
:class:`~pyrozoo.guides.BayesianCompressionGuide`), not per example as in the authors' code.
For BC-GHS the group ``log alpha`` includes the layer's global scale factors, which shifts all
groups of a layer alike; per-layer thresholds absorb that, one scalar threshold does not.

Settings (``--extra`` JSON of ``reproductions/compress_lenet.py``): ``thresholds`` (a number, a
list in layer order, or ``"auto"`` for Otsu's cut of each layer's ``log alpha`` histogram;
default -3, the scale of the authors' LeNet-300-100 thresholds -2.8, -3, -5), ``tau0``
(BC-GHS global scale, default 1e-5), ``checkpoint``.
"""

import pyro
import torch

from pyrozoo.compression import apply_masks
from pyrozoo.compression.group_pruning import group_masks, resolve_thresholds, weight_masks
from pyrozoo.compression.precision import bits_per_layer, compression_with_precision, exponent_bits, format_bits, round_to_bits
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood
from zoo_protocols.config import RunConfig
from zoo_protocols.lenet import COMPRESSION_REGISTRY, CompressionResult
from zoo_protocols.methods import MethodSpec, method
from zoo_protocols.lenet_recipes import classification_error, compressed_result, fit_recipe, kl_warmup, linear_to_zero, network_for, training_details, resolve_epochs

_SOURCE = "Louizos et al. 2017, Table 1 (architecture, bits) and code README (error, compression)"

#: published results, labelled as published by reproductions/compress_lenet.py. The compression
#: ratio is the one "after pruning" of the authors' README; "after precision reduction"
#: goes in ``compression_with_bits``.
PUBLISHED = [
    {"method": "bc-gnj", "arch": "lenet5", "test_error": 1.0, "compression_ratio": 108.0, "compression_with_bits": 361.0, "pruned_architecture": "8-13-88-13", "bits": "18-10-7-9", "source": _SOURCE},
    {"method": "bc-ghs", "arch": "lenet5", "test_error": 1.0, "compression_ratio": 156.0, "compression_with_bits": 419.0, "pruned_architecture": "5-10-76-16", "bits": "10-10-14-13", "source": _SOURCE},
    {"method": "bc-gnj", "arch": "lenet300", "pruned_architecture": "278-98-13", "bits": "8-9-14", "source": "Louizos et al. 2017, Table 1"},
    {"method": "bc-ghs", "arch": "lenet300", "pruned_architecture": "311-86-14", "bits": "13-11-10", "source": "Louizos et al. 2017, Table 1"},
]


#: this protocol's settings (``config.extra`` overrides them)
DEFAULTS = {"init": "torch", "lr_hold": 0.5, "thresholds": -3.0}


def build_bayesian_compression(train, config: RunConfig, epochs: int, spec: MethodSpec):
    """The model and guide of ``spec`` (BC-GNJ or BC-GHS) before training, the recipe's default
    learning rate and its :func:`~zoo_protocols.lenet_recipes.fit_recipe` options:
    ``(model, guide, lr, options)`` (what :func:`train_bayesian_compression` trains, and
    ``benchmarks/epoch_time.py`` times)."""
    s = config.settings(spec.defaults, DEFAULTS)
    pyro.clear_param_store()
    torch.manual_seed(config.seed)
    net = network_for(config, s["init"])
    model = BayesianNeuralNetwork(net, spec.prior(s), CategoricalLikelihood(dataset_size=len(train[0])))
    guide = spec.guide(model, s)
    lr_schedule = linear_to_zero(epochs, float(s["lr_hold"]))
    # the protocol's KL warm-up (Molchanov et al.'s rw_linear) instead of a declared one
    fit_arguments = {**spec.fit_arguments(s, epochs), "kl_schedule": kl_warmup(epochs)}
    return model, guide, 1e-3, {"lr_schedule": lr_schedule, **fit_arguments}


def train_bayesian_compression(train, config: RunConfig, epochs: int, spec: MethodSpec):
    model, guide, lr, options = build_bayesian_compression(train, config, epochs, spec)
    history = fit_recipe(model, guide, train, config, epochs, lr, **options)
    return model, guide, history


@torch.no_grad()
def compress(model, guide, arch: str, test, thresholds="auto", details=None) -> CompressionResult:
    """Group pruning, export, counting and bit precision of a trained BC model."""
    masks_g = group_masks(guide, thresholds)
    masks = weight_masks(model.prior, masks_g)
    means, variances = {}, {}
    for w in guide.weight_names:
        means[w], variances[w] = guide.weight_moments(w)
    masked = apply_masks(model.net, masks, values=means)
    result = compressed_result(masked, model.net, arch, test, details=details)
    # bits, exponent and storage over the weights the export stores: the group masks still
    # hold the weights of units that a neighbouring layer's pruning removed (the authors'
    # compress_matrix drops them too)
    stored = result.stored_weights
    if sorted(stored) != sorted(guide.weight_names):
        raise RuntimeError(f"the export's layers {sorted(stored)} are not the guide's weights {sorted(guide.weight_names)}")
    bits = bits_per_layer(means, variances, stored)
    kept_means = [means[w][stored[w]] for w in means if bool(stored[w].any())]
    overflow = float(max(m.abs().max() for m in kept_means)) if kept_means else 0.0
    exponent = exponent_bits(overflow)
    kept = {w: int(stored[w].sum()) for w in guide.weight_names}
    # the stored weights in the format the ratio charges for (1 + exponent + bits each); the
    # weights that the export folds into biases (reading constant units) stay exact, as biases do
    rounded = {w: torch.where(stored[w], round_to_bits(means[w], bits[w], exponent, overflow), means[w]) if overflow > 0 else means[w] for w in means}
    quantized = apply_masks(model.net, masks, values=rounded)
    log_alphas = {w: guide.group_log_alpha(w) for w in guide.weight_names}
    resolved = resolve_thresholds(guide.weight_names, thresholds, log_alphas)
    result.details.update(
        {
            "bits": format_bits([bits[w] for w in guide.weight_names]),
            "exponent_bits": exponent,
            "compression_with_bits": compression_with_precision(kept, bits, exponent, result.params_total),
            "test_error_quantized": classification_error(quantized.cpu(), test, device=torch.device("cpu")),
            "thresholds": "/".join(f"{resolved[w]:.3g}" for w in guide.weight_names),
            "groups_kept": "-".join(str(int(masks_g[w].sum())) for w in guide.weight_names),
        }
    )
    return result


def _run(spec: MethodSpec, train, test, config: RunConfig) -> CompressionResult:
    epochs = resolve_epochs(config)
    model, guide, history = train_bayesian_compression(train, config, epochs, spec)
    return compress(model, guide, config.arch, test, config.settings(DEFAULTS)["thresholds"], training_details(history, epochs))


for _name in ("bc-gnj", "bc-ghs"):
    COMPRESSION_REGISTRY.register_declaration(method(_name), _run)
