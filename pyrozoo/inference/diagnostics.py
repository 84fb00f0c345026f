r"""Run-time failure detection for :func:`~pyrozoo.inference.fit` and the samplers
(:meth:`~pyrozoo.inference.StochasticGradientMCMC.run`): a run that goes wrong says so,
with a warning of its own class, and records it in its history.

**Warnings.** Every warning is a :class:`RunWarning`; filter them together
(``warnings.simplefilter("error", RunWarning)`` turns any into an exception):

* :class:`DivergenceWarning` — the loss or chain diverged (status ``"diverged"``);
* :class:`PriorCollapseWarning` — the posterior collapsed onto the prior while the fit is at
  chance (status ``"collapsed"``);
* :class:`WeightCollapseWarning` — the importance weights of an importance-weighted objective
  collapsed onto one particle (status unchanged: the run's numbers are still a faithful
  measurement of what the objective did; the ``K`` particles just bought nothing);
* :class:`SpikeOnlyWarning` — an SG-MCMC-SA chain is at the spike-only fixed point (status
  ``"collapsed"``), and :class:`SpikeOnlyLeftWarning` when it leaves that state again (the
  earlier event no longer counts in the status: an event's ``clears`` names the kinds it ends).

A non-finite loss, log-joint or parameter ends the run with :class:`DivergenceError` (a
``FloatingPointError``): nothing after it is meaningful.

**Events.** Each kind warns once per run (once per episode, for a kind another event clears)
and is recorded as one event, a dict with ``kind``, ``status``, ``epoch``, ``step`` (optimizer
steps or sampler iterations so far), ``message`` and the figures the rule used. ``fit`` and
``run`` return their history with ``history.attrs["events"]`` and ``history.attrs["status"]``
(:func:`run_status`); the events
travel in checkpoints, so a resumed run keeps them. :func:`collect_events` gathers the events
of every run inside a block (an experiment's result row takes its ``status`` from them, and
:mod:`pyrozoo.reporting` leaves rows that are not ``"ok"`` out of every summary).

**The rules** are the small pure functions below, each stated with its threshold:

1. *Divergence.* (a) a non-finite loss / log-joint or parameter; (b) :func:`energy_blowup`:
   the energy (``fit``: the loss; a sampler: minus the log-joint) of a history row exceeds
   the lowest earlier energy, the run's first step included, by more than
   :data:`ENERGY_GROWTH` (10) times the largest magnitude it has had so far: an order of
   magnitude, which minibatch noise does not reach (a minibatch estimate of a sum over ``N``
   examples stays within a few standard errors of it, and the early magnitudes, taken at a
   random initialisation, bound the sum); ``fit`` compares only energies at the same KL
   weight (a KL warm-up raises the loss by design); (c) :func:`prediction_blowup`: for
   real-valued observations (a Gaussian likelihood), the squared error of the model's mean
   prediction exceeds :data:`PREDICTION_GROWTH` (100) times the mean square of the targets:
   predictions off by more than ten times the targets' own magnitude, a hundred times worse
   than the zero function. A sampler checks every history row, against 100 times its first
   step's ratio instead when that is larger (a network that starts far off badly scaled
   targets is judged against its own start); ``fit`` checks its predictive mean once, after
   the last epoch. Rule (c) catches a sampler whose step is too large and which escapes by
   shrinking a learned noise precision, so that its log-joint stays finite and moderate while
   its predictions explode: SGLD on Boston housing at 100 times the recipe's step (2e-3,
   20 epochs) has a log-joint within a factor of four of a healthy chain's, a squared error
   754 times the targets' mean square at epoch 8, and a test RMSE of 129.
2. *Importance-weight collapse* (:func:`weight_collapse`), checked by ``fit`` at the end of
   the run: the effective sample size :math:`1/\sum_k \hat w_k^2` of the normalised
   importance weights, averaged over the last quarter of the run's steps (at least
   :data:`ESS_READINGS`, 5: one step's ESS is a noisy function of ``K`` draws), is below
   :data:`ESS_COLLAPSE` (1.5). A guide that starts far from the posterior collapses the
   weights at first, harmlessly; what counts is the state the results come from. Since
   :math:`1/w_{\max} \le \mathrm{ESS} \le 1/w_{\max}^2`, an ESS below 1.5 means the largest
   particle holds more than two thirds of the weight: about one of ``K`` particles counts.
   An objective takes part by recording ``diagnostics["ess"]`` after each evaluation (as
   every importance-weighted objective of :mod:`pyrozoo.inference.importance_weighted` does,
   through :func:`~pyrozoo.inference.importance_weighted.weight_diagnostics`) and having
   ``num_particles``; ``fit`` knows nothing else about it.
3. *Prior collapse at chance* (:func:`prior_collapse`), checked by ``fit`` once at the end
   of the run on up to :data:`CHECK_EXAMPLES` training examples with :data:`CHECK_DRAWS`
   guide draws: the fit is *at chance* — classification: the training accuracy of the
   predictive mean is no better than always predicting the most frequent class, within
   :data:`CHANCE_SDS` (3) binomial standard deviations (:func:`classification_at_chance`);
   regression: the predictive mean's squared error is no better than the targets' variance
   within 3 standard deviations of that ratio, :math:`\sqrt{2/n}`
   (:func:`regression_at_chance`) — *and* the KL divergence from the guide to the prior is
   at most :data:`KL_COLLAPSE` (0.01 nats) per latent scalar. A fit that learned anything is
   above chance, so no healthy fit on data with signal triggers it; on data without signal
   (random labels) the prior is the right answer, which the message says. Models without a
   classification or real-valued observation site are not checked, nor guides whose KL
   cannot be evaluated site by site (the check's ``"check_skipped"`` event says why), nor
   guides whose KL does not depend on their parameters (``kl_fixed``): it is then a constant
   no optimizer moves (0 for the zero-mean layers of a variance network, whose dropout rate
   is infinite), so a fit at chance has not traded its likelihood for a smaller KL, and a
   KL warm-up would change nothing. Samplers have no guide and skip this rule.
"""

