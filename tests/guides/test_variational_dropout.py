"""Variational dropout guides: parameterisations, clipping, train-time mask, pruning, ELBO."""

import math

import pyro
import pytest
import torch
import torch.nn.functional as F
from pyro import poutine
from torch.distributions import kl_divergence

from pyrozoo.distributions.dropout_normal import DropoutNormal
from pyrozoo.distributions.kl import kl_log_uniform_from_log_alpha
from pyrozoo.guides.variational_dropout import PARAMETERIZATIONS, SparseVariationalDropoutGuide, VariationalDropoutGuide, _AdditivePosterior
from pyrozoo.inference import ClosedFormKL_ELBO, evaluate
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, LeNet5BatchNorm
from pyrozoo.models.dropout_priors import ARDPrior, LogUniformPrior
from pyrozoo.poutine import local_reparameterization
from tests.guides.networks import SmallConvNet
from tests.stats import gaussian_variance_rel_tolerance, mean_tolerance


def _model(prior=LogUniformPrior, conv=False, dtype=torch.float32, device="cpu"):
    net = (SmallConvNet() if conv else MLP(6, [5], 4)).to(device=device, dtype=dtype)
    return BayesianNeuralNetwork(net, prior(), CategoricalLikelihood(dataset_size=50))


def _data(conv=False, dtype=torch.float32, device="cpu", n=10):
    g = torch.Generator().manual_seed(0)
    x = torch.rand((n, 1, 6, 6) if conv else (n, 6), generator=g, dtype=dtype).to(device)
    return x, torch.randint(0, 4, (n,), generator=g).to(device)


@pytest.mark.parametrize("parameterization", PARAMETERIZATIONS)
def test_parameterizations(parameterization, device):
    """Parameter shapes per the thesis' eq. 11 and the posterior they define."""
    model = _model(conv=True, device=device)
    x, y = _data(conv=True, device=device)
    guide = VariationalDropoutGuide(model, parameterization=parameterization)
    guide(x, y)
    assert set(guide.sites()) == {"conv.weight", "fc.weight"}  # biases stay point estimates
    for name in guide.sites():
        weight = model.net.get_parameter(name)
        q = guide.posterior(name)
        base = q.base_dist
        assert isinstance(base, DropoutNormal) and q.event_shape == weight.shape
        key = guide._sites[name].key
        if parameterization == "zero-mean":
            assert torch.equal(base.loc, torch.zeros_like(weight))
            assert torch.isinf(base.log_alpha).all()
            assert key not in guide.locs
            # the signed scales start at the network's weights: sigma^2 = w^2
            torch.testing.assert_close(base.variance.detach(), weight.detach() ** 2, rtol=1e-5, atol=1e-12)
            continue
        # the means start at the network's own weights
        torch.testing.assert_close(guide.locs[key], weight.detach())
        expected_shape = {"additive": weight.shape, "weight": weight.shape, "neuron": weight.shape[:1] + (1,) * (weight.dim() - 1), "layer": (1,) * weight.dim()}[parameterization]
        store = guide.log_sigma2 if parameterization == "additive" else guide.log_alphas
        assert store[key].shape == expected_shape
        # variance = alpha * theta^2 with the (clipped) log alpha it carries
        theta2 = base.loc.detach() ** 2
        torch.testing.assert_close(base.variance.detach(), base.log_alpha.detach().exp() * (theta2 + 1e-32), rtol=1e-4, atol=1e-30)
        if parameterization in ("neuron", "layer"):
            assert (base.log_alpha == base.log_alpha.reshape(-1)[0]).all() if parameterization == "layer" else (base.log_alpha == base.log_alpha[:, :1]).all()


