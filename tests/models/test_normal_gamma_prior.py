"""NormalGammaPrior: its three forms, the marginal estimate against the Student-t marginal,
and the joint bound lying below the marginal one for the same posterior over the weights."""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.data import toy_regression_1d
from pyrozoo.distributions import SemiImplicit, semi_implicit_role, semi_implicit_samples
from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import ClosedFormKL_ELBO
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, NormalGammaPrior

SCOPES = ["weight", "parameter"]


def _model(form, scope="weight", n=24):
    x, y = toy_regression_1d(n)
    net = MLP(1, [6], 1)
    torch.manual_seed(0)
    return BayesianNeuralNetwork(net, NormalGammaPrior(2.0, 1.5, form=form, scope=scope, num_mixing=8), GaussianLikelihood(n, precision=dist.Gamma(6.0, 6.0))), x, y


def test_sites_of_each_form():
    for form, expected in (("joint", {"0.weight", "0.weight.precision", "2.bias", "2.bias.precision"}), ("marginal", {"0.weight", "2.bias"}), ("exact", {"0.weight", "2.bias"})):
        model, x, y = _model(form)
        trace = pyro.poutine.trace(model).get_trace(x, y)
        names = {n for n, s in trace.nodes.items() if s["type"] == "sample" and not s["is_observed"]}
        assert expected <= names and ("0.weight.precision" in names) == (form == "joint")
        assert model.prior.one_site_per_parameter == (form != "joint")
        fn = trace.nodes["0.weight"]["fn"]
        assert isinstance(fn, SemiImplicit) == (form == "marginal")


@pytest.mark.parametrize("scope", SCOPES)
def test_marginal_estimate_converges_to_the_student_t(scope, device):
    """E[log (1/K) Σ_j N(w | 0, 1/λ_j)] < log p(w) and approaches it; the sandwich estimate
    lies above. The exact form is the closed-form marginal of the same prior."""
    param = torch.empty(3, 4, device=device, dtype=torch.float64)
    si = NormalGammaPrior(2.0, 1.5, form="marginal", scope=scope).distribution("w", None, param)
    exact = NormalGammaPrior(2.0, 1.5, form="exact", scope=scope).distribution("w", None, param)
    w = exact.sample((2000,))
    lp = exact.log_prob(w)
    gaps = []
    for k in (1, 64):
        with semi_implicit_role("model"), semi_implicit_samples(model=k):
            d = si.log_prob(w) - lp
        gaps.append((float(d.mean()), float(d.std() / math.sqrt(len(d)))))
    assert gaps[0][0] < -4 * gaps[0][1] and gaps[1][0] < 4 * gaps[1][1]
    assert gaps[1][0] - gaps[0][0] > 4 * math.hypot(gaps[0][1], gaps[1][1])
    with semi_implicit_role("model"), semi_implicit_samples(model=4, bound="upper"):
        d = si.log_prob(w) - lp
    assert float(d.mean()) > -4 * float(d.std() / math.sqrt(len(d)))


def test_joint_bound_is_below_the_marginal_one():
    """L_joint = L_marginal - E_q(w) KL(q(λ) || p(λ | w)) for the same q(w) (Eqs. 18-19)."""
    joint, x, y = _model("joint")
    exact, _, _ = _model("exact")
    guide = MeanFieldNormalGuide(joint, init_scale=0.1)
    guide(x, y)
    marginal_guide = MeanFieldNormalGuide(exact, init_scale=0.1)
    marginal_guide(x, y)
    with torch.no_grad():
        for key in marginal_guide.locs:
            marginal_guide.locs[key].copy_(guide.locs[key])
            marginal_guide.log_scales[key].copy_(guide.log_scales[key])
    elbo = ClosedFormKL_ELBO(num_particles=20)
    lj = np.array([-elbo.loss(joint, guide, x, y) for _ in range(6)])
    lm = np.array([-elbo.loss(exact, marginal_guide, x, y) for _ in range(6)])
    se = math.hypot(lj.std(ddof=1), lm.std(ddof=1)) / math.sqrt(6)
    assert lm.mean() - lj.mean() > 4 * se


def test_validation():
    with pytest.raises(ValueError):
        NormalGammaPrior(-1.0)
    with pytest.raises(ValueError):
        NormalGammaPrior(form="both")
    with pytest.raises(ValueError):
        NormalGammaPrior(scope="layer")
    with pytest.raises(ValueError):
        NormalGammaPrior(num_mixing=0)
    with pytest.raises(RuntimeError, match="joint"):
        NormalGammaPrior(form="joint").distribution("w", None, torch.zeros(2))