import math
import warnings
from contextlib import contextmanager
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.poutine.util import site_is_subsample

from pyrozoo.distributions.util import innermost

#: rule 1b: the energy's rise over its best, in units of its largest magnitude so far
ENERGY_GROWTH = 10.0
#: rule 1c: squared error of the mean prediction over the targets' mean square
PREDICTION_GROWTH = 100.0
#: rule 2: effective sample size below which the weights have collapsed
ESS_COLLAPSE = 1.5
#: rule 2: steps whose ESS is averaged before the rule is applied
ESS_READINGS = 5
#: rule 3: KL(q || p) per latent scalar (nats) at or below which the guide is the prior
KL_COLLAPSE = 0.01
#: rule 3: standard deviations of the chance-level margin
CHANCE_SDS = 3.0
#: rule 3: training examples and guide draws of fit's end-of-run check
CHECK_EXAMPLES = 2048
CHECK_DRAWS = 8

#: rule 4: SG-MCMC-SA's total inclusion probability (sum of rho) below which no weight is selected
SPIKE_ONLY_INCLUSION = 0.5
#: rule 4: the prior inclusion rate delta, times the number of weights, below which the prior
#: expects a hundredth of a weight in the slab. A chain that goes on to select can dip to about
#: 0.15 (n = 100, p = 200, three signals: delta 7e-4) before its weights reach the signals; at
#: the fixed point delta falls on geometrically (1e-9 within 4000 steps)
SPIKE_ONLY_RATE = 0.01

#: statuses by severity (a run's status is its most severe event's)
STATUSES = ("ok", "collapsed", "diverged")


class RunWarning(UserWarning):
    """A run went wrong at run time (base class of the warnings of this module)."""

    kind = "run"
    status: Optional[str] = None
    #: the kinds of earlier events an event of this class ends (see :func:`active_events`)
    clears: Tuple[str, ...] = ()


class DivergenceWarning(RunWarning):
    """The loss or the chain diverged; the run's results are not valid."""

    kind = "divergence"
    status = "diverged"


class WeightCollapseWarning(RunWarning):
    """The importance weights collapsed onto about one of the ``K`` particles."""

    kind = "weight_collapse"
    status = None


class PriorCollapseWarning(RunWarning):
    """The posterior collapsed onto the prior while the fit is at chance."""

    kind = "prior_collapse"
    status = "collapsed"


