"""Shared machinery of pyrozoo's site-wise guides.

:class:`SitewiseGuide` is an :class:`~pyro.infer.autoguide.AutoGuide` that, on its first
call, traces the model and creates per-site variational parameters through
:meth:`SitewiseGuide._init_site`; on every call it emits one ``pyro.sample`` per latent
site of the model with the distribution from :meth:`SitewiseGuide.posterior`. Parameters
live in plain ``nn.ParameterDict`` containers, so the guide is cheap to call, registers
its parameters with Pyro's param store (``SVI`` and ``Predictive`` work) and moves with
``.to(device)``.

Latent sites inside (possibly subsampled) plates get parameters of the plate's full
size, sliced by the plate's indices each call, as in Pyro's ``AutoNormal``.
"""

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Callable, Dict, KeysView, List, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.transforms import biject_to
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.utils import rng_states_kept


from pyrozoo.guides.arguments import check_callable, check_names
from pyrozoo.guides.initialization import _InitUnsampleable, cannot_be_sampled, init_to_network


class _ObservedNames(Messenger):
    """Notes the names of the observed sample sites that pass (AutoGuide's set-up hides them
    from its prototype trace; prediction needs to know which sites the guide was fitted to)."""

    def __init__(self, names: list):
        super().__init__()
        self.names = names

    def _pyro_sample(self, msg):
        if msg["is_observed"] and not site_is_subsample(msg) and msg["name"] not in self.names:
            self.names.append(msg["name"])


def param_key(name: str) -> str:
    """Site name -> ``nn.ParameterDict`` key (which may not contain ".")."""
    return name.replace(".", "__")


def _base_constraint(support):
    while isinstance(support, constraints.independent):
        support = support.base_constraint
    return support


@dataclass
class SiteInfo:
    """What a guide needs to know about one latent site of the model."""

    name: str
    key: str
    event_dim: int
    support: object
    transform: object
    #: event dims of the unconstrained value (differs from event_dim e.g. on the simplex)
    unconstrained_event_dim: int
    #: (plate name, negative tensor dim of the unconstrained value, full size)
    plate_dims: List[Tuple[str, int, int]] = field(default_factory=list)
    frames: list = field(default_factory=list)

    @property
    def family(self) -> str:
        """:func:`support_family` of the site's support."""
        return support_family(self.support)


def support_family(support) -> str:
    """``"real"`` (Normal), ``"positive"`` (LogNormal: supports mapped by ``exp``, e.g.
    positive and nonnegative) or ``"transformed"``."""
    base = _base_constraint(support)
    if base is constraints.real:
        return "real"
    # (0, inf) and [0, inf), with or without an explicit lower bound of 0
    if getattr(base, "lower_bound", None) == 0 and not hasattr(base, "upper_bound"):
        return "positive"
    return "transformed"


class ModelUnderHandlers:
    """Mixin of a Pyro ``AutoGuide`` whose :attr:`model` can be read, for a while, under effect
    handlers (:func:`model_under`): Pyro's set-up traces ``self.model``, and the guide wants
    that trace taken under its initialisation handlers without touching the model it holds.
    Outside :func:`model_under` the model is the one the guide was built on, as objectives
    compare it."""

    _model_handlers: Optional[Callable] = None

    @property
    def model(self):
        model = super().model
        return model if self._model_handlers is None else self._model_handlers(model)


@contextmanager
def model_under(guide: ModelUnderHandlers, handlers: Callable):
    """Within it ``guide.model`` is ``handlers(model)`` (a handler or any ``model -> model``)."""
    before = guide._model_handlers
    guide._model_handlers = handlers
    try:
        yield
    finally:
        guide._model_handlers = before


