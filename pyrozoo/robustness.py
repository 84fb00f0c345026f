"""Robustness to adversarial inputs: the fast gradient sign method (FGSM).

Goodfellow, Shlens & Szegedy (2015, eq. 3) perturb an input by ``epsilon`` in the direction
of the sign of the loss gradient. For a Bayesian model the loss is that of the
*posterior-averaged* predictive distribution,

.. math::

    x_\\text{adv} = \\operatorname{clip}_{[0, 1]}\\big(x + \\epsilon\\,
        \\operatorname{sign} \\nabla_x [-\\log \\bar p(y \\mid x)]\\big),
    \\qquad \\bar p(y \\mid x) = \\tfrac1S \\textstyle\\sum_s p(y \\mid x, w_s),

so an attack on an ensemble or a posterior sees the gradient of the ensemble's own loss
(as in the variance-network robustness experiments of Neklyudov et al. 2019; Deng et al.
2019 describe their attack this way, but their code does otherwise, see below). ``probs_fn`` supplies ``\\bar p``; when it is
stochastic (fresh posterior draws per call), the attack and the evaluation use different
draws.

Two variations cover other published protocols. ``target="prediction"`` attacks the class
the model predicts instead of the label, :math:`x - \\epsilon \\operatorname{sign}\\nabla_x
\\max_y \\log \\bar p(y \\mid x)` (Deng et al.'s ``fgsm``, which needs no labels).
``attack_probs_fn`` crafts the inputs with one model and evaluates another: Deng et al.'s
code (``tools/attacker.py``) crafts the adversarial images once with a single network and
then accumulates the ensemble's predictions on those fixed images, a transfer attack on the
ensemble rather than a white-box one.
"""

import math
from typing import Callable, Iterable, Optional

import pandas as pd
import torch

__all__ = ["fgsm_attack", "fgsm_accuracy", "TARGETS"]

#: what the attack lowers the probability of: the true label, or the model's own prediction
TARGETS = ("label", "prediction")

ProbsFn = Callable[[torch.Tensor], torch.Tensor]


def _check_inputs(x: torch.Tensor, y: torch.Tensor) -> None:
    if not torch.is_tensor(x) or not torch.is_tensor(y):
        raise TypeError("x and y must be tensors")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
    if y.dim() != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"y must be a vector of one label per input: x has shape {tuple(x.shape)}, y {tuple(y.shape)}")
    if y.is_floating_point() or y.dtype == torch.bool:
        raise TypeError(f"y must hold integer class labels, got {y.dtype}")


def _check_target(target) -> str:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    return target


def _check_epsilon(epsilon) -> float:
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"the attack strength epsilon must be a finite non-negative number, got {epsilon!r}")
    return eps


def _class_probs(probs_fn: ProbsFn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    probs = probs_fn(x)
    if probs.dim() != 2 or probs.shape[0] != x.shape[0]:
        raise ValueError(f"probs_fn must return (n, classes) probabilities, got shape {tuple(probs.shape)}")
    if int(y.max()) >= probs.shape[1] or int(y.min()) < 0:
        raise ValueError(f"labels must lie in [0, {probs.shape[1]}), got range [{int(y.min())}, {int(y.max())}]")
    return probs


def fgsm_attack(probs_fn: ProbsFn, x: torch.Tensor, y: torch.Tensor, epsilon: float, target: str = "label") -> torch.Tensor:
    """Adversarial inputs ``clip(x + epsilon * sign(grad_x -log p(c | x)), 0, 1)``.

    :param probs_fn: ``x -> (n, classes)`` posterior-averaged class probabilities,
        differentiable in ``x``.
    :param x: inputs with values in [0, 1].
    :param y: integer labels, shape ``(n,)``.
    :param epsilon: attack strength (max-norm of the perturbation), ``>= 0``.
    :param target: the class ``c`` whose probability the attack lowers: ``"label"`` (``y``)
        or ``"prediction"`` (``argmax_c p(c | x)``; ``y`` is then only checked).
    :returns: the perturbed inputs (detached), same shape as ``x``.
    """
    _check_inputs(x, y)
    eps = _check_epsilon(epsilon)
    _check_target(target)
    if eps == 0:
        return x.detach().clone()
    x_var = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        probs = _class_probs(probs_fn, x_var, y)
        attacked = y if target == "label" else probs.detach().argmax(1)
        picked = probs.gather(1, attacked.reshape(-1, 1)).squeeze(1)
        # probabilities that underflow to 0 give no direction (zero gradient) instead of NaN
        loss = -picked.clamp_min(torch.finfo(picked.dtype).tiny).log().sum()
        (grad,) = torch.autograd.grad(loss, x_var)
    return (x.detach() + eps * grad.sign()).clamp_(0.0, 1.0)


def fgsm_accuracy(
    probs_fn: ProbsFn,
    x: torch.Tensor,
    y: torch.Tensor,
    epsilons: Iterable[float],
    batch_size: Optional[int] = 500,
    *,
    attack_probs_fn: Optional[ProbsFn] = None,
    target: str = "label",
) -> pd.DataFrame:
    """Accuracy of ``probs_fn`` on FGSM inputs of every strength in ``epsilons``.

    :param batch_size: inputs attacked and evaluated at a time (``None``: all at once).
    :param attack_probs_fn: the model the inputs are crafted against (default: ``probs_fn``
        itself, a white-box attack); ``probs_fn`` is the model evaluated on them.
    :param target: see :func:`fgsm_attack`.
    :returns: a ``DataFrame`` with columns ``epsilon`` and ``accuracy`` (a fraction), one
        row per strength in the given order (``epsilon = 0`` is the clean accuracy).
    """
    _check_inputs(x, y)
    _check_target(target)
    attack_fn = probs_fn if attack_probs_fn is None else attack_probs_fn
    epsilons = [_check_epsilon(e) for e in epsilons]
    if not epsilons:
        raise ValueError("epsilons must hold at least one attack strength")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
    n = x.shape[0]
    if n == 0:
        raise ValueError("no inputs to attack")
    step = n if batch_size is None else batch_size
    rows = []
    for eps in epsilons:
        correct = 0
        for start in range(0, n, step):
            xb, yb = x[start : start + step], y[start : start + step]
            x_adv = fgsm_attack(attack_fn, xb, yb, eps, target)
            with torch.no_grad():
                probs = _class_probs(probs_fn, x_adv, yb)
            correct += int((probs.argmax(1) == yb).sum())
        rows.append({"epsilon": eps, "accuracy": correct / n})
    return pd.DataFrame(rows, columns=["epsilon", "accuracy"])
