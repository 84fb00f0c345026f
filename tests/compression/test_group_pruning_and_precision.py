"""Group pruning thresholds and bit precision from posterior variances."""

import math

import pytest
import torch

from pyrozoo.compression.group_pruning import group_masks, otsu_threshold, resolve_thresholds, weight_masks
from pyrozoo.compression.precision import compression_with_precision, exponent_bits, round_to_bits, significand_bits
from pyrozoo.guides.bayesian_compression import BayesianCompressionGuide
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, LeNet5
from pyrozoo.models.compression_priors import GroupNormalJeffreysPrior


def _gnj_guide():
    model = BayesianNeuralNetwork(LeNet5(), GroupNormalJeffreysPrior(), CategoricalLikelihood(dataset_size=10))
    guide = BayesianCompressionGuide(model)
    guide(torch.rand(2, 1, 28, 28), torch.tensor([0, 1]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in guide.weight_names:
            guide.log_sigma2[guide._sites[f"{w}.scale"].key].copy_(torch.randn(model.prior.num_groups(w), generator=g) * 4)
    return model, guide


@pytest.mark.parametrize("thresholds", [-3.0, [-1.0, 0.0, 1.0, -2.0], "auto"], ids=["scalar", "per-layer", "auto"])
def test_group_pruning_removes_exactly_the_groups_above_threshold(thresholds):
    model, guide = _gnj_guide()
    masks = group_masks(guide, thresholds)
    log_alphas = {w: guide.group_log_alpha(w) for w in guide.weight_names}
    resolved = resolve_thresholds(guide.weight_names, thresholds, log_alphas)
    for w in guide.weight_names:
        assert torch.equal(masks[w], log_alphas[w] < resolved[w])
    full = weight_masks(model.prior, masks)
    # linear layers: a pruned input feature removes its column; convolutions: a pruned filter
    assert torch.equal(full["fc1.weight"], masks["fc1.weight"].reshape(1, -1).expand(500, 800))
    assert torch.equal(full["conv2.weight"], masks["conv2.weight"].reshape(-1, 1, 1, 1).expand(50, 20, 5, 5))


def test_threshold_errors():
    model, guide = _gnj_guide()
    with pytest.raises(ValueError, match="4 layers"):
        group_masks(guide, [-3.0, -3.0])
    with pytest.raises(ValueError, match="NaN"):
        group_masks(guide, math.nan)
    with pytest.raises(ValueError, match="auto"):
        group_masks(guide, "median")
    with pytest.raises(KeyError):
        group_masks(guide, {"conv1.weight": -3.0})


def test_otsu_cuts_between_two_modes():
    g = torch.Generator().manual_seed(0)
    values = torch.cat([torch.randn(300, generator=g) * 0.5 - 6, torch.randn(100, generator=g) * 0.5 + 2])
    t = otsu_threshold(values)
    assert values[:300].max() < t < values[300:].min()
    assert otsu_threshold(torch.tensor([1.0])) == math.inf


def test_significand_bits():
    # bits t with 2^-t > 2 v, counted over t = 1..23, averaged over the layer and rounded up
    assert significand_bits(torch.tensor([2.0**-21])) == 19
    assert significand_bits(torch.tensor([2.0**-21, 2.0**-11])) == math.ceil((19 + 9) / 2)
    assert significand_bits(torch.tensor([0.0])) == 23
    assert significand_bits(torch.tensor([10.0])) == 0
    assert significand_bits(torch.tensor([])) == 0
    with pytest.raises(ValueError):
        significand_bits(torch.tensor([-1.0]))


@pytest.mark.parametrize("bits", [0, 3, 10])
def test_round_to_bits_keeps_the_relative_error_below_half_an_ulp(bits, dtype):
    g = torch.Generator().manual_seed(1)
    w = (torch.randn(1000, generator=g, dtype=torch.float64) * torch.exp(torch.randn(1000, generator=g, dtype=torch.float64) * 3)).to(dtype)
    r = round_to_bits(w, bits)
    assert ((r - w).abs() <= w.abs() * 2.0 ** -(bits + 1) * (1 + 1e-6)).all()
    mantissa, _ = torch.frexp(r)
    assert torch.equal(mantissa * 2.0 ** (bits + 1), torch.round(mantissa * 2.0 ** (bits + 1)))
    with pytest.raises(ValueError):
        round_to_bits(w, -1)


@pytest.mark.parametrize("bits, exponent", [(0, 1), (3, 2), (7, 3)])
def test_round_to_bits_with_a_bounded_exponent_is_the_charged_format(bits, exponent, dtype):
    """At most 2^(1 + exponent + bits) distinct values; half an ulp of relative error in the
    2^exponent - 1 normal binades below the largest magnitude, half the smallest normal
    binade's step of absolute error beneath them."""
    g = torch.Generator().manual_seed(2)
    w = (torch.randn(20000, generator=g, dtype=torch.float64) * torch.exp(torch.randn(20000, generator=g, dtype=torch.float64) * 2)).to(dtype)
    m = float(w.abs().max())
    r = round_to_bits(w, bits, exponent, m)
    assert len(torch.unique(r)) <= 2 ** (1 + exponent + bits)
    top = math.frexp(m)[1]
    lowest = top - (2**exponent - 2)
    normal = w.abs() >= 2.0 ** (lowest - 1)
    assert normal.any() and (~normal).any()
    assert ((r - w).abs()[normal] <= w.abs()[normal] * 2.0 ** -(bits + 1) * (1 + 1e-6)).all()
    assert ((r - w).abs()[~normal] <= 2.0 ** (lowest - bits - 2) * (1 + 1e-6)).all()
    assert torch.equal(r, round_to_bits(r, bits, exponent, m))  # representable values are fixed points
    assert torch.equal(round_to_bits(w, bits, 30, m), round_to_bits(w, bits))  # a wide exponent changes nothing
    for bad in (dict(exponent=0, max_magnitude=m), dict(exponent=2, max_magnitude=0.0), dict(exponent=2, max_magnitude=None)):
        with pytest.raises(ValueError):
            round_to_bits(w, bits, **bad)


def test_exponent_bits_and_ratio():
    assert exponent_bits(1e38) == math.ceil(math.log2(math.log2(1e38) + 1) + 1)
    assert exponent_bits(0.5) == exponent_bits(2.0) == 2
    assert exponent_bits(4.0) <= exponent_bits(1e6)
    with pytest.raises(ValueError):
        exponent_bits(math.inf)
    ratio = compression_with_precision({"a": 10, "b": 30}, {"a": 7, "b": 3}, 5, total_weights=1000)
    assert ratio == pytest.approx(32 * 1000 / (10 * (1 + 5 + 7) + 30 * (1 + 5 + 3)))
