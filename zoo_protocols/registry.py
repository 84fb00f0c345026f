"""One registry type for the experiment protocols' methods (UCI, MNIST, LeNet compression).

A protocol owns a :class:`MethodRegistry`; method modules named ``<prefix>*.py`` in this
package register functions with its :meth:`~MethodRegistry.register` decorator and are
imported on demand by :meth:`~MethodRegistry.available`.
"""

import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable


@dataclass
class Method:
    """A registered method: ``run(*protocol arguments)`` and a one-line description."""

    name: str
    run: Callable
    description: str


class MethodRegistry:
    """Methods of one protocol, by name.

    :param str kind: the protocol's name in messages (``"UCI"``, ``"MNIST"``, ...).
    :param str module_prefix: method modules of :mod:`zoo_protocols` with this prefix
        are imported by :meth:`available`.
    """

    def __init__(self, kind: str, module_prefix: str):
        self.kind = kind
        self.module_prefix = module_prefix
        self.methods: Dict[str, Method] = {}

    def register(self, name: str, description: str = ""):
        """Decorator registering ``fn`` under ``name`` (description: the docstring's first line by default)."""

        def decorator(fn):
            if name in self.methods:
                raise ValueError(f"{self.kind} method {name!r} registered twice")
            self.methods[name] = Method(name, fn, description or (fn.__doc__ or "").strip().split("\n")[0])
            return fn

        return decorator

    def register_declaration(self, spec, run: Callable, name: str = None, description: str = None) -> None:
        """Registers ``run(spec, *protocol arguments)`` for a declaration of
        :mod:`zoo_protocols.methods`, under ``name`` (default: the declaration's)."""
        name = name or spec.name

        def run_method(*args):
            return run(spec, *args)

        run_method.__name__ = "run_" + name.replace("-", "_")
        self.register(name, description or spec.description)(run_method)

    def available(self) -> Dict[str, Method]:
        """All methods, after importing this protocol's method modules."""
        from zoo_protocols import load_methods

        load_methods(self.module_prefix)
        return dict(self.methods)

    def get(self, name: str) -> Method:
        methods = self.methods if name in self.methods else self.available()
        if name not in methods:
            raise ValueError(f"unknown {self.kind} method {name!r}; available: {', '.join(sorted(methods))}")
        return methods[name]

    def run_timed(self, name: str, *args, required: Iterable[str] = ()) -> dict:
        """``run(*args)`` of method ``name`` as a dict, with ``train_seconds`` (wall clock of the
        whole call) added unless the method reports it; a missing ``required`` key is an error."""
        method = self.get(name)
        t0 = time.perf_counter()
        result = dict(method.run(*args))
        result.setdefault("train_seconds", time.perf_counter() - t0)
        for key in required:
            if key not in result:
                raise RuntimeError(f"{self.kind} method {name!r} returned no {key!r}")
        return result
