"""Minibatches of in-memory tensors, with their indices, reproducibly shuffled."""

from typing import Iterator, Optional, Tuple

import torch

from pyrozoo.data.validation import check_same_length


class TensorBatches:
    """Iterates over ``(*tensors[idx], idx)`` minibatches of tensors held in memory.

    Much cheaper per batch than a ``DataLoader`` for data that fits on the device, and the
    indices are what a subsampled ``pyro.plate`` needs. Shuffling uses its own
    ``torch.Generator`` (seeded, with a saveable state), so checkpoint/resume reproduces
    the same order.

    :param tensors: tensors with the same first dimension (e.g. ``x, y``).
    :param int batch_size: examples per batch.
    :param bool shuffle: reshuffle every epoch.
    :param int seed: seed of the shuffling generator.
    :param bool drop_last: drop a last incomplete batch.
    """

    def __init__(self, *tensors: torch.Tensor, batch_size: int, shuffle: bool = True, seed: Optional[int] = 0, drop_last: bool = False):
        if not tensors:
            raise ValueError("TensorBatches needs at least one tensor")
        self.n = check_same_length(**{f"tensor{i}": t for i, t in enumerate(tensors)})
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.tensors = tensors
        self.batch_size = min(batch_size, self.n)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)

    def __len__(self) -> int:
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[Tuple[torch.Tensor, ...]]:
        device = self.tensors[0].device
        if self.shuffle:
            order = torch.randperm(self.n, generator=self.generator).to(device)
        else:
            order = torch.arange(self.n, device=device)
        for b in range(len(self)):
            idx = order[b * self.batch_size : (b + 1) * self.batch_size]
            yield (*(t[idx] for t in self.tensors), idx)

    def to(self, device) -> "TensorBatches":
        self.tensors = tuple(t.to(device) for t in self.tensors)
        return self

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        # the shuffling generator is a CPU one, whichever device a checkpoint was loaded to
        self.generator.set_state(state["generator"].cpu())
