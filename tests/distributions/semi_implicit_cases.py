"""Semi-implicit distributions whose marginal density is known exactly (shared test cases).

Each case builds a :class:`~pyrozoo.distributions.SemiImplicit` on a device/dtype together
with an explicit distribution of the same marginal, so that estimators and samples can be
checked against exact values.
"""

import math
from dataclasses import dataclass
from typing import Callable, Optional

import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.distributions import ExplicitMixing, FiniteMixing, ImplicitMixing, LinearAutoregressiveNormal, SemiImplicit


@dataclass
class Case:
    name: str
    #: (device, dtype, num_mixing) -> (SemiImplicit, exact marginal distribution)
    build: Callable
    #: whether mixing variables are independent across the declared groups
    grouped: bool = False
    #: p(psi | z) is available (the sandwich upper bound can be checked)
    reversible: bool = False
    gaussian: bool = False


def _t(x, device, dtype):
    return torch.as_tensor(x, device=device, dtype=dtype)


def gaussian_location(device, dtype, k=1, group=False):
    """q(z) = ∫ N(z | ψ, s²) N(ψ | m, t²) dψ = N(m, s² + t²) per dimension."""
    m, t, s = _t([0.3, -1.0, 2.0], device, dtype), _t([1.0, 0.5, 2.0], device, dtype), _t([0.5, 1.0, 0.3], device, dtype)
    q = SemiImplicit(
        ExplicitMixing(dist.Normal(m, t)), lambda psi: dist.Normal(psi, s).to_event(1), (3,), num_mixing=k, group_ndims=int(group),
        reverse_conditional=lambda z: dist.Normal((z * t**2 + m * s**2) / (s**2 + t**2), s * t / (s**2 + t**2).sqrt()),
    )
    return q, dist.Normal(m, (s**2 + t**2).sqrt()).to_event(1)


def student_t_scale(device, dtype, k=1, group=True):
    """∫ N(w | 0, 1/λ) Gamma(λ | a, b) dλ = StudentT(2a, 0, sqrt(b/a)) per weight, shape (2, 3)."""
    a, b = _t(2.0, device, dtype), _t(1.5, device, dtype)
    shape = (2, 3)
    q = SemiImplicit(
        ExplicitMixing(dist.Gamma(a, b).expand(shape)), lambda lam: dist.Normal(torch.zeros_like(lam), lam.rsqrt()).to_event(2), shape,
        num_mixing=k, group_ndims=2 if group else 0, reverse_conditional=lambda w: dist.Gamma(a + 0.5, b + 0.5 * w * w),
    )
    return q, dist.StudentT(2 * a, 0.0, (b / a).sqrt()).expand(shape).to_event(2)


def finite_mixture(device, dtype, k=1):
    """A 4-component Gaussian mixture in 2 dimensions with a (loc, log_scale) pair per atom."""
    locs = _t([[-2.0, 0.0], [0.5, 1.0], [2.0, -1.0], [0.0, 3.0]], device, dtype)
    log_scales = _t([[-0.5, 0.0], [0.2, -0.3], [-1.0, -0.2], [0.0, 0.3]], device, dtype)
    probs = _t([0.1, 0.4, 0.3, 0.2], device, dtype)
    q = SemiImplicit(FiniteMixing((locs, log_scales), probs=probs), lambda psi: dist.Normal(psi[0], psi[1].exp()).to_event(1), (2,), num_mixing=k)
    exact = dist.MixtureSameFamily(dist.Categorical(probs), dist.Normal(locs, log_scales.exp()).to_event(1))
    return q, exact


def linear_network(device, dtype, k=1):
    """ψ = A ε + c with ε ~ N(0, I₂) (an implicit network), z ~ N(ψ, s² I₃): z ~ N(c, A Aᵀ + s² I)."""
    g = torch.Generator().manual_seed(3)
    net = nn.Linear(2, 3).to(device=device, dtype=dtype)
    with torch.no_grad():
        net.weight.copy_(torch.randn(3, 2, generator=g))
        net.bias.copy_(torch.randn(3, generator=g))
    s = 0.4
    q = SemiImplicit(ImplicitMixing(net, (2,)), lambda psi: dist.Normal(psi, s).to_event(1), (3,), num_mixing=k)
    cov = net.weight.detach() @ net.weight.detach().T + s**2 * torch.eye(3, device=device, dtype=dtype)
    return q, dist.MultivariateNormal(net.bias.detach(), covariance_matrix=cov)


def autoregressive(device, dtype, k=1, group=True, d=4):
    """Shifts ψ_i ~ N(m_i, t²) independent per step, z_i = ψ_i + Σ_{j<i} W_ij z_j + s ξ_i:
    z ~ N((I - W)^{-1} m, (t² + s²) (I - W)^{-1} (I - W)^{-T})."""
    g = torch.Generator().manual_seed(4)
    w = (0.6 * torch.randn(d, d, generator=g)).tril(-1).to(device=device, dtype=dtype)
    m = torch.randn(d, generator=g).to(device=device, dtype=dtype)
    t, s = 1.2, 0.3
    scale = torch.full((d,), s, device=device, dtype=dtype)
    q = SemiImplicit(
        ExplicitMixing(dist.Normal(m, t)), lambda psi: LinearAutoregressiveNormal(psi, w, scale), (d,), num_mixing=k, group_ndims=int(group)
    )
    eye = torch.eye(d, device=device, dtype=dtype)
    inv = torch.linalg.solve_triangular(eye - w, eye, upper=False)
    return q, dist.MultivariateNormal(inv @ m, scale_tril=math.sqrt(t**2 + s**2) * inv)


CASES = [
    Case("gaussian_location", gaussian_location, reversible=True, gaussian=True),
    Case("gaussian_location_grouped", lambda dv, dt, k=1: gaussian_location(dv, dt, k, group=True), grouped=True, reversible=True, gaussian=True),
    Case("student_t_scale", student_t_scale, grouped=True, reversible=True),
    Case("finite_mixture", finite_mixture),
    Case("linear_network", linear_network, gaussian=True),
    Case("autoregressive", autoregressive, grouped=True, gaussian=True),
]
CASE_IDS = [c.name for c in CASES]


def case(name: str) -> Optional[Case]:
    return next(c for c in CASES if c.name == name)
