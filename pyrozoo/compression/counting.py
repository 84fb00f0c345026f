"""Counting the parameters and FLOPs of dense, sparse and structurally pruned networks.

One convention, used by every compression method of the zoo (and by the ``--out`` CSV of
``reproductions/compress_lenet.py``):

* **Layers.** Only ``nn.Linear`` and ``nn.Conv2d`` layers (and their sparse stand-ins
  :class:`~pyrozoo.compression.sparse.SparseLinear`,
  :class:`~pyrozoo.compression.sparse.SparseConv2d`) are counted. A network holding other
  parameterised modules (batch norm, embeddings, ...) is rejected rather than silently
  under-counted.
* **Parameters** are the *weights* ``|W|`` of those layers, as in the compression ratio
  ``|W| / |W != 0|`` of Han et al. (2015), Molchanov et al. (2017, Table 1) and Louizos et
  al. (2017). A weight is *kept* when it is non-zero (or, with ``masks``, when its mask
  entry is true). Biases are counted separately (``bias_total`` / ``bias_kept``, a bias
  entry is kept when its output unit still exists) and do not enter the ratio.
* **FLOPs** are the multiply-accumulate operations (MACs) of the kept weights for *one*
  example: a kept weight of a linear layer costs one MAC, a kept weight of a convolution
  one MAC per output position (``H_out * W_out``). Bias additions, activations, pooling and
  flattening are not counted. ``dense_flops`` counts every weight of the layers as they are
  shaped (the cost of a dense implementation of a structurally pruned network).
* **Units** (for ``pruned_architecture``) follow Louizos et al. (2017, Table 1): a
  convolution reports its output channels with at least one kept weight, a linear layer
  its input features with at least one kept weight. For LeNet-5-Caffe the dense network
  reads ``20-50-800-500`` and for LeNet-300-100 ``784-300-100``.

Output positions of convolutions are measured by running the network once on an example
input, so any input size and stride/padding/dilation is handled.
"""

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import pandas as pd
import torch
from torch import nn

from pyrozoo.utils import forward_with_hooks

__all__ = [
    "LayerCount",
    "NetworkCount",
    "count_network",
    "layer_modules",
    "pruned_architecture",
]


@dataclass
class LayerCount:
    """Counts of one linear or convolution layer (see the module docstring for the convention)."""

    name: str
    kind: str  # "linear" or "conv2d"
    weight_shape: tuple
    weights_total: int
    weights_kept: int
    bias_total: int
    bias_kept: int
    units: int  # conv: output channels with a kept weight; linear: input features with a kept weight
    output_positions: int  # H_out * W_out for convolutions, 1 for linear layers
    flops: int  # MACs of the kept weights per example
    dense_flops: int  # MACs of all weights of the layer as shaped, per example

    @property
    def sparsity(self) -> float:
        """Fraction of the layer's weights that are pruned (zero), in [0, 1]."""
        return 1.0 - self.weights_kept / self.weights_total if self.weights_total else 0.0


@dataclass
class NetworkCount:
    """Per-layer counts and their totals."""

    layers: List[LayerCount]

    @property
    def params_total(self) -> int:
        return sum(layer.weights_total for layer in self.layers)

    @property
    def params_kept(self) -> int:
        return sum(layer.weights_kept for layer in self.layers)

    @property
    def compression_ratio(self) -> float:
        """``|W| / |W != 0|`` (infinite when nothing is kept)."""
        kept = self.params_kept
        return self.params_total / kept if kept else float("inf")

    @property
    def flops(self) -> int:
        return sum(layer.flops for layer in self.layers)

    @property
    def dense_flops(self) -> int:
        return sum(layer.dense_flops for layer in self.layers)

    @property
    def bias_total(self) -> int:
        return sum(layer.bias_total for layer in self.layers)

    @property
    def bias_kept(self) -> int:
        return sum(layer.bias_kept for layer in self.layers)

    @property
    def pruned_architecture(self) -> str:
        """Kept units of every layer joined by ``-``, e.g. ``"8-13-88-13"`` (LeNet-5:
        conv1, conv2 output channels, fc1, fc2 input features)."""
        return "-".join(str(layer.units) for layer in self.layers)

    def per_layer_sparsity(self, dense: Optional["NetworkCount"] = None) -> List[float]:
        """Percent of pruned weights per layer, in layer order (Molchanov et al. 2017, Table 1).

        With ``dense`` (the counts of the network before pruning, layer for layer), the
        percentages are of the dense layers' weights: an export whose layers have shrunk
        (pruned units removed) is then measured against the network it came from, not
        against its own smaller shapes."""
        if dense is None:
            return [100.0 * layer.sparsity for layer in self.layers]
        if len(dense.layers) != len(self.layers):
            raise ValueError(f"cannot compare {len(self.layers)} layers with a dense network of {len(dense.layers)}")
        return [
            100.0 * (1.0 - layer.weights_kept / reference.weights_total) if reference.weights_total else 0.0
            for layer, reference in zip(self.layers, dense.layers)
        ]

    def to_frame(self, dense: Optional["NetworkCount"] = None) -> pd.DataFrame:
        """One row per layer; ``sparsity_percent`` as :meth:`per_layer_sparsity` (against
        ``dense`` when given)."""
        rows = [
            {
                "layer": layer.name,
                "kind": layer.kind,
                "weight_shape": "x".join(str(s) for s in layer.weight_shape),
                "weights_total": layer.weights_total,
                "weights_kept": layer.weights_kept,
                "sparsity_percent": sparsity,
                "units": layer.units,
                "flops": layer.flops,
            }
            for layer, sparsity in zip(self.layers, self.per_layer_sparsity(dense))
        ]
        return pd.DataFrame(rows)


