"""Pruning and compressed export.

* :mod:`~pyrozoo.compression.counting` — parameters, kept weights, units and FLOPs by one
  stated convention;
* :mod:`~pyrozoo.compression.sparse` — masked networks and sparse (CSR) layers;
* :mod:`~pyrozoo.compression.structured` — removal of pruned units (a smaller dense network).
"""

from pyrozoo.compression.counting import LayerCount, NetworkCount, count_network, format_sparsity, pruned_architecture
from pyrozoo.compression.sparse import SparseConv2d, SparseLinear, apply_masks, sparse_storage_bytes, to_sparse
from pyrozoo.compression.structured import InputSelection, StructuredExport, remove_pruned_units

__all__ = [
    "LayerCount",
    "NetworkCount",
    "count_network",
    "pruned_architecture",
    "format_sparsity",
    "apply_masks",
    "to_sparse",
    "SparseLinear",
    "SparseConv2d",
    "sparse_storage_bytes",
    "InputSelection",
    "StructuredExport",
    "remove_pruned_units",
]
