"""The closed-form-KL evidence lower bound."""

import warnings

import torch
from pyro import poutine
from pyro.distributions.distribution import Distribution as PyroDistribution
from pyro.distributions.util import is_identically_zero
from pyro.infer.elbo import ELBO
from pyro.distributions.util import scale_and_mask as _scale_and_mask
from pyro.infer.util import is_validation_enabled, torch_item
from pyro.poutine.util import site_is_subsample
from pyro.util import check_model_guide_match, check_site_shape, warn_if_nan
from torch.distributions import kl_divergence

from pyrozoo.distributions.kl import summed_kl, summed_kl_total
from pyrozoo.distributions.util import innermost
from pyrozoo.inference.direct import direct_arguments, direct_latent_sites, posterior_given, prior_given
from pyrozoo.inference.trace_checks import check_model_sites
from pyrozoo.poutine.stack import active_handlers
from pyrozoo.poutine.weight_noise import NormalWeight, normal_base


def _signature(d):
    """Types of a distribution and of the distributions it wraps (KL dispatch depends only on these)."""
    sig = [type(d)]
    while hasattr(d, "base_dist"):
        d = d.base_dist
        sig.append(type(d))
    return tuple(sig)


def _may_have_score_function(d) -> bool:
    """Whether ``d.score_parts`` may return a non-zero score function: its innermost
    distribution overrides Pyro's default ``score_parts`` (which is zero for every
    distribution with ``has_rsample``). Cheap, so that fully reparameterized guides never
    pay for a ``score_parts`` call (it evaluates ``log_prob``)."""
    inner = innermost(d)
    return getattr(type(inner), "score_parts", None) not in (None, PyroDistribution.score_parts)


def _score_function(site):
    """The masked (not scaled) score-function term of a guide site, or ``None`` when it is zero."""
    fn = site["fn"]
    if not _may_have_score_function(fn):
        return None
    score = fn.score_parts(site["value"]).score_function
    if is_identically_zero(score):
        return None
    mask = site["mask"]
    if mask is not None and mask is not True:
        score = score * mask if mask is not False else torch.zeros_like(score)
    return score


class DifferentiableLossELBO:
    """Mixin for an ``ELBO`` whose ``differentiable_loss`` is the whole objective: ``loss``
    and ``loss_and_grads`` follow from it (put it before the ``ELBO`` base)."""

    def loss(self, model, guide, *args, **kwargs) -> float:
        with torch.no_grad():
            return torch_item(self.differentiable_loss(model, guide, *args, **kwargs))

    def loss_and_grads(self, model, guide, *args, **kwargs) -> float:
        loss = self.differentiable_loss(model, guide, *args, **kwargs)
        loss.backward(retain_graph=self.retain_graph)
        return torch_item(loss)


