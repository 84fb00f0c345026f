"""Guards for the improper priors (the log-uniform of sparse variational dropout, ARD): what a
guide or a sampler cannot do with them, refused up front with what to use instead.

The log-uniform density :math:`1/|w|` is not integrable at 0, so the posterior it gives is
improper and its log-joint is unbounded at :math:`w = 0`; the ARD prior's variance is the
empirical-Bayes optimum for a given Normal posterior, with no density of its own. Only a
posterior with a spread, scored through the registered KLs, fits either.
"""

from pyrozoo.distributions import ARDNormal, LogUniformImproper


def placeholder_prior(fn):
    """The :class:`~pyrozoo.distributions.LogUniformImproper` or
    :class:`~pyrozoo.distributions.ARDNormal` under ``fn``'s wrappers (``Independent``,
    ``Expanded``, ``Masked``), else ``None``."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn if isinstance(fn, (LogUniformImproper, ARDNormal)) else None


_LOG_UNIFORM = (
    "the improper log-uniform prior p(w) ~ 1/|w| (LogUniformImproper: LogUniformPrior's weights, "
    "GroupNormalJeffreysPrior's group scales)"
)
_ARD = (
    "the ARD prior (ARDNormal, ARDPrior), whose variance is the empirical-Bayes optimum mu^2 + sigma^2 of a "
    "Normal posterior N(mu, sigma^2) and which has no density of its own"
)
_WITH_A_GUIDE = (
    "SparseVariationalDropoutGuide or MeanFieldNormalGuide (BayesianCompressionGuide for GroupNormalJeffreysPrior; "
    "VariationalDropoutGuide for ARD variance networks) with ClosedFormKL_ELBO, which use the registered KL"
)


def check_point_estimate(owner: str, name: str, fn) -> None:
    """Raises ``ValueError`` when site ``name``'s prior ``fn`` has no MAP: the log-uniform
    log-density ``-log|w|`` grows without bound as ``w -> 0``, so the log-joint has no
    maximum (only local modes for weights the data hold away from 0; the others oscillate
    around 0 at the optimizer's step size), and ARD's optimal variance for a point mass at
    ``w`` is ``w^2``, whose density ``N(w | 0, w^2)`` is unbounded in the same way."""
    prior = placeholder_prior(fn)
    if prior is None:
        return
    what = _LOG_UNIFORM if isinstance(prior, LogUniformImproper) else _ARD
    raise ValueError(
        f"{owner} cannot fit site {name!r}: its prior is {what}. There is no MAP under it: the log-joint grows "
        "without bound as a weight goes to 0, so a weight the data do not hold firmly is drawn to 0 and oscillates "
        "there at the scale of the optimizer's step, and the loss and the estimate depend on the optimizer, not the "
        f"model. Fit a posterior with a spread instead: {_WITH_A_GUIDE}; or, for a point estimate, give the weights "
        "a proper sparsity prior, e.g. IIDPrior(dist.Laplace(0., b)) (an L1 penalty) or NormalPrior"
    )


def check_samplable(owner: str, name: str, fn) -> None:
    """Raises ``ValueError`` when the posterior of site ``name`` under its prior ``fn`` cannot
    be sampled: under the log-uniform prior it is improper (``p(D | w) / |w|`` is not
    integrable at ``w = 0`` for any data with ``p(D | 0) > 0``), and the ARD prior has no
    density to sample with."""
    prior = placeholder_prior(fn)
    if prior is None:
        return
    if isinstance(prior, LogUniformImproper):
        why = (
            f"its prior is {_LOG_UNIFORM}, under which the posterior is improper as well (p(D | w) / |w| is not "
            "integrable at w = 0), so there is no distribution to sample"
        )
    else:
        why = f"its prior is {_ARD}, so there is no posterior density to sample"
    raise ValueError(
        f"{owner} cannot sample site {name!r}: {why}. For stochastic-gradient MCMC give the weights a proper prior "
        "(SpikeAndSlabPrior with StochasticApproximation, GroupHorseshoePrior, IIDPrior(dist.Laplace(0., b)), "
        f"NormalPrior); to keep this prior, fit it variationally: {_WITH_A_GUIDE}"
    )


__all__ = ["placeholder_prior", "check_point_estimate", "check_samplable"]
