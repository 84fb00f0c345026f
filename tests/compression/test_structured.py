"""Structured export: removing pruned units gives a smaller network with the same outputs."""

import pytest
import torch
from torch import nn

from pyrozoo.compression import InputSelection, apply_masks, count_network, remove_pruned_units, to_sparse
from tests.compression.cases import NETWORKS, random_masks


def _tolerance(out):
    return 1e-5 * (1 + out.abs().max().item())


@pytest.mark.parametrize("arch", sorted(NETWORKS))
@pytest.mark.parametrize("keep", [0.05, 0.3, 1.0])
def test_exported_model_equals_masked_model(arch, keep, device):
    torch.manual_seed(0)
    factory, shape = NETWORKS[arch]
    net = factory().to(device)
    masks = {k: v.to(device) for k, v in random_masks(net, keep, torch.Generator().manual_seed(3)).items()}
    x = torch.rand(16, *shape, device=device)
    masked = apply_masks(net, masks)
    export = remove_pruned_units(net, x[:4], masks)
    expected = masked(x)
    assert (export.module(x) - expected).abs().max() <= _tolerance(expected)
    # unstructured sparse storage of the exported network: still the same function
    assert (to_sparse(export.module)(x) - expected).abs().max() <= _tolerance(expected)
    before = count_network(masked, x[:1])
    after = count_network(export.module, x[:1])
    assert after.params_total <= before.params_total
    assert after.params_kept <= before.params_kept
    assert after.dense_flops <= before.dense_flops
    # the stored-weight masks pick out of the masked network exactly the export's weights
    masked_weights = dict(masked.named_parameters())
    export_weights = [m.weight for m in export.module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    assert list(export.stored_weights) == [f"{n}.weight" for n in export_names(net)]
    for (name, stored), exported, layer in zip(export.stored_weights.items(), export_weights, after.layers):
        assert stored.shape == masked_weights[name].shape
        assert int(stored.sum()) == layer.weights_kept
        assert torch.equal(masked_weights[name][stored].sort().values, exported[exported != 0].sort().values)
    # per-layer sparsity of the export against the dense layers: never below the masked
    # network's (removed units take their dead weights with them), and consistent with the totals
    dense = count_network(net, x[:1])
    sparsity = after.per_layer_sparsity(dense)
    assert all(s_after >= s_before - 1e-9 for s_after, s_before in zip(sparsity, before.per_layer_sparsity()))
    assert after.to_frame(dense).sparsity_percent.tolist() == sparsity
    kept = [layer.weights_total * (1 - s / 100) for layer, s in zip(dense.layers, sparsity)]
    assert sum(kept) == pytest.approx(after.params_kept)
    with pytest.raises(ValueError, match="layers"):
        after.per_layer_sparsity(count_network(nn.Linear(3, 2), torch.rand(1, 3)))


@pytest.mark.parametrize("arch", ["mlp", "lenet300", "lenet5"])
def test_pruned_units_are_removed(arch):
    """Units without outgoing weights go; units without incoming weights are folded into the
    next layer's bias and go (no padding in these networks); nothing else goes."""
    factory, shape = NETWORKS[arch]
    net = factory()
    masks = {n: torch.ones_like(p, dtype=torch.bool) for n, p in net.named_parameters() if n.endswith("weight")}
    names = list(masks)
    first_out = masks[names[0]].shape[0]
    masks[names[0]][[0, 2]] = False  # constant units 0 and 2
    block = masks[names[1]].shape[1] // first_out
    masks[names[1]][:, block * 5 : block * 7] = False  # units 5 and 6 unused
    x = torch.rand(4, *shape)
    export = remove_pruned_units(net, x, masks)
    kept = export.kept_units[export_names(net)[0]].tolist()
    assert kept == [i for i in range(first_out) if i not in (0, 2, 5, 6)]
    assert export.folded_units == {export_names(net)[1]: 2}
    for name in export_names(net)[1:]:
        assert len(export.kept_units[name]) == net.get_submodule(name).weight.shape[0]


def export_names(net):
    return [n for n, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]


def test_padded_convolution_keeps_constant_channels():
    """With padding, a constant channel is not constant at the borders of the next
    convolution's input: it must stay (the export is still exact)."""
    factory, shape = NETWORKS["padded-conv"]
    net = factory()
    masks = {n: torch.ones_like(p, dtype=torch.bool) for n, p in net.named_parameters() if n.endswith("weight")}
    masks["conv1.weight"][1] = False  # constant channel, read by conv2 (no padding): folded
    masks["conv2.weight"][2] = False  # constant channel, read by fc: folded
    x = torch.rand(8, *shape)
    export = remove_pruned_units(net, x, masks)
    assert 1 not in export.kept_units["conv1"].tolist()
    assert 2 not in export.kept_units["conv2"].tolist()
    torch.testing.assert_close(export.module(x), apply_masks(net, masks)(x), atol=1e-5, rtol=1e-5)

    class Padded(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 3, 3)
            self.conv2 = nn.Conv2d(3, 2, 3, padding=1)

        def forward(self, x):
            return self.conv2(torch.relu(self.conv1(x))).flatten(1)

    net = Padded()
    with torch.no_grad():
        net.conv1.bias.fill_(0.5)
    masks = {"conv1.weight": torch.ones(3, 1, 3, 3, dtype=torch.bool), "conv2.weight": torch.ones(2, 3, 3, 3, dtype=torch.bool)}
    masks["conv1.weight"][0] = False
    x = torch.rand(4, 1, 7, 7)
    export = remove_pruned_units(net, x, masks)
    assert export.kept_units["conv1"].tolist() == [0, 1, 2]
    torch.testing.assert_close(export.module(x), apply_masks(net, masks)(x))


def test_first_layer_inputs_are_selected():
    factory, shape = NETWORKS["lenet300"]
    net = factory()
    masks = {n: torch.ones_like(p, dtype=torch.bool) for n, p in net.named_parameters() if n.endswith("weight")}
    masks["0.weight"][:, :100] = False
    x = torch.rand(5, *shape)
    export = remove_pruned_units(net, x, masks)
    assert export.input_index.tolist() == list(range(100, 784))
    assert any(isinstance(m, InputSelection) for m in export.module.modules())
    assert count_network(export.module, x[:1]).pruned_architecture == "684-300-100"
    torch.testing.assert_close(export.module(x), apply_masks(net, masks)(x))


def test_unsupported_networks_raise():
    with pytest.raises(NotImplementedError, match="after a linear"):
        class LinConv(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 16)
                self.conv = nn.Conv2d(1, 2, 3)

            def forward(self, x):
                return self.conv(self.fc(x).reshape(-1, 1, 4, 4))

        remove_pruned_units(LinConv(), torch.rand(2, 4))
    with pytest.raises(NotImplementedError, match="grouped"):
        remove_pruned_units(nn.Sequential(nn.Conv2d(2, 4, 3), nn.Conv2d(4, 4, 3, groups=2)), torch.rand(1, 2, 8, 8))
    with pytest.raises(NotImplementedError, match="BatchNorm"):
        remove_pruned_units(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2)), torch.rand(2, 3))
    with pytest.raises(ValueError, match="shape"):
        remove_pruned_units(nn.Sequential(nn.Linear(3, 4)), torch.rand(2, 3), {"0.weight": torch.ones(2, 2, dtype=torch.bool)})
    with pytest.raises(TypeError, match="bool"):
        remove_pruned_units(nn.Sequential(nn.Linear(3, 4)), torch.rand(2, 3), {"0.weight": torch.ones(4, 3)})



@pytest.mark.parametrize("layer", ["0", "2"])
def test_a_layer_with_every_weight_pruned_is_refused_naming_the_fix(layer):
    from pyrozoo.compression.structured import remove_pruned_units
    from pyrozoo.models import MLP

    torch.manual_seed(0)
    net = MLP(4, [3], 2)
    with torch.no_grad():
        getattr(net, layer).weight.zero_()
    with pytest.raises(ValueError, match="keeps no unit.*Prune less"):
        remove_pruned_units(net, torch.randn(5, 4))
