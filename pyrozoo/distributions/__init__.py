"""Distributions that Pyro and torch do not provide, and the KL divergences between them.

Importing this package registers every KL in :mod:`pyrozoo.distributions.kl` with
``torch.distributions.kl.register_kl``.
"""

from pyrozoo.distributions.log_scale_normal import LogScaleNormal
from pyrozoo.distributions.scale_mixture import ScaleMixtureNormal
from pyrozoo.distributions import kl  # noqa: F401  (registers KLs)

__all__ = ["LogScaleNormal", "ScaleMixtureNormal"]
from pyrozoo.distributions.elastic_net import ElasticNet  # noqa: E402
from pyrozoo.distributions.ssgl_expectation import SSGLExpectedLogDensity  # noqa: E402

__all__ += ["ElasticNet", "SSGLExpectedLogDensity"]
from pyrozoo.distributions.linear_autoregressive_normal import LinearAutoregressiveNormal  # noqa: E402
from pyrozoo.distributions.mixing import ExplicitMixing, FiniteMixing, ImplicitMixing, Mixing  # noqa: E402
from pyrozoo.distributions.semi_implicit import SemiImplicit, SemiImplicitCacheMiss, semi_implicit_role, semi_implicit_samples  # noqa: E402

__all__ += ["SemiImplicit", "SemiImplicitCacheMiss", "semi_implicit_samples", "semi_implicit_role", "Mixing", "ImplicitMixing", "ExplicitMixing", "FiniteMixing", "LinearAutoregressiveNormal"]
from pyrozoo.distributions.von_mises_fisher import HypersphericalUniform, VonMisesFisher  # noqa: E402

__all__ += ["VonMisesFisher", "HypersphericalUniform"]
from pyrozoo.distributions.ard import ARDNormal  # noqa: E402
from pyrozoo.distributions.dropout_normal import DropoutNormal  # noqa: E402
from pyrozoo.distributions.log_uniform import LogUniformImproper  # noqa: E402

__all__ += ["LogUniformImproper", "ARDNormal", "DropoutNormal"]
