"""The automatic-relevance-determination (ARD) prior as a placeholder distribution."""

import torch
from pyro.distributions import TorchDistribution, constraints

from pyrozoo.distributions.log_uniform import initial_placeholder
from pyrozoo.distributions.util import check_shape


class ARDNormal(TorchDistribution):
    r"""Zero-mean Gaussian prior :math:`\mathcal N(w \mid 0, \lambda^2)` whose per-entry variance
    is set to its empirical-Bayes optimum given the posterior (automatic relevance
    determination; MacKay 1994, Neal 1996).

    For a posterior :math:`\mathcal N(\mu, \sigma^2)` the optimum is :math:`\lambda^2 = \mu^2 +
    \sigma^2`, at which :math:`\mathrm{KL}(q \,\|\, p) = \tfrac12 \log(1 + \alpha^{-1})` with
    :math:`\alpha = \sigma^2 / \mu^2` — the ARD objective of variance networks (Neklyudov et
    al. 2019; thesis sec. 2.2, whose "ARD prior" behaves like the log-uniform prior of sparse
    variational dropout). Because the prior depends on the posterior, it has a density only
    through that KL (registered in :mod:`pyrozoo.distributions.kl`): ``log_prob`` and
    ``sample`` raise.

    :param batch_shape: shape of the (independent) entries.
    """

    arg_constraints = {}
    support = constraints.real
    has_rsample = False

    def __init__(self, batch_shape=torch.Size(), validate_args=None):
        super().__init__(check_shape("ARDNormal", "batch_shape", batch_shape), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ARDNormal, _instance)
        super(ARDNormal, new).__init__(torch.Size(batch_shape), validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        return torch.zeros(self.batch_shape)

    def log_prob(self, value):
        raise NotImplementedError(
            "the ARD prior's variance is the empirical-Bayes optimum for the posterior, so it has no "
            "density of its own; use an objective with the registered KL (ClosedFormKL_ELBO) and a "
            "Normal guide"
        )

    def sample(self, sample_shape=torch.Size()):
        placeholder = initial_placeholder(torch.Size(sample_shape) + self.batch_shape)
        if placeholder is not None:  # an initialisation strategy learning the site's shape
            return placeholder
        raise NotImplementedError(
            "the ARD prior depends on the posterior and cannot be sampled on its own: to predict, pass a fitted guide or "
            "posterior samples (Predictive(model, guide=guide, ...) or Predictive(model, posterior_samples=...))"
        )
