r"""The radial-directional prior of Oh, Adamczewski & Park (2020), "Radial and Directional
Posteriors for Bayesian Neural Networks" (RDP).

A layer's weight is grouped into rows (one per output unit: its fan-in) and/or columns (one
per input unit: its fan-out); each group is a radius times a direction on the unit sphere
(eq. 3):

* **row grouping** (eqs. 2–6): :math:`W_{i\cdot} = r_i u_i`, :math:`u_i \in S^{n_{in}K-1}`;
* **column grouping** (eqs. 14–15): :math:`W_{\cdot j} = r_j u_j`, :math:`u_j \in S^{n_{out}K-1}`;
* **double grouping** (eqs. 16–18, used in all of the paper's experiments):
  :math:`W_{ij} = (r^{row}_i u^{row}_{ij}) (r^{col}_j u^{col}_{ji})`,

where :math:`K` is the kernel size of a convolution (a Conv2d filter bank
:math:`c_{out} \times c_{in} \times k_h \times k_w` is grouped as the flattened
:math:`c_{out} \times c_{in} k_h k_w` matrix by rows and by input channel for columns, Sec. 3.3;
the "flatten" variant of the authors' code). Priors (eqs. 7–8, 11):

* **radius**: the product of a local (per group) and a global (per layer and grouping)
  half-Cauchy, :math:`r = \mathcal C^+(0, \tau_{local}) \cdot \mathcal C^+(0, \tau_{global})`, each
  written as :math:`\sqrt{\alpha\beta}` with :math:`\alpha \sim \mathrm{Gamma}(\tfrac12, \text{rate } \tau^{-2})`
  and :math:`\beta \sim \mathrm{InvGamma}(\tfrac12, 1)` (so that log-normal posteriors have
  closed-form KLs);
* **direction**: :math:`u_g \sim \mathrm{vMF}(\mu_g, \kappa_p)` with one concentration per layer
  and grouping (eq. 5). RDP takes the prior's mean direction equal to the posterior's, so that
  only the concentrations enter the KL. Here that is empirical Bayes: the mean direction is a
  hyperparameter of the prior, a site on the sphere whose density is masked out of the model
  (it adds nothing to the ELBO), which the guide
  (:class:`~pyrozoo.guides.RadialDirectionalGuide`) estimates by a point mass tied to the
  posterior's location; the KL of the directions is then exactly RDP's same-mean vMF KL.
  ``direction_prior="uniform"`` puts a uniform prior on the directions instead.

Layers with an output or input dimension of 1 (the UCI output layer 50→1, LeNet-5's conv1
with one input channel) and biases get a ``Normal(0, fallback_scale)`` prior, as in the paper.

Sites of a grouped weight ``"<layer>.weight"``, for each grouping ``g`` in ``row``/``column``:
``.<g>_global_gamma``, ``.<g>_global_inverse_gamma`` (scalars), ``.<g>_local_gamma``,
``.<g>_local_inverse_gamma`` (one per group), ``.<g>_mean_direction`` (masked; only with
``direction_prior="vmf"``) and ``.<g>_direction`` (one unit vector per group). Each
site carries the network's own weight, decomposed into radii and directions, as its initial
value for guides (``infer["pyrozoo_init_value"]``), so a guide starts at the network's weights:
the Gamma factors at their prior scale :math:`\tau^2`, the global inverse-Gamma factor at 1 and
the local inverse-Gamma factor at whatever makes up the weight's radius.
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.distributions import HypersphericalUniform, VonMisesFisher
from pyrozoo.distributions.von_mises_fisher import vmf_concentration
from pyrozoo.models.priors import INIT_VALUE_KEY, Prior, join_name
from pyrozoo.models.selection import ParameterSelector

#: ``site["infer"]`` key of a direction site naming the site that holds its prior's mean direction
LOCATION_SITE_KEY = "pyrozoo_location_site"

GROUPINGS = ("double", "row", "column")
RADIAL_FACTORS = ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma")


@dataclass(frozen=True)
class RadialGroup:
    """One grouping (``"row"`` or ``"column"``) of one weight: where its sites are and how big it is."""

    weight: str  # "fc1.weight"
    kind: str  # "row" or "column"
    num_groups: int  # rows = output units, columns = input units
    dim: int  # dimension of each direction (the sphere is S^{dim-1})

    def site(self, part: str) -> str:
        return f"{self.weight}.{self.kind}_{part}"


def _check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def weight_groups(name: str, shape: torch.Size, grouping: str) -> List[RadialGroup]:
    """The groupings of a weight of ``shape`` ``(out, in, *kernel)``."""
    out, inp = shape[0], shape[1]
    kernel = math.prod(shape[2:])
    groups = []
    if grouping in ("double", "row"):
        groups.append(RadialGroup(name, "row", out, inp * kernel))
    if grouping in ("double", "column"):
        groups.append(RadialGroup(name, "column", inp, out * kernel))
    return groups


def _as_rows(weight: torch.Tensor, kind: str) -> torch.Tensor:
    """``(groups, dim)`` view of a weight ``(out, in, *kernel)``: rows ``W[o].flatten()``, columns
    ``W[:, i].flatten()`` (output-major within a column)."""
    w = weight.reshape(weight.shape[0], weight.shape[1], -1)
    if kind == "row":
        return w.reshape(w.shape[0], -1)
    return w.transpose(0, 1).reshape(w.shape[1], -1)


def _from_rows(rows: torch.Tensor, kind: str, shape: torch.Size) -> torch.Tensor:
    """Inverse of :func:`_as_rows`."""
    out, inp = shape[0], shape[1]
    if kind == "row":
        return rows.reshape(shape)
    return rows.reshape(inp, out, -1).transpose(0, 1).reshape(shape)


def compose_weight(shape: torch.Size, factors: Dict[str, Tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    r"""The weight from ``{"row"|"column": (radii (groups,), directions (groups, dim))}``:
    :math:`r_g u_g` for one grouping, their elementwise product for double grouping (eq. 18)."""
    weight = None
    for kind, (radius, direction) in factors.items():
        part = _from_rows(radius.unsqueeze(-1) * direction, kind, shape)
        weight = part if weight is None else weight * part
    return weight


def decompose_weight(weight: torch.Tensor, grouping: str) -> Dict[str, Tuple[torch.Tensor, torch.Tensor]]:
    """Radii and unit directions whose composition (:func:`compose_weight`) is ``weight``.

    Double grouping splits every entry as ``sign(w) sqrt|w| * sqrt|w|`` between the row and
    the column factor. A group that is all zero gets a tiny radius and an arbitrary direction.
    """
    weight = weight.detach()
    if grouping == "double":
        root = weight.abs().sqrt()
        parts = {"row": weight.sign() * root, "column": root}
    else:
        parts = {grouping: weight}
    out = {}
    tiny = torch.finfo(weight.dtype).tiny ** 0.5
    for kind, part in parts.items():
        rows = _as_rows(part, kind)
        radius = rows.norm(dim=-1)
        direction = rows / radius.clamp_min(tiny).unsqueeze(-1)
        empty = radius <= tiny
        if bool(empty.any()):
            direction[empty] = 0.0
            direction[empty, 0] = 1.0
            radius = radius.clamp_min(tiny)
        out[kind] = (radius, direction)
    return out


class RadialDirectionalPrior(Prior):
    r"""RDP's prior over the weights of Linear and convolution layers (see the module docstring).

    :param str grouping: ``"double"`` (default, as in all of the paper's experiments), ``"row"``
        or ``"column"``.
    :param float local_scale: :math:`\tau_{local}`, scale of the per-group half-Cauchy.
    :param float global_scale: :math:`\tau_{global}`, scale of the per-layer half-Cauchy.
    :param float direction_epsilon: the prior concentration :math:`\kappa_p` of a direction
        of dimension ``d`` is the one whose expected cosine to the mean is ``1 - epsilon``
        (computed exactly; RDP's ``ml_kappa`` approximates it). The paper's code uses 0.5 on
        UCI and 0.1 on MNIST.
    :param direction_concentration: a fixed :math:`\kappa_p` for every direction instead.
    :param str direction_prior: ``"vmf"`` (the paper's prior, with the mean direction a latent
        site) or ``"uniform"``.
    :param float fallback_scale: standard deviation of the ``Normal(0, .)`` prior of biases and
        of weights with a dimension of size 1.
    :param selector: which parameters are random (default: every parameter of ``nn.Linear``
        and ``nn.Conv1d/2d/3d`` layers); keyword arguments go to :class:`ParameterSelector`.

    Its guide is :class:`~pyrozoo.guides.RadialDirectionalGuide`. The direction sites lie on
    the unit sphere, which guides that work in unconstrained space cannot cover:
    ``MeanFieldNormalGuide`` and ``DeltaGuide`` refuse them when set up, naming it.
    """

    one_site_per_parameter = False

    def __init__(
        self,
        grouping: str = "double",
        local_scale: float = 1.0,
        global_scale: float = 1.0,
        direction_epsilon: float = 0.5,
        direction_concentration: Optional[float] = None,
        direction_prior: str = "vmf",
        fallback_scale: float = 1.0,
        selector: Optional[ParameterSelector] = None,
        **selector_kwargs,
    ):
        if selector is None and not selector_kwargs:
            selector_kwargs = {"expose_types": [nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d]}
        super().__init__(selector, **selector_kwargs)
        if grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
        if direction_prior not in ("vmf", "uniform"):
            raise ValueError(f"direction_prior must be 'vmf' or 'uniform', got {direction_prior!r}")
        if not (isinstance(direction_epsilon, (int, float)) and 0 < direction_epsilon < 1):
            raise ValueError(f"direction_epsilon must lie in (0, 1), got {direction_epsilon!r}")
        self.grouping = grouping
        self.local_scale = _check_positive("local_scale", local_scale)
        self.global_scale = _check_positive("global_scale", global_scale)
        self.direction_epsilon = float(direction_epsilon)
        self.direction_concentration = None if direction_concentration is None else _check_positive("direction_concentration", direction_concentration)
        self.direction_prior = direction_prior
        self.fallback_scale = _check_positive("fallback_scale", fallback_scale)
        #: ``{weight name: [RadialGroup]}`` of the grouped weights seen so far
        self.groups: Dict[str, List[RadialGroup]] = {}

    # -- which parameters are grouped ---------------------------------------------------------
    @staticmethod
    def is_grouped(module: nn.Module, param_name: str, param: torch.Tensor) -> bool:
        """A weight ``(out, in, *kernel)`` with ``out > 1`` and ``in > 1`` is grouped; biases and
        layers with a dimension of size 1 fall back to a Normal prior."""
        return param_name == "weight" and param.dim() >= 2 and param.shape[0] > 1 and param.shape[1] > 1

    def random_parameters(self, net: nn.Module):
        selected = super().random_parameters(net)
        for module_name, module, param_name, param in selected:
            if param_name == "weight" and param.dim() >= 2 and not isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)):
                raise TypeError(
                    f"{join_name(module_name, param_name)!r} belongs to a {type(module).__name__}; radial-directional "
                    "grouping is defined for Linear and convolution layers (hide it or give it another prior)"
                )
            if isinstance(module, nn.modules.conv._ConvNd) and module.groups != 1 and param_name == "weight":
                raise NotImplementedError(f"grouped convolution {module_name!r} (groups={module.groups}) is not supported")
        return selected

    def prior_concentration(self, dim: int) -> float:
        """:math:`\\kappa_p` of a direction of dimension ``dim``."""
        if self.direction_concentration is not None:
            return self.direction_concentration
        key = ("kappa", dim)
        if key not in self._cache:
            self._cache[key] = float(vmf_concentration(dim, 1.0 - self.direction_epsilon, dtype=torch.float64))
        return self._cache[key]

    # -- the Pyro model -----------------------------------------------------------------------
    def sample_module(self, module_name: str, module: nn.Module, params: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        out = {}
        for param_name, param in params.items():
            name = join_name(module_name, param_name)
            if self.is_grouped(module, param_name, param):
                out[param_name] = self._sample_grouped(name, param)
            else:
                out[param_name] = pyro.sample(name, self._fallback(name, param), infer={INIT_VALUE_KEY: param.detach()})
        return out

    def _fallback(self, name, param):
        def make():
            zero = torch.zeros((), dtype=param.dtype, device=param.device)
            return dist.Normal(zero, zero + self.fallback_scale).expand(param.shape).to_event(param.dim())

        return self._cached(("fallback", name, param.shape, param.device, param.dtype), make)

    def _radial_priors(self, n: int, dtype, device):
        """``{factor: distribution}``: Gamma(1/2, rate tau^-2) and InverseGamma(1/2, 1) for the
        global (scalar) and local (``n`` groups) half-Cauchy factors."""

        def make():
            half = torch.tensor(0.5, dtype=dtype, device=device)
            one = torch.ones((), dtype=dtype, device=device)
            inverse_gamma = dist.InverseGamma(half, one)
            return {
                "global_gamma": dist.Gamma(half, one / self.global_scale**2),
                "global_inverse_gamma": inverse_gamma,
                "local_gamma": dist.Gamma(half, one / self.local_scale**2).expand([n]).to_event(1),
                "local_inverse_gamma": inverse_gamma.expand([n]).to_event(1),
            }

        return self._cached(("radial", n, dtype, device), make)

    def _sample_grouped(self, name: str, param: torch.Tensor) -> torch.Tensor:
        groups = weight_groups(name, param.shape, self.grouping)
        self.groups[name] = groups
        init = decompose_weight(param, self.grouping)
        factors = {}
        for group in groups:
            radius0, direction0 = init[group.kind]
            priors = self._radial_priors(group.num_groups, param.dtype, param.device)
            one = torch.ones((), dtype=param.dtype, device=param.device)
            # Every factor starts at a typical value of its prior (alpha at tau^2, the global
            # beta at 1) except the local inverse-Gamma one, which takes the rest of the
            # network's radius: its heavy right tail makes that cheap in KL, where a Gamma
            # factor far above tau^2 would cost ~ value / tau^2 nats.
            scale = self.local_scale * self.global_scale
            inits = {
                "global_gamma": one * self.global_scale**2,
                "global_inverse_gamma": one,
                "local_gamma": torch.full_like(radius0, self.local_scale**2),
                "local_inverse_gamma": (radius0 / scale) ** 2,
            }
            log_radius = 0.0
            for part in RADIAL_FACTORS:
                value = pyro.sample(group.site(part), priors[part], infer={INIT_VALUE_KEY: inits[part]})
                # the floor keeps an underflowed factor from turning the gradient into 0 * inf
                log_radius = log_radius + 0.5 * value.clamp_min(torch.finfo(value.dtype).tiny).log()
            direction = self._sample_direction(group, direction0, param.dtype, param.device)
            factors[group.kind] = (log_radius.exp(), direction)
        return compose_weight(param.shape, factors)

    def _sample_direction(self, group: RadialGroup, init: torch.Tensor, dtype, device) -> torch.Tensor:
        uniform = self._cached(
            ("uniform", group.dim, group.num_groups, dtype, device),
            lambda: HypersphericalUniform(group.dim, (group.num_groups,), dtype=dtype, device=device).to_event(1),
        )
        if self.direction_prior == "uniform":
            return pyro.sample(group.site("direction"), uniform, infer={INIT_VALUE_KEY: init})
        # The prior's mean direction is a hyperparameter estimated by type-II maximum likelihood
        # (the guide's point mass): its site is masked out of the joint density, so it adds
        # nothing to the ELBO, which is then RDP's objective exactly.
        mean = pyro.sample(group.site("mean_direction"), uniform.mask(False), infer={INIT_VALUE_KEY: init})
        kappa = torch.tensor(self.prior_concentration(group.dim), dtype=dtype, device=device)
        prior = VonMisesFisher(mean, kappa).to_event(1)
        return pyro.sample(group.site("direction"), prior, infer={INIT_VALUE_KEY: init, LOCATION_SITE_KEY: group.site("mean_direction")})

    def distribution(self, name, module, param):
        raise NotImplementedError(f"{type(self).__name__} is a structured prior: it defines sample_module")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(grouping={self.grouping!r}, local_scale={self.local_scale}, global_scale={self.global_scale}, "
            f"direction_prior={self.direction_prior!r}, selector={self.selector!r})"
        )
