"""Comparing inference methods under a matched compute budget: one row per run.

:func:`compare` runs every requested method (a registered (prior, guide, objective or
kernel) combination, :data:`COMBINATIONS`) on every requested data set, seed and budget,
and returns a ``DataFrame`` with one row per run. Data sets are UCI regression sets (the
standard splits of :class:`~pyrozoo.data.UCIDataset`, methods of
:mod:`zoo_protocols.uci`; the ``seed`` column is the split index) and ``"mnist"``
(a small fully connected network, methods of :mod:`zoo_protocols.mnist`; ``seed`` is
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

**Baselines.** Besides the zoo's registered methods, the harness runs the baselines a user
would pick instead (:mod:`zoo_protocols.baselines`: the Laplace approximation of laplace-torch,
the IVON optimizer, deep ensembles) on the same data, budget and metrics; one whose optional
package is missing is skipped with a message that says what to install.

**Out of distribution and under shift** (MNIST, ``ood=True``). After each MNIST run the
posterior it evaluated with (the record's ``outputs_at``: the same guide or samples) predicts
three more sets, all the size of the MNIST test set used:

* Fashion-MNIST's test images as out-of-distribution inputs: ``ood_auroc_entropy`` and
  ``ood_auroc_mi``, the AUROC of telling them from MNIST's test images by the predictive
  entropy and by the mutual information between label and weights
  (:func:`pyrozoo.metrics.ood_auroc` of :func:`~pyrozoo.inference.classification_uncertainty`);
* MNIST's test images rotated by each of ``rotation_angles`` (Ovadia et al. 2019,
  :func:`pyrozoo.data.rotate_images`): test error, ECE and test log-likelihood per angle in the
  ``shift`` column (JSON), their means over the angles in ``shift_error`` and ``shift_ece``.

**Gap splits** (UCI, ``"<data set>-gap"``). The data set's "gap" splits (Foong et al. 2019,
:func:`pyrozoo.data.gap_split`): the ``seed`` is the input feature whose middle third of
values is held out, so the metrics measure the predictive *in between* the training data.

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
from pyrozoo.data import ROTATION_ANGLES, UCIDataset, dataset_folder, gap_split, load_mnist, rotate_images
from pyrozoo.inference.prediction import record_predictive
from pyrozoo.inference.uncertainty_decomposition import classification_uncertainty
from pyrozoo.reporting import mean_and_stderr
from zoo_protocols import baselines, read_runs
from zoo_protocols.reference_matrix import HARNESS_COLUMNS, harness_reference_metrics
from zoo_protocols.paths import resolve_data_dir


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
    # the baselines (zoo_protocols.baselines), outside Pyro
    "laplace-ll-kfac": Combination("N(0, 1), precision tuned (marginal likelihood)", "Laplace, last layer, KFAC (laplace-torch)", "log joint (MAP), then curvature at the mode"),
    "laplace-ll-diag": Combination("N(0, 1), precision tuned (marginal likelihood)", "Laplace, last layer, diagonal (laplace-torch)", "log joint (MAP), then curvature at the mode"),
    "laplace-kfac": Combination("N(0, 1), precision tuned (marginal likelihood)", "Laplace, all weights, KFAC (laplace-torch)", "log joint (MAP), then curvature at the mode"),
    "laplace-diag": Combination("N(0, 1), precision tuned (marginal likelihood)", "Laplace, all weights, diagonal (laplace-torch)", "log joint (MAP), then curvature at the mode"),
    "ivon": Combination("N(0, 1) (weight decay 1/N)", "diagonal Gaussian (IVON)", "variational online Newton (IVON, ivon-opt)"),
    "ensemble": Combination("N(0, 1)", "5 point estimates (equal-weight mixture)", "log joint (MAP) per member"),
}

#: the issue's list, in table order (``bbb`` is available on request)
DEFAULT_METHODS = ["map", "mfvi-mc", "mfvi-cf", "mfvi", "iwae", "renyi", "esbo", "dsivi", "rdp", "sparse-vd", "sgld", "sghmc", "sgld-sa", "sghmc-sa"]

#: the baselines a user would pick instead (:mod:`zoo_protocols.baselines`), in table order
BASELINES = list(baselines.NAMES)

#: nominal levels of the central predictive intervals (regression calibration)
DEFAULT_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)

DEFAULT_BATCH_SIZE = {"uci": 32, "mnist": 128}

#: the columns of a per-run CSV before the out-of-distribution and shift metrics (read back on resume)
BASE_COLUMNS = [
    "dataset", "method", "seed", "budget", "steps", "epochs", "batch_size", "metric", "rmse_or_error", "test_ll",
    "calibration_error", "seconds", "prior", "guide", "objective", "calibration",
]

#: MNIST runs' out-of-distribution (Fashion-MNIST) and shift (rotated MNIST) metrics; blank for UCI runs
OOD_COLUMNS = ["ood_auroc_entropy", "ood_auroc_mi", "shift_error", "shift_ece", "shift"]

#: UCI runs' distance to the stored reference posterior of their data set (split 0 only:
#: :func:`zoo_protocols.reference_matrix.harness_reference_metrics`); blank elsewhere
REFERENCE_COLUMNS = list(HARNESS_COLUMNS)

COLUMNS = BASE_COLUMNS + OOD_COLUMNS + REFERENCE_COLUMNS

#: a UCI data set's gap splits (Foong et al. 2019) are asked for as ``"<name>-gap"``
GAP_SUFFIX = "-gap"

KEY = ["dataset", "method", "seed", "budget"]


def protocol(dataset) -> str:
    """``"mnist"``; ``"uci"`` for any other name (a bundled UCI set, a folder in the UCI layout
    by name or path, ``"<name>-gap"``; found or refused when loaded) and for a loaded
    :class:`~pyrozoo.data.UCIDataset` (e.g. a :class:`~pyrozoo.data.RegressionTable`);
    ``"classification"`` for a user's classification data (a :class:`~pyrozoo.data.ClassificationTable`
    or the :class:`~pyrozoo.data.ClassificationSplit` of image arrays), run by the MNIST
    protocol's methods without the MNIST-only out-of-distribution and shift metrics."""
    if not isinstance(dataset, str):
        return "uci" if isinstance(dataset, UCIDataset) else "classification"
    return "mnist" if dataset == "mnist" else "uci"


