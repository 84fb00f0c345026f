"""Parameter and FLOP counting by the convention of pyrozoo.compression.counting."""

import pytest
import torch
from torch import nn

from pyrozoo.compression import apply_masks, count_network, to_sparse
from tests.compression.cases import NETWORKS, random_masks


def _expected(net, x, masks):
    """Independent count: kept weights, and MACs from the layer output sizes."""
    total = kept = flops = 0
    for name, module in net.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            w = module.weight
            k = int(masks[f"{name}.weight"].sum()) if masks else int((w != 0).sum())
            total += w.numel()
            kept += k
    # output positions of convolutions from their own output shapes
    positions = {}
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: positions.__setitem__(n, o[0, 0].numel() if o.dim() == 4 else 1)) for n, m in net.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    net(x)
    for hk in hooks:
        hk.remove()
    for name, module in net.named_modules():
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            w = module.weight
            k = int(masks[f"{name}.weight"].sum()) if masks else int((w != 0).sum())
            flops += k * positions[name]
    return total, kept, flops


@pytest.mark.parametrize("arch", sorted(NETWORKS))
@pytest.mark.parametrize("masked", [False, True], ids=["dense", "masked"])
def test_counts_match_independent_count(arch, masked, device):
    torch.manual_seed(0)
    factory, shape = NETWORKS[arch]
    net = factory().to(device)
    x = torch.rand(2, *shape, device=device)
    masks = random_masks(net, 0.3, torch.Generator().manual_seed(1)) if masked else None
    masks = {k: v.to(device) for k, v in masks.items()} if masks else None
    count = count_network(net, x, masks)
    total, kept, flops = _expected(net, x, masks)
    assert count.params_total == total
    assert count.params_kept == kept
    assert count.flops == flops
    assert count.compression_ratio == pytest.approx(total / kept)
    if not masked:
        assert count.flops == count.dense_flops
    # counting the zeros of the masked network gives the same as counting the masks
    if masked:
        again = count_network(apply_masks(net, masks), x)
        assert (again.params_kept, again.flops) == (count.params_kept, count.flops)


@pytest.mark.parametrize("arch", sorted(NETWORKS))
def test_sparse_export_counts_like_masked(arch, device):
    factory, shape = NETWORKS[arch]
    net = factory().to(device)
    x = torch.rand(2, *shape, device=device)
    masks = {k: v.to(device) for k, v in random_masks(net, 0.2, torch.Generator().manual_seed(2)).items()}
    masked = count_network(apply_masks(net, masks), x)
    sparse = count_network(to_sparse(net, masks), x)
    assert [(layer.weights_total, layer.weights_kept, layer.flops, layer.units) for layer in sparse.layers] == [
        (layer.weights_total, layer.weights_kept, layer.flops, layer.units) for layer in masked.layers
    ]


def test_units_follow_the_bayesian_compression_convention():
    """conv: output channels with a kept weight; linear: input features with a kept weight."""
    from pyrozoo.models import LeNet5

    net = LeNet5()
    x = torch.rand(1, 1, 28, 28)
    dense = count_network(net, x)
    assert dense.pruned_architecture == "-".join(str(n) for n in (net.conv1.out_channels, net.conv2.out_channels, net.fc1.in_features, net.fc2.in_features))
    masks = {n: torch.ones_like(p, dtype=torch.bool) for n, p in net.named_parameters() if n.endswith("weight")}
    masks["conv1.weight"][:3] = False
    masks["conv2.weight"][5:9] = False
    masks["fc1.weight"][:, :32] = False
    masks["fc2.weight"][:, 100:] = False
    layers = count_network(net, x, masks).layers
    assert [layer.units for layer in layers] == [net.conv1.out_channels - 3, net.conv2.out_channels - 4, net.fc1.in_features - 32, 100]
    assert layers[0].sparsity == pytest.approx(3 / net.conv1.out_channels)


def test_bad_inputs_raise():
    from pyrozoo.models import LeNet300100

    net = LeNet300100()
    x = torch.rand(1, 784)
    with pytest.raises(ValueError, match="shape"):
        count_network(net, x, {"0.weight": torch.ones(3, 3, dtype=torch.bool)})
    with pytest.raises(KeyError, match="unknown"):
        count_network(net, x, {"nope.weight": torch.ones(3, 3, dtype=torch.bool)})
    with pytest.raises(NotImplementedError, match="BatchNorm"):
        count_network(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), torch.rand(2, 3))
    with pytest.raises(TypeError):
        count_network(net, [1.0])
    shared = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="once"):
        count_network(nn.Sequential(shared, shared), torch.rand(1, 4))
