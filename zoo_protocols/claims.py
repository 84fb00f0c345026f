"""The claims ledger (issue 23): the headline claims of the five source works, declared as
data, each with how to read *our* number from a committed results file and the rule that
compares it with the paper's.

A claim (:class:`Claim`) names its source (paper, table or figure), says what the paper
claims in words, quotes the paper's value (labelled as the paper's), and lists one or more
:class:`Part` s. A part reads a :class:`Measurement` from ``docs/results`` (a
:class:`Column` of the rows a selector picks, or a small named :class:`Computed` reader) and
judges it with a rule:

* :class:`Near` -- within a tolerance of the paper's value (absolute or relative; "lower" is
  better for errors: doing better than the paper holds);
* :class:`Agrees` -- the same, the tolerance being two standard errors of the difference
  (the paper's ± and ours combined);
* :class:`Better` -- an ordering, ours above (or below) another measurement or a constant
  (0 for paired differences): it holds when the 95 % intervals do not overlap, holds "in
  direction only" when the order is right but the intervals overlap or a side has one run;
* :class:`Close` -- two of our measurements agree within a relative tolerance;
* :class:`Threshold` -- a qualitative property as a bound (e.g. a gap of at least 2 nats);
* :class:`SingleDataSet` -- a paper figure from one simulated data set against our spread
  over many data sets (Deng et al.'s Table 1).

The verdict is computed, never declared (:func:`evaluate`): every part holds -> reproduced;
none holds -> not reproduced; anything between (a part in direction only included) ->
partly. A claim whose setting is only a ``proxy`` of the paper's (another data set, network,
attack or reading of the method: :data:`SETTINGS`) is at best "partly". A claim with no part (no committed result can test it) is "not
testable here", with the reason it declares. Means over several rows (seeds, splits, data
sets) come with their standard error and a 95 % Student-t interval; the reason of each verdict
is written from the numbers (``ours 1.76 % (one run) vs paper 1.36 %: 0.4 pts worse,
outside tolerance 0.23 pts``).

A results file or column a claim names that is missing is an error naming the claim
(:class:`LedgerError`), so a renamed file cannot silently drop a claim.
``tools/claims_ledger.py`` writes the ledger to ``docs/results/claims.{csv,md}``.
"""

import io
import json
import math
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd

from pyrozoo import atomic
from pyrozoo.compression.radial_directional import widest_gap
from zoo_protocols.cli import DEFAULT_RESULTS_DIR
from zoo_protocols.intervals import mean_se, t_quantile_975

#: the five source works, in the ledger's order: key -> how the ledger names it
WORKS = {
    "deng": "Deng et al. 2019, adaptive empirical Bayes SG-MCMC-SA",
    "oh": "Oh et al. 2020, radial-directional posteriors (RDP)",
    "molchanov": "Molchanov 2022 (thesis): sparse variational dropout, variance networks, DSIVI",
    "sagar": "Sagar 2020, \"BNN via SGD\" (results withdrawn by its author)",
    "toronto": "Toronto VI-for-BNNs deck: VAE, Graves/MDL, Blundell et al., Kingma et al., Louizos et al.",
}
VERDICTS = ("reproduced", "partly", "not reproduced", "not testable here")
#: how a claim's measured setting relates to the paper's: its protocol, its protocol cut down
#: (fewer epochs, iterations or seeds), a general claim (a theorem, a property of a method)
#: tested on a problem of our own, or a proxy (another data set, network, attack or reading of
#: the method) for a claim about the paper's own problem, which can at best be "partly"
SETTINGS = ("paper", "reduced", "general", "proxy")
#: the columns of ``claims.csv``, in order
COLUMNS = ["work", "id", "source", "claim", "paper_value", "our_value", "interval", "verdict", "evidence", "tolerance", "setting", "diagnosis", "files"]
#: MNIST's and Fashion-MNIST's test sets
TEST_IMAGES = 10_000
PASS, WEAK, FAIL = "holds", "in direction only", "fails"


class LedgerError(ValueError):
    """A claim's results file, column or row is missing or unreadable; the message names the claim."""


def default_results_dir() -> Path:
    """``docs/results`` of the checkout holding :mod:`zoo_protocols` (the committed results)."""
    return Path(__file__).resolve().parents[1] / DEFAULT_RESULTS_DIR


# -- numbers and intervals ----------------------------------------------------------------------

def binomial_tolerance(percent: float, n: int = TEST_IMAGES) -> float:
    """Two binomial standard errors, in percentage points, of a rate of ``percent`` % measured
    on ``n`` test images (rounded to 0.01): how far one run's test error may lie from a
    published one by the test set's sampling alone."""
    p = percent / 100.0
    return round(200.0 * math.sqrt(p * (1.0 - p) / n), 2)


def _num(x: float, digits: int = 4) -> str:
    """A number as the ledger prints it: ``digits`` significant digits (at most 3 in exponent
    form, beyond 1e5 or below 1e-3)."""
    if x != x:
        return "nan"
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.{min(digits, 3)}g}"
    return f"{x:.{digits}g}"


def _with_unit(text: str, unit: str) -> str:
    if not unit:
        return text
    return f"×{text}" if unit == "×" else f"{text} {unit}"


@dataclass(frozen=True)
class Measurement:
    """One of our numbers: a mean, its standard error and what ``n`` counts (seeds, splits,
    data sets, paired splits; ``n`` None: many, e.g. test points, so a normal quantile).

    ``values`` are the individual runs when the reader saw them; ``failures`` counts runs that
    failed in a way the paper does not report (Deng et al.'s spike-only chains)."""

    mean: float
    se: float = math.nan
    n: Optional[int] = 1
    over: str = "runs"
    unit: str = ""
    values: Tuple[float, ...] = ()
    note: str = ""
    failures: Optional[int] = None
    failure_name: str = ""

    def interval(self) -> Optional[Tuple[float, float]]:
        """The 95 % t-interval of the mean (``None`` for a single run or an unknown s.e.)."""
        if not self.se == self.se or (self.n is not None and self.n < 2):
            return None
        q = t_quantile_975(None if self.n is None else self.n - 1)
        return self.mean - q * self.se, self.mean + q * self.se

    def describe(self) -> str:
        # a standard error is itself uncertain: two significant digits say all it knows
        text = _num(self.mean) + (f" ± {_num(self.se, 2)}" if self.se == self.se else "")
        text = _with_unit(text, self.unit)
        if self.n is None:
            text += f" (s.e. over {self.over})"
        elif self.n == 1:
            text += " (one run)"
        else:
            text += f" (n={self.n} {self.over})"
        return text + (f"; {self.note}" if self.note else "")

    def interval_text(self) -> str:
        iv = self.interval()
        if iv is None:
            return "none (one run)" if self.n == 1 else "none"
        return f"[{_num(iv[0])}, {_num(iv[1])}]"


def measurement_of(values: Sequence[float], **kwargs) -> Measurement:
    """Mean, standard error (ddof 1) and n of ``values`` (runs)."""
    values = tuple(float(v) for v in values)
    if not values:
        raise LedgerError("no values to summarise")
    mean, se, n = mean_se(values)
    return Measurement(mean=mean, se=se, n=n, values=values, **kwargs)


# -- readers ----------------------------------------------------------------------------------

def _read_csv(path: Path) -> pd.DataFrame:
    """Every results table the ledger reads goes through here (the tests watch it)."""
    return pd.read_csv(path)


def _read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def _select(df: pd.DataFrame, where: Mapping, file: str) -> pd.DataFrame:
    """The rows of ``df`` whose columns equal ``where``'s values (numbers compared as numbers);
    rows with a run status other than ok are left out, as :mod:`pyrozoo.reporting` does."""
    mask = pd.Series(True, index=df.index)
    for column, value in where.items():
        if column not in df.columns:
            raise LedgerError(f"{file} has no column {column!r} to select rows by (it has {list(df.columns)})")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            mask &= np.isclose(pd.to_numeric(df[column], errors="coerce"), value, rtol=1e-9, atol=0.0)
        else:
            mask &= df[column].astype(str) == str(value)
    rows = df[mask]
    if "status" in rows.columns:
        status = rows["status"].fillna("ok").astype(str).replace("", "ok")
        rows = rows[status == "ok"]
    if rows.empty:
        raise LedgerError(f"no row of {file} matches {dict(where)}")
    return rows


def _numbers(rows: pd.DataFrame, column: str, file: str) -> np.ndarray:
    if column not in rows.columns:
        raise LedgerError(f"{file} has no column {column!r} (it has {list(rows.columns)})")
    values = pd.to_numeric(rows[column], errors="coerce").to_numpy(dtype=float)
    if np.isnan(values).any():
        raise LedgerError(f"{file}: column {column!r} holds a value that is not a number in the selected rows")
    return values


@dataclass(frozen=True)
class Column:
    """Our value read from ``column`` of the rows of ``file`` (under the results folder) that
    match ``where``. Several rows are runs: their mean, standard error and t-interval. One row
    is one run, unless the file gives its own standard error (``se``, a column) over ``n``
    (a column, a number, or None for "many", e.g. test points)."""

    file: str
    column: str
    where: Mapping = field(default_factory=dict)
    se: Optional[str] = None
    n: Union[str, int, None] = 1
    over: str = "seeds"
    unit: str = ""
    scale: float = 1.0

    @property
    def files(self) -> Tuple[str, ...]:
        return (self.file,)

    def read(self, results_dir: Path) -> Measurement:
        rows = _select(_read_csv(Path(results_dir) / self.file), self.where, self.file)
        values = _numbers(rows, self.column, self.file) * self.scale
        if len(values) > 1 or self.se is None:
            return measurement_of(values, over=self.over, unit=self.unit)
        se = float(_numbers(rows, self.se, self.file)[0]) * self.scale
        n = int(_numbers(rows, self.n, self.file)[0]) if isinstance(self.n, str) else self.n
        return Measurement(mean=float(values[0]), se=se, n=n, over=self.over, unit=self.unit, values=tuple(values))


@dataclass(frozen=True)
class Computed:
    """Our value computed by a small named function of the results folder (``fn``) from
    ``files``; ``name`` says what it computes."""

    name: str
    files: Tuple[str, ...]
    fn: Callable[[Path], Measurement]

    def read(self, results_dir: Optional[Path]) -> Measurement:
        return self.fn(None if results_dir is None else Path(results_dir))


Reader = Union[Column, Computed]


