r"""Semi-implicit distributions and their SIVI / DSIVI / SSIVI density estimators.

A semi-implicit distribution is an infinite mixture of explicit, reparameterizable
conditionals over a mixing distribution that can only be sampled (Molchanov 2022, Eq. 12):

.. math::

    q(z) = \int q(z \mid \psi)\, q(\psi)\, d\psi .

Its density is intractable, but the DSIVI bound (Eq. 14) only needs two estimators of it,
which :meth:`SemiImplicit.log_prob` returns:

* **guide side** (the SIVI term): :math:`\log \frac{1}{K_1+1}\sum_{k=0}^{K_1} q(z\mid\psi^k)`,
  where :math:`\psi^0` is the mixing draw that generated ``z`` and :math:`\psi^{1..K_1}` are
  fresh. Its expectation over ``z ~ q`` upper-bounds :math:`\mathbb E\log q(z)`;
* **model side** (the prior term): :math:`\log \frac{1}{K_2}\sum_{j=1}^{K_2} p(z\mid\zeta^j)`
  with fresh :math:`\zeta^j`; by Jensen its expectation lower-bounds :math:`\log p(z)`.

Subtracted and added in an ELBO, both keep it a lower bound that increases with
:math:`K_1, K_2` and converges to the ELBO (Theorem 2). With *structure*, i.e. independent
mixing variables per group of event dimensions (and possibly conditionals that are
autoregressive across groups, Eqs. 23-24), the estimator is applied per group and summed
(Eq. 26); this is tighter (Theorem 4).

**ψ⁰.** ``rsample`` remembers, per sampled tensor, the mixing draw that produced it, and
``log_prob`` recognises the *same tensor object*. A value that was copied on the way
(``.clone()``, ``.to()``, ``torch.jit``, a handler that replaces it) is not recognised; on the
guide side this would silently turn the SIVI term into the fresh-draws estimator, which is
biased the wrong way (the "bound" would then overestimate the ELBO). Therefore a guide-side
evaluation without ψ⁰ raises :class:`SemiImplicitCacheMiss` instead; the role of an evaluation
comes from :func:`semi_implicit_role` (set by :class:`~pyrozoo.inference.DSIVI_ELBO`), from the
distribution's ``role``, or, failing both, from whether ``value`` was sampled by it.

**Numbers of mixing draws** are the distribution's ``num_mixing`` unless overridden by
:func:`semi_implicit_samples` (``K1`` for guide-side, ``K2`` for model-side evaluations);
large values give tight estimates for reporting.

**Reusing a prior's draws.** Inside a :class:`PriorComponentCache` context, model-side
estimates take their ``K2`` draws from a pool that is kept across evaluations and redrawn as
the mixing's parameters change (for priors whose components are expensive to compute, such
as a VAE's aggregated posterior); see there for what that changes in the value and gradient.
"""

import math
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable, Optional, Union

import torch
from pyro.distributions import TorchDistribution, constraints
from torch.distributions import Distribution, Independent, Normal

from pyrozoo.distributions.mixing import FiniteMixing, Mixing, _reshape_leading, as_mixing, tree_leaves, tree_map
from pyrozoo.distributions.util import check_shape, sum_rightmost

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

#: how many (value, ψ⁰) pairs one distribution remembers; a guide samples each site once
#: per call, so a handful covers repeated sampling from one instance
_CACHE_SIZE = 8


class SemiImplicitCacheMiss(ValueError):
    """A guide-side density estimate was requested for a value without its mixing draw ψ⁰."""


@dataclass(frozen=True)
class SemiImplicitSettings:
    """Overrides active inside :func:`semi_implicit_samples` / :func:`semi_implicit_role`."""

    guide: Optional[int] = None
    model: Optional[int] = None
    structured: Optional[bool] = None
    bound: str = "lower"
    role: Optional[str] = None
    component_cache: Optional["PriorComponentCache"] = None
    cache_key: Optional[object] = None


_SETTINGS = [SemiImplicitSettings()]
_ROLES = (None, "guide", "model")


def current_settings() -> SemiImplicitSettings:
    return _SETTINGS[-1]


def _check_k(name, k, allow_none=True):
    if k is None and allow_none:
        return
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"{name} must be a non-negative int, got {k!r}")


