"""MAP training of a plain network, with the objective the zoo's MAP minimises.

The zoo's ``map`` method (a :class:`~pyrozoo.guides.DeltaGuide` on a
:class:`~pyrozoo.models.BayesianNeuralNetwork`) minimises the negative log joint of a
minibatch of ``n`` out of ``N`` examples,

    - (N / n) sum_i log p(y_i | f(x_i), tau)  -  log N(w | 0, s^2 I)  -  log p(tau),

the likelihood's noise precision ``tau`` (regression) being a point estimate under its
prior too (the UCI protocol: ``Gamma(6, 6)``), with minibatches and Adam. The baselines train
their plain ``nn.Module`` networks with the same objective (:func:`negative_log_joint`), the
same likelihood objects and the same kind of loop (:func:`run_epochs`: one optimizer step per
minibatch, reshuffled every epoch, a learning-rate factor per epoch), so that Laplace is fitted
post hoc on the same kind of MAP fit, and an ensemble member is one such fit.
"""

import math
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from pyrozoo.data.batching import TensorBatches
from pyrozoo.distributions.util import distribution_to
from pyrozoo.models.likelihoods import GaussianLikelihood, Likelihood

__all__ = ["NoisePrecision", "negative_log_likelihood", "negative_log_joint", "run_epochs", "train_map"]


class NoisePrecision(nn.Module):
    """The likelihood's latent variables as point estimates: for a
    :class:`~pyrozoo.models.GaussianLikelihood` with a precision prior, the noise precision ``tau``
    (a learned ``log tau``, started at the prior mean); nothing for a fixed precision or a
    classifier.

    :meth:`latents` is what the likelihood's predictive takes (``{"precision": tau}`` or
    ``{}``); :meth:`log_prior` the prior's log density at ``tau`` (MAP in ``tau``, as the zoo's
    Delta guide: no Jacobian of the log transform).
    """

    def __init__(self, likelihood: Likelihood):
        super().__init__()
        self.prior = likelihood.precision_prior if isinstance(likelihood, GaussianLikelihood) else None
        if self.prior is not None:
            self.log_precision = nn.Parameter(torch.log(torch.as_tensor(float(self.prior.mean))))
        else:
            self.register_parameter("log_precision", None)

    def latents(self) -> Dict[str, torch.Tensor]:
        return {} if self.log_precision is None else {"precision": self.log_precision.exp()}

    def log_prior(self) -> torch.Tensor:
        if self.log_precision is None:
            return torch.zeros(())
        tau = self.log_precision.exp()
        return distribution_to(self.prior, tau.device, tau.dtype).log_prob(tau)


def negative_log_likelihood(likelihood: Likelihood, output: torch.Tensor, y: torch.Tensor, latents: Dict[str, torch.Tensor]) -> torch.Tensor:
    """``-log p(y_i | f(x_i), latents)`` per example (shape ``(n,)``), through the likelihood's own predictive distribution."""
    y = likelihood.check_obs(output, y)
    return -likelihood.predictive_distribution(output, **latents).log_prob(y)


def negative_log_joint(
    likelihood: Likelihood, output: torch.Tensor, y: torch.Tensor, noise: NoisePrecision, dataset_size: int,
    parameters: Sequence[torch.Tensor] = (), prior_scale: Optional[float] = 1.0,
) -> torch.Tensor:
    """The minibatch estimate of the negative log joint (module docstring), up to constants.

    :param output: the network's output on the minibatch (logits, or the mean of ``y``).
    :param parameters: the weights under the ``N(0, prior_scale^2)`` prior; ``prior_scale=None``
        drops the prior (plain maximum likelihood, as Lakshminarayanan et al. 2017 train
        ensemble members).
    """
    loss = negative_log_likelihood(likelihood, output, y, noise.latents()).mean() * dataset_size - noise.log_prior()
    if prior_scale is not None:
        loss = loss + sum(p.pow(2).sum() for p in parameters) / (2.0 * float(prior_scale) ** 2)
    return loss


def run_epochs(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int,
    seed: int = 0, schedulers: Sequence[torch.optim.lr_scheduler.LRScheduler] = (),
) -> List[float]:
    """``epochs`` passes over ``(x, y)`` in minibatches of ``batch_size`` (reshuffled every
    epoch by a generator seeded with ``seed``), calling ``step(x_batch, y_batch) -> loss`` once
    per minibatch and each scheduler once per epoch. Returns the mean loss of each epoch (read
    once per epoch); a non-finite one stops training with an error."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be an int >= 1, got {epochs!r}")
    batches = TensorBatches(x, y, batch_size=int(batch_size), seed=seed)
    history = []
    for epoch in range(epochs):
        total = torch.zeros((), device=x.device)
        for xb, yb, _ in batches:
            total = total + step(xb, yb).detach()
        for scheduler in schedulers:
            scheduler.step()
        history.append(float(total) / len(batches))
        if not math.isfinite(history[-1]):
            raise FloatingPointError(f"training diverged: the mean loss of epoch {epoch} is {history[-1]}; lower the learning rate")
    return history


def train_map(
    net: nn.Module, likelihood: Likelihood, x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int, lr: float,
    lr_schedule: Optional[Callable[[int], float]] = None, prior_scale: Optional[float] = 1.0, seed: int = 0,
) -> NoisePrecision:
    """Fits ``net`` (in place) and the likelihood's noise precision by MAP
    (:func:`negative_log_joint`) with Adam, one step per minibatch; returns the fitted
    :class:`NoisePrecision`. ``lr_schedule``: ``epoch -> factor`` of ``lr``, as in
    :func:`pyrozoo.inference.fit`."""
    noise = NoisePrecision(likelihood).to(device=x.device, dtype=x.dtype if x.is_floating_point() else None)
    params = [p for p in [*net.parameters(), *noise.parameters()] if p.requires_grad]
    weights = list(net.parameters())
    optimizer = torch.optim.Adam(params, lr=lr)
    schedulers = [torch.optim.lr_scheduler.LambdaLR(optimizer, lr_schedule)] if lr_schedule is not None else []
    n = len(x)
    net.train()

    def step(xb, yb):
        optimizer.zero_grad(set_to_none=True)
        loss = negative_log_joint(likelihood, net(xb), yb, noise, n, weights, prior_scale)
        loss.backward()
        optimizer.step()
        return loss

    run_epochs(step, x, y, epochs=epochs, batch_size=batch_size, seed=seed, schedulers=schedulers)
    net.eval()
    return noise
