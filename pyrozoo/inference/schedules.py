"""KL-weight schedules: the factor applied to the latent (KL) part of the objective.

A schedule is called as ``schedule(epoch, batch, num_batches)`` (0-based epoch and batch)
and returns the weight of the KL term for that step; :func:`pyrozoo.inference.fit`
applies it with :func:`pyrozoo.poutine.latent_scale`. The data plate already scales the
likelihood of a minibatch by ``N / n``, so a weight of 1 gives the unbiased ELBO.
"""

import math


class KLSchedule:
    """Base class; a constant weight of 1."""

    def __call__(self, epoch: int, batch: int, num_batches: int) -> float:
        return 1.0

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class ConstantKL(KLSchedule):
    """A fixed KL weight (``weight < 1`` is a tempered / "cold" posterior on the KL side)."""

    def __init__(self, weight: float = 1.0):
        if not (weight >= 0 and math.isfinite(weight)):
            raise ValueError(f"KL weight must be finite and non-negative, got {weight}")
        self.weight = float(weight)

    def __call__(self, epoch, batch, num_batches):
        return self.weight


class LinearKLWarmup(KLSchedule):
    """KL weight 0 (or ``initial``) until ``start_epoch``, rising linearly to 1 at ``end_epoch``.

    Progress is measured in fractional epochs, so the weight rises smoothly within an epoch.
    ``LinearKLWarmup(5, 20)`` is Molchanov et al. (2017)'s ``rw_linear`` (0 for 5 epochs,
    then linear over 15).
    """

    def __init__(self, start_epoch: float = 0.0, end_epoch: float = 10.0, initial: float = 0.0):
        if end_epoch <= start_epoch:
            raise ValueError(f"end_epoch ({end_epoch}) must exceed start_epoch ({start_epoch})")
        if not 0.0 <= initial <= 1.0:
            raise ValueError(f"initial weight must be in [0, 1], got {initial}")
        self.start_epoch = float(start_epoch)
        self.end_epoch = float(end_epoch)
        self.initial = float(initial)

    def __call__(self, epoch, batch, num_batches):
        t = epoch + batch / max(num_batches, 1)
        frac = min(max((t - self.start_epoch) / (self.end_epoch - self.start_epoch), 0.0), 1.0)
        return self.initial + (1.0 - self.initial) * frac


class BlundellKLReweighting(KLSchedule):
    r"""Blundell et al. (2015, eq. 9)'s minibatch weights :math:`\pi_i = 2^{M-i} / (2^M - 1)`.

    Within each epoch of ``M`` minibatches the ``i``-th (1-based) minibatch's loss is
    :math:`\pi_i \mathrm{KL} - \log p(\mathcal D_i \mid w)`; the weights sum to one over the
    epoch, so early minibatches are dominated by the complexity cost. Pyro's data plate
    scales the likelihood by ``M``, so the KL factor returned here is :math:`M \pi_i`
    (which keeps the epoch total identical). Evaluated in a form that neither overflows
    nor underflows for large ``M``.
    """

    def __call__(self, epoch, batch, num_batches):
        M = num_batches
        i = batch + 1
        if not 1 <= i <= M:
            raise ValueError(f"batch index {batch} outside an epoch of {M} minibatches")
        # pi_i = 2^{-i} / (1 - 2^{-M})
        return M * math.ldexp(1.0, -i) / -math.expm1(-M * math.log(2.0))
