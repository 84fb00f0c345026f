"""Variational learning with IVON (Shen et al., "Variational Learning is Effective for Large
Deep Networks", ICML 2024), through the ``ivon-opt`` package (``pip install ivon-opt``).

IVON is an optimizer that learns a diagonal Gaussian posterior ``N(m, diag(1 / (lambda (h +
delta))))`` over the weights: each step draws weights from it (``sampled_params(train=True)``),
takes the gradient of the minibatch's mean loss there, and updates the mean ``m`` by a
preconditioned momentum step and the Hessian estimate ``h`` by the reparameterisation trick
(the paper's Algorithm 1). ``lambda`` (``ess``) is the effective sample size, the training set
size ``N`` for a posterior; ``delta`` (``weight_decay``) is the prior precision per example, so
a ``N(0, s^2)`` weight prior is ``delta = 1 / (s^2 N)``. Predictions average over weights
drawn from the learned posterior (``sampled_params()``).

For regression the Gaussian noise precision is a point estimate under its prior, fitted by
Adam beside IVON (it is not one of IVON's weights), as the zoo's UCI protocol infers it.
"""

from typing import Callable, Dict, Optional, Tuple

import torch
from torch import nn

from pyrozoo.baselines.predictive import Baseline, check_likelihood
from pyrozoo.baselines.training import NoisePrecision, negative_log_likelihood, run_epochs
from pyrozoo.models.likelihoods import Likelihood

__all__ = ["IVONBaseline", "require_ivon"]


def require_ivon():
    """The ``ivon`` module, or an ``ImportError`` that says how to install it."""
    try:
        import ivon
    except ImportError as e:
        raise ImportError("the IVON baseline needs the ivon-opt package: pip install ivon-opt (or pip install 'pyrozoo[baselines]')") from e
    return ivon


class IVONBaseline(Baseline):
    """A network trained by the IVON optimizer and predicted with its posterior's samples.

    :param net: the network (its parameters are the posterior mean, trained in place).
    :param likelihood: :class:`~pyrozoo.models.GaussianLikelihood` or :class:`~pyrozoo.models.CategoricalLikelihood`.
    :param prior_scale: ``s`` of the ``N(0, s^2)`` weight prior (``weight_decay = 1 / (s^2 N)``),
        unless ``weight_decay`` is given.
    :param hess_init: IVON's initial Hessian ``h_0`` (the initial posterior variance is
        ``1 / (N (h_0 + delta))``).
    :param optimizer_kwargs: further arguments of ``ivon.IVON`` (``beta1``, ``beta2``,
        ``clip_radius``, ``mc_samples``, ...).
    """

    def __init__(self, net: nn.Module, likelihood: Likelihood, *, prior_scale: float = 1.0, weight_decay: Optional[float] = None, hess_init: float = 0.1, **optimizer_kwargs):
        require_ivon()
        self.net = net
        self.likelihood = check_likelihood(likelihood)
        self.prior_scale, self.weight_decay, self.hess_init = prior_scale, weight_decay, hess_init
        self.optimizer_kwargs = optimizer_kwargs
        self.optimizer = None
        self.noise = NoisePrecision(self.likelihood)

    def fit(
        self, x: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int, lr: float, noise_lr: float = 1e-2,
        lr_schedule: Optional[Callable[[int], float]] = None, seed: int = 0,
    ) -> list:
        """Trains for ``epochs`` epochs, one IVON step per minibatch (one gradient per step
        with the default ``mc_samples=1``); returns the mean minibatch loss (negative log
        likelihood per example at the sampled weights) of each epoch."""
        ivon = require_ivon()
        n = len(x)
        weight_decay = self.weight_decay if self.weight_decay is not None else 1.0 / (float(self.prior_scale) ** 2 * n)
        self.noise = self.noise.to(device=x.device, dtype=x.dtype)
        self.optimizer = ivon.IVON(self.net.parameters(), lr=lr, ess=float(n), weight_decay=weight_decay, hess_init=self.hess_init, **self.optimizer_kwargs)
        noise_params = list(self.noise.parameters())
        noise_optimizer = torch.optim.Adam(noise_params, lr=noise_lr) if noise_params else None
        optimizers = [self.optimizer] + ([noise_optimizer] if noise_optimizer else [])
        schedulers = [torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule) for opt in optimizers] if lr_schedule is not None else []
        mc_samples = self.optimizer.mc_samples
        self.net.train()

        def step(xb, yb):
            total = 0.0
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            for _ in range(mc_samples):
                with self.optimizer.sampled_params(train=True):
                    # the noise precision's prior, per example, so its optimum is the MAP one
                    loss = negative_log_likelihood(self.likelihood, self.net(xb), yb, self.noise.latents()).mean() - self.noise.log_prior() / n
                    loss.backward()
                total = total + loss.detach()
            for opt in optimizers:
                opt.step()
            return total / mc_samples

        history = run_epochs(step, x, y, epochs=epochs, batch_size=batch_size, seed=seed, schedulers=schedulers)
        self.net.eval()
        return history

    def sample_outputs(self, x: torch.Tensor, num_samples: int = 100) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
        """Network outputs under ``num_samples`` weights drawn from IVON's posterior."""
        if self.optimizer is None:
            raise RuntimeError("IVONBaseline: not trained yet; call fit(x, y, ...) first")
        outputs = []
        with torch.no_grad():
            for _ in range(num_samples):
                with self.optimizer.sampled_params():
                    outputs.append(self.net.eval()(x))
        f = torch.stack(outputs)
        latents = {k: v.detach().expand(num_samples) for k, v in self.noise.latents().items()}
        return f, latents