def paired_difference(file: str, metric: str, a: str, b: str, *, key: str = "method", on: str = "seed", where: Optional[Mapping] = None,
                      over: str = "paired seeds", unit: str = "") -> Computed:
    """``metric`` of ``a`` minus that of ``b`` (values of ``key``), run by run: the rows of ``a``
    and ``b`` that share ``on`` (the same seed, data set or split), among those matching ``where``."""
    where = dict(where or {})

    def fn(results_dir):
        df = _read_csv(results_dir / file)
        left = _select(df, {**where, key: a}, file)
        right = _select(df, {**where, key: b}, file)
        both = left[[on, metric]].merge(right[[on, metric]], on=on, suffixes=("_a", "_b"))
        if both.empty:
            raise LedgerError(f"{file}: no {on} has both {key} {a!r} and {b!r}")
        diff = _numbers(both, f"{metric}_a", file) - _numbers(both, f"{metric}_b", file)
        return measurement_of(diff, over=over, unit=unit)

    return Computed(f"{metric}[{a}] - {metric}[{b}] by {on} in {file}", (file,), fn)


def sparse_regression(stem: str, method: str, v0: float, sigma: float, metric: str) -> Computed:
    """Deng et al.'s Table 1 cell (``method``, ``v0``, initial ``sigma``) in the sparse-regression
    results ``<stem>.csv``: ``metric`` per data set (one per seed), with the median, and the
    count of spike-only chains from ``<stem>_table.csv`` when the table has them; when the
    trajectories file records every chain, also the median over the chains that kept a slab."""
    where = {"method": method, "v0": v0, "sigma": sigma}
    files = (f"{stem}.csv", f"{stem}_table.csv")

    def fn(results_dir):
        rows = _select(_read_csv(results_dir / files[0]), where, files[0])
        table = _select(_read_csv(results_dir / files[1]), where, files[1])
        values = _numbers(rows, metric, files[0])
        failures = None
        if "spike_only_runs" in table.columns and table["spike_only_runs"].notna().all():
            failures = int(_numbers(table, "spike_only_runs", files[1])[0])
        note = f"median {_num(float(np.median(values)))}"
        if failures is not None:
            note += f", {failures} of {len(values)} chains spike-only"
        trajectories = results_dir / f"{stem}_trajectories.csv"
        if failures and trajectories.exists():
            from zoo_protocols.sparse_regression import NUM_PREDICTORS, SPIKE_ONLY_SLAB_COUNT

            paths = _select(_read_csv(trajectories), where, trajectories.name)
            last = paths.sort_values("step").groupby("seed").tail(1).set_index("seed")
            if set(last.index) >= set(rows["seed"]):
                slab = last.loc[rows["seed"], "rho_mean"].to_numpy() * NUM_PREDICTORS >= SPIKE_ONLY_SLAB_COUNT
                if int((~slab).sum()) == failures and slab.any():
                    note += f"; median of the {int(slab.sum())} chains that kept a slab {_num(float(np.median(values[slab])))}"
        return measurement_of(values, over="data sets", note=note, failures=failures, failure_name="spike-only chains")

    return Computed(f"{metric} of {method} (v0 {v0}, sigma {sigma}) per data set in {files[0]}", files, fn)


def uci_best_other(file: str, dataset: str, method: str, metric: str = "rmse") -> Computed:
    """``method``'s ``metric`` minus that of the best other method on ``dataset`` (lowest mean),
    split by split; the note gives ``method``'s rank by mean."""

    def fn(results_dir):
        rows = _select(_read_csv(results_dir / file), {"dataset": dataset}, file)
        means = rows.groupby("method")[metric].mean().sort_values()
        if method not in means.index:
            raise LedgerError(f"{file} has no {method!r} runs on {dataset}")
        others = means.drop(method)
        best = others.index[0]
        rank = int((means < means[method]).sum()) + 1
        diff = paired_difference(file, metric, method, best, on="split", where={"dataset": dataset}).read(results_dir)
        note = f"{method} ranks {rank} of {len(means)} by mean {metric.upper()}; best other: {best} {_num(float(others.iloc[0]))}"
        return Measurement(mean=diff.mean, se=diff.se, n=diff.n, over="paired splits", values=diff.values, note=note)

    return Computed(f"{metric}[{method}] - {metric}[best other method] on {dataset} in {file}", (file,), fn)


def pruning_increase(file: str, fraction_kept: float) -> Computed:
    """Relative increase (%) of the test error when pruning keeps the fraction of weights
    nearest ``fraction_kept``, against the unpruned network (threshold 0)."""

    def fn(results_dir):
        df = _read_csv(results_dir / file)
        full = _select(df, {"threshold": 0.0}, file)
        fractions = _numbers(df, "fraction_kept", file)
        row = df.iloc[[int(np.argmin(np.abs(fractions - fraction_kept)))]]
        e0, e1 = float(_numbers(full, "test_error", file)[0]), float(_numbers(row, "test_error", file)[0])
        kept = float(_numbers(row, "fraction_kept", file)[0])
        note = f"at {100 * kept:.1f} % of the weights kept: {_num(e1)} % vs {_num(e0)} % unpruned"
        return Measurement(mean=100.0 * (e1 - e0) / e0, unit="% relative", note=note)

    return Computed(f"relative error increase at {fraction_kept:.1%} of weights kept in {file}", (file,), fn)


def _draws_behind(md_path: Path) -> int:
    match = re.search(r"variance over (\d+) minibatch estimates", md_path.read_text())
    if not match:
        raise LedgerError(f"{md_path.name} does not say over how many minibatch estimates its variances are")
    return int(match.group(1))


def gradient_variance(estimator: str, cell: str) -> Computed:
    """A cell of the local-reparameterization variance table (``cell``: e.g. ``"top layer, epoch
    10"``) for ``estimator``, with the standard error the table gives beside it (``<cell>, s.e.``:
    over the m repeats, m read from the table's notes). Not a chi-square error from m: the
    per-minibatch estimator's entries share one weight sample, and its variance estimate varied
    several-fold between minibatch seeds where the chi-square error said 10 %."""
    file = "local_reparam_variance.csv"

    def fn(results_dir):
        rows = _select(_read_csv(results_dir / file), {"estimator": estimator, "source": "measured (this repository)"}, file)
        value, se = float(_numbers(rows, cell, file)[0]), float(_numbers(rows, f"{cell}, s.e.", file)[0])
        m = _draws_behind(results_dir / "local_reparam_variance.md")
        return Measurement(mean=value, se=se, n=m, over="minibatch estimates")

    return Computed(f"{cell} variance of {estimator} in {file}", (file, "local_reparam_variance.md"), fn)


def estimator_speedup(slow: str, fast: str) -> Computed:
    """Seconds per gradient estimate of ``slow`` over ``fast`` in the variance table."""
    file = "local_reparam_variance.csv"

    def fn(results_dir):
        df = _read_csv(results_dir / file)
        seconds = {e: float(_numbers(_select(df, {"estimator": e, "source": "measured (this repository)"}, file), "seconds per estimate", file)[0]) for e in (slow, fast)}
        return Measurement(mean=seconds[slow] / seconds[fast], unit="×", note=f"{_num(seconds[slow])} s vs {_num(seconds[fast])} s per estimate")

    return Computed(f"seconds per estimate, {slow} over {fast}, in {file}", (file,), fn)


def published_ratio(estimator: str, cell: str) -> Computed:
    """Our variance in ``cell`` over the paper's (the table's published row): context only, as
    the table's notes say its absolute values are not comparable."""
    file = "local_reparam_variance.csv"

    def fn(results_dir):
        df = _read_csv(results_dir / file)
        ours = float(_numbers(_select(df, {"estimator": estimator, "source": "measured (this repository)"}, file), cell, file)[0])
        paper = float(_numbers(_select(df, {"estimator": f"{estimator} (published)"}, file), cell, file)[0])
        return Measurement(mean=ours / paper, unit="×", note=f"ours {_num(ours)}, paper {_num(paper)}")

    return Computed(f"{cell}, ours over the paper's, in {file}", (file,), fn)


def radius_gap(file: str, grouping: str) -> Computed:
    """How clearly RDP's pruning statistic (log mode of each unit's radius posterior) falls into
    two clusters in ``grouping``: the widest gap, in nats, between consecutive values (Fig. 7's
    separation), wherever the run's own threshold lies; one value has no gap (0)."""

    def fn(results_dir):
        stats = _read_json(results_dir / file)
        try:
            group = stats["groupings"][grouping]
            values, threshold = np.asarray(group["values"], dtype=float), float(group["threshold"])
        except (KeyError, TypeError) as e:
            raise LedgerError(f"{file} has no grouping {grouping!r} with values and a threshold ({e!r})") from None
        gap = widest_gap(values)
        if gap is None:
            return Measurement(mean=0.0, unit="nats", note=f"{values.size} unit(s), no gap; {int((values > threshold).sum())} kept")
        low, high = gap
        return Measurement(mean=high - low, unit="nats",
                           note=f"{int((values >= high).sum())} of {values.size} above it; the run kept {int((values > threshold).sum())}")

    return Computed(f"widest gap of the radius statistic of {grouping} in {file}", (file,), fn)


# -- rules ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    status: str  # PASS, WEAK or FAIL
    text: str


def _diff_unit(unit: str) -> str:
    return {"%": "pts", "×": ""}.get(unit, unit)


@dataclass(frozen=True)
class Near:
    """Ours within ``tol`` of the paper's value. ``better``: "lower" (errors: doing better than
    the paper holds), "higher", or "both" (either side counts). ``relative``: ``tol`` is a
    fraction of the paper's value (ours at most ``1 + tol`` times it when lower is better, at
    least ``1 - tol`` times when higher is)."""

    paper: float
    tol: float
    better: str = "both"
    relative: bool = False

    def allowed(self, ours: Measurement) -> float:
        return self.tol * abs(self.paper) if self.relative else self.tol

    def paper_text(self, ours: Measurement) -> str:
        return _with_unit(_num(self.paper), ours.unit)

    def tolerance_text(self, ours: Measurement) -> str:
        if self.relative:
            return {"lower": f"at most {_num(1 + self.tol)} times", "higher": f"at least {_num(1 - self.tol)} times",
                    "both": f"{_num(1 - self.tol)} to {_num(1 + self.tol)} times"}[self.better]
        return _with_unit(_num(self.allowed(ours)), _diff_unit(ours.unit))

    def readers(self) -> Tuple[Reader, ...]:
        return ()

    def judge(self, ours: Measurement, results_dir: Path) -> Outcome:
        if self.better not in ("lower", "higher", "both"):
            raise ValueError(f"better must be 'lower', 'higher' or 'both', got {self.better!r}")
        diff = ours.mean - self.paper
        worse = {"lower": diff, "higher": -diff, "both": abs(diff)}[self.better]
        head = f"ours {ours.describe()} vs paper {self.paper_text(ours)}"
        if self.relative:
            size = f"{_num(ours.mean / self.paper)} times the paper's"
        else:
            side = ("better" if worse < 0 else "worse") if self.better != "both" else ("above" if diff > 0 else "below")
            size = f"{_with_unit(_num(abs(diff)), _diff_unit(ours.unit))} {side}"
        if self.better != "both" and worse < 0:
            return Outcome(PASS, f"{head}: {size}{', better' if self.relative else ''}")
        ok = worse <= self.allowed(ours) * (1 + 1e-12)
        return Outcome(PASS if ok else FAIL, f"{head}: {size}, {'within' if ok else 'outside'} tolerance {self.tolerance_text(ours)}")


