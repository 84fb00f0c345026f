"""Online, step-size-weighted posterior averages of predictions.

Welling & Teh (2011, Sec. 4) estimate a posterior expectation from SGLD iterates with
decreasing step sizes as :math:`\\sum_k \\epsilon_k f(\\beta_k) / \\sum_k \\epsilon_k`;
Deng et al. (2019, Sec. 5.2) apply "the posterior average" to every Bayesian model. For
networks whose samples do not fit in memory the average is accumulated online, one
sample at a time, on the device that computes the predictions.
"""

import math
from typing import Optional, Sequence

import torch

#: how :func:`ensemble_probs` combines its members
POOLS = ("linear", "log")


class StepSizeWeightedAverage:
    r"""Running weighted mean :math:`\bar f_K = \sum_{k\le K} w_k f_k / \sum_{k\le K} w_k`.

    Average *probabilities* (classification) or predictive densities, not log-probabilities:
    the posterior predictive is the mean of the densities. With ``log_space=True`` the
    values passed to :meth:`update` are log-densities and :attr:`value` is
    :math:`\log \sum_k w_k e^{f_k} - \log \sum_k w_k`, computed without underflow.

    Weights are Python numbers (the step sizes the schedules produce), so an update adds
    no host synchronisation.
    """

    def __init__(self, log_space: bool = False):
        self.log_space = bool(log_space)
        self.total_weight = 0.0
        self.count = 0
        self._acc: Optional[torch.Tensor] = None

    def update(self, value: torch.Tensor, weight: float = 1.0) -> None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"the weight of a sample must be a finite positive number, got {weight!r}")
        if not torch.is_tensor(value):
            raise TypeError(f"value must be a tensor, got {type(value).__name__}")
        value = value.detach()
        if self._acc is not None and value.shape != self._acc.shape:
            raise ValueError(f"value of shape {tuple(value.shape)} does not match the running average's {tuple(self._acc.shape)}")
        self.total_weight += float(weight)
        self.count += 1
        if self.log_space:
            term = value + math.log(weight)
            self._acc = term.clone() if self._acc is None else torch.logaddexp(self._acc, term)
        elif self._acc is None:
            self._acc = value.clone()
        else:
            # the incremental form keeps the accumulator at the scale of one value
            self._acc.add_(value - self._acc, alpha=float(weight) / self.total_weight)

    @property
    def value(self) -> torch.Tensor:
        if self._acc is None:
            raise RuntimeError("no sample has been averaged yet")
        if self.log_space:
            return self._acc - math.log(self.total_weight)
        return self._acc

    def state_dict(self) -> dict:
        return {"log_space": self.log_space, "total_weight": self.total_weight, "count": self.count, "acc": None if self._acc is None else self._acc.clone()}

    def load_state_dict(self, state: dict) -> None:
        if bool(state["log_space"]) != self.log_space:
            raise ValueError("the saved average was accumulated in a different space (log_space differs)")
        self.total_weight = float(state["total_weight"])
        self.count = int(state["count"])
        acc = state["acc"]
        if acc is not None:
            acc = acc.to(self._acc.device) if self._acc is not None else acc
            acc = acc.clone()
        self._acc = acc


def ensemble_probs(log_probs: Sequence[torch.Tensor], weights: Optional[Sequence[float]] = None, pool: str = "linear") -> torch.Tensor:
    r"""Class probabilities of a weighted ensemble, from its members' log-probabilities.

    * ``"linear"``: :math:`\sum_s w_s p_s / \sum_s w_s`, the posterior predictive (what
      :class:`StepSizeWeightedAverage` accumulates online);
    * ``"log"``: :math:`\operatorname{softmax}(\sum_s w_s \log p_s / \sum_s w_s)`, the
      normalised weighted geometric mean (a log-linear pool). Its argmax is that of
      :math:`\sum_s \log p_s`, the ensemble Deng et al.'s FGSM code accumulates
      (``tools/attacker.py``, ``Adversarial.test`` sums log-softmax outputs).

    Differentiable in the members (an attack can take its gradient).

    :param log_probs: one ``(..., classes)`` tensor of log-probabilities per member.
    :param weights: one positive weight per member (default: equal weights).
    """
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
    members = list(log_probs)
    if not members:
        raise ValueError("an ensemble needs at least one member")
    weights = [1.0] * len(members) if weights is None else [float(w) for w in weights]
    if len(weights) != len(members):
        raise ValueError(f"{len(weights)} weights for {len(members)} members")
    if not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"ensemble weights must be finite and positive, got {weights}")
    total = sum(weights)
    if pool == "linear":
        return sum((w / total) * lp.exp() for w, lp in zip(weights, members))
    return sum((w / total) * lp for w, lp in zip(weights, members)).softmax(-1)
