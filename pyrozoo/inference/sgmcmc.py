r"""Stochastic-gradient MCMC on the log-joint of any Pyro model with a subsampled data plate.

The potential is the model's own minibatch log-joint: the model is conditioned on the
sampler's current values and traced on a minibatch, called as
:mod:`pyrozoo.inference.calling` reads off the model (``model(x, y, subsample=idx)`` with
``pyro.plate("data", N, subsample=idx)``, a plate with ``subsample_size``, or a full data
plate scaled for it); the plate scales the observations by ``N / n``, so

.. math::

    \tilde L(\beta) = \log p(\beta) + \frac{N}{n} \sum_{i \in S} \log p(y_i \mid x_i, \beta)
    = \texttt{trace.log\_prob\_sum()}

is unbiased for the full-data log posterior (Deng et al. 2019, Eq. 1). Constrained latent
sites are sampled in unconstrained space (with the log-Jacobian of ``biject_to``).

* :class:`SGLD` (Welling & Teh 2011; Deng et al. 2019, Eq. 2) and :class:`SGHMC` in the
  discretisation of Saatci & Wilson (2017) that Deng et al. (2019, Eq. 3) use, both with
  an inverse temperature :math:`\tau` that scales the injected noise only, so the chain
  targets :math:`\pi(\beta) \propto e^{\tau L(\beta)}`.
* :meth:`StochasticGradientMCMC.run` adds epochs over :class:`~pyrozoo.data.TensorBatches`,
  burn-in, thinning, sample sinks (memory or disk), a per-sample callback (online
  posterior averaging, :mod:`pyrozoo.inference.posterior_averaging`) and checkpoints.
* :class:`Adaptation` is the extension point for what happens inside a step besides the
  transition: stochastic approximation of prior hyperparameters
  (:mod:`pyrozoo.inference.sgmcmc_sa`), magnitude pruning
  (:mod:`pyrozoo.inference.pruning`).

No step reads a value back from the device: schedules are Python numbers, the log-joint
is returned as a tensor, and Pyro's validation (which checks for NaNs on the host) runs
on the first step only.
"""

import math
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import pandas as pd
import pyro
import torch
from pyro import poutine
from pyro.distributions import constraints
from pyro.distributions.transforms import biject_to
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.util import site_is_subsample

from pyrozoo.data.batching import TensorBatches
from pyrozoo.data.validation import check_finite
from pyrozoo.distributed import resolve as resolve_parallel
from pyrozoo.guides.initialization import init_to_network
from pyrozoo.inference.calling import ModelCall, batches_of
from pyrozoo.inference.diagnostics import RunMonitor, add_figures, prediction_errors, row_figures, with_events
from pyrozoo.inference.loop import EpochLoop
from pyrozoo.inference.sample_storage import DiskSamples, SampleSink
from pyrozoo.inference.step_sizes import ScheduleLike, as_schedule, checked_value
from pyrozoo.inference.trace_checks import check_observed_shapes, refuse_enumerated
from pyrozoo.models.improper import check_samplable
from pyrozoo.utils import set_seed

Values = Dict[str, torch.Tensor]


class Adaptation:
    """Something a sampler does inside every step besides the transition.

    The hooks, in the order a step calls them:

    * :meth:`conditions` — values of the sites this adaptation supplies (they are
      conditioned, not sampled; e.g. a noise precision tied to an SA-estimated scale);
    * :meth:`update` — after the transition, without gradients, with the step's trace
      (evaluated at the pre-step values) and the 1-based iteration ``k``.
    """

    def attach(self, model) -> None:
        """Called first when a sampler sets up, with the model it samples."""

    def conditioned_sites(self) -> Sequence[str]:
        return ()

    def setup(self, sampler: "StochasticGradientMCMC", trace) -> None:
        """Called once, after the sampler has traced the model on a first batch."""

    def conditions(self) -> Values:
        return {}

    def update(self, sampler: "StochasticGradientMCMC", trace, k: int) -> None:
        pass

    def check(self, row: dict) -> Optional[tuple]:
        """After each history ``row`` (with this adaptation's :meth:`logging` scalars in it):
        ``(warning class, message, figures)`` when the run has gone
        wrong in a way only this adaptation can see (reported once per run, and the run's
        status follows the warning's), else ``None``."""
        return None

    def logging(self) -> Dict[str, torch.Tensor]:
        """Scalars for the per-epoch history (read once per epoch)."""
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def _is_real(support) -> bool:
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support is constraints.real


