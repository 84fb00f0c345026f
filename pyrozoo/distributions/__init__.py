"""Distributions that Pyro and torch do not provide, and the KL divergences between them.

Importing this package registers every KL in :mod:`pyrozoo.distributions.kl` with
``torch.distributions.kl.register_kl``.
"""

from pyrozoo.distributions.log_scale_normal import LogScaleNormal
from pyrozoo.distributions.scale_mixture import ScaleMixtureNormal
from pyrozoo.distributions import kl  # noqa: F401  (registers KLs)

__all__ = ["LogScaleNormal", "ScaleMixtureNormal"]
