r"""Beyond one machine: data-parallel SVI and parallel SG-MCMC on ``torch.distributed``.

Launch a script with ``torchrun --nproc_per_node W script.py``; the script calls
:func:`init_from_env` (gloo on CPUs, NCCL on GPUs), after which
:func:`~pyrozoo.inference.fit` and :meth:`~pyrozoo.inference.StochasticGradientMCMC.run`
split their work over the ``W`` processes ("ranks") on their own. Two ways to use them:

* **One run, data split over the ranks** (:class:`DataParallel`; the default of ``fit`` and
  the samplers whenever a process group of more than one process is initialised). Every rank
  holds the model, the guide and the data; global minibatch ``b`` of ``B`` examples is the
  very batch a one-process run with batch size ``B`` draws (the same shuffling generator,
  seeded alike on every rank), and rank ``r`` takes the ``r``-th of its ``W`` parts
  (:class:`~pyrozoo.data.ShardedBatches`). Each rank evaluates its part under the likelihood's data plate
  of the *global* size ``N`` (scale ``N / n_r``) with the whole prior or KL term, and the
  gradients are averaged with weights ``n_r / n``:

  .. math::

      \sum_r \frac{n_r}{n} \nabla\Big(\frac{N}{n_r} \sum_{i \in S_r} \log p(y_i \mid \cdot)
      - \mathrm{KL}\Big) = \nabla\Big(\frac{N}{n} \sum_{i \in S} \log p(y_i \mid \cdot) - \mathrm{KL}\Big),

  exactly the one-process gradient (equal parts: a plain mean). Every epoch starts from rank
  0's torch random state on every rank, so the latent draws of a step (weight samples, an
  SG-MCMC step's injected noise) are the same on every rank: SVI with weight sampling or a
  point estimate, and SGLD / SGHMC (with SG-MCMC-SA, whose minibatch residual is averaged the
  same way: :meth:`~pyrozoo.inference.StochasticGradientMCMC.average_over_ranks`) follow
  the one-process run to rounding. Draws whose shape follows the minibatch (local
  reparameterization, flipout) are drawn per part and repeat across the ranks' parts: the
  estimator stays unbiased but is not the one-process one.
* **Independent chains, one per rank** (:class:`IndependentChains`, samplers only). Chain
  ``r`` is a one-process chain over all the data with its own seed :func:`chain_seed`
  (``seed``, ``r``) (its injected noise and batch order): distinct per rank, reproducible by
  seed. :func:`gather_chains` collects the draws on rank 0, :func:`~pyrozoo.chains.pool_chains` pools them
  for prediction and :func:`~pyrozoo.chains.chain_diagnostics` reports split R-hat across chains
  (``pyro.ops.stats``).

**Why an explicit all-reduce, not DDP.** ``DistributedDataParallel`` wraps one
``nn.Module`` and averages its parameters' gradients from hooks during the backward pass.
The trainable state here spans the model module, the guide module and Pyro's param store
(``pyro.param`` sites created lazily on the first trace, owned by no module), and the
samplers differentiate with ``torch.autograd.grad`` (no ``.grad``, no module). One
averaged all-reduce of the gradients after the backward pass (one flat buffer per dtype)
covers all of them alike and computes what DDP computes. What DDP adds, overlapping the
communication with the backward pass, could save at most the all-reduce's share of a step,
which ``benchmarks/distributed_overhead.py`` measures.

**Files.** Only rank 0 writes: checkpoints (in both modes: an independent-chains
checkpoint holds every chain's state, gathered to rank 0 as data, never pickled objects),
the progress bar, and the sample sinks that write files. A checkpoint records the number of
processes and the mode; resuming needs the same (every rank reads the file, so it must lie on
a file system they all see).
"""

import atexit
import os
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist

from pyrozoo.data.batching import ShardedBatches, TensorBatches
from pyrozoo.serialization import save_state, state_from_bytes, state_to_bytes

#: what torchrun sets in every process it starts
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
#: the checkpoint entry naming the mode and the number of processes that wrote it
MARKER = "distributed"


# -- the process group ---------------------------------------------------------------------
def launched_by_torchrun(environ=None) -> bool:
    """Whether this process was started by ``torchrun`` (its variables are set)."""
    env = os.environ if environ is None else environ
    return all(name in env for name in TORCHRUN_VARIABLES)


