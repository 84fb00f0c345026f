"""The radial-directional posterior (RDP guide) with BayesianNeuralNetwork, fit and both ELBOs."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.distributions import VonMisesFisher
from pyrozoo.distributions.von_mises_fisher import vmf_mean_resultant_length
from pyrozoo.guides import RadialDirectionalGuide
from pyrozoo.inference import ClosedFormKL_ELBO, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, LeNet5, RadialDirectionalPrior
from pyrozoo.models.radial_directional import compose_weight
from tests.stats import mean_tolerance


def _regression(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.tanh(x[:, 0] - 2 * x[:, 1]) + 0.1 * torch.randn(n, generator=g)
    return x, y


def _model(net, prior=None, n=200):
    return BayesianNeuralNetwork(net, prior or RadialDirectionalPrior(), GaussianLikelihood(n, precision=dist.Gamma(1.0, 1.0)))


def test_posterior_families_and_shared_concentration():
    torch.manual_seed(0)
    model = _model(MLP(4, [6], 1))
    guide = RadialDirectionalGuide(model, init_direction_epsilon=0.2)
    x, y = _regression()
    trace = pyro.poutine.trace(guide).get_trace(x[:8], y[:8])
    q = trace.nodes["0.weight.row_direction"]["fn"]
    assert isinstance(q.base_dist, VonMisesFisher) and q.base_dist.batch_shape == (6,)
    assert guide.log_concentrations["0__weight__row_direction"].shape == ()  # one kappa for all rows
    assert float(vmf_mean_resultant_length(4, q.base_dist.concentration[0].detach())) == pytest.approx(0.8, rel=1e-6)
    mean = trace.nodes["0.weight.row_mean_direction"]
    assert isinstance(mean["fn"], dist.Delta)
    torch.testing.assert_close(mean["value"], q.base_dist.loc)  # the prior mean is the posterior's location
    assert isinstance(trace.nodes["0.weight.column_local_gamma"]["fn"].base_dist, dist.LogNormal)
    assert isinstance(trace.nodes["0.bias"]["fn"].base_dist, dist.Normal)
    assert isinstance(trace.nodes["noise_precision"]["fn"], dist.LogNormal)
    assert not RadialDirectionalGuide(model, gradient_correction=False).gradient_correction


@pytest.mark.parametrize("net", [MLP(4, [6], 3), LeNet5(widths=(3, 4, 8))], ids=["mlp", "lenet5"])
def test_guide_starts_at_the_network_weights(net):
    model = BayesianNeuralNetwork(net, RadialDirectionalPrior(local_scale=0.05, global_scale=0.01), CategoricalLikelihood())
    guide = RadialDirectionalGuide(model)
    x = torch.randn(2, 4) if isinstance(net, MLP) else torch.randn(2, 1, 28, 28)
    guide(x, torch.tensor([0, 2]))
    medians = guide.median()
    for weight, groups in model.prior.groups.items():
        factors = {}
        for g in groups:
            log_r = sum(0.5 * medians[g.site(p)].log() for p in ("global_gamma", "global_inverse_gamma", "local_gamma", "local_inverse_gamma"))
            factors[g.kind] = (log_r.exp(), medians[g.site("direction")])
        torch.testing.assert_close(compose_weight(dict(net.named_parameters())[weight].shape, factors), dict(net.named_parameters())[weight].detach(), rtol=1e-4, atol=1e-6)


def test_closed_form_and_monte_carlo_elbos_agree():
    """ClosedFormKL_ELBO and Pyro's Trace_ELBO estimate the same ELBO (vMF, log-normal KLs)."""
    torch.manual_seed(1)
    x, y = _regression(50)
    model = _model(MLP(4, [5], 1).double(), n=50)
    guide = RadialDirectionalGuide(model, init_scale=0.3, init_direction_epsilon=0.3)
    x, y = x.double(), y.double()
    guide(x, y)
    closed = torch.tensor([ClosedFormKL_ELBO().loss(model, guide, x, y) for _ in range(80)])
    mc = torch.tensor([pyro.infer.Trace_ELBO().loss(model, guide, x, y) for _ in range(80)])
    tol = mean_tolerance(closed.var() + mc.var(), 80)
    assert abs(float(closed.mean() - mc.mean())) <= tol


@pytest.mark.parametrize("objective", ["closed_form", "trace"])
def test_fit_learns_a_regression(objective):
    torch.manual_seed(0)
    x, y = _regression()
    model = _model(MLP(4, [10], 1))
    guide = RadialDirectionalGuide(model)
    elbo = ClosedFormKL_ELBO() if objective == "closed_form" else pyro.infer.Trace_ELBO()
    history = fit(model, guide, (x, y), epochs=14, batch_size=50, lr=1e-2, objective=elbo, progress=False, seed=0)
    first, last = history.loss.iloc[:3].mean(), history.loss.iloc[-3:].mean()
    assert last < first - 0.1 * abs(first)
    predictive = pyro.infer.Predictive(model, guide=guide, num_samples=20, return_sites=["_RETURN"])(x)["_RETURN"].mean(0).squeeze(-1)
    assert float(((predictive - y) ** 2).mean()) < 0.5 * float(y.var())


def test_concentration_gradient_includes_the_rejection_correction():
    """With the correction the KL-free data term's kappa-gradient differs from the pathwise one."""
    x, y = _regression(50)
    grads = []
    for correction in (True, False):
        pyro.clear_param_store()
        torch.manual_seed(0)
        model = _model(MLP(4, [5], 1), n=50)
        guide = RadialDirectionalGuide(model, gradient_correction=correction)
        guide(x, y)
        torch.manual_seed(3)
        loss = ClosedFormKL_ELBO().differentiable_loss(model, guide, x, y)
        (g,) = torch.autograd.grad(loss, guide.log_concentrations["0__weight__row_direction"])
        grads.append(float(g))
    assert math.isfinite(grads[0]) and grads[0] != grads[1]


@pytest.mark.parametrize("plated", ["direction", "normal"])
def test_plated_latent_sites_are_rejected(plated):
    def model(x):
        pyro.sample("g", dist.Normal(0.0, 1.0))
        with pyro.plate("groups", 3):
            if plated == "direction":
                pyro.sample("u", VonMisesFisher(torch.tensor([1.0, 0.0, 0.0]), 2.0))
            else:
                pyro.sample("z", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="inside a plate.*CompositeGuide"):
        RadialDirectionalGuide(model)(torch.zeros(1))


def test_invalid_arguments_raise():
    model = _model(MLP(4, [5], 1))
    with pytest.raises(ValueError, match="init_direction_epsilon"):
        RadialDirectionalGuide(model, init_direction_epsilon=0.0)
    with pytest.raises(ValueError, match="init_scale"):
        RadialDirectionalGuide(model, init_scale=-1.0)
