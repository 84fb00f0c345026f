"""The shared LeNet compression recipe pieces: schedules, initialisation, compressed evaluation."""

import pytest
import torch
from torch import nn

from pyrozoo.compression import apply_masks, count_network
from zoo_protocols.lenet_recipes import compressed_result, kl_warmup, linear_to_zero, make_network


def test_learning_rate_schedules():
    lenet300 = linear_to_zero(200, 0.5)  # the LeNet-300-100 script: constant 100 epochs, then linear to 0
    assert [lenet300(e) for e in (0, 99, 100, 150, 199)] == pytest.approx([min(2 - e / 100, 1) for e in (0, 99, 100, 150, 199)])
    lenet5 = linear_to_zero(200)  # LeNet-5: linear to 0 from the start
    assert lenet5(0) == 1.0 and lenet5(100) == 0.5
    with pytest.raises(ValueError):
        linear_to_zero(10, 1.0)


def test_kl_warmup_is_the_papers_for_long_runs_and_scaled_for_short_ones():
    w = kl_warmup(200)
    assert (w.start_epoch, w.end_epoch) == (5, 20)
    short = kl_warmup(20)
    assert short.start_epoch == 2.5 and short.end_epoch == 10.0


@pytest.mark.parametrize("arch", ["lenet300", "lenet5"])
def test_molchanov_initialisation(arch):
    torch.manual_seed(0)
    net = make_network(arch)
    for module in net.modules():
        if isinstance(module, nn.Linear):
            n = module.weight.numel()
            # N(0, 0.01^2): the sample std is within 6 standard errors of 0.01
            assert abs(float(module.weight.detach().std()) - 0.01) < 6 * 0.01 / (2 * n) ** 0.5
            assert torch.equal(module.bias, torch.zeros_like(module.bias))
        elif isinstance(module, nn.Conv2d):
            fan_in, fan_out = module.weight[0].numel(), module.weight.shape[0] * module.weight[0, 0].numel()
            bound = (6 / (fan_in + fan_out)) ** 0.5
            assert module.weight.abs().max() <= bound
    with pytest.raises(ValueError):
        make_network("vgg")


def test_compressed_result_counts_the_exported_network():
    torch.manual_seed(0)
    net = make_network("lenet5", "torch")
    masks = {n: torch.rand(p.shape) < 0.2 for n, p in net.named_parameters() if n.endswith("weight")}
    masks["conv2.weight"][10:] = False  # 40 filters pruned: their fc1 inputs become unused
    masked = apply_masks(net, masks)
    test = (torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,)))
    result = compressed_result(masked, net, "lenet5", test)
    assert result.params_total == count_network(net, test[0][:1]).params_total
    assert result.params_kept < count_network(masked, test[0][:1]).params_kept  # unused weights removed too
    assert result.pruned_architecture.split("-")[1] == "10"
    predictions = masked(test[0]).argmax(-1)
    assert result.test_error == pytest.approx(100.0 * float((predictions != test[1]).float().mean()))
    assert result.details["sparse_storage_bytes"] < result.details["dense_storage_bytes"]
    # per-layer figures are of the export: fc1's rows reading the 40 removed filters count as pruned
    kept = {name: int(m.sum()) for name, m in result.stored_weights.items()}
    assert sum(kept.values()) == result.params_kept
    fc1_sparsity = float(result.details["per_layer_sparsity"].split("-")[2])
    assert fc1_sparsity == pytest.approx(100.0 * (1 - kept["fc1.weight"] / net.fc1.weight.numel()), abs=0.051)
    assert not result.stored_weights["fc1.weight"][:, 10 * 16 :].any()