class ClosedFormKL_ELBO(DifferentiableLossELBO, ELBO):
    r"""ELBO with the KL term in closed form wherever one is registered.

    .. math::

        \mathcal L = \sum_{\text{observed}} s_i \log p(y_i \mid z)
                     - \sum_{\text{latent}} s_j\, \mathrm{KL}(q(z_j) \,\|\, p(z_j \mid \mathrm{pa}_j))

    where ``s`` are the sites' scales (the data plate's ``N / n``, KL weights from
    :func:`~pyrozoo.poutine.latent_scale`). A latent site uses ``kl_divergence(q, p)`` when
    ``torch.distributions.kl`` has a rule for the pair (pyrozoo registers its own in
    :mod:`pyrozoo.distributions.kl`), and otherwise the single-sample Monte Carlo estimate
    ``log q(z) - log p(z)`` at the guide's sample ``z``. Guide-only (auxiliary) sites
    contribute ``-log q``.

    This is Pyro's ``TraceMeanField_ELBO`` estimator (same validity condition: no latent's
    model parents may be its guide descendants) computed without evaluating densities that
    the closed form makes unnecessary: on a mean-field BNN Pyro evaluates ``log q`` and
    ``log p`` of every weight each step and then discards them for the KL. Supports
    ``num_particles`` and ``vectorize_particles`` like every Pyro ELBO.
    """

    #: direct evaluation: the Gaussian KLs' node also provides the posteriors' variances
    #: (:func:`~pyrozoo.distributions.kl.summed_kl_total`); ``False`` in the reference below
    _fused_variances = True

    def __init__(self, *args, fuse: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fuse = fuse
        self._no_closed_form = set()
        self._prior_drawn = set()  # latent sites left to the model's prior, warned about once

    def _get_trace(self, model, guide, args, kwargs):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(*args, **kwargs)
        check_model_sites(type(self).__name__, model_trace, guide_trace, self._prior_drawn)
        if is_validation_enabled():
            check_model_guide_match(model_trace, guide_trace, self.max_plate_nesting)
            for site in model_trace.nodes.values():
                if site["type"] == "sample" and site["is_observed"]:
                    site["log_prob"] = site["fn"].log_prob(site["value"])
                    check_site_shape(site, self.max_plate_nesting)
            for name, site in guide_trace.nodes.items():
                if site["type"] == "sample" and not site_is_subsample(site) and not site["fn"].has_rsample:
                    raise NotImplementedError(
                        f"ClosedFormKL_ELBO needs reparameterized guide sites; site {name!r} uses "
                        f"{type(site['fn']).__name__}, which has no rsample"
                    )
        return model_trace, guide_trace

    def _kl(self, guide_site, model_site):
        """Scaled, masked ``KL(q || p)`` of one site, summed to a 0-d tensor."""
        return self._kl_term(guide_site, model_site)[0]

    def _kl_term(self, guide_site, model_site):
        """``(KL, evaluated_at_the_sample)``: the scaled, masked KL of one site summed to a 0-d
        tensor, and whether it is the Monte Carlo estimate at the guide's sample (rather than
        a closed form in the distributions' parameters)."""
        q, p = guide_site["fn"], model_site["fn"]
        scale, mask = guide_site["scale"], guide_site["mask"]
        if mask is None and not (torch.is_tensor(scale) and scale.dim() > 0):
            total = summed_kl(q, p)
            if total is not None:
                return (total * scale if not (isinstance(scale, (int, float)) and scale == 1.0) else total), False
        key = (_signature(q), _signature(p))
        if key not in self._no_closed_form:
            try:
                kl = kl_divergence(q, p)
            except NotImplementedError:
                self._no_closed_form.add(key)
            else:
                kl = _scale_and_mask(kl, guide_site["scale"], guide_site["mask"])
                return (kl.sum() if torch.is_tensor(kl) else kl * q.batch_shape.numel()), False
        z = guide_site["value"]
        log_q = _scale_and_mask(q.log_prob(z), guide_site["scale"], guide_site["mask"])
        log_p = _scale_and_mask(p.log_prob(z), model_site["scale"], model_site["mask"])
        return log_q.sum() - log_p.sum(), True

    def elbo_particle(self, model_trace, guide_trace) -> torch.Tensor:
        """The (differentiable) ELBO of one particle from a model trace replayed against a guide trace.

        Guide sites whose sampler is only partly reparameterized (a non-zero ``score_function``
        in ``score_parts``, e.g. the rejection-sampling correction of
        :class:`~pyrozoo.distributions.VonMisesFisher`) add the score-function term
        ``sg(cost) * score_function``, where ``cost`` is the part of this particle's ELBO that is
        evaluated at the sampled values (observed log-likelihoods and Monte Carlo KL terms);
        closed-form KLs are functions of the distributions' parameters and are left out, which
        keeps the estimator unbiased as long as no prior's parameters depend on the value of
        such a site. The term has value zero: only the gradient changes.
        """
        elbo = 0.0
        cost = 0.0  # the sample-dependent part of elbo
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample" or site_is_subsample(site):
                continue
            if site["is_observed"]:
                log_p = site.get("log_prob")
                if log_p is None:
                    log_p = site["fn"].log_prob(site["value"])
                term = _scale_and_mask(log_p, site["scale"], site["mask"]).sum()
                elbo, cost = elbo + term, cost + term
            else:
                guide_site = guide_trace.nodes.get(name)
                if guide_site is None:
                    continue  # drawn from its prior inside the model (_get_trace warned): no KL contribution
                kl, at_sample = self._kl_term(guide_site, site)
                elbo = elbo - kl
                if at_sample:
                    cost = cost - kl
        for name, site in guide_trace.nodes.items():
            if site["type"] == "sample" and name not in model_trace.nodes and not site_is_subsample(site):
                if not site["infer"].get("is_auxiliary"):
                    warnings.warn(f"guide site {name!r} is not in the model and not marked is_auxiliary")
                log_q = site["fn"].log_prob(site["value"])
                term = _scale_and_mask(log_q, site["scale"], site["mask"]).sum()
                elbo, cost = elbo - term, cost - term
        surrogate = 0.0
        for site in guide_trace.nodes.values():
            if site["type"] == "sample" and not site_is_subsample(site):
                score = _score_function(site)
                if score is not None:
                    surrogate = surrogate + (score * (cost.detach() if torch.is_tensor(cost) else cost)).sum()
        if torch.is_tensor(surrogate):
            elbo = elbo + (surrogate - surrogate.detach())
        return elbo

    # -- direct evaluation ------------------------------------------------------------------
    def _direct_plan(self, model, guide, args, kwargs):
        """``(latent scale, weight-noise estimator, guide's site names, x, y, subsample)`` when
        this call can be evaluated without Pyro's effect stack, else ``None``.

        That holds when the model and guide declare it through the protocols of
        :mod:`pyrozoo.inference.direct` (e.g. a :class:`~pyrozoo.models.BayesianNeuralNetwork`
        with one prior site per parameter and a set-up :class:`~pyrozoo.guides.SitewiseGuide`
        of it without plates), the call observes targets, particles are sequential, and no
        handler is active other than pyrozoo's own latent-scale and weight-noise handlers,
        which the direct evaluation interprets itself.
        """
        if not self.fuse or self.vectorize_particles:
            return None
        call = direct_arguments(model, guide, args, kwargs)
        if call is None:
            return None
        handlers = active_handlers()
        if handlers.foreign:
            return None
        estimator = handlers.weight_noise.estimator if handlers.weight_noise is not None else None
        return (handlers.latent_scale, estimator) + call

    def _direct_elbo_particle(self, model, guide, scale, estimator, names, x, y, subsample):
        sites = direct_latent_sites(model, names, x)
        if sites is None:
            return None
        values, pairs = {}, []
        for name, prior in sites:
            # in the model's order: a site may depend on the values drawn before it
            q, prior = posterior_given(guide, name, values), prior_given(prior, values)
            if _may_have_score_function(q):
                return None  # needs the score-function term of elbo_particle
            base = normal_base(q) if estimator is not None else None
            if base is not None:
                values[name] = NormalWeight(base, q.batch_shape + q.event_shape, estimator)
            else:
                values[name] = q.rsample()
            pairs.append((q, prior, values[name]))
        if self._fused_variances:
            # Closed-form Gaussian KLs of all layers in one autograd node, which also computes
            # the posteriors' variances for the weight-noise handler: evaluated first (they
            # draw no random numbers), so that the variances exist before the layers read them.
            batched, rest = summed_kl_total([(q, prior) for q, prior, _ in pairs], provide_variances=True)
            elbo = model.log_likelihood(values, x, y, subsample)
        else:
            # the likelihood before the KLs: the order in which the trace-based path draws
            # random numbers (a Monte Carlo KL may materialise a weight sample)
            elbo = model.log_likelihood(values, x, y, subsample)
            # closed-form Gaussian KLs of all layers in one autograd node; the rest site by site
            batched, rest = summed_kl_total([(q, prior) for q, prior, _ in pairs])
        elbo = elbo - (batched * scale if not (isinstance(scale, (int, float)) and scale == 1.0) else batched)
        values_of = {id(q): value for q, _, value in pairs}
        for q, prior in rest:
            elbo = elbo - self._kl({"fn": q, "value": values_of[id(q)], "scale": scale, "mask": None}, {"fn": prior, "scale": scale, "mask": None})
        return elbo

    def differentiable_loss(self, model, guide, *args, **kwargs):
        loss = 0.0
        plan = self._direct_plan(model, guide, args, kwargs)
        if plan is not None:
            for _ in range(self.num_particles):
                elbo = self._direct_elbo_particle(model, guide, *plan)
                if elbo is None:
                    break
                loss = loss - elbo
            else:
                return loss / self.num_particles if self.num_particles > 1 else loss
            loss = 0.0
        for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
            loss = loss - self.elbo_particle(model_trace, guide_trace)
        # sequential particles are summed above; vectorized ones are summed by the particle plate
        if self.num_particles > 1:
            loss = loss / self.num_particles
        if is_validation_enabled():
            # (a host synchronisation; the training loop checks for NaN itself otherwise)
            warn_if_nan(loss, "loss")
        return loss


class ReferenceClosedFormKL_ELBO(ClosedFormKL_ELBO):
    """:class:`ClosedFormKL_ELBO` evaluated as before its Gaussian KLs provided the posteriors'
    variances (issue 26): the likelihood first, each variance computed where it is first read,
    the KLs summed last. Same numbers to rounding, same random stream; kept as the reference of
    the equality tests and the "before" of ``benchmarks/step_overhead.py``."""

    _fused_variances = False
