"""Choosing which parameters of an ``nn.Module`` a prior makes random.

A :class:`ParameterSelector` answers one question per parameter: "is this one
random?". Priors, SG-MCMC-SA's choice of sparse layers and the pruning utilities
all use it, so the same vocabulary (module types, names, predicates) works
everywhere.
"""

from typing import Callable, Iterable, Iterator, Optional, Sequence, Tuple, Type, Union

import torch
from torch import nn

Predicate = Callable[[str, nn.Module, str, torch.Tensor], bool]


def _as_tuple(value) -> tuple:
    if value is None:
        return ()
    if isinstance(value, (str, type)):
        return (value,)
    return tuple(value)


def _name_matches(full_name: str, patterns: Sequence[str]) -> bool:
    """A pattern matches a dotted name exactly or as a dotted suffix ("weight" matches "fc1.weight")."""
    return any(full_name == p or full_name.endswith("." + p) for p in patterns)


class ParameterSelector:
    """Selects parameters of a module by module type, module name, parameter name or predicate.

    With no ``expose*`` argument every parameter is selected; otherwise a parameter is
    selected when it matches at least one ``expose*`` criterion. ``hide*`` criteria always
    win. Names are dotted paths as in ``module.named_parameters()``; a name also matches as
    a dotted suffix, so ``expose_parameters=["weight"]`` selects every weight.

    :param expose_types: module classes whose direct parameters are selected.
    :param hide_types: module classes whose direct parameters are never selected.
    :param expose_modules: module names (``"features.0"``) whose direct parameters are selected.
    :param hide_modules: module names whose direct parameters are never selected.
    :param expose_parameters: parameter names (full or suffix) that are selected.
    :param hide_parameters: parameter names (full or suffix) that are never selected.
    :param predicate: ``f(module_name, module, param_name, param) -> bool``; a parameter must
        also satisfy it to be selected.
    """

    def __init__(
        self,
        *,
        expose_types: Union[Type[nn.Module], Iterable[Type[nn.Module]], None] = None,
        hide_types: Union[Type[nn.Module], Iterable[Type[nn.Module]], None] = None,
        expose_modules: Union[str, Iterable[str], None] = None,
        hide_modules: Union[str, Iterable[str], None] = None,
        expose_parameters: Union[str, Iterable[str], None] = None,
        hide_parameters: Union[str, Iterable[str], None] = None,
        predicate: Optional[Predicate] = None,
    ):
        self.expose_types = _as_tuple(expose_types)
        self.hide_types = _as_tuple(hide_types)
        self.expose_modules = _as_tuple(expose_modules)
        self.hide_modules = _as_tuple(hide_modules)
        self.expose_parameters = _as_tuple(expose_parameters)
        self.hide_parameters = _as_tuple(hide_parameters)
        for t in self.expose_types + self.hide_types:
            if not (isinstance(t, type) and issubclass(t, nn.Module)):
                raise TypeError(f"expose_types/hide_types must be nn.Module classes, got {t!r}")
        for n in self.expose_modules + self.hide_modules + self.expose_parameters + self.hide_parameters:
            if not isinstance(n, str):
                raise TypeError(f"module and parameter names must be strings, got {n!r}")
        if predicate is not None and not callable(predicate):
            raise TypeError("predicate must be callable")
        self.predicate = predicate

    @property
    def _has_expose(self) -> bool:
        return bool(self.expose_types or self.expose_modules or self.expose_parameters)

    def is_selected(self, module_name: str, module: nn.Module, param_name: str, param: torch.Tensor) -> bool:
        full_name = f"{module_name}.{param_name}" if module_name else param_name
        if self.hide_types and isinstance(module, self.hide_types):
            return False
        if self.hide_modules and module_name in self.hide_modules:
            return False
        if self.hide_parameters and _name_matches(full_name, self.hide_parameters):
            return False
        if self._has_expose:
            exposed = (
                (bool(self.expose_types) and isinstance(module, self.expose_types))
                or module_name in self.expose_modules
                or _name_matches(full_name, self.expose_parameters)
            )
            if not exposed:
                return False
        if self.predicate is not None and not self.predicate(module_name, module, param_name, param):
            return False
        return True

    def select(self, net: nn.Module) -> Iterator[Tuple[str, nn.Module, str, nn.Parameter]]:
        """Yields ``(module_name, module, param_name, param)`` for every selected parameter.

        Each parameter appears once, under the module that owns it directly (shared
        parameters are reported at their first owner).
        """
        seen = set()
        for module_name, module in net.named_modules():
            for param_name, param in module.named_parameters(recurse=False):
                if id(param) in seen:
                    continue
                seen.add(id(param))
                if self.is_selected(module_name, module, param_name, param):
                    yield module_name, module, param_name, param

    def __repr__(self) -> str:
        parts = [
            f"{k}={v!r}"
            for k, v in vars(self).items()
            if v not in ((), None)
        ]
        return f"{type(self).__name__}({', '.join(parts)})"
