"""TensorBatches: every index once per epoch, reproducible order, saved/restored state."""

import pytest
import torch

from pyrozoo.data import TensorBatches

n = 30


def _data(device="cpu"):
    x = torch.arange(n * 2, dtype=torch.float32, device=device).reshape(n, 2)
    y = torch.arange(n, device=device) * 10
    return x, y


def _epoch(batches):
    return [idx.clone() for *_, idx in batches]


@pytest.mark.parametrize("batch_size", [1, 7, 10, 30, 100])
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffle", "ordered"])
def test_every_index_once_per_epoch(batch_size, shuffle, device):
    x, y = _data(device)
    batches = TensorBatches(x, y, batch_size=batch_size, shuffle=shuffle, seed=3)
    for _ in range(3):
        seen = []
        count = 0
        for bx, by, idx in batches:
            count += 1
            assert idx.device.type == device.type and bx.device.type == device.type
            assert len(idx) <= min(batch_size, n)
            assert torch.equal(bx, x[idx]) and torch.equal(by, y[idx])
            seen.extend(idx.tolist())
        assert sorted(seen) == list(range(n))
        assert count == len(batches) == -(-n // min(batch_size, n))
        if not shuffle:
            assert seen == list(range(n))


def test_epochs_are_reshuffled():
    batches = TensorBatches(*_data(), batch_size=7, seed=0)
    first, second = torch.cat(_epoch(batches)), torch.cat(_epoch(batches))
    assert not torch.equal(first, second)
    assert not torch.equal(first, torch.arange(n))


def test_order_is_reproducible_from_the_seed():
    a = TensorBatches(*_data(), batch_size=7, seed=11)
    b = TensorBatches(*_data(), batch_size=7, seed=11)
    c = TensorBatches(*_data(), batch_size=7, seed=12)
    for _ in range(3):
        ea, eb, ec = torch.cat(_epoch(a)), torch.cat(_epoch(b)), torch.cat(_epoch(c))
        assert torch.equal(ea, eb)
        assert not torch.equal(ea, ec)


def test_order_does_not_depend_on_the_global_rng():
    torch.manual_seed(0)
    a = torch.cat(_epoch(TensorBatches(*_data(), batch_size=7, seed=5)))
    torch.manual_seed(1)
    torch.randn(100)
    b = torch.cat(_epoch(TensorBatches(*_data(), batch_size=7, seed=5)))
    assert torch.equal(a, b)


def test_state_round_trip_reproduces_the_next_epochs():
    batches = TensorBatches(*_data(), batch_size=7, seed=4)
    _epoch(batches)  # one epoch consumed, as before a checkpoint
    state = batches.state_dict()
    expected = [torch.cat(_epoch(batches)) for _ in range(2)]
    restored = TensorBatches(*_data(), batch_size=7, seed=999)
    restored.load_state_dict(state)
    for order in expected:
        assert torch.equal(torch.cat(_epoch(restored)), order)


def test_restored_state_matches_uninterrupted_run():
    uninterrupted = TensorBatches(*_data(), batch_size=7, seed=4)
    orders = [torch.cat(_epoch(uninterrupted)) for _ in range(3)]
    first = TensorBatches(*_data(), batch_size=7, seed=4)
    _epoch(first)
    state = {k: v.clone() for k, v in first.state_dict().items()}
    resumed = TensorBatches(*_data(), batch_size=7, seed=None)
    resumed.load_state_dict(state)
    assert torch.equal(torch.cat(_epoch(resumed)), orders[1])
    assert torch.equal(torch.cat(_epoch(resumed)), orders[2])


@pytest.mark.parametrize("batch_size,expected_batches", [(7, 4), (10, 3), (30, 1), (31, 1)])
def test_drop_last(batch_size, expected_batches):
    batches = TensorBatches(*_data(), batch_size=batch_size, drop_last=True, seed=0)
    epoch = _epoch(batches)
    size = min(batch_size, n)
    assert len(epoch) == len(batches) == expected_batches
    assert all(len(idx) == size for idx in epoch)
    flat = torch.cat(epoch).tolist()
    assert len(set(flat)) == len(flat) == expected_batches * size


def test_to_device(device):
    batches = TensorBatches(*_data(), batch_size=7).to(device)
    for bx, by, idx in batches:
        assert bx.device.type == by.device.type == idx.device.type == device.type


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, "4", None])
def test_bad_batch_size_raises(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        TensorBatches(*_data(), batch_size=batch_size)


def test_bad_tensors_raise():
    with pytest.raises(ValueError, match="at least one tensor"):
        TensorBatches(batch_size=2)
    with pytest.raises(ValueError, match="different numbers of examples"):
        TensorBatches(torch.zeros(5), torch.zeros(6), batch_size=2)
    with pytest.raises(ValueError, match="empty"):
        TensorBatches(torch.zeros(0, 3), batch_size=2)
