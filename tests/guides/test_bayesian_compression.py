"""The Bayesian compression guide: closed-form KLs against Monte Carlo, non-centred weights,
marginal moments and the group log dropout rates."""

import math

import pytest
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch.distributions import kl_divergence

from pyrozoo.guides.bayesian_compression import BayesianCompressionGuide
from pyrozoo.inference import ClosedFormKL_ELBO, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior
from tests.stats import mean_tolerance

PRIORS = {"gnj": lambda: GroupNormalJeffreysPrior(), "ghs": lambda: GroupHorseshoePrior(tau0=0.1)}


def _setup(kind, dtype=torch.float64):
    torch.manual_seed(0)
    net = MLP(4, [3], 2).to(dtype=dtype)
    model = BayesianNeuralNetwork(net, PRIORS[kind](), CategoricalLikelihood(dataset_size=20))
    guide = BayesianCompressionGuide(model, init_log_sigma2=-2.0, init_log_scale=-1.0)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(6, 4, generator=g, dtype=dtype)
    y = torch.randint(0, 2, (6,), generator=g)
    guide(x, y)
    # move every parameter off its initial value so the test is not at a special point
    with torch.no_grad():
        for p in guide.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=dtype))
    return model, guide, x, y


def _traces(model, guide, x, y):
    guide_trace = poutine.trace(guide).get_trace(x, y)
    model_trace = poutine.trace(poutine.replay(model, trace=guide_trace)).get_trace(x, y)
    return guide_trace, model_trace


def _latent(trace):
    return [n for n, s in trace.nodes.items() if s["type"] == "sample" and not s["is_observed"] and not site_is_subsample(s)]


def _joint_draws(model, guide, S):
    """``S`` joint draws of every scale site and weight from the guide's own site
    distributions (vectorised: scale sites do not depend on other sites, and a weight given
    its group scale ``z`` is ``z * w~`` with ``w~ ~ N(mu~, s~^2)``), with ``log q - log p`` of
    each draw under the model's site distributions."""
    prior = model.prior
    log_ratio = 0.0
    weights = {}
    for w in guide.weight_names:
        scale = 1.0
        for site, power in prior.scale_factors(w):
            q = guide.posterior(site)
            z = q.sample((S,))
            p = _model_site_distribution(model, guide, site)
            log_ratio = log_ratio + q.log_prob(z) - p.log_prob(z)
            scale = scale * z.reshape(S, -1).pow(power)  # (S, 1) for a layer-wide factor, (S, groups) else
        scale = scale.reshape((S,) + prior.group_shape(w))
        key = guide._sites[w].key
        mu, sd = guide.locs[key], (0.5 * guide.log_sigma2[key]).exp()
        weight = scale * (mu + sd * torch.randn((S,) + mu.shape, dtype=mu.dtype))
        q_w = torch.distributions.Normal(scale * mu, scale.abs() * sd)
        p_w = torch.distributions.Normal(torch.zeros_like(weight), scale.abs().expand_as(weight))
        log_ratio = log_ratio + (q_w.log_prob(weight) - p_w.log_prob(weight)).flatten(1).sum(1)
        weights[w] = weight
    return weights, log_ratio


def _model_site_distribution(model, guide, site):
    guide_trace, model_trace = _traces(model, guide, *guide._last_args)
    return model_trace.nodes[site]["fn"]


def test_horseshoe_kl_matches_monte_carlo():
    """All factors proper: sum of the closed-form KLs (LogNormal||Gamma, LogNormal||InvGamma,
    the weights' Normal KL given z) = E_q[log q(z, w) - log p(z, w)] within the Monte Carlo error."""
    model, guide, x, y = _setup("ghs")
    guide._last_args = (x, y)
    guide_trace, model_trace = _traces(model, guide, x, y)
    names = _latent(model_trace)
    with torch.no_grad():
        closed = sum(float(kl_divergence(guide_trace.nodes[n]["fn"], model_trace.nodes[n]["fn"]).sum()) for n in names)
        S = 200_000
        _, ratios = _joint_draws(model, guide, S)
    assert abs(float(ratios.mean()) - closed) <= mean_tolerance(float(ratios.var()), S)


@pytest.mark.parametrize("kind", sorted(PRIORS))
def test_weight_kl_does_not_depend_on_the_scale(kind):
    """KL(N(z mu~, z^2 s~^2) || N(0, z^2)) = KL(N(mu~, s~^2) || N(0, 1)) for every sampled z."""
    model, guide, x, y = _setup(kind)
    for weight in guide.weight_names:
        key = guide._sites[weight].key
        mu, s = guide.locs[key].detach(), (0.5 * guide.log_sigma2[key].detach()).exp()
        expected = float(kl_divergence(torch.distributions.Normal(mu, s), torch.distributions.Normal(torch.zeros_like(mu), torch.ones_like(mu))).sum())
        for _ in range(3):
            gt, mt = _traces(model, guide, x, y)
            kl = float(kl_divergence(gt.nodes[weight]["fn"], mt.nodes[weight]["fn"]).sum().detach())
            assert kl == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("kind", sorted(PRIORS))
def test_marginal_weight_moments_match_samples(kind):
    model, guide, x, y = _setup(kind)
    guide._last_args = (x, y)
    S = 200_000
    with torch.no_grad():
        draws, _ = _joint_draws(model, guide, S)
    for w in guide.weight_names:
        samples = draws[w]
        mean, var = guide.weight_moments(w)
        k = mean.numel()
        assert ((samples.mean(0) - mean).abs() <= mean_tolerance(var, S, 2 * k)).all()
        # the variance of a sample variance needs the fourth moment: use the samples' own
        fourth = ((samples - samples.mean(0)) ** 4).mean(0)
        assert ((samples.var(0) - var).abs() <= mean_tolerance(fourth - var**2, S, 2 * k)).all()


