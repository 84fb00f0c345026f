"""Several chains of draws, ``{site: (chains, draws, *shape)}``: pooled for prediction, and
their agreement (split R-hat, effective sample size), whether they ran in one process or one
per rank (:mod:`pyrozoo.distributed`)."""

from typing import Dict

import pandas as pd
import torch
from pyro.ops.stats import effective_sample_size, split_gelman_rubin


def pool_chains(chains: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``{site: (chains * draws, *shape)}``: every chain's draws pooled, chain by chain (for
    :class:`~pyrozoo.inference.SampleGuide` and prediction)."""
    return {name: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for name, v in chains.items()}


def chain_diagnostics(chains: Dict[str, torch.Tensor]) -> pd.DataFrame:
    """Split R-hat (Gelman et al. 2013, Bayesian Data Analysis, 3rd ed., Sec. 11.4: each chain
    cut in halves) and the effective sample size across chains, per site: the largest R-hat
    and the smallest ESS over the site's entries (``pyro.ops.stats``). Needs at least 4 draws
    per chain; R-hat near 1 (< 1.01 is the usual bar) says the chains agree."""
    rows = []
    for name, v in chains.items():
        if v.dim() < 2 or v.shape[1] < 4:
            raise ValueError(f"site {name!r}: split R-hat needs (chains, draws >= 4, ...) draws, got shape {tuple(v.shape)}")
        x = v.double()
        rhat = split_gelman_rubin(x, chain_dim=0, sample_dim=1)
        ess = effective_sample_size(x, chain_dim=0, sample_dim=1)
        rows.append({"site": name, "chains": v.shape[0], "draws": v.shape[1], "max_split_rhat": float(rhat.max()), "min_ess": float(ess.min())})
    return pd.DataFrame(rows, columns=["site", "chains", "draws", "max_split_rhat", "min_ess"])
