"""pyrozoo: a Pyro model zoo for Bayesian deep learning.

Architecture (plain ``nn.Module``) · prior (a Pyro model over the module's parameters) ·
guide · likelihood · objective or kernel — each a separate, swappable object. See
``ARCHITECTURE.md``.
"""

__version__ = "0.1.0"

from pyrozoo import distributions  # noqa: F401  (registers KL divergences)
from pyrozoo.serialization import load, save  # noqa: E402,F401  (portable save/load of fitted posteriors)
