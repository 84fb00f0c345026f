"""Comparing inference methods under a matched compute budget: one row per run.

:func:`compare` runs every requested method (a registered (prior, guide, objective or
kernel) combination, :data:`COMBINATIONS`) on every requested data set, seed and budget,
and returns a ``DataFrame`` with one row per run. Data sets are UCI regression sets (the
standard splits of :class:`~pyrozoo.data.UCIDataset`, methods of
:mod:`recipes.uci`; the ``seed`` column is the split index) and ``"mnist"``
(a small fully connected network, methods of :mod:`recipes.mnist`; ``seed`` is
the training seed).

**Budget.** The budget is a number of gradient evaluations: optimizer steps for the
objectives, sampler iterations for SG-MCMC, each on one minibatch of ``batch_size``
examples, the same for every method. A multi-particle objective (IWAE or Rényi with ``K``
samples, DSIVI with ``K1`` / ``K2`` mixing draws) counts one evaluation per step, whatever
its ``K``: the ``seconds`` column shows what its particles cost in wall time. The budget
reaches every method through the registries' common settings: the harness sets the run
config's ``batch_size`` and ``epochs = ceil(budget / steps_per_epoch)`` (every method honours
both), so ``steps = epochs * steps_per_epoch`` meets the budget and exceeds it by less than
one epoch; ``steps`` records the exact count.

**Calibration.** Every run is evaluated through :func:`pyrozoo.inference.evaluate` inside
:func:`~pyrozoo.inference.prediction.record_predictive`, so each method's predictive is
recorded without method-specific code: for regression the empirical coverage of central
predictive intervals at nominal levels (:func:`pyrozoo.metrics.interval_coverage`), for
classification a reliability diagram (:func:`pyrozoo.metrics.reliability_diagram`). They are
stored as JSON in the ``calibration`` column (:func:`calibration_table` unpacks them);
``calibration_error`` is the mean ``|coverage - level|`` (regression) or the ECE
(classification).

Methods not registered for a data set's protocol (e.g. not yet implemented) are skipped
with a printed message; a method that fails raises, naming the method, data set and run.
"""

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional, Sequence, Union

import pandas as pd
import pyro
import torch

from pyrozoo import atomic, metrics
from pyrozoo.data import UCI_DATASETS, UCIDataset
from pyrozoo.inference.prediction import record_predictive
from pyrozoo.reporting import mean_and_stderr
from recipes import read_runs
from recipes.paths import resolve_data_dir


@dataclass(frozen=True)
class Combination:
    """What a method is made of, for the table (the runner lives in its registry)."""

    prior: str
    guide: str
    objective: str


#: the zoo's methods as (prior, guide, objective or kernel); registry names of the protocols
COMBINATIONS: Dict[str, Combination] = {
    "map": Combination("N(0, 1)", "Delta (point estimate)", "log joint (MAP)"),
    "mfvi-mc": Combination("N(0, 1)", "mean-field Normal", "ELBO, Monte Carlo KL (Pyro Trace_ELBO)"),
    "mfvi-cf": Combination("N(0, 1)", "mean-field Normal", "ELBO, closed-form KL"),
    "mfvi": Combination("N(0, 1)", "mean-field Normal", "ELBO, closed-form KL, local reparameterization"),
    "bbb": Combination("scale mixture", "mean-field Normal", "ELBO, Monte Carlo KL (Bayes by Backprop)"),
    "iwae": Combination("N(0, 1)", "mean-field Normal", "importance-weighted bound (IWAE, K samples)"),
    "renyi": Combination("N(0, 1)", "mean-field Normal", "Rényi-alpha bound"),
    "esbo": Combination("N(0, 1)", "mean-field Normal", "self-normalised IS gradient (reweighted wake-sleep reading of 'ESBO')"),
    "dsivi": Combination("Normal-Gamma marginal (semi-implicit)", "semi-implicit (hypernetwork)", "DSIVI bound"),
    "rdp": Combination("radial-directional (half-Cauchy radii, vMF directions)", "radial-directional", "ELBO, closed-form KL"),
    "sparse-vd": Combination("log-uniform", "sparse variational dropout", "ELBO, approximate KL, local reparameterization"),
    "sgld": Combination("N(0, 1)", "posterior samples", "SGLD"),
    "sghmc": Combination("N(0, 1)", "posterior samples", "SGHMC"),
    "sgld-sa": Combination("spike-and-slab (SSGL)", "posterior samples", "SGLD + stochastic approximation"),
    "sghmc-sa": Combination("spike-and-slab (SSGL)", "posterior samples", "SGHMC + stochastic approximation"),
}

