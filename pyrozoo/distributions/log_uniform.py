"""The improper log-uniform distribution of variational dropout."""

import torch
from pyro.distributions import TorchDistribution, constraints

from pyrozoo.distributions.util import check_shape
from pyrozoo.poutine.stack import initialising


def initial_placeholder(shape: torch.Size):
    """Ones of ``shape`` while an initialisation strategy runs (an ``InitMessenger`` is active),
    else ``None``. Pyro's strategies call ``sample()`` only to learn a site's shape and a
    feasible point, e.g. ``Predictive`` traces the model once under ``init_to_sample`` before
    it replays the guide's draws: a distribution that cannot be sampled answers with this
    placeholder there instead of failing, and raises everywhere else."""
    if initialising():
        return torch.ones(shape)
    return None


class LogUniformImproper(TorchDistribution):
    r"""Improper log-uniform density on the reals, :math:`p(w) \propto 1 / |w|`, i.e. a uniform
    density of :math:`\log |w|` (Kingma, Salimans & Welling 2015; Molchanov et al. 2017,
    sec. 3; thesis eq. 7).

    It has no normalising constant and cannot be sampled (``sample`` raises, except for the
    placeholder of :func:`initial_placeholder`): it is a placeholder prior whose
    only use is ``KL(q || p)`` (registered in :mod:`pyrozoo.distributions.kl` with the
    approximation of the thesis' eq. 8) and an unnormalised ``log_prob = -log |w|``.
    Train against it with an objective that uses the registered KL
    (:class:`~pyrozoo.inference.ClosedFormKL_ELBO`).

    :param batch_shape: shape of the (independent) entries.
    """

    arg_constraints = {}
    support = constraints.real
    has_rsample = False

    def __init__(self, batch_shape=torch.Size(), validate_args=None):
        super().__init__(check_shape("LogUniformImproper", "batch_shape", batch_shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogUniformImproper, _instance)
        super(LogUniformImproper, new).__init__(torch.Size(batch_shape), validate_args=False)
        new._validate_args = self._validate_args
        return new

    def log_prob(self, value):
        """The unnormalised log-density ``-log |value|`` (``+inf`` at 0)."""
        if self._validate_args:
            self._validate_sample(value)
        return -value.abs().log()

    def sample(self, sample_shape=torch.Size()):
        placeholder = initial_placeholder(torch.Size(sample_shape) + self.batch_shape)
        if placeholder is not None:
            return placeholder
        raise NotImplementedError(
            "LogUniformImproper is an improper prior and cannot be sampled, so the model cannot be run from its prior: "
            "to predict, pass a fitted guide or posterior samples (Predictive(model, guide=guide, ...) or "
            "Predictive(model, posterior_samples=...)); to fit, use a Normal guide (SparseVariationalDropoutGuide, "
            "MeanFieldNormalGuide) with ClosedFormKL_ELBO, which uses the registered KL"
        )
