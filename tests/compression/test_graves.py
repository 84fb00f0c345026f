"""Graves-style pruning by |mu / sigma| on a small mean-field BNN."""

import math

import pyro.distributions as dist
import pyro.poutine as poutine
import pytest
import torch

from pyrozoo.compression.graves import PruningReport, graves_pruned, pruning_curve, signal_to_noise
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, NormalPrior

REAL_SITES = ["0.weight", "0.bias", "2.weight", "2.bias"]


def _setup(device="cpu", max_scale=None):
    torch.manual_seed(0)
    net = MLP(2, [3], 1).to(device)
    model = BayesianNeuralNetwork(net, NormalPrior(1.0), GaussianLikelihood(10, precision=dist.Gamma(2.0, 1.0)))
    x, y = torch.randn(10, 2, device=device), torch.randn(10, 1, device=device)
    guide = MeanFieldNormalGuide(model, max_scale=max_scale)
    guide(x, y)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in REAL_SITES:
            key = guide.sites()[name].key
            guide.locs[key].copy_(torch.randn(guide.locs[key].shape, generator=g))
            guide.log_scales[key].copy_(torch.rand(guide.log_scales[key].shape, generator=g) * 3 - 2)
    return model, guide, x, y


def _ratios(guide, max_scale=math.inf):
    out = {}
    for name in REAL_SITES:
        key = guide.sites()[name].key
        scale = guide.log_scales[key].detach().exp().clamp(max=max_scale)
        out[name] = guide.locs[key].detach().abs() / scale
    return out


def _snapshot(guide):
    return {k: (guide.locs[k].detach().clone(), guide.log_scales[k].detach().clone()) for k in guide.locs}


def _assert_restored(guide, snapshot):
    for k, (loc, log_scale) in snapshot.items():
        assert torch.equal(guide.locs[k], loc) and torch.equal(guide.log_scales[k], log_scale), k


@pytest.mark.parametrize("threshold", [0.0, 0.5, 1.0, 3.0, 1e6])
def test_prunes_exactly_the_low_snr_weights(threshold, device):
    model, guide, x, y = _setup(device)
    ratios = _ratios(guide)
    before = _snapshot(guide)
    with graves_pruned(guide, threshold) as report:
        trace = poutine.trace(guide).get_trace(x, y)
        for name in REAL_SITES:
            key = guide.sites()[name].key
            pruned = ratios[name] < threshold
            loc, log_scale = before[key]
            # pruned: an exact zero, also when sampled; kept: untouched
            assert (guide.locs[key][pruned] == 0).all()
            assert (trace.nodes[name]["value"][pruned] == 0).all()
            assert torch.equal(guide.locs[key][~pruned], loc[~pruned])
            assert torch.equal(guide.log_scales[key][~pruned], log_scale[~pruned])
            if (~pruned).any():
                assert (trace.nodes[name]["value"][~pruned] != 0).all()
        # the positive noise-precision site is not a weight: never pruned
        key = guide.sites()[GaussianLikelihood.PRECISION_SITE].key
        assert torch.equal(guide.locs[key], before[key][0])
    total = sum(r.numel() for r in ratios.values())
    kept = sum(int((r >= threshold).sum()) for r in ratios.values())
    assert isinstance(report, PruningReport)
    assert (report.weights_total, report.weights_kept, report.threshold) == (total, kept, threshold)
    assert report.fraction_kept == pytest.approx(kept / total)
    _assert_restored(guide, before)


def test_threshold_zero_prunes_nothing_and_huge_prunes_everything():
    _, guide, _, _ = _setup()
    with graves_pruned(guide, 0.0) as report:
        assert report.weights_kept == report.weights_total
    with graves_pruned(guide, math.inf) as report:
        assert report.weights_kept == 0


def test_guide_restored_after_exception():
    _, guide, _, _ = _setup()
    before = _snapshot(guide)
    params = {k: guide.locs[k] for k in guide.locs}
    with pytest.raises(RuntimeError, match="boom"):
        with graves_pruned(guide, 1.0):
            assert any((guide.locs[guide.sites()[n].key] == 0).any() for n in REAL_SITES)
            raise RuntimeError("boom")
    _assert_restored(guide, before)
    # restored in place: the same Parameter objects (an optimizer's references stay valid)
    assert all(guide.locs[k] is p for k, p in params.items())


def test_include_filter():
    _, guide, _, _ = _setup()
    ratios = _ratios(guide)
    before = _snapshot(guide)
    with graves_pruned(guide, 1.0, include=lambda name: name.endswith("weight")) as report:
        for name in ("0.bias", "2.bias"):
            key = guide.sites()[name].key
            assert torch.equal(guide.locs[key], before[key][0])
    assert report.weights_total == ratios["0.weight"].numel() + ratios["2.weight"].numel()
    assert report.weights_kept == int((ratios["0.weight"] >= 1).sum() + (ratios["2.weight"] >= 1).sum())


def test_ratio_uses_the_clipped_scale():
    _, guide, _, _ = _setup(max_scale=0.5)
    snr = signal_to_noise(guide)
    assert set(snr) == set(REAL_SITES)
    for name, ratio in _ratios(guide, max_scale=0.5).items():
        torch.testing.assert_close(snr[name], ratio)


def test_pruning_curve():
    _, guide, _, _ = _setup()
    ratios = _ratios(guide)

    def evaluate():
        return {"nonzero": sum(int((guide.locs[guide.sites()[n].key] != 0).sum()) for n in REAL_SITES)}

    curve = pruning_curve(guide, [0.5, 2.0], evaluate)
    assert list(curve.threshold) == [0.0, 0.5, 2.0]
    assert curve.fraction_kept.iloc[0] == 1.0
    for row in curve.itertuples(index=False):
        kept = sum(int((r >= row.threshold).sum()) for r in ratios.values())
        assert row.weights_kept == kept
        assert row.nonzero == kept  # the metric was evaluated on the pruned guide
    assert list(curve.weights_kept) == sorted(curve.weights_kept, reverse=True)


@pytest.mark.parametrize("threshold", [-0.1, float("nan")])
def test_invalid_threshold_raises(threshold):
    _, guide, _, _ = _setup()
    before = _snapshot(guide)
    with pytest.raises(ValueError, match="non-negative"):
        with graves_pruned(guide, threshold):
            pass
    _assert_restored(guide, before)


def test_needs_a_mean_field_guide():
    model, _, x, y = _setup()
    guide = DeltaGuide(model)
    guide(x, y)
    with pytest.raises(TypeError, match="MeanFieldNormalGuide"):
        with graves_pruned(guide, 1.0):
            pass


def test_no_selected_site_raises():
    _, guide, _, _ = _setup()
    with pytest.raises(ValueError, match="no real-valued site"):
        signal_to_noise(guide, include=lambda name: False)