#: the issue's list, in table order (``bbb`` is available on request)
DEFAULT_METHODS = ["map", "mfvi-mc", "mfvi-cf", "mfvi", "iwae", "renyi", "esbo", "dsivi", "rdp", "sparse-vd", "sgld", "sghmc", "sgld-sa", "sghmc-sa"]

#: nominal levels of the central predictive intervals (regression calibration)
DEFAULT_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)

DEFAULT_BATCH_SIZE = {"uci": 32, "mnist": 128}

COLUMNS = [
    "dataset", "method", "seed", "budget", "steps", "epochs", "batch_size", "metric", "rmse_or_error", "test_ll",
    "calibration_error", "seconds", "prior", "guide", "objective", "calibration",
]

KEY = ["dataset", "method", "seed", "budget"]


def protocol(dataset: str) -> str:
    if dataset == "mnist":
        return "mnist"
    if dataset in UCI_DATASETS:
        return "uci"
    raise ValueError(f"unknown dataset {dataset!r}: a UCI set ({', '.join(UCI_DATASETS)}) or 'mnist'")


def registered_methods(protocol_name: str) -> dict:
    """The methods registered for a protocol now (importing every method module)."""
    if protocol_name == "uci":
        from recipes.uci import available_methods
    else:
        from recipes.mnist import available_methods
    return available_methods()