@pytest.mark.parametrize("kind", sorted(PRIORS))
def test_guide_weight_site_is_the_non_centred_conditional(kind):
    """The guide's weight site given its sampled scales is N(z mu~, z^2 s~^2)."""
    model, guide, x, y = _setup(kind)
    guide_trace = poutine.trace(guide).get_trace(x, y)
    values = {n: s["value"] for n, s in guide_trace.nodes.items() if s["type"] == "sample"}
    for w in guide.weight_names:
        z = model.prior.weight_scale(w, values)
        key = guide._sites[w].key
        q = guide_trace.nodes[w]["fn"].base_dist
        torch.testing.assert_close(q.loc, z * guide.locs[key])
        torch.testing.assert_close(q.scale, (z.abs() * (0.5 * guide.log_sigma2[key]).exp()).expand(q.loc.shape))


@pytest.mark.parametrize("kind", sorted(PRIORS))
def test_group_log_alpha(kind):
    model, guide, x, y = _setup(kind)
    for w in guide.weight_names:
        la = guide.group_log_alpha(w)
        assert la.shape == (model.prior.num_groups(w),)
        if kind == "gnj":
            key = guide._sites[f"{w}.scale"].key
            expected = guide.log_sigma2[key] - guide.locs[key].pow(2).log()
        else:
            v = sum(0.25 * (2 * guide.log_scales[guide._sites[site].key]).exp() for site, _ in model.prior.scale_factors(w))
            expected = torch.log(torch.expm1(v)).expand(la.shape)
        torch.testing.assert_close(la, expected.detach())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scale_kl_pulls_log_alpha_up_from_the_default_initialisation(device, dtype):
    """At the authors' initialisation (z = 1, log sigma_z^2 = -9, so log alpha = -9) the gradient of
    KL(q(z) || p(z)) (eq. 13 with Molchanov et al.'s eq. 14) in log sigma_z^2 is the derivative
    -k1 k3 s (1 - s) - sigmoid(-log alpha) / 2 < 0 of the unclipped approximation: the KL pulls
    log alpha up. A clip of log alpha whose lower end lies above the initial value makes it 0."""
    from pyrozoo.distributions.kl import LOG_UNIFORM_KL_K1 as k1, LOG_UNIFORM_KL_K2 as k2, LOG_UNIFORM_KL_K3 as k3

    torch.manual_seed(0)
    model = BayesianNeuralNetwork(MLP(4, [3], 2).to(device=device, dtype=dtype), GroupNormalJeffreysPrior(), CategoricalLikelihood(dataset_size=20))
    guide = BayesianCompressionGuide(model).to(device)
    x, y = torch.rand(6, 4, device=device, dtype=dtype), torch.randint(0, 2, (6,), device=device)
    guide(x, y)
    guide._last_args = (x, y)
    for w in guide.weight_names:
        site = f"{w}.scale"
        key = guide._sites[site].key
        log_sigma2 = guide.log_sigma2[key]
        kl = kl_divergence(guide.posterior(site), _model_site_distribution(model, guide, site)).sum()
        (grad,) = torch.autograd.grad(kl, log_sigma2)
        log_alpha = (log_sigma2 - guide.locs[key].pow(2).log()).detach()
        s = torch.sigmoid(k2 + k3 * log_alpha)
        expected = -k1 * k3 * s * (1 - s) - 0.5 * torch.sigmoid(-log_alpha)
        torch.testing.assert_close(grad, expected)
        assert bool((grad < -0.4).all())


def test_log_alpha_bounds_must_contain_the_initial_log_alpha():
    model = BayesianNeuralNetwork(MLP(4, [3], 2), GroupNormalJeffreysPrior(), CategoricalLikelihood(10))
    x, y = torch.rand(6, 4), torch.randint(0, 2, (6,))
    with pytest.raises(ValueError, match="outside log_alpha_bounds"):
        BayesianCompressionGuide(model, init_log_sigma2=-9.0, log_alpha_bounds=(-8.0, 8.0))(x, y)
    BayesianCompressionGuide(model, init_log_sigma2=-9.0, log_alpha_bounds=(-10.0, 8.0))(x, y)


@pytest.mark.parametrize("kind", sorted(PRIORS))
def test_trains_with_local_reparameterization_and_closed_form_elbo(kind):
    """A few steps of fit reduce the loss (the full objective runs on both priors' sites)."""
    model, guide, x, y = _setup(kind, dtype=torch.float32)
    history = fit(model, guide, (x, y), epochs=30, batch_size=6, lr=0.02, objective=ClosedFormKL_ELBO(), estimator="local", progress=False, seed=0)
    assert history.loss.iloc[-5:].mean() < history.loss.iloc[:5].mean()


def test_bad_arguments_raise():
    net = MLP(4, [3], 2)
    from pyrozoo.models.dropout_priors import LogUniformPrior

    with pytest.raises(TypeError, match="GroupScalePrior"):
        BayesianCompressionGuide(BayesianNeuralNetwork(net, LogUniformPrior(), CategoricalLikelihood(10)))
    model = BayesianNeuralNetwork(net, GroupNormalJeffreysPrior(), CategoricalLikelihood(10))
    with pytest.raises(ValueError, match="low < high"):
        BayesianCompressionGuide(model, log_alpha_bounds=(3.0, -3.0))
    with pytest.raises(ValueError, match="finite"):
        BayesianCompressionGuide(model, init_log_sigma2=math.nan)