def test_additive_fused_posterior_matches_autograd(dtype):
    """The hand-written gradient of the additive parameterisation, including clipped entries
    and theta = 0, against autograd on the same formulas."""
    g = torch.Generator().manual_seed(0)
    theta = (torch.randn(40, generator=g, dtype=torch.float64) * 0.1).to(dtype)
    theta[:4] = torch.tensor([0.0, 1e-12, -2e-5, 3.0], dtype=dtype)
    log_sigma2 = (torch.randn(40, generator=g, dtype=torch.float64) * 4 - 8).to(dtype)
    theta.requires_grad_()
    log_sigma2.requires_grad_()
    weights = [torch.randn(40, generator=g, dtype=torch.float64).to(dtype) for _ in range(4)]
    grad_tol = {"rtol": 1e-9, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-6}
    for train_clip in (False, True):
        fused = _AdditivePosterior.apply(theta, log_sigma2, -8.0, 8.0, 3.0, train_clip)
        log_theta2 = (theta * theta + 1e-32).log()
        la = (log_sigma2 - log_theta2).clamp(-8.0, 8.0)
        lv = la + log_theta2
        reference = (theta * (la < 3) if train_clip else theta, 0.5 * lv, lv.exp(), la)
        for a, b in zip(fused, reference):
            torch.testing.assert_close(a, b)
        grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(fused, weights)), (theta, log_sigma2))
        grads_ref = torch.autograd.grad(sum((o * w).sum() for o, w in zip(reference, weights)), (theta, log_sigma2))
        for a, b in zip(grads, grads_ref):
            torch.testing.assert_close(a, b, **grad_tol)
    if dtype == torch.float64:
        assert torch.autograd.gradcheck(lambda t, s: _AdditivePosterior.apply(t, s, -8.0, 8.0, 3.0, True)[1:], (theta[4:].detach().requires_grad_(), log_sigma2[4:].detach().requires_grad_()))


def test_log_alpha_clipping_and_train_clip():
    model = _model()
    x, y = _data()
    guide = SparseVariationalDropoutGuide(model)
    guide(x, y)
    key = guide._sites["0.weight"].key
    with torch.no_grad():
        guide.log_sigma2[key].copy_(torch.linspace(-30, 30, guide.log_sigma2[key].numel()).reshape(guide.log_sigma2[key].shape))
    la = guide.log_alpha("0.weight")
    assert la.min() == -8.0 and la.max() == 8.0
    q = guide.posterior("0.weight").base_dist
    theta = guide.locs[key].detach()
    # the mean of weights at or above the threshold is zero; the variance still uses theta
    torch.testing.assert_close(q.loc.detach(), theta * (la < 3))
    torch.testing.assert_close(q.variance.detach(), la.exp() * (theta**2 + 1e-32))
    # the KL reads log alpha, not the masked mean
    torch.testing.assert_close(kl_divergence(q, LogUniformPrior().distribution("0.weight", None, theta).base_dist), kl_log_uniform_from_log_alpha(la))


@pytest.mark.parametrize("threshold", [-1.0, 0.0, 3.0, 5.5])
def test_pruning_removes_exactly_the_weights_above_the_threshold(threshold, device):
    model = _model(conv=True, device=device)
    x, y = _data(conv=True, device=device)
    guide = SparseVariationalDropoutGuide(model)
    guide(x, y)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, info in guide.sites().items():
            guide.log_sigma2[info.key].copy_((torch.randn(guide.log_sigma2[info.key].shape, generator=g) * 6).to(device))
    masks = guide.keep_masks(threshold)
    pruned = guide.mean_network(masked=True, threshold=threshold)
    for name in guide.sites():
        la = guide.log_alpha(name)
        assert torch.equal(masks[name], la < threshold)
        theta = guide.locs[guide._sites[name].key].detach()
        torch.testing.assert_close(pruned.get_parameter(name).detach(), torch.where(la < threshold, theta, torch.zeros_like(theta)))
    # biases (point estimates) are the network's own
    torch.testing.assert_close(pruned.conv.bias, model.net.conv.bias)
    # the unmasked mean network is mean propagation
    mean_net = guide.mean_network()
    torch.testing.assert_close(mean_net.fc.weight, guide.locs["fc__weight"].detach())


def test_bad_hyperparameters_raise():
    model = _model()
    with pytest.raises(ValueError, match="parameterization"):
        VariationalDropoutGuide(model, parameterization="multiplicative")
    with pytest.raises(ValueError, match="inside log_alpha_bounds"):
        SparseVariationalDropoutGuide(model, threshold=9.0)
    with pytest.raises(ValueError, match="inside log_alpha_bounds"):
        SparseVariationalDropoutGuide(model, threshold=-8.0)
    with pytest.raises(ValueError, match="low < high"):
        SparseVariationalDropoutGuide(model, log_alpha_bounds=(8.0, -8.0))
    with pytest.raises(ValueError, match="finite"):
        SparseVariationalDropoutGuide(model, init_log_sigma2=math.nan)
    with pytest.raises(ValueError, match="init_log_alpha"):
        VariationalDropoutGuide(model, parameterization="layer", init_log_alpha=12.0)
    with pytest.raises(ValueError, match="train_clip"):
        VariationalDropoutGuide(model, parameterization="zero-mean", train_clip=True)
    with pytest.raises(ValueError, match="additive"):
        SparseVariationalDropoutGuide(model, parameterization="layer")
    guide = SparseVariationalDropoutGuide(model)
    guide(*_data())
    with pytest.raises(ValueError, match="finite"):
        guide.keep_masks(math.inf)