def budget_epochs(budget: int, n: int, batch_size: int):
    """``(epochs, steps)`` of a run with ``budget`` gradient evaluations on ``n`` examples."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budgets are positive step counts, got {budget!r}")
    per_epoch = -(-n // min(batch_size, n))
    epochs = -(-budget // per_epoch)
    return epochs, epochs * per_epoch


def calibration_summary(record, levels: Sequence[float] = DEFAULT_LEVELS, num_bins: int = 10):
    """``(calibration_error, curve)`` of one :class:`~pyrozoo.inference.prediction.PredictiveRecord`."""
    if record.kind == "regression":
        coverage = metrics.interval_coverage(record.pit.double(), list(levels)).tolist()
        error = sum(abs(c - l) for c, l in zip(coverage, levels)) / len(levels)
        return error, {"level": list(levels), "coverage": coverage}
    confidence, accuracy, count = metrics.reliability_diagram(record.probs.double(), record.labels, num_bins)
    return metrics.expected_calibration_error(record.probs.double(), record.labels, num_bins), {
        "confidence": [None if math.isnan(c) else c for c in confidence.tolist()],
        "accuracy": [None if math.isnan(a) else a for a in accuracy.tolist()],
        "count": [int(c) for c in count.tolist()],
    }


class _Data:
    """Loads each data set (and split) once per :func:`compare` call."""

    def __init__(self, data_dir, mnist_train_size, mnist_test_size):
        self.data_dir, self.sizes = data_dir, (mnist_train_size, mnist_test_size)
        self._uci, self._mnist = {}, None

    def uci_split(self, name, index):
        if name not in self._uci:
            self._uci[name] = UCIDataset(name, resolve_data_dir(self.data_dir))
        return self._uci[name].split(index)

    def mnist(self):
        if self._mnist is None:
            from recipes.mnist import load_mnist_data

            self._mnist = load_mnist_data(self.data_dir, *self.sizes)
        return self._mnist


def compare(
    methods: Iterable[str],
    datasets: Iterable[str],
    budgets: Iterable[int],
    seeds: Iterable[int],
    *,
    batch_size: Optional[Dict[str, int]] = None,
    num_samples: int = 100,
    extra: Optional[Dict[str, dict]] = None,
    mnist_hidden: Sequence[int] = (100,),
    mnist_train_size: Optional[int] = None,
    mnist_test_size: Optional[int] = None,
    levels: Sequence[float] = DEFAULT_LEVELS,
    num_bins: int = 10,
    device: Union[str, torch.device] = "cpu",
    data_dir=None,
    out: Union[str, Path, None] = None,
    resume: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Runs every (dataset, method, seed, budget) and returns one row per run (:data:`COLUMNS`).

    :param methods: registry names (:data:`COMBINATIONS`; others are run too when registered).
        A method not registered for a data set's protocol is skipped with a message.
    :param datasets: UCI data set names and/or ``"mnist"``.
    :param budgets: gradient evaluations per run (see the module docstring).
    :param seeds: UCI split indices, or MNIST training seeds.
    :param batch_size: minibatch size per protocol (default :data:`DEFAULT_BATCH_SIZE`).
    :param num_samples: posterior draws for prediction (MAP uses one).
    :param extra: per-method ``config.extra`` (method settings, e.g. ``{"iwae": {"num_particles": 5}}``).
    :param data_dir: the data root (default :func:`recipes.paths.default_data_dir`).
    :param out: CSV written after every run, so an interrupted comparison loses nothing;
        with ``resume`` the runs already in it are kept and not rerun.
    :param log: where progress lines and skip messages go.
    """
    from recipes.mnist import MNISTRunConfig, run_mnist
    from recipes.uci import UCIRunConfig, run_split

    methods, datasets, budgets, seeds = list(methods), list(datasets), [int(b) for b in budgets], [int(s) for s in seeds]
    for d in datasets:
        protocol(d)
    batch_size = {**DEFAULT_BATCH_SIZE, **(batch_size or {})}
    extra = extra or {}
    device = torch.device(device)
    out = Path(out) if out is not None else None
    if not budgets or min(budgets) < 1:
        raise ValueError(f"budgets must be >= 1 gradient evaluation, got {list(budgets)}")
    if not methods or not datasets or not seeds:
        raise ValueError(f"nothing to run: methods {methods}, data sets {datasets}, seeds {seeds}")
    rows = []
    if out is not None and resume:
        rows = read_runs(out, COLUMNS, required=KEY + ["steps", "rmse_or_error", "test_ll", "seconds"], numeric=["seed", "budget", "steps", "rmse_or_error", "test_ll", "seconds"]).to_dict("records")
    done = {(r["dataset"], r["method"], int(r["seed"]), int(r["budget"])) for r in rows}
    data = _Data(data_dir, mnist_train_size, mnist_test_size)
    # a method may exist for one protocol only (skipped elsewhere, with a message), but a request
    # in which nothing can run is a mistake, not an empty table
    if not any(m in registered_methods(protocol(d)) for m in methods for d in datasets):
        raise ValueError(f"none of the methods {list(methods)} is registered for the data sets {list(datasets)}")

    for dataset in datasets:
        proto = protocol(dataset)
        registry = registered_methods(proto)
        runnable = []
        for m in methods:
            if m in registry:
                runnable.append(m)
            else:
                log(f"skipping {m!r} on {dataset}: no {proto.upper()} method of that name is registered (yet)")
        for seed in seeds:
            for budget in budgets:
                for method in runnable:
                    if (dataset, method, seed, budget) in done:
                        continue
                    combination = COMBINATIONS.get(method, Combination("", "", registry[method].description))
                    bs = batch_size[proto]
                    pyro.clear_param_store()
                    if proto == "uci":
                        split = data.uci_split(dataset, seed)
                        epochs, steps = budget_epochs(budget, len(split.y_train), bs)
                        config = UCIRunConfig(epochs=epochs, batch_size=bs, num_samples=num_samples, device=device, seed=0, progress=progress, extra=dict(extra.get(method, {})))
                        run = lambda: run_split(method, split, config)  # noqa: E731
                    else:
                        mnist = data.mnist()
                        epochs, steps = budget_epochs(budget, len(mnist.y_train), bs)
                        config = MNISTRunConfig(epochs=epochs, batch_size=bs, num_samples=num_samples, hidden=tuple(mnist_hidden), device=device, seed=seed, progress=progress, extra=dict(extra.get(method, {})))
                        run = lambda: run_mnist(method, mnist, config)  # noqa: E731
                    t0 = time.perf_counter()
                    try:
                        with record_predictive() as records:
                            result = run()
                    except Exception as e:
                        raise RuntimeError(f"method {method!r} failed on {dataset} (seed {seed}, budget {budget}): {e}") from e
                    seconds = time.perf_counter() - t0
                    cal_error, curve = calibration_summary(records[-1], levels, num_bins) if records else (math.nan, None)
                    row = {
                        "dataset": dataset, "method": method, "seed": seed, "budget": budget, "steps": steps, "epochs": epochs, "batch_size": bs,
                        "metric": "rmse" if proto == "uci" else "error_percent",
                        "rmse_or_error": float(result["rmse"] if proto == "uci" else result["error"]),
                        "test_ll": float(result["test_ll"]), "calibration_error": float(cal_error), "seconds": seconds,
                        "prior": combination.prior, "guide": combination.guide, "objective": combination.objective,
                        "calibration": json.dumps(curve) if curve is not None else "",
                    }
                    rows.append(row)
                    done.add((dataset, method, seed, budget))
                    log(f"{dataset:16s} {method:10s} seed {seed:2d} budget {budget:6d}  {row['metric']} {row['rmse_or_error']:.4g}  test_ll {row['test_ll']:.4g}  ({seconds:.1f} s)")
                    if out is not None:
                        atomic.write_csv(pd.DataFrame(rows, columns=COLUMNS), out)
    runs = pd.DataFrame(rows, columns=COLUMNS)
    wanted = runs.dataset.isin(datasets) & runs.method.isin(methods) & runs.seed.isin(seeds) & runs.budget.isin(budgets)
    return runs[wanted].reset_index(drop=True)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± standard error over seeds per (dataset, method, budget), with the pieces of each method."""
    table = mean_and_stderr(runs, ["dataset", "method", "budget"], ["rmse_or_error", "test_ll", "calibration_error", "seconds"])
    pieces = runs.drop_duplicates(["dataset", "method"]).set_index(["dataset", "method"])[["metric", "prior", "guide", "objective"]]
    table = table.join(pieces, on=["dataset", "method"])
    return table[["dataset", "method", "budget", "metric", "rmse_or_error", "rmse_or_error_se", "test_ll", "test_ll_se", "calibration_error", "calibration_error_se", "seconds", "n", "prior", "guide", "objective"]]


def calibration_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The ``calibration`` column unpacked: one row per (run, level) for regression
    (``level, coverage``) and per (run, bin) for classification (``confidence, accuracy, count``)."""
    out = []
    for r in runs.itertuples(index=False):
        if not isinstance(r.calibration, str) or not r.calibration:
            continue
        curve = json.loads(r.calibration)
        base = {"dataset": r.dataset, "method": r.method, "seed": r.seed, "budget": r.budget}
        if "level" in curve:
            out.extend({**base, "level": lv, "coverage": c} for lv, c in zip(curve["level"], curve["coverage"]))
        else:
            out.extend(
                {**base, "bin": i, "confidence": cf, "accuracy": a, "count": n}
                for i, (cf, a, n) in enumerate(zip(curve["confidence"], curve["accuracy"], curve["count"]))
            )
    return pd.DataFrame(out)