@contextmanager
def semi_implicit_samples(guide: Optional[int] = None, model: Optional[int] = None, *, structured: Optional[bool] = None, bound: Optional[str] = None):
    r"""Overrides the numbers of fresh mixing draws of every :class:`SemiImplicit` evaluated inside.

    :param int guide: :math:`K_1`, fresh draws of guide-side (SIVI) estimates, besides ψ⁰.
    :param int model: :math:`K_2`, fresh draws of model-side (prior) estimates.
    :param bool structured: ``False`` evaluates structured distributions with the joint
        (SIVI, Eq. 25) estimator instead of the per-group one (SSIVI, Eq. 26).
    :param str bound: ``"lower"`` (default; Eq. 14) or ``"upper"``: the sandwich estimators
        (guide side without ψ⁰, model side with ζ⁰ drawn from ``reverse_conditional``), whose
        ELBO is an upper bound, for evaluation only.
    """
    _check_k("guide", guide)
    _check_k("model", model)
    if structured is not None and not isinstance(structured, bool):
        raise TypeError(f"structured must be a bool or None, got {structured!r}")
    if bound not in (None, "lower", "upper"):
        raise ValueError(f"bound must be 'lower' or 'upper', got {bound!r}")
    changes = {k: v for k, v in dict(guide=guide, model=model, structured=structured, bound=bound).items() if v is not None}
    _SETTINGS.append(replace(current_settings(), **changes))
    try:
        yield _SETTINGS[-1]
    finally:
        _SETTINGS.pop()


@contextmanager
def semi_implicit_role(role: Optional[str]):
    """Declares whether densities evaluated inside are guide-side (``"guide"``) or
    model-side (``"model"``) terms of an ELBO; ``None`` restores automatic detection."""
    if role not in _ROLES:
        raise ValueError(f"role must be 'guide', 'model' or None, got {role!r}")
    _SETTINGS.append(replace(current_settings(), role=role))
    try:
        yield
    finally:
        _SETTINGS.pop()


# ---------------------------------------------------------------------------------------
# reuse of a prior's mixing draws
# ---------------------------------------------------------------------------------------


class _Pool:
    """One prior site's draws: ``draws`` (slot = leading dimension), the atom ``indices``
    behind them (a :class:`~pyrozoo.distributions.FiniteMixing`, else ``None``), the parameter
    state each slot was drawn at (``born``) and the one at which it is redrawn (``expires``)."""

    __slots__ = ("signature", "draws", "indices", "born", "expires", "state", "snapshot", "mixing")


def _structure(tensors) -> tuple:
    return tuple((t.shape, t.dtype, t.device) for t in tensors)


def _draw(mixing: Mixing, sample_shape: torch.Size):
    with torch.no_grad():
        if isinstance(mixing, FiniteMixing):
            return mixing.sample_with_indices(sample_shape)
        return mixing.sample(sample_shape), None


