"""Priors: Pyro models over the parameters of a plain ``nn.Module``.

A prior decides, per parameter, whether it becomes a random variable (a ``pyro.sample``
site named after the parameter, e.g. ``"fc1.weight"``) and with what distribution; the
parameters it does not select stay point estimates of the network. Priors that put
hierarchical structure on a layer (group scales, radial/directional factorisations,
spike-and-slab) override :meth:`Prior.sample_module`, which sees all selected
parameters of one module at once and may emit any number of sample sites, as long as
it returns the value each parameter takes.
"""

import math
from typing import Callable, Dict, Optional

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.distributions import ScaleMixtureNormal
from pyrozoo.distributions.util import distribution_to
from pyrozoo.models.selection import ParameterSelector

#: key under ``site["infer"]`` carrying the network's own value of a parameter; guides
#: initialise their location parameters from it (see :func:`pyrozoo.guides.init_to_network`).
INIT_VALUE_KEY = "pyrozoo_init_value"


def join_name(module_name: str, param_name: str) -> str:
    return f"{module_name}.{param_name}" if module_name else param_name


class Prior:
    """Base class: a Pyro model over the parameters of a module.

    Subclasses implement :meth:`distribution` (one independent distribution per parameter)
    or, for structured priors, override :meth:`sample_module`.

    :param ParameterSelector selector: which parameters are random; keyword arguments
        are forwarded to :class:`ParameterSelector` when ``selector`` is not given
        (e.g. ``expose_types=[nn.Linear]`` or ``hide_parameters=["bias"]``).
    """

    def __init__(self, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        if selector is not None and selector_kwargs:
            raise ValueError("pass either a ParameterSelector or selector keyword arguments, not both")
        self.selector = selector if selector is not None else ParameterSelector(**selector_kwargs)
        self._cache: Dict[tuple, dist.Distribution] = {}

    # -- selection ---------------------------------------------------------------------
    def random_parameters(self, net: nn.Module):
        """``[(module_name, module, param_name, param)]`` of the parameters this prior makes random."""
        return list(self.selector.select(net))

    # -- the Pyro model ------------------------------------------------------------------
    def sample_module(self, module_name: str, module: nn.Module, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Samples the random parameters of one module; returns ``{param_name: value}``.

        :param params: the module's selected parameters (the network's current values,
            used for shapes, device and guide initialisation).
        """
        return {
            param_name: self.sample_parameter(join_name(module_name, param_name), module, param)
            for param_name, param in params.items()
        }

    #: True when every random parameter is exactly one sample site named after it, with
    #: the distribution from :meth:`distribution` (the default :meth:`sample_module`).
    #: Objectives then may evaluate the model without running Pyro's effect stack
    #: (see :meth:`pyrozoo.models.BayesianNeuralNetwork.latent_sites`). Priors that
    #: override :meth:`sample_module` must set it to False.
    one_site_per_parameter = True

    def sample_parameter(self, name: str, module: nn.Module, param: torch.Tensor) -> torch.Tensor:
        """One ``pyro.sample`` site whose event shape is the parameter's shape."""
        return pyro.sample(name, self.distribution(name, module, param), infer={INIT_VALUE_KEY: param.detach()})

    def distribution(self, name: str, module: nn.Module, param: torch.Tensor) -> dist.Distribution:
        """The prior of one parameter, with ``event_shape == param.shape`` and empty batch shape."""
        raise NotImplementedError(f"{type(self).__name__} must implement distribution() or sample_module()")

    def _cached(self, key: tuple, make: Callable[[], dist.Distribution]) -> dist.Distribution:
        # Distributions are immutable, so one object per (site, shape, device, dtype) is reused
        # across steps instead of being rebuilt (and re-validated) every step.
        d = self._cache.get(key)
        if d is None:
            d = self._cache[key] = make()
        return d

    def __repr__(self) -> str:
        return f"{type(self).__name__}(selector={self.selector!r})"


class IIDPrior(Prior):
    """Every selected parameter entry is i.i.d. from a univariate ``distribution``.

    Example::

        IIDPrior(dist.Normal(0., 1.), expose_types=[nn.Linear])
        IIDPrior(dist.Laplace(0., 0.1), hide_parameters=["bias"])
    """

    def __init__(self, distribution: dist.Distribution, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **selector_kwargs)
        if not isinstance(distribution, torch.distributions.Distribution):
            raise TypeError(f"distribution must be a torch/Pyro Distribution, got {type(distribution).__name__}")
        if distribution.batch_shape != () or distribution.event_shape != ():
            raise ValueError(
                "IIDPrior expects a univariate distribution with empty batch and event shape, got "
                f"batch_shape={tuple(distribution.batch_shape)}, event_shape={tuple(distribution.event_shape)}"
            )
        self.base = distribution

    def distribution(self, name, module, param):
        key = (name, param.shape, param.device, param.dtype)
        return self._cached(
            key,
            lambda: distribution_to(self.base, param.device, param.dtype).expand(param.shape).to_event(param.dim()),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base!r}, selector={self.selector!r})"


