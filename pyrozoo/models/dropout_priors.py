"""The priors of variational dropout: log-uniform (Sparse VD) and ARD (variance networks),
and what they can be paired with.

Both are placeholders that only a Normal posterior can be scored against (through the
registered KLs): the log-uniform density :math:`1/|w|` is not integrable at 0, so the
posterior it gives is improper and its log-joint is unbounded at :math:`w = 0`; the ARD
prior's variance is the empirical-Bayes optimum for a given Normal posterior. Point
estimates and samplers are therefore refused up front
(:func:`~pyrozoo.models.improper.check_point_estimate`,
:func:`~pyrozoo.models.improper.check_samplable`), naming what to use instead.

**KL warm-up.** Trained at full KL weight from the first step, both priors can leave a small
network with near-uniform predictions for thousands of steps. While ``alpha < 1`` the KL's
gradient on a weight's mean is about ``1/|mu|`` (``KL ~ log|mu| - log sigma``: the prior's
own pull to 0) whatever ``alpha`` is, and at the start it outweighs the data term, which
grows with the number of examples ``N`` and is weak before the network has learned anything:
Adam moves every such mean toward 0 by the step size per step, so most weights are pruned
(``log alpha > 3``) before the data can act. This is no initialisation effect: a larger
initial ``log sigma^2`` prunes the same way, and a smaller one only hides the KL's gradient
behind the ``log alpha`` clip, which then never lets the weights be pruned (the ``-14`` row
below). Molchanov et al. (2017) warm the KL up (weight 0 for 5 epochs, linear to 1 at 20).
Measured on a 3-class CNN (conv 4@3x3, max-pool, linear; 147 weights) on 100 synthetic 8x8
images (``tests/models/test_prior_guide_pairing.py``), Adam at 1e-3, batch 50: test accuracy
at the end of runs of ``T`` steps, with the KL weight at 1 throughout or rising linearly from
0 to 1 over the first ``T/3`` steps:

===============================================  =====  =====  ======  ======
``SparseVariationalDropoutGuide``, ``T`` steps   300    600    1000    4000
===============================================  =====  =====  ======  ======
no warm-up                                       0.48   0.61   0.63    0.81
warm-up over the first ``T/3`` steps             0.72   0.99   0.99    1.00
===============================================  =====  =====  ======  ======

A warm-up must last as long as the network takes to fit the data without the KL (here about
200 steps): a shorter one is followed by the same pruning. At initialisation the KL's
gradient exceeds the data term's on about 80% of the means with 100 images, 20% with 1000
(and with 1000 images both runs reach 1.00 within 200 steps). (The ``T = 4000`` row was read
at step 3996.) ``ARDPrior`` with ``VariationalDropoutGuide`` behaves alike: 0.64 after 666
steps and 0.90 after 4000 without warm-up, 1.00 with one over the first 1333. No initial
``log sigma^2`` helps: -6 prunes as -10 does, and -14 (``log alpha`` below the clip of -8,
where the KL has no gradient) fits (0.99 after 1000 steps) only because the KL does not act
while the weights stay below the clip: 43% of them kept and an ELBO of -290 after 1000
steps, against 18% and -107 with the warm-up.

The schedule belongs to the training run, and :func:`~pyrozoo.inference.fit` holds nothing
method-specific, so instead of a default schedule these priors warn (:class:`KLWarmupWarning`, once per prior) when their first two training evaluations
(with gradients, outside a guide's set-up) both run at full KL weight.
"""

import warnings
from typing import Optional

import torch
from torch import nn

from pyrozoo.distributions.ard import ARDNormal
from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.models.priors import Prior
from pyrozoo.models.selection import ParameterSelector
from pyrozoo.poutine.stack import latent_weight


#: normalisation layers' affine scales are called ``weight`` too, but are not weights
NORMALIZATION_LAYERS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


def _weights_by_default(selector, selector_kwargs):
    # variational dropout puts its prior on the weights; biases (and normalisation layers'
    # parameters) stay point estimates
    if selector is None and not selector_kwargs:
        return {"expose_parameters": ["weight"], "hide_types": NORMALIZATION_LAYERS}
    return selector_kwargs


class KLWarmupWarning(UserWarning):
    """A log-uniform or ARD prior is trained at full KL weight from the first step."""


