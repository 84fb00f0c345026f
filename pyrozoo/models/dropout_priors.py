"""The priors of variational dropout: log-uniform (Sparse VD) and ARD (variance networks)."""

from typing import Optional

from torch import nn

from pyrozoo.distributions.ard import ARDNormal
from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.models.priors import Prior
from pyrozoo.models.selection import ParameterSelector


#: normalisation layers' affine scales are called ``weight`` too, but are not weights
NORMALIZATION_LAYERS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def _weights_by_default(selector, selector_kwargs):
    # variational dropout puts its prior on the weights; biases (and normalisation layers'
    # parameters) stay point estimates
    if selector is None and not selector_kwargs:
        return {"expose_parameters": ["weight"], "hide_types": NORMALIZATION_LAYERS}
    return selector_kwargs


class LogUniformPrior(Prior):
    r"""The improper log-uniform prior :math:`p(w) \propto 1/|w|` on every selected parameter
    entry (Kingma et al. 2015; Molchanov et al. 2017, eq. 6; thesis eq. 7).

    Sites are :class:`~pyrozoo.distributions.LogUniformImproper` placeholders: train with
    :class:`~pyrozoo.inference.ClosedFormKL_ELBO`, which uses the registered KL
    approximation (thesis eq. 8), and a Normal guide such as
    :class:`~pyrozoo.guides.SparseVariationalDropoutGuide` (or any mean-field Normal guide,
    whose log alpha is then derived from its location and scale).

    By default only parameters named ``weight`` are random (biases remain point estimates,
    as in Molchanov et al.); pass a selector or selector keywords to change that.
    """

    def __init__(self, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **_weights_by_default(selector, selector_kwargs))

    def distribution(self, name, module, param):
        key = (name, param.shape)
        return self._cached(key, lambda: LogUniformImproper(param.shape).to_event(param.dim()))


class ARDPrior(Prior):
    r"""Automatic relevance determination: a zero-mean Gaussian prior per entry whose variance
    is its empirical-Bayes optimum given the posterior, so that
    :math:`\mathrm{KL} = \tfrac12\log(1 + \alpha^{-1})` (Neklyudov et al. 2019; thesis sec.
    2.2). Sites are :class:`~pyrozoo.distributions.ARDNormal` placeholders (KL registered).
    By default only parameters named ``weight`` are random.
    """

    def __init__(self, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **_weights_by_default(selector, selector_kwargs))

    def distribution(self, name, module, param):
        key = (name, param.shape)
        return self._cached(key, lambda: ARDNormal(param.shape).to_event(param.dim()))
