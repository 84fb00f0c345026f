r"""Gradual magnitude pruning inside a stochastic-gradient MCMC run (Deng et al. 2019,
Algorithm 1 and Sec. 5.4).

After every step the lowest-magnitude fraction :math:`s_k` of each pruned tensor is set to
zero, with the sparsity rising as

.. math::

    s_k = S\,\big(1 - D^{k / \mho}\big)

towards the target :math:`S` (the paper: :math:`D = 0.99`, :math:`\mho = 50` iterations).
The threshold is the ``m``-th smallest magnitude (``torch.kthvalue``, with ``m`` a Python
integer), so pruning reads nothing back from the device.

Two semantics: the official code's (the default) re-prunes every step without a
persistent mask, so pruned weights receive gradient, momentum and noise in the next step
and may come back; ``persistent_mask=True`` keeps a monotone mask and also zeroes the
momentum of pruned entries.
"""

import math
from typing import Dict, Optional, Sequence

import torch

from pyrozoo.inference.sgmcmc import Adaptation


def layer_sparsity_for_overall(target: float, total_parameters: int, pruned_parameters: int) -> float:
    r"""The per-layer sparsity :math:`S' = S\,P_\text{total} / P_\text{pruned}` that makes the
    overall sparsity over all ``total_parameters`` equal ``target`` when only
    ``pruned_parameters`` are pruned (the official ResNet code's ``target_sparse``)."""
    if not 0 < pruned_parameters <= total_parameters:
        raise ValueError(f"need 0 < pruned_parameters <= total_parameters, got {pruned_parameters} and {total_parameters}")
    value = target * total_parameters / pruned_parameters
    if not 0.0 <= value < 1.0:
        raise ValueError(f"an overall sparsity of {target} needs a per-layer sparsity of {value:.4f}, which is not below 1")
    return value


class MagnitudePruning(Adaptation):
    r"""Prunes the sites ``names`` to sparsity :math:`s_k = S(1 - D^{k/\mho})` after every step.

    :param names: the sampled sites to prune (e.g. every convolution weight but the first).
    :param float target: :math:`S \in [0, 1)`, the final fraction of zeros per tensor.
    :param float decay: :math:`D \in (0, 1)`.
    :param float period: :math:`\mho > 0`, in iterations.
    :param bool persistent_mask: keep pruned entries at zero (and their momentum) for good.
    """

    def __init__(self, names: Sequence[str], target: float, *, decay: float = 0.99, period: float = 50.0, persistent_mask: bool = False):
        names = list(names)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError(f"names must be a non-empty list of site names, got {names!r}")
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0.0 <= target < 1.0:
            raise ValueError(f"target sparsity must be in [0, 1), got {target!r}")
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 < decay < 1.0:
            raise ValueError(f"decay D must be in (0, 1), got {decay!r}")
        if isinstance(period, bool) or not isinstance(period, (int, float)) or not (period > 0 and math.isfinite(period)):
            raise ValueError(f"period must be a finite positive number of iterations, got {period!r}")
        self.names = names
        self.target = float(target)
        self.decay = float(decay)
        self.period = float(period)
        self.persistent_mask = bool(persistent_mask)
        self.masks: Dict[str, torch.Tensor] = {}

    def sparsity(self, k: int) -> float:
        """:math:`s_k = S(1 - D^{k/\\mho})`."""
        return self.target * (1.0 - self.decay ** (k / self.period))

    def setup(self, sampler, trace):
        for name in self.names:
            u = sampler.unconstrained(name)
            if not sampler.is_real(name):
                raise ValueError(f"site {name!r} is constrained; magnitude pruning applies to real-valued weights")
            if self.persistent_mask:
                self.masks[name] = torch.ones_like(u, dtype=torch.bool)

    @torch.no_grad()
    def update(self, sampler, trace, k):
        s = self.sparsity(k)
        for name in self.names:
            weight = sampler.unconstrained(name)
            num_pruned = int(s * weight.numel())
            if num_pruned == 0:
                continue
            magnitude = weight.detach().abs().reshape(-1)
            threshold = torch.kthvalue(magnitude, num_pruned).values
            keep = weight.abs() > threshold
            if self.persistent_mask:
                keep = self.masks[name].logical_and_(keep)
                momentum = sampler.momentum(name)
                if momentum is not None:
                    momentum.mul_(keep)
            weight.mul_(keep)

    def logging(self):
        return {}

    def state_dict(self):
        return {"masks": {n: m.clone() for n, m in self.masks.items()}}

    def load_state_dict(self, state):
        for n, m in state["masks"].items():
            self.masks[n].copy_(m)


def sparsity_of(values: Dict[str, torch.Tensor], names: Optional[Sequence[str]] = None) -> float:
    """Fraction of exact zeros over the tensors ``names`` of ``values`` (all by default)."""
    names = list(values) if names is None else list(names)
    zeros = sum(int((values[n] == 0).sum()) for n in names)
    total = sum(values[n].numel() for n in names)
    return zeros / total
