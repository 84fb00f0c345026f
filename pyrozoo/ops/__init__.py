"""Numerical special functions the distributions are built on (as Pyro keeps such code in
``pyro.ops``): the modified Bessel functions of the first kind of the von Mises–Fisher
distribution, and their ratios and bounds (:mod:`pyrozoo.ops.special`)."""

from pyrozoo.ops import special
from pyrozoo.ops.special import *  # noqa: F401,F403  (the names of special.__all__)

__all__ = list(special.__all__)
