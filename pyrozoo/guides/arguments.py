"""Argument checks shared by the guides' constructors.

Each raises a ``TypeError`` for a wrong type and a ``ValueError`` for a wrong value, naming the
guide and the argument. They run once per construction, on Python values: no device work.
"""

import math
import numbers
from typing import Optional, Tuple

import numpy as np


def check_real(owner: str, name: str, value, *, positive: bool = False, low: Optional[float] = None, high: Optional[float] = None) -> float:
    """``value`` as a float: a real number (not a bool), finite, ``> 0`` with ``positive`` and
    strictly inside ``(low, high)`` where those are given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    ok = math.isfinite(value) and (not positive or value > 0) and (low is None or value > low) and (high is None or value < high)
    if not ok:
        what = "a positive finite number" if positive else "a finite number"
        if low is not None or high is not None:
            what += f" in ({'-inf' if low is None else low:g}, {'inf' if high is None else high:g})"
        raise ValueError(f"{owner}: {name} must be {what}, got {value!r}")
    return value


def check_int(owner: str, name: str, value, *, minimum: int) -> int:
    """``value``: an int (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_bool(owner: str, name: str, value) -> bool:
    """``value``: a bool (a string such as ``"False"`` would silently count as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}: {name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_bounds(owner: str, name: str, value) -> Tuple[float, float]:
    """``value``: a pair ``(low, high)`` of finite numbers with ``low < high``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{owner}: {name} must be a pair (low, high), got {value!r}")
    pair = tuple(value)
    if len(pair) != 2:
        raise ValueError(f"{owner}: {name} must be a pair (low, high), got {value!r}")
    low, high = (check_real(owner, name, b) for b in pair)
    if not low < high:
        raise ValueError(f"{owner}: {name} must satisfy low < high, got {value!r}")
    return low, high


def check_callable(owner: str, name: str, value, *, optional: bool = False):
    if (value is None and not optional) or (value is not None and not callable(value)):
        raise TypeError(f"{owner}: {name} must be callable{' or None' if optional else ''}, got {type(value).__name__}")
    return value


def check_names(owner: str, name: str, value, *, optional: bool = False) -> Optional[frozenset]:
    """``value``: an iterable of site names (a bare string would be taken letter by letter)."""
    if value is None and optional:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{owner}: {name} must be an iterable of site names, got the string {value!r} (use [{value!r}])")
    try:
        names = frozenset(value)
    except TypeError:
        raise TypeError(f"{owner}: {name} must be an iterable of site names, got {type(value).__name__}") from None
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{owner}: {name} must contain site names (strings), got {bad[0]!r}")
    return names


__all__ = ["check_real", "check_int", "check_bool", "check_bounds", "check_callable", "check_names"]