class PriorComponentCache:
    r"""Reuses the fresh mixing draws of a semi-implicit prior (its *components*
    :math:`\zeta^{1..K_2}`, Eq. 14's third term) across evaluations of a DSIVI bound.

    For a prior whose components are expensive, the aggregated posterior of a VAE (Eq. 21:
    one encoder pass per sampled training point), drawing :math:`K_2` of them dominates the
    step. Given to :class:`~pyrozoo.inference.DSIVI_ELBO` (``prior_cache=``), each
    semi-implicit prior site keeps a pool of its :math:`K_2` draws:

    * the pool is first drawn exactly as the uncached estimator draws (the same random
      numbers, the same values), but without autograd history;
    * the draws depend on the mixing's :meth:`~pyrozoo.distributions.Mixing.dependencies`
      (for atoms computed by a module, e.g. the encoder, its parameters), compared *by value*
      at every evaluation (a copy of them is kept; the cost is one pass over the parameters,
      :math:`1/K_2` of encoding :math:`K_2` points); every change starts a new *parameter
      state*;
    * a draw is used in at most ``refresh_every`` consecutive parameter states: after each
      change the draws that reached that age are redrawn at the current parameters, a
      ``1/refresh_every`` share of the pool per change (staggered from the start), so the
      cost is spread evenly over optimisation steps.

    What this changes, exactly:

    * **value**: an evaluation uses the pool's draws, each computed at parameters at most
      ``refresh_every - 1`` changes old. With ``refresh_every=1`` every draw is computed at the
      current parameters, so the value is the uncached estimator's with those draws (equal
      to rounding; bitwise on the evaluation that draws them); evaluations at unchanged
      parameters (particles drawn one by one, repeated evaluations) share the draws instead
      of drawing new ones. Stale draws of an aggregated posterior are components of an
      earlier encoder's, :math:`p^*_{\phi'}`: the estimate is then DSIVI's estimate of
      :math:`\log p^*_{\phi'}(z)`, below it in expectation (Jensen), and over the data
      :math:`\mathbb E_{p^*_\phi}\log p^*_{\phi'} = \mathbb E_{p^*_\phi}\log p^*_\phi -
      \mathrm{KL}(p^*_\phi \| p^*_{\phi'})` (Gibbs): the bound stays below the ELBO with the
      current aggregated posterior, looser than with fresh draws by that KL in the
      large-:math:`K_2` limit, which is second order in the parameter change. (The draws influence the
      parameters, and so later ``z``, only through earlier steps, as reused samples do.)
    * **gradient**: the components carry none. Gradients still reach the conditional's own
      parameters, and the encoder through the sampled ``z`` and the guide's density. The
      dropped path is :math:`\nabla_\phi` of the prior estimate through the components; for
      the aggregated posterior, whose mixing is the training data itself, it has mean
      :math:`N\int \nabla_\phi p^*_\phi(z)\,dz = 0` in the :math:`K_2 \to \infty` limit (the
      optimal prior is stationary, Danskin's theorem), and at finite :math:`K_2` equals the
      gradient of the estimator's Jensen gap through the components. A prior whose own
      parameters learn only through its draws (a learnable hyperprior, pseudo-inputs
      evaluated by sampling) would stop learning: do not cache those.

    A stale draw is never used unnoticed: the age is counted in parameter states seen by
    this cache, which is why it must be able to read the dependencies (a mixing that cannot
    name them is refused). Dependencies that are not parameters (a module's buffers, a
    plain function's closure) are not watched.

    :param int refresh_every: parameter states a draw serves (``1``: exact components).
    """

    def __init__(self, refresh_every: int = 1):
        if isinstance(refresh_every, bool) or not isinstance(refresh_every, int) or refresh_every < 1:
            raise ValueError(f"refresh_every must be a positive int, got {refresh_every!r}")
        self.refresh_every = refresh_every
        self._pools = {}
        #: single draws computed so far (first pools and redraws), and evaluations served
        #: without computing any
        self.drawn = 0
        self.reused = 0

    def __repr__(self):
        return f"PriorComponentCache(refresh_every={self.refresh_every}, sites={list(self._pools)})"

    @contextmanager
    def site(self, key):
        """Model-side estimates evaluated inside draw from the pool named ``key`` (a site name)."""
        _SETTINGS.append(replace(current_settings(), component_cache=self, cache_key=key))
        try:
            yield
        finally:
            _SETTINGS.pop()

    def clear(self):
        """Forgets every pool (the next evaluations draw afresh)."""
        self._pools.clear()

    def draws(self, key, mixing: Mixing, sample_shape) -> object:
        """The pool's draws for ``key``, first refreshing those that have gone stale."""
        sample_shape = torch.Size(sample_shape)
        deps = mixing.dependencies()
        if deps is None:
            raise ValueError(
                f"PriorComponentCache: the {type(mixing).__name__} of prior site {key!r} does not name what its draws "
                "depend on, so stale draws could not be noticed. Compute the atoms with an nn.Module (or a method of "
                "one), give the mixing network as a module, or evaluate this prior without a cache."
            )
        signature = (sample_shape, type(mixing), _structure(deps))
        pool = self._pools.get(key)
        if pool is None or pool.signature != signature:
            pool = self._fill(key, mixing, sample_shape, deps, signature)
            return pool.draws
        pool.mixing = mixing
        if not all(torch.equal(d, s) for d, s in zip(deps, pool.snapshot)):
            pool.state += 1
            pool.snapshot = [d.detach().clone() for d in deps]
        expired = torch.nonzero(pool.expires <= pool.state).flatten()
        if len(expired) == 0:
            self.reused += 1
            return pool.draws
        new, idx = _draw(mixing, torch.Size((len(expired),)) + sample_shape[1:])
        new_leaves = iter(tree_leaves(new))
        pool.draws = tree_map(lambda old: old.index_copy(0, expired.to(old.device), next(new_leaves)), pool.draws)
        if pool.indices is not None:
            pool.indices = pool.indices.index_copy(0, expired.to(pool.indices.device), idx)
        pool.born[expired] = pool.state
        pool.expires[expired] = pool.state + self.refresh_every
        self.drawn += len(expired)
        return pool.draws

    def _fill(self, key, mixing, sample_shape, deps, signature) -> _Pool:
        pool = _Pool()
        pool.signature, pool.mixing, pool.state = signature, mixing, 0
        pool.draws, pool.indices = _draw(mixing, sample_shape)
        k = sample_shape[0]
        pool.born = torch.zeros(k, dtype=torch.long)
        # slot j is first redrawn at state (j mod R) + 1: from then on 1/R of the pool per change
        pool.expires = torch.arange(k) % self.refresh_every + 1
        pool.snapshot = [d.detach().clone() for d in deps]
        self._pools[key] = pool
        self.drawn += k
        return pool

    def stored_draws(self, key):
        """The draws of pool ``key`` as the last evaluation used them (nothing is refreshed)."""
        return self._pools[key].draws

    def ages(self, key) -> torch.Tensor:
        """Per draw of pool ``key``: how many parameter changes ago it was drawn."""
        pool = self._pools[key]
        return pool.state - pool.born

    def indices(self, key) -> Optional[torch.Tensor]:
        """The atom index behind each draw of pool ``key`` (a finite mixing), else ``None``."""
        return self._pools[key].indices

    def current_draws(self, key):
        """The draws of pool ``key`` recomputed at the current parameters (same atoms), for
        measuring staleness; needs a finite mixing."""
        pool = self._pools[key]
        if pool.indices is None:
            raise NotImplementedError("current_draws needs a FiniteMixing (its draws are indexed atoms)")
        shape = pool.indices.shape
        with torch.no_grad():
            return _reshape_leading(pool.mixing.atoms(pool.indices.reshape(-1)), 1, shape)


