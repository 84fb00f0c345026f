"""Former home of the Bessel functions, now :mod:`pyrozoo.ops.special` (kept one release)."""

import warnings

from pyrozoo.ops.special import *  # noqa: F401,F403
from pyrozoo.ops.special import __all__  # noqa: F401

warnings.warn("pyrozoo.distributions.special is deprecated and will be removed in the next release: use pyrozoo.ops.special", FutureWarning, stacklevel=2)