class SitewiseGuide(ModelUnderHandlers, AutoGuide):
    """Base class of guides with one independent factor per latent site.

    Subclasses implement :meth:`_init_site` (create parameters from an unconstrained
    initial value) and :meth:`posterior` (the site's distribution). Sites listed in
    ``hide`` are left to the model (sampled from the prior) or to another guide in an
    :class:`~pyro.infer.autoguide.AutoGuideList`.

    :param callable model: the Pyro model.
    :param callable init_loc_fn: ``site -> initial constrained value``.
    :param hide: names of latent sites this guide leaves alone.
    """

    def __init__(self, model, *, init_loc_fn: Callable = init_to_network, hide=(), create_plates=None):
        owner = type(self).__name__
        check_callable(owner, "model", model)
        check_callable(owner, "init_loc_fn", init_loc_fn)
        check_callable(owner, "create_plates", create_plates, optional=True)
        hide = check_names(owner, "hide", hide)
        super().__init__(model, create_plates=create_plates)
        self.init_loc_fn = init_loc_fn
        self._hide = hide
        self._sites: Dict[str, SiteInfo] = {}
        self._has_plates = False

    # -- construction -------------------------------------------------------------------
    def _setup_prototype(self, *args, **kwargs):
        # Improper priors (log-uniform, ARD) cannot be sampled: those sites alone are traced at
        # their initial values (others are drawn, as Pyro's AutoGuide draws them).
        observed: list = []
        with model_under(self, lambda model: _ObservedNames(observed)(_InitUnsampleable(self.init_loc_fn)(model))):
            super()._setup_prototype(*args, **kwargs)
        self._observed = tuple(observed)
        # every pairing is checked before any parameter exists: a refused guide stays unset
        refused = {name: self.refusal(name, site) for name, site in self.prototype_trace.iter_stochastic_nodes() if name not in self._hide}
        refused = {name: reason for name, reason in refused.items() if reason is not None}
        if refused:
            self.prototype_trace = None
            name, reason = next(iter(refused.items()))
            site_names = sorted(refused)
            raise ValueError(
                f"{reason}" + ("" if reason.endswith("marginalise it out of the model") else
                               f". To cover the sites {type(self).__name__} can and the rest ({site_names}) with another guide: "
                               f"CompositeGuide(model, {type(self).__name__}, rest=MeanFieldNormalGuide) (pyrozoo.guides); hiding "
                               "them (hide=[...]) alone would leave them at draws from their prior"))
        transforms = {name: biject_to(site["fn"].support) for name, site in self.prototype_trace.iter_stochastic_nodes() if name not in self._hide}
        self._sites = {}
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if name in self._hide:
                continue
            fn = site["fn"]
            transform = transforms[name]
            # (a site that cannot be sampled was traced at init_loc_fn's value already: drawn once)
            init = site["value"] if cannot_be_sampled(fn) else torch.as_tensor(self.init_loc_fn(site)).to(site["value"])
            if init.shape != site["value"].shape:
                init = init.expand(site["value"].shape)
            unconstrained = transform.inv(init).detach()
            batch_ndim = len(fn.batch_shape)
            info = SiteInfo(
                name=name,
                key=param_key(name),
                event_dim=fn.event_dim,
                support=fn.support,
                transform=transform,
                unconstrained_event_dim=unconstrained.dim() - batch_ndim,
            )
            for frame in site["cond_indep_stack"]:
                if not frame.vectorized:
                    continue
                dim = frame.dim - info.unconstrained_event_dim
                full_size = frame.full_size or frame.size
                if unconstrained.shape[dim] != full_size:
                    unconstrained = _periodic_repeat(unconstrained, full_size, dim)
                info.plate_dims.append((frame.name, dim, full_size))
                info.frames.append(frame)
                self._has_plates = True
            self._init_site(info, unconstrained.contiguous())
            self._sites[name] = info

    @contextmanager
    def _model_at_init_values(self):
        """Within it the guide's model runs at ``init_loc_fn``'s values instead of sampling its
        priors, as Pyro's ``AutoNormal`` traces it (the set-up alone already does so for the
        sites whose prior cannot be sampled; this covers every site, so that a hierarchical
        prior's children see their parents' initial values). The wrapped model is only used
        inside: the objective must still see ``self.model is model``."""
        with model_under(self, InitMessenger(self.init_loc_fn)):
            yield

    #: the supports (:func:`support_family`) this guide's family fits; ``None``: any with a bijection
    families: Optional[Tuple[str, ...]] = None
    #: whether this guide fits global sites only (no site inside a plate)
    global_sites_only: bool = False

    def _check_site(self, name: str, fn) -> None:
        """Raises when this guide cannot be paired with the prior ``fn`` of site ``name``
        (subclasses refuse what their family cannot fit; the base class accepts everything)."""

    def refusal(self, name: str, site: dict) -> Optional[str]:
        """Why this guide cannot cover the model's site ``name`` (a trace's site), naming the
        guide that can where there is one; ``None`` when it can. :meth:`_check_site`, the
        support's bijection, :attr:`families` and :attr:`global_sites_only` decide it."""
        owner = type(self).__name__
        fn = site["fn"]
        try:
            self._check_site(name, fn)
            _bijection(owner, name, fn.support)
        except (ValueError, TypeError, NotImplementedError) as error:
            return str(error)
        if self.families is not None and support_family(fn.support) not in self.families:
            return (f"{owner} cannot cover site {name!r}: its support {fn.support} is not {' or '.join(self.families)}-valued, "
                    f"which {owner}'s family needs (MeanFieldNormalGuide covers it)")
        if self.global_sites_only and any(f.vectorized for f in site["cond_indep_stack"]):
            return f"{owner} cannot cover site {name!r}: it lies inside a plate, and {owner}'s posteriors are for global sites (MeanFieldNormalGuide covers it)"
        return None

    def _init_site(self, info: SiteInfo, unconstrained_init: torch.Tensor) -> None:
        raise NotImplementedError

    # -- per call -----------------------------------------------------------------------
    @staticmethod
    def _subsample(info: SiteInfo, tensor: torch.Tensor, plates) -> torch.Tensor:
        for plate_name, dim, full_size in info.plate_dims:
            plate = plates[plate_name]
            if plate.subsample_size < full_size:
                tensor = tensor.index_select(dim, plate.indices)
        return tensor

    def posterior(self, name: str, plates=None) -> dist.Distribution:
        """The guide's distribution for site ``name`` (sliced to the current subsample)."""
        raise NotImplementedError

    def forward(self, *args, **kwargs):
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        plates = self._create_plates(*args, **kwargs) if self._has_plates else {}
        result = {}
        for name, info in self._sites.items():
            if info.frames:
                with ExitStack() as stack:
                    for frame in info.frames:
                        stack.enter_context(plates[frame.name])
                    result[name] = pyro.sample(name, self.posterior(name, plates))
            else:
                result[name] = pyro.sample(name, self.posterior(name))
        return result

    @torch.no_grad()
    def quantiles(self, quantiles, *args, num_samples: int = 1001, **kwargs) -> Dict[str, torch.Tensor]:
        """Posterior quantiles of every site this guide covers, as Pyro's AutoGuides give
        them: ``{site: tensor of shape (len(quantiles),) + site shape}`` (constrained).

        Exact where the site's posterior is elementwise with an inverse CDF (Normal and
        log-normal families, a Normal pushed through a monotone elementwise bijection); else
        the elementwise empirical quantiles of ``num_samples`` draws (a semi-implicit or vMF
        posterior has none in closed form), drawn without disturbing the random streams.

        :param quantiles: numbers strictly between 0 and 1.
        """
        q = torch.as_tensor(quantiles, dtype=torch.get_default_dtype()).reshape(-1)
        if q.numel() == 0 or not bool(((q > 0) & (q < 1)).all()):
            raise ValueError(f"{type(self).__name__}.quantiles: quantiles must be numbers strictly between 0 and 1, got {quantiles!r}")
        if self.prototype_trace is None:
            self._setup_prototype(*args, **kwargs)
        out = {}
        for name in self._sites:
            fn = self.posterior(name)
            value = _elementwise_icdf(fn, q)
            if value is None:
                with rng_states_kept():
                    draws = fn.sample((num_samples,))
                value = torch.quantile(draws.reshape(num_samples, -1).to(q.dtype), q.to(draws.device), dim=0).reshape((len(q),) + draws.shape[1:]).to(draws.dtype)
            out[name] = value
        return out

    def median(self, *args, **kwargs) -> Dict[str, torch.Tensor]:
        """Posterior median of every site this guide covers (:meth:`quantiles` at 0.5; the
        guides with a closed form override it)."""
        return {name: v[0] for name, v in self.quantiles([0.5], *args, **kwargs).items()}

    def sites(self) -> Dict[str, SiteInfo]:
        """``{site name: SiteInfo}`` of every latent site this guide covers (set up first)."""
        if self.prototype_trace is None:
            raise RuntimeError("the guide has not been set up yet: call it once with the model's arguments")
        return dict(self._sites)

    @property
    def observed_sites(self) -> tuple:
        """Names of the sites the model observed when this guide was set up (the data it was
        fitted to): the sites :func:`~pyrozoo.inference.predict` predicts by default."""
        return getattr(self, "_observed", ())

    @property
    def hidden_sites(self) -> frozenset:
        """Names of the latent sites this guide leaves alone on purpose (``hide=``)."""
        return self._hide

    # -- direct evaluation (pyrozoo.inference.direct.DirectGuide) ---------------------------
    def direct_sites(self, model) -> Optional[KeysView]:
        """The names of the sites :meth:`forward` samples, each an independent draw from
        :meth:`posterior`, when this guide is set up for ``model`` itself and no site lies in a
        plate; ``None`` otherwise. This declares to objectives that they may draw the sites
        from :meth:`posterior` without running the guide (see
        :mod:`pyrozoo.inference.direct`); a subclass whose :meth:`forward` samples otherwise
        returns ``None``."""
        if self.prototype_trace is None or self.model is not model or self._has_plates:
            return None
        return self._sites.keys()


