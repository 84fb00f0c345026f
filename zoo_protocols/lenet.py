"""MNIST LeNet compression protocol with a registry of methods.

A method is ``run(train, test, config) -> CompressionResult``: it trains on ``train``
(``(x, y)`` tensors), prunes/compresses, evaluates the *compressed* network on ``test``
and counts what is kept. Methods register with :func:`register_compression_method` in a
module ``zoo_protocols/compress_*.py``; ``reproductions/compress_lenet.py`` runs them and
writes one CSV row per run with the columns :data:`CSV_COLUMNS`.
"""

from dataclasses import dataclass, field
from typing import Dict

import torch

from zoo_protocols.registry import Method, MethodRegistry

#: columns of the ``--out`` CSV of ``reproductions/compress_lenet.py`` (test_error in percent)
CSV_COLUMNS = [
    "method",
    "arch",
    "dataset",
    "seed",
    "test_error",
    "params_total",
    "params_kept",
    "compression_ratio",
    "flops",
    "pruned_architecture",
]

ARCHITECTURES = ("lenet300", "lenet5")


@dataclass
class CompressionResult:
    """What a run reports; ``details`` holds method-specific extras (per-layer sparsity, bits, ...)."""

    test_error: float  # percent, of the compressed network
    params_total: int
    params_kept: int
    flops: int  # of the compressed network, by the convention documented in pyrozoo.compression
    pruned_architecture: str  # e.g. "8-13-88-13"
    details: dict = field(default_factory=dict)
    #: ``{"<layer>.weight": bool mask}`` over the dense network's weights: those the compressed
    #: network stores (:attr:`~pyrozoo.compression.StructuredExport.stored_weights`), over
    #: which per-weight storage figures such as BC's bit precision are taken
    stored_weights: Dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def compression_ratio(self) -> float:
        return self.params_total / max(self.params_kept, 1)


#: the LeNet compression methods: ``run(train, test, config) -> CompressionResult``, in modules ``compress_*.py``
COMPRESSION_REGISTRY = MethodRegistry("compression", "compress_")
COMPRESSION_METHODS: Dict[str, Method] = COMPRESSION_REGISTRY.methods


def register_compression_method(name: str, description: str = ""):
    """Decorator registering ``run(train, test, config) -> CompressionResult`` under ``name``."""
    return COMPRESSION_REGISTRY.register(name, description)


def available_methods() -> Dict[str, Method]:
    return COMPRESSION_REGISTRY.available()