class SpikeOnlyWarning(RunWarning):
    """SG-MCMC-SA reached the spike-only fixed point: every weight in the spike, the prior
    inclusion rate collapsing; the chain selects nothing and its results are not a selection."""

    kind = "spike_only"
    status = "collapsed"
    clears = ("spike_only_left",)


class SpikeOnlyLeftWarning(RunWarning):
    """An SG-MCMC-SA chain reported at the spike-only fixed point left it: a weight is back in
    the slab (the fixed point is stable only while every weight stays within a few spike scales
    of zero; one weight far enough out makes Eq. 15 grow delta again). It clears the earlier
    :class:`SpikeOnlyWarning` from the run's status."""

    kind = "spike_only_left"
    status = None
    clears = ("spike_only",)


class DivergenceError(FloatingPointError):
    """A non-finite loss, log-joint or parameter: the run cannot go on.

    :ivar list events: the run's events, this one last.
    """

    def __init__(self, message: str, events: Sequence[dict] = ()):
        super().__init__(message)
        self.events = list(events)


#: the event lists of the active :func:`collect_events` blocks
_COLLECTORS: List[List[dict]] = []


@contextmanager
def collect_events():
    """Collects, in the list it yields, every event of every run (``fit``, the samplers)
    inside the block, a ``DivergenceError``'s too: what a caller that runs a whole experiment
    (training, then evaluation) needs to mark its result, ``run_status(events)``."""
    events: List[dict] = []
    _COLLECTORS.append(events)
    try:
        yield events
    finally:
        _COLLECTORS.remove(events)


def _publish(event: dict) -> None:
    for events in _COLLECTORS:
        events.append(dict(event))


def make_event(kind: str, status: Optional[str], *, epoch: Optional[int], step: Optional[int], message: str, clears: Sequence[str] = (), **figures) -> dict:
    """One event as plain data (checkpointable): tensors and floats become Python floats.
    ``clears``: the kinds of earlier events this one ends (they no longer count in the run's
    status, e.g. a chain that left the state an earlier event reported)."""
    event = {"kind": kind, "status": status, "epoch": epoch, "step": step, "message": message}
    if clears:
        event["clears"] = list(clears)
    for name, value in figures.items():
        event[name] = float(value) if isinstance(value, (float, torch.Tensor)) else value
    return event


def run_status(history_or_events) -> str:
    """``"ok"``, or the most severe status among a run's events (:data:`STATUSES`); takes the
    events or a history ``DataFrame`` from ``fit`` / ``run`` (its ``attrs["events"]``)."""
    events = getattr(history_or_events, "attrs", {}).get("events", []) if hasattr(history_or_events, "attrs") else history_or_events
    status = "ok"
    for event in active_events(events or ()):
        s = event.get("status")
        if s is not None and STATUSES.index(s) > STATUSES.index(status):
            status = s
    return status


def active_events(events: Sequence[dict]) -> List[dict]:
    """The events that still count: each without a later event that ``clears`` its kind."""
    active: List[dict] = []
    for event in events:
        cleared = set(event.get("clears", ()))
        active = [e for e in active if e["kind"] not in cleared]
        active.append(event)
    return active


def with_events(history, events: Sequence[dict]):
    """``history`` (a ``DataFrame``) with ``attrs["events"]`` and ``attrs["status"]`` set."""
    history.attrs["events"] = [dict(e) for e in events]
    history.attrs["status"] = run_status(events)
    return history


