"""Structured export: removing pruned units to obtain an actually smaller network.

Given a network whose pruned weights are zero (the *masked network*, see
:func:`pyrozoo.compression.sparse.apply_masks`), :func:`remove_pruned_units` returns a
copy in which every unit (output neuron of a linear layer, output channel of a
convolution) that cannot influence the output is removed, together with the matching
inputs of the next layer, so the layers are genuinely smaller ``nn.Linear`` /
``nn.Conv2d`` modules. The exported network computes the same function as the masked one.

A unit ``j`` of layer ``l`` is removed when either

* **its outputs are unused:** every weight of layer ``l + 1`` that reads it is zero (for a
  convolution followed by ``flatten`` and a linear layer, the block of ``H * W`` input
  features of channel ``j``), counting only the units of ``l + 1`` that are themselves kept;
* **it is constant:** all its weights from non-constant inputs are zero, so it outputs the
  same value for every example (``act(b_j)`` after activation and pooling). Its
  contribution is then folded into the bias of layer ``l + 1``. This needs a linear next
  layer or a convolution without padding (with padding the constant map would not be
  constant at the borders); otherwise the unit is kept.

Units of the last layer (the outputs) are never removed. Input features of a first linear
layer that no kept unit reads are removed too, by an :class:`InputSelection` in front.

The layer chain is found by running the network once on an example input: the Linear /
Conv2d layers must each be called once, in a chain where only unit-wise operations
(activations, max pooling, flattening in channel-major order) lie between consecutive
layers, as in :class:`~pyrozoo.models.MLP`, :class:`~pyrozoo.models.LeNet300100` and
:class:`~pyrozoo.models.LeNet5`. Constant values are read from that forward pass of the
masked network and checked to be constant.
"""

import copy
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import torch
from torch import nn

from pyrozoo.compression.sparse import apply_masks
from pyrozoo.utils import forward_with_hooks

__all__ = ["InputSelection", "StructuredExport", "remove_pruned_units", "layer_chain"]


class InputSelection(nn.Module):
    """Flattens the input and keeps the features listed in ``index`` (first-layer input pruning)."""

    def __init__(self, index: torch.Tensor, in_features: int):
        super().__init__()
        self.in_features = int(in_features)
        self.register_buffer("index", index.detach().clone().long())

    def forward(self, x):
        x = x.flatten(1) if x.dim() > 2 else x
        if x.shape[-1] != self.in_features:
            raise ValueError(f"expected inputs with {self.in_features} features, got shape {tuple(x.shape)}")
        return x.index_select(-1, self.index)


class _Selected(nn.Module):
    """``net(InputSelection(x))``."""

    def __init__(self, selection: InputSelection, net: nn.Module):
        super().__init__()
        self.selection = selection
        self.net = net

    def forward(self, x):
        return self.net(self.selection(x))


@dataclass
class _Layer:
    name: str
    module: nn.Module
    kind: str  # "linear" or "conv"
    input: torch.Tensor  # the input of the layer in one forward pass of the masked network
    block: int = 1  # input features per unit of the previous layer (H*W at a conv -> linear boundary)


@dataclass
class StructuredExport:
    """The exported network and, per layer, the indices of the kept output units."""

    module: nn.Module
    kept_units: Dict[str, torch.Tensor]
    input_index: Optional[torch.Tensor] = None
    folded_units: Dict[str, int] = field(default_factory=dict)
    #: ``{"<layer>.weight": bool mask}`` in the original network's shapes: the weights the
    #: export stores (nonzero, in a kept unit, reading a kept input). Per-weight figures of
    #: the compressed model (e.g. bit precision) are taken over these, not over the masked
    #: network, which still holds the weights of removed units.
    stored_weights: Dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def architecture(self) -> List[int]:
        return [len(v) for v in self.kept_units.values()]


