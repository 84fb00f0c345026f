"""The architectures of Deng et al. (2019): shapes, parameter counts, the pruned layers."""

import pytest
import torch

from pyrozoo.models import ResNet20, TwoConvTwoFCNet


def test_two_conv_two_fc_net(device, dtype):
    net = TwoConvTwoFCNet().to(device=device, dtype=dtype)
    assert net(torch.rand(3, 1, 28, 28, device=device, dtype=dtype)).shape == (3, 10)
    assert net(torch.rand(3, 28, 28, device=device, dtype=dtype)).shape == (3, 10)
    # the paper's "670K parameters"
    assert sum(p.numel() for p in net.parameters()) == 32 * 25 + 32 + 64 * 32 * 25 + 64 + 3136 * 200 + 200 + 200 * 10 + 10
    with pytest.raises(ValueError, match="28, 28"):
        net(torch.rand(2, 1, 32, 32, device=device, dtype=dtype))
    with pytest.raises(ValueError, match="dropout"):
        TwoConvTwoFCNet(dropout=1.0)


def test_dropout_is_active_in_training_mode_only():
    net = TwoConvTwoFCNet(dropout=0.5)
    x = torch.rand(4, 1, 28, 28)
    net.eval()
    assert torch.equal(net(x), net(x))
    net.train()
    torch.manual_seed(0)
    assert not torch.equal(net(x), net(x))


def test_resnet20_parameter_counts(device):
    net = ResNet20().to(device)
    assert net(torch.rand(2, 3, 32, 32, device=device)).shape == (2, 10)
    names = dict(net.named_parameters())
    pruned = [n for n in names if "conv" in n and n != "conv1.weight"]
    # 18 3x3 convolutions in the blocks; the 1x1 projections are named "downsample"
    assert len(pruned) == 18 and all(names[n].shape[-1] == 3 for n in pruned)
    assert sum(p.numel() for p in net.parameters()) == 272474
    assert sum(names[n].numel() for n in pruned) == 267264
    with pytest.raises(ValueError, match="32, 32"):
        net(torch.rand(2, 3, 28, 28, device=device))


def test_channels_last_layout_gives_the_same_outputs(device):
    torch.manual_seed(0)
    nchw = TwoConvTwoFCNet(channels_last=False).to(device)
    nhwc = TwoConvTwoFCNet().to(device)
    nhwc.load_state_dict(nchw.state_dict())
    assert nhwc.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    assert nchw.conv2.weight.is_contiguous() and not nchw.conv2.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.rand(5, 1, 28, 28, device=device)
    torch.testing.assert_close(nhwc(x), nchw(x), rtol=1e-5, atol=1e-5)