#: training evaluations at full KL weight after which a dropout prior warns
WARMUP_EVALUATIONS = 2


class _DropoutPrior(Prior):
    """The dropout priors' shared part: weights by default, and the warm-up watch (see the
    module docstring): the first site seen marks one evaluation; the watch ends at the first
    evaluation below full weight or with the warning."""

    def __init__(self, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **_weights_by_default(selector, selector_kwargs))
        self._watch_site: Optional[str] = None
        self._full_weight_evaluations = 0
        self._watching = True

    def _watch_warmup(self, name: str) -> None:
        if self._watch_site is None:
            self._watch_site = name
        if name != self._watch_site:
            return
        weight = latent_weight()
        if weight is None:
            return
        if weight < 1.0:
            self._watching = False
            return
        self._full_weight_evaluations += 1
        if self._full_weight_evaluations >= WARMUP_EVALUATIONS:
            self._watching = False
            warnings.warn(
                KLWarmupWarning(
                    f"{type(self).__name__} is trained at full KL weight from the first step. Unless the data set is large "
                    "compared with the number of weights, the KL's pull on every weight (about 1/|w| while alpha < 1) "
                    "outweighs the data term at the start and prunes the weights before the data can act, which leaves "
                    "near-uniform predictions for thousands of steps. Warm the KL up, as Molchanov et al. (2017) do with "
                    "fit(..., kl_schedule=LinearKLWarmup(5, 20)) (weight 0 for 5 epochs, then linear to 1 at epoch 20), "
                    "over at least as many steps as the network takes to fit the data without the KL (on a small data "
                    "set, hundreds of steps, not a few epochs); in a loop of your own, scale the KL with "
                    "pyrozoo.poutine.latent_scale(w). If the full KL from the first step is intended, filter "
                    "KLWarmupWarning."
                ),
                stacklevel=3,
            )

    def distribution(self, name, module, param):
        if self._watching and torch.is_grad_enabled():
            self._watch_warmup(name)
        return self._cached((name, param.shape), lambda: self._placeholder(param.shape).to_event(param.dim()))

    def _placeholder(self, shape):
        raise NotImplementedError


class LogUniformPrior(_DropoutPrior):
    r"""The improper log-uniform prior :math:`p(w) \propto 1/|w|` on every selected parameter
    entry (Kingma et al. 2015; Molchanov et al. 2017, eq. 6; thesis eq. 7).

    Sites are :class:`~pyrozoo.distributions.LogUniformImproper` placeholders: train with
    :class:`~pyrozoo.inference.ClosedFormKL_ELBO`, which uses the registered KL
    approximation (thesis eq. 8), and a Normal guide such as
    :class:`~pyrozoo.guides.SparseVariationalDropoutGuide` or
    :class:`~pyrozoo.guides.MeanFieldNormalGuide` (``N(mu, sigma^2)`` is Sparse VD's additive
    parameterisation, with ``log alpha = log sigma^2 - log mu^2``; the KL depends on alpha
    only, as the prior is scale-invariant). MAP (``DeltaGuide``) and SG-MCMC are refused:
    see :func:`~pyrozoo.models.improper.check_point_estimate` and :func:`~pyrozoo.models.improper.check_samplable`. Train with a KL warm-up
    (:class:`~pyrozoo.inference.LinearKLWarmup`, as Molchanov et al.): see
    the module docstring for what happens without one (:class:`KLWarmupWarning`).

    By default only parameters named ``weight`` are random (biases remain point estimates,
    as in Molchanov et al.); pass a selector or selector keywords to change that.
    """

    _placeholder = staticmethod(LogUniformImproper)


class ARDPrior(_DropoutPrior):
    r"""Automatic relevance determination: a zero-mean Gaussian prior per entry whose variance
    is its empirical-Bayes optimum given the posterior, so that
    :math:`\mathrm{KL} = \tfrac12\log(1 + \alpha^{-1})` (Neklyudov et al. 2019; thesis sec.
    2.2). Sites are :class:`~pyrozoo.distributions.ARDNormal` placeholders (KL registered):
    train with a Normal guide and :class:`~pyrozoo.inference.ClosedFormKL_ELBO`, with a KL
    warm-up (see the module docstring); MAP and SG-MCMC are refused. By default only
    parameters named ``weight`` are random.
    """

    _placeholder = staticmethod(ARDNormal)