# ---------------------------------------------------------------------------------------
# per-group log-densities of a conditional
# ---------------------------------------------------------------------------------------


def log_prob_keep(d: Distribution, value: torch.Tensor, keep: int) -> torch.Tensor:
    """``d``'s log-density at ``value`` summed over all but the first ``keep`` event
    dimensions: shape ``batch_shape + event_shape[:keep]``.

    The split comes from ``Independent`` wrappers (a batch of independent factors) or from
    a ``log_prob_factors(value)`` method returning per-element factors of shape
    ``batch_shape + event_shape`` (e.g. the conditionals of an autoregressive density,
    :class:`~pyrozoo.distributions.LinearAutoregressiveNormal`).
    """
    if keep == 0:
        return d.log_prob(value)
    n_event = len(d.event_shape)
    if keep > n_event:
        raise ValueError(f"cannot keep {keep} event dimensions of a distribution with event_shape {tuple(d.event_shape)}")
    if isinstance(d, Independent):
        r = d.reinterpreted_batch_ndims
        lp = log_prob_keep(d.base_dist, value, max(keep - r, 0))
        return sum_rightmost(lp, r - keep) if keep < r else lp
    factors = getattr(d, "log_prob_factors", None)
    if factors is not None:
        return sum_rightmost(factors(value), n_event - keep)
    raise ValueError(
        f"the conditional {type(d).__name__} does not expose per-group log-densities: structured estimators "
        "need an Independent wrapper over a batch of the group dimensions or a log_prob_factors(value) method"
    )


def _unwrap_normal(d: Distribution):
    reinterpreted = 0
    while isinstance(d, Independent):
        reinterpreted += d.reinterpreted_batch_ndims
        d = d.base_dist
    return (d, reinterpreted) if isinstance(d, Normal) else (None, 0)


