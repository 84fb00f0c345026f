"""Guides (variational posteriors) that work with any Pyro model, including
:class:`~pyrozoo.models.BayesianNeuralNetwork`."""

from pyrozoo.guides.base import normal_on_support, SitewiseGuide
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.guides.delta import DeltaGuide
from pyrozoo.guides.mean_field import MeanFieldNormalGuide
from pyrozoo.guides.semi_implicit import SemiImplicitGuide
from pyrozoo.guides.bayesian_compression import BayesianCompressionGuide
from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide, VariationalDropoutGuide
from pyrozoo.guides.radial_directional import RadialDirectionalGuide
from pyrozoo.guides.composite import CompositeGuide

__all__ = [
    "SitewiseGuide",
    "MeanFieldNormalGuide",
    "DeltaGuide",
    "init_to_network",
    "normal_on_support",
    "SemiImplicitGuide",
    "VariationalDropoutGuide",
    "SparseVariationalDropoutGuide",
    "BayesianCompressionGuide",
    "RadialDirectionalGuide",
    "CompositeGuide",
]
