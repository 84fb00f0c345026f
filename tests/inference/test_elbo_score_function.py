"""``ClosedFormKL_ELBO`` with guide sites whose samplers are only partly reparameterized.

A von Mises-Fisher guide's concentration gradient needs the rejection-sampling correction
(a score-function term in ``score_parts``). With it, the objective's gradient is unbiased for
the exact ELBO gradient; without it, it is detectably biased at small dimension; the loss value
is the same either way, and fully reparameterized guides never evaluate ``score_parts``.
"""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from torch.distributions import kl_divergence

from pyrozoo.distributions import HypersphericalUniform, VonMisesFisher
from pyrozoo.ops.special import bessel_iv_ratio
from pyrozoo.inference import ClosedFormKL_ELBO
from pyrozoo.inference.elbo import _may_have_score_function
from tests.stats import z_bound

D = 3
Y = 2.5
MU = torch.tensor([0.2, 1.0, -0.4], dtype=torch.float64)
MU = MU / MU.norm()
# along the mean: the likelihood depends on x through mu'x, the coordinate whose sampler needs
# the correction, so the pathwise-only bias (about -65% here) stands far out of the noise
A_VEC = 3.0 * MU


def model():
    x = pyro.sample("x", HypersphericalUniform(D, dtype=torch.float64))
    pyro.sample("y", dist.Normal(x @ A_VEC, 1.0), obs=torch.tensor(Y, dtype=torch.float64))


def make_guide(kappa, correction=True):
    def guide():
        pyro.sample("x", VonMisesFisher(MU, kappa, gradient_correction=correction))

    return guide


def exact_elbo(kappa):
    """E_q[log N(y | a'x, 1)] - KL(q || uniform) from E[x] = A mu and E[xx'] = (A/k) I + (1 - dA/k) mu mu'."""
    A = bessel_iv_ratio(D / 2, kappa)
    second = (A / kappa) * (A_VEC @ A_VEC) + (1 - D * A / kappa) * (MU @ A_VEC) ** 2
    expected = -0.5 * (Y * Y - 2 * Y * A * (MU @ A_VEC) + second) - 0.5 * math.log(2 * math.pi)
    return expected - kl_divergence(VonMisesFisher(MU, kappa), HypersphericalUniform(D, dtype=torch.float64))


def _gradient_estimates(correction, n=400, kappa0=2.0):
    elbo = ClosedFormKL_ELBO()
    grads = []
    for _ in range(n):
        kappa = torch.tensor(kappa0, dtype=torch.float64, requires_grad=True)
        (g,) = torch.autograd.grad(-elbo.differentiable_loss(model, make_guide(kappa, correction)), kappa)
        grads.append(float(g))
    return np.array(grads)


def _exact_gradient(kappa0=2.0):
    kappa = torch.tensor(kappa0, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(exact_elbo(kappa), kappa)
    return float(g)


def test_concentration_gradient_is_unbiased_with_the_correction():
    torch.manual_seed(0)
    g = _gradient_estimates(True)
    assert abs(g.mean() - _exact_gradient()) <= z_bound(1, 1e-6) * g.std(ddof=1) / math.sqrt(len(g))


def test_concentration_gradient_is_biased_without_the_correction():
    torch.manual_seed(0)
    g = _gradient_estimates(False)
    assert abs(g.mean() - _exact_gradient()) > 5 * g.std(ddof=1) / math.sqrt(len(g))


def test_loss_value_is_unchanged_by_the_correction():
    kappa = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    elbo = ClosedFormKL_ELBO()
    torch.manual_seed(3)
    with_correction = elbo.differentiable_loss(model, make_guide(kappa, True))
    torch.manual_seed(3)
    without = elbo.differentiable_loss(model, make_guide(kappa, False))
    assert with_correction.item() == pytest.approx(without.item(), abs=1e-12)


def test_only_distributions_with_their_own_score_parts_are_asked():
    vmf = VonMisesFisher(MU, 2.0)
    assert _may_have_score_function(vmf) and _may_have_score_function(vmf.expand((3,)).to_event(1))
    assert not _may_have_score_function(dist.Normal(0.0, 1.0).expand((5,)).to_event(1))
    assert not _may_have_score_function(dist.LogNormal(0.0, 1.0).mask(True))
