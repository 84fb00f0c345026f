"""Networks and pruning patterns shared by the compression tests."""

import torch
from torch import nn

from pyrozoo.models import MLP, LeNet5, LeNet300100


class PaddedConvNet(nn.Module):
    """Convolutions with padding (constant channels cannot be folded) and a conv -> linear boundary."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 5, 3, stride=2)
        self.fc = nn.Linear(5 * 3 * 3, 4)

    def forward(self, x):
        x = torch.tanh(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


# name -> (network factory, input shape of one example)
NETWORKS = {
    "mlp": (lambda: MLP(12, [9, 7], 3), (12,)),
    "lenet300": (LeNet300100, (1, 28, 28)),
    "lenet5": (LeNet5, (1, 28, 28)),
    "padded-conv": (PaddedConvNet, (2, 8, 8)),
}


def random_masks(net: nn.Module, keep: float, generator: torch.Generator, kill_units: bool = True) -> dict:
    """Bernoulli(keep) masks of every weight; with ``kill_units`` also whole units: in every
    layer but the last, the first rows (no incoming weights: constant units) and the
    inputs read from the previous layer's last units (unused units) are pruned."""
    masks = {}
    weights = [(n, p) for n, p in net.named_parameters() if n.endswith("weight")]
    for i, (name, p) in enumerate(weights):
        m = torch.rand(p.shape, generator=generator) < keep
        if kill_units:
            if i < len(weights) - 1:
                m[: max(1, p.shape[0] // 5)] = False  # constant units
            if i > 0:
                cols = m.shape[1]
                m[:, cols - max(1, cols // 6):] = False  # unused inputs
        masks[name] = m
    return masks
