"""Group-sparsity priors of Bayesian compression (Louizos, Ullrich & Welling 2017).

Every selected weight tensor is split into *groups* — the input features of a linear layer
(a column of ``W``) and the output channels of a convolution (a filter) — and all weights of
group ``g`` share a scale ``z_g``:

.. math::  p(W, z) = p(z) \\prod_{g} \\prod_{w \\in g} \\mathcal N(w \\mid 0, z_g^2).

* :class:`GroupNormalJeffreysPrior` (BC-GNJ, eq. 5): ``p(z_g) \\propto 1/|z_g|``;
* :class:`GroupHorseshoePrior` (BC-GHS, eqs. 7-8): ``z_g = s \\tilde z_g`` with a layer-wide
  ``s ~ C+(0, tau_0)`` and ``\\tilde z_g ~ C+(0, 1)``, each half-Cauchy written as
  ``sqrt(a * b)``, ``a ~ Gamma(1/2, rate b_0^{-2})``, ``b ~ InvGamma(1/2, 1)`` (eq. 10), so
  that log-normal posteriors have closed-form KLs.

The priors emit, per weight ``"<layer>.weight"``, the scale sites listed by
:meth:`GroupScalePrior.scale_factors` and then the weight site ``N(0, z^2)`` given the scale.
:class:`~pyrozoo.guides.BayesianCompressionGuide` is their guide.
"""

import math
from typing import Dict, KeysView, List, Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.distributions.log_uniform import LogUniformImproper
from pyrozoo.distributions.noncentred_normal import GroupScaleNormal
from pyrozoo.models.priors import INIT_VALUE_KEY, Prior, join_name
from pyrozoo.models.selection import ParameterSelector


def group_dim(module: nn.Module) -> int:
    """The weight dimension that indexes the groups: input features of a linear layer, output
    channels of a convolution (Louizos et al. 2017, sec. 3)."""
    if isinstance(module, nn.Linear):
        return 1
    if isinstance(module, nn.modules.conv._ConvNd):
        return 0
    raise TypeError(f"group sparsity is defined for Linear and Conv layers, not {type(module).__name__}")


