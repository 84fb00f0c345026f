"""Architectures: output shapes, layer structure, parameter counts, input checks."""

import pytest
import torch
from torch import nn

from pyrozoo.models import MLP, LeNet5, LeNet5BatchNorm, LeNet300100

# (id, factory, input shape, output shape)
SHAPE_CASES = [
    ("mlp-uci", lambda: MLP(13, [50], 1), (7, 13), (7, 1)),
    ("mlp-deep", lambda: MLP(4, [8, 6, 5], 3), (2, 4), (2, 3)),
    ("mlp-no-hidden", lambda: MLP(4, [], 2), (3, 4), (3, 2)),
    ("mlp-flattens-images", lambda: MLP(12, [5], 2), (3, 1, 3, 4), (3, 2)),
    ("lenet300100-flat", lambda: LeNet300100(), (5, 784), (5, 10)),
    ("lenet300100-images", lambda: LeNet300100(), (5, 1, 28, 28), (5, 10)),
    ("lenet5-images", lambda: LeNet5(), (2, 1, 28, 28), (2, 10)),
    ("lenet5-no-channel-dim", lambda: LeNet5(), (2, 28, 28), (2, 10)),
    ("lenet5-batchnorm", lambda: LeNet5BatchNorm(), (3, 1, 28, 28), (3, 10)),
    ("lenet5-rgb-narrow", lambda: LeNet5(in_channels=3, num_classes=4, widths=(4, 6, 8)), (2, 3, 28, 28), (2, 4)),
]


@pytest.mark.parametrize("factory,in_shape,out_shape", [c[1:] for c in SHAPE_CASES], ids=[c[0] for c in SHAPE_CASES])
def test_output_shape(factory, in_shape, out_shape, device, dtype):
    net = factory().to(device=device, dtype=dtype)
    out = net(torch.randn(in_shape, device=device, dtype=dtype))
    assert out.shape == out_shape
    assert out.dtype == dtype and out.device.type == device.type


def test_mlp_structure():
    net = MLP(4, [8, 6], 3, activation=nn.Tanh)
    kinds = [type(m) for m in net]
    assert kinds == [nn.Linear, nn.Tanh, nn.Linear, nn.Tanh, nn.Linear]
    assert [(m.in_features, m.out_features) for m in net if isinstance(m, nn.Linear)] == [(4, 8), (8, 6), (6, 3)]
    # no activation after the last layer: outputs can be negative
    out = MLP(4, [8], 3)(torch.randn(200, 4))
    assert (out < 0).any()


def _count(net):
    return sum(p.numel() for p in net.parameters())


def test_parameter_counts():
    """LeNet-300-100 has 266,610 parameters and LeNet-5-Caffe 431,080 (the '267K' and '431K'
    of Molchanov et al. 2017, Table 1), counted from the layer definitions."""
    lenet300 = (784 * 300 + 300) + (300 * 100 + 100) + (100 * 10 + 10)
    lenet5 = (20 * 1 * 25 + 20) + (50 * 20 * 25 + 50) + (800 * 500 + 500) + (500 * 10 + 10)
    assert _count(LeNet300100()) == lenet300 and round(lenet300, -3) == 267000
    assert _count(LeNet5()) == lenet5 and round(lenet5, -3) == 431000


def test_lenet5_batchnorm_layers():
    """Neklyudov et al.'s LeNet-5: bias-free conv/dense layers, each followed by batch
    normalisation except the output layer."""
    net = LeNet5BatchNorm()
    weights = [m for m in net.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert [m.bias for m in weights] == [None] * 4
    assert [type(m) for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)] == [nn.BatchNorm2d, nn.BatchNorm2d, nn.BatchNorm1d]
    assert _count(net) == 20 * 25 + 50 * 20 * 25 + 800 * 500 + 500 * 10 + 2 * (20 + 50 + 500)


def test_outputs_depend_on_every_input_feature():
    net = MLP(5, [16], 2).double()
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    net(x).sum().backward()
    assert (x.grad.abs().sum(0) > 0).all()


@pytest.mark.parametrize(
    "factory,in_shape,match",
    [
        (lambda: MLP(13, [50], 1), (4, 12), "13 features"),
        (lambda: MLP(13, [50], 1), (4, 2, 7), "13 features"),
        (lambda: LeNet300100(), (4, 1, 27, 27), "784 features"),
        (lambda: LeNet5(), (4, 1, 32, 32), r"\(n, C, 28, 28\)"),
        (lambda: LeNet5(), (4, 784), r"\(n, C, 28, 28\)"),
        (lambda: LeNet5(), (2, 1, 1, 28, 28), r"\(n, C, 28, 28\)"),
    ],
    ids=["mlp-features", "mlp-flattened-features", "lenet300-image-size", "lenet5-image-size", "lenet5-flat", "lenet5-5d"],
)
def test_wrong_input_shape_raises_clear_error(factory, in_shape, match):
    with pytest.raises(ValueError, match=match) as info:
        factory()(torch.zeros(in_shape))
    assert str(tuple(in_shape)) in str(info.value) or "features" in str(info.value)


@pytest.mark.parametrize("sizes", [(0, [5], 1), (3, [0], 1), (3, [5], 0), (-1, [], 2)])
def test_non_positive_layer_sizes_raise(sizes):
    with pytest.raises(ValueError, match="positive"):
        MLP(*sizes)