def is_initialized() -> bool:
    """Whether a ``torch.distributed`` process group is initialised in this process."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if is_initialized() else 0


def get_world_size() -> int:
    """The number of processes (1 without a process group)."""
    return dist.get_world_size() if is_initialized() else 1


def is_main() -> bool:
    """True on rank 0 (and without a process group): the process that writes files."""
    return get_rank() == 0


def init_from_env(device: Union[str, torch.device, None] = None, backend: Optional[str] = None) -> bool:
    """Joins the process group that ``torchrun`` describes in the environment; returns
    whether a process group is initialised (False when not launched by torchrun: nothing to do).

    :param device: where this rank computes (``"auto"``/``None``: CUDA when available); picks
        the backend: NCCL for CUDA (each rank then uses GPU ``LOCAL_RANK``, see
        :func:`rank_device`), gloo for the CPU.
    :param backend: ``"gloo"`` or ``"nccl"`` (overrides the choice by device).
    """
    if is_initialized():
        return True
    if not launched_by_torchrun():
        return False
    if backend is None:
        backend = "nccl" if _wants_cuda(device) and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    atexit.register(shutdown)  # torch warns about a group left for the interpreter to destroy
    return True


def _wants_cuda(device) -> bool:
    if device is None or str(device) == "auto":
        return torch.cuda.is_available()
    return torch.device(device).type == "cuda"


def rank_device(device: Union[str, torch.device]) -> torch.device:
    """``device`` for this rank: a CUDA device without an index becomes GPU ``LOCAL_RANK``
    under torchrun (one GPU per rank); anything else is returned as it is."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None and launched_by_torchrun():
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return device


def shutdown() -> None:
    """Leaves the process group (no-op without one)."""
    if is_initialized():
        dist.destroy_process_group()


def chain_seed(seed: int, rank: int) -> int:
    """The seed of chain ``rank`` of a run seeded with ``seed``: a NumPy ``SeedSequence``
    child, so that chains of one run, and of runs with nearby seeds, draw unrelated streams
    (``seed + rank`` would give seed 0's chain 1 to seed 1's chain 0)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return int(np.random.SeedSequence(seed, spawn_key=(rank,)).generate_state(1, np.uint32)[0])


# -- what a run on several processes does --------------------------------------------------
class _ProcessGroupRun:
    """The part of a multi-process run that the loop core and the steps call."""

    mode = ""
    #: whether this rank keeps a state to write on Ctrl-C (see EpochLoop's interrupt rule)
    snapshots = False

    def __init__(self, group=None):
        if not is_initialized():
            raise RuntimeError(
                "no torch.distributed process group is initialised: launch with torchrun and call "
                "pyrozoo.distributed.init_from_env() first (or torch.distributed.init_process_group)"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.backend = dist.get_backend(group)
        # NCCL moves CUDA tensors only; gloo is given CPU tensors
        self.comm_device = torch.device("cuda", torch.cuda.current_device()) if self.backend == "nccl" else torch.device("cpu")
        #: wall-clock seconds spent in collectives (host-side: on CUDA, synchronise to read it)
        self.communication_seconds = 0.0

    @property
    def is_main(self) -> bool:
        """True on rank 0, the rank that writes files."""
        return self.rank == 0

    def describe(self) -> Tuple[str, int]:
        """``(mode, number of processes)``, what a checkpoint records and a resume must match."""
        return (self.mode, self.world_size)

    # collectives on tensors wherever they live (moved to the backend's device and back)
    def _collective(self, fn, tensor: torch.Tensor) -> torch.Tensor:
        moved = tensor.to(self.comm_device)
        t0 = time.perf_counter()
        fn(moved)
        self.communication_seconds += time.perf_counter() - t0
        if moved is not tensor:
            tensor.copy_(moved)
        return tensor

    def _all_reduce(self, tensor, op=dist.ReduceOp.SUM):
        return self._collective(lambda t: dist.all_reduce(t, op=op, group=self.group), tensor)

    def _broadcast(self, tensor):
        return self._collective(lambda t: dist.broadcast(t, src=dist.get_global_rank(self.group, 0) if self.group is not None else 0, group=self.group), tensor)

    def _all_gather(self, tensor: torch.Tensor) -> List[torch.Tensor]:
        moved = tensor.to(self.comm_device)
        out = [torch.empty_like(moved) for _ in range(self.world_size)]
        t0 = time.perf_counter()
        dist.all_gather(out, moved, group=self.group)
        self.communication_seconds += time.perf_counter() - t0
        return [t.to(tensor.device) for t in out]

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (a decision every rank must take alike)."""
        return bool(self._all_reduce(torch.tensor([float(bool(flag))]), dist.ReduceOp.MAX).item())

    # hooks of the loop core and the steps; the modes override what they do differently
    def batches(self, batches: TensorBatches, seed: Optional[int]) -> TensorBatches:
        """The minibatches this rank iterates over, made from the one-process ``batches``."""
        return batches

    def synchronise_parameters(self, tensors: Sequence[torch.Tensor]) -> None:
        """Called once before a run's first step with the tensors it trains or samples."""

    def begin_epoch(self) -> None:
        """Called by the loop core before every epoch."""

    def end_run(self) -> None:
        """Called by the loop core after the last epoch."""

    def average_(self, tensors: Sequence[torch.Tensor], local_size: int) -> List[float]:
        """Averages a step's gradients (or minibatch estimates) over the ranks, in place."""
        return []

    def reduce_monitor(self, value: float) -> Tuple[float, str]:
        """The history's monitored value to record and check, and a note for its error."""
        raise NotImplementedError

    def save_checkpoint(self, make_state: Callable[[], dict], path: Path) -> None:
        """Writes the checkpoint of ``make_state()`` (called on the ranks that need it) to ``path``."""
        raise NotImplementedError

    def _write_on_main(self, write: Callable[[], None], path: Path) -> None:
        """Rank 0 runs ``write``; every rank then waits for it (a rank that went on to read
        the file, e.g. the next run's resume, could otherwise find the previous version) and
        fails with it when it failed."""
        error = None
        if self.is_main:
            try:
                write()
            except Exception as e:  # told to the other ranks before it is raised here
                error = e
        failed = self.any(error is not None)
        if error is not None:
            raise error
        if failed:
            raise OSError(f"rank 0 could not write the checkpoint {path} (its own error says why)")

    def mark(self, state: dict) -> dict:
        """``state`` with the entry that records this run's mode and number of processes."""
        return {**state, MARKER: {"mode": self.mode, "world_size": self.world_size}}

    def own_checkpoint(self, saved: dict) -> dict:
        """This rank's part of a checkpoint this kind of run wrote."""
        raise NotImplementedError


