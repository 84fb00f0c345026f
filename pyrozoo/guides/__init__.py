"""Guides (variational posteriors) that work with any Pyro model, including
:class:`~pyrozoo.models.BayesianNeuralNetwork`."""

from pyrozoo.guides.base import SitewiseGuide, init_to_network, normal_on_support
from pyrozoo.guides.delta import DeltaGuide
from pyrozoo.guides.mean_field import MeanFieldNormalGuide

__all__ = ["SitewiseGuide", "MeanFieldNormalGuide", "DeltaGuide", "init_to_network", "normal_on_support"]
from pyrozoo.guides.semi_implicit import SemiImplicitGuide  # noqa: E402

__all__ += ["SemiImplicitGuide"]
from pyrozoo.guides.bayesian_compression import BayesianCompressionGuide  # noqa: E402
from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide, VariationalDropoutGuide  # noqa: E402

__all__ += ["VariationalDropoutGuide", "SparseVariationalDropoutGuide", "BayesianCompressionGuide"]
from pyrozoo.guides.radial_directional import RadialDirectionalGuide  # noqa: E402

__all__ += ["RadialDirectionalGuide"]
