"""The epoch loop shared by :func:`~pyrozoo.inference.fit` and
:meth:`~pyrozoo.inference.StochasticGradientMCMC.run` (and anything later that trains in
epochs over :class:`~pyrozoo.data.TensorBatches`): checkpoints, random states, batch
order, history, progress bar, callback, run-time failure detection (non-finite values and the
rules of :mod:`pyrozoo.inference.diagnostics`) and interrupts."""

import copy
import math
from pathlib import Path
from typing import Callable, Dict, List, Optional, Union

from tqdm.auto import tqdm

from pyrozoo.data.batching import TensorBatches
from pyrozoo.distributed import checkpoint_for_this_process
from pyrozoo.inference.diagnostics import RunMonitor
from pyrozoo.serialization import load_state, save_state
from pyrozoo.utils import rng_states, rng_states_kept, set_rng_states

#: the entries of a checkpoint that :class:`EpochLoop` writes itself
LOOP_KEYS = ("epoch", "history", "batches", "rng", "distributed", "diagnostics")


class EpochLoop:
    """Runs epochs ``start_epoch, ..., epochs - 1`` of a caller's epoch function with
    everything around them. The caller keeps its own work (the steps of an epoch, its
    schedules) and its own state; the loop owns the rest.

    Use::

        loop = EpochLoop(batches, epochs=..., state=lambda: {"model": ...}, checkpoint=..., ...)
        saved = loop.load(map_location)  # the checkpoint's dict, or None (a fresh run)
        if saved is not None:
            ...                          # the caller restores its own entries of ``saved``
        loop.restore()                   # batch order and random states: last, just before run
        history = loop.run(one_epoch)    # the history rows (resumed ones first)

    The contract:

    * **Checkpoint file.** One :func:`~pyrozoo.serialization.save_state` dict, written
      atomically: ``epoch`` (epochs completed), ``history`` (the rows so far), ``batches``
      (the batch order's :meth:`~pyrozoo.data.TensorBatches.state_dict`), ``rng``
      (:func:`~pyrozoo.utils.rng_states`), ``diagnostics`` (the ``watch``'s events and
      first-step references), plus the entries ``state()`` returns (it must not use the
      names of :data:`LOOP_KEYS`). ``state()`` is called at every save (and, with
      ``snapshot_on_interrupt``, at every epoch end that is not saved), so anything to do
      before a save (flushing a sample sink) belongs in it.
    * **When it is written.** After epoch ``e`` (1-based) when ``e % checkpoint_every == 0``,
      ``e == epochs``, or ``finished()`` holds; and after the epoch whose row made the
      callback ask to stop. Never without ``checkpoint``.
    * **Resume.** :meth:`load` reads the file when ``resume`` and it exists, and sets
      :attr:`start_epoch` and :attr:`history` from it. :meth:`restore` then sets the batch
      order and the random states; call it after any set-up that draws random numbers, so
      that a resumed run continues bit for bit.
    * **History and progress.** The epoch function calls :meth:`record` for each row (one
      per epoch, or more); :meth:`record` raises
      :class:`~pyrozoo.inference.diagnostics.DivergenceError` (a ``FloatingPointError``) when
      the row's ``monitor`` column is not finite or its figures say a parameter is, appends
      the row, applies ``watch``'s rules to it (warnings and :attr:`events`, which
      checkpoints carry under ``diagnostics``), shows the column on the progress bar and advances it
      (by epochs by default: ``run(total=..., initial=...)`` and ``record(advance=...)``
      choose other units, e.g. steps).
    * **Callback.** ``callback(epoch, row) -> stop?`` (0-based ``epoch``) after each epoch
      whose function returned a row (``None``: no callback that epoch); a true answer saves
      and ends the run. Every random stream is restored after it (:func:`rng_states_kept`): a
      measurement taken during training must not change what training draws next, nor depend
      on how often it is taken; and the checkpoint, written before the callback, must resume
      to the same draws as the uninterrupted run.
    * **Early end.** ``finished()``, checked before each epoch and after it, ends the run
      (e.g. a step budget spent in the middle of an epoch).
    * **Interrupts.** A ``KeyboardInterrupt`` closes the bar and re-raises. With
      ``snapshot_on_interrupt`` it first writes the state of the last completed epoch when
      the file on disk is older (a deep copy kept at every epoch end that was not written),
      never the half-updated state of the epoch it cut short.
    * **Several processes** (``parallel``, :mod:`pyrozoo.distributed`). Rank 0 alone shows
      the bar and writes the checkpoint (a data-parallel run's state, or every independent
      chain's, gathered), which records the mode and the number of processes that a resume
      must match; each epoch starts with ``parallel.begin_epoch()`` and the run ends with
      ``parallel.end_run()`` (a data-parallel run gives every rank rank 0's random state);
      the ``monitor`` column is reduced over the ranks (their mean, or a chain's non-finite
      value) and the callback's answer too, so that every rank stops alike.

    :param batches: the minibatches whose order is checkpointed.
    :param int epochs: the total number of epochs (including those before a resume).
    :param state: ``() -> dict`` of the caller's own checkpoint entries.
    :param checkpoint: the checkpoint file (``None``: no checkpoints).
    :param int checkpoint_every: epochs between checkpoints.
    :param bool resume: continue from an existing ``checkpoint``.
    :param bool progress: show a progress bar.
    :param str desc: the progress bar's label.
    :param str monitor: the history column shown on the bar and checked to be finite.
    :param str monitor_label: its name in the error (default: ``monitor``).
    :param str hint: what to do about a non-finite value (the end of the error message).
    :param watch: a :class:`~pyrozoo.inference.diagnostics.RunMonitor` whose rules every row
        goes through (``None``: only the finiteness checks).
    :param callback: ``f(epoch, row) -> stop?``.
    :param bool snapshot_on_interrupt: the interrupt rule above.
    :param parallel: a :class:`pyrozoo.distributed.DataParallel` or
        :class:`~pyrozoo.distributed.IndependentChains` (``None``: one process).
    """

    def __init__(
        self,
        batches: TensorBatches,
        *,
        epochs: int,
        state: Callable[[], Dict[str, object]],
        checkpoint: Union[str, Path, None] = None,
        checkpoint_every: int = 1,
        resume: bool = True,
        progress: bool = True,
        desc: str = "",
        monitor: str = "loss",
        monitor_label: Optional[str] = None,
        hint: str = "",
        callback: Optional[Callable[[int, dict], Optional[bool]]] = None,
        snapshot_on_interrupt: bool = False,
        parallel=None,
        watch: Optional[RunMonitor] = None,
    ):
        if not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"epochs must be a non-negative int, got {epochs!r}")
        if not checkpoint_every >= 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every!r}")
        self.batches = batches
        self.epochs = epochs
        self.state = state
        self.checkpoint = Path(checkpoint) if checkpoint is not None else None
        self.checkpoint_every = checkpoint_every
        self.resume = resume
        self.parallel = parallel
        self.progress = progress and (parallel is None or parallel.is_main)
        self.desc = desc
        self.monitor = monitor
        self.monitor_label = monitor_label or monitor
        self.hint = hint
        self.callback = callback
        self.snapshot_on_interrupt = snapshot_on_interrupt
        self.start_epoch = 0
        self.history: List[dict] = []
        self.watch = watch if watch is not None else RunMonitor(energy=monitor, name=desc or "the run", hint=hint, rules=False)
        self._loaded: Optional[dict] = None
        self._snapshot: Optional[dict] = None
        self._bar = None

    # -- resume ----------------------------------------------------------------------------
    def load(self, map_location=None) -> Optional[dict]:
        """Reads the checkpoint (when ``resume`` and it exists): sets :attr:`start_epoch` and
        :attr:`history` and returns the whole dict, whose own entries the caller restores."""
        if self.checkpoint is None or not self.resume or not self.checkpoint.exists():
            return None
        saved = checkpoint_for_this_process(load_state(self.checkpoint, map_location=map_location), self.parallel, self.checkpoint)
        self._loaded = saved
        self.start_epoch, self.history = saved["epoch"], list(saved["history"])
        self.watch.load_state_dict(saved.get("diagnostics"))  # (checkpoints written before it have none)
        return saved

    def restore(self) -> None:
        """Sets the batch order and the random states of the loaded checkpoint (no-op without one)."""
        if self._loaded is not None:
            self.batches.load_state_dict(self._loaded["batches"])
            set_rng_states(self._loaded["rng"])

    # -- saving ----------------------------------------------------------------------------
    def checkpoint_state(self, epoch: int) -> dict:
        """The dict a checkpoint after ``epoch`` completed epochs holds."""
        own = self.state()
        clash = sorted(set(own) & set(LOOP_KEYS))
        if clash:
            raise ValueError(f"the caller's checkpoint entries use the loop's names {clash}")
        return {"epoch": epoch, "history": list(self.history), "diagnostics": self.watch.state_dict(), **own, "batches": self.batches.state_dict(), "rng": rng_states()}

    def save(self, epoch: int) -> None:
        """Writes the checkpoint after ``epoch`` completed epochs (no-op without a file)."""
        if self.checkpoint is None:
            return
        if self.parallel is None:
            save_state(self.checkpoint_state(epoch), self.checkpoint)
        else:
            self.parallel.save_checkpoint(lambda: self.checkpoint_state(epoch), self.checkpoint)
        self._snapshot = None

    # -- history ---------------------------------------------------------------------------
    @property
    def events(self) -> List[dict]:
        """The run's events (:mod:`pyrozoo.inference.diagnostics`), resumed ones first."""
        return self.watch.events

    def record(self, row: dict, *, where: str = "", advance: int = 1, figures: Optional[dict] = None, step: Optional[int] = None) -> dict:
        """Appends a history row after checking its ``monitor`` column is finite (``where``,
        e.g. ``"in epoch 3"``, places a non-finite value in the error) and, when ``figures``
        has ``parameters_finite``, the parameters; applies ``watch``'s rules to the row and
        its ``figures`` (``step``: steps so far, for the events); advances the bar."""
        value, note = row[self.monitor], ""
        if self.parallel is not None:
            value, note = self.parallel.reduce_monitor(value)
            if self.parallel.mode == "data":
                row[self.monitor] = value  # the same history on every rank
        epoch = row.get("epoch")
        if not math.isfinite(value):
            raise self.watch.nonfinite(f"the {self.monitor_label} became {value}{' ' + where if where else ''}{note}: {self.hint}", epoch=epoch, step=step)
        if figures is not None and figures.get("parameters_finite") is False:
            raise self.watch.nonfinite(f"a parameter became non-finite{' ' + where if where else ''}: {self.hint}", epoch=epoch, step=step)
        self.history.append(row)
        self.watch.check(self.history, figures, epoch=epoch, step=step)
        if self._bar is not None:
            self._bar.update(advance)
            self._bar.set_postfix({self.monitor: f"{value:.4g}"})
        return row

    # -- the loop --------------------------------------------------------------------------
    def run(
        self,
        epoch_fn: Callable[[int], Optional[dict]],
        *,
        finished: Optional[Callable[[], bool]] = None,
        total: Optional[int] = None,
        initial: Optional[int] = None,
    ) -> List[dict]:
        """Calls ``epoch_fn(epoch)`` (0-based; returns the row for the callback, or None) for
        the remaining epochs; returns :attr:`history`.

        :param finished: ``() -> bool``: the run is over (checked before and after each epoch).
        :param total: the progress bar's length (default: ``epochs``).
        :param initial: its starting position (default: ``start_epoch``).
        """
        done = finished if finished is not None else (lambda: False)
        self._bar = bar = tqdm(
            total=self.epochs if total is None else total,
            initial=self.start_epoch if initial is None else initial,
            disable=not self.progress,
            desc=self.desc,
            dynamic_ncols=True,
        )
        try:
            for epoch in range(self.start_epoch, self.epochs):
                if done():
                    break
                if self.parallel is not None:
                    self.parallel.begin_epoch()
                row = epoch_fn(epoch)
                completed = epoch + 1
                if completed % self.checkpoint_every == 0 or completed == self.epochs or done():
                    self.save(completed)
                elif self.snapshot_on_interrupt and self.checkpoint is not None and (self.parallel is None or self.parallel.snapshots):
                    state = self.checkpoint_state(completed)
                    self._snapshot = copy.deepcopy(state if self.parallel is None else self.parallel.mark(state))
                stop = False
                if self.callback is not None and row is not None:
                    with rng_states_kept():
                        stop = bool(self.callback(epoch, row))
                if self.parallel is not None and self.callback is not None:
                    stop = self.parallel.any(stop)
                if stop:
                    self.save(completed)
                    break
        except KeyboardInterrupt:
            bar.close()
            if self._snapshot is not None:
                save_state(self._snapshot, self.checkpoint)
                self._snapshot = None
            raise
        finally:
            bar.close()
            self._bar = None
        if self.parallel is not None:
            self.parallel.end_run()  # what follows the run (prediction) draws alike on every rank
        return self.history
