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

import math
import numbers
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Callable, Dict, KeysView, List, Optional, Tuple

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.distributions.transforms import biject_to
from pyro.infer.autoguide import AutoGuide
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median

from pyrozoo.distributions import LogScaleNormal
from pyrozoo.models.priors import INIT_VALUE_KEY


# -- argument checks shared by the guides' constructors ---------------------------------------
# Each raises a TypeError for a wrong type and a ValueError for a wrong value, naming the guide
# and the argument. They run once per construction, on Python values: no device work.


def check_real(owner: str, name: str, value, *, positive: bool = False, low: Optional[float] = None, high: Optional[float] = None) -> float:
    """``value`` as a float: a real number (not a bool), finite, ``> 0`` with ``positive`` and
    strictly inside ``(low, high)`` where those are given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    ok = math.isfinite(value) and (not positive or value > 0) and (low is None or value > low) and (high is None or value < high)
    if not ok:
        what = "a positive finite number" if positive else "a finite number"
        if low is not None or high is not None:
            what += f" in ({'-inf' if low is None else low:g}, {'inf' if high is None else high:g})"
        raise ValueError(f"{owner}: {name} must be {what}, got {value!r}")
    return value


def check_int(owner: str, name: str, value, *, minimum: int) -> int:
    """``value``: an int (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_bool(owner: str, name: str, value) -> bool:
    """``value``: a bool (a string such as ``"False"`` would silently count as true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}: {name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_bounds(owner: str, name: str, value) -> Tuple[float, float]:
    """``value``: a pair ``(low, high)`` of finite numbers with ``low < high``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{owner}: {name} must be a pair (low, high), got {value!r}")
    pair = tuple(value)
    if len(pair) != 2:
        raise ValueError(f"{owner}: {name} must be a pair (low, high), got {value!r}")
    low, high = (check_real(owner, name, b) for b in pair)
    if not low < high:
        raise ValueError(f"{owner}: {name} must satisfy low < high, got {value!r}")
    return low, high


def check_callable(owner: str, name: str, value, *, optional: bool = False):
    if (value is None and not optional) or (value is not None and not callable(value)):
        raise TypeError(f"{owner}: {name} must be callable{' or None' if optional else ''}, got {type(value).__name__}")
    return value


def check_names(owner: str, name: str, value, *, optional: bool = False) -> Optional[frozenset]:
    """``value``: an iterable of site names (a bare string would be taken letter by letter)."""
    if value is None and optional:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{owner}: {name} must be an iterable of site names, got the string {value!r} (use [{value!r}])")
    try:
        names = frozenset(value)
    except TypeError:
        raise TypeError(f"{owner}: {name} must be an iterable of site names, got {type(value).__name__}") from None
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(f"{owner}: {name} must contain site names (strings), got {bad[0]!r}")
    return names


def init_to_network(site: dict, fallback: Callable = init_to_median) -> torch.Tensor:
    """Initial value of a site: the network's own parameter value where the model gave one
    (``site["infer"]["pyrozoo_init_value"]``, set by :class:`~pyrozoo.models.priors.Prior`),
    else ``fallback(site)`` (the prior median by default)."""
    value = site["infer"].get(INIT_VALUE_KEY)
    if value is not None:
        return value.detach().clone()
    return fallback(site)


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
        """``"real"`` (Normal), ``"positive"`` (LogNormal: supports mapped by ``exp``, e.g.
        positive and nonnegative) or ``"transformed"``."""
        base = _base_constraint(self.support)
        if base is constraints.real:
            return "real"
        # (0, inf) and [0, inf), with or without an explicit lower bound of 0
        if getattr(base, "lower_bound", None) == 0 and not hasattr(base, "upper_bound"):
            return "positive"
        return "transformed"


class SitewiseGuide(AutoGuide):
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
        super()._setup_prototype(*args, **kwargs)
        self._sites = {}
        for name, site in self.prototype_trace.iter_stochastic_nodes():
            if name in self._hide:
                continue
            fn = site["fn"]
            transform = biject_to(fn.support)
            init = torch.as_tensor(self.init_loc_fn(site)).to(site["value"])
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
        priors, as Pyro's ``AutoNormal`` traces it: for models with improper priors (log-uniform,
        ARD), which cannot be sampled. The wrapped model is only used inside: the objective must
        still see ``self.model is model``."""
        (model,) = self._model
        self._model = (InitMessenger(self.init_loc_fn)(model),)
        try:
            yield
        finally:
            self._model = (model,)

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

    def sites(self) -> Dict[str, SiteInfo]:
        """``{site name: SiteInfo}`` of every latent site this guide covers (set up first)."""
        if self.prototype_trace is None:
            raise RuntimeError("the guide has not been set up yet: call it once with the model's arguments")
        return dict(self._sites)

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
