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
        if x.dim() == 3:
            x = x.unsqueeze(1)
        if x.dim() != 4 or x.shape[-2:] != (28, 28):
            raise ValueError(f"LeNet5 expects images of shape (n, C, 28, 28), got {tuple(x.shape)}")
        x = self.pool(self.act(self.conv1(x)))
        x = self.pool(self.act(self.conv2(x)))
        x = self.act(self.fc1(x.flatten(1)))
        return self.fc2(x)