class DataParallel(_ProcessGroupRun):
    """One run whose minibatches are split over the ranks of the default process group
    (or ``group``); see the module docstring. ``fit`` and the samplers use one when a
    process group of more than one process is initialised, or when given one
    (``distributed=DataParallel(...)``).

    :param str draws: ``"shared"`` (default): every rank draws what rank 0 draws, so the run
        is the one-process run (to rounding) wherever the draws do not follow the minibatch's
        size; ``"per_rank"`` (``fit`` only): each epoch every rank reseeds torch with
        :func:`chain_seed` of a number drawn from rank 0's state and its rank, so that its
        latent draws and per-example noise (local reparameterization, flipout) are its own:
        the averaged gradient then averages ``W`` independent estimates (less variance than
        one process; reproducible by seed, resumable, but not the one-process run).
    """

    mode = "data"

    def __init__(self, group=None, *, draws: str = "shared"):
        if draws not in ("shared", "per_rank"):
            raise ValueError(f"draws must be 'shared' or 'per_rank', got {draws!r}")
        super().__init__(group)
        self.draws = draws
        self._sent_for, self._sent = None, []  # average_gradients' parameters, and which it sends

    @property
    def snapshots(self) -> bool:
        """Rank 0 keeps the last completed epoch's state for an interrupt; the others write nothing."""
        return self.is_main

    def batches(self, batches: TensorBatches, seed: Optional[int] = None) -> ShardedBatches:
        """This rank's :class:`~pyrozoo.data.ShardedBatches` of ``batches`` (whose generator state rank 0
        gives every rank, so that the global batches agree whatever the ranks were seeded with)."""
        sharded = ShardedBatches(*batches.tensors, batch_size=batches.batch_size, rank=self.rank, world_size=self.world_size, shuffle=batches.shuffle, seed=None, drop_last=batches.drop_last)
        state = batches.generator.get_state()
        sharded.generator.set_state(self._broadcast(state.clone()))
        return sharded

    def synchronise_parameters(self, tensors: Sequence[torch.Tensor]) -> None:
        """Gives every rank rank 0's values of ``tensors`` (in place), as DDP does at start:
        a rank that initialised its network differently would otherwise train another model."""
        with torch.no_grad():
            for bucket in _buckets(tensors).values():
                flat = torch.cat([tensors[i].detach().reshape(-1) for i in bucket])
                self._broadcast(flat)
                _unflatten_into(flat, [tensors[i] for i in bucket])

    def begin_epoch(self) -> None:
        """Gives every rank rank 0's torch random state (CPU, and the current CUDA device's
        once CUDA is in use), so that every rank draws the same latent values; once per epoch
        keeps them together even where the ranks' parts differ in size (a last batch). With
        ``draws="per_rank"`` each rank then reseeds from it and its rank."""
        self.end_run()
        if self.draws == "per_rank":
            shared = int(torch.randint(0, 2**31 - 1, ()).item())  # the same on every rank
            torch.manual_seed(chain_seed(shared, self.rank))

    def end_run(self) -> None:
        """Gives every rank rank 0's torch random state (what follows a run, e.g. prediction,
        then draws alike on every rank)."""
        state = torch.get_rng_state()
        torch.set_rng_state(self._broadcast(state.clone()))
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state = torch.cuda.get_rng_state()
            torch.cuda.set_rng_state(self._broadcast(state.clone()))

    def average_(self, tensors: Sequence[torch.Tensor], local_size: int, counts: Sequence[float] = ()) -> List[float]:
        """Replaces every tensor (in place) by ``sum_r (n_r / n) tensor_r`` over the ranks,
        ``n_r = local_size`` the examples of this rank's part and ``n`` their sum: one SUM
        all-reduce per dtype and device of ``[n_r * tensors..., n_r]``. ``counts`` (numbers)
        travel in the first of these buffers and come back summed over the ranks."""
        if isinstance(local_size, bool) or not isinstance(local_size, int) or local_size < 1:
            raise ValueError(f"local_size must be the number of examples of this rank's part (>= 1), got {local_size!r}")
        buckets = list(_buckets(tensors).values()) or [[]]
        summed: List[float] = []
        with torch.no_grad():
            for j, bucket in enumerate(buckets):
                like = tensors[bucket[0]] if bucket else torch.zeros((), dtype=torch.float64)
                tail = [float(local_size)] + (list(counts) if j == 0 else [])
                flat = torch.cat([tensors[i].reshape(-1) for i in bucket] + [torch.tensor(tail, dtype=like.dtype, device=like.device)])
                size = flat.numel() - len(tail)
                flat[:size].mul_(local_size)
                self._all_reduce(flat)
                flat[:size].div_(flat[size])
                _unflatten_into(flat[:size], [tensors[i] for i in bucket])
                if j == 0:
                    summed = flat[size + 1 :].tolist()
        return summed

    def average_gradients(self, params: Sequence[torch.Tensor], local_size: int) -> None:
        """:meth:`average_` of the parameters' ``.grad`` after ``backward()``.

        A parameter without a gradient on any rank keeps none (the optimizer skips it, as on
        one process); one with a gradient on some ranks gets zeros on the others. Which
        parameters had a gradient anywhere travels with each step's all-reduce (one count per
        parameter), and the next step sends only those (a network's own parameters, replaced
        by sampled values, have none); one that gains a gradient is reduced in a second
        all-reduce of that step, so the result never depends on the guess."""
        if params is None:
            raise ValueError("averaging gradients needs the list of parameters (training_step(..., params=...))")
        key = tuple(id(p) for p in params)
        if self._sent_for != key:
            self._sent_for, self._sent = key, [True] * len(params)
        have = [p.grad is not None for p in params]
        grads = {}

        def reduce(indices, counts=()):
            for i in indices:
                grads[i] = params[i].grad if have[i] else torch.zeros_like(params[i])
            return self.average_([grads[i] for i in indices], local_size, counts)

        anywhere = [c > 0 for c in reduce([i for i, s in enumerate(self._sent) if s], [float(h) for h in have])]
        late = [i for i, (a, s) in enumerate(zip(anywhere, self._sent)) if a and not s]
        if late:  # the same on every rank: the counts are summed
            reduce(late)
        self._sent = anywhere
        for i, p in enumerate(params):
            p.grad = grads[i] if anywhere[i] else None

    def reduce_monitor(self, value: float) -> Tuple[float, str]:
        """The mean of the ranks' values (each an unbiased estimate of the one-process value),
        so that every rank records the same history and stops alike on a non-finite one."""
        mean = float(self._all_reduce(torch.tensor([float(value)], dtype=torch.float64)).item()) / self.world_size
        return mean, f" (mean over {self.world_size} processes)"

    def save_checkpoint(self, make_state: Callable[[], dict], path: Path) -> None:
        """Rank 0 writes its state (the same on every rank); the others write nothing."""
        self._write_on_main(lambda: save_state(self.mark(make_state()), path), path)

    def own_checkpoint(self, saved: dict) -> dict:
        """The checkpoint without its marker: every rank resumes the same state."""
        return {k: v for k, v in saved.items() if k != MARKER}


