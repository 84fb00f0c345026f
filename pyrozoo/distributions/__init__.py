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
from pyrozoo.distributions.special import (
    bessel_iv_ratio,
    bessel_iv_ratio_bounds,
    bessel_iv_ratio_and_complement,
    bessel_iv_ratio_complement,
    bessel_iv_ratio_derivative,
    log_bessel_iv,
    log_bessel_ive_div_pow,
    log_bessel_iv_div_pow,
)
from pyrozoo.distributions.ard import ARDNormal
from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.distributions import kl  # noqa: F401  (registers the KLs)

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
    "log_bessel_iv",
    "log_bessel_iv_div_pow",
    "bessel_iv_ratio",
    "bessel_iv_ratio_bounds",
    "bessel_iv_ratio_derivative",
    "bessel_iv_ratio_complement",
    "bessel_iv_ratio_and_complement",
    "log_bessel_ive_div_pow",
    "LogUniformImproper",
    "ARDNormal",
    "DropoutNormal",
]
