"""Networks the guide tests share: a small convolutional net whose 6 x 6 inputs exercise the
convolutional noise and KL paths next to the MLPs."""

import torch
from torch import nn


class SmallConvNet(nn.Module):
    """Conv2d(1, 3, 3) on 1 x 6 x 6 inputs, ReLU, then Linear(48, 4)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3)
        self.fc = nn.Linear(3 * 4 * 4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))
