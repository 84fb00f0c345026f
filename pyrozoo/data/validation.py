"""Checks that turn bad data into clear errors before any training starts."""

import torch


def check_finite(name: str, tensor: torch.Tensor) -> None:
    """Raises ``ValueError`` naming the tensor if it holds NaN or infinite values."""
    if tensor.is_floating_point() or tensor.is_complex():
        bad = ~torch.isfinite(tensor)
        if bool(bad.any()):
            count = int(bad.sum())
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name} contains {count} NaN/inf value(s), first at index {first}")


def check_same_length(**tensors: torch.Tensor) -> int:
    lengths = {k: len(v) for k, v in tensors.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs and targets have different numbers of examples: {lengths}")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError("the data set is empty")
    return n
