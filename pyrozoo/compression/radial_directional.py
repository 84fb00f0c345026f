r"""Structured pruning with radial-directional posteriors (Oh et al. 2020, Sec. 3.3 and 5.2).

A row (output unit) or column (input unit) of a grouped weight is pruned when the log of the
posterior mode of its *local* radius falls below a threshold. With log-normal posteriors
:math:`\alpha \sim \mathrm{LogNormal}(\mu_\alpha, \sigma_\alpha^2)` and
:math:`\beta \sim \mathrm{LogNormal}(\mu_\beta, \sigma_\beta^2)`, the local radius
:math:`r = \sqrt{\alpha\beta}` is log-normal with :math:`\log r \sim \mathcal N(\tfrac12(\mu_\alpha +
\mu_\beta), \tfrac14(\sigma_\alpha^2 + \sigma_\beta^2))`, so

.. math::  \log \mathrm{mode}(r) = \tfrac12(\mu_\alpha + \mu_\beta) - \tfrac14(\sigma_\alpha^2 + \sigma_\beta^2)

(the exact log-mode; the authors' code uses :math:`\mu_\alpha - \sigma_\alpha^2`, ignoring
:math:`\beta`). The per-layer global factor scales every group of a layer alike and is left
out by default ("only the two 'local' log-normal distributions matter"). Thresholds are set
per layer and grouping, by hand (the paper reads them off histograms, Fig. 7), at the widest
gap of the histogram when it is at least ``min_gap`` nats wide (``"gap"``, the default: pruned
units collapse far below the kept ones, and a layer without such a gap keeps every unit), or
by Otsu's cut (``"otsu"``, which always splits).

The exported network uses the posterior mean of each weight,
:math:`E[W_{ij}] = E[r^{row}_i] A_{d_r}(\kappa_r) \mu^{row}_{ij} \cdot E[r^{col}_j] A_{d_c}(\kappa_c) \mu^{col}_{ji}`
(row and column factors are independent under the posterior), and the posterior means of
the Gaussian sites; :func:`pyrozoo.compression.remove_pruned_units` then removes the pruned
units.
"""

from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from pyrozoo.compression.group_pruning import resolve_thresholds
from pyrozoo.distributions.von_mises_fisher import vmf_mean_resultant_length
from pyrozoo.models.radial_directional import RadialDirectionalPrior, RadialGroup, compose_weight

Thresholds = Union[float, Sequence[float], Dict[str, float], str]

__all__ = ["radius_log_modes", "pruning_statistics", "pruning_masks", "posterior_mean_weights", "group_key", "widest_gap", "gap_threshold"]


def widest_gap(values) -> Optional[Tuple[float, float]]:
    """``(low, high)``: the two consecutive sorted ``values`` (a tensor, array or sequence) with
    the widest gap between them, or ``None`` for fewer than two values. In a trained layer's
    pruning statistic this gap separates the units the posterior switched off from the ones it
    keeps (Oh et al. 2020, Fig. 7)."""
    # np.array copies: a reversed numpy view has negative strides, which torch cannot wrap
    v = values.detach() if isinstance(values, torch.Tensor) else torch.from_numpy(np.array(values, dtype=np.float64))
    v = v.flatten().double().sort().values
    if v.numel() < 2:
        return None
    i = int((v[1:] - v[:-1]).argmax())
    return float(v[i]), float(v[i + 1])


def gap_threshold(values: torch.Tensor, min_gap: float = 2.0) -> float:
    """The midpoint of the widest gap between consecutive sorted ``values`` if it is at least
    ``min_gap`` wide, else ``-inf`` (nothing is pruned)."""
    gap = widest_gap(values)
    if gap is None or gap[1] - gap[0] < min_gap:
        return -float("inf")
    return 0.5 * (gap[0] + gap[1])


def resolve_radial_thresholds(keys: Sequence[str], thresholds: Thresholds, stats: Dict[str, torch.Tensor], min_gap: float = 2.0) -> Dict[str, float]:
    """``{key: threshold}`` from a number, a list, a dict, ``"gap"`` or ``"otsu"``."""
    if thresholds == "gap":
        return {k: gap_threshold(stats[k], min_gap) for k in keys}
    if thresholds == "otsu":
        thresholds = "auto"
    elif isinstance(thresholds, str):
        raise ValueError(f"thresholds must be a number, a list, a dict, 'gap' or 'otsu', got {thresholds!r}")
    return resolve_thresholds(keys, thresholds, stats)


