"""Devices, seeds, command-line integer ranges, module helpers and deprecated names."""

import copy
import warnings
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Union

import pyro
import torch


def resolve_device(device: Union[str, torch.device, None] = None, module: Optional[torch.nn.Module] = None, like: Optional[torch.Tensor] = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` means where ``module`` lives, else where the
    tensor ``like`` (the data) lives (a plain Pyro model, or a ``PyroModule`` whose weights
    are all ``PyroSample``, has no parameters to say), else the CPU.

    ``"auto"`` picks CUDA when available. Asking for CUDA on a machine without it is an error.
    """
    if device is None:
        if isinstance(module, torch.nn.Module):
            for t in list(module.parameters()) + list(module.buffers()):
                return t.device
        return like.device if torch.is_tensor(like) else torch.device("cpu")
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
    """``"0-4"`` or ``"0,3,5-7"`` -> ``[0, 1, 2, 3, 4]`` / ``[0, 3, 5, 6, 7]`` (command-line seeds, splits).

    Values are integers >= 0. A range that runs backwards (``"5-2"``) and a spec that selects
    nothing (``""``, ``" , "``) are errors (``ValueError`` naming the spec): a run that would
    run nothing is a mistake, never an empty result."""
    out = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            a = int(first)
            b = int(last) if dash else a
        except ValueError:
            if first.strip() == "" and dash:  # "-1", "-3-2": a negative number
                raise ValueError(f"{spec!r}: negative values are not allowed (integers >= 0, ranges such as 0-4 or 0,3,5-7)") from None
            raise ValueError(f"{spec!r} is not a list of integers and ranges such as 0-4 or 0,3,5-7") from None
        if b < 0:  # "0--1"
            raise ValueError(f"{spec!r}: negative values are not allowed (integers >= 0, ranges such as 0-4 or 0,3,5-7)")
        if b < a:
            raise ValueError(f"{spec!r}: the range {part!r} runs backwards (write {b}-{a})")
        out.extend(range(a, b + 1))
    if not out:
        raise ValueError(f"{spec!r} selects nothing: give integers and ranges such as 0-4 or 0,3,5-7")
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


def check_parameter_shape(params: Dict[str, torch.Tensor], name: str, tensor: torch.Tensor, what: str) -> None:
    """Checks that ``name`` is one of ``params`` (a network's named parameters) and that
    ``tensor`` has its shape; ``what`` names the tensor in the errors (``"value"``, ``"mask"``).

    :raises KeyError: a name that is no parameter.
    :raises ValueError: a shape that differs from the parameter's.
    """
    if name not in params:
        raise KeyError(f"{what} for unknown parameter {name!r}")
    if tuple(tensor.shape) != tuple(params[name].shape):
        raise ValueError(f"{what} for {name!r} has shape {tuple(tensor.shape)}, the parameter {tuple(params[name].shape)}")


@torch.no_grad()
def with_parameters(net: torch.nn.Module, values: Dict[str, torch.Tensor]) -> torch.nn.Module:
    """A deep copy of ``net`` whose parameters named in ``values`` hold those values (e.g.
    posterior means); ``net`` itself is left as it is.

    :raises KeyError: a name that is no parameter of ``net``.
    :raises ValueError: a value whose shape differs from its parameter's.
    """
    params = dict(net.named_parameters())
    for name, value in values.items():
        check_parameter_shape(params, name, value, "value")
    out = copy.deepcopy(net)
    for name, p in out.named_parameters():
        if name in values:
            p.copy_(values[name])
    return out


def forward_with_hooks(net: torch.nn.Module, example_input: torch.Tensor, hooks, pre: bool = False) -> None:
    """One forward pass of ``net`` on ``example_input`` without gradients, with ``hooks``
    (``(module, hook)`` pairs) registered as forward hooks (forward pre-hooks with ``pre``)
    for that pass only."""
    handles = []
    try:
        for module, hook in hooks:
            handles.append(module.register_forward_pre_hook(hook) if pre else module.register_forward_hook(hook))
        with torch.no_grad():
            net(example_input)
    finally:
        for h in handles:
            h.remove()


def rng_states() -> dict:
    """Every generator a run draws from (Python, NumPy, torch, CUDA), for checkpoints."""
    states = {"pyro": pyro.util.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    """Restores :func:`rng_states`; the states may have been loaded onto any device."""
    pyro_states = dict(states["pyro"], torch=states["pyro"]["torch"].cpu())
    pyro.util.set_rng_state(pyro_states)
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in states["cuda"]])


@contextmanager
def rng_states_kept() -> Iterator[None]:
    """Every random stream (:func:`rng_states`) as it was before the block, after it: a
    measurement taken during training (a curve point, a check) must not change what training
    draws next, nor depend on how often it is taken."""
    states = rng_states()
    try:
        yield
    finally:
        set_rng_states(states)


def deprecated_aliases(module: str, aliases: Dict[str, Callable[[], object]], new_module: Optional[str] = None) -> Callable[[str], object]:
    """A module ``__getattr__`` (PEP 562) that serves the former names ``aliases`` (``{old name:
    () -> the object it now names}``) with a ``FutureWarning`` naming the new one, and raises
    ``AttributeError`` for anything else (``new_module``: where the objects live now, when
    they moved). Former names stay out of ``__all__``, so the API cases the tests derive from
    it do not count them twice."""

    def __getattr__(name: str):
        if name in aliases:
            obj = aliases[name]()
            warnings.warn(f"{module}.{name} is deprecated and will be removed in the next release: use {new_module or module}.{obj.__name__}", FutureWarning, stacklevel=2)
            return obj
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