def registered_methods(protocol_name: str) -> dict:
    """The methods registered for a protocol now (importing every method module); the
    baselines (:data:`zoo_protocols.baselines.NAMES`) run in both protocols beside them."""
    if protocol_name == "uci":
        from zoo_protocols.uci import available_methods
    else:
        from zoo_protocols.mnist import available_methods
    return available_methods()


def runnable_methods(protocol_name: str) -> Dict[str, str]:
    """``{name: description}`` of every method the harness can run in a protocol: the
    registered ones and the baselines."""
    return {**{name: m.description for name, m in registered_methods(protocol_name).items()}, **baselines.DESCRIPTIONS}


def budget_epochs(budget: int, n: int, batch_size: int):
    """``(epochs, steps)`` of a run with ``budget`` gradient evaluations on ``n`` examples."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budgets are positive step counts, got {budget!r}")
    per_epoch = -(-n // min(batch_size, n))
    epochs = -(-budget // per_epoch)
    return epochs, epochs * per_epoch


def shift_and_ood_metrics(outputs_at: Callable[[torch.Tensor], torch.Tensor], x_test: torch.Tensor, y_test: torch.Tensor, x_ood: Optional[torch.Tensor], angles: Sequence[float], num_bins: int = 10) -> dict:
    """The out-of-distribution and shift metrics of one classifier's posterior (see the
    module docstring), from ``outputs_at: x -> (S, n, K)`` logits under its posterior draws.

    :returns: ``{"ood_auroc_entropy", "ood_auroc_mi"}`` (NaN without ``x_ood``), and for the
        rotated test sets ``"shift"`` (``{"angle", "error", "ece", "test_ll"}`` lists: error in
        percent, ECE with ``num_bins`` bins, mean log predictive probability of the label) with
        ``"shift_error"`` / ``"shift_ece"``, their means over the angles (NaN without angles).
    """
    out = {"ood_auroc_entropy": math.nan, "ood_auroc_mi": math.nan, "shift_error": math.nan, "shift_ece": math.nan, "shift": None}
    if x_ood is not None:
        inside, outside = classification_uncertainty(outputs_at(x_test), logits=True), classification_uncertainty(outputs_at(x_ood), logits=True)
        out["ood_auroc_entropy"] = metrics.ood_auroc(inside, outside, "entropy")
        out["ood_auroc_mi"] = metrics.ood_auroc(inside, outside, "mutual_information")
    if angles:
        curve = {"angle": [], "error": [], "ece": [], "test_ll": []}
        labels = y_test.cpu()
        for angle in angles:
            log_probs = outputs_at(rotate_images(x_test, float(angle))).double().log_softmax(-1)
            # the posterior predictive: the mean over the draws of the class probabilities
            log_mean = metrics.log_mean_exp(log_probs, 0).cpu()
            probs = log_mean.exp()
            curve["angle"].append(float(angle))
            curve["error"].append(100.0 * (1.0 - metrics.accuracy(probs, labels)))
            curve["ece"].append(metrics.expected_calibration_error(probs, labels, num_bins))
            curve["test_ll"].append(float(log_mean.gather(-1, labels[:, None]).mean()))
        out["shift"] = curve
        out["shift_error"] = sum(curve["error"]) / len(angles)
        out["shift_ece"] = sum(curve["ece"]) / len(angles)
    return out


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

    def __init__(self, data_dir, mnist_train_size, mnist_test_size, given=None):
        self.data_dir, self.sizes = data_dir, (mnist_train_size, mnist_test_size)
        self._uci, self._mnist, self._fashion = {}, None, None
        self.given = dict(given or {})  # loaded data sets (a user's), by name

    def uci_dataset(self, name):
        """The UCI data set ``name`` (a loaded one, or a folder read once), and whether its gap splits are meant."""
        if name in self.given:
            return self.given[name], False
        gap = name.endswith(GAP_SUFFIX)
        base = name[: -len(GAP_SUFFIX)] if gap else name
        if base not in self._uci:
            root = resolve_data_dir(self.data_dir)
            try:
                dataset_folder(base, root)
            except ValueError as e:
                raise ValueError(f"unknown dataset {name!r} (nor 'mnist'): {e}") from None
            self._uci[base] = UCIDataset(base, root)
        return self._uci[base], gap

    def uci_split(self, name, index):
        dataset, gap = self.uci_dataset(name)
        return gap_split(dataset, index) if gap else dataset.split(index)

    def classification(self, name, index):
        """Split ``index`` of a user's classification table, or image arrays' one split."""
        data = self.given[name]
        return data.split(index) if hasattr(data, "split") and callable(data.split) else data

    def fashion_test(self):
        """Fashion-MNIST's test images, as many as the MNIST test images used."""
        if self._fashion is None:
            x, _ = load_mnist("fashion", train=False, data_dir=resolve_data_dir(self.data_dir))
            self._fashion = x[: self.sizes[1]]
        return self._fashion

    def mnist(self):
        if self._mnist is None:
            from zoo_protocols.mnist import load_mnist_data

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
    ood: bool = True,
    rotation_angles: Sequence[float] = ROTATION_ANGLES,
    device: Union[str, torch.device] = "cpu",
    data_dir=None,
    out: Union[str, Path, None] = None,
    resume: bool = False,
    progress: bool = False,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Runs every (dataset, method, seed, budget) and returns one row per run (:data:`COLUMNS`).

    :param methods: registry names (:data:`COMBINATIONS`; others are run too when registered)
        and baselines (:data:`zoo_protocols.baselines.NAMES`). A method not registered for a data
        set's protocol, or a baseline whose package is missing, is skipped with a message.
    :param datasets: UCI data sets (bundled, or any folder in the UCI layout by name or path),
        ``"<name>-gap"`` for their gap splits, ``"mnist"``, and/or loaded data sets (a user's:
        see :func:`protocol`), known in the results by their ``name``.
    :param budgets: gradient evaluations per run (see the module docstring).
    :param seeds: UCI split indices (for gap splits: input feature indices; for a user's
        classification table its split indices too), or MNIST (and image arrays') training seeds.
    :param batch_size: minibatch size per protocol (default :data:`DEFAULT_BATCH_SIZE`; a
        user's classification data use the ``"mnist"`` size unless ``"classification"`` is given).
    :param num_samples: posterior draws for prediction (MAP uses one).
    :param extra: per-method ``config.extra`` (method settings, e.g. ``{"iwae": {"num_particles": 5}}``).
    :param ood: score MNIST runs on Fashion-MNIST (out of distribution) and on MNIST rotated by
        ``rotation_angles`` (degrees; ``()`` for none): the :data:`OOD_COLUMNS`.
    :param data_dir: the data root (default :func:`zoo_protocols.paths.default_data_dir`).
    :param out: CSV written after every run, so an interrupted comparison loses nothing;
        with ``resume`` the runs already in it are kept and not rerun.
    :param log: where progress lines and skip messages go.
    """
    from zoo_protocols.config import RunConfig
    from zoo_protocols.mnist import run_mnist
    from zoo_protocols.uci import run_split

    methods, datasets, budgets, seeds = list(methods), list(datasets), [int(b) for b in budgets], [int(s) for s in seeds]
    # a loaded data set (a user's table or image arrays) is known in the results by its name
    names = [d if isinstance(d, str) else d.name if hasattr(d, "name") else d.dataset for d in datasets]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"two data sets are named {twice[0]!r}: give them different names (e.g. a table's name=...)")
    given = {n: d for n, d in zip(names, datasets) if not isinstance(d, str)}
    datasets = names
    data = _Data(data_dir, mnist_train_size, mnist_test_size, given)
    for d in datasets:  # every data set found and read, and its splits checked, before the first run
        if protocol(given.get(d, d)) == "uci":
            data.uci_dataset(d)
        elif hasattr(given.get(d), "rows"):
            for s in seeds:
                given[d].rows(s)
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
        # (a file written before the out-of-distribution columns existed is read too: blank there)
        previous = read_runs(out, BASE_COLUMNS, required=KEY + ["steps", "rmse_or_error", "test_ll", "seconds"], numeric=["seed", "budget", "steps", "rmse_or_error", "test_ll", "seconds"])
        rows = previous.reindex(columns=list(dict.fromkeys(COLUMNS + list(previous.columns)))).to_dict("records")
    done = {(r["dataset"], r["method"], int(r["seed"]), int(r["budget"])) for r in rows}
    # a method may exist for one protocol only (skipped elsewhere, with a message), but a request
    # in which nothing can run is a mistake, not an empty table
    if not any(m in runnable_methods(protocol(given.get(d, d))) for m in methods for d in datasets):
        raise ValueError(f"none of the methods {list(methods)} is registered for the data sets {list(datasets)}")

    for dataset in datasets:
        proto = protocol(given.get(dataset, dataset))
        registry = runnable_methods(proto)
        runnable = []
        for m in methods:
            missing = baselines.missing_dependency(m)
            if missing:
                log(f"skipping {m!r} on {dataset}: it needs the optional package {missing}")
            elif m in registry:
                runnable.append(m)
            else:
                log(f"skipping {m!r} on {dataset}: no {proto.upper()} method of that name is registered (yet)")
        for seed in seeds:
            for budget in budgets:
                for method in runnable:
                    if (dataset, method, seed, budget) in done:
                        continue
                    combination = COMBINATIONS.get(method, Combination("", "", registry[method]))
                    bs = batch_size.get(proto, batch_size["mnist"])
                    pyro.clear_param_store()
                    if proto == "uci":
                        split = data.uci_split(dataset, seed)
                        epochs, steps = budget_epochs(budget, len(split.y_train), bs)
                        config = RunConfig(epochs=epochs, batch_size=bs, num_samples=num_samples, device=device, seed=0, progress=progress, extra=dict(extra.get(method, {})))
                        run = (lambda: baselines.run_uci(method, split, config)) if method in baselines.NAMES else (lambda: run_split(method, split, config))  # noqa: E731
                    else:
                        mnist = data.mnist() if proto == "mnist" else data.classification(dataset, seed)
                        epochs, steps = budget_epochs(budget, len(mnist.y_train), bs)
                        config = RunConfig(epochs=epochs, batch_size=bs, num_samples=num_samples, hidden=tuple(mnist_hidden), device=device, seed=seed, progress=progress, extra=dict(extra.get(method, {})))
                        run = (lambda: baselines.run_mnist(method, mnist, config)) if method in baselines.NAMES else (lambda: run_mnist(method, mnist, config))  # noqa: E731
                    t0 = time.perf_counter()
                    try:
                        with record_predictive() as records:
                            result = run()
                    except Exception as e:
                        raise RuntimeError(f"method {method!r} failed on {dataset} (seed {seed}, budget {budget}): {e}") from e
                    seconds = time.perf_counter() - t0
                    cal_error, curve = calibration_summary(records[-1], levels, num_bins) if records else (math.nan, None)
                    shifted = {}
                    if proto == "mnist" and ood and records and records[-1].outputs_at is not None:
                        x_test = mnist.x_test.to(device)
                        shifted = shift_and_ood_metrics(records[-1].outputs_at, x_test, mnist.y_test, data.fashion_test().to(device, x_test.dtype), rotation_angles, num_bins)
                    row = {
                        "dataset": dataset, "method": method, "seed": seed, "budget": budget, "steps": steps, "epochs": epochs, "batch_size": bs,
                        "metric": "rmse" if proto == "uci" else "error_percent",
                        "rmse_or_error": float(result["rmse"] if proto == "uci" else result["error"]),
                        "test_ll": float(result["test_ll"]), "calibration_error": float(cal_error), "seconds": seconds,
                        "prior": combination.prior, "guide": combination.guide, "objective": combination.objective,
                        "calibration": json.dumps(curve) if curve is not None else "",
                        **{c: float(shifted.get(c, math.nan)) for c in OOD_COLUMNS[:-1]},
                        "shift": json.dumps(shifted["shift"]) if shifted.get("shift") is not None else math.nan,
                        **(harness_reference_metrics(dataset, seed, records[-1], split.x_test.to(device, config.dtype)) if proto == "uci" and records else dict.fromkeys(REFERENCE_COLUMNS, math.nan)),
                    }
                    rows.append(row)
                    done.add((dataset, method, seed, budget))
                    ood_note = f"  OOD AUROC entropy {row['ood_auroc_entropy']:.3f} MI {row['ood_auroc_mi']:.3f}" if shifted else ""
                    log(f"{dataset:16s} {method:10s} seed {seed:2d} budget {budget:6d}  {row['metric']} {row['rmse_or_error']:.4g}  test_ll {row['test_ll']:.4g}{ood_note}  ({seconds:.1f} s)")
                    if out is not None:
                        atomic.write_csv(pd.DataFrame(rows, columns=COLUMNS), out)
    runs = pd.DataFrame(rows, columns=COLUMNS)
    wanted = runs.dataset.isin(datasets) & runs.method.isin(methods) & runs.seed.isin(seeds) & runs.budget.isin(budgets)
    return runs[wanted].reset_index(drop=True)


#: the numeric out-of-distribution and shift columns
OOD_METRICS = OOD_COLUMNS[:-1]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean ± standard error over seeds per (dataset, method, budget), with the pieces of each
    method; the out-of-distribution and shift metrics are blank for UCI data sets."""
    runs = runs.reindex(columns=list(dict.fromkeys([*runs.columns, *OOD_METRICS, *REFERENCE_COLUMNS])))
    table = mean_and_stderr(runs, ["dataset", "method", "budget"], ["rmse_or_error", "test_ll", "calibration_error", *OOD_METRICS, *REFERENCE_COLUMNS, "seconds"])
    pieces = runs.drop_duplicates(["dataset", "method"]).set_index(["dataset", "method"])[["metric", "prior", "guide", "objective"]]
    table = table.join(pieces, on=["dataset", "method"])
    ood = [c for m in [*OOD_METRICS, *REFERENCE_COLUMNS] for c in (m, f"{m}_se")]
    return table[["dataset", "method", "budget", "metric", "rmse_or_error", "rmse_or_error_se", "test_ll", "test_ll_se", "calibration_error", "calibration_error_se", *ood, "seconds", "n", "prior", "guide", "objective"]]


def shift_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The ``shift`` column unpacked: one row per (run, rotation angle) with ``error`` (percent),
    ``ece`` and ``test_ll`` (MNIST runs scored under shift only)."""
    out = []
    for r in runs.itertuples(index=False):
        curve = getattr(r, "shift", None)
        if not isinstance(curve, str) or not curve:
            continue
        curve = json.loads(curve)
        base = {"dataset": r.dataset, "method": r.method, "seed": r.seed, "budget": r.budget}
        out.extend({**base, "angle": a, "error": e, "ece": c, "test_ll": ll} for a, e, c, ll in zip(curve["angle"], curve["error"], curve["ece"], curve["test_ll"]))
    return pd.DataFrame(out, columns=["dataset", "method", "seed", "budget", "angle", "error", "ece", "test_ll"])


def gap_comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """Per UCI data set run both ways, method and budget: the test log-likelihood and RMSE on
    its standard splits and on its gap splits (mean over seeds), and the drop in test
    log-likelihood from the first to the second (Foong et al. 2019: large for a predictive
    that is over-confident in between the data)."""
    gap = runs[runs.dataset.str.endswith(GAP_SUFFIX)]
    if not len(gap):
        return pd.DataFrame(columns=["dataset", "method", "budget", "rmse", "rmse_gap", "test_ll", "test_ll_gap", "test_ll_drop"])
    means = runs.groupby(["dataset", "method", "budget"], sort=False)[["rmse_or_error", "test_ll"]].mean().reset_index()
    standard = means[~means.dataset.str.endswith(GAP_SUFFIX)]
    gapped = means[means.dataset.str.endswith(GAP_SUFFIX)].assign(dataset=lambda d: d.dataset.str[: -len(GAP_SUFFIX)])
    table = standard.merge(gapped, on=["dataset", "method", "budget"], suffixes=("", "_gap"))
    table = table.rename(columns={"rmse_or_error": "rmse", "rmse_or_error_gap": "rmse_gap"})
    table["test_ll_drop"] = table.test_ll - table.test_ll_gap
    return table[["dataset", "method", "budget", "rmse", "rmse_gap", "test_ll", "test_ll_gap", "test_ll_drop"]]


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
    order = dict.fromkeys([*DEFAULT_METHODS, *BASELINES, *COMBINATIONS, *runs.method])
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


def plot_shift(runs: pd.DataFrame, budget: Optional[int] = None):
    """Rotated MNIST at ``budget`` (default: the largest): test error and ECE against the angle,
    one line per method, averaged over seeds (Ovadia et al. 2019, Figure 1)."""
    table = shift_table(runs)
    colors = _colors(runs)
    fig, axes = _panels(2)
    if not len(table):
        return fig
    b = budget if budget is not None else int(table.budget.max())
    table = table[table.budget == b]
    for ax, metric, label in zip(axes, ("error", "ece"), ("test error (%)", "expected calibration error")):
        for method in dict.fromkeys(table.method):
            curve = table[table.method == method].groupby("angle")[metric].mean()
            ax.plot(curve.index, curve.values, marker="o", ms=3, label=method, color=colors[method])
        ax.set_xlabel("rotation (degrees)")
        ax.set_ylabel(label)
        ax.set_title(f"rotated MNIST (budget {b})")
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
