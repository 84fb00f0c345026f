"""Graves (2011)-style pruning of a Gaussian posterior by its signal-to-noise ratio.

A weight with posterior ``N(mu, sigma^2)`` is removed when ``q(w = 0)`` is high relative to
its mode, ``exp(-mu^2 / (2 sigma^2)) > gamma``, i.e. when ``|mu / sigma| < lambda`` with
``lambda = sqrt(-2 log gamma)`` (Graves 2011, Sec. 6; Blundell et al. 2015 prune by the same
ratio). Pruned weights become exactly zero in the posterior (location 0, no variance).
"""

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import pandas as pd
import torch

from pyrozoo.guides.mean_field import MeanFieldNormalGuide

#: a log-scale small enough that exp() underflows to an exact zero standard deviation
_ZERO_LOG_SCALE = -1e4


def signal_to_noise(guide: MeanFieldNormalGuide, include: Optional[Callable[[str], bool]] = None) -> Dict[str, torch.Tensor]:
    """``|mu / sigma|`` of every real-valued site of a mean-field guide (``include`` filters names)."""
    if not isinstance(guide, MeanFieldNormalGuide):
        raise TypeError(f"signal-to-noise pruning needs a MeanFieldNormalGuide, got {type(guide).__name__}")
    out = {}
    for name, info in guide.sites().items():
        if info.family != "real" or (include is not None and not include(name)):
            continue
        loc, log_scale = guide.loc_and_log_scale(name)
        out[name] = (loc.detach().abs() * torch.exp(-log_scale.detach()))
    if not out:
        raise ValueError("no real-valued site selected for pruning")
    return out


@dataclass
class PruningReport:
    threshold: float
    weights_total: int
    weights_kept: int

    @property
    def fraction_kept(self) -> float:
        return self.weights_kept / self.weights_total


@contextmanager
def graves_pruned(guide: MeanFieldNormalGuide, threshold: float, include: Optional[Callable[[str], bool]] = None):
    """Within the block, weights with ``|mu/sigma| < threshold`` are pruned from ``guide``
    (set to an exact zero); the guide is restored on exit. Yields a :class:`PruningReport`.

    Example::

        with graves_pruned(guide, 1.0) as report:
            metrics = evaluate(model, guide, x_test, y_test)
    """
    if not (threshold >= 0):
        raise ValueError(f"the signal-to-noise threshold must be non-negative, got {threshold}")
    snr = signal_to_noise(guide, include)
    sites = guide.sites()
    saved = {}
    total = kept = 0
    try:
        with torch.no_grad():
            for name, ratio in snr.items():
                key = sites[name].key
                loc, log_scale = guide.locs[key], guide.log_scales[key]
                saved[key] = (loc.clone(), log_scale.clone())
                prune = ratio < threshold
                loc.masked_fill_(prune, 0.0)
                log_scale.masked_fill_(prune, _ZERO_LOG_SCALE)
                total += prune.numel()
                kept += int((~prune).sum())
        yield PruningReport(float(threshold), total, kept)
    finally:
        with torch.no_grad():
            for key, (loc, log_scale) in saved.items():
                guide.locs[key].copy_(loc)
                guide.log_scales[key].copy_(log_scale)


def pruning_curve(guide: MeanFieldNormalGuide, thresholds, evaluate_fn: Callable[[], dict], include: Optional[Callable[[str], bool]] = None) -> pd.DataFrame:
    """Evaluates ``evaluate_fn()`` unpruned and at every threshold; one row per threshold
    with ``weights_kept``, ``fraction_kept`` and the metrics (threshold 0 = unpruned)."""
    rows = []
    for threshold in [0.0, *thresholds]:
        with graves_pruned(guide, threshold, include) as report:
            metrics = evaluate_fn()
        rows.append({"threshold": threshold, "weights_kept": report.weights_kept, "fraction_kept": report.fraction_kept, **metrics})
    return pd.DataFrame(rows)