class IndependentChains(_ProcessGroupRun):
    """One independent chain per rank (samplers only): ``run(..., seed=s)`` runs chain ``r``
    with :func:`chain_seed` (``s``, ``r``) over all the data; nothing is averaged. Rank 0
    writes one checkpoint holding every chain's state (gathered at each checkpoint); sample
    sinks must be in memory (a disk sink per chain would write from every rank), and an
    interrupt saves nothing beyond the last checkpoint (gathering needs every rank)."""

    mode = "chains"

    def seed(self, seed: Optional[int]) -> int:
        """This chain's seed, :func:`chain_seed` of the run's ``seed`` and this rank."""
        if seed is None:
            raise ValueError("independent chains need a seed: chain r draws from chain_seed(seed, r)")
        return chain_seed(seed, self.rank)

    def batches(self, batches: TensorBatches, seed: Optional[int] = None) -> TensorBatches:
        """A copy of ``batches`` shuffled by this chain's own generator (seeded with ``seed``)."""
        own = TensorBatches(*batches.tensors, batch_size=batches.batch_size, shuffle=batches.shuffle, seed=seed, drop_last=batches.drop_last)
        return own

    def reduce_monitor(self, value: float) -> Tuple[float, str]:
        """This chain's own value; when any chain's is not finite, every chain gets that one
        (and stops, naming it), so that no rank waits for a chain that has ended."""
        values = self._all_gather(torch.tensor([float(value)], dtype=torch.float64))
        for r in [self.rank] + [r for r in range(self.world_size) if r != self.rank]:
            v = float(values[r].item())
            if not np.isfinite(v):
                return v, f" in chain {r} of {self.world_size}"
        return float(value), ""

    def save_checkpoint(self, make_state: Callable[[], dict], path: Path) -> None:
        """Every chain's state, gathered to rank 0, which writes them as one checkpoint."""
        states = gather_states(make_state(), self)
        self._write_on_main(lambda: save_state(self.mark({"chains": states}), path), path)

    def own_checkpoint(self, saved: dict) -> dict:
        """This chain's entry of the gathered checkpoint."""
        return saved["chains"][self.rank]