# -- the rules ------------------------------------------------------------------------------
def spike_only(rho_sums: Sequence[float], deltas: Sequence[float], num_weights: int, *, inclusion: float = SPIKE_ONLY_INCLUSION,
               rate: float = SPIKE_ONLY_RATE, min_rows: int = 4) -> Optional[dict]:
    """Rule 4: the spike-and-slab chain selects nothing and stays so. On each of the last
    quarter of the history rows (at least ``min_rows``), the inclusion probabilities summed to
    less than ``inclusion`` (not one weight half in the slab) and the prior inclusion rate
    ``delta`` was below ``rate / num_weights``. A chain that selects may pass through a state
    with no weight in the slab early on (every rho starts at 0.5 and the first expectation
    steps lower them all before the weights reach the signals), with delta well above that
    rate; at the fixed point, where Deng et al.'s Eq. 15 feeds delta from the rho and each
    expectation step pulls the weights further into the spike, delta falls on geometrically.
    Returns the figures of the newest row, or ``None``."""
    rows = len(rho_sums)
    window = max(min_rows, -(-rows // 4))
    if rows < window:
        return None
    recent = list(zip(rho_sums[-window:], deltas[-window:]))
    if all(r < inclusion and d < rate / num_weights for r, d in recent):
        return {"rho_sum": rho_sums[-1], "delta": deltas[-1], "num_weights": num_weights, "rows": window}
    return None


def spike_only_left(rho_sums: Sequence[float], *, inclusion: float = SPIKE_ONLY_INCLUSION, min_rows: int = 4) -> Optional[dict]:
    """Rule 4's way out: on each of the last ``min_rows`` history rows the inclusion
    probabilities summed to at least ``inclusion`` (a weight at least half in the slab, for
    long enough not to be one noisy row). Returns the figures of the newest row, or ``None``."""
    if len(rho_sums) < min_rows or not all(r >= inclusion for r in rho_sums[-min_rows:]):
        return None
    return {"rho_sum": rho_sums[-1], "rows": min_rows}


def energy_blowup(energy: float, best: Optional[float], scale: float, *, growth: float = ENERGY_GROWTH) -> Optional[dict]:
    """Rule 1b: ``energy`` rose above ``best`` (the lowest comparable earlier energy) by more
    than ``growth`` times ``scale`` (the largest earlier magnitude, at least one nat, so that
    an energy sitting at exactly zero can still move). Returns the figures, or ``None``."""
    if best is None:
        return None
    scale = max(scale, 1.0)
    rise = energy - best
    if rise > growth * scale:
        return {"energy": energy, "best": best, "scale": scale, "rise_over_scale": rise / scale}
    return None


def prediction_blowup(squared_error: float, squared_targets: float, *, initial_ratio: Optional[float] = None, growth: float = PREDICTION_GROWTH) -> Optional[dict]:
    """Rule 1c: the mean prediction's summed squared error over the targets' summed squares
    exceeds ``growth`` times the larger of 1 and ``initial_ratio``, the same ratio at the
    run's first step (a network whose initial outputs are already far off badly scaled
    targets is judged against its own start). Returns the figures, or ``None`` (also when the
    targets are all zero)."""
    if not squared_targets > 0:
        return None
    ratio = squared_error / squared_targets
    if ratio > growth * max(1.0, initial_ratio or 0.0):
        return {"squared_error_over_targets": ratio}
    return None


def weight_collapse(ess: Sequence[float], readings: Sequence[int], num_particles: Optional[int], *, threshold: float = ESS_COLLAPSE, min_readings: int = ESS_READINGS) -> Optional[dict]:
    """Rule 2 on the ``ess`` of consecutive history rows (oldest first), each the mean over
    ``readings`` steps: the mean ESS of the trailing rows that hold at least ``min_readings``
    steps is below ``threshold``. Returns the figures, or ``None`` (also with fewer readings,
    or fewer than two particles)."""
    if num_particles is None or num_particles < 2:
        return None
    total, count = 0.0, 0
    for value, n in zip(reversed(list(ess)), reversed(list(readings))):
        if value is None or not math.isfinite(value):
            return None
        total, count = total + value * n, count + n
        if count >= min_readings:
            mean = total / count
            return {"ess": mean, "num_particles": num_particles, "readings": count} if mean < threshold else None
    return None


def classification_at_chance(accuracy: float, majority_rate: float, n: int, *, sds: float = CHANCE_SDS) -> bool:
    """The accuracy on ``n`` examples is no better than always predicting the most frequent
    class (``majority_rate``, at least ``1 / num_classes``) plus ``sds`` binomial standard deviations."""
    return accuracy <= majority_rate + sds * math.sqrt(majority_rate * (1.0 - majority_rate) / n)


def regression_at_chance(mse: float, variance: float, n: int, *, sds: float = CHANCE_SDS) -> bool:
    """The mean prediction's squared error on ``n`` examples is no better than predicting the
    targets' mean (their ``variance``), within ``sds`` times the ratio's relative standard
    deviation :math:`\\sqrt{2/n}` (Gaussian residuals)."""
    if not variance > 0:
        return False
    return mse >= variance * (1.0 - sds * math.sqrt(2.0 / n))


def prior_collapse(kl_per_parameter: Optional[float], at_chance: bool, *, threshold: float = KL_COLLAPSE, kl_fixed: bool = False) -> bool:
    """Rule 3: at chance and ``KL(q || p)`` per latent scalar at most ``threshold``, the KL
    being one the guide's parameters move (not ``kl_fixed``: a constant cannot have pulled
    the guide onto the prior)."""
    return bool(at_chance) and not kl_fixed and kl_per_parameter is not None and kl_per_parameter <= threshold


# -- figures --------------------------------------------------------------------------------
def _is_real(support) -> bool:
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


def all_finite(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether every entry of every tensor is finite (one host synchronisation per device)."""
    by_device: Dict[torch.device, list] = {}
    for t in tensors:
        by_device.setdefault(t.device, []).append(torch.isfinite(t).all())
    return all(bool(torch.stack(flags).all()) for flags in by_device.values())


def observed_sites(trace) -> Iterable[dict]:
    """The observed sample sites of a model trace (not subsample sites)."""
    for site in trace.nodes.values():
        if site["type"] == "sample" and site["is_observed"] and not site_is_subsample(site):
            yield site


def prediction_errors(trace) -> Optional[Dict[str, torch.Tensor]]:
    """``squared_error`` (of each real-valued observation against its distribution's mean)
    and ``squared_targets`` summed over the trace's observed sites, as detached 0-d tensors
    (no host synchronisation); ``None`` without real-valued observations."""
    error = targets = None
    for site in observed_sites(trace):
        fn = site["fn"]
        if not _is_real(fn.support):
            continue
        try:
            mean = fn.mean
        except NotImplementedError:
            continue
        value = site["value"].detach()
        e, t = (value - mean.detach()).square().sum(), value.square().sum()
        error, targets = (e, t) if error is None else (error + e, targets + t)
    return None if error is None else {"squared_error": error, "squared_targets": targets}


def add_figures(total: Optional[Dict[str, torch.Tensor]], new: Optional[Dict[str, torch.Tensor]]) -> Optional[Dict[str, torch.Tensor]]:
    """``total + new`` entry by entry (either may be ``None``), on the device."""
    if new is None:
        return total
    if total is None:
        return dict(new)
    return {k: total[k] + v for k, v in new.items()}


def row_figures(parameters: Iterable[torch.Tensor], errors: Optional[Dict[str, torch.Tensor]] = None) -> dict:
    """The figures of one history row: ``parameters_finite`` and the row's summed
    :func:`prediction_errors`, read from the device."""
    figures = {"parameters_finite": all_finite(parameters)}
    if errors is not None:
        figures.update({k: float(v) for k, v in errors.items()})
    return figures


class RunMonitor:
    """Applies rules 1-3 to one run: :meth:`check` after every history row,
    :meth:`check_final` once after the last one; warns once per kind and keeps the events.

    :param str energy: the history column that is the energy (``fit``: ``"loss"``; a sampler:
        ``"log_joint"`` with ``sign=-1``).
    :param float sign: the energy is ``sign * row[energy]``.
    :param str group: a history column whose value must match for two rows' energies to be
        compared (``fit``: ``"kl_scale"``).
    :param int num_particles: ``K`` of an importance-weighted objective (rule 2), else ``None``.
    :param int readings_per_row: the steps each row's ``ess_mean`` (rule 2's column) averages.
    :param str name: the run in messages (``"fit"``, ``"SGLD"``).
    :param str hint: what to do about a divergence (the end of its message).
    :param bool rules: apply rules 1b-3 (``False``: record non-finite values only).
    """

    def __init__(self, *, energy: str, sign: float = 1.0, group: Optional[str] = None, num_particles: Optional[int] = None, readings_per_row: int = 1, name: str = "the run", hint: str = "", rules: bool = True):
        self.energy = energy
        self.sign = sign
        self.group = group
        self.num_particles = num_particles
        self.readings_per_row = readings_per_row
        self.name = name
        self.hint = hint
        self._hint = f": {hint}" if hint else ""
        self.rules = rules
        self.events: List[dict] = []
        self.initial: Optional[dict] = None  # the run's first step: its energy, group and prediction ratio
        self._best: Dict[object, float] = {}
        self._scale = 0.0
        self._seen = 0

    def state_dict(self) -> dict:
        """What a checkpoint keeps: the events and the first step's energy (the rest is read
        back from the history rows by :meth:`check`)."""
        return {"events": [dict(e) for e in self.events], "initial": dict(self.initial) if self.initial else None}

    def load_state_dict(self, state: Optional[dict]) -> None:
        state = state or {}
        self.events = [dict(e) for e in state.get("events", [])]
        for event in self.events:  # a resumed run's events are this run's
            _publish(event)
        self.initial = state.get("initial")
        if self.initial is not None:
            self._absorb_energy(self.initial["energy"], self.initial.get("group"))

    def _report(self, cls, *, epoch, step, message, **figures) -> dict:
        event = make_event(cls.kind, cls.status, epoch=epoch, step=step, message=message, clears=cls.clears, **figures)
        self.events.append(event)
        _publish(event)
        warnings.warn(cls(message), stacklevel=4)
        return event

    def report_once(self, cls, *, epoch, step, message, **figures) -> Optional[dict]:
        """Records and warns about an event of ``cls`` found by another rule (an
        :class:`~pyrozoo.inference.Adaptation`'s, e.g. :func:`spike_only`), unless one of its
        kind was reported already and no later event cleared it."""
        if self._reported(cls.kind):
            return None
        return self._report(cls, epoch=epoch, step=step, message=message, **figures)

    def _reported(self, kind: str) -> bool:
        return any(e["kind"] == kind for e in active_events(self.events))

    @staticmethod
    def _where(epoch, step) -> str:
        return f"at epoch {epoch}" + (f" (step {step})" if step is not None else "")

    def nonfinite(self, message: str, *, epoch, step) -> DivergenceError:
        """Rule 1a: records the event and returns the error to raise, with ``message``."""
        self.events.append(make_event(DivergenceWarning.kind, DivergenceWarning.status, epoch=epoch, step=step, message=message))
        _publish(self.events[-1])
        return DivergenceError(message, self.events)

    def check(self, history: Sequence[dict], figures: Optional[dict] = None, *, epoch: int, step: Optional[int] = None) -> None:
        """Rules 1b, 1c and 2 on the newest row ``history[-1]`` and its ``figures``
        (``squared_error``/``squared_targets`` of the row's steps, summed, for rule 1c;
        ``initial_energy`` and ``initial_group``, the monitored value of the run's very first
        step and its group, with the first row of a fresh run: rule 1b's earliest value;
        ``initial_squared_error`` / ``initial_squared_targets``: that step's, rule 1c's reference)."""
        if not self.rules:
            return
        figures = figures or {}
        if "initial_energy" in figures and self.initial is None:
            self.initial = {"energy": self.sign * float(figures["initial_energy"]), "group": figures.get("initial_group"), "prediction_ratio": None}
            if figures.get("initial_squared_targets", 0.0) > 0:
                self.initial["prediction_ratio"] = float(figures["initial_squared_error"]) / float(figures["initial_squared_targets"])
            self._absorb_energy(self.initial["energy"], self.initial["group"])
        for row in history[self._seen : len(history) - 1]:  # rows before the newest (a resume's too)
            self._absorb(row)
        row = history[-1]
        where = self._where(epoch, step)
        if not self._reported(DivergenceWarning.kind):
            energy = self.sign * float(row[self.energy])
            found = energy_blowup(energy, self._best.get(row.get(self.group)), self._scale)
            if found is not None:
                label = "loss" if self.sign > 0 else "negative log-joint"
                self._report(DivergenceWarning, epoch=epoch, step=step, rule="energy_blowup", **found, message=(
                    f"{self.name} diverged {where}: the {label} rose to {found['energy']:.4g}, above its best {found['best']:.4g} "
                    f"by {found['rise_over_scale']:.3g} times its largest earlier magnitude (rule: > {ENERGY_GROWTH:g}){self._hint}"))
        if not self._reported(DivergenceWarning.kind) and "squared_error" in figures:
            found = prediction_blowup(float(figures["squared_error"]), float(figures["squared_targets"]), initial_ratio=(self.initial or {}).get("prediction_ratio"))
            if found is not None:
                self._report(DivergenceWarning, epoch=epoch, step=step, rule="prediction_blowup", **found, message=(
                    f"{self.name} diverged {where}: the squared error of the model's mean prediction on the training targets "
                    f"is {found['squared_error_over_targets']:.3g} times their mean square (rule: > {PREDICTION_GROWTH:g}, or that "
                    f"many times the first step's ratio if larger; the predictions are off by more than ten times the targets' "
                    f"magnitude){self._hint}"))
        self._absorb(row)

    def _absorb(self, row: dict) -> None:
        self._absorb_energy(self.sign * float(row[self.energy]), row.get(self.group))
        self._seen += 1

    def _absorb_energy(self, energy: float, group) -> None:
        if math.isfinite(energy):
            self._best[group] = min(self._best.get(group, energy), energy)
            self._scale = max(self._scale, abs(energy))

    def check_final(self, history: Sequence[dict], figures: Optional[dict], *, epoch: int, step: Optional[int] = None) -> None:
        """After the last row: rule 2 on the history's ``ess_mean`` over the last quarter of
        the rows (a guide that starts far from the posterior collapses the weights at first,
        harmlessly: what counts is the state the results come from), and rules 1c and 3 on
        the end-of-run figures of :func:`posterior_check` (``None``: not checked)."""
        if not self.rules:
            return
        where = self._where(epoch, step)
        rows = list(history)
        if rows and "ess_mean" in rows[-1] and not self._reported(WeightCollapseWarning.kind):
            quarter = self.readings_per_row * max(1, len(rows) // 4)
            found = weight_collapse([r.get("ess_mean") for r in rows], [self.readings_per_row] * len(rows), self.num_particles, min_readings=max(ESS_READINGS, quarter))
            if found is not None:
                self._report(WeightCollapseWarning, epoch=epoch, step=step, **found, message=(
                    f"{self.name}: the importance weights collapsed {where}: effective sample size {found['ess']:.3g} of "
                    f"K = {self.num_particles} particles over the last {found['readings']} steps (rule: < {ESS_COLLAPSE:g}, "
                    "the largest weight holds more than two thirds of the total): the bound is about that of one particle; "
                    "a closer guide, fewer latent dimensions or more particles raise it"))
        if not figures:
            return
        if figures.get("skipped"):
            self.events.append(make_event("check_skipped", None, epoch=epoch, step=step, message=f"{self.name}: the end-of-run check did not run: {figures['skipped']}"))
            _publish(self.events[-1])
            return
        if not self._reported(DivergenceWarning.kind) and "squared_error" in figures:
            found = prediction_blowup(figures["squared_error"], figures["squared_targets"])
            if found is not None:
                self._report(DivergenceWarning, epoch=epoch, step=step, rule="prediction_blowup", **found, message=(
                    f"{self.name} diverged {where}: the squared error of the predictive mean on the training targets is "
                    f"{found['squared_error_over_targets']:.3g} times their mean square (rule: > {PREDICTION_GROWTH:g}){self._hint}"))
        chance = figures.get("at_chance")
        if chance is not None and not self._reported(PriorCollapseWarning.kind) and prior_collapse(figures.get("kl_per_parameter"), chance, kl_fixed=figures.get("kl_fixed", False)):
            shown = {k: v for k, v in figures.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if "accuracy" in figures:
                fit_text = f"training accuracy {figures['accuracy']:.3g} against {figures['majority_rate']:.3g} for always predicting the most frequent class"
            else:
                fit_text = f"squared error of the predictive mean {figures['mse']:.4g} against the targets' variance {figures['variance']:.4g}"
            self._report(PriorCollapseWarning, epoch=epoch, step=step, **shown, message=(
                f"{self.name}: the posterior collapsed onto the prior {where} while the fit is at chance: {fit_text} on "
                f"{figures['n']:g} training examples, KL(q || p) {figures['kl_per_parameter']:.3g} nats per latent scalar "
                f"(rule: at chance and <= {KL_COLLAPSE:g}). Unless the data carry no signal, the likelihood lost to the KL "
                "term: warm the KL weight up (kl_schedule=LinearKLWarmup(...)), start the guide narrower (init_scale) or "
                "use a prior that does not favour shrinking every weight"))


def posterior_check(model, guide, batch: Sequence[torch.Tensor], *, num_draws: int = CHECK_DRAWS) -> Optional[dict]:
    """The figures of rule 3 (and 1c) for ``fit``: ``num_draws`` guide draws, the model
    replayed on each at ``batch`` (``(x, y, idx)``), predictions averaged over draws.

    Returns ``None`` when the model has no classification (``Categorical``, ``Bernoulli``) or
    real-valued observation site, ``{"skipped": reason}`` when a guide's KL cannot be
    evaluated; otherwise ``n``, ``kl_per_parameter``, ``kl_fixed`` (whether no site's KL
    depends on a parameter of the guide: read off the first draw, traced with gradients),
    ``at_chance`` and the accuracy and majority rate (classification) or ``mse``,
    ``variance``, ``squared_error`` and ``squared_targets`` (regression). Draws random
    numbers: callers restore their random state.
    """
    from pyrozoo.inference.elbo import ClosedFormKL_ELBO  # the objective's own per-site KL rules

    kl_of = ClosedFormKL_ELBO()._kl
    probs, means, targets, kl, size = {}, {}, {}, 0.0, 0
    kl_fixed = True
    with torch.no_grad(), poutine.block():
        for draw in range(num_draws):
            # the first draw's guide keeps its graph: whether the KL moves with its parameters
            with torch.set_grad_enabled(draw == 0):
                guide_trace = poutine.trace(guide).get_trace(*batch)
            model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*batch)
            size = 0
            for name, site in model_trace.nodes.items():
                if site["type"] != "sample" or site["is_observed"] or site_is_subsample(site) or name not in guide_trace.nodes:
                    continue
                try:
                    with torch.set_grad_enabled(draw == 0):
                        site_kl = kl_of(guide_trace.nodes[name], site)
                except Exception as e:  # noqa: BLE001 - any guide whose KL needs more than its site
                    return {"skipped": f"the KL of site {name!r} cannot be evaluated on its own ({type(e).__name__}: {e})"}
                if draw == 0 and torch.is_tensor(site_kl) and site_kl.requires_grad:
                    kl_fixed = False
                kl = kl + float(site_kl)
                size += site["value"].numel()
            for site in observed_sites(model_trace):
                fn, name = innermost(site["fn"]), site["name"]
                targets[name] = site["value"]
                if isinstance(fn, torch.distributions.Categorical):
                    probs[name] = probs.get(name, 0.0) + fn.probs / num_draws
                elif isinstance(fn, torch.distributions.Bernoulli):
                    p = fn.probs
                    probs[name] = probs.get(name, 0.0) + torch.stack([1 - p, p], -1) / num_draws
                elif _is_real(site["fn"].support):
                    try:
                        means[name] = means.get(name, 0.0) + site["fn"].mean / num_draws
                    except NotImplementedError:
                        pass
    if not probs and not means:
        return None
    figures = {"kl_per_parameter": kl / num_draws / size if size else None, "kl_fixed": kl_fixed}
    if probs:
        correct = count = 0
        majority = 0.0
        for name, p in probs.items():
            y = targets[name].long().reshape(p.shape[:-1])
            correct += int((p.argmax(-1) == y).sum())
            count += y.numel()
            majority = max(majority, float(torch.bincount(y.reshape(-1)).max()) / y.numel())
        accuracy = correct / count
        figures.update(n=count, accuracy=accuracy, majority_rate=majority, at_chance=classification_at_chance(accuracy, majority, count))
    else:
        error = square = centred = 0.0
        count = 0
        for name, m in means.items():
            y = targets[name]
            error += float((y - m).square().sum())
            square += float(y.square().sum())
            centred += float((y - y.mean(0)).square().sum())
            count += y.numel()
        n = min(len(targets[name]) for name in means)
        mse, variance = error / count, centred / count
        figures.update(n=n, mse=mse, variance=variance, squared_error=error, squared_targets=square, at_chance=regression_at_chance(mse, variance, n))
    return figures