class GroupScalePrior(Prior):
    """Base class of the group-scale priors (structured: several sites per weight)."""

    one_site_per_parameter = False

    def __init__(self, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        if selector is None and not selector_kwargs:
            selector_kwargs = {"expose_types": [nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d], "hide_parameters": ["bias"]}
        super().__init__(selector, **selector_kwargs)
        self._groups: Dict[str, Tuple[int, tuple]] = {}

    def random_parameters(self, net: nn.Module):
        selected = super().random_parameters(net)
        for module_name, module, param_name, param in selected:
            if param.dim() < 2:
                raise ValueError(f"{type(self).__name__} puts group scales on weight matrices and filters; {join_name(module_name, param_name)!r} has shape {tuple(param.shape)} (hide biases)")
            group_dim(module)  # raises for unsupported layers
        return selected

    # -- structure --------------------------------------------------------------------------
    def scale_factors(self, weight_name: str) -> List[Tuple[str, float]]:
        """``[(site name, power)]``: the weight's group scale is ``prod value ** power``."""
        raise NotImplementedError

    def group_shape(self, weight_name: str) -> tuple:
        """Shape to which a vector of group scales is reshaped to broadcast over the weight."""
        dim, shape = self._groups[weight_name]
        return tuple(s if i == dim else 1 for i, s in enumerate(shape))

    def num_groups(self, weight_name: str) -> int:
        dim, shape = self._groups[weight_name]
        return shape[dim]

    @property
    def grouped_weights(self) -> KeysView:
        """Names of the weights with group scales (those the model has sampled so far)."""
        return self._groups.keys()

    def weight_shape(self, weight_name: str) -> tuple:
        """Shape of the grouped weight ``weight_name``."""
        return self._groups[weight_name][1]

    def weight_scale(self, weight_name: str, values: Dict[str, torch.Tensor]) -> torch.Tensor:
        """The group scale broadcastable to the weight, from sampled scale-site values."""
        scale = None
        for site, power in self.scale_factors(weight_name):
            v = values[site]
            v = v if power == 1 else v.pow(power)
            scale = v if scale is None else scale * v
        return scale.reshape(self.group_shape(weight_name)) if scale.dim() else scale

    def _register(self, name: str, module: nn.Module, param: torch.Tensor) -> None:
        self._groups[name] = (group_dim(module), tuple(param.shape))

    def weight_prior(self, name: str, param: torch.Tensor, values: Dict[str, torch.Tensor]) -> dist.Distribution:
        """The prior ``N(0, z^2)`` of weight ``name`` given its scale sites' ``values``."""
        # z kept unexpanded, for the grouped KL of the non-centred posterior
        return GroupScaleNormal(self.weight_scale(name, values).abs(), param.shape).to_event(param.dim())

    def sample_module(self, module_name, module, params):
        out = {}
        for param_name, param in params.items():
            name = join_name(module_name, param_name)
            self._register(name, module, param)
            values = {site: pyro.sample(site, prior, infer={INIT_VALUE_KEY: init}) for site, (prior, init) in self._scale_sites(name, self.num_groups(name), param).items()}
            out[param_name] = pyro.sample(name, self.weight_prior(name, param, values), infer={INIT_VALUE_KEY: param.detach()})
        return out

    def latent_sites(self, module_name, module, params) -> List[Tuple[str, object]]:
        """``[(site name, prior)]`` of the sites :meth:`sample_module` samples, in its order: a
        scale site's prior is a distribution, a weight's is a function of the values drawn
        before it (``values -> N(0, z^2)``), as :mod:`pyrozoo.inference.direct` reads them."""
        sites = []
        for param_name, param in params.items():
            name = join_name(module_name, param_name)
            self._register(name, module, param)
            sites.extend((site, prior) for site, (prior, _) in self._scale_sites(name, self.num_groups(name), param).items())
            sites.append((name, lambda values, name=name, param=param: self.weight_prior(name, param, values)))
        return sites

    def _scale_sites(self, name: str, G: int, param: torch.Tensor) -> Dict[str, Tuple[dist.Distribution, torch.Tensor]]:
        """``{site: (prior, initial value)}`` of the scale sites of weight ``name`` (``G``
        groups), in the order they are sampled."""
        raise NotImplementedError

    def distribution(self, name, module, param):
        raise NotImplementedError(f"{type(self).__name__} is a structured prior: it defines sample_module")


class GroupNormalJeffreysPrior(GroupScalePrior):
    """BC-GNJ: ``z_g ~ p(z) \\propto 1/|z|`` (an improper log-uniform site ``"<weight>.scale"``
    of shape ``(groups,)``) and ``w | z ~ N(0, z_g^2)`` (Louizos et al. 2017, eq. 5).

    The scale prior is improper, and so is the posterior (the marginal prior of a weight is
    again ``1/|w|``): fit it with a guide whose KL to it is registered,
    :class:`~pyrozoo.guides.BayesianCompressionGuide` or
    :class:`~pyrozoo.guides.MeanFieldNormalGuide` (a Normal ``q(z_g)``: the log-uniform KL of
    Sparse VD), and :class:`~pyrozoo.inference.ClosedFormKL_ELBO`. A ``DeltaGuide`` (MAP) and
    SG-MCMC are refused, as for :class:`~pyrozoo.models.LogUniformPrior`
    (:mod:`pyrozoo.models.dropout_priors`); prediction needs a guide or posterior samples."""

    def scale_factors(self, weight_name):
        return [(f"{weight_name}.scale", 1.0)]

    def _scale_sites(self, name, G, param):
        ones = torch.ones(G, dtype=param.dtype, device=param.device)
        return {f"{name}.scale": (LogUniformImproper((G,)).to_event(1), ones)}


def _check_positive(name, value):
    if not (isinstance(value, (int, float)) and value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


class GroupHorseshoePrior(GroupScalePrior):
    """BC-GHS: ``w | z ~ N(0, z_g^2)``, ``z_g = s * z~_g``, ``s ~ C+(0, tau0)`` per layer and
    ``z~_g ~ C+(0, 1)`` per group (Louizos et al. 2017, eqs. 7-8), each half-Cauchy as
    ``sqrt(a * b)`` with ``a ~ Gamma(1/2, rate scale^-2)`` and ``b ~ InvGamma(1/2, 1)`` (eq. 10).

    Sites per weight: ``"<weight>.global_a"``, ``".global_b"`` (scalars), ``".local_a"``,
    ``".local_b"`` (one per group), then the weight.

    :param float tau0: scale of the global half-Cauchy (the paper uses a small value; 1e-5).
    :param float init_scale: the initial group scale ``z_g`` the guide starts from, set
        through the initial value of ``local_b`` so that every other factor starts at a
        typical value of its prior. At 1 (the default, as BC-GNJ's ``z``) the non-centred
        weights ``w~ = w / z`` start at the network's weights and Adam's steps on them have
        the size of steps on the weights themselves.
    """

    def __init__(self, tau0: float = 1e-5, init_scale: float = 1.0, selector: Optional[ParameterSelector] = None, **selector_kwargs):
        super().__init__(selector, **selector_kwargs)
        self.tau0 = _check_positive("tau0", tau0)
        self.init_scale = _check_positive("init_scale", init_scale)
        self._priors = {}

    def scale_factors(self, weight_name):
        return [(f"{weight_name}.{part}", 0.5) for part in ("global_a", "global_b", "local_a", "local_b")]

    def _site_priors(self, G, dtype, device):
        key = (G, dtype, device)
        if key not in self._priors:
            half = torch.tensor(0.5, dtype=dtype, device=device)
            one = torch.tensor(1.0, dtype=dtype, device=device)
            self._priors[key] = {
                "global_a": dist.Gamma(half, one / self.tau0**2),
                "global_b": dist.InverseGamma(half, one),
                "local_a": dist.Gamma(half, one).expand((G,)).to_event(1),
                "local_b": dist.InverseGamma(half, one).expand((G,)).to_event(1),
            }
        return self._priors[key]

    def _scale_sites(self, name, G, param):
        priors = self._site_priors(G, param.dtype, param.device)
        init_scale = self.init_scale
        # a = tau0^2 / 2 and b = 1 (typical values of the global factors), a~ = 1/2, and b~
        # such that sqrt(a b a~ b~) = init_scale
        init = {
            "global_a": torch.tensor(0.5 * self.tau0**2, dtype=param.dtype, device=param.device),
            "global_b": torch.tensor(1.0, dtype=param.dtype, device=param.device),
            "local_a": torch.full((G,), 0.5, dtype=param.dtype, device=param.device),
            "local_b": torch.full((G,), init_scale**2 / (0.25 * self.tau0**2), dtype=param.dtype, device=param.device),
        }
        return {f"{name}.{part}": (priors[part], init[part]) for part in ("global_a", "global_b", "local_a", "local_b")}

    def __repr__(self):
        return f"{type(self).__name__}(tau0={self.tau0}, selector={self.selector!r})"
