"""Schedules of per-iteration quantities of stochastic-gradient MCMC: the learning rate
ε_k, the inverse temperature τ_k (simulated annealing) and the stochastic-approximation
step size ω_k.

A schedule is called with the 1-based iteration ``k`` and returns a Python float, so
evaluating it costs no device synchronisation. Plain numbers are accepted wherever a
schedule is (:func:`as_schedule`).
"""

import math
from typing import Sequence, Union


def _check_finite_number(name: str, value, *, positive: bool = False, nonnegative: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be positive, got {value}")
    if nonnegative and not value >= 0:
        raise ValueError(f"{name} must be non-negative, got {value}")
    return value


class Schedule:
    """Base class: ``schedule(k) -> float`` for iterations ``k = 1, 2, ...``."""

    def __call__(self, k: int) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in vars(self).items())
        return f"{type(self).__name__}({args})"


class Constant(Schedule):
    """The same value at every iteration."""

    def __init__(self, value: float):
        self.value = _check_finite_number("value", value)

    def __call__(self, k):
        return self.value


class PolynomialDecay(Schedule):
    r"""``min(maximum, scale * (offset + k) ** -power)``.

    Covers the paper's schedules: the learning rate :math:`\epsilon_k = 0.001\,k^{-1/3}`
    (``PolynomialDecay(1e-3, power=1/3)``) and the SA step sizes
    :math:`\omega_k = 10\,(k + 1000)^{-0.7}` and :math:`(k + 1000)^{-3/4}` (Deng et al.
    2019, Sec. 5.1-5.2); ``maximum`` expresses the authors' R script's
    :math:`\min(0.1, 1000 / (100 + k)^{0.7})`.
    """

    def __init__(self, scale: float, power: float, offset: float = 0.0, maximum: float = math.inf):
        self.scale = _check_finite_number("scale", scale, positive=True)
        self.power = _check_finite_number("power", power, nonnegative=True)
        self.offset = _check_finite_number("offset", offset, nonnegative=True)
        if not (isinstance(maximum, (int, float)) and maximum > 0):
            raise ValueError(f"maximum must be a positive number, got {maximum!r}")
        self.maximum = float(maximum)

    def __call__(self, k):
        return min(self.maximum, self.scale * (self.offset + k) ** -self.power)


class PiecewiseConstant(Schedule):
    """``value * factor ** (number of milestones <= k)``: e.g. the learning rate divided by
    10 at the 700th and 900th epoch (milestones given in iterations)."""

    def __init__(self, value: float, milestones: Sequence[int], factor: float = 0.1):
        self.value = _check_finite_number("value", value)
        self.milestones = sorted(int(m) for m in milestones)
        if any(m < 1 for m in self.milestones):
            raise ValueError(f"milestones are iterations (>= 1), got {self.milestones}")
        self.factor = _check_finite_number("factor", factor, positive=True)

    def __call__(self, k):
        passed = sum(1 for m in self.milestones if k >= m)
        return self.value * self.factor**passed


class Geometric(Schedule):
    r"""``initial * rate ** floor((k - 1) / every)``: simulated annealing of the inverse
    temperature, :math:`\tau \leftarrow 1.005\,\tau` per epoch (``every`` = iterations per
    epoch) or :math:`1.003\,\tau` per iteration (Deng et al. 2019, Sec. 5.4 and the UCI
    appendix). ``maximum`` caps the value (a cold limit)."""

    def __init__(self, initial: float, rate: float, every: int = 1, maximum: float = math.inf):
        self.initial = _check_finite_number("initial", initial, positive=True)
        self.rate = _check_finite_number("rate", rate, positive=True)
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a positive int (iterations), got {every!r}")
        self.every = every
        if not (isinstance(maximum, (int, float)) and maximum > 0):
            raise ValueError(f"maximum must be a positive number, got {maximum!r}")
        self.maximum = float(maximum)

    def __call__(self, k):
        exponent = (k - 1) // self.every
        # in log space so that long runs saturate at ``maximum`` instead of overflowing
        log_value = math.log(self.initial) + exponent * math.log(self.rate)
        return min(self.maximum, math.exp(min(log_value, 700.0)))


ScheduleLike = Union[Schedule, float, int]


def as_schedule(value: ScheduleLike, name: str = "schedule") -> Schedule:
    """A :class:`Schedule` from a schedule, a number (constant) or a callable ``k -> float``."""
    if isinstance(value, Schedule):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Constant(_check_finite_number(name, value))
    if callable(value):
        return _Callable(value)
    raise TypeError(f"{name} must be a number, a Schedule or a callable k -> float, got {type(value).__name__}")


class _Callable(Schedule):
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, k):
        return float(self.fn(k))


def checked_value(schedule: Schedule, k: int, name: str, *, allow_zero: bool = False, maximum: float = math.inf) -> float:
    """``schedule(k)``, raising a clear error when it is not a finite positive number
    (or in ``[0, maximum]`` with ``allow_zero``)."""
    value = schedule(k)
    ok = isinstance(value, float) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0) and value <= maximum
    if not ok:
        bound = f"in [0, {maximum}]" if allow_zero else "a finite positive number" + (f" <= {maximum}" if math.isfinite(maximum) else "")
        raise ValueError(f"{name} at iteration {k} is {value!r}; it must be {bound} ({schedule!r})")
    return value
