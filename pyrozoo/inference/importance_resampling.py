r"""Prediction with the importance-resampled approximation :math:`q_M` (Domke & Sheldon 2018).

Draw :math:`\theta_1..\theta_M \sim q`, weight :math:`w_i = p(\mathcal D,\theta_i)/q(\theta_i)`
on the training data, and return :math:`\theta_j` with probability :math:`w_j/\sum_i w_i`. The
IWAE bound with ``M`` samples is the ELBO of this :math:`q_M` (Domke & Sheldon, Theorem 1), so
it is the distribution that IWAE training fits; with ``M = 1`` it is ``q`` itself. Each returned
draw uses its own ``M`` proposals (independent draws of :math:`q_M`, not a resample of one pool).
"""

from typing import Dict

import torch
from pyro.poutine.util import site_is_subsample

from pyrozoo.inference.importance_weighted import RenyiELBO, weight_diagnostics


@torch.no_grad()
def importance_resampled_samples(model, guide, x: torch.Tensor, y: torch.Tensor, num_samples: int = 100, num_proposals: int = 8, *, max_batch_elements: int = 2**25, return_diagnostics: bool = False):
    """``num_samples`` independent draws of :math:`q_M` (``M = num_proposals``) of every latent
    site, each with a leading sample dimension: usable as ``evaluate(..., samples=...)`` or
    ``posterior_samples(..., samples=...)``.

    :param x, y: the training data the weights condition on (all of it: minibatch weights
        would be biased, see :mod:`pyrozoo.inference.importance_weighted`).
    :param int max_batch_elements: bound on ``particles x examples x hidden width`` per chunk
        of the direct (BNN) evaluation, to cap memory.
    :returns: the samples, or ``(samples, diagnostics)`` with the mean ESS and max weight over draws.
    """
    if num_samples < 1 or num_proposals < 1:
        raise ValueError("num_samples and num_proposals must be >= 1")
    width = max([p.shape[0] for p in getattr(getattr(model, "net", None), "parameters", lambda: [])() if p.dim() == 2] or [1])
    per_draw = num_proposals * max(len(x), 1) * width
    chunk = max(1, min(num_samples, max_batch_elements // max(per_draw, 1)))
    draws: Dict[str, list] = {}
    ess, max_w = [], []
    done = 0
    while done < num_samples:
        c = min(chunk, num_samples - done)
        K = c * num_proposals
        objective = RenyiELBO(alpha=0.0, num_particles=K)
        direct = objective._weights.direct(model, guide, K, (x, y), {})
        if direct is not None:
            values, log_joint, log_q = direct
        else:
            traces, log_joint, log_q = objective._weights.traced(model, guide, (x, y), {})
            names = [n for n, s in traces[0].nodes.items() if s["type"] == "sample" and not site_is_subsample(s)]
            values = {n: torch.stack([t.nodes[n]["value"] for t in traces]) for n in names}
        log_w = (log_joint - log_q).reshape(c, num_proposals)
        pick = torch.distributions.Categorical(logits=log_w).sample()
        rows = torch.arange(c, device=pick.device)
        for name, v in values.items():
            draws.setdefault(name, []).append(v.reshape((c, num_proposals) + v.shape[1:])[rows, pick])
        for row in log_w:
            d = weight_diagnostics(row)
            ess.append(d["ess"])
            max_w.append(d["max_weight"])
        done += c
    samples = {name: torch.cat(parts) for name, parts in draws.items()}
    if return_diagnostics:
        return samples, {"ess": float(torch.stack(ess).mean()), "max_weight": float(torch.stack(max_w).mean())}
    return samples