def _bijection(owner: str, name: str, support):
    """``biject_to(support)``, or an error that names the guide to use where there is none."""
    try:
        return biject_to(support)
    except NotImplementedError:
        if _base_constraint(support) is constraints.sphere:
            raise ValueError(
                f"{owner} cannot cover site {name!r}: it lies on the unit sphere, which no bijection maps to "
                f"unconstrained space, where {owner} puts its parameters. Use RadialDirectionalGuide: von Mises-Fisher "
                "posteriors on the sphere sites, log-normal ones on the radii and mean-field Normals on the real sites "
                "(the mean-field guide of RadialDirectionalPrior)"
            ) from None
        if support.is_discrete:
            raise ValueError(
                f"{owner} cannot cover site {name!r}: it is discrete ({support}) and the guide's family is continuous. If "
                "it is the model's observation, the guide was set up on a call without the data (y=None): set it up on "
                "a call with them (fit it first, or call guide(x, y) once); otherwise hide it (hide=[...]) and "
                "marginalise it out of the model"
            ) from None
        raise ValueError(
            f"{owner} cannot cover site {name!r}: its support {support} has no bijection from unconstrained space "
            "(torch.distributions.biject_to); hide it (hide=[...]) and cover it with a guide made for it"
        ) from None


def _periodic_repeat(tensor: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """Repeats ``tensor`` along ``dim`` to ``size`` entries (the prototype may have seen a subsample)."""
    reps = -(-size // tensor.shape[dim])
    repeats = [1] * tensor.dim()
    repeats[dim] = reps
    return tensor.repeat(*repeats).narrow(dim, 0, size)


def normal_on_support(loc: torch.Tensor, log_scale: torch.Tensor, info: SiteInfo) -> dist.Distribution:
    """``Normal(loc, exp(log_scale))`` in unconstrained space, pushed to the site's support.

    Real sites give a :class:`~pyrozoo.distributions.LogScaleNormal` (a Normal), positive
    sites a ``LogNormal`` (so registered LogNormal KLs apply), any other support a
    ``TransformedDistribution``. Event dims match the site's.

    The arguments are not validated: both are unconstrained by construction, and checking
    every weight-sized parameter for NaN on each step costs ~10% of a LeNet step; a NaN
    still surfaces, as the non-finite loss that ``fit`` reports.
    """
    family = info.family
    if family == "real":
        return LogScaleNormal(loc, log_scale, validate_args=False).to_event(info.event_dim)
    if family == "positive":
        return dist.LogNormal(loc, log_scale.exp(), validate_args=False).to_event(info.event_dim)
    base = LogScaleNormal(loc, log_scale, validate_args=False).to_event(info.unconstrained_event_dim)
    return dist.TransformedDistribution(base, info.transform)


def _elementwise_icdf(fn, q: torch.Tensor) -> Optional[torch.Tensor]:
    """``fn``'s inverse CDF at each of ``q``, shape ``(len(q),) + batch + event``, for a
    distribution that is elementwise under its ``Independent`` / ``Expanded`` wrappers;
    ``None`` where it has no inverse CDF (or is not elementwise)."""
    shape = fn.batch_shape + fn.event_shape
    while isinstance(fn, (torch.distributions.Independent, dist.ExpandedDistribution)):
        fn = fn.base_dist
    like = next((v for v in vars(fn).values() if torch.is_tensor(v) and v.is_floating_point()), None)
    if fn.event_shape or like is None:
        return None
    try:
        value = fn.icdf(q.to(like).reshape((-1,) + (1,) * len(fn.batch_shape)))
    except (NotImplementedError, AttributeError, TypeError, ValueError):
        return None
    return value.expand((len(q),) + shape)
