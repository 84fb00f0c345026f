"""Unstructured sparsity: masking pruned weights and exporting sparse layers.

:func:`apply_masks` gives the *masked network*: a copy with every pruned weight set to an
exact zero. :func:`to_sparse` turns a (masked or structurally pruned) network into one whose
layers store only their non-zero weights, in compressed sparse row (CSR) format, and
compute with them:

* :class:`SparseLinear`: ``y = x W^T + b`` as a sparse-dense product;
* :class:`SparseConv2d`: the convolution as a sparse product with the unfolded input
  (im2col), ``W_(out, in*kh*kw) @ unfold(x)``.

Both give the same outputs as the masked dense layers (up to floating-point summation
order) and are meant for inference (their tensors are buffers, not parameters).
"""

import copy
import warnings
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from pyrozoo.utils import check_parameter_shape, with_parameters

__all__ = ["apply_masks", "to_sparse", "SparseLinear", "SparseConv2d", "sparse_storage_bytes"]


def _check_masks(net: nn.Module, masks: Dict[str, torch.Tensor]) -> Dict[str, nn.Parameter]:
    params = dict(net.named_parameters())
    for name, mask in masks.items():
        check_parameter_shape(params, name, mask, "mask")
        if mask.dtype != torch.bool:
            raise TypeError(f"mask for {name!r} must be a bool tensor (True = kept), got {mask.dtype}")
    return params


@torch.no_grad()
def apply_masks(net: nn.Module, masks: Dict[str, torch.Tensor], values: Optional[Dict[str, torch.Tensor]] = None) -> nn.Module:
    """A deep copy of ``net`` whose parameters are ``values[name]`` (default: the network's own)
    with the entries where ``masks[name]`` is False set to zero.

    :param masks: ``{parameter name: bool tensor of its shape}``, True = kept.
    :param values: optional replacement values (e.g. posterior means) for some parameters.
    """
    _check_masks(net, masks)
    out = with_parameters(net, dict(values or {}))
    for name, p in out.named_parameters():
        if name in masks:
            p.mul_(masks[name].to(p.device, p.dtype))
    return out


class SparseLinear(nn.Module):
    """A linear layer holding its weight in CSR format (only the non-zero entries)."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
        super().__init__()
        if weight.dim() != 2:
            raise ValueError(f"a linear weight must be 2-d, got shape {tuple(weight.shape)}")
        dense = weight.detach().to_dense() if weight.layout != torch.strided else weight.detach()
        self.out_features, self.in_features = dense.shape
        self.register_buffer("weight", _to_csr(dense))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @classmethod
    def from_dense(cls, layer: nn.Linear) -> "SparseLinear":
        return cls(layer.weight, layer.bias)

    def forward(self, x):
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        out = (self.weight @ flat.t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, nnz={self.weight.values().numel()}"


class SparseConv2d(nn.Module):
    """A 2-d convolution holding its filters as a CSR matrix ``(out, in * kh * kw)``; the
    output is the sparse product with the unfolded input. Groups other than 1 are not supported."""

    def __init__(self, weight: torch.Tensor, bias: Optional[torch.Tensor] = None, *, stride=1, padding=0, dilation=1):
        super().__init__()
        dense = weight.detach().to_dense() if weight.layout != torch.strided else weight.detach()
        if dense.dim() != 4:
            raise ValueError(f"a conv2d weight must be 4-d, got shape {tuple(dense.shape)}")
        self.out_channels, self.in_channels = dense.shape[:2]
        self.kernel_size = tuple(dense.shape[2:])
        self.stride, self.padding, self.dilation = _pair(stride), _pair(padding), _pair(dilation)
        self.register_buffer("weight", _to_csr(dense.reshape(self.out_channels, -1)))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    @classmethod
    def from_dense(cls, layer: nn.Conv2d) -> "SparseConv2d":
        if layer.groups != 1:
            raise NotImplementedError("SparseConv2d supports groups=1 only")
        if layer.padding_mode != "zeros" or isinstance(layer.padding, str):
            raise NotImplementedError("SparseConv2d supports numeric zero padding only")
        return cls(layer.weight, layer.bias, stride=layer.stride, padding=layer.padding, dilation=layer.dilation)

    def dense_weight(self) -> torch.Tensor:
        return self.weight.to_dense().reshape(self.out_channels, self.in_channels, *self.kernel_size)

    def forward(self, x):
        n, _, h, w = x.shape
        cols = F.unfold(x, self.kernel_size, dilation=self.dilation, padding=self.padding, stride=self.stride)
        h_out = (h + 2 * self.padding[0] - self.dilation[0] * (self.kernel_size[0] - 1) - 1) // self.stride[0] + 1
        w_out = (w + 2 * self.padding[1] - self.dilation[1] * (self.kernel_size[1] - 1) - 1) // self.stride[1] + 1
        # one sparse product for the whole batch: (out, K) @ (K, n * L)
        out = self.weight @ cols.transpose(0, 1).reshape(cols.shape[1], -1)
        out = out.reshape(self.out_channels, n, h_out, w_out).transpose(0, 1)
        if self.bias is not None:
            out = out + self.bias.reshape(1, -1, 1, 1)
        return out

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, nnz={self.weight.values().numel()}"

    @property
    def dense_shape(self):
        return (self.out_channels, self.in_channels, *self.kernel_size)


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attr, new)


@torch.no_grad()
def to_sparse(net: nn.Module, masks: Optional[Dict[str, torch.Tensor]] = None) -> nn.Module:
    """A copy of ``net`` (masked by ``masks`` first, if given) with every ``nn.Linear`` and
    ``nn.Conv2d`` replaced by its CSR counterpart storing only the non-zero weights."""
    source = apply_masks(net, masks) if masks else copy.deepcopy(net)
    for name, module in list(source.named_modules()):
        if isinstance(module, nn.Linear):
            _replace(source, name, SparseLinear.from_dense(module))
        elif isinstance(module, nn.Conv2d):
            _replace(source, name, SparseConv2d.from_dense(module))
    return source


def _to_csr(dense: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return dense.to_sparse_csr()


def sparse_storage_bytes(net: nn.Module, index_bytes: int = 4) -> int:
    """Bytes needed to store the sparse layers' values, column indices and row pointers
    (indices counted at ``index_bytes`` each) plus all other parameters and buffers densely."""
    total = 0
    for module in net.modules():
        if isinstance(module, (SparseLinear, SparseConv2d)):
            w = module.weight
            total += w.values().numel() * w.values().element_size()
            total += (w.col_indices().numel() + w.crow_indices().numel()) * index_bytes
            if module.bias is not None:
                total += module.bias.numel() * module.bias.element_size()
        else:
            for t in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
                total += t.numel() * t.element_size()
    return total
