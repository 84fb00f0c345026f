"""Structured pruning with radial-directional posteriors: statistic, thresholds, masks, export."""

import numpy as np
import pytest
import torch
from scipy import stats

from pyrozoo.compression import apply_masks, count_network, remove_pruned_units
from pyrozoo.compression.radial_directional import (
    gap_threshold,
    posterior_mean_weights,
    pruning_masks,
    pruning_statistics,
    radius_log_modes,
    widest_gap,
)
from pyrozoo.guides import RadialDirectionalGuide
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, RadialDirectionalPrior
from tests.stats import mean_tolerance


def _trained_looking(seed=0, pruned_rows=(1, 4), pruned_cols=(0, 3)):
    """An MLP 6-8-7-3 RDP model whose guide marks some units of the first layer as pruned
    (their local radius' log-normals pushed far down) and the rest spread over ~1 nat."""
    torch.manual_seed(seed)
    net = MLP(6, [8, 7], 3).double()
    model = BayesianNeuralNetwork(net, RadialDirectionalPrior(local_scale=0.1, global_scale=0.1), CategoricalLikelihood(dataset_size=100))
    guide = RadialDirectionalGuide(model, init_scale=0.05)
    guide(torch.randn(4, 6, dtype=torch.float64), torch.tensor([0, 1, 2, 0]))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, value in guide.locs.items():
            if "local" in key:
                value.add_(0.5 * torch.randn(value.shape, generator=g, dtype=value.dtype))
        guide.locs["0__weight__row_local_gamma"][list(pruned_rows)] -= 15.0
        guide.locs["0__weight__column_local_inverse_gamma"][list(pruned_cols)] -= 15.0
    return model, guide


def test_log_mode_of_the_radius_is_the_mode_of_its_density():
    model, guide = _trained_looking()
    group = model.prior.groups["2.weight"][0]  # rows of the second layer
    with torch.no_grad():
        guide.log_scales["2__weight__row_local_gamma"].fill_(np.log(0.7))
        guide.log_scales["2__weight__row_local_inverse_gamma"].fill_(np.log(1.3))
    log_mode = radius_log_modes(guide, group)
    mu_a, s_a = guide.log_normal_parameters(group.site("local_gamma"))
    mu_b, s_b = guide.log_normal_parameters(group.site("local_inverse_gamma"))
    for i in range(3):
        # r = sqrt(alpha beta) is log-normal: log r ~ N((mu_a + mu_b)/2, (s_a^2 + s_b^2)/4)
        r = stats.lognorm(s=float(0.5 * (s_a[i] ** 2 + s_b[i] ** 2).sqrt()), scale=float((0.5 * (mu_a[i] + mu_b[i])).exp()))
        grid = np.exp(np.linspace(float(log_mode[i]) - 2, float(log_mode[i]) + 2, 400_001))
        assert np.log(grid[np.argmax(r.pdf(grid))]) == pytest.approx(float(log_mode[i]), abs=1e-4)


@pytest.mark.parametrize("values", [
    torch.tensor([0.9, -12.5, -1.0, -14.0, 0.2]),  # unsorted tensor
    np.array([0.9, -12.5, -1.0, -14.0, 0.2]),
    np.sort([0.9, -12.5, -1.0, -14.0, 0.2])[::-1],  # a view with a negative stride
    [0.9, -12.5, -1.0, -14.0, 0.2],
])
def test_widest_gap_is_read_off_any_sequence_in_any_order(values):
    assert widest_gap(values) == (-12.5, -1.0)


@pytest.mark.parametrize("values", [[], [0.3], torch.tensor([[2.0]])])
def test_fewer_than_two_values_have_no_gap(values):
    assert widest_gap(values) is None


def test_gap_threshold():
    values = torch.tensor([-14.0, -13.2, -12.5, -1.0, -0.3, 0.2, 0.9])
    assert gap_threshold(values) == pytest.approx(-6.75)
    assert gap_threshold(torch.tensor([-1.0, -0.2, 0.5, 1.4])) == -float("inf")  # no gap: keep all
    assert gap_threshold(torch.tensor([0.3])) == -float("inf")


def test_masks_prune_the_collapsed_units_and_keep_output_rows():
    model, guide = _trained_looking()
    stats_ = pruning_statistics(model, guide)
    assert list(stats_) == ["0.weight.row", "0.weight.column", "2.weight.row", "2.weight.column", "4.weight.row", "4.weight.column"]
    group_masks, masks, thresholds = pruning_masks(model, guide, "gap", keep_rows=["4.weight"])
    assert torch.equal(group_masks["0.weight.row"], torch.tensor([True, False, True, True, False, True, True, True]))
    assert torch.equal(group_masks["0.weight.column"], torch.tensor([False, True, True, False, True, True]))
    assert bool(group_masks["4.weight.row"].all())
    assert thresholds["2.weight.row"] == -float("inf")  # no gap there
    m = masks["0.weight"]
    assert m.shape == (8, 6) and not m[1].any() and not m[:, 0].any() and m[0, 1]
    # a number or a list of thresholds, per grouping in order
    _, masks_all, _ = pruning_masks(model, guide, -100.0)
    assert all(bool(v.all()) for v in masks_all.values())
    with pytest.raises(ValueError):
        pruning_masks(model, guide, [0.0, 1.0])
    with pytest.raises(ValueError, match="gap"):
        pruning_masks(model, guide, "largest")


def test_posterior_mean_weights_match_monte_carlo():
    model, guide = _trained_looking()
    means = posterior_mean_weights(model, guide)
    groups = model.prior.groups["0.weight"]
    shape = model.net[0].weight.shape
    posteriors = {site: guide.posterior(site) for g in groups for site in [g.site(p) for p in ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma", "direction")]}
    n = 20000
    with torch.no_grad():
        factors = {}
        for g in groups:  # radius x direction of every draw, (n, groups, dim)
            log_r = sum(0.5 * posteriors[g.site(p)].sample((n,)).log().reshape(n, -1) for p in ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma"))
            factors[g.kind] = log_r.exp().unsqueeze(-1) * posteriors[g.site("direction")].sample((n,))
        # W_ij = (r_i u_i)_j (r_j u_j)_i for a linear layer's double grouping
        draws = factors["row"] * factors["column"].transpose(-1, -2)
    assert draws.shape == (n,) + tuple(shape)
    tol = mean_tolerance(draws.var(0), n, draws[0].numel())
    assert ((draws.mean(0) - means["0.weight"]).abs() <= tol + 1e-12).all()
    assert means["0.bias"].shape == (8,)


def test_export_removes_the_pruned_units_and_computes_the_same_function():
    model, guide = _trained_looking()
    _, masks, _ = pruning_masks(model, guide, "gap", keep_rows=["4.weight"])
    masked = apply_masks(model.net, masks, values=posterior_mean_weights(model, guide))
    x = torch.randn(20, 6, dtype=torch.float64)
    export = remove_pruned_units(masked, x[:1])
    torch.testing.assert_close(export.module(x), masked(x))
    counts = count_network(export.module, x[:1])
    assert counts.params_kept < count_network(model.net, x[:1]).params_total
    assert export.architecture[0] == 6  # rows 1 and 4 of the first layer are gone