@dataclass(frozen=True)
class Agrees(Near):
    """:class:`Near` with the tolerance two standard errors of the difference: the paper's
    printed ± (``paper_se``, a standard error) and ours combined."""

    paper_se: float = 0.0
    tol: float = 0.0

    def allowed(self, ours: Measurement) -> float:
        se = ours.se if ours.se == ours.se else 0.0
        return 2.0 * math.sqrt(self.paper_se**2 + se**2)

    def paper_text(self, ours: Measurement) -> str:
        return _with_unit(f"{_num(self.paper)} ± {_num(self.paper_se)}", ours.unit)

    def tolerance_text(self, ours: Measurement) -> str:
        return f"{_with_unit(_num(self.allowed(ours)), _diff_unit(ours.unit))} (two standard errors of the difference)"


@dataclass(frozen=True)
class Better:
    """Ours above (``better="higher"``) or below (``"lower"``) ``other``: a reader, or a constant
    (0 for a paired difference). Holds when the 95 % intervals do not overlap (a constant: our
    interval excludes it); in direction only when the order is right but the intervals overlap
    or a side is one run; fails when the order is reversed or tied."""

    other: Union[Column, Computed, float]
    better: str = "higher"
    other_label: str = ""

    def readers(self) -> Tuple[Reader, ...]:
        return () if isinstance(self.other, (int, float)) else (self.other,)

    def judge(self, ours: Measurement, results_dir: Path) -> Outcome:
        if self.better not in ("lower", "higher"):
            raise ValueError(f"better must be 'lower' or 'higher', got {self.better!r}")
        constant = isinstance(self.other, (int, float))
        other = Measurement(mean=float(self.other), se=0.0, n=None) if constant else self.other.read(results_dir)
        label = self.other_label or ("0" if constant else "the other")
        head = f"ours {ours.describe()} vs {label}" + ("" if constant else f" {other.describe()}")
        sign = 1.0 if self.better == "higher" else -1.0
        right = "right sign" if constant else "right order"
        if sign * (ours.mean - other.mean) <= 0:
            if constant:
                return Outcome(FAIL, f"{head}: {'exactly 0' if ours.mean == other.mean else 'the wrong sign'}")
            return Outcome(FAIL, f"{head}: the order is {'tied' if ours.mean == other.mean else 'reversed'}")
        a = ours.interval()
        b = (other.mean, other.mean) if constant else other.interval()
        if a is None or b is None:
            return Outcome(WEAK, f"{head}: {right}, but no interval (one run)")
        separated = a[0] > b[1] if self.better == "higher" else a[1] < b[0]
        if constant:
            what = f"our 95 % interval {ours.interval_text()} {'excludes' if separated else 'includes'} {_num(other.mean)}"
        else:
            what = f"95 % intervals {ours.interval_text()} and {other.interval_text()} {'do not overlap' if separated else 'overlap'}"
        return Outcome(PASS if separated else WEAK, f"{head}: {right}, {what}")


@dataclass(frozen=True)
class Close:
    """Ours within ``rel_tol`` (a fraction) of another of our measurements, ``other``."""

    other: Union[Column, Computed]
    rel_tol: float
    other_label: str = ""

    def readers(self) -> Tuple[Reader, ...]:
        return (self.other,)

    def judge(self, ours: Measurement, results_dir: Path) -> Outcome:
        other = self.other.read(results_dir)
        gap = abs(ours.mean - other.mean) / abs(other.mean)
        ok = gap <= self.rel_tol
        return Outcome(PASS if ok else FAIL, f"ours {ours.describe()} vs {self.other_label or 'the other'} {other.describe()}: "
                                             f"{100 * gap:.1f} % apart, {'within' if ok else 'outside'} {100 * self.rel_tol:g} %")


@dataclass(frozen=True)
class Threshold:
    """A qualitative property as a bound: ours at least (``better="higher"``) or at most
    (``"lower"``) ``bound``; ``meaning`` says what the bound stands for."""

    bound: float
    better: str = "higher"
    meaning: str = ""

    def readers(self) -> Tuple[Reader, ...]:
        return ()

    def judge(self, ours: Measurement, results_dir: Path) -> Outcome:
        ok = ours.mean >= self.bound if self.better == "higher" else ours.mean <= self.bound
        side = ("at least" if ok else "below") if self.better == "higher" else ("at most" if ok else "above")
        return Outcome(PASS if ok else FAIL, f"ours {ours.describe()}: {side} {_with_unit(_num(self.bound), ours.unit)}" + (f" ({self.meaning})" if self.meaning else ""))


@dataclass(frozen=True)
class SingleDataSet:
    """A paper value measured on one simulated data set, against our values over many data
    sets: it holds when at least a quarter of ours are as good as the paper's (the paper's
    value at or beyond our quartile on the worse side: a typical data set), in direction only
    when it lies within our 5-95 % range, and fails beyond it. Runs that failed in a way the
    paper does not report (``failures``) cap it at "in direction only"."""

    paper: float
    better: str = "lower"

    def readers(self) -> Tuple[Reader, ...]:
        return ()

    def judge(self, ours: Measurement, results_dir: Path) -> Outcome:
        if len(ours.values) < 5:
            raise LedgerError(f"a single-data-set comparison needs our values on at least 5 data sets, got {len(ours.values)}")
        q05, q25, q75, q95 = np.percentile(ours.values, [5, 25, 75, 95])
        worse_quartile, worse_tail = (q25, q05) if self.better == "lower" else (q75, q95)
        beyond = (lambda x, q: x >= q) if self.better == "lower" else (lambda x, q: x <= q)
        head = (f"ours {ours.describe()} (quartiles [{_num(q25)}, {_num(q75)}], 5-95 % range [{_num(q05)}, {_num(q95)}]) "
                f"vs paper {_num(self.paper)} (one data set)")
        if beyond(self.paper, worse_quartile):
            status, where = PASS, "at least a quarter of our data sets do as well"
        elif beyond(self.paper, worse_tail):
            status, where = WEAK, "within our 5-95 % range, but fewer than a quarter of our data sets do as well"
        else:
            status, where = FAIL, "beyond our 5-95 % range"
        if ours.failures:
            where += f"; {ours.failures} of {len(ours.values)} {ours.failure_name or 'runs failed'}, which the paper does not show"
            status = WEAK if status == PASS else status
        return Outcome(status, f"{head}: {where}")


Rule = Union[Near, Agrees, Better, Close, Threshold, SingleDataSet]


# -- claims -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Part:
    """One comparison of a claim: ``label`` says what is compared, ``ours`` reads our number,
    ``rule`` judges it."""

    label: str
    ours: Reader
    rule: Rule


@dataclass(frozen=True)
class Claim:
    """A headline claim of a source work (:data:`WORKS`). ``paper_value`` quotes the paper
    (labelled as the paper's). ``parts`` hold the comparisons; a claim without parts is not
    testable here, for the reason ``untestable`` gives. ``setting`` (:data:`SETTINGS`): "paper",
    "reduced", "general" or "proxy" (at best "partly"); ``setting_note`` says how ours differs.
    ``tolerance`` states the tolerances and why. ``context`` readers are reported, not judged.
    ``controlled``: the controlled experiments (issue 23, item 2) that decided bug or budget for a
    claim we do not reproduce: their Markdown results files, whose ``Verdict:`` line the ledger
    quotes; ``reason``: why the claim misses where no experiment was run (or what it left open)."""

    id: str
    work: str
    source: str
    claim: str
    paper_value: str
    parts: Tuple[Part, ...] = ()
    tolerance: str = ""
    setting: str = "paper"
    setting_note: str = ""
    context: Tuple[Tuple[str, Reader], ...] = ()
    untestable: str = ""
    controlled: Tuple[str, ...] = ()
    reason: str = ""

    def __post_init__(self):
        if self.work not in WORKS:
            raise ValueError(f"claim {self.id}: unknown work {self.work!r} (one of {list(WORKS)})")
        if self.setting not in SETTINGS:
            raise ValueError(f"claim {self.id}: setting must be one of {SETTINGS}, got {self.setting!r}")
        if not self.parts and not self.untestable:
            raise ValueError(f"claim {self.id}: a claim without parts must say why it is not testable here")

    @property
    def files(self) -> Tuple[str, ...]:
        readers = [p.ours for p in self.parts] + [r for p in self.parts for r in p.rule.readers()] + [r for _, r in self.context]
        return tuple(dict.fromkeys([f for r in readers for f in r.files] + list(self.controlled)))


#: the least of a controlled experiment's verdict the ledger quotes
VERDICT_CHARS = 120


