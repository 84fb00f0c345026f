"""KL-weight schedules: Blundell et al.'s minibatch weights and linear warm-up."""

import math
from fractions import Fraction

import pytest

from pyrozoo.inference.schedules import BlundellKLReweighting, ConstantKL, KLSchedule, LinearKLWarmup


def _blundell_factors(M, epoch=0):
    s = BlundellKLReweighting()
    return [s(epoch, i, M) for i in range(M)]


@pytest.mark.parametrize("M", [1, 2, 3, 10, 50, 1000])
def test_blundell_weights_average_to_one(M):
    """The data plate scales each minibatch's likelihood by M, so the KL factor is M pi_i; the
    pi_i sum to one over an epoch, so the factors average to exactly one."""
    f = _blundell_factors(M)
    assert math.fsum(f) / M == pytest.approx(1.0, rel=1e-14)
    assert all(x > 0 for x in f)


@pytest.mark.parametrize("M", [1, 2, 5, 12, 40])
def test_blundell_weights_equal_the_paper_definition(M):
    """pi_i = 2^(M-i) / (2^M - 1), i = 1..M (Blundell et al. 2015, eq. 9), in exact rationals."""
    f = _blundell_factors(M)
    for i in range(1, M + 1):
        exact = M * Fraction(2 ** (M - i), 2**M - 1)
        assert f[i - 1] == pytest.approx(float(exact), rel=1e-14)


@pytest.mark.parametrize("M", [2, 10, 60])
def test_blundell_weights_are_geometric(M):
    f = _blundell_factors(M)
    for a, b in zip(f[:-1], f[1:]):
        assert b / a == pytest.approx(0.5, rel=1e-15)


def test_blundell_same_every_epoch():
    assert _blundell_factors(17, epoch=0) == _blundell_factors(17, epoch=5)


def test_blundell_no_overflow_for_many_batches():
    M = 10_000  # 2^M overflows a float; the weights must not
    f = _blundell_factors(M)
    assert all(math.isfinite(x) and x >= 0 for x in f)
    assert f[0] == pytest.approx(M / 2, rel=1e-14)
    assert math.fsum(f) / M == pytest.approx(1.0, rel=1e-14)
    assert f == sorted(f, reverse=True)


@pytest.mark.parametrize("batch,M", [(-1, 5), (5, 5), (0, 0), (3, 2)])
def test_blundell_batch_outside_the_epoch_raises(batch, M):
    with pytest.raises(ValueError, match="outside an epoch"):
        BlundellKLReweighting()(0, batch, M)


def test_linear_warmup_endpoints_and_midpoint():
    s = LinearKLWarmup(5, 20)
    M = 10
    assert s(0, 0, M) == 0.0 and s(4, 9, M) == 0.0 and s(5, 0, M) == 0.0
    assert s(12, 5, M) == pytest.approx(0.5)  # epoch 12.5 is halfway from 5 to 20
    assert s(20, 0, M) == 1.0 and s(35, 3, M) == 1.0


def test_linear_warmup_with_initial_weight():
    s = LinearKLWarmup(0, 4, initial=0.2)
    assert s(0, 0, 1) == pytest.approx(0.2)
    assert s(2, 0, 1) == pytest.approx(0.6)
    assert s(4, 0, 1) == 1.0 and s(9, 0, 1) == 1.0


def test_linear_warmup_is_monotone_and_rises_within_an_epoch():
    s = LinearKLWarmup(1, 3)
    M = 7
    values = [s(e, b, M) for e in range(5) for b in range(M)]
    assert all(b >= a for a, b in zip(values[:-1], values[1:]))
    assert all(0.0 <= v <= 1.0 for v in values)
    within = [s(2, b, M) for b in range(M)]
    assert len(set(within)) == M  # smooth, not a staircase per epoch
    # equally spaced steps inside the ramp
    steps = [b - a for a, b in zip(values[M:3 * M][:-1], values[M:3 * M][1:])]
    assert max(steps) == pytest.approx(min(steps))


@pytest.mark.parametrize("kwargs", [dict(start_epoch=5, end_epoch=5), dict(start_epoch=5, end_epoch=2), dict(initial=-0.1), dict(initial=1.5)])
def test_linear_warmup_invalid_arguments(kwargs):
    with pytest.raises(ValueError):
        LinearKLWarmup(**kwargs)


def test_constant_and_base_schedules():
    assert KLSchedule()(3, 2, 10) == 1.0
    assert ConstantKL(0.25)(0, 0, 1) == 0.25 and ConstantKL(0.25)(100, 9, 10) == 0.25
    assert ConstantKL(0.0)(0, 0, 1) == 0.0


@pytest.mark.parametrize("weight", [-0.5, float("nan"), float("inf")])
def test_constant_invalid_weight(weight):
    with pytest.raises(ValueError):
        ConstantKL(weight)


def test_repr_shows_arguments():
    assert repr(LinearKLWarmup(5, 20)) == "LinearKLWarmup(start_epoch=5.0, end_epoch=20.0, initial=0.0)"