@pytest.mark.parametrize("prior", [LogUniformPrior, ARDPrior], ids=lambda c: c.__name__)
@pytest.mark.parametrize("parameterization", PARAMETERIZATIONS)
def test_elbo_is_likelihood_minus_registered_kl(prior, parameterization):
    """ClosedFormKL_ELBO = (N/n) log-likelihood at the sampled weights - sum of the closed-form
    KLs; the direct path (no effect stack) and Pyro's trace path agree draw for draw."""
    model = _model(prior=prior, dtype=torch.float64)
    x, y = _data(dtype=torch.float64)
    guide = VariationalDropoutGuide(model, parameterization=parameterization)
    guide(x, y)
    elbo = ClosedFormKL_ELBO()
    pyro.set_rng_seed(1)
    direct = elbo.differentiable_loss(model, guide, x, y)
    pyro.set_rng_seed(1)
    with poutine.scale(scale=1.0):  # any foreign handler selects Pyro's trace-based path
        traced = elbo.differentiable_loss(model, guide, x, y)
    torch.testing.assert_close(direct, traced)
    pyro.set_rng_seed(1)
    values = {name: guide.posterior(name).rsample() for name in guide.sites()}
    kl = sum(kl_divergence(guide.posterior(name), prior().distribution(name, None, model.net.get_parameter(name))) for name in guide.sites())
    expected = -model.log_likelihood(values, x, y) + kl
    torch.testing.assert_close(direct, expected)


@pytest.mark.parametrize("parameterization", ["additive", "layer", "zero-mean"])
def test_local_reparameterization_moments_for_convolutions(parameterization, device):
    """Under the LRT handler a convolution with dropout-posterior weights outputs
    ``N(conv(x, loc) + b, conv(x^2, variance))`` independently per example and position."""
    torch.manual_seed(0)
    model = _model(conv=True, dtype=torch.float64, device=device)
    x, y = _data(conv=True, dtype=torch.float64, device=device, n=3)
    guide = VariationalDropoutGuide(model, parameterization=parameterization, init_log_sigma2=-3.0, init_log_alpha=-1.0)
    guide(x, y)
    q = guide.posterior("conv.weight").base_dist
    loc, var = q.loc.detach(), q.variance.detach()
    bias = model.net.conv.bias.detach()
    S = 4000
    # the handler's noise is independent per example, so S copies of the batch give S draws
    with torch.no_grad(), local_reparameterization():
        w = pyro.sample("w", guide.posterior("conv.weight"))
        outs = F.conv2d(x.repeat(S, 1, 1, 1), w, bias).reshape(S, *x.shape[:1], -1, *F.conv2d(x, loc).shape[2:])
    mean = F.conv2d(x, loc, bias)
    variance = F.conv2d(x * x, var)
    k = mean.numel()
    assert ((outs.mean(0) - mean).abs() <= mean_tolerance(variance, S, k)).all()
    assert ((outs.var(0) / variance - 1).abs() <= gaussian_variance_rel_tolerance(S, k)).all()


def test_priors_select_weights_by_default():
    net = MLP(3, [4], 2)
    for prior in (LogUniformPrior(), ARDPrior()):
        assert [name for _, _, name, _ in prior.random_parameters(net)] == ["weight", "weight"]
    everything = LogUniformPrior(expose_parameters=["weight", "bias"])
    assert len(everything.random_parameters(net)) == 4
    normalised = LeNet5BatchNorm()
    for prior in (LogUniformPrior(), ARDPrior()):
        # batch norm's affine scale is named "weight" but is not a weight
        assert [m for m, _, _, _ in prior.random_parameters(normalised)] == ["conv1", "conv2", "fc1", "fc2"]
    d = LogUniformPrior().distribution("0.weight", net[0], net[0].weight)
    assert d.event_shape == net[0].weight.shape and d.batch_shape == ()


def test_prediction_with_an_improper_prior():
    """Predictive traces the model once without the guide to learn its shapes; the improper
    log-uniform sites then take the network's values instead of failing to sample."""
    model = _model()
    x, y = _data()
    guide = SparseVariationalDropoutGuide(model)
    guide(x, y)
    metrics = evaluate(model, guide, x, y, num_samples=3)
    assert 0.0 <= metrics["accuracy"] <= 1.0
    metrics = evaluate(model, guide, x, y, num_samples=3, batch_size=4)
    assert 0.0 <= metrics["accuracy"] <= 1.0
