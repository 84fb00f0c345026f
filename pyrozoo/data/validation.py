"""Checks that turn bad data into clear errors before any training starts."""

import numpy as np
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
    """The common number of examples (first dimension) of the named tensors.

    :raises ValueError: listing each name's length when they differ, or when there are none.
    """
    lengths = {k: len(v) for k, v in tensors.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs and targets have different numbers of examples: {lengths}")
    n = next(iter(lengths.values()))
    if n == 0:
        raise ValueError("the data set is empty")
    return n


def check_nonempty(name: str, tensor: torch.Tensor, advice: str = "") -> None:
    """Raises ``ValueError`` if ``tensor`` has no rows (its leading dimension is 0).

    :param advice: what to do about it, appended to the message.
    """
    if tensor.dim() == 0:
        raise ValueError(f"{name} must have a leading dimension of examples, got a scalar (shape ())")
    if tensor.shape[0] == 0:
        raise ValueError(f"{name} is empty: it has 0 rows (shape {tuple(tensor.shape)}){': ' + advice if advice else ''}")


def check_positive_finite(name: str, value, advice: str = "") -> float:
    """``float(value)``, or ``ValueError`` naming ``name`` unless it is finite and > 0
    (``TypeError`` if it is not a number at all)."""
    import math

    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be a positive finite number, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive finite number, got {number}{': ' + advice if advice else ''}")
    return number


def check_class_labels(name: str, labels: torch.Tensor, num_classes: int) -> None:
    """Raises unless ``labels`` are integer class labels in ``[0, num_classes - 1]``.

    ``ValueError`` names the labels found outside the range (or the non-integer values);
    ``TypeError`` for a floating-point or boolean tensor of whole numbers (a wrong dtype,
    fixed by ``labels.long()``). One reduction over the labels: call it once per data set,
    not per training step.
    """
    valid = f"the valid labels for {num_classes} classes are the integers 0..{num_classes - 1}"
    if labels.dtype == torch.bool or labels.is_complex():
        raise TypeError(f"{name} must be an integer tensor of class labels, got {labels.dtype}; {valid}")
    if labels.numel() == 0:
        return
    if labels.is_floating_point():
        finite = torch.isfinite(labels)
        fractional = ~finite | (finite & (labels != labels.round()))
        if bool(fractional.any()):
            found = _first_values(torch.unique(labels[fractional]))
            raise ValueError(f"{name} must be integer class labels, found non-integer value(s) {found}; {valid}")
        raise TypeError(f"{name} must be an integer tensor of class labels, got {labels.dtype} (whole numbers: convert with .long()); {valid}")
    outside = (labels < 0) | (labels >= num_classes)
    if bool(outside.any()):
        found = _first_values(torch.unique(labels[outside]))
        raise ValueError(
            f"{name} hold label(s) {found} outside the likelihood's range: {valid}, as the network "
            f"outputs {num_classes} logits per example (relabel the data, or give the network as many outputs as classes)"
        )


def _first_values(values: torch.Tensor, limit: int = 10) -> str:
    shown = values.reshape(-1)[:limit].tolist()
    more = values.numel() - len(shown)
    return f"{shown}{f' and {more} more' if more > 0 else ''}"


def check_stored_labels(source: str, labels: np.ndarray, num_classes: int) -> None:
    """Raises ``ValueError`` naming ``source`` (the file the labels were read from) and the
    index and value of the first label outside the classes ``0..num_classes - 1``: a data set
    check at load time, where :func:`check_class_labels` checks a model's training targets."""
    labels = np.asarray(labels).reshape(-1)
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{source}: labels must be integers, got {labels.dtype}")
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        index = int(np.argmax(bad))
        raise ValueError(
            f"{source}: label {int(labels[index])} at index {index} is outside the classes 0..{num_classes - 1} "
            f"({int(bad.sum())} such label(s)); the file is corrupted or belongs to another data set"
        )