def resolve(distributed, *, chains: bool = False) -> Optional[_ProcessGroupRun]:
    """The multi-process run ``fit`` (``chains=False``) or a sampler (``chains=True``) does
    for its ``distributed`` argument:

    * ``None`` (the default): :class:`DataParallel` when a process group of more than one
      process is initialised, else nothing (one process). So a script started by torchrun
      that calls :func:`init_from_env` needs no other change; under torchrun with several
      processes and no process group it is an error (every rank would train on its own and
      write the same files);
    * ``False``: one process, whatever the process group (independent runs, e.g. a sweep
      split over the ranks, each writing its own files);
    * ``True``: :class:`DataParallel` (an error without a process group; with one process it
      runs the collectives all the same, which exercises the NCCL path on one GPU);
    * a :class:`DataParallel` or (samplers) :class:`IndependentChains`.
    """
    if distributed is False:
        return None
    if isinstance(distributed, IndependentChains) and not chains:
        raise ValueError("IndependentChains is for samplers; for independent fits pass distributed=False and give each rank its own seed and files")
    if isinstance(distributed, _ProcessGroupRun):
        return distributed
    if distributed is True:
        return DataParallel()
    if distributed is None:
        if is_initialized():
            return DataParallel() if get_world_size() > 1 else None
        if launched_by_torchrun() and int(os.environ["WORLD_SIZE"]) > 1:
            raise RuntimeError(
                f"this process is one of {os.environ['WORLD_SIZE']} started by torchrun, but no process group is "
                "initialised: call pyrozoo.distributed.init_from_env() first (or pass distributed=False for "
                "independent runs, each writing its own files)"
            )
        return None
    raise TypeError(f"distributed must be None, True, False, a DataParallel or an IndependentChains, got {distributed!r}")