class NormalPrior(IIDPrior):
    """i.i.d. ``Normal(loc, scale)`` on every selected parameter entry."""

    def __init__(self, scale: float = 1.0, loc: float = 0.0, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        if not (isinstance(scale, (int, float)) and scale > 0 and math.isfinite(scale)):
            raise ValueError(f"NormalPrior scale must be a positive finite number, got {scale!r}")
        super().__init__(dist.Normal(float(loc), float(scale)), selector, **selector_kwargs)


class ScaleMixturePrior(IIDPrior):
    """Bayes by Backprop's scale-mixture prior (Blundell et al. 2015, eq. 7).

    ``p(w) = pi N(w | 0, sigma1^2) + (1 - pi) N(w | 0, sigma2^2)`` independently for every
    weight, with ``sigma1 > sigma2`` and ``sigma2 << 1``. There is no closed-form KL to a
    Gaussian posterior, so objectives fall back to a Monte Carlo estimate.
    """

    def __init__(self, pi: float = 0.5, sigma1: float = 1.0, sigma2: float = math.exp(-6), selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(ScaleMixtureNormal(pi, sigma1, sigma2), selector, **selector_kwargs)


def _fan_in_out(module: nn.Module, param: torch.Tensor):
    weight = getattr(module, "weight", None)
    shape = weight.shape if isinstance(weight, torch.Tensor) and weight.dim() >= 2 else param.shape
    if len(shape) < 2:
        return int(shape[0]) if len(shape) else 1, 1
    receptive = math.prod(shape[2:]) if len(shape) > 2 else 1
    return int(shape[1]) * receptive, int(shape[0]) * receptive


class LayerwiseNormalPrior(Prior):
    """Zero-mean Normal priors whose scale depends on the layer's fan-in / fan-out.

    ``method="radford"``: ``1/sqrt(fan_in)`` (Neal 1996); ``"xavier"``: ``sqrt(2/(fan_in+fan_out))``;
    ``"kaiming"``: ``sqrt(2/fan_in)``. Biases use the scale of their module's weight.
    """

    _METHODS = ("radford", "xavier", "kaiming")

    def __init__(self, method: str = "radford", selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **selector_kwargs)
        if method not in self._METHODS:
            raise ValueError(f"method must be one of {self._METHODS}, got {method!r}")
        self.method = method

    def scale(self, module: nn.Module, param: torch.Tensor) -> float:
        fan_in, fan_out = _fan_in_out(module, param)
        if self.method == "radford":
            return 1.0 / math.sqrt(fan_in)
        if self.method == "xavier":
            return math.sqrt(2.0 / (fan_in + fan_out))
        return math.sqrt(2.0 / fan_in)

    def distribution(self, name, module, param):
        key = (name, param.shape, param.device, param.dtype)

        def make():
            scale = self.scale(module, param)
            zero = torch.zeros((), device=param.device, dtype=param.dtype)
            return dist.Normal(zero, zero + scale).expand(param.shape).to_event(param.dim())

        return self._cached(key, make)


class FunctionPrior(Prior):
    """A prior given by a function ``fn(name, module, param) -> Distribution``.

    The returned distribution must have ``event_shape == param.shape`` (use
    ``.expand(param.shape).to_event(param.dim())`` on a univariate one). Called every step,
    so it may depend on learnable hyperparameters.
    """

    def __init__(self, fn: Callable[[str, nn.Module, torch.Tensor], dist.Distribution], selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **selector_kwargs)
        if not callable(fn):
            raise TypeError("fn must be callable")
        self.fn = fn

    def distribution(self, name, module, param):
        d = self.fn(name, module, param)
        if tuple(d.batch_shape) + tuple(d.event_shape) != tuple(param.shape) or d.batch_shape != ():
            raise ValueError(
                f"FunctionPrior for {name!r} returned batch_shape={tuple(d.batch_shape)}, "
                f"event_shape={tuple(d.event_shape)}; expected event_shape={tuple(param.shape)} and empty batch shape"
            )
        return d