def _layer_types():
    from pyrozoo.compression.sparse import SparseConv2d, SparseLinear

    return (nn.Linear, SparseLinear), (nn.Conv2d, SparseConv2d)


def _weightless_types():
    """Modules with buffers but no weights to count (the input selection of an export)."""
    from pyrozoo.compression.structured import InputSelection

    return (InputSelection,)


def layer_modules(net: nn.Module) -> Dict[str, nn.Module]:
    """``{name: module}`` of the counted layers in registration order; raises for parameterised
    modules the convention does not cover."""
    linear_types, conv_types = _layer_types()
    layers = {}
    for name, module in net.named_modules():
        if isinstance(module, linear_types + conv_types):
            layers[name] = module
        elif any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False)):
            if not isinstance(module, _weightless_types()):
                raise NotImplementedError(
                    f"cannot count module {name!r} of type {type(module).__name__}: only Linear and Conv2d layers "
                    "are covered by the counting convention"
                )
    if not layers:
        raise ValueError("the network has no Linear or Conv2d layer to count")
    return layers


def _dense_weight(module: nn.Module) -> torch.Tensor:
    if hasattr(module, "dense_weight"):
        return module.dense_weight()
    w = module.weight
    return w.to_dense() if w.layout != torch.strided else w


def _dense_bias(module: nn.Module) -> Optional[torch.Tensor]:
    b = getattr(module, "bias", None)
    return None if b is None else b


def _output_positions(net: nn.Module, layers: Dict[str, nn.Module], example_input: torch.Tensor) -> Dict[str, int]:
    """``H_out * W_out`` of every convolution (1 for linear layers), from one forward pass."""
    _, conv_types = _layer_types()
    positions = {name: 1 for name in layers}
    calls = {name: 0 for name in layers}

    def make_hook(name):
        def hook(module, inputs, output):
            calls[name] += 1
            if isinstance(module, conv_types):
                positions[name] = int(output.shape[-2] * output.shape[-1])

        return hook

    forward_with_hooks(net, example_input, [(module, make_hook(name)) for name, module in layers.items()])
    for name, n in calls.items():
        if n != 1:
            raise ValueError(f"layer {name!r} ran {n} times in one forward pass; the counting convention needs each layer used once")
    return positions


def count_network(
    net: nn.Module,
    example_input: torch.Tensor,
    masks: Optional[Dict[str, torch.Tensor]] = None,
) -> NetworkCount:
    """Counts the weights, kept weights, units and FLOPs of every Linear/Conv2d layer.

    :param net: a dense, masked (zeros in pruned weights), structurally pruned or sparse network.
    :param example_input: one input batch (only its shape matters), used to measure the
        output positions of convolutions.
    :param masks: optional ``{parameter name ("fc1.weight"): bool tensor of the weight's
        shape}``; where given, ``True`` marks a kept weight instead of ``weight != 0``.
    """
    if not torch.is_tensor(example_input):
        raise TypeError(f"example_input must be a tensor, got {type(example_input).__name__}")
    layers = layer_modules(net)
    masks = dict(masks or {})
    known = {f"{name}.weight" for name in layers}
    unknown = set(masks) - known
    if unknown:
        raise KeyError(f"masks for unknown layer weights {sorted(unknown)}; layers: {sorted(known)}")
    positions = _output_positions(net, layers, example_input)
    linear_types, _ = _layer_types()
    out = []
    for name, module in layers.items():
        weight = _dense_weight(module).detach()
        mask = masks.get(f"{name}.weight")
        if mask is None:
            kept = weight != 0
        else:
            if mask.shape != weight.shape:
                raise ValueError(f"mask of {name}.weight has shape {tuple(mask.shape)}, the weight {tuple(weight.shape)}")
            kept = mask.to(device=weight.device, dtype=torch.bool)
        is_linear = isinstance(module, linear_types)
        if is_linear:
            units = int(kept.any(0).sum())  # input features with a kept weight
        else:
            units = int(kept.flatten(1).any(1).sum())  # output channels with a kept weight
        out_alive = kept.flatten(1).any(1)
        bias = _dense_bias(module)
        n_kept = int(kept.sum())
        out.append(
            LayerCount(
                name=name,
                kind="linear" if is_linear else "conv2d",
                weight_shape=tuple(weight.shape),
                weights_total=weight.numel(),
                weights_kept=n_kept,
                bias_total=0 if bias is None else bias.numel(),
                bias_kept=0 if bias is None else int(out_alive.sum()),
                units=units,
                output_positions=positions[name],
                flops=n_kept * positions[name],
                dense_flops=weight.numel() * positions[name],
            )
        )
    return NetworkCount(out)


def pruned_architecture(net: nn.Module, example_input: torch.Tensor, masks: Optional[Dict[str, torch.Tensor]] = None) -> str:
    """The kept units per layer (conv: output channels; linear: input features), e.g. ``"8-13-88-13"``."""
    return count_network(net, example_input, masks).pruned_architecture


def format_sparsity(percents: Sequence[Union[int, float]], digits: int = 1) -> str:
    """Per-layer sparsity in the ``98.9-97.2-62.0`` style of Molchanov et al. (2017, Table 1)."""
    return "-".join(f"{p:.{digits}f}" for p in percents)
