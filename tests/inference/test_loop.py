"""EpochLoop, the loop core of fit and the samplers, on a trivial step: checkpoint cadence,
exact resume (history, batch order, random states), callback and early stops, the interrupt
snapshot, non-finite rows."""

import pytest
import torch

import pyrozoo.inference.loop as loop_module
from pyrozoo.data import TensorBatches
from pyrozoo.inference.loop import EpochLoop
from pyrozoo.serialization import load_state


class Toy:
    """A "model" whose epoch draws random numbers and depends on the batch order; its state
    entry is the live tensor it updates in place (as a module's ``state_dict()`` is)."""

    def __init__(self):
        self.total = torch.zeros(())

    def epoch(self, loop, batches, epoch, fail_at=None):
        for b, (x, idx) in enumerate(batches):
            if (epoch, b) == fail_at:
                raise KeyboardInterrupt
            self.total += (x * torch.rand(x.shape)).sum() * (b + 1)
        return loop.record({"epoch": epoch + 1, "loss": float(self.total)}, where=f"in epoch {epoch}")


def _run(epochs, checkpoint=None, *, callback=None, finished=None, fail_at=None, **kwargs):
    torch.manual_seed(0)
    batches = TensorBatches(torch.arange(10.0), batch_size=3, seed=1)
    toy = Toy()
    loop = EpochLoop(batches, epochs=epochs, state=lambda: {"total": toy.total}, checkpoint=checkpoint, progress=False, callback=callback, **kwargs)
    torch.manual_seed(123)  # a resumed run's random state comes from the file, not from here
    saved = loop.load()
    if saved is not None:
        toy.total = saved["total"].clone()
    loop.restore()
    history = loop.run(lambda e: toy.epoch(loop, batches, e, fail_at), finished=finished if finished is None else (lambda: finished(toy, loop)))
    return toy, history


@pytest.fixture
def saves(monkeypatch):
    """The epoch of every checkpoint written."""
    written = []
    real = loop_module.save_state

    def save(state, path):
        written.append(state["epoch"])
        return real(state, path)

    monkeypatch.setattr(loop_module, "save_state", save)
    return written


def test_checkpoints_every_k_epochs_and_at_the_end(tmp_path, saves):
    _, history = _run(5, tmp_path / "ck.pt", checkpoint_every=2)
    assert saves == [2, 4, 5]
    assert [row["epoch"] for row in history] == [1, 2, 3, 4, 5]
    saved = load_state(tmp_path / "ck.pt")
    assert set(saved) == {"epoch", "history", "diagnostics", "batches", "rng", "total"}
    assert saved["epoch"] == 5 and saved["history"] == history


def test_no_checkpoint_file_no_saves(saves):
    _run(3)
    assert saves == []


def test_a_resumed_run_continues_bit_for_bit(tmp_path):
    straight, straight_history = _run(6)
    _run(4, tmp_path / "ck.pt", checkpoint_every=2)
    resumed, history = _run(6, tmp_path / "ck.pt")
    assert history == straight_history  # the resumed history starts with the saved rows
    assert torch.equal(resumed.total, straight.total)


def test_resume_false_starts_afresh(tmp_path):
    _run(2, tmp_path / "ck.pt")
    _, history = _run(3, tmp_path / "ck.pt", resume=False)
    assert [row["epoch"] for row in history] == [1, 2, 3]


def test_the_callback_stops_and_saves(tmp_path, saves):
    calls = []

    def stop_after_second(epoch, row):
        calls.append((epoch, row["epoch"]))
        return epoch == 1

    _, history = _run(6, tmp_path / "ck.pt", checkpoint_every=100, callback=stop_after_second)
    assert calls == [(0, 1), (1, 2)] and len(history) == 2
    assert saves == [2]


def _drawing_callback(epoch, row):
    """A measurement taken during training that draws (a test-time average, say) and reseeds."""
    torch.manual_seed(epoch)
    torch.rand(7)


def test_a_callback_that_draws_moves_no_random_stream_of_training(tmp_path):
    plain, plain_history = _run(5)
    observed, observed_history = _run(5, callback=_drawing_callback)
    assert torch.equal(observed.total, plain.total) and observed_history == plain_history
    # and the checkpoint (written before the callback) resumes to the uninterrupted run's draws
    _run(3, tmp_path / "ck.pt", callback=_drawing_callback)
    resumed, _ = _run(5, tmp_path / "ck.pt", callback=_drawing_callback)
    assert torch.equal(resumed.total, plain.total)


def test_finished_ends_the_run_and_saves(tmp_path, saves):
    _, history = _run(6, tmp_path / "ck.pt", checkpoint_every=100, finished=lambda toy, loop: len(loop.history) >= 3)
    assert len(history) == 3 and saves == [3]


def test_an_epoch_without_a_row_gets_no_callback():
    calls = []
    batches = TensorBatches(torch.arange(4.0), batch_size=2)
    loop = EpochLoop(batches, epochs=3, state=dict, progress=False, callback=lambda e, row: calls.append(e))
    assert loop.run(lambda epoch: None) == [] and calls == []


@pytest.mark.parametrize("snapshot", [True, False])
def test_an_interrupt_saves_the_last_completed_epoch_only_with_snapshots(tmp_path, snapshot):
    straight, _ = _run(5)
    ckpt = tmp_path / "ck.pt"
    with pytest.raises(KeyboardInterrupt):
        _run(5, ckpt, checkpoint_every=100, fail_at=(2, 1), snapshot_on_interrupt=snapshot)
    if not snapshot:
        assert not ckpt.exists()
        return
    saved = load_state(ckpt)
    assert saved["epoch"] == 2 and len(saved["history"]) == 2  # not the half-done third epoch
    resumed, _ = _run(5, ckpt)
    assert torch.equal(resumed.total, straight.total)


def test_an_interrupt_after_a_saved_epoch_keeps_the_file(tmp_path, saves):
    with pytest.raises(KeyboardInterrupt):
        _run(5, tmp_path / "ck.pt", checkpoint_every=1, fail_at=(2, 0), snapshot_on_interrupt=True)
    assert saves == [1, 2] and load_state(tmp_path / "ck.pt")["epoch"] == 2


def test_a_non_finite_row_is_an_error():
    batches = TensorBatches(torch.arange(4.0), batch_size=2)
    loop = EpochLoop(batches, epochs=2, state=dict, progress=False, monitor="log_joint", monitor_label="log-joint", hint="lower the step size")
    with pytest.raises(FloatingPointError, match=r"the log-joint became nan by iteration 7: lower the step size"):
        loop.run(lambda epoch: loop.record({"log_joint": float("nan")}, where="by iteration 7"))
    assert loop.history == []


def test_the_callers_entries_may_not_shadow_the_loops(tmp_path):
    batches = TensorBatches(torch.arange(4.0), batch_size=2)
    loop = EpochLoop(batches, epochs=1, state=lambda: {"epoch": 0}, checkpoint=tmp_path / "ck.pt", progress=False)
    with pytest.raises(ValueError, match="epoch"):
        loop.run(lambda epoch: None)


@pytest.mark.parametrize("kwargs", [{"epochs": -1}, {"epochs": 1.5}, {"epochs": 2, "checkpoint_every": 0}])
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        EpochLoop(TensorBatches(torch.arange(4.0), batch_size=2), state=dict, **kwargs)
