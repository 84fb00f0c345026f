"""Saving and loading state as data, never as code.

``torch.load(..., weights_only=False)`` unpickles whatever a file names, so a crafted
checkpoint runs its payload on load. Every state pyrozoo writes (training and sampler
checkpoints, sample shards, exported posteriors) goes through :func:`save_state` and
:func:`load_state` instead: the file holds only tensors, numbers, strings, ``None`` and
dicts, lists and tuples of them, and it is read with ``weights_only=True``, torch's
unpickler that builds nothing else.

Two kinds of value that a state holds are not plain data, and are encoded as tagged dicts:

* NumPy arrays (NumPy's random state inside :func:`pyro.util.get_rng_state`): a tensor
  and the dtype's name;
* distribution constraints (the param store's ``constraints``): the name of a module-level
  constraint of ``torch.distributions.constraints`` / ``pyro.distributions.constraints`` /
  ``pyrozoo.distributions.constraints``,
  or a constraint class and its attributes. Decoding looks the class up among the
  already-loaded subclasses of ``Constraint`` from torch, Pyro and pyrozoo and sets its
  attributes: it imports nothing and calls no constructor a file could choose.
"""

import io
import pickle
from pathlib import Path
from typing import Any, Dict, Optional, Union

import numpy as np
import pyro
import pyro.distributions.constraints as pyro_constraints
import torch
from pyro.params.param_store import ParamStoreDict
from torch.distributions import constraints as torch_constraints

from pyrozoo.atomic import atomic_path

FORMAT = "pyrozoo-state"
VERSION = 1
_TAG = "__pyrozoo_type__"
_CONSTRAINT_MODULES = ("torch.distributions", "pyro.distributions", "pyrozoo")


def _named_constraints() -> Dict[str, torch_constraints.Constraint]:
    named = {}
    from pyrozoo.distributions import constraints as pyrozoo_constraints

    for module in (torch_constraints, pyro_constraints, pyrozoo_constraints):
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, torch_constraints.Constraint):
                named.setdefault(name, value)
    return named


def _constraint_classes() -> Dict[str, type]:
    found, stack = {}, [torch_constraints.Constraint]
    while stack:
        cls = stack.pop()
        if cls.__module__.startswith(_CONSTRAINT_MODULES):
            found[f"{cls.__module__}.{cls.__qualname__}"] = cls
        stack.extend(cls.__subclasses__())
    return found


def _qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def encode(obj: Any, where: str = "state") -> Any:
    """``obj`` in the types ``torch.load(weights_only=True)`` reads back (see the module
    docstring); a ``TypeError`` names the first value that has no data form."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes, torch.Tensor, torch.Size, torch.dtype, torch.device)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        # int64 holds every integer dtype NumPy's generator state uses (uint32); floats stay exact
        data = torch.from_numpy(obj.astype(np.int64) if obj.dtype.kind in "iub" else obj.astype(np.float64))
        return {_TAG: "ndarray", "dtype": obj.dtype.str, "data": data}
    if isinstance(obj, torch_constraints.Constraint):
        for name, value in _named_constraints().items():
            if value is obj:
                return {_TAG: "constraint", "name": name}
        cls = type(obj)
        if _qualified_name(cls) not in _constraint_classes():
            raise TypeError(f"{where}: constraint {obj!r} of class {_qualified_name(cls)} cannot be saved as data")
        return {_TAG: "constraint", "class": _qualified_name(cls), "attributes": encode(vars(obj), f"{where}.{cls.__name__}")}
    if isinstance(obj, dict):
        return {k: encode(v, f"{where}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(encode(v, f"{where}[{i}]") for i, v in enumerate(obj))
    raise TypeError(
        f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be saved as data; "
        "store tensors, numbers, strings and dicts/lists of them (e.g. the object's state_dict())"
    )


def decode(obj: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(obj, dict):
        tag = obj.get(_TAG)
        if tag == "ndarray":
            # a map_location may have put the bytes on a GPU: NumPy reads host memory
            return obj["data"].cpu().numpy().astype(np.dtype(obj["dtype"]))
        if tag == "constraint":
            if "name" in obj:
                named = _named_constraints()
                if obj["name"] not in named:
                    raise ValueError(f"unknown constraint {obj['name']!r}")
                return named[obj["name"]]
            classes = _constraint_classes()
            if obj["class"] not in classes:
                raise ValueError(f"unknown constraint class {obj['class']!r}")
            constraint = object.__new__(classes[obj["class"]])
            constraint.__dict__.update(decode(obj["attributes"]))
            return constraint
        if tag is not None:
            raise ValueError(f"unknown tagged value {tag!r}")
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(decode(v) for v in obj)
    return obj


def save_state(state: Any, path: Union[str, Path]) -> Path:
    """Writes ``state`` to ``path`` atomically (the previous file stays valid if the write
    fails, and the ``OSError`` names ``path``)."""
    payload = {"format": FORMAT, "version": VERSION, "state": encode(state)}
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return Path(path)


def load_state(path: Union[str, Path], map_location=None) -> Any:
    """Reads a file written by :func:`save_state`, without unpickling any code.

    :raises FileNotFoundError: ``path`` does not exist.
    :raises ValueError: naming ``path``, when it is empty, truncated or corrupt, not written
        by :func:`save_state` (e.g. by an older pyrozoo), or holds objects other than data
        (a crafted file is refused before anything in it runs).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.stat().st_size == 0:
        raise ValueError(f"{path} is empty (0 bytes): a write was cut short; delete it to start afresh")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ValueError(
            f"{path} holds objects other than tensors and plain data, so it was not loaded (nothing in it was run); "
            f"it was not written by pyrozoo's save_state, or by an older pyrozoo: delete it to start afresh ({_first_line(e)})"
        ) from None
    except Exception as e:  # torch's readers fail on a torn or foreign file in many ways: all mean "not readable"
        raise ValueError(f"{path} is not a readable pyrozoo state file (truncated or corrupt: {_first_line(e)}); delete it to start afresh") from None
    return _state_of(payload, path)