def _normal_component_log_probs(cond: Distribution, value: torch.Tensor, keep: int, log_weights: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    r"""``log N(z_m | loc_c, diag scale_c^2)`` (plus ``log_weights[c]``) for all pairs by one
    matrix product, or ``None`` when ``cond`` is not a diagonal Normal.

    ``cond`` has batch ``(C, 1, *base)``, ``value`` shape ``(M, *base, *event)``; the result is
    ``(C, M, *base, *event[:keep])``. Expanding the square,
    :math:`-\tfrac12\sum_e (z-\mu)^2/\sigma^2 = \sum_e [z^2 (-\tfrac{1}{2\sigma^2}) + z (\mu/\sigma^2)] - \tfrac12\sum_e \mu^2/\sigma^2`,
    turns the ``C x M x E`` elementwise work (and memory) into one product
    ``[z^2, z, 1] @ [-1/(2 sigma^2), mu/sigma^2, const]^T``. Both sides are first centred at
    the mean component location, which keeps the cancellation in the expanded square small.
    """
    base_d, reinterpreted = _unwrap_normal(cond)
    n_event = len(cond.event_shape)
    if base_d is None or reinterpreted != n_event:
        return None
    batch = cond.batch_shape
    if len(batch) < 2 or batch[1] != 1:
        return None
    contracted = cond.event_shape[keep:]
    e = math.prod(contracted)
    if e < 2:
        return None  # nothing to contract: elementwise is as cheap and exact
    C, M = batch[0], value.shape[0]
    inner = value.shape[1:]
    kept = inner[: len(inner) - len(contracted)]
    b = math.prod(kept)
    full = batch + cond.event_shape
    loc = base_d.loc.broadcast_to(full).reshape(C, b, e).transpose(0, 1)
    log_scale = getattr(base_d, "log_scale", None)
    if log_scale is None:
        log_scale = base_d.scale.log()
    log_scale = log_scale.broadcast_to(full).reshape(C, b, e).transpose(0, 1)
    precision = torch.exp(-2.0 * log_scale)
    ref = loc.detach().mean(1, keepdim=True)
    zc = value.reshape(M, b, e).transpose(0, 1) - ref
    mc = loc - ref
    const = -0.5 * (mc * mc * precision).sum(-1) - log_scale.sum(-1) - e * _HALF_LOG_2PI
    if log_weights is not None:
        const = const + log_weights
    features = torch.cat([zc * zc, zc, zc.new_ones(b, M, 1)], -1)
    coefficients = torch.cat([-0.5 * precision, mc * precision, const.unsqueeze(-1)], -1)
    lp = torch.bmm(features, coefficients.transpose(1, 2))
    return lp.permute(2, 1, 0).reshape((C, M) + kept)


def _logsumexp_first(lp: torch.Tensor) -> torch.Tensor:
    """``logsumexp`` over dim 0, for the many widely spread log-densities of a mixture.

    Reduces along memory order (the pairwise products leave the component dimension
    innermost). Differences to the maximum are floored just above ``log(tiny)`` before
    ``exp``: far-away components would otherwise produce subnormal numbers, on which CPU
    ``exp`` is several times slower; each floored term changes the sum by less than
    ``tiny`` relative to its largest term.
    """
    if lp.dim() > 1 and lp.stride(0) == 1 and lp.shape[0] > 1:
        lp = lp.movedim(0, -1)
        dim = -1
    else:
        dim = 0
    info = torch.finfo(lp.dtype)
    if info.bits < 32:
        return torch.logsumexp(lp, dim)
    top = lp.detach().amax(dim, keepdim=True)
    m = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    floor = math.log(info.tiny) + 1.0
    shifted = lp - m
    if shifted.requires_grad:
        terms = shifted.clamp(min=floor).exp()
    else:
        terms = shifted.clamp_(min=floor).exp_()
    out = terms.sum(dim).log() + m.squeeze(dim)
    top = top.squeeze(dim)
    return torch.where(torch.isfinite(top), out, top)  # all -inf (or a +inf) stays as it is


# ---------------------------------------------------------------------------------------
# the distribution
# ---------------------------------------------------------------------------------------


class SemiImplicit(TorchDistribution):
    r"""``q(z) = ∫ q(z | ψ) q(ψ) dψ`` (Molchanov 2022, Eq. 12), usable as a guide or a prior site.

    :param mixing: a :class:`~pyrozoo.distributions.mixing.Mixing` (implicit network,
        explicit distribution, finite atoms), a ``Distribution`` (explicit mixing), or a
        callable ``sample_shape -> ψ``. Draws have leading dims ``sample_shape`` followed by
        ``batch_shape``.
    :param conditional: ``ψ -> Distribution`` over ``z`` with ``event_shape`` and batch shape
        equal to ψ's leading dimensions (e.g. ``lambda psi: Normal(psi, s).to_event(1)``); any
        reparameterizable Pyro/torch distribution with ``log_prob``.
    :param event_shape: shape of one ``z``.
    :param batch_shape: batch dimensions intrinsic to the mixing (e.g. the data points of an
        amortised guide); dimensions added later by ``expand`` (plates, vectorised particles)
        are i.i.d. copies.
    :param int num_mixing: default number of fresh mixing draws of an estimate (``K``); ``None``
        for a :class:`~pyrozoo.distributions.mixing.FiniteMixing` evaluates the finite
        mixture exactly (an explicit distribution; ``K`` overrides do not apply).
    :param int group_ndims: the first ``group_ndims`` event dimensions index groups whose
        mixing variables are independent (per weight, per neuron, or per step of an
        autoregressive conditional); estimates are then per group and summed (SSIVI,
        Eq. 26). Valid only when the mixing really factorises over the groups.
    :param support: support of one entry of ``z`` (default real).
    :param reverse_conditional: optional ``z -> Distribution`` of ψ given ``z``
        (:math:`p(\zeta \mid z)`), for the sandwich upper bound.
    :param str role: ``"guide"`` or ``"model"`` fixes how ``log_prob`` estimates; by default
        the role is taken from :func:`semi_implicit_role` or detected per value.
    :param int chunk_size: atoms per chunk of an exact finite-mixture evaluation.
    :param bool share_mixing: use one set of ``K`` fresh draws for all i.i.d. copies created
        by ``expand`` (plates, vectorised particles) instead of ``K`` per copy. Each copy's
        estimate is still the K-draw estimator of Eq. 14, so every bound holds, but the
        estimates of different copies become correlated; in exchange the mixing cost no
        longer grows with the number of copies, and a diagonal Normal conditional is
        evaluated for all copies by matrix products. Meant for a prior shared by the data
        points of a minibatch (e.g. a VAE's aggregated posterior). Fresh draws are always
        shared across leading sample dimensions of ``value`` beyond the batch shape.
    """

    arg_constraints = {}
    has_rsample = True

    def __init__(
        self,
        mixing: Union[Mixing, Distribution, Callable],
        conditional: Callable[[object], Distribution],
        event_shape,
        batch_shape=torch.Size(),
        *,
        num_mixing: Optional[int] = 1,
        group_ndims: int = 0,
        support=constraints.real,
        reverse_conditional: Optional[Callable[[torch.Tensor], Distribution]] = None,
        role: Optional[str] = None,
        chunk_size: Optional[int] = None,
        share_mixing: bool = False,
        validate_args=None,
    ):
        self.mixing = as_mixing(mixing)
        if not callable(conditional):
            raise TypeError("conditional must be a callable psi -> Distribution")
        self.conditional = conditional
        event_shape = check_shape("SemiImplicit", "event_shape", event_shape)
        batch_shape = check_shape("SemiImplicit", "batch_shape", batch_shape)
        if num_mixing is None:
            if not isinstance(self.mixing, FiniteMixing):
                raise ValueError("num_mixing=None (exact evaluation) needs a FiniteMixing")
        else:
            _check_k("num_mixing", num_mixing, allow_none=False)
        if isinstance(group_ndims, bool) or not isinstance(group_ndims, int) or not 0 <= group_ndims <= len(event_shape):
            raise ValueError(f"group_ndims must be an int in [0, {len(event_shape)}], got {group_ndims!r}")
        if role not in _ROLES:
            raise ValueError(f"role must be 'guide', 'model' or None, got {role!r}")
        if reverse_conditional is not None and not callable(reverse_conditional):
            raise TypeError("reverse_conditional must be a callable z -> Distribution")
        if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
        if not isinstance(support, constraints.Constraint):
            raise TypeError(f"support must be a constraint (e.g. constraints.real), got {type(support).__name__}")
        if support.event_dim not in (0, len(event_shape)):
            raise ValueError(f"support has event_dim {support.event_dim}; expected 0 or {len(event_shape)}")
        self.num_mixing = num_mixing
        self.group_ndims = group_ndims
        self.reverse_conditional = reverse_conditional
        self.role = role
        self.chunk_size = chunk_size
        self.share_mixing = bool(share_mixing)
        self._base_support = support
        self._base_batch = batch_shape
        self._extra = torch.Size()
        self._draws = []
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    # -- Pyro's distribution contract -------------------------------------------------------
    @constraints.dependent_property(is_discrete=False)
    def support(self):
        s = self._base_support
        if s.event_dim == len(self.event_shape) or not self.event_shape:
            return s
        return constraints.independent(s, len(self.event_shape) - s.event_dim)

    def expand(self, batch_shape, _instance=None):
        batch_shape = torch.Size(batch_shape)
        nb = len(self._base_batch)
        if len(batch_shape) < nb or batch_shape[len(batch_shape) - nb :] != self._base_batch:
            raise ValueError(
                f"cannot expand a SemiImplicit with mixing batch shape {tuple(self._base_batch)} to {tuple(batch_shape)}: "
                "only new leading dimensions (i.i.d. copies) can be added"
            )
        new = self._get_checked_instance(SemiImplicit, _instance)
        for name in ("mixing", "conditional", "num_mixing", "group_ndims", "reverse_conditional", "role", "chunk_size", "share_mixing", "_base_support", "_base_batch"):
            setattr(new, name, getattr(self, name))
        new._extra = batch_shape[: len(batch_shape) - nb]
        new._draws = []
        super(SemiImplicit, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=torch.Size()):
        """``z ~ q(z | ψ⁰)`` with ``ψ⁰ ~ q(ψ)``; remembers ψ⁰ for this very tensor."""
        sample_shape = torch.Size(sample_shape)
        psi0 = self.mixing.sample(sample_shape + self._extra)
        cond = self.conditional_distribution(psi0)
        if not cond.has_rsample:
            raise NotImplementedError(f"the conditional {type(cond).__name__} is not reparameterizable (no rsample)")
        z = cond.rsample()
        expected = sample_shape + self.batch_shape + self.event_shape
        if z.shape != expected:
            raise ValueError(
                f"the conditional produced samples of shape {tuple(z.shape)}, expected {tuple(expected)} "
                "(sample_shape + batch_shape + event_shape): its batch shape must be the mixing draws' leading dims"
            )
        if self.num_mixing is not None:
            self._remember(z, psi0)
        return z

    def log_prob(self, value):
        """The guide-side or model-side DSIVI estimate of ``log q(value)`` (see the module
        docstring), or the exact density of a finite mixture with ``num_mixing=None``."""
        if self._validate_args:
            self._validate_sample(value)
        if self.num_mixing is None:
            return self.exact_log_prob(value)
        settings = current_settings()
        psi0 = self.mixing_draw(value)
        role = settings.role or self.role or ("guide" if psi0 is not None else "model")
        structured = True if settings.structured is None else settings.structured
        if role == "guide":
            k = self.num_mixing if settings.guide is None else settings.guide
            if settings.bound == "upper":
                psi0 = None
            elif psi0 is None:
                raise SemiImplicitCacheMiss(
                    "SemiImplicit.log_prob: a guide-side (SIVI) estimate was requested at a value this distribution "
                    "did not sample, so the mixing draw psi0 that generated it is unknown. This happens when the "
                    "sampled tensor is copied or replaced between rsample and log_prob (.clone(), .to(), torch.jit, "
                    "a handler that rewrites site values). Without psi0 the estimate is biased upward and the ELBO "
                    "estimate is no longer a lower bound. Pass the tensor returned by rsample unchanged, or call "
                    "log_prob_estimate(value, K, psi0=...) explicitly."
                )
        else:
            k = self.num_mixing if settings.model is None else settings.model
            psi0 = None
            if settings.bound == "upper":
                if self.reverse_conditional is None:
                    raise ValueError("the upper (sandwich) bound needs the prior's reverse_conditional p(zeta | z)")
                with torch.no_grad():
                    psi0 = self.reverse_conditional(value).sample()
            elif settings.component_cache is not None and k > 0:
                fresh = settings.component_cache.draws(settings.cache_key, self.mixing, self.fresh_shape(k, value))
                return self.log_prob_estimate(value, k, structured=structured, fresh=fresh)
        return self.log_prob_estimate(value, k, psi0=psi0, structured=structured)

    # -- estimators -------------------------------------------------------------------------
    def conditional_distribution(self, psi) -> Distribution:
        """``q(z | ψ)``, checked to have this distribution's event shape."""
        d = self.conditional(psi)
        if not isinstance(d, Distribution):
            raise TypeError(f"the conditional must return a Distribution, got {type(d).__name__}")
        if d.event_shape != self.event_shape:
            raise ValueError(
                f"the conditional returned event_shape {tuple(d.event_shape)}, expected {tuple(self.event_shape)} "
                "(use .to_event(n) on a distribution with a batch of entries)"
            )
        return d

    def mixing_draw(self, value):
        """ψ⁰ that generated ``value`` if this distribution sampled that very tensor, else ``None``."""
        for ref, psi0 in reversed(self._draws):
            if ref() is value:
                return psi0
        return None

    def _remember(self, value, psi0):
        alive = [(r, p) for r, p in self._draws if r() is not None]
        self._draws = alive[-(_CACHE_SIZE - 1) :] + [(weakref.ref(value), psi0)]

    def _full_value(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` broadcast to ``lead + batch_shape + event_shape``."""
        full = self.batch_shape + self.event_shape
        n_lead = max(value.dim() - len(full), 0)
        target = torch.broadcast_shapes(value.shape, value.shape[:n_lead] + full)
        return value if value.shape == target else value.expand(target)

    def _checked(self, lp: torch.Tensor, expected) -> torch.Tensor:
        if lp.shape != torch.Size(expected):
            raise ValueError(
                f"conditional log-densities have shape {tuple(lp.shape)}, expected {tuple(expected)}: the conditional's "
                f"batch shape must be the mixing draws' leading dims followed by the mixing batch shape {tuple(self._base_batch)}"
            )
        return lp

    def _pairwise_log_probs(self, psi, value_flat: torch.Tensor, keep: int, log_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Per-group ``log q(z_m | ψ^c)`` (``+ log_weights[c]``) for draws with leading shape
        ``(C, 1)`` and values ``(M, *mixing batch, *event)``: shape ``(C, M, *mixing batch, *groups)``."""
        cond = self.conditional_distribution(psi)
        lp = _normal_component_log_probs(cond, value_flat, keep, log_weights)
        if lp is None:
            lp = log_prob_keep(cond, value_flat, keep)
            if log_weights is not None:
                lp = lp + log_weights.reshape((-1,) + (1,) * (lp.dim() - 1))
        return self._checked(lp, (cond.batch_shape[0], value_flat.shape[0]) + self._base_batch + self.event_shape[:keep])

    def fresh_shape(self, k: int, value: torch.Tensor) -> torch.Size:
        """The sample shape of the ``k`` fresh mixing draws of an estimate at ``value``:
        ``(k, 1)`` when draws are shared by all copies, else one set per copy added by ``expand``."""
        if self.share_mixing or not self._extra:
            return torch.Size((k, 1))
        n_lead = max(value.dim() - len(self.batch_shape) - len(self.event_shape), 0)
        return torch.Size((k,) + (1,) * n_lead + self._extra)

    def _fresh_log_probs(self, k: int, value: torch.Tensor, keep: int, fresh=None) -> torch.Tensor:
        """``(k, M, *mixing batch, *groups)`` log-densities at ``k`` fresh draws (drawn here,
        or given as ``fresh``), ``M`` = all leading dims of ``value`` before the mixing batch."""
        inner = self._base_batch + self.event_shape
        shape = self.fresh_shape(k, value)
        if fresh is None:
            fresh = self.mixing.sample(shape)
        else:
            for leaf in tree_leaves(fresh):
                if leaf.shape[: len(shape)] != shape:
                    raise ValueError(f"given fresh draws have leading shape {tuple(leaf.shape[: len(shape)])}, expected {tuple(shape)}")
        if self.share_mixing or not self._extra:
            return self._pairwise_log_probs(fresh, value.reshape((-1,) + inner), keep)
        cond = self.conditional_distribution(fresh)
        lp = self._checked(log_prob_keep(cond, value, keep), (k,) + value.shape[: value.dim() - len(self.event_shape)] + self.event_shape[:keep])
        return lp.reshape((k, -1) + self._base_batch + self.event_shape[:keep])

    def _finish(self, est: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        return est.reshape(value.shape[: value.dim() - len(self.event_shape)])

    def log_prob_estimate(self, value: torch.Tensor, num_mixing: int, psi0=None, structured: bool = True, fresh=None) -> torch.Tensor:
        r"""``log (1/(K + [ψ⁰])) Σ_k q(z | ψ^k)`` over ``K = num_mixing`` fresh draws and, if
        given, ``psi0`` (Eq. 14's second and third terms).

        With ``structured`` and ``group_ndims > 0`` the log-mean-exp is taken per group and
        summed over groups (Eq. 26); otherwise over the whole event (Eq. 25). ``fresh``
        supplies the ``K`` draws (leading shape :meth:`fresh_shape`) instead of drawing them.
        """
        _check_k("num_mixing", num_mixing, allow_none=False)
        if num_mixing == 0 and psi0 is None:
            raise ValueError("an estimate needs at least one mixing draw: num_mixing >= 1 when no psi0 is given")
        value = self._full_value(value)
        keep = self.group_ndims if structured else 0
        kept = self._base_batch + self.event_shape[:keep]
        parts = []
        if psi0 is not None:
            lp0 = log_prob_keep(self.conditional_distribution(psi0), value, keep)
            lp0 = self._checked(lp0, value.shape[: value.dim() - len(self.event_shape)] + self.event_shape[:keep])
            parts.append(lp0.reshape((1, -1) + kept))
        if num_mixing > 0:
            parts.append(self._fresh_log_probs(num_mixing, value, keep, fresh))
        lp = torch.cat(parts, 0) if len(parts) > 1 else parts[0]
        est = _logsumexp_first(lp) - math.log(lp.shape[0])
        return self._finish(sum_rightmost(est, keep), value)

    def exact_log_prob(self, value: torch.Tensor, chunk_size: Optional[int] = None) -> torch.Tensor:
        """``log Σ_n w_n q(z | ψ_n)`` over all atoms of a finite mixing (Eq. 21 evaluated exactly)."""
        if not isinstance(self.mixing, FiniteMixing):
            raise NotImplementedError("the exact density needs a FiniteMixing; other mixings only give DSIVI estimates")
        value = self._full_value(value)
        value_flat = value.reshape((-1,) + self._base_batch + self.event_shape)
        total = None
        log_w = None
        for atoms, idx in self.mixing.enumerate(chunk_size or self.chunk_size):
            if log_w is None:
                log_w = self.mixing.log_probs(value.dtype, value.device)
            lp = self._pairwise_log_probs(_reshape_leading(atoms, 1, (len(idx), 1)), value_flat, 0, log_w[idx.to(value.device)])
            chunk = _logsumexp_first(lp)
            total = chunk if total is None else torch.logaddexp(total, chunk)
        return self._finish(total, value)

    def __repr__(self):
        return (
            f"SemiImplicit(mixing={type(self.mixing).__name__}, batch_shape={tuple(self.batch_shape)}, "
            f"event_shape={tuple(self.event_shape)}, num_mixing={self.num_mixing}, group_ndims={self.group_ndims})"
        )


def find_semi_implicit(d: Distribution) -> Optional[SemiImplicit]:
    """The :class:`SemiImplicit` inside ``d`` (through ``Independent`` wrappers), or ``None``."""
    while isinstance(d, Independent):
        d = d.base_dist
    return d if isinstance(d, SemiImplicit) else None