def controlled_verdict(path: Path) -> str:
    """The ``Verdict:`` line of a controlled experiment's Markdown file, cut after the first
    sentence that brings it past :data:`VERDICT_CHARS` characters (a verdict's headline alone,
    e.g. "NOT A BUG.", does not say what was found)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith("Verdict:"):
            text = line[len("Verdict:"):].strip()
            end = text.find(". ", VERDICT_CHARS)
            return text if end < 0 else text[: end + 1]
    raise LedgerError(f"{path} has no 'Verdict:' line: a controlled experiment's results file states its verdict (regenerate it)")


def diagnosis(claim: Claim, results_dir: Path) -> str:
    """What the controlled experiments behind ``claim`` found, each with its file, then the stated reason."""
    found = [f"{f}: {controlled_verdict(results_dir / f)}" for f in claim.controlled]
    return " ".join(found + ([claim.reason] if claim.reason else []))


def aggregate(statuses: Sequence[str], setting: str = "paper") -> str:
    """The verdict from the parts' outcomes: all hold -> reproduced, none -> not reproduced,
    else partly; a proxy setting caps "reproduced" at "partly"; no parts: not testable here."""
    if not statuses:
        return "not testable here"
    if all(s == PASS for s in statuses):
        return "partly" if setting == "proxy" else "reproduced"
    if all(s == FAIL for s in statuses):
        return "not reproduced"
    return "partly"


def evaluate(claim: Claim, results_dir: Union[str, Path, None] = None) -> dict:
    """The ledger row of ``claim`` (the keys of :data:`COLUMNS`), its verdict computed from the
    committed files in ``results_dir`` (default: this checkout's ``docs/results``).

    :raises LedgerError: naming the claim, when a file, column or row it reads is missing."""
    results_dir = Path(results_dir) if results_dir is not None else default_results_dir()
    missing = [f for f in claim.files if not (results_dir / f).exists()]
    if missing:
        raise LedgerError(f"claim {claim.id} ({claim.source}): results file(s) {missing} missing from {results_dir} "
                          "(renamed or deleted?): regenerate them or update the claim's reader in zoo_protocols/claims.py")
    try:
        readings = [(p, p.ours.read(results_dir)) for p in claim.parts]
        outcomes = [p.rule.judge(m, results_dir) for p, m in readings]
        context = [(label, r.read(results_dir)) for label, r in claim.context]
        diagnosed = diagnosis(claim, results_dir)
    except (LedgerError, KeyError, ValueError, OSError) as e:
        raise LedgerError(f"claim {claim.id} ({claim.source}): {e}") from e
    verdict = aggregate([o.status for o in outcomes], claim.setting)
    if not claim.parts:
        our_value, interval, evidence = "", "", f"no committed result: {claim.untestable}"
    elif len(claim.parts) == 1:
        (_, m), (o,) = readings[0], outcomes
        our_value, interval, evidence = m.describe(), m.interval_text(), f"{o.text} ({o.status})"
    else:
        our_value = "; ".join(f"{p.label}: {m.describe()}" for p, m in readings)
        interval = "; ".join(f"{p.label}: {m.interval_text()}" for p, m in readings)
        count = {s: sum(o.status == s for o in outcomes) for s in (PASS, WEAK, FAIL)}
        head = f"{count[PASS]} of {len(outcomes)} parts hold" + (f", {count[WEAK]} in direction only" if count[WEAK] else "") + (f", {count[FAIL]} fail" if count[FAIL] else "")
        evidence = head + ". " + "; ".join(f"{p.label}: {o.text} ({o.status})" for (p, _), o in zip(readings, outcomes))
    if claim.setting == "proxy" and claim.parts and all(o.status == PASS for o in outcomes):
        evidence += ". Capped at partly: our setting is only a proxy of the paper's"
    if context:
        evidence += ". Context (not judged): " + "; ".join(f"{label}: {m.describe()}" for label, m in context)
    setting = claim.setting + (f": {claim.setting_note}" if claim.setting_note else "")
    return {
        "work": WORKS[claim.work], "id": claim.id, "source": claim.source, "claim": claim.claim, "paper_value": claim.paper_value,
        "our_value": our_value, "interval": interval, "verdict": verdict, "evidence": evidence, "tolerance": claim.tolerance,
        "setting": setting, "diagnosis": diagnosed, "files": " ".join(claim.files),
    }


def ledger(claims: Optional[Sequence[Claim]] = None, results_dir: Union[str, Path, None] = None) -> pd.DataFrame:
    """Every claim's row (:func:`evaluate`), in :data:`CLAIMS`' order; the first missing file or
    column stops it with a :class:`LedgerError` naming the claim."""
    claims = CLAIMS if claims is None else claims
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"claim ids must be unique: {sorted({i for i in ids if ids.count(i) > 1})}")
    return pd.DataFrame([evaluate(c, results_dir) for c in claims], columns=COLUMNS)


def counts(table: pd.DataFrame) -> dict:
    """Claims per verdict, every verdict listed."""
    return {v: int((table.verdict == v).sum()) for v in VERDICTS}


def write_csv(table: pd.DataFrame, path: Union[str, Path]) -> Path:
    """Writes the ledger as ``claims.csv`` holds it, atomically (:func:`currency_problems`
    compares the committed file with what this writes)."""
    return atomic.write_csv(table, path, lineterminator="\n")


def currency_problems(results_dir: Union[str, Path, None] = None) -> List[str]:
    """Why the committed ``claims.csv`` in ``results_dir`` (default: this checkout's
    ``docs/results``) is not what the ledger computes today: a claim that no longer resolves
    against the committed files (its :class:`LedgerError`), or rows that differ. Empty when
    current. A report, not a test (``make results-check``): a change to a claim or to a results
    file is brought into the ledger by rerunning ``tools/claims_ledger.py``."""
    results_dir = Path(results_dir) if results_dir is not None else default_results_dir()
    problems, rows = [], []
    for claim in CLAIMS:
        try:
            rows.append(evaluate(claim, results_dir))
        except LedgerError as e:
            problems.append(str(e))
    if problems:
        return problems
    committed = results_dir / "claims.csv"
    if not committed.is_file():
        return [f"{committed} is missing: run python tools/claims_ledger.py"]
    table = pd.DataFrame(rows, columns=COLUMNS)
    with tempfile.TemporaryDirectory() as tmp:
        now = write_csv(table, Path(tmp) / "claims.csv").read_text()
    if now != committed.read_text():
        old = pd.read_csv(committed, keep_default_na=False).set_index("id")
        new = pd.read_csv(io.StringIO(now), keep_default_na=False).set_index("id")
        changed = sorted(set(old.index) ^ set(new.index)) + [i for i in new.index if i in old.index and not old.loc[i].equals(new.loc[i])]
        problems.append(f"claims.csv differs from what the ledger computes now ({', '.join(changed) or 'formatting'}): run python tools/claims_ledger.py")
    md = results_dir / "claims.md"
    if md.is_file() and " · ".join(f"{v}: {n}" for v, n in counts(table).items()) not in md.read_text():
        problems.append("claims.md does not state the ledger's counts by verdict: run python tools/claims_ledger.py")
    return problems


# -- the claims -------------------------------------------------------------------------------

MEASURED = "measured (this repository)"
_MNIST_TOL = "two binomial standard errors of the paper's error rate on the 10,000 test images (one run each side)"


def _compress(method: str, arch: str, suffix: str, column: str, **kw) -> Column:
    return Column(f"compress_lenet_{method}_{arch}{suffix}_runs.csv", column, **kw)


def _cnn(method: str, dataset: str, file: str = "classify_cnn.csv") -> Column:
    return Column(file, "accuracy", {"method": method, "dataset": dataset}, unit="%")


def _fgsm(method: str, dataset: str, file: str = "classify_cnn_fgsm.csv", protocol: str = "posterior", epsilon: float = 0.5) -> Column:
    return Column(file, "accuracy", {"method": method, "dataset": dataset, "protocol": protocol, "epsilon": epsilon}, unit="%", scale=100.0)


_TABLE1 = {(0.01, 2.0): 1.89, (0.1, 2.0): 1.72, (0.01, 1.0): 1.48, (0.1, 1.0): 1.54}  # Deng et al. Table 1, SGLD-SA MAE
_SINGLE = ("The paper reports one simulated data set, so its value is compared with our spread over data sets: it holds when "
           "at least a quarter of our data sets do as well, in direction only when within our 5-95 % range; a chain that ended "
           "spike-only (sum of rho < 0.5: every weight in the Laplace spike) caps a part at 'in direction only', as the paper "
           "shows no such chain.")

DENG = (
    Claim(
        "deng-table1-500k", "deng", "Deng et al. 2019, Table 1 (v0 = 0.01, initial sigma = 2)",
        "SGLD-SA reaches test MAE 1.89 / MSE 5.56 on the large-p-small-n linear regression (n = 100, p = 1000, three signals) after 500,000 iterations",
        "MAE 1.89, MSE 5.56 (paper; one simulated data set)",
        parts=(Part("MAE", sparse_regression("sparse_regression_500k", "sgld-sa", 0.01, 2.0, "mae"), SingleDataSet(1.89)),
               Part("MSE", sparse_regression("sparse_regression_500k", "sgld-sa", 0.01, 2.0, "mse"), SingleDataSet(5.56))),
        tolerance=_SINGLE, setting="paper",
        setting_note="the paper's recipe (500,000 iterations, minibatch 50, omega_k = 10 (k + 1000)^-0.7, delta updated by SA) on 20 simulated data sets (one per seed)",
        context=(
            ("beyond the paper, delta fixed at 0.5 (50,000 iterations), MAE", sparse_regression("sparse_regression_fixed_delta_50k", "sgld-sa", 0.01, 2.0, "mae")),
            # issue 23 item 5: the remedy as a named option (--delta-prior A,B), beside the
            # paper's recipe at the same 50,000 iterations and seeds
            ("the paper's recipe at 50,000 iterations, MAE", sparse_regression("sparse_regression_50k", "sgld-sa", 0.01, 2.0, "mae")),
            ("beyond the paper, Beta(2, 1000) prior on delta (--delta-prior 2,1000; 50,000 iterations), MAE", sparse_regression("sparse_regression_delta_prior_2_1000_50k", "sgld-sa", 0.01, 2.0, "mae")),
            ("beyond the paper, Beta(10, 1000) prior on delta (--delta-prior 10,1000; 50,000 iterations), MAE", sparse_regression("sparse_regression_delta_prior_10_1000_50k", "sgld-sa", 0.01, 2.0, "mae")),
        ),
        # issue 46: why chains end spike-only, on this design and two others, against an
        # independent implementation of Algorithm 1 and LassoCV
        controlled=("controlled/sgmcmc_sa_selection.md",),
    ),
    Claim(
        "deng-table1-cells", "deng", "Deng et al. 2019, Table 1 (SGLD-SA row)",
        "SGLD-SA's test MAE is 1.5-1.9 in all four (v0, initial sigma) columns: robust to the initialisation",
        "MAE 1.89 / 1.72 / 1.48 / 1.54 at (v0, sigma) = (0.01, 2) / (0.1, 2) / (0.01, 1) / (0.1, 1) (paper; one data set each)",
        parts=tuple(Part(f"v0 {v0}, sigma {s:g}", sparse_regression("sparse_regression_50k", "sgld-sa", v0, s, "mae"), SingleDataSet(p)) for (v0, s), p in _TABLE1.items()),
        tolerance=_SINGLE, setting="reduced", setting_note="50,000 iterations (the paper's 500,000 / 10), otherwise the paper's recipe; 20 data sets per cell",
    ),
    Claim(
        "deng-table1-ordering", "deng", "Deng et al. 2019, Table 1 and Sec. 5.1",
        "The adaptive SA update is what helps: SGLD-SA beats SGLD-EM, and SGLD-EM beats plain SGLD, in test MAE in every column",
        "SGLD-SA < SGLD-EM < SGLD in all four columns, e.g. 1.89 < 3.49 < 15.85 at v0 = 0.01, sigma = 2 (paper)",
        parts=tuple(Part(f"{a} - {b}, v0 {v0}, sigma {s:g}", paired_difference("sparse_regression_50k.csv", "mae", a, b, where={"v0": v0, "sigma": s}, over="paired data sets"), Better(0.0, "lower"))
                    for (v0, s) in _TABLE1 for a, b in (("sgld-sa", "sgld-em"), ("sgld-em", "sgld"))),
        tolerance="Strict: the 95 % t-interval of the paired MAE difference over data sets (same seed, same data set) must exclude 0.",
        setting="reduced", setting_note="50,000 iterations (the paper's 500,000 / 10), 20 data sets per cell",
    ),
    Claim(
        "deng-table2-accuracy", "deng", "Deng et al. 2019, Table 2 (2-Conv-2-FC CNN, no augmentation)",
        "SGHMC-SA's posterior average reaches state-of-the-art accuracy for a shallow CNN without augmentation or batch norm",
        "MNIST 99.59 %, Fashion-MNIST 93.01 % (paper)",
        parts=(Part("MNIST", _cnn("sghmc-sa", "mnist"), Near(99.59, binomial_tolerance(100 - 99.59), "higher")),
               Part("Fashion-MNIST", _cnn("sghmc-sa", "fashion"), Near(93.01, binomial_tolerance(100 - 93.01), "higher"))),
        tolerance=f"MNIST {binomial_tolerance(0.41)} pts, Fashion-MNIST {binomial_tolerance(6.99)} pts: {_MNIST_TOL}.",
        setting="paper", setting_note="100 epochs (the paper's count is not stated), thinning 500, the paper's batch, learning rate, omega and tau; one seed",
        controlled=("controlled/sghmc_sa_cnn.md",),
        reason=("The controlled experiment (SGHMC-SA against SGHMC on coupled seeds, 5000 images, 20 epochs) finds the SA working as the equations "
                "say and ahead on Fashion-MNIST, so the shortfall in absolute accuracy is not the SA's: our SGHMC falls as far short of the paper's "
                "SGHMC (99.16 against 99.47 % on MNIST). One run per data set: 0.43 pts on MNIST is about three binomial standard errors of one run, "
                "0.78 pts on Fashion-MNIST about three; the paper does not state its epochs and the network is reconstructed "
                "(shared/notes/sgmcmc-sa.md). The absolute level needs the full data set and the full schedule (about 2.4 h a run here, 40 s on an "
                "H100): seed 1 of the MNIST protocol ran on an H100 (the context: short of the paper as seed 0 is); seed 2 and the Fashion-MNIST "
                "seeds are legs of tools/gpu_runbook.py of about 4 GPU minutes each (cnn-mnist-seed2, cnn-fashion-seed1, ...)."),
        context=(("MNIST, seed 1, 100 epochs on an H100 (GPU runbook leg cnn-mnist-seed1)", _cnn("sghmc-sa", "mnist", "gpu/classify_cnn.csv")),),
    ),
    Claim(
        "deng-table2-ordering", "deng", "Deng et al. 2019, Table 2 and Sec. 5.2",
        "SGHMC-SA outperforms SGHMC on both data sets, and the samplers' posterior averages beat Vanilla (Adam) and Dropout",
        "SGHMC-SA 99.59 > SGHMC 99.47 > Dropout 99.38 > Vanilla 99.31 % on MNIST; 93.01 > 92.88 on Fashion-MNIST (paper)",
        parts=(Part("MNIST: SGHMC-SA vs SGHMC", _cnn("sghmc-sa", "mnist"), Better(_cnn("sghmc", "mnist"), "higher", "SGHMC")),
               Part("Fashion-MNIST: SGHMC-SA vs SGHMC", _cnn("sghmc-sa", "fashion"), Better(_cnn("sghmc", "fashion"), "higher", "SGHMC")),
               Part("MNIST, 15 epochs: SGHMC-SA vs Vanilla", _cnn("sghmc-sa", "mnist", "classify_cnn_e15.csv"), Better(_cnn("adam", "mnist", "classify_cnn_e15.csv"), "higher", "Vanilla (Adam)")),
               Part("MNIST, 15 epochs: SGHMC-SA vs Dropout", _cnn("sghmc-sa", "mnist", "classify_cnn_e15.csv"), Better(_cnn("dropout", "mnist", "classify_cnn_e15.csv"), "higher", "Dropout"))),
        tolerance="An ordering holds when the 95 % intervals over seeds do not overlap; with one seed per method it can at best hold in direction only.",
        setting="paper", setting_note="100 epochs for the SGHMC pair; the comparison with Vanilla and Dropout only at 15 epochs (classify_cnn_e15); one seed",
        controlled=("controlled/sghmc_sa_cnn.md",),
        reason=("Not a bug, and the single-run table cannot decide it. The controlled experiment couples SGHMC and SGHMC-SA on the same seeds "
                "(5000 images, 20 epochs, 4 seeds): the SA moves FC1's prior (mean rho 0.5 -> 0.76) and SGHMC-SA comes out ahead on "
                "Fashion-MNIST by about twice the paper's margin, level on MNIST, where 5000 images already leave only 2 % error. Single runs "
                "spread by 0.11-0.15 pts there, as large as the paper's own gaps, so the full-length runs' tie on MNIST and -0.29 pts on "
                "Fashion-MNIST (one seed each) say nothing of the order; seeds 1 and 2 of the 100-epoch protocol are legs of "
                "tools/gpu_runbook.py (MNIST seed 1 ran on an H100, all four methods: the context). The comparison with Vanilla and Dropout "
                "is at 15 epochs, where the samplers have drawn few thinned samples, and is not part of the controlled experiment."),
        context=tuple((f"MNIST, seed 1, 100 epochs on an H100 (GPU runbook leg cnn-mnist-seed1): {label}", _cnn(method, "mnist", "gpu/classify_cnn.csv"))
                      for method, label in (("sghmc-sa", "SGHMC-SA"), ("sghmc", "SGHMC"), ("dropout", "Dropout"), ("adam", "Vanilla (Adam)"))),
    ),
    Claim(
        "deng-fig2-fgsm", "deng", "Deng et al. 2019, Fig. 2 and Sec. 5.3 (FGSM)",
        "SG-MCMC-SA improves resistance to adversarial attacks: at zeta = 0.5 SGHMC-SA keeps about 22 % on MNIST (about 11 points above Vanilla and Dropout, 1 above SGHMC) and 15 % on Fashion-MNIST",
        "about 22 % (MNIST) and 15 % (Fashion-MNIST) at zeta = 0.5 (paper, read off the poster's curves)",
        parts=(Part("MNIST, zeta 0.5", _fgsm("sghmc-sa", "mnist"), Near(22.0, 5.0, "higher")),
               Part("Fashion-MNIST, zeta 0.5", _fgsm("sghmc-sa", "fashion"), Near(15.0, 5.0, "higher")),
               Part("MNIST, zeta 0.5: SGHMC-SA vs SGHMC", _fgsm("sghmc-sa", "mnist"), Better(_fgsm("sghmc", "mnist"), "higher", "SGHMC")),
               Part("MNIST, zeta 0.5, 15 epochs, the authors' attack: SGHMC-SA vs Vanilla", _fgsm("sghmc-sa", "mnist", "classify_cnn_e15_fgsm.csv", "authors"),
                    Better(_fgsm("adam", "mnist", "classify_cnn_e15_fgsm.csv", "authors"), "higher", "Vanilla (Adam)"))),
        tolerance="5 pts on the accuracies: they are read off the poster's curves (a couple of points) and come from one seed; orderings as in deng-table2-ordering.",
        setting="paper", setting_note="attack against the posterior-averaged predictive (100-epoch runs); the comparison with Vanilla at 15 epochs with the authors' attack (tools/attacker.py); one seed",
        controlled=("controlled/fgsm_scale.md",),
    ),
    Claim(
        "deng-table3-resnet", "deng", "Deng et al. 2019, Table 3 (ResNet-20, CIFAR-10)",
        "A-SGHMC-SA compresses ResNet-20 to 90 % sparsity (27K parameters) at 91.68 % accuracy, beating A-SGHMC and A-SGHMC-EM at every sparsity",
        "91.68 % at 90 % sparsity; 94.27 % at 50 % (paper)",
        untestable="reproductions/resnet_compression.py runs the protocol (CIFAR-10 batches; 1000 epochs of dense SGHMC pretraining, then 1000 epochs of sparse fine-tuning per method and sparsity, about 6 GPU-hours each in the authors' logs), which needs a GPU budget: the GPU runbook of issue 23 (item 3)",
    ),
    Claim(
        "deng-uci", "deng", "Deng et al. 2019, appendix UCI table",
        "A-SGHMC-SA has the lowest test RMSE of the six samplers (SGHMC, SGHMC-EM, SGHMC-SA, with and without annealing) on all five data sets",
        "A-SGHMC-SA first on Boston 2.692, Yacht 0.782, Energy 1.388, Wine 0.620, Concrete 5.687 RMSE (paper)",
        parts=tuple(Part(f"{name}: A-SGHMC-SA - best other RMSE, last iterate", uci_best_other("uci_sgmcmc_runs.csv", dataset, "a-sghmc-sa", metric="rmse_last"), Better(0.0, "lower"))
                    for name, dataset in (("Boston", "bostonHousing"), ("Yacht", "yacht"), ("Energy", "energy"), ("Wine", "wine-quality-red"), ("Concrete", "concrete"))),
        tolerance="A-SGHMC-SA must have the lowest mean RMSE, and the 95 % t-interval of its paired difference to the next best method over the 20 splits must exclude 0.",
        setting="reduced", setting_note="the authors' readout (the last iterate; the posterior average of the last half is the table's rmse column) on the standard 20 Hernandez-Lobato splits (theirs: random 90/10 splits), learning rate chosen per method on validation data (theirs: one for all sets); Energy is the heating load (theirs: cooling)",
        controlled=("controlled/sgmcmc_sa_uci.md",),
        reason=("Found and fixed: the recipe took the authors' v0, set for raw targets, onto standardised targets, where the hidden layer's "
                "spike sigma v0 is ~9x narrower than theirs on Boston. With the hidden layer's v0 and v1 in standardised units (SpikeAndSlabPrior "
                "layer_scale) the controlled experiment finds no Boston gap to A-SGHMC left (the old setting, sa-v0-as-printed, keeps it). Read "
                "out as the authors do (the last iterate, the parts above; the posterior average is uci_sgmcmc_table.md's rmse column) "
                "A-SGHMC-SA is first on Boston and level on Wine, behind on Yacht, Energy and Concrete. Left: the protocol's other differences "
                "(one learning rate for all sets, random splits), a rate chosen on one validation split, and seeds (gpu_runbook leg uci-sgmcmc)."),
    ),
)

_UCI_RDP = "uci_rdp.csv"


def _rdp_ll(dataset: str) -> Column:
    return Column(_UCI_RDP, "test_ll", {"dataset": dataset, "method": "rdp"}, over="splits", unit="nats")


_RDP_SCALE = "×2.5"
OH = (
    Claim(
        "oh-lenet5", "oh", "Oh et al. 2020, Table 2 (LeNet-5-Caffe, MNIST)",
        "RDP's structured pruning compresses LeNet-5-Caffe to 4-7-110-66 at 1.0 % error, 125K FLOPs and 20K parameters",
        "1.0 % error, 125K FLOPs, 20K parameters, architecture 4-7-110-66 (paper; counting convention not stated)",
        parts=(Part("error", _compress("rdp", "lenet5", "_e200", "test_error", unit="%"), Near(1.0, binomial_tolerance(1.0), "lower")),
               Part("FLOPs", _compress("rdp", "lenet5", "_e200", "flops", unit="FLOPs"), Near(125_000, 1.5, "lower", relative=True)),
               Part("parameters", _compress("rdp", "lenet5", "_e200", "params_kept", unit="weights"), Near(20_000, 1.5, "lower", relative=True))),
        tolerance=(f"Error {binomial_tolerance(1.0)} pts ({_MNIST_TOL}). FLOPs and parameters within {_RDP_SCALE} of the paper's: its counting convention is not stated, "
                   "and under ours its own 4-7-110-66 counts 110K-290K multiply-accumulates depending on what conv2 keeps (vmf-rdp notes)."),
        setting="paper", setting_note="the authors' recipe (200 epochs, Adam 1e-3, KL warm-up over the first half, posteriors starting at sd 1e-4), every layer cut at the widest gap of its radius statistic; one seed",
        controlled=("controlled/rdp_thresholds.md",),
    ),
    Claim(
        "oh-lenet5-vs-bc", "oh", "Oh et al. 2020, Table 2 and Sec. 5.2",
        "RDP scores best at FLOPs among the Bayesian compression methods (fewer than BC-GHS and BC-GNJ) and comes second to BC-GHS in parameters, with two-thirds of BC-GNJ's",
        "FLOPs: RDP 125K < BC-GHS 169K < BC-GNJ 307K; parameters: BC-GHS 15K < RDP 20K < BC-GNJ 22K (paper)",
        parts=(Part("FLOPs: RDP vs BC-GHS", _compress("rdp", "lenet5", "_e200", "flops", unit="FLOPs"), Better(_compress("bc-ghs", "lenet5", "_e200", "flops", unit="FLOPs"), "lower", "BC-GHS")),
               Part("FLOPs: RDP vs BC-GNJ", _compress("rdp", "lenet5", "_e200", "flops", unit="FLOPs"), Better(_compress("bc-gnj", "lenet5", "_e200", "flops", unit="FLOPs"), "lower", "BC-GNJ")),
               Part("parameters: RDP vs BC-GNJ", _compress("rdp", "lenet5", "_e200", "params_kept", unit="weights"), Better(_compress("bc-gnj", "lenet5", "_e200", "params_kept", unit="weights"), "lower", "BC-GNJ"))),
        tolerance="Orderings under one counting convention (ours, the same for the three methods); one seed each, so at best in direction only.",
        setting="paper", setting_note="200 epochs for each method; one seed",
        controlled=("controlled/rdp_thresholds.md",),
        reason=("The authors' recipe (Adam 1e-3, KL warm-up over half the epochs, posteriors starting at sd 1e-4) prunes far less here than our shortened one did "
                "(lr 3e-3, sd 1e-2: 14-19-178-49 at 636K FLOPs): after 200 epochs most radius statistics sit in one cluster, so no threshold read off the "
                "histograms reaches the paper's counts (controlled/rdp_thresholds.md). Next: several seeds of the 200-epoch run (a leg of "
                "tools/gpu_runbook.py); BC-GNJ and BC-GHS are one seed each too."),
    ),
    Claim(
        "oh-fig7-clusters", "oh", "Oh et al. 2020, Fig. 7 and Sec. 5.2",
        "The log mode of each unit's radius posterior forms clearly separated clusters, so one threshold prunes the network",
        "clearly separated clusters in every layer's rows and columns (paper, a figure)",
        parts=tuple(Part(g, radius_gap("rdp_lenet5_e200_pruning_statistics.json", g), Threshold(2.0, "higher", "a gap of 2 nats: any threshold inside it prunes the same units"))
                    for g in ("conv2.weight.row", "conv2.weight.column", "fc1.weight.row", "fc1.weight.column", "fc2.weight.row", "fc2.weight.column")),
        tolerance="A grouping's clusters count as clearly separated when the widest gap between its units' statistics is at least 2 nats (a factor e^2 in the radius mode), wherever the run itself cut.",
        setting="paper", setting_note="the 200-epoch LeNet-5 run of oh-lenet5",
    ),
    Claim(
        "oh-uci", "oh", "Oh et al. 2020, Table 1 (the entries in a plausible range)",
        "RDP's average test log-likelihood on Boston, Energy, Naval and Yacht",
        "Boston -2.60 ± 0.03, Energy -1.18 ± 0.03, Naval 3.05 ± 0.01, Yacht -2.36 ± 0.04 nats (paper)",
        parts=(Part("Boston", _rdp_ll("bostonHousing"), Agrees(-2.60, better="higher", paper_se=0.03)),
               Part("Energy", _rdp_ll("energy"), Agrees(-1.18, better="higher", paper_se=0.03)),
               Part("Naval", _rdp_ll("naval-propulsion-plant"), Agrees(3.05, better="higher", paper_se=0.01)),
               Part("Yacht", _rdp_ll("yacht"), Agrees(-2.36, better="higher", paper_se=0.04))),
        tolerance="Two standard errors of the difference (the paper's ± and ours over splits); doing better than the paper holds.",
        setting="reduced", setting_note="about 1200 Adam steps per split (the paper: 400 epochs of minibatches of 5, 19x to 2744x more); standard splits",
    ),
    Claim(
        "oh-uci-wins", "oh", "Oh et al. 2020, Table 1 (RDP's wins)",
        "RDP has the best test log-likelihood of the table on 5 of 9 data sets: Concrete, Kin8nm, Power, Protein, Wine (the vmf-rdp notes flag these entries as implausible: outside every baseline's range)",
        "Concrete -2.61 ± 0.02, Kin8nm 2.17 ± 0.00, Power -0.14 ± 0.01, Protein 1.38 ± 0.01, Wine -0.45 ± 0.00 nats (paper)",
        parts=(Part("Concrete", _rdp_ll("concrete"), Agrees(-2.61, better="higher", paper_se=0.02)),
               Part("Kin8nm", _rdp_ll("kin8nm"), Agrees(2.17, better="higher", paper_se=0.0)),
               Part("Power", _rdp_ll("power-plant"), Agrees(-0.14, better="higher", paper_se=0.01)),
               Part("Protein", _rdp_ll("protein-tertiary-structure"), Agrees(1.38, better="higher", paper_se=0.01)),
               Part("Wine", _rdp_ll("wine-quality-red"), Agrees(-0.45, better="higher", paper_se=0.0))),
        tolerance="As oh-uci: two standard errors of the difference.",
        setting="reduced", setting_note="as oh-uci",
        controlled=("controlled/uci_ll_units.md",),
        reason=("Concrete and Wine, inside the baselines' range, remain a budget question: about 1200 Adam steps per split "
                "against the paper's 400 epochs of minibatches of 5 (19x to 2744x more steps); the full protocol is a leg of "
                "tools/gpu_runbook.py, not run on CPU."),
    ),
    Claim(
        "oh-bessel", "oh", "Oh et al. 2020, Sec. 3.2 and Fig. 5",
        "Averaging the lower and upper bounds of the Bessel-function ratio gives stable vMF gradients up to thousands of dimensions, with a gap that shrinks as the dimension grows",
        "the bounds' gap is tiny for large dimensions and stable training up to several thousand dimensions (paper, a figure)",
        untestable="no results file holds this: the ratio approximation is checked against stored references by the unit tests (tests/ops/test_special.py, tests/distributions/test_von_mises_fisher.py), and benchmarks/vmf_sampling.py prints timings without writing a table",
    ),
)

_VN = "variance_networks.csv"


def _vn(parameterization: str, column: str) -> Column:
    return Column(_VN, column, {"parameterization": parameterization, "source": MEASURED}, unit="%")


def _toy(method: str, dim: int) -> Column:
    return Column("dsivi_toy_runs.csv", "kl", {"method": method, "dim": dim}, unit="nats")


def _vae(prior: str, K: int) -> Column:
    return Column("vae_dsivi_prior.csv", "test_ll", {"prior": prior, "K": K, "source": MEASURED}, se="test_ll_se", n=None, over="test points", unit="nats")


def _robust(model: str, epsilon: float) -> Column:
    return Column("fgsm_robustness.csv", model, {"epsilon": epsilon}, unit="%", scale=100.0)


MOLCHANOV = (
    Claim(
        "molchanov-sparse-vd-lenet300", "molchanov", "Molchanov 2022 (thesis), Table 1 (LeNet-300-100)",
        "Sparse variational dropout compresses LeNet-300-100 68-fold with no loss of accuracy",
        "1.92 % error at ×68 (paper)",
        parts=(Part("error", _compress("sparse-vd", "lenet300", "", "test_error", unit="%"), Near(1.92, binomial_tolerance(1.92), "lower")),
               Part("compression", _compress("sparse-vd", "lenet300", "", "compression_ratio", unit="×"), Near(68.0, 0.10, "higher", relative=True))),
        tolerance=f"Error {binomial_tolerance(1.92)} pts ({_MNIST_TOL}); compression ratio at least 90 % of the paper's (one seed: no spread to derive it from, so a 10 % band on a ratio the paper prints to two digits).",
        setting="paper", setting_note="the official recipe (200 epochs, Adam 1e-3 then linear to 0, KL warm-up, local reparameterization, pruning at log alpha > 3); one seed",
    ),
    Claim(
        "molchanov-sparse-vd-lenet5", "molchanov", "Molchanov 2022 (thesis), Table 1 (LeNet-5-Caffe)",
        "Sparse variational dropout compresses LeNet-5-Caffe 280-fold with no loss of accuracy",
        "0.75 % error at ×280 (paper)",
        parts=(Part("error", _compress("sparse-vd", "lenet5", "_e200", "test_error", unit="%"), Near(0.75, binomial_tolerance(0.75), "lower")),
               Part("compression", _compress("sparse-vd", "lenet5", "_e200", "compression_ratio", unit="×"), Near(280.0, 0.10, "higher", relative=True))),
        tolerance=f"Error {binomial_tolerance(0.75)} pts ({_MNIST_TOL}); compression ratio at least 90 % of the paper's, as for LeNet-300-100.",
        setting="paper", setting_note="the official recipe, 200 epochs; one seed",
    ),
    Claim(
        "molchanov-phase-transition", "molchanov", "Molchanov 2022 (thesis), Table 2 and Fig. 3",
        "With dropout rates shared per layer or per neuron, variational dropout goes through a phase transition to a variance network: propagating the posterior mean gives chance accuracy while test-time averaging stays accurate",
        "mean-propagation accuracy 11.3 % (layer-wise and neuron-wise), test-time averaging 99.2 % (paper)",
        parts=(Part("layer-wise, mean propagation", _vn("layer", "mean_propagation_accuracy"), Near(11.3, 5.0, "both")),
               Part("neuron-wise, mean propagation", _vn("neuron", "mean_propagation_accuracy"), Near(11.3, 5.0, "both"))),
        tolerance="Mean propagation within 5 pts of the paper's 11.3 % (chance is 10 %; the thesis' 11.3 % is the most frequent class): anything near chance shows the transition.",
        setting="reduced", setting_note="LeNet-300-100 on MNIST for 15 epochs per parameterisation (the authors: 200; their network is not stated in the thesis)",
        context=(("test-time averaging, layer-wise", _vn("layer", "test_time_averaging_accuracy")), ("test-time averaging, neuron-wise", _vn("neuron", "test_time_averaging_accuracy"))),
        controlled=("controlled/phase_transition.md",),
        reason=("The controlled experiment gives the shared rates more than twice the committed run's Adam steps on a tenth of the "
                "data, where the KL's pull per data point is six times stronger; pyrozoo and the independent re-implementation agree "
                "along the whole trajectory. What remains is the authors' setting: their LeNet-5 with batch normalisation for 200 "
                "epochs of full MNIST (the runbook's variance-networks leg), which this CPU cannot run."),
    ),
    Claim(
        "molchanov-zero-mean", "molchanov", "Molchanov 2022 (thesis), Table 2 (zero-mean column)",
        "A zero-mean variance network (q(w) = N(0, sigma^2), no means at all) learns: its test-time averaging is as accurate as the other parameterisations'",
        "test-time averaging 99.4 % (paper)",
        parts=(Part("zero-mean, test-time averaging", _vn("zero-mean", "test_time_averaging_accuracy"), Near(99.4, 1.5, "higher")),),
        tolerance="1.5 pts: our other parameterisations reach 98.0-98.4 % in the same 15 epochs, up to 1.4 pts below the thesis' 99.2-99.4 %.",
        setting="reduced", setting_note="as molchanov-phase-transition",
        controlled=("controlled/variance_network_zero_mean.md",),
    ),
    Claim(
        "molchanov-variance-fgsm", "molchanov", "Molchanov 2022 (thesis), Fig. 4",
        "Variance networks are more robust to fast-gradient-sign attacks than non-Bayesian baselines (the thesis: than deep ensembles)",
        "a lower rate of successful iterative FGSM attacks than deep ensembles on CIFAR-10 VGG-like networks (paper, a figure)",
        parts=tuple(Part(f"epsilon {eps}: variance network vs {label}", _robust("variance network (layer)", eps), Better(_robust(column, eps), "higher", label))
                    for eps in (0.05, 0.1, 0.2) for column, label in (("deterministic", "deterministic"), ("MC dropout (p=0.5)", "MC dropout"))),
        tolerance="Orderings of accuracy under attack; one seed each, so at best in direction only.",
        setting="proxy", setting_note="MNIST LeNet-300-100, single-step FGSM, against a deterministic net and MC dropout (the thesis: CIFAR-10 VGG-like, iterative FGSM, deep ensembles, not implemented here); 15 epochs; one seed",
    ),
    Claim(
        "molchanov-dsivi-k", "molchanov", "Molchanov 2022 (thesis), Theorem 2 and Fig. 5",
        "The DSIVI bound tightens as K grows and converges to the ELBO: trained with large K it does as well as minimising the exact KL",
        "DSIVI with K1 = K2 = K approaches the direct Monte Carlo KL curve as K grows (paper, a figure)",
        parts=tuple(p for dim in (2, 10, 50) for p in (
            Part(f"dim {dim}: K=1000 vs MC KL", _toy("DSIVI K=1000", dim), Close(_toy("MC KL", dim), 0.05, "MC KL")),
            Part(f"dim {dim}: K=1000 vs K=1", _toy("DSIVI K=1000", dim), Better(_toy("DSIVI K=1", dim), "lower", "K=1")))),
        tolerance="The final KL with K = 1000 within 5 % of the exact-KL run's (K = 10 ends 12-25 % above it in dsivi_toy.csv), and below K = 1's with non-overlapping 95 % intervals over seeds.",
        setting="general", setting_note="our own semi-implicit toy target (multivariate t, 3 degrees of freedom) in 2, 10 and 50 dimensions, 3 seeds (the thesis' Fig. 5 uses its own target); KIVI and AVB not implemented",
    ),
    Claim(
        "molchanov-marginal-vs-joint", "molchanov", "Molchanov 2022 (thesis), Theorem 3 and Fig. 6",
        "For a BNN with a hierarchical prior, training the marginal (semi-implicit, DSIVI) bound fits the posterior better than joint training: a higher marginal ELBO",
        "marginal training above joint training in marginal-ELBO estimates (paper, a figure)",
        parts=(Part("marginal - joint, exact marginal ELBO per example", paired_difference("dsivi_hierarchical_bnn_concrete_runs.csv", "elbo_exact", "marginal", "joint", on="split", over="paired splits", unit="nats"), Better(0.0, "higher")),),
        tolerance="Strict: the 95 % t-interval of the paired difference over splits must exclude 0.",
        setting="general", setting_note="UCI concrete, 5 splits, Gaussian prior with a Gamma hyperprior per weight (the thesis' data and network are its own)",
        controlled=("controlled/marginal_vs_joint.md",),
    ),
    Claim(
        "molchanov-vae-dsivi-prior", "molchanov", "Molchanov 2022 (thesis), Table 3",
        "A VAE whose prior is the aggregated posterior, handled by the DSIVI bound, beats the VampPrior in test log-likelihood",
        "DSIVI (K = 5000) >= -82.16 > VampPrior -82.38 nats (paper)",
        parts=(Part("DSIVI K=5000 vs VampPrior", _vae("dsivi", 5000), Better(_vae("vamp", 500), "higher", "VampPrior")),
               Part("DSIVI K=5000", _vae("dsivi", 5000), Near(-82.16, 1.0, "higher"))),
        tolerance="Ordering: non-overlapping 95 % intervals (s.e. over test points, one training seed). Value: within 1 nat of the thesis' (its own rows span -83.02 to -82.16).",
        setting="reduced", setting_note="30 epochs (VampPrior's protocol: up to 2000), plain ReLU MLPs, 1000 importance samples on 2000 test images; one seed",
        context=(("Normal prior", _vae("normal", 0)),),
        controlled=("controlled/vae_dsivi_prior.md",),
        reason=("The controlled experiment trains 200 passes over the first 10,000 images, three seeds, K at the thesis' fraction "
                "of the training set, beside a plain-PyTorch re-implementation of the Normal and DSIVI runs: the two agree within "
                "0.2 nats, so this is no bug in pyrozoo's DSIVI prior. At that size the published VampPrior also falls below the "
                "Normal prior (the learned priors fit the training images), so it neither shows nor refutes the ordering; the DSIVI "
                "training bound stays about 8 nats per image looser than the ELBO under the aggregated posterior it estimates. "
                "What remains is the full protocol: the runbook's vae-dsivi-prior leg (2000 epochs, 100 warm-up, 5000 importance samples)."),
    ),
)

_ESBO = "uci_esbo_runs.csv"
_SAGAR_SETS = (("Boston", "bostonHousing"), ("Concrete", "concrete"), ("Energy", "energy"), ("Protein", "protein-tertiary-structure"), ("Wine", "wine-quality-red"))
_SAGAR_RMSE = {"bostonHousing": (2.58, 0.13), "concrete": (4.79, 0.36), "energy": (0.74, 0.08), "protein-tertiary-structure": (4.38, 0.07), "wine-quality-red": (0.59, 0.04)}
_SAGAR_NOTE = ("our 'esbo' is a reweighted wake-sleep reading of its ill-posed Algorithm 1; standard splits (the paper: 50 random 90/10 splits), "
               "1000 Adam steps per split for every method")
_SAGAR_REASON = ("No controlled experiment: the paper is withdrawn by its author ('the results are false') and its objective (Algorithm 1) "
                 "is not well defined, so there is no method to reproduce exactly and no reference implementation to compare with; an "
                 "experiment would test our reweighted wake-sleep reading, not the paper's method. With every method at the same budget "
                 "the mean-field ELBO baseline is ahead of that reading; the well-defined importance-weighted bound is judged in "
                 "sagar-alternative-bound.")


def _esbo_difference(a: str, b: str, metric: str, dataset: str) -> Computed:
    return paired_difference(_ESBO, metric, a, b, on="split", where={"dataset": dataset}, over="paired splits", unit="nats" if metric == "test_ll" else "")


SAGAR = (
    Claim(
        "sagar-rmse-best", "sagar", "Sagar 2020, Table 1 (withdrawn)",
        "The method ('Ours') has the lowest test RMSE on all five UCI data sets, beating ELBO-VI, Rényi-VI, CLBO-VI and PBP",
        "lowest RMSE in every row (paper; results withdrawn by the author)",
        parts=tuple(Part(f"{name}: esbo - mfvi RMSE", _esbo_difference("esbo", "mfvi", "rmse", d), Better(0.0, "lower")) for name, d in _SAGAR_SETS),
        tolerance="Strict: the 95 % t-interval of the paired RMSE difference to the ELBO baseline (mfvi) over splits must exclude 0.",
        setting="proxy", setting_note=_SAGAR_NOTE,
        reason=_SAGAR_REASON,
    ),
    Claim(
        "sagar-ll-best", "sagar", "Sagar 2020, Table 2 (withdrawn)",
        "The method has the best test log-likelihood on all five UCI data sets",
        "lowest negative test log-likelihood in every row (paper; results withdrawn by the author)",
        parts=tuple(Part(f"{name}: esbo - mfvi test LL", _esbo_difference("esbo", "mfvi", "test_ll", d), Better(0.0, "higher")) for name, d in _SAGAR_SETS),
        tolerance="As sagar-rmse-best, on the test log-likelihood (higher is better).",
        setting="proxy", setting_note=_SAGAR_NOTE,
        reason=_SAGAR_REASON,
    ),
    Claim(
        "sagar-rmse-values", "sagar", "Sagar 2020, Table 1, 'Ours' column (withdrawn)",
        "The method's test RMSE on each data set",
        "Boston 2.58 ± 0.13, Concrete 4.79 ± 0.36, Energy 0.74 ± 0.08, Protein 4.38 ± 0.07, Wine 0.59 ± 0.04 (paper; withdrawn: 'the results are false')",
        parts=tuple(Part(name, Column(_ESBO, "rmse", {"dataset": d, "method": "esbo"}, over="splits"), Agrees(_SAGAR_RMSE[d][0], better="lower", paper_se=_SAGAR_RMSE[d][1])) for name, d in _SAGAR_SETS),
        tolerance="Two standard errors of the difference (the paper's ± and ours over splits); doing better holds.",
        setting="proxy", setting_note=_SAGAR_NOTE,
    ),
    Claim(
        "sagar-alternative-bound", "sagar", "Sagar 2020, Sec. 2 and contributions",
        "Training a BNN by SGD on an alternative (importance-weighted) lower bound beats the ELBO",
        "better RMSE than ELBO-VI on every data set (paper; withdrawn)",
        parts=tuple(Part(f"{name}: iwae - mfvi RMSE", _esbo_difference("iwae", "mfvi", "rmse", d), Better(0.0, "lower")) for name, d in _SAGAR_SETS),
        tolerance="As sagar-rmse-best, with the well-defined importance-weighted bound (IWAE, K = 8) in place of the paper's objective.",
        setting="proxy", setting_note="IWAE (K = 8) with the importance-resampled posterior vs mean-field VI, 1000 Adam steps per split on the standard splits",
    ),
)

_LRT, _STANDARD, _SLOW, _NONE = "local reparameterization", "weight sample per minibatch (standard)", "weight sample per data point (slow)", "no weight noise (minimal variance)"
_CELLS = ("top layer, epoch 10", "top layer, epoch 100", "bottom layer, epoch 10", "bottom layer, epoch 100")


def _bc(method: str, column: str, unit: str) -> Column:
    return Column(f"compress_lenet_{method}_lenet5_e200_runs_details.csv", column, unit=unit)


TORONTO = (
    Claim(
        "blundell-mnist", "toronto", "Blundell et al. 2015, Table 1 (deck: Bayes by Backprop; the deck quotes no number, this one is from the notes, marked there as recalled)",
        "Bayes by Backprop with the scale-mixture prior classifies MNIST with a 2x400 MLP at 1.36 % error, better than SGD with dropout",
        "1.36 % test error, 2x400 units (paper)",
        parts=(Part("2x400", Column("bayes_by_backprop_mnist.csv", "test_error", {"source": MEASURED, "network": "2x400"}, unit="%"), Near(1.36, binomial_tolerance(1.36), "lower")),),
        tolerance=f"{binomial_tolerance(1.36)} pts: {_MNIST_TOL}.",
        setting="reduced", setting_note="50 epochs, Adam 1e-3, pi = 0.5, -log sigma1 = 0, -log sigma2 = 6 (one point of the paper's grid), Blundell's minibatch KL weights; one seed",
        controlled=("controlled/bbb_mnist.md",),
    ),
    Claim(
        "graves-pruning", "toronto", "Graves 2011, Table 2 (deck: MDL and pruning)",
        "Pruning the weights whose posterior puts mass at zero (small |mu / sigma|) removes most of the network at little cost: 22.3 % of the weights kept, error 24.0 % before retraining against 23.8 % unpruned",
        "+0.84 % relative error (23.8 -> 24.0 %) at 22.3 % of the weights kept, before retraining (paper, TIMIT)",
        parts=(Part("error increase", pruning_increase("bayes_by_backprop_mnist_pruning.csv", 0.223), Near(100 * 0.2 / 23.8, 15.0, "lower")),),
        tolerance="15 % relative: about two binomial standard errors of our unpruned 1.7 % error on 10,000 images (0.26 pts), relative to it.",
        setting="proxy", setting_note="the Bayes-by-Backprop MNIST posterior of blundell-mnist pruned by |mu / sigma|, no retraining (Graves: an LSTM on TIMIT)",
        controlled=("controlled/bbb_mnist.md",),
    ),
    Claim(
        "kingma-lrt-variance", "toronto", "Kingma et al. 2015, Table 1 (deck: local reparameterization)",
        "The local reparameterization trick gives lower-variance gradients than sampling a weight matrix per minibatch and than sampling weights per data point",
        "e.g. top layer, epoch 10: 7.8e3 (local) < 1.4e4 (per data point) < 4.9e4 (per minibatch) (paper)",
        parts=tuple(Part(f"{cell}: local vs {label}", gradient_variance(_LRT, cell), Better(gradient_variance(other, cell), "lower", label))
                    for other, label in ((_STANDARD, "per minibatch"), (_SLOW, "per data point")) for cell in _CELLS),
        tolerance="Orderings with 95 % intervals from the standard error the table gives beside each variance, over its minibatch repeats (a chi-square error from the repeat count would understate it: the per-minibatch estimator's entries share one weight sample).",
        setting="general", setting_note="a 784-500-500-10 MLP with a mean-field Gaussian posterior and N(0, 1) prior (Kingma et al.: variational dropout posteriors, their own network)",
        context=(("top layer, epoch 10, ours over the paper's", published_ratio(_LRT, "top layer, epoch 10")), ("top layer, epoch 100, ours over the paper's", published_ratio(_LRT, "top layer, epoch 100"))),
        controlled=("controlled/local_reparam_variance_scale.md",),
    ),
    Claim(
        "kingma-variance-decreases", "toronto", "Kingma et al. 2015, Table 1 (deck: local reparameterization)",
        "Every estimator's gradient variance falls as training proceeds, from epoch 10 to epoch 100, in both layers",
        "e.g. local reparameterization, top layer: 7.8e3 at epoch 10 -> 1.2e3 at epoch 100 (paper)",
        parts=tuple(Part(f"{label}, {layer}: epoch 100 vs 10", gradient_variance(est, f"{layer}, epoch 100"), Better(gradient_variance(est, f"{layer}, epoch 10"), "lower", "epoch 10"))
                    for est, label in ((_LRT, "local"), (_SLOW, "per data point"), (_STANDARD, "per minibatch"), (_NONE, "no noise")) for layer in ("top layer", "bottom layer")),
        tolerance="As kingma-lrt-variance.",
        setting="proxy", setting_note="as kingma-lrt-variance",
        controlled=("controlled/local_reparam_variance_scale.md",),
    ),
    Claim(
        "kingma-lrt-speed", "toronto", "Kingma et al. 2015 (deck: local reparameterization, speed)",
        "The local reparameterization trick is over 200 times faster than drawing separate weights per data point (7.4 s against 1635 s)",
        "over ×200 (paper: 1635 s vs 7.4 s)",
        parts=(Part("per data point over local", estimator_speedup(_SLOW, _LRT), Threshold(200.0, "higher", "the paper's 'over 200 fold'")),),
        tolerance="The claim is a bound: at least ×200.",
        setting="proxy", setting_note="seconds per gradient estimate of a 784-500-500-10 MLP on a shared CPU (the paper: its own network and 2015 hardware)",
        controlled=("controlled/lrt_speed.md",),
    ),
    Claim(
        "louizos-bc-gnj", "toronto", "Louizos et al. 2017, Table 1 and the authors' code README (deck: Bayesian compression)",
        "BC-GNJ (group normal-Jeffreys) compresses LeNet-5-Caffe 108-fold by pruning and 361-fold with the inferred bit precision, at 1.0 % error",
        "1.0 % error, ×108 after pruning, ×361 with bit precision (paper)",
        parts=(Part("error", _bc("bc-gnj", "test_error", "%"), Near(1.0, binomial_tolerance(1.0), "lower")),
               Part("pruning ratio", _bc("bc-gnj", "compression_ratio", "×"), Near(108.0, 0.10, "higher", relative=True)),
               Part("ratio with bits", _bc("bc-gnj", "compression_with_bits", "×"), Near(361.0, 0.10, "higher", relative=True))),
        tolerance=f"Error {binomial_tolerance(1.0)} pts ({_MNIST_TOL}); ratios at least 90 % of the paper's (one seed).",
        setting="reduced", setting_note="200 epochs (the BC paper's count is not in our sources), group scales drawn per minibatch (the authors: per example); one seed",
    ),
    Claim(
        "louizos-bc-ghs", "toronto", "Louizos et al. 2017, Table 1 and the authors' code README (deck: Bayesian compression)",
        "BC-GHS (group horseshoe) compresses LeNet-5-Caffe 156-fold by pruning and 419-fold with the inferred bit precision, at 1.0 % error",
        "1.0 % error, ×156 after pruning, ×419 with bit precision (paper)",
        parts=(Part("error", _bc("bc-ghs", "test_error", "%"), Near(1.0, binomial_tolerance(1.0), "lower")),
               Part("pruning ratio", _bc("bc-ghs", "compression_ratio", "×"), Near(156.0, 0.10, "higher", relative=True)),
               Part("ratio with bits", _bc("bc-ghs", "compression_with_bits", "×"), Near(419.0, 0.10, "higher", relative=True))),
        tolerance="As louizos-bc-gnj.",
        setting="reduced", setting_note="as louizos-bc-gnj, tau0 = 1e-5",
    ),
    Claim(
        "kingma-welling-vae", "toronto", "Kingma & Welling 2014 (deck: variational autoencoders, 'Paper Results')",
        "A VAE trained by the reparameterised ELBO learns a smooth 2-D latent manifold of MNIST digits",
        "a figure of the learned 2-D latent space (paper; no number)",
        untestable="the deck gives no number to compare, and no 2-D-latent VAE is run here (our VAE, reproductions/vae_dsivi_prior.py, has 40 latent dimensions)",
    ),
)

#: every claim of the ledger, by work in :data:`WORKS`' order
CLAIMS: Tuple[Claim, ...] = DENG + OH + MOLCHANOV + SAGAR + TORONTO
