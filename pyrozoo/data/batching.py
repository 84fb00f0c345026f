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


class ShardedBatches(TensorBatches):
    """Rank ``rank``'s part of every global minibatch of ``batch_size`` examples.

    The global batches are those of :class:`~pyrozoo.data.TensorBatches` with the same
    tensors, batch size and generator state (so a data-parallel run sees the batches of the
    one-process run); each is cut into ``world_size`` contiguous parts of (nearly) equal size
    (``tensor_split``: a last batch of ``m`` examples gives parts of ``ceil(m / W)`` and
    ``floor(m / W)``), and this rank yields ``(*tensors[part], part)``. ``n`` is the global
    size (the likelihood's data plate), ``len()`` the number of global batches (every rank
    steps as often). Its state is the shuffling generator's, as ``TensorBatches``'s.

    :param batch_size: the global batch size ``B`` (``B / W`` examples per rank).
    :raises ValueError: a batch that cannot give every rank an example.
    """

    def __init__(self, *tensors: torch.Tensor, batch_size: int, rank: int, world_size: int, shuffle: bool = True, seed: Optional[int] = 0, drop_last: bool = False):
        super().__init__(*tensors, batch_size=batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
        if not isinstance(world_size, int) or world_size < 1 or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank!r} of {world_size!r}")
        self.rank, self.world_size = rank, world_size
        if self.batch_size < world_size:
            raise ValueError(f"the global batch size {self.batch_size} is smaller than the {world_size} processes: each needs at least one example per step")
        last = self.n % self.batch_size
        if last and not drop_last and last < world_size:
            raise ValueError(
                f"the last batch holds {last} of the {self.n} examples (batch size {self.batch_size}), fewer than the "
                f"{world_size} processes: use drop_last=True or a batch size that leaves at least {world_size}"
            )

    def __iter__(self):
        device = self.tensors[0].device
        # the order TensorBatches draws, from the same generator
        order = torch.randperm(self.n, generator=self.generator).to(device) if self.shuffle else torch.arange(self.n, device=device)
        for b in range(len(self)):
            part = order[b * self.batch_size : (b + 1) * self.batch_size].tensor_split(self.world_size)[self.rank]
            yield (*(t[part] for t in self.tensors), part)
