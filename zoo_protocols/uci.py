"""The UCI regression protocol (Hernández-Lobato & Adams 2015) with a registry of methods.

A method is a function ``run(split, config) -> dict`` that trains on ``split``'s
standardised training data and returns at least ``rmse`` and ``test_ll`` computed in the
*original* target units (see :meth:`pyrozoo.data.UCISplit.to_original_units`). Methods
register with :func:`register_uci_method` in a module ``zoo_protocols/uci_*.py``;
:func:`zoo_protocols.sweep.sweep` runs any of them over data sets and splits
(``reproductions/uci_regression.py`` and the UCI table scripts call it).

A method must honour ``config.epochs`` and ``config.batch_size`` when they are given (one
optimizer or sampler step per minibatch, ``epochs`` passes): the comparison harness
(:mod:`zoo_protocols.compare`) matches compute budgets through them, and predicts
through :func:`pyrozoo.inference.evaluate` so that calibration can be recorded.
"""

from typing import Dict, Optional

import pandas as pd
import pyro.distributions as dist

from pyrozoo.data import UCI_DATASETS, UCISplit
from pyrozoo.inference import fit
from pyrozoo.inference.diagnostics import collect_events, run_status
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood
from pyrozoo.reporting import mean_and_stderr
from pyrozoo.utils import set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.paths import resolve_data_dir
from zoo_protocols.registry import Method, MethodRegistry


#: the UCI protocol's methods: ``run(split, config) -> {"rmse", "test_ll", ...}``, in modules ``uci_*.py``
UCI_REGISTRY = MethodRegistry("UCI", "uci_")
UCI_METHODS: Dict[str, Method] = UCI_REGISTRY.methods


def register_uci_method(name: str, description: str = ""):
    """Decorator registering ``run(split, config) -> {"rmse", "test_ll", ...}`` under ``name``."""
    return UCI_REGISTRY.register(name, description)


def uci_model(split: UCISplit, prior, precision_prior, config: RunConfig, n_hidden: Optional[int] = None) -> BayesianNeuralNetwork:
    """The protocol's network (one hidden layer of ``split.n_hidden`` units, or ``n_hidden``)
    under ``prior``, with a Gaussian likelihood whose noise precision has the
    ``Gamma(*precision_prior)`` prior."""
    a, b = precision_prior
    net = MLP(split.num_features, [n_hidden or split.n_hidden], 1).to(config.device, config.dtype)
    likelihood = GaussianLikelihood(len(split.y_train), precision=dist.Gamma(float(a), float(b)))
    return BayesianNeuralNetwork(net, prior, likelihood)


def decay_to_tenth(epochs: int):
    """``epoch -> lr factor``: linear from 1 down to a tenth over ``epochs`` epochs (the last
    epochs average out the minibatch noise)."""
    return lambda epoch: 1.0 - 0.9 * epoch / max(epochs - 1, 1)


def fit_split(model, guide, split: UCISplit, config: RunConfig, epochs: int, **fit_kwargs):
    """:func:`pyrozoo.inference.fit` on ``split``'s training data for ``epochs`` epochs, with
    the run's device, seed (``config.seed + split.split``) and progress setting."""
    return fit(model, guide, (split.x_train, split.y_train), epochs=epochs, device=config.device, seed=config.seed + split.split, progress=config.progress, **fit_kwargs)


def available_methods() -> Dict[str, Method]:
    return UCI_REGISTRY.available()


def run_split(method: str, split: UCISplit, config: RunConfig) -> dict:
    """Runs one method on one split; adds ``train_seconds`` (wall clock of the whole run) and
    ``status`` (``"ok"``, or ``"diverged"`` / ``"collapsed"`` when its training said so:
    :mod:`pyrozoo.inference.diagnostics`; such a row is not a valid result)."""
    UCI_REGISTRY.get(method)  # an unknown name fails before the data moves
    # the network is initialised when the method builds it, before any seed its training sets:
    # seed here, so that a run is reproducible whatever ran before it in the process
    set_seed(config.seed + split.split)
    with collect_events() as events:
        result = UCI_REGISTRY.run_timed(method, split.to(config.device, config.dtype), config, required=("rmse", "test_ll"))
    result["status"] = run_status(events)
    return result


#: the columns of ``published_baselines.csv``
PUBLISHED_COLUMNS = ["dataset", "method", "rmse", "rmse_se", "test_ll", "test_ll_se", "source"]


def published_baselines(data_dir=None, datasets=None) -> pd.DataFrame:
    """``published_baselines.csv`` of the UCI folder: published numbers, labelled with sources
    (``data_dir``: the data root, default :func:`zoo_protocols.paths.default_data_dir`). Given
    ``datasets`` none of which is bundled (:data:`~pyrozoo.data.UCI_DATASETS`: a user's own
    have no published numbers), no rows, and the file is not read."""
    if datasets is not None and not set(datasets) & set(UCI_DATASETS):
        return pd.DataFrame(columns=PUBLISHED_COLUMNS)
    root = resolve_data_dir(data_dir)
    path = root / "uci" / "published_baselines.csv" if (root / "uci").is_dir() else root / "published_baselines.csv"
    if not path.is_file():
        raise FileNotFoundError(f"published baselines file {path} is missing")
    return pd.read_csv(path)


def summarize(results: pd.DataFrame, data_dir=None, include_published: bool = True) -> pd.DataFrame:
    """Mean ± standard error over splits per (dataset, method), beside the published
    baselines for the same data sets (their ``method`` is suffixed "(published)"). A data set
    with no published numbers (a user's own) has its measured rows only."""
    ours = mean_and_stderr(results, ["dataset", "method"], ["rmse", "test_ll"])
    ours["source"] = "measured (this repository)"
    if not include_published:
        return ours
    published = published_baselines(data_dir, results.dataset.unique())
    published = published[published.dataset.isin(results.dataset.unique())].copy()
    published["method"] = published["method"] + " (published)"
    published["n"] = float("nan")
    cols = ["dataset", "method", "rmse", "rmse_se", "test_ll", "test_ll_se", "n", "source"]
    table = pd.concat([ours[cols], *([published[cols]] if len(published) else [])], ignore_index=True)
    order = {d: i for i, d in enumerate(results.dataset.unique())}
    table["_order"] = table.dataset.map(order)
    return table.sort_values(["_order"], kind="stable").drop(columns="_order").reset_index(drop=True)
