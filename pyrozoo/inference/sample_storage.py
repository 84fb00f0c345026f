"""Where the (thinned) samples of a stochastic-gradient MCMC run go.

Samples are dictionaries ``{site name: value}`` of constrained values. They are copied to
the CPU when recorded (the only host synchronisation of a run besides the per-epoch log
line), so the device keeps no history. :class:`InMemorySamples` keeps them in a list;
:class:`DiskSamples` streams them into shard files (a ResNet's samples do not fit in
memory), written atomically, so an interrupted run keeps everything written so far and a
resumed run truncates to its checkpoint. :class:`SampleGuide` turns stored samples into a
guide for :func:`pyrozoo.inference.evaluate` and ``Predictive``.
"""

import json
from pathlib import Path
from typing import Dict, Iterator, List, Union

import pyro
import pyro.distributions as dist
import torch

from pyrozoo import atomic
from pyrozoo.serialization import load_state, save_state

Sample = Dict[str, torch.Tensor]


def _to_cpu(values: Sample) -> Sample:
    return {name: v.detach().to("cpu", copy=True) for name, v in values.items()}


def _stack(samples: List[Sample]) -> Sample:
    if not samples:
        raise ValueError("no samples have been recorded")
    return {name: torch.stack([s[name] for s in samples]) for name in samples[0]}


class SampleSink:
    """Interface: ``append(values)``, ``__len__``, ``load()`` (stacked samples), and
    ``state_dict()`` / ``load_state_dict()`` / ``flush()`` for checkpoints."""

    def append(self, values: Sample) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def load(self) -> Sample:
        """All samples, stacked: ``{name: tensor of shape (S, *site shape)}``."""
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def state_dict(self) -> dict:
        return {"count": len(self)}

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError


class InMemorySamples(SampleSink):
    """Samples in a list of CPU tensors (small models)."""

    def __init__(self):
        self.samples: List[Sample] = []

    def append(self, values):
        self.samples.append(_to_cpu(values))

    def __len__(self):
        return len(self.samples)

    def load(self):
        return _stack(self.samples)

    def state_dict(self):
        return {"count": len(self.samples), "samples": list(self.samples)}

    def load_state_dict(self, state):
        self.samples = list(state["samples"])[: int(state["count"])]


class DiskSamples(SampleSink):
    """Samples streamed to ``directory`` in shards of ``shard_size`` samples.

    Each shard is a ``{name: (s, ...) tensor}`` written by :func:`~pyrozoo.serialization.save_state`
    (read back as data, never unpickled code); ``manifest.json`` lists the shards in order.
    Both are replaced atomically, so a crash never leaves a torn file.
    :meth:`flush` writes the buffered samples as a (possibly short) shard.

    :param directory: a new or existing sample directory (existing shards are kept and
        appended to, so a resumed run continues the same directory).
    :param int shard_size: samples per shard file.
    """

    MANIFEST = "manifest.json"

    def __init__(self, directory: Union[str, Path], shard_size: int = 100):
        if not isinstance(shard_size, int) or shard_size < 1:
            raise ValueError(f"shard_size must be a positive int, got {shard_size!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.shard_size = shard_size
        self._buffer: List[Sample] = []
        manifest = self.directory / self.MANIFEST
        self._shards: List[dict] = _read_manifest(manifest) if manifest.exists() else []

    def _write_manifest(self) -> None:
        atomic.write_json(self.directory / self.MANIFEST, {"shards": self._shards})

    def _write_shard(self, samples: List[Sample]) -> None:
        index = len(self._shards)
        name = f"samples-{index:05d}.pt"
        save_state(_stack(samples), self.directory / name)
        self._shards.append({"file": name, "count": len(samples)})
        self._write_manifest()

    def append(self, values):
        self._buffer.append(_to_cpu(values))
        if len(self._buffer) >= self.shard_size:
            self.flush()

    def flush(self):
        if self._buffer:
            self._write_shard(self._buffer)
            self._buffer = []

    def __len__(self):
        return sum(s["count"] for s in self._shards) + len(self._buffer)

    def shards(self) -> Iterator[Sample]:
        """The written shards one at a time (bounded memory), then the buffered samples."""
        for shard in self._shards:
            yield load_state(self.directory / shard["file"])
        if self._buffer:
            yield _stack(self._buffer)

    def load(self):
        parts = list(self.shards())
        if not parts:
            raise ValueError(f"no samples in {self.directory}")
        return {name: torch.cat([p[name] for p in parts]) for name in parts[0]}

    def load_state_dict(self, state):
        """Truncates the directory to the ``count`` samples a checkpoint recorded."""
        self.flush()
        keep = int(state["count"])
        kept, total = [], 0
        for shard in self._shards:
            if total + shard["count"] <= keep:
                kept.append(shard)
                total += shard["count"]
                continue
            if total < keep:
                path = self.directory / shard["file"]
                save_state({k: v[: keep - total] for k, v in load_state(path).items()}, path)
                kept.append({"file": shard["file"], "count": keep - total})
                total = keep
            else:
                (self.directory / shard["file"]).unlink(missing_ok=True)
        if total < keep:
            raise ValueError(f"{self.directory} holds {total} samples, fewer than the checkpoint's {keep}")
        self._shards = kept
        self._write_manifest()


def _read_manifest(path: Path) -> List[dict]:
    try:
        shards = json.loads(path.read_text())["shards"]
        if not all(isinstance(s["file"], str) and "/" not in s["file"] and int(s["count"]) >= 0 for s in shards):
            raise ValueError("a shard entry is not a file name and a count")
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a sample manifest ({e}); delete the folder to start afresh") from None
    return shards


class SampleGuide:
    """A guide that replays stored samples: call ``i`` returns sample ``i mod S`` (as
    ``Delta`` sites), so ``evaluate(model, SampleGuide(samples), x, y, num_samples=S)``
    averages the predictive over every stored sample exactly once.

    :param samples: ``{site name: (S, *shape) tensor}`` (e.g. :meth:`SampleSink.load`).
    :param device: where to put the values (default: where they are).
    """

    def __init__(self, samples: Sample, device=None):
        if not samples:
            raise ValueError("SampleGuide needs at least one site")
        sizes = {name: v.shape[0] for name, v in samples.items()}
        if len(set(sizes.values())) != 1:
            raise ValueError(f"sites hold different numbers of samples: {sizes}")
        self.samples = {name: v.to(device) if device is not None else v for name, v in samples.items()}
        self.num_samples = next(iter(sizes.values()))
        self._next = 0

    def __call__(self, *args, **kwargs):
        i = self._next
        self._next = (i + 1) % self.num_samples
        return {name: pyro.sample(name, dist.Delta(v[i], event_dim=v.dim() - 1)) for name, v in self.samples.items()}