def _state_of(payload, where) -> Any:
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{where} is not a pyrozoo state file (written by another program or an older pyrozoo); delete it to start afresh")
    if payload.get("version") != VERSION:
        raise ValueError(f"{where} has state format version {payload.get('version')!r}; this pyrozoo reads version {VERSION}")
    try:
        return decode(payload["state"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where} holds a malformed state ({e})") from None


def state_to_bytes(state: Any) -> bytes:
    """:func:`save_state`'s format in memory, e.g. to send a state to another process."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, "state": encode(state)}, buffer)
    return buffer.getvalue()


def state_from_bytes(data: bytes, map_location="cpu") -> Any:
    """Reads :func:`state_to_bytes`'s output as data (``weights_only``), never as code."""
    try:
        payload = torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)
    except Exception as e:
        raise ValueError(f"received state is not readable as pyrozoo state data ({_first_line(e)})") from None
    return _state_of(payload, "received state")


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


# -- fitted posteriors -------------------------------------------------------------------------


def _class_name(obj) -> str:
    return _qualified_name(type(obj))


def save(obj, path: Union[str, Path]) -> Path:
    """Saves a fitted posterior to ``path`` as data (no pickled code), atomically.

    :param obj: one of

        * a guide, a model or any object with ``state_dict()`` (e.g. a fitted
          :class:`~pyrozoo.guides.MeanFieldNormalGuide`, a
          :class:`~pyrozoo.models.BayesianNeuralNetwork`, an SG-MCMC sampler's chain state);
        * posterior draws ``{site name: (S, *shape) tensor}`` (e.g. ``sink.load()``);
        * Pyro's param store (``pyro.get_param_store()``), for plain Pyro guides whose
          parameters live there (constraints included).
    """
    if isinstance(obj, ParamStoreDict):
        record = {"kind": "param_store", "state": obj.get_state()}
    elif isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        record = {"kind": "samples", "state": dict(obj)}
    elif callable(getattr(obj, "state_dict", None)):
        record = {"kind": "state_dict", "class": _class_name(obj), "state": obj.state_dict()}
    else:
        raise TypeError(f"cannot save a {type(obj).__name__}: give a guide, model or sampler (anything with state_dict()), a dict of sample tensors, or pyro.get_param_store()")
    return save_state(record, path)


def load(path: Union[str, Path], into=None, *, map_location=None, args: tuple = (), kwargs: Optional[dict] = None):
    """Loads what :func:`save` wrote.

    * draws: returns ``{site name: tensor}``;
    * a param store: replaces the global param store's contents and returns the store;
    * a guide, model or sampler: loads the state into ``into``, an object of the same class
      built the same way (same model, same options), and returns it. A guide that creates
      its parameters on its first call (pyrozoo's and Pyro's autoguides) or a sampler not
      yet set up is first called once on ``args``/``kwargs``: one batch of what it was
      fitted on, e.g. ``(x, y)`` (without ``y`` a model's observed site would look latent).

    :param map_location: where to put the tensors (as in ``torch.load``), e.g. ``"cpu"``.
    :raises ValueError: naming ``path``, if the file is not a saved posterior, or ``into``
        is missing, of another class, or does not match the saved shapes.
    """
    record = load_state(path, map_location=map_location)
    if not isinstance(record, dict) or record.get("kind") not in ("samples", "param_store", "state_dict"):
        raise ValueError(f"{path} holds pyrozoo state but not a saved posterior (use load_state for checkpoints)")
    kind, state = record["kind"], record["state"]
    if kind == "samples":
        if into is not None:
            raise ValueError(f"{path} holds posterior draws, which are returned, not loaded into an object: call load(path)")
        return state
    if kind == "param_store":
        store = into if into is not None else pyro.get_param_store()
        store.set_state(state)
        return store
    if into is None:
        raise ValueError(f"{path} holds the state of a {record['class']}: pass into=<a {record['class'].rsplit('.', 1)[-1]} built the same way>")
    if _class_name(into) != record["class"]:
        raise ValueError(f"{path} holds the state of a {record['class']}, not of a {_class_name(into)}")
    kwargs = kwargs or {}
    if getattr(into, "prototype_trace", True) is None or getattr(into, "is_setup", True) is False:
        if not args and not kwargs:
            raise ValueError(f"{type(into).__name__} creates its parameters on its first call: pass args=(x, y) of one batch it was fitted on to load({str(path)!r}, ...)")
        with pyro.poutine.block():
            (into.setup if hasattr(into, "is_setup") else into)(*args, **kwargs)
    try:
        if isinstance(into, torch.nn.Module):
            into.load_state_dict(state, strict=True)
        else:
            into.load_state_dict(state)
    except (RuntimeError, KeyError, ValueError) as e:
        raise ValueError(f"{path} does not fit this {type(into).__name__} (was it built for another model?): {'; '.join(line.strip() for line in str(e).splitlines()[1:] or [str(e)])}") from None
    return into
