"""Devices, seeds and command-line integer ranges."""

from contextlib import contextmanager
from typing import Iterator, List, Optional, Union

import pyro
import torch


def resolve_device(device: Union[str, torch.device, None] = None, module: Optional[torch.nn.Module] = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` means where ``module`` lives (or the CPU).

    ``"auto"`` picks CUDA when available. Asking for CUDA on a machine without it is an error.
    """
    if device is None:
        if isinstance(module, torch.nn.Module):
            for t in list(module.parameters()) + list(module.buffers()):
                return t.device
        return torch.device("cpu")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {device} requested but CUDA is not available on this machine")
    return device


def set_seed(seed: int) -> None:
    """Seeds Python's, NumPy's and torch's generators (through ``pyro.set_rng_seed``)."""
    if not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    pyro.set_rng_seed(seed)


def parse_int_ranges(spec: str) -> List[int]:
    """``"0-4"`` or ``"0,3,5-7"`` -> ``[0, 1, 2, 3, 4]`` / ``[0, 3, 5, 6, 7]`` (command-line seeds, splits)."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            elif part:
                out.append(int(part))
        except ValueError:
            raise ValueError(f"{spec!r} is not a list of integers and ranges such as 0-4 or 0,3,5-7") from None
    return out


@contextmanager
def evaluation_mode(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``module`` in eval mode for the block, each submodule's own mode restored after:
    measurements must neither use nor update batch-normalisation statistics of the data they
    measure on."""
    modes = {m: m.training for m in module.modules()}
    module.eval()
    try:
        yield module
    finally:
        for m, training in modes.items():
            m.train(training)