def layer_chain(net: nn.Module, example_input: torch.Tensor) -> List[_Layer]:
    """The Linear/Conv2d layers of ``net`` in call order, with their inputs from one forward pass."""
    layers = [(n, m) for n, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    if not layers:
        raise ValueError("the network has no Linear or Conv2d layer")
    for name, module in net.named_modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)) and (any(True for _ in module.parameters(recurse=False)) or any(True for _ in module.buffers(recurse=False))):
            raise NotImplementedError(f"structured export cannot shrink module {name!r} of type {type(module).__name__}")
    calls: List[_Layer] = []

    def make_hook(name):
        def hook(mod, inputs):
            calls.append(_Layer(name, mod, "linear" if isinstance(mod, nn.Linear) else "conv", inputs[0].detach()))

        return hook

    forward_with_hooks(net, example_input, [(module, make_hook(name)) for name, module in layers], pre=True)
    names = [c.name for c in calls]
    if len(set(names)) != len(names) or len(names) != len(layers):
        raise ValueError(f"every Linear/Conv2d layer must be called exactly once per forward pass; calls: {names}")
    for prev, layer in zip(calls[:-1], calls[1:]):
        units = _out_units(prev.module)
        if layer.kind == "conv":
            if prev.kind != "conv":
                raise NotImplementedError(f"a convolution ({layer.name}) after a linear layer ({prev.name}) is not supported")
            if layer.module.in_channels != units:
                raise ValueError(f"{layer.name} reads {layer.module.in_channels} channels but {prev.name} writes {units}")
            if layer.module.groups != 1:
                raise NotImplementedError(f"grouped convolution {layer.name} is not supported")
        else:
            if layer.module.in_features % units:
                raise ValueError(f"{layer.name} reads {layer.module.in_features} features, not a multiple of {prev.name}'s {units} units")
            layer.block = layer.module.in_features // units
            if prev.kind == "linear" and layer.block != 1:
                raise ValueError(f"{layer.name} reads {layer.module.in_features} features but {prev.name} writes {units}")
    if calls[0].kind == "conv" and calls[0].module.groups != 1:
        raise NotImplementedError(f"grouped convolution {calls[0].name} is not supported")
    return calls


def _out_units(module: nn.Module) -> int:
    return module.out_features if isinstance(module, nn.Linear) else module.out_channels


def _unit_view(layer: _Layer, weight: torch.Tensor) -> torch.Tensor:
    """The weight as ``(out, in_units, rest)``: the entries of each input unit together."""
    out = weight.shape[0]
    if layer.kind == "linear":
        return weight.reshape(out, -1, layer.block)
    return weight.reshape(out, weight.shape[1], -1)


def _unit_values(layer: _Layer) -> torch.Tensor:
    """The layer's input per input unit: ``(n, in_units, positions)``."""
    x = layer.input
    if layer.kind == "linear":
        return x.reshape(x.shape[0], -1, layer.block)
    return x.reshape(x.shape[0], x.shape[1], -1)


def _foldable(layer: _Layer) -> bool:
    """Can constant inputs of this layer be folded into its bias exactly?"""
    if layer.kind == "linear":
        return True
    m = layer.module
    return m.padding_mode == "zeros" and not isinstance(m.padding, str) and all(p == 0 for p in m.padding)


