"""Test cases generated from the public API: the classes a package exports in ``__all__``."""

import inspect
from typing import List, Sequence


def exported_classes(module, base: type, exclude: Sequence[type] = ()) -> List[type]:
    """The classes in ``module.__all__`` that subclass ``base``, in ``__all__``'s order, less
    ``exclude`` (abstract bases, combinators)."""
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) and issubclass(obj, base) and obj not in exclude:
            out.append(obj)
    return out
