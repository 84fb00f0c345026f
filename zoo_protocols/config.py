"""One run configuration for every protocol, and one resolver of its settings.

A run is asked for with a :class:`RunConfig`: the few settings every protocol understands
are its fields, everything method-specific goes in ``extra``. A protocol resolves what a
run uses with :meth:`RunConfig.settings`, which layers, first match wins:

1. the config's own field, when given (``epochs``, ``batch_size``, ``lr``, ``num_samples``,
   ``hidden``; ``None`` means "not given");
2. ``config.extra[key]``;
3. the defaults mappings passed, in order — typically the method's declared defaults
   (:class:`zoo_protocols.methods.MethodSpec`), then the protocol's.

So a setting means the same thing in every protocol, and no protocol can read ``epochs``
from the config while another ignores it.
"""

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence

import torch

_MISSING = object()


@dataclass
class RunConfig:
    """Settings of one run; ``None`` means the method's or the protocol's default."""

    epochs: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Optional[float] = None
    #: posterior draws used for prediction (protocol default: UCI 100, MNIST 20)
    num_samples: Optional[int] = None
    #: hidden layer widths of a fully connected network (MNIST protocol; default ``(100,)``)
    hidden: Optional[Sequence[int]] = None
    #: network of the LeNet compression protocol
    arch: str = "lenet5"
    device: torch.device = torch.device("cpu")
    dtype: torch.dtype = torch.float32
    seed: int = 0
    #: a smoke run: each protocol caps its epochs (and says by how much)
    quick: bool = False
    progress: bool = False
    extra: dict = field(default_factory=dict)

    #: settings that are fields of the config rather than entries of ``extra``
    FIELDS = ("epochs", "batch_size", "lr", "num_samples", "hidden")

    def settings(self, *defaults: Mapping[str, Any]) -> "Settings":
        """This run's settings over ``defaults`` (earlier mappings win over later ones)."""
        return Settings(self, defaults)


class Settings(Mapping):
    """The resolved settings of one run (see the module docstring for the order).

    A value that is a dict keyed by variant (e.g. a learning rate per sampler) is picked
    with :meth:`pick`.
    """

    def __init__(self, config: RunConfig, defaults: Sequence[Mapping[str, Any]] = ()):
        self.config = config
        self.defaults = tuple(defaults)

    def __getitem__(self, key: str):
        if key in RunConfig.FIELDS:
            value = getattr(self.config, key)
            if value is not None:
                return value
        value = self.config.extra.get(key, _MISSING)
        if value is not _MISSING:
            return value
        for layer in self.defaults:
            if key in layer:
                return layer[key]
        raise KeyError(f"setting {key!r} has no value: not in the run's config, its extra settings or any default ({self._known()})")

    def pick(self, key: str, variant: str):
        """``self[key]``, or its entry for ``variant`` when the value is a per-variant dict."""
        value = self[key]
        return value[variant] if isinstance(value, dict) else value

    def __iter__(self) -> Iterator[str]:
        keys = dict.fromkeys(k for k in RunConfig.FIELDS if getattr(self.config, k) is not None)
        keys.update(dict.fromkeys(self.config.extra))
        for layer in self.defaults:
            keys.update(dict.fromkeys(layer))
        return iter(keys)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def _known(self) -> str:
        return "known settings: " + ", ".join(sorted(self))

    @property
    def quick(self) -> bool:
        return self.config.quick