@torch.no_grad()
def remove_pruned_units(
    net: nn.Module,
    example_input: torch.Tensor,
    masks: Optional[Dict[str, torch.Tensor]] = None,
    *,
    prune_inputs: bool = True,
    atol: float = 1e-6,
) -> StructuredExport:
    """Exports a copy of ``net`` with the units that pruning made useless removed.

    :param net: the network; weights that are exactly zero count as pruned.
    :param example_input: one input batch (its values are used to read constant units).
    :param masks: optional ``{parameter name: bool keep mask}`` applied first (see
        :func:`~pyrozoo.compression.sparse.apply_masks`).
    :param prune_inputs: also remove unused input features of a first linear layer.
    :param atol: tolerance of the check that a structurally constant unit is numerically constant.
    :returns: a :class:`StructuredExport`; ``export.module`` gives the same outputs as the
        masked network.
    """
    masked = apply_masks(net, masks) if masks else copy.deepcopy(net)
    masked.eval()
    chain = layer_chain(masked, example_input)
    L = len(chain)
    nonzero = [_unit_view(layer, layer.module.weight) != 0 for layer in chain]

    # forward: which units are constant (all weights from non-constant inputs are zero)
    constant = []
    for l, layer in enumerate(chain):
        in_const = constant[l - 1] if l else torch.zeros(nonzero[l].shape[1], dtype=torch.bool, device=nonzero[l].device)
        reads_varying = (nonzero[l] & ~in_const.reshape(1, -1, 1)).flatten(1).any(1)
        constant.append(~reads_varying)
    # a constant unit can be removed only if the next layer can absorb it and it is numerically constant
    removable_const = []
    for l in range(L - 1):
        nxt = chain[l + 1]
        c = constant[l].clone()
        if c.any():
            if not _foldable(nxt):
                c[:] = False
            else:
                values = _unit_values(nxt)
                spread = (values.amax(dim=(0, 2)) - values.amin(dim=(0, 2))).abs()
                c &= spread <= atol * (1 + values.abs().amax(dim=(0, 2)))
        removable_const.append(c)
    removable_const.append(torch.zeros_like(constant[-1]))

    # backward: which units feed a kept unit of the next layer
    kept = [None] * L
    kept[L - 1] = torch.ones(_out_units(chain[-1].module), dtype=torch.bool, device=nonzero[-1].device)
    for l in range(L - 2, -1, -1):
        used = nonzero[l + 1][kept[l + 1]].any(0).any(-1) if kept[l + 1].any() else torch.zeros(nonzero[l + 1].shape[1], dtype=torch.bool, device=nonzero[l + 1].device)
        kept[l] = used & ~removable_const[l]
        # a constant unit that is read but not removable stays; one that is not read goes
    input_used = nonzero[0][kept[0]].any(0).any(-1) if kept[0].any() else torch.zeros(nonzero[0].shape[1], dtype=torch.bool, device=nonzero[0].device)

    export = copy.deepcopy(masked)
    folded = {}
    kept_units = {}
    stored_weights = {}
    for l, layer in enumerate(chain):
        module = layer.module
        out_idx = kept[l].nonzero().flatten()
        if len(out_idx) == 0 or (l > 0 and not bool(kept[l - 1].any())):
            # (torch cannot shape a layer of no units; a network without them is a constant)
            raise ValueError(
                f"remove_pruned_units: layer {layer.name!r} keeps no unit{'' if len(out_idx) == 0 else ' to read from'}: every weight "
                "into it is pruned, so the pruned network's output does not depend on its input. Prune less (a looser threshold, "
                "or one per layer), or predict with the masked network itself")
        if l == 0:
            in_units = input_used if (prune_inputs and layer.kind == "linear") else torch.ones_like(input_used)
        else:
            in_units = kept[l - 1]
        in_idx_units = in_units.nonzero().flatten()
        w = _unit_view(layer, module.weight)
        stored = torch.zeros_like(w, dtype=torch.bool)
        stored[out_idx.unsqueeze(1), in_idx_units.unsqueeze(0)] = True
        stored_weights[f"{layer.name}.weight"] = (stored & (w != 0)).reshape(module.weight.shape)
        bias = module.bias.clone() if module.bias is not None else None
        # fold the constant units of the previous layer that were removed
        if l > 0:
            dropped_const = removable_const[l - 1] & ~kept[l - 1]
            if dropped_const.any():
                values = _unit_values(layer)[0]  # (in_units, positions), the same for every example
                if layer.kind == "linear":
                    contribution = (w[:, dropped_const] * values[dropped_const].unsqueeze(0)).sum((1, 2))
                else:
                    contribution = w[:, dropped_const].sum(-1) @ values[dropped_const, 0]
                bias = contribution if bias is None else bias + contribution
                folded[layer.name] = int(dropped_const.sum())
        w_new = w[out_idx][:, in_idx_units].reshape(len(out_idx), -1, *module.weight.shape[2:]) if layer.kind == "conv" else w[out_idx][:, in_idx_units].reshape(len(out_idx), -1)
        b_new = None if bias is None else bias[out_idx]
        if layer.kind == "linear":
            new = nn.Linear(w_new.shape[1], w_new.shape[0], bias=b_new is not None, device=w_new.device, dtype=w_new.dtype)
        else:
            new = nn.Conv2d(
                w_new.shape[1], w_new.shape[0], module.kernel_size, stride=module.stride, padding=module.padding,
                dilation=module.dilation, bias=b_new is not None, padding_mode=module.padding_mode,
                device=w_new.device, dtype=w_new.dtype,
            )
        new.weight.copy_(w_new)
        if b_new is not None:
            new.bias.copy_(b_new)
        _set_submodule(export, layer.name, new)
        kept_units[layer.name] = out_idx
    input_index = None
    if prune_inputs and chain[0].kind == "linear" and not bool(input_used.all()):
        input_index = input_used.nonzero().flatten()
        first_in = chain[0].module.in_features
        if getattr(export, "in_features", None) == first_in:
            export.in_features = len(input_index)  # pyrozoo's MLP checks its input width
        export = _Selected(InputSelection(input_index, first_in), export)
    return StructuredExport(export, kept_units, input_index, folded, stored_weights)


def _set_submodule(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attr, new)