class _LatentSite:
    """A sampled site: its unconstrained tensor and the map to its support (None: real)."""

    __slots__ = ("name", "transform", "unconstrained")

    def __init__(self, name: str, value: torch.Tensor, support):
        self.name = name
        if _is_real(support):
            self.transform = None
            unconstrained = value
        else:
            self.transform = biject_to(support)
            unconstrained = self.transform.inv(value)
        self.unconstrained = unconstrained.detach().clone().requires_grad_(True)

    def value(self) -> torch.Tensor:
        u = self.unconstrained
        return u if self.transform is None else self.transform(u)


def model_output(model, values: Values, *args, **kwargs):
    """The model's return value (a BNN's network output) with its latent sites set to
    ``values``, without recording anything."""
    with torch.no_grad(), poutine.block():
        return poutine.condition(model, data=values)(*args, **kwargs)


class StochasticGradientMCMC:
    """Base class of :class:`SGLD` and :class:`SGHMC`.

    :param model: a Pyro model called as ``model(*batch)``; every unobserved continuous
        sample site is sampled (parameters the model registers with ``pyro.param`` stay
        fixed). Initial values: the network's own parameter values where the model gives
        them (``site["infer"]["pyrozoo_init_value"]``), else the prior median, or
        ``init_values``.
    :param lr: the step size :math:`\\epsilon_k` (number or schedule).
    :param inverse_temperature: :math:`\\tau_k` (number or schedule; 1 is the posterior,
        larger is colder; a growing schedule is simulated annealing).
    :param adaptations: :class:`Adaptation` objects run inside every step, in order.
    :param init_values: initial values of some sites (constrained).
    """

    def __init__(
        self,
        model: Callable,
        *,
        lr: ScheduleLike,
        inverse_temperature: ScheduleLike = 1.0,
        adaptations: Sequence[Adaptation] = (),
        init_values: Optional[Values] = None,
    ):
        if not callable(model):
            raise TypeError("model must be a callable Pyro model")
        self.model = model
        self.lr = as_schedule(lr, "lr")
        self.inverse_temperature = as_schedule(inverse_temperature, "inverse_temperature")
        checked_value(self.lr, 1, "the step size lr")
        checked_value(self.inverse_temperature, 1, "the inverse temperature")
        for a in adaptations:
            if not isinstance(a, Adaptation):
                raise TypeError(f"adaptations must be Adaptation objects, got {type(a).__name__}")
        self.adaptations = list(adaptations)
        self.init_values = dict(init_values or {})
        self.num_steps = 0
        self._sites: Optional[List[_LatentSite]] = None
        self._conditioned = set()
        self._validated = False
        self._errors = None  # the last step's prediction errors (pyrozoo.inference.diagnostics)
        self._parallel = None  # a data-parallel run's ranks (set by run), and this rank's part size
        self._part_size = None

    # -- setup -----------------------------------------------------------------------------
    @property
    def is_setup(self) -> bool:
        return self._sites is not None

    def setup(self, *args, **kwargs) -> None:
        """Traces the model once on a batch to find its latent sites and initial values."""
        for a in self.adaptations:
            a.attach(self.model)
        self._conditioned = {name for a in self.adaptations for name in a.conditioned_sites()}
        conditions = {name: v for a in self.adaptations for name, v in a.conditions().items()}
        conditions.update(self.init_values)
        with torch.no_grad(), poutine.block(), InitMessenger(init_to_network):
            trace = poutine.trace(poutine.condition(self.model, data=conditions)).get_trace(*args, **kwargs)
        sites = []
        for name, site in trace.nodes.items():
            if site["type"] != "sample" or site_is_subsample(site) or name in self._conditioned:
                continue
            if site["is_observed"] and name not in self.init_values:
                continue
            fn = site["fn"]
            refuse_enumerated(type(self).__name__, name, site, " (with a guide), or marginalise it in the model (e.g. dist.MixtureSameFamily) "
                              "so that the sampler sees a continuous model")
            if fn.support.is_discrete:
                raise ValueError(
                    f"site {name!r} has discrete support ({fn.support}); stochastic-gradient MCMC samples "
                    "continuous latent variables only (for the spike-and-slab prior, use its empirical-Bayes "
                    "form: SpikeAndSlabPrior.empirical_bayes(...))"
                )
            check_samplable(type(self).__name__, name, fn)  # improper posteriors: refused, naming the fix
            value = site["value"]
            check_finite(f"initial value of site {name!r}", value)
            sites.append(_LatentSite(name, value, fn.support))
        if not sites:
            raise ValueError("the model has no latent continuous sample site to sample")
        unknown = sorted(set(self.init_values) - {s.name for s in sites})
        if unknown:
            raise ValueError(f"init_values name sites the model does not sample: {unknown} (sampled: {[s.name for s in sites]})")
        self._sites = sites
        self._build_momenta()
        for a in self.adaptations:
            a.setup(self, trace)

    def _build_momenta(self) -> None:
        pass

    # -- state -----------------------------------------------------------------------------
    @property
    def site_names(self) -> List[str]:
        self._require_setup()
        return [s.name for s in self._sites]

    def values(self) -> Values:
        """Current constrained values of the sampled sites (detached copies: the sampler
        updates its own tensors in place)."""
        self._require_setup()
        with torch.no_grad():
            return {s.name: s.value().detach().clone() for s in self._sites}

    def recorded_values(self) -> Values:
        """What a sample records: the sampled sites' values and the values adaptations
        condition on (e.g. a noise precision tied to an SA-estimated scale), so that
        replaying a sample through the model (``SampleGuide``, ``Predictive``) needs nothing else."""
        values = self.values()
        with torch.no_grad():
            for a in self.adaptations:
                values.update({name: v.detach() for name, v in a.conditions().items()})
        return values

    def unconstrained(self, name: str) -> torch.Tensor:
        """The tensor the sampler updates in place for site ``name`` (pruning masks it)."""
        self._require_setup()
        for s in self._sites:
            if s.name == name:
                return s.unconstrained
        raise KeyError(f"no sampled site {name!r}; sampled sites: {self.site_names}")

    def is_real(self, name: str) -> bool:
        """True when site ``name`` is real-valued (sampled without a transform)."""
        self.unconstrained(name)
        return next(s for s in self._sites if s.name == name).transform is None

    def momentum(self, name: str) -> Optional[torch.Tensor]:
        """The momentum buffer of site ``name`` (None for first-order samplers)."""
        return None

    def _require_setup(self):
        if self._sites is None:
            raise RuntimeError("call setup(*batch) (or run) first: the sampler has not seen the model yet")

    # -- one step --------------------------------------------------------------------------
    def log_joint(self, *args, **kwargs) -> Tuple[torch.Tensor, "pyro.poutine.Trace"]:
        """The minibatch log-joint at the current values (differentiable in them) and its trace."""
        self._require_setup()
        values = {s.name: s.value() for s in self._sites}
        data = dict(values)
        for a in self.adaptations:
            data.update(a.conditions())
        trace = poutine.trace(poutine.condition(self.model, data=data)).get_trace(*args, **kwargs)
        log_joint = trace.log_prob_sum()
        for s in self._sites:
            if s.transform is not None:
                log_joint = log_joint + s.transform.log_abs_det_jacobian(s.unconstrained, values[s.name]).sum()
        return log_joint, trace

    def step(self, *args, **kwargs) -> torch.Tensor:
        """One transition on the minibatch ``args``, then the adaptations; returns the
        (detached) log-joint at the pre-step values."""
        if self._sites is None:
            self.setup(*args, **kwargs)
        k = self.num_steps + 1
        lr = checked_value(self.lr, k, "the step size lr")
        tau = checked_value(self.inverse_temperature, k, "the inverse temperature")
        if self._validated:
            with pyro.validation_enabled(False):
                log_joint, trace = self.log_joint(*args, **kwargs)
        else:
            log_joint, trace = self.log_joint(*args, **kwargs)
            check_observed_shapes(trace)  # as Trace_ELBO: a target of another shape would broadcast silently
            if not torch.isfinite(log_joint):
                raise FloatingPointError(f"the log-joint of the first step is {float(log_joint)}: check the data, the initial values and the prior")
            self._validated = True
        params = [s.unconstrained for s in self._sites]
        grads = torch.autograd.grad(log_joint, params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        if self._parallel is not None:
            self._part_size = len(args[0])
            self._parallel.average_(grads, self._part_size)
        with torch.no_grad():
            self._transition(params, grads, lr, tau)
            for a in self.adaptations:
                a.update(self, trace, k)
        self.num_steps = k
        self._errors = prediction_errors(trace)  # the run's divergence check reads them (no host synchronisation)
        return log_joint.detach()

    def _transition(self, params: List[torch.Tensor], grads: List[torch.Tensor], lr: float, tau: float) -> None:
        raise NotImplementedError

    def average_over_ranks(self, statistic: torch.Tensor) -> torch.Tensor:
        """A minibatch estimate of this step (e.g. SA's residual sum of squares) averaged over
        the ranks of a data-parallel run with the gradients' weights, so that an adaptation's
        state stays the one-process state on every rank; ``statistic`` itself otherwise."""
        if self._parallel is None or self._part_size is None:
            return statistic
        out = statistic.detach().clone()
        self._parallel.average_([out], self._part_size)
        return out

    # -- checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        self._require_setup()
        return {
            "num_steps": self.num_steps,
            "unconstrained": {s.name: s.unconstrained.detach().clone() for s in self._sites},
            "adaptations": [a.state_dict() for a in self.adaptations],
        }

    def load_state_dict(self, state: dict) -> None:
        self._require_setup()
        with torch.no_grad():
            for s in self._sites:
                s.unconstrained.copy_(state["unconstrained"][s.name])
        for a, a_state in zip(self.adaptations, state["adaptations"]):
            a.load_state_dict(a_state)
        self.num_steps = int(state["num_steps"])

    # -- the loop --------------------------------------------------------------------------
    def run(
        self,
        data: Union[TensorBatches, Sequence[torch.Tensor]],
        *,
        epochs: Optional[int] = None,
        num_steps: Optional[int] = None,
        batch_size: Optional[int] = 128,
        burn_in: int = 0,
        thin: int = 1,
        sink: Optional[SampleSink] = None,
        on_sample: Optional[Callable[["StochasticGradientMCMC", int, float], None]] = None,
        stateful: Sequence[object] = (),
        device=None,
        seed: Optional[int] = None,
        checkpoint: Union[str, Path, None] = None,
        checkpoint_every: int = 1,
        resume: bool = True,
        progress: bool = True,
        log_every: Optional[int] = None,
        callback: Optional[Callable[[int, dict], Optional[bool]]] = None,
        distributed=None,
    ) -> pd.DataFrame:
        """Runs the chain over minibatches for ``epochs`` passes or ``num_steps`` iterations.

        Iteration ``k`` (1-based, counted over the whole run) is recorded when ``k > burn_in``
        and ``(k - burn_in) % thin == 0``: its values go to ``sink`` and
        ``on_sample(sampler, k, lr_k)`` is called (``lr_k`` is the step-size weight of
        Welling & Teh's average).

        :param data: ``(x, y)`` tensors (minibatches of ``batch_size`` with their indices;
            ``None``: all the data at each step), or a :class:`~pyrozoo.data.TensorBatches`
            yielding ``(x, y, idx)``. The model is called the way Pyro documents it, read off
            the model once (:mod:`pyrozoo.inference.calling`): ``model(x, y, subsample=idx)``,
            ``model(x, y)`` with a data plate (scaled by ``N / B``), or ``model(x, y)`` whose
            plate subsamples itself (given all the data; its own ``B`` per step).
        :param stateful: further objects with ``state_dict``/``load_state_dict`` to checkpoint
            with the chain (e.g. a :class:`~pyrozoo.inference.StepSizeWeightedAverage`).
        :param checkpoint: file for checkpoints at epoch ends (chain, adaptations, sink
            position, batch order, random states, history); an existing one is resumed
            from when ``resume``. Sample sinks are flushed at every checkpoint.
        :param log_every: iterations between history rows (default: one row per epoch);
            a row reads the device once.
        :param callback: ``f(epoch, row) -> stop?`` after each epoch's history row.
        :param distributed: several processes (:func:`pyrozoo.distributed.resolve`): by default
            one chain, data-parallel, when a process group of more than one process is
            initialised (averaged gradients, the same injected noise on every rank: the
            one-process chain; a disk sink records on rank 0 only);
            :class:`~pyrozoo.distributed.IndependentChains` for one chain per rank;
            ``False`` for one process regardless.
        :returns: history (``epoch, steps, log_joint, lr, inverse_temperature,
            seconds`` and the adaptations' scalars), with ``attrs["events"]`` and
            ``attrs["status"]``: a diverging chain (its negative log-joint, or its mean
            predictions of real-valued observations, blowing up: the rules of
            :mod:`pyrozoo.inference.diagnostics`) warns with ``DivergenceWarning``; a
            non-finite log-joint or value raises ``DivergenceError``.
        """
        if (epochs is None) == (num_steps is None):
            raise ValueError("give exactly one of epochs and num_steps")
        limit = epochs if epochs is not None else num_steps
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"epochs / num_steps must be a non-negative int, got {limit!r}")
        if log_every is not None and (not isinstance(log_every, int) or log_every < 1):
            raise ValueError(f"log_every must be a positive int or None, got {log_every!r}")
        for name, v in (("burn_in", burn_in), ("thin", thin), ("checkpoint_every", checkpoint_every)):
            if not isinstance(v, int) or v < (0 if name == "burn_in" else 1):
                raise ValueError(f"{name} must be an int >= {0 if name == 'burn_in' else 1}, got {v!r}")
        parallel = resolve_parallel(distributed, chains=True)
        if parallel is not None and getattr(parallel, "draws", "shared") != "shared":
            raise ValueError("one chain over the ranks needs the same injected noise on every rank (draws='shared'); for one chain per rank use IndependentChains")
        if parallel is not None and parallel.mode == "chains":
            seed = parallel.seed(seed)  # this chain's own seed
        if seed is not None:
            set_seed(seed)
        call, batches = batches_of(self.model, data, batch_size, seed, type(self).__name__, device=device)
        if parallel is not None:
            if call.kind != "subsample":
                raise ValueError(f"a chain over several ranks splits each minibatch by its indices, which a model called as {call.kind!r} "
                                 "does not take: write it as model(x, y, subsample=idx) with pyro.plate('data', N, subsample=idx)")
            batches = parallel.batches(batches, seed)
            if isinstance(sink, DiskSamples):
                if parallel.mode == "chains":
                    raise ValueError("independent chains record into memory (InMemorySamples): a DiskSamples folder would be written by every rank")
                sink = sink if parallel.is_main else None  # the same chain on every rank: rank 0 writes it
        if device is not None:
            batches.to(device)
        self._start(call, batches)
        steps_per_epoch = len(batches)
        total_epochs = epochs if epochs is not None else -(-num_steps // steps_per_epoch)
        total_steps = num_steps if num_steps is not None else epochs * steps_per_epoch
        if parallel is not None:
            parallel.synchronise_parameters([s.unconstrained for s in self._sites])

        def own_state():
            if sink is not None:
                sink.flush()  # the samples a checkpoint counts are on disk before it is written
            return {
                "sampler": self.state_dict(),
                "sink": sink.state_dict() if sink is not None else None,
                "stateful": [obj.state_dict() for obj in stateful],
            }

        loop = EpochLoop(
            batches,
            epochs=total_epochs,
            state=own_state,
            checkpoint=checkpoint,
            checkpoint_every=checkpoint_every,
            resume=resume,
            progress=progress,
            desc=type(self).__name__,
            monitor="log_joint",
            monitor_label="log-joint",
            hint="lower the step size or check the prior's hyperparameters",
            callback=callback,
            parallel=parallel,
            watch=RunMonitor(energy="log_joint", sign=-1.0, name=type(self).__name__, hint="lower the step size or check the prior's hyperparameters"),
        )
        saved = loop.load(map_location=batches.tensors[0].device)
        if saved is not None:
            self.load_state_dict(saved["sampler"])
            if sink is not None:
                sink.load_state_dict(saved["sink"])
            for obj, s in zip(stateful, saved["stateful"]):
                obj.load_state_dict(s)
        loop.restore()

        acc, count, t0, errors, initial = None, 0, time.perf_counter(), None, None

        def log_row(epoch):
            nonlocal acc, count, t0, errors, initial
            row = {
                "epoch": epoch, "steps": self.num_steps, "log_joint": float(acc) / count,
                "lr": self.lr(self.num_steps), "inverse_temperature": self.inverse_temperature(self.num_steps),
                "seconds": time.perf_counter() - t0,
            }
            for a in self.adaptations:
                row.update({key: float(v) for key, v in a.logging().items()})
            figures = row_figures((s.unconstrained for s in self._sites), errors)
            if initial is not None:  # the divergence rules' references: the chain's first step
                figures["initial_energy"] = float(initial[0])
                figures.update({f"initial_{k}": float(v) for k, v in (initial[1] or {}).items()})
                initial = None
            loop.record(row, where=f"by iteration {self.num_steps}", advance=count, figures=figures, step=self.num_steps)
            for a in self.adaptations:
                found = a.check(row)
                if found is not None:
                    cls, message, found_figures = found
                    loop.watch.report_once(cls, epoch=epoch, step=self.num_steps, message=f"{type(self).__name__}: {message}", **found_figures)
            acc, count, t0, errors = None, 0, time.perf_counter(), None
            return row

        def one_epoch(epoch):
            nonlocal acc, count, errors, initial
            for batch in batches:
                log_joint = self.step_on(call, batch)
                acc = log_joint if acc is None else acc + log_joint
                errors = add_figures(errors, self._errors)
                if self.num_steps == 1:
                    initial = (log_joint, self._errors)
                count += 1
                k = self.num_steps
                if k > burn_in and (k - burn_in) % thin == 0:
                    if sink is not None:
                        sink.append(self.recorded_values())
                    if on_sample is not None:
                        on_sample(self, k, self.lr(k))
                if log_every is not None and k % log_every == 0:
                    log_row(epoch + 1)
                if k >= total_steps:
                    break
            return log_row(epoch + 1) if log_every is None or (count and self.num_steps >= total_steps) else None

        self._parallel = parallel if parallel is not None and parallel.mode == "data" else None
        try:
            history = loop.run(one_epoch, finished=lambda: self.num_steps >= total_steps, total=total_steps, initial=min(self.num_steps, total_steps))
        finally:
            self._parallel = self._part_size = None
            if sink is not None:
                sink.flush()
        return with_events(pd.DataFrame(history), loop.events)

    def _start(self, call: ModelCall, batches: TensorBatches) -> tuple:
        """Sets the chain up on the first minibatch of ``batches`` (called the way ``call``
        says) and checks that its log-joint is scaled to the data set; returns that batch."""
        self._check_dataset_size(batches)
        call.data = tuple(batches.tensors[:2])
        first = next(iter(TensorBatches(*batches.tensors, batch_size=batches.batch_size, shuffle=False)))
        with call.handler(first):
            if not self.is_setup:
                self.setup(*call.args(first))
            if call.kind == "subsample":  # (the other conventions scale by construction)
                self._check_minibatch_scaling(first, batches.n)
        return first

    def step_on(self, call: ModelCall, batch: tuple) -> torch.Tensor:
        """:meth:`step` on the minibatch ``batch = (x, y, idx)``, called as ``call`` says."""
        with call.handler(batch):
            return self.step(*call.args(batch))

    def _check_dataset_size(self, batches: TensorBatches) -> None:
        likelihood = getattr(self.model, "likelihood", None)
        if likelihood is not None and getattr(likelihood, "dataset_size", 0) is None:
            likelihood.dataset_size = batches.n

    def _check_minibatch_scaling(self, batch, n_total: int) -> None:
        """A minibatch log-joint is unbiased only if the observations carry the N/n scale."""
        n = len(batch[0])
        if n >= n_total:
            return
        with torch.no_grad(), poutine.block():
            trace = poutine.trace(poutine.condition(self.model, data={**self.values(), **{k: v for a in self.adaptations for k, v in a.conditions().items()}})).get_trace(*batch)
        expected = n_total / n
        for name, site in trace.nodes.items():
            if site["type"] == "sample" and site["is_observed"] and name not in self.site_names and name not in self._conditioned and not site_is_subsample(site):
                scale = site["scale"]
                if not (isinstance(scale, (int, float)) and math.isclose(scale, expected, rel_tol=1e-6)):
                    raise ValueError(
                        f"observation site {name!r} has scale {scale!r} on a minibatch of {n} out of {n_total} "
                        f"examples; the log-joint needs the N/n = {expected:g} scale of pyro.plate(..., "
                        f"{n_total}, subsample=idx) around the observations"
                    )


class SGLD(StochasticGradientMCMC):
    r"""Stochastic gradient Langevin dynamics (Deng et al. 2019, Eq. 2):

    .. math::

        \beta^{(k+1)} = \beta^{(k)} + \epsilon_k \nabla_\beta \tilde L(\beta^{(k)})
            + \mathcal N(0, 2 \epsilon_k \tau_k^{-1}).
    """

    def _transition(self, params, grads, lr, tau):
        noise_scale = math.sqrt(2.0 * lr / tau)
        for p, g in zip(params, grads):
            p.add_(g, alpha=lr).add_(torch.randn_like(p), alpha=noise_scale)


class SGHMC(StochasticGradientMCMC):
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen et al. 2014; Deng et al. 2019,
    Eq. 3) in the discretisation of Saatci & Wilson (2017), whose hyperparameters are
    those of SGD with momentum:

    .. math::

        v \leftarrow (1 - \alpha)\, v + \epsilon_k \nabla_\beta \tilde L(\beta)
            + \mathcal N\big(0,\ 2 \epsilon_k (\alpha - \hat B) \tau_k^{-1}\big),
        \qquad \beta \leftarrow \beta + v,

    with friction :math:`\alpha = 1 - \text{momentum}` and gradient-noise estimate
    :math:`\hat B = \tfrac12 \hat V \epsilon_k` (``grad_noise_var`` :math:`= \hat V`,
    default 0). ``momentum=0`` is SGLD.

    :param float momentum: in ``[0, 1)``.
    :param float grad_noise_var: estimated variance of the stochastic gradient.
    """

    def __init__(self, model, *, lr, momentum: float = 0.9, grad_noise_var: float = 0.0, **kwargs):
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be a number in [0, 1), got {momentum!r}")
        if isinstance(grad_noise_var, bool) or not isinstance(grad_noise_var, (int, float)) or not (grad_noise_var >= 0 and math.isfinite(grad_noise_var)):
            raise ValueError(f"grad_noise_var must be a finite non-negative number, got {grad_noise_var!r}")
        self.momentum_coefficient = float(momentum)
        self.grad_noise_var = float(grad_noise_var)
        super().__init__(model, lr=lr, **kwargs)
        self._noise_variance(checked_value(self.lr, 1, "the step size lr"), 1)
        self._momenta: Dict[str, torch.Tensor] = {}

    def _noise_variance(self, lr: float, k: int) -> float:
        friction = 1.0 - self.momentum_coefficient
        b_hat = 0.5 * self.grad_noise_var * lr
        if b_hat >= friction:
            raise ValueError(
                f"at iteration {k} the gradient-noise estimate 0.5 * grad_noise_var * lr = {b_hat:g} is not below "
                f"the friction 1 - momentum = {friction:g}: lower lr or grad_noise_var"
            )
        return 2.0 * lr * (friction - b_hat)

    def _build_momenta(self):
        self._momenta = {s.name: torch.zeros_like(s.unconstrained, requires_grad=False) for s in self._sites}

    def momentum(self, name):
        self.unconstrained(name)  # raises a clear KeyError for unknown names
        return self._momenta[name]

    def _transition(self, params, grads, lr, tau):
        noise_scale = math.sqrt(self._noise_variance(lr, self.num_steps + 1) / tau)
        for s, p, g in zip(self._sites, params, grads):
            v = self._momenta[s.name]
            v.mul_(self.momentum_coefficient).add_(g, alpha=lr).add_(torch.randn_like(p), alpha=noise_scale)
            p.add_(v)

    def state_dict(self):
        state = super().state_dict()
        state["momenta"] = {name: v.clone() for name, v in self._momenta.items()}
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        for name, v in self._momenta.items():
            v.copy_(state["momenta"][name])