def _panels(n: int, size=(4.2, 3.4)):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(size[0] * n, size[1]), squeeze=False)
    return fig, axes[0]


def _colors(runs: pd.DataFrame) -> dict:
    """One colour per method, the same in every panel."""
    import matplotlib.pyplot as plt

    cycle = plt.get_cmap("tab20").colors
    order = dict.fromkeys([*DEFAULT_METHODS, *COMBINATIONS, *runs.method])
    return {m: cycle[i % len(cycle)] for i, m in enumerate(order)}


def _legend(fig, axes) -> None:
    """One legend for all panels (a method may be missing from some)."""
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))


def plot_metric_vs_budget(runs: pd.DataFrame, metric: str = "rmse_or_error"):
    """One panel per data set: ``metric`` (mean ± standard error over seeds) against the budget, one line per method."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    table = mean_and_stderr(runs, ["dataset", "method", "budget"], [metric])
    datasets = list(dict.fromkeys(runs.dataset))
    colors = _colors(runs)
    fig, axes = _panels(len(datasets))
    for ax, dataset in zip(axes, datasets):
        sub = table[table.dataset == dataset]
        for method in dict.fromkeys(runs[runs.dataset == dataset].method):
            line = sub[sub.method == method].sort_values("budget")
            ax.errorbar(line.budget, line[metric], yerr=line[f"{metric}_se"], marker="o", ms=3, capsize=2, label=method, color=colors[method])
        ax.set_xscale("log")
        ax.set_xticks(sorted(sub.budget.unique()))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("budget (gradient evaluations)")
        label = {"rmse_or_error": "RMSE" if runs[runs.dataset == dataset].metric.iloc[0] == "rmse" else "test error (%)", "test_ll": "test log-likelihood"}.get(metric, metric)
        ax.set_ylabel(label)
        ax.set_title(dataset)
    fig.tight_layout()
    _legend(fig, axes)
    return fig


def plot_calibration(runs: pd.DataFrame, budget: Optional[int] = None):
    """One panel per data set at ``budget`` (default: the largest), averaged over seeds:
    regression, empirical coverage of central predictive intervals against the nominal
    level; classification, the reliability diagram (accuracy against confidence per bin)."""
    table = calibration_table(runs)
    datasets = list(dict.fromkeys(runs.dataset))
    colors = _colors(runs)
    fig, axes = _panels(len(datasets))
    for ax, dataset in zip(axes, datasets):
        sub = table[table.dataset == dataset] if len(table) else table
        if not len(sub):
            continue
        b = budget if budget is not None else int(sub.budget.max())
        sub = sub[sub.budget == b]
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
        for method in dict.fromkeys(sub.method):
            m = sub[sub.method == method]
            if "level" in m and m["level"].notna().any():
                curve = m.groupby("level").coverage.mean()
                ax.plot(curve.index, curve.values, marker="o", ms=3, label=method, color=colors[method])
                ax.set_xlabel("nominal level of the central interval")
                ax.set_ylabel("empirical coverage")
            else:
                # pool the bins over seeds: count-weighted confidence and accuracy
                m = m.dropna(subset=["confidence"])
                g = m.assign(wc=m.confidence * m["count"], wa=m.accuracy * m["count"]).groupby("bin")[["wc", "wa", "count"]].sum()
                g = g[g["count"] > 0]
                ax.plot(g.wc / g["count"], g.wa / g["count"], marker="o", ms=3, label=method, color=colors[method])
                ax.set_xlabel("confidence")
                ax.set_ylabel("accuracy")
        ax.set_title(f"{dataset} (budget {b})")
    fig.tight_layout()
    _legend(fig, axes)
    return fig