def checkpoint_for_this_process(saved: dict, parallel: Optional[_ProcessGroupRun], path) -> dict:
    """This process's part of a checkpoint, after checking that the run resuming it has the
    mode and number of processes of the run that wrote it."""
    info = saved.get(MARKER) if isinstance(saved, dict) else None
    written = (info["mode"], int(info["world_size"])) if info is not None else ("one process", 1)
    ours = parallel.describe() if parallel is not None else ("one process", 1)
    # a data-parallel run on one process is a one-process run
    written, ours = (("one process", 1) if w == ("data", 1) else w for w in (written, ours))
    if written != ours:
        raise ValueError(
            f"{path} was written by a run of {_phrase(written)}; this run is {_phrase(ours)}: resume it with "
            f"{written[1]} process{'es' if written[1] > 1 else ''} in the same mode (torchrun --nproc_per_node "
            f"{written[1]}), or start afresh (resume=False or another checkpoint file)"
        )
    return parallel.own_checkpoint(saved) if parallel is not None else saved


def _phrase(description: Tuple[str, int]) -> str:
    mode, size = description
    if mode == "one process":
        return "one process"
    return f"{size} processes ({'data-parallel' if mode == 'data' else 'independent chains'})"


# -- gathering -----------------------------------------------------------------------------
def _buckets(tensors: Sequence[torch.Tensor]) -> Dict[tuple, List[int]]:
    """Indices of ``tensors`` grouped by (device, dtype): one flat buffer, one collective each."""
    out: Dict[tuple, List[int]] = {}
    for i, t in enumerate(tensors):
        out.setdefault((t.device, t.dtype), []).append(i)
    return out


def _unflatten_into(flat: torch.Tensor, tensors: Sequence[torch.Tensor]) -> None:
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def _state_bytes(state) -> torch.Tensor:
    return torch.frombuffer(bytearray(state_to_bytes(state)), dtype=torch.uint8)


def _state_from_bytes(data: torch.Tensor):
    # read back as data (weights_only), never as pickled objects, as checkpoint files are
    return state_from_bytes(data.cpu().numpy().tobytes())


def gather_states(state, parallel: Optional[_ProcessGroupRun] = None) -> Optional[list]:
    """Every rank's ``state`` (tensors, numbers, strings and containers of them, as
    :func:`~pyrozoo.serialization.save_state` stores), as a list on rank 0 (``None``
    elsewhere), sent as data: encoded, saved to bytes and read back with ``weights_only``."""
    parallel = parallel if parallel is not None else IndependentChains()
    data = _state_bytes(state)
    sizes = parallel._all_gather(torch.tensor([data.numel()], dtype=torch.int64))
    longest = int(max(int(s.item()) for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: data.numel()] = data
    parts = parallel._all_gather(padded)
    if not parallel.is_main:
        return None
    return [_state_from_bytes(p[: int(s.item())]) for p, s in zip(parts, sizes)]


def gather_chains(samples: Dict[str, torch.Tensor], *, to_all: bool = False, parallel: Optional[_ProcessGroupRun] = None) -> Optional[Dict[str, torch.Tensor]]:
    """The draws of every rank's chain: ``{site: (chains, draws, *shape)}`` on rank 0 (on
    every rank with ``to_all``; ``None`` on the others), from each rank's ``{site: (draws,
    *shape)}`` (e.g. ``sink.load()``). Every chain must hold the same number of draws."""
    parallel = parallel if parallel is not None else IndependentChains()
    names = sorted(samples)
    counts = parallel._all_gather(torch.tensor([samples[names[0]].shape[0]], dtype=torch.int64))
    if len({int(c.item()) for c in counts}) != 1:
        raise ValueError(f"the chains hold different numbers of draws ({[int(c.item()) for c in counts]}): run them with the same steps, burn-in and thinning")
    out = {name: torch.stack(parallel._all_gather(samples[name].contiguous())) for name in names}
    return out if (to_all or parallel.is_main) else None


