r"""The doubly semi-implicit variational bound (DSIVI), with SIVI and structured SIVI as cases."""

from contextlib import nullcontext
from typing import Optional

import torch
from pyro.distributions.util import scale_and_mask
from pyro.poutine.util import site_is_subsample

from pyrozoo.distributions.semi_implicit import (
    PriorComponentCache,
    SemiImplicitCacheMiss,
    find_semi_implicit,
    semi_implicit_role,
    semi_implicit_samples,
)
from pyrozoo.inference.elbo import ClosedFormKL_ELBO


def _check_count(name, k):
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"{name} must be a non-negative int, got {k!r}")


class DSIVI_ELBO(ClosedFormKL_ELBO):
    r"""The DSIVI lower bound (Molchanov 2022, Eq. 14):

    .. math::

        \underline{\mathcal L}_{K_1,K_2} = \mathbb E_{q(z)} \log p(x \mid z)
            - \mathbb E_{\psi^{0..K_1}} \mathbb E_{q(z\mid\psi^0)} \log \frac{1}{K_1+1} \sum_{k=0}^{K_1} q(z \mid \psi^k)
            + \mathbb E_{\zeta^{1..K_2}} \mathbb E_{q(z)} \log \frac{1}{K_2} \sum_{j=1}^{K_2} p(z \mid \zeta^j).

    Any guide or model site may be a :class:`~pyrozoo.distributions.SemiImplicit` (possibly
    wrapped by ``.to_event``); for such a pair the latent term is the guide-side estimate
    (:math:`K_1` fresh mixing draws plus the generating :math:`\psi^0`) minus the model-side
    estimate (:math:`K_2` fresh draws). An explicit side enters exactly: an explicit prior
    gives SIVI's bound (Yin & Zhou 2018; :class:`SIVI_ELBO`), an explicit guide its analytic
    entropy where it has one. Sites where both sides are explicit keep the closed-form KLs of
    :class:`~pyrozoo.inference.ClosedFormKL_ELBO` (and its direct evaluation of
    ``BayesianNeuralNetwork`` models). The bound is monotone in :math:`K_1, K_2`, below the
    ELBO, and tends to it (Theorem 2).

    Semi-implicit distributions with independent mixing per group (``group_ndims``, e.g.
    per weight or per step of an autoregressive conditional) are estimated per group and
    summed: the structured bound (SSIVI, Eq. 26), tighter than the joint one (Theorem 4).
    ``structured=False`` uses the joint estimator (Eq. 25) everywhere, for comparison.

    ``bound="upper"`` computes the sandwich upper bound instead (§3.2 of the DSIVI paper:
    the guide side without :math:`\psi^0`, the prior side with :math:`\zeta^0 \sim p(\zeta\mid z)`
    from the prior's ``reverse_conditional``); it is for evaluation, not for training.

    :param int K1: fresh guide-side mixing draws (``0`` gives the simple bound :math:`\underline{\mathcal L}_0`).
    :param int K2: fresh prior-side mixing draws (at least 1 when a prior is semi-implicit).
    :param bool structured: per-group estimates where distributions declare groups.
    :param str bound: ``"lower"`` or ``"upper"``.
    :param prior_cache: a :class:`~pyrozoo.distributions.PriorComponentCache`: the
        :math:`K_2` draws of each semi-implicit prior site are kept and reused across
        evaluations, each for at most ``refresh_every`` parameter states, without gradient
        through them (see there for what exactly changes). For priors whose components are
        expensive (the aggregated posterior: an encoder pass per draw). ``None`` (default):
        fresh draws with gradient at every evaluation, Eq. 14 as written. Sites are keyed
        by name; an evaluation that does not name its prior site (the direct BNN path) is
        left uncached.

    Other arguments (``num_particles``, ``vectorize_particles``, ``max_plate_nesting``, ...)
    are Pyro's ``ELBO`` ones.

    Example (a BNN whose weight prior is the marginal of a Normal-Gamma hierarchy, with a
    hypernetwork posterior)::

        model = BayesianNeuralNetwork(net, NormalGammaPrior(1.0, 1.0, form="marginal"), GaussianLikelihood(N))
        guide = SemiImplicitGuide(model, num_mixing=16)
        fit(model, guide, (x, y), epochs=100, objective=DSIVI_ELBO(K1=16, K2=16))
        tight = -DSIVI_ELBO(1000, 1000, num_particles=100).loss(model, guide, x, y)
    """

    def __init__(self, K1: int = 1, K2: int = 1, *, structured: bool = True, bound: str = "lower", prior_cache: Optional[PriorComponentCache] = None, **kwargs):
        _check_count("K1", K1)
        _check_count("K2", K2)
        if bound not in ("lower", "upper"):
            raise ValueError(f"bound must be 'lower' or 'upper', got {bound!r}")
        if bound == "upper" and K1 < 1:
            raise ValueError("the upper bound needs K1 >= 1 (it has no psi0 term)")
        if not isinstance(structured, bool):
            raise TypeError(f"structured must be a bool, got {structured!r}")
        if prior_cache is not None:
            if not isinstance(prior_cache, PriorComponentCache):
                raise TypeError(f"prior_cache must be a PriorComponentCache or None, got {type(prior_cache).__name__}")
            if bound == "upper":
                raise ValueError("prior_cache is for training with the lower bound; evaluate the upper bound with fresh draws")
        super().__init__(**kwargs)
        self.K1, self.K2 = K1, K2
        self.structured = structured
        self.bound = bound
        self.prior_cache = prior_cache

    def settings(self):
        """The context in which semi-implicit densities are estimated with this bound's K1, K2."""
        return semi_implicit_samples(guide=self.K1, model=self.K2, structured=self.structured, bound=self.bound)

    def differentiable_loss(self, model, guide, *args, **kwargs):
        with self.settings():
            return super().differentiable_loss(model, guide, *args, **kwargs)

    @staticmethod
    def _explicit_log_q(q, z):
        """``-H[q]`` where the entropy is analytic (same expectation as ``log q(z)``, no
        sampling noise), else ``log q(z)``."""
        try:
            return -q.entropy()
        except NotImplementedError:
            return q.log_prob(z)

    def _semi_implicit_kl(self, guide_site, model_site):
        """The scaled, masked ``log q̂(z) - log p̂(z)`` of a site with a semi-implicit side
        (summed to a 0-d tensor), or ``None`` when both sides are explicit."""
        q, p = guide_site["fn"], model_site["fn"]
        q_si, p_si = find_semi_implicit(q), find_semi_implicit(p)
        if q_si is None and p_si is None:
            return None
        z = guide_site["value"]
        with semi_implicit_role("guide"):
            log_q = q.log_prob(z) if q_si is not None else self._explicit_log_q(q, z)
        name = model_site.get("name")
        cached = self.prior_cache.site(name) if self.prior_cache is not None and name is not None else nullcontext()
        with semi_implicit_role("model"), cached:
            log_p = p.log_prob(z)
        log_q = scale_and_mask(log_q, guide_site["scale"], guide_site["mask"])
        log_p = scale_and_mask(log_p, model_site["scale"], model_site["mask"])
        return log_q.sum() - log_p.sum()

    def _kl(self, guide_site, model_site):
        kl = self._semi_implicit_kl(guide_site, model_site)
        return super()._kl(guide_site, model_site) if kl is None else kl

    def _kl_term(self, guide_site, model_site):
        # the hook of ClosedFormKL_ELBO's trace-based path: (term, evaluated at the sample?)
        kl = self._semi_implicit_kl(guide_site, model_site)
        return super()._kl_term(guide_site, model_site) if kl is None else (kl, True)

    def elbo_particle(self, model_trace, guide_trace) -> torch.Tensor:
        """This bound for one particle from a model trace replayed against a guide trace
        (so that several bounds can be evaluated on the same draws)."""
        with self.settings():
            return self._elbo_particle(model_trace, guide_trace)

    def _elbo_particle(self, model_trace, guide_trace) -> torch.Tensor:
        if self.bound == "lower":
            for name, site in guide_trace.nodes.items():
                if site["type"] != "sample" or name in model_trace.nodes or site_is_subsample(site):
                    continue
                si = find_semi_implicit(site["fn"])
                if si is not None and si.num_mixing is not None and si.mixing_draw(site["value"]) is None:
                    raise SemiImplicitCacheMiss(
                        f"auxiliary guide site {name!r}: its value is not the tensor the SemiImplicit sampled, so "
                        "psi0 is unknown and the SIVI term would not bound the ELBO"
                    )
        return super().elbo_particle(model_trace, guide_trace)


class SIVI_ELBO(DSIVI_ELBO):
    r"""SIVI's bound (Yin & Zhou 2018; Molchanov 2022, Eq. 25 for the entropy): a
    semi-implicit guide against explicit priors, :math:`K` fresh mixing draws plus
    :math:`\psi^0`. The special case of :class:`DSIVI_ELBO` in which no prior site is
    semi-implicit; a semi-implicit prior is an error here.
    """

    def __init__(self, K: int = 1, **kwargs):
        super().__init__(K1=K, K2=1, **kwargs)

    def _semi_implicit_kl(self, guide_site, model_site):
        if find_semi_implicit(model_site["fn"]) is not None:
            raise ValueError("SIVI_ELBO needs explicit priors; use DSIVI_ELBO(K1, K2) for a semi-implicit prior")
        return super()._semi_implicit_kl(guide_site, model_site)
