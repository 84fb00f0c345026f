"""Distributions that Pyro and torch do not provide, and the KL divergences between them.

Importing this package registers every KL in :mod:`pyrozoo.distributions.kl` with
``torch.distributions.kl.register_kl``.
"""

from pyrozoo.distributions.log_scale_normal import LogScaleNormal
from pyrozoo.distributions.scale_mixture import ScaleMixtureNormal
from pyrozoo.distributions.elastic_net import ElasticNet
from pyrozoo.distributions.ssgl_expectation import SSGLExpectedLogDensity
from pyrozoo.distributions.linear_autoregressive_normal import LinearAutoregressiveNormal
from pyrozoo.distributions.mixing import ExplicitMixing, FiniteMixing, ImplicitMixing, Mixing
from pyrozoo.distributions.semi_implicit import (
    PriorComponentCache,
    SemiImplicit,
    SemiImplicitCacheMiss,
    semi_implicit_role,
    semi_implicit_samples,
)
from pyrozoo.distributions.von_mises_fisher import HypersphericalUniform, VonMisesFisher
from pyrozoo.distributions.ard import ARDNormal
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.distributions import kl  # noqa: F401  (registers the KLs)
from pyrozoo import ops
from pyrozoo.utils import deprecated_aliases

__all__ = [
    "LogScaleNormal",
    "ScaleMixtureNormal",
    "ElasticNet",
    "SSGLExpectedLogDensity",
    "SemiImplicit",
    "SemiImplicitCacheMiss",
    "PriorComponentCache",
    "semi_implicit_samples",
    "semi_implicit_role",
    "Mixing",
    "ImplicitMixing",
    "ExplicitMixing",
    "FiniteMixing",
    "LinearAutoregressiveNormal",
    "VonMisesFisher",
    "HypersphericalUniform",
    "LogUniformImproper",
    "ARDNormal",
    "DropoutNormal",
]


# the Bessel functions moved to pyrozoo.ops (one release under their former names here)
__getattr__ = deprecated_aliases("pyrozoo.distributions", {name: (lambda name=name: getattr(ops, name)) for name in ops.__all__}, "pyrozoo.ops")
