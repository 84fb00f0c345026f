"""The baselines a user would reach for instead of the zoo's methods, scored by the same code.

* :class:`LaplaceBaseline` — the Laplace approximation post hoc on a MAP fit, last-layer or
  all weights, KFAC or diagonal (``laplace-torch``);
* :class:`IVONBaseline` — variational learning with the IVON optimizer (``ivon-opt``);
* :class:`DeepEnsemble` — independently initialised and trained networks (written here).

Each is a :class:`Baseline`: network outputs under posterior draws and a likelihood of
:mod:`pyrozoo.models`, which give the predictive, the metrics of
:func:`pyrozoo.inference.evaluate` (with its calibration records) and the aleatoric /
epistemic split of :mod:`pyrozoo.inference.uncertainty_decomposition`. The plain networks are trained by
:func:`train_map`, the objective the zoo's MAP minimises.

``laplace-torch`` and ``ivon-opt`` are optional (the ``baselines`` extra; ``scripts/setup.sh``
installs them): the classes that need them say how to install them when they are missing.
"""

from pyrozoo.baselines.ensemble import DeepEnsemble
from pyrozoo.baselines.ivon import IVONBaseline
from pyrozoo.baselines.laplace import LaplaceBaseline
from pyrozoo.baselines.predictive import Baseline
from pyrozoo.baselines.training import NoisePrecision, negative_log_joint, negative_log_likelihood, run_epochs, train_map

__all__ = [
    "Baseline",
    "DeepEnsemble",
    "IVONBaseline",
    "LaplaceBaseline",
    "NoisePrecision",
    "negative_log_joint",
    "negative_log_likelihood",
    "run_epochs",
    "train_map",
]
