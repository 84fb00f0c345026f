r"""Finite versions of torch's ``real``, ``positive`` and ``nonnegative`` parameter constraints.

torch's ``constraints.real`` is ``x == x`` and ``constraints.positive`` is ``x > 0``: both
accept :math:`\pm\infty`. An infinite location, scale, rate or concentration makes every
family in :mod:`pyrozoo.distributions` meaningless (``VonMisesFisher(mu, inf)`` used to send
its rejection sampler spinning), so their ``arg_constraints`` use these instead; with
``validate_args`` (Pyro's and torch's default) a non-finite parameter is a ``ValueError``
at construction that names the parameter.

Each is a subclass of the torch constraint it narrows and is registered with ``biject_to`` /
``transform_to`` under the same transform (identity, ``exp``), so
``transform_to(Family.arg_constraints[name])`` keeps working for learnable parameters.
"""

import torch
from torch.distributions import biject_to, constraints, transform_to

__all__ = ["finite", "positive_finite", "nonnegative_finite"]


class _Finite(constraints._Real):
    """The real line without :math:`\\pm\\infty` (and NaN)."""

    def check(self, value):
        return torch.isfinite(value)

    def __repr__(self):
        return "Finite()"


class _PositiveFinite(constraints._GreaterThan):
    """:math:`(0, \\infty)`: positive and finite."""

    def __init__(self):
        super().__init__(0.0)

    def check(self, value):
        # NaN fails both comparisons
        return (value > 0) & (value < torch.inf)

    def __repr__(self):
        return "PositiveFinite()"


class _NonnegativeFinite(constraints._GreaterThanEq):
    """:math:`[0, \\infty)`: non-negative and finite."""

    def __init__(self):
        super().__init__(0.0)

    def check(self, value):
        return (value >= 0) & (value < torch.inf)

    def __repr__(self):
        return "NonnegativeFinite()"


finite = _Finite()
positive_finite = _PositiveFinite()
nonnegative_finite = _NonnegativeFinite()

# the transforms of the constraints these narrow (identity; exp shifted to the lower bound)
for _registry in (biject_to, transform_to):
    for _narrow, _wide in ((_Finite, constraints._Real), (_PositiveFinite, constraints._GreaterThan), (_NonnegativeFinite, constraints._GreaterThanEq)):
        if _narrow not in _registry._registry:
            _registry.register(_narrow, _registry._registry[_wide])