def group_key(group: RadialGroup) -> str:
    """``"<weight>.<row|column>"``, the key of a grouping in statistics, thresholds and masks."""
    return f"{group.weight}.{group.kind}"


def _groups(model):
    prior = getattr(model, "prior", None)
    if not isinstance(prior, RadialDirectionalPrior):
        raise TypeError("radial-directional pruning needs a model whose prior is a RadialDirectionalPrior")
    if not prior.groups:
        raise RuntimeError("the model has not been run yet: set up the guide (or call the model) first")
    return [g for groups in prior.groups.values() for g in groups]


def _log_normal(guide, site: str):
    mu, sigma = guide.log_normal_parameters(site)
    return mu, sigma * sigma


@torch.no_grad()
def radius_log_modes(guide, group: RadialGroup, include_global: bool = False) -> torch.Tensor:
    """Log posterior mode of the radius of every group (row or column) of one grouping."""
    mu_a, var_a = _log_normal(guide, group.site("local_gamma"))
    mu_b, var_b = _log_normal(guide, group.site("local_inverse_gamma"))
    mean, var = 0.5 * (mu_a + mu_b), 0.25 * (var_a + var_b)
    if include_global:
        for part in ("global_gamma", "global_inverse_gamma"):
            m, v = _log_normal(guide, group.site(part))
            mean, var = mean + 0.5 * m, var + 0.25 * v
    return mean - var


def pruning_statistics(model, guide, include_global: bool = False) -> Dict[str, torch.Tensor]:
    """``{"<weight>.<row|column>": log-mode of every group's radius}`` in model order."""
    return {group_key(g): radius_log_modes(guide, g, include_global) for g in _groups(model)}


@torch.no_grad()
def pruning_masks(
    model,
    guide,
    thresholds: Thresholds = "gap",
    *,
    include_global: bool = False,
    keep_rows: Sequence[str] = (),
    min_gap: float = 2.0,
) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor], Dict[str, float]]:
    """Group masks, weight masks and the thresholds used.

    :param thresholds: one number, a list in the order of :func:`pruning_statistics`, a dict
        keyed like it, ``"gap"`` (the widest gap of each histogram if at least ``min_gap``
        nats wide) or ``"otsu"``.
    :param keep_rows: weights whose rows are never pruned (e.g. the output layer: its rows are
        the network's outputs).
    :returns: ``(group masks {key: bool (groups,)}, weight masks {weight: bool of its shape},
        thresholds {key: float})``; True = kept.
    """
    stats = pruning_statistics(model, guide, include_global)
    resolved = resolve_radial_thresholds(list(stats), thresholds, stats, min_gap)
    group_masks = {key: stats[key] >= resolved[key] for key in stats}
    for weight in keep_rows:
        key = f"{weight}.row"
        if key in group_masks:
            group_masks[key] = torch.ones_like(group_masks[key])
    weight_masks = {}
    prior = model.prior
    params = dict(model.net.named_parameters())
    for weight, groups in prior.groups.items():
        shape = params[weight].shape
        mask = torch.ones(shape, dtype=torch.bool, device=params[weight].device)
        for g in groups:
            m = group_masks[group_key(g)]
            view = (-1,) + (1,) * (len(shape) - 1) if g.kind == "row" else (1, -1) + (1,) * (len(shape) - 2)
            mask = mask & m.reshape(view)
        weight_masks[weight] = mask
    return group_masks, weight_masks, resolved


@torch.no_grad()
def posterior_mean_weights(model, guide) -> Dict[str, torch.Tensor]:
    """Posterior means of every random parameter of the network (``{parameter name: tensor}``)."""
    prior = model.prior
    medians = guide.median()
    params = dict(model.net.named_parameters())
    out = {}
    for name in model.random_parameter_names:
        if name in prior.groups:
            factors = {}
            for g in prior.groups[name]:
                mean, var = 0.0, 0.0
                for part in ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma"):
                    m, v = _log_normal(guide, g.site(part))
                    mean, var = mean + 0.5 * m, var + 0.25 * v
                radius = (mean + 0.5 * var).exp()
                loc, kappa = guide.direction_parameters(g.site("direction"))
                factors[g.kind] = (radius, vmf_mean_resultant_length(g.dim, kappa.detach()) * loc.detach())
            out[name] = compose_weight(params[name].shape, factors)
        else:
            out[name] = medians[name]
    return out
