"""Plain ``nn.Module`` architectures used by the papers (no Bayesian code here)."""

from typing import Sequence

import torch
from torch import nn


class MLP(nn.Sequential):
    """Fully connected network ``in -> hidden... -> out`` with a nonlinearity between layers.

    ``MLP(13, [50], 1)`` is the one-hidden-layer network of the UCI protocol
    (Hernández-Lobato & Adams 2015).
    """

    def __init__(self, in_features: int, hidden: Sequence[int], out_features: int, activation=nn.ReLU):
        sizes = [int(in_features), *[int(h) for h in hidden], int(out_features)]
        if any(s <= 0 for s in sizes):
            raise ValueError(f"layer sizes must be positive, got {sizes}")
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(activation())
        super().__init__(*layers)
        self.in_features = sizes[0]

    def forward(self, x):
        if x.dim() > 2:
            x = x.flatten(1)
        if x.shape[-1] != self.in_features:
            raise ValueError(f"MLP expects inputs with {self.in_features} features, got shape {tuple(x.shape)}")
        return super().forward(x)


class LeNet300100(MLP):
    """LeNet-300-100: 784-300-100-10 with ReLU (LeCun et al. 1998)."""

    def __init__(self, in_features: int = 784, num_classes: int = 10):
        super().__init__(in_features, [300, 100], num_classes)


def _mnist_images(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` as a batch of 28x28 images ``(n, C, 28, 28)``, a channel added to ``(n, 28, 28)``."""
    if x.dim() == 3:
        x = x.unsqueeze(1)
    if x.dim() != 4 or x.shape[-2:] != (28, 28):
        raise ValueError(f"{name} expects images of shape (n, C, 28, 28), got {tuple(x.shape)}")
    return x


class LeNet5(nn.Module):
    """LeNet-5-Caffe: conv 20@5x5, maxpool 2, conv 50@5x5, maxpool 2, FC 800-500, FC 500-10.

    The variant used by Sparse VD, Bayesian Compression and RDP (Caffe's LeNet-5, ReLU).
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths=(20, 50, 500)):
        super().__init__()
        c1, c2, h = widths
        self.conv1 = nn.Conv2d(in_channels, c1, 5)
        self.conv2 = nn.Conv2d(c1, c2, 5)
        self.fc1 = nn.Linear(c2 * 4 * 4, h)
        self.fc2 = nn.Linear(h, num_classes)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        x = _mnist_images(x, "LeNet5")
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        x = self.act(self.fc1(x.flatten(1)))
        return self.fc2(x)


class LeNet5BatchNorm(nn.Module):
    """LeNet-5 with batch normalisation, the network of the variance-networks experiments
    (Neklyudov et al. 2019, MNIST; Molchanov 2022, Table 2): bias-free conv 20@5x5 -> BN ->
    ReLU -> maxpool 2, conv 50@5x5 -> BN -> ReLU -> maxpool 2, FC 800-500 -> BN -> ReLU,
    FC 500-10 (bias-free).

    Batch normalisation is not what lets zero-mean (variance-only) layers learn: zero-mean
    hidden layers learn with or without it, and no network learns whose output layer is
    zero-mean too, as the logits' mean is then the bias whatever the input, and by Jensen's
    inequality the expected cross-entropy is no lower than that of a network ignoring its
    input (``docs/results/controlled/variance_network_zero_mean.md``). The authors keep
    ``fc2`` (their ``dense2``) a plain linear layer in their variance networks.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, widths=(20, 50, 500)):
        super().__init__()
        c1, c2, h = widths
        self.conv1 = nn.Conv2d(in_channels, c1, 5, bias=False)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 5, bias=False)
        self.bn2 = nn.BatchNorm2d(c2)
        self.fc1 = nn.Linear(c2 * 4 * 4, h, bias=False)
        self.bn3 = nn.BatchNorm1d(h)
        self.fc2 = nn.Linear(h, num_classes, bias=False)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        x = _mnist_images(x, "LeNet5BatchNorm")
        x = self.pool(self.act(self.bn1(self.conv1(x))))
        x = self.pool(self.act(self.bn2(self.conv2(x))))
        x = self.act(self.bn3(self.fc1(x.flatten(1))))
        return self.fc2(x)


class TwoConvTwoFCNet(nn.Module):
    """The "2-Conv-2-FC" CNN of Deng et al. (2019, Sec. 5.2; ~680K parameters): conv 32@5x5
    (padding 2), maxpool 2, conv 64@5x5 (padding 2), maxpool 2, FC 3136-200, FC 200-10, ReLU.

    :param float dropout: dropout rate on the hidden units after ``fc1`` (the paper's
        "Dropout" baseline uses 0.5).
    :param bool channels_last: store the convolution weights in NHWC order. oneDNN's CPU
        convolutions are about 20% faster on them (an SG-MCMC step at batch 1000, one
        thread: ``benchmarks/sgmcmc_step.py --contiguous`` measures the other layout); the
        outputs are the same up to rounding, and ``.to(device)`` keeps the layout.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, dropout: float = 0.0, channels_last: bool = True):
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.conv1 = nn.Conv2d(in_channels, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 200)
        self.fc2 = nn.Linear(200, num_classes)
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(dropout)
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def forward(self, x):
        x = _mnist_images(x, "TwoConvTwoFCNet")
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        x = self.dropout(self.act(self.fc1(x.flatten(1))))
        return self.fc2(x)


class _BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act = nn.ReLU()
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.act(out + (x if self.downsample is None else self.downsample(x)))


class ResNet20(nn.Module):
    """ResNet-20 for 32x32 images (He et al. 2016, Sec. 4.2): a 3x3 convolution, three stages
    of three basic blocks (16, 32, 64 channels), global average pooling and a linear layer;
    projection (1x1 convolution + BatchNorm) shortcuts where the shape changes. 272,474
    parameters, 267,264 of them in the 18 3x3 convolutions of the blocks (the layers Deng
    et al. 2019 prune)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.act = nn.ReLU()
        stages, in_planes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            blocks = []
            for b in range(3):
                blocks.append(_BasicBlock(in_planes, planes, stride if b == 0 else 1))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        if x.dim() != 4 or x.shape[-2:] != (32, 32):
            raise ValueError(f"ResNet20 expects images of shape (n, C, 32, 32), got {tuple(x.shape)}")
        x = self.act(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean((2, 3)))
