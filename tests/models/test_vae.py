"""The VAE with standard Normal, VampPrior and aggregated-posterior (semi-implicit) priors."""

import math

import pyro
import pytest
import torch

from pyrozoo.distributions import semi_implicit_role
from pyrozoo.inference import DSIVI_ELBO
from pyrozoo.models import MLP, VAE, AggregatedPosteriorPrior, AmortizedNormalGuide, GaussianEncoder, StandardNormalLatentPrior, VampPrior

PRIORS = ["normal", "vamp", "aggregated"]


def build(prior_name, device, n=40, d=3, k=6):
    torch.manual_seed(0)
    x = (torch.rand(n, 1, 4, 4) < 0.4).float().to(device)
    encoder = GaussianEncoder(MLP(16, [8], 2 * d), d)
    prior = {
        "normal": lambda: StandardNormalLatentPrior(d),
        "vamp": lambda: VampPrior(encoder, k, (16,)),
        "aggregated": lambda: AggregatedPosteriorPrior(encoder, x.flatten(1), num_mixing=k),
    }[prior_name]()
    model = VAE(MLP(d, [8], 16), prior, dataset_size=n).to(device)
    guide = AmortizedNormalGuide(encoder, dataset_size=n).to(device)
    return model, guide, x


@pytest.mark.parametrize("prior_name", PRIORS)
def test_loss_and_gradients(prior_name, device):
    model, guide, x = build(prior_name, device)
    idx = torch.arange(10, device=device)
    loss = DSIVI_ELBO(0, 6).differentiable_loss(model, guide, x[idx], None, idx)
    assert loss.shape == () and torch.isfinite(loss)
    loss.backward()
    params = dict(model.named_parameters())
    params.update({f"guide.{k}": v for k, v in guide.named_parameters()})
    for name, p in params.items():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    if prior_name == "vamp":
        assert model.prior.pseudo_inputs.grad.abs().sum() > 0


def test_gradients_reach_the_encoder_through_the_prior(device):
    """The aggregated posterior is a learnable prior: its density depends on the encoder."""
    model, guide, x = build("aggregated", device)
    z = torch.randn(5, 3, device=device)
    with semi_implicit_role("model"):
        model.prior.distribution().expand((5,)).log_prob(z).sum().backward()
    grads = [p.grad for p in model.prior.encoder.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads) and sum(g.abs().sum() for g in grads) > 0


def test_empirical_prior_is_unbiased(device):
    """The evaluation mixture over sampled training points has expected density equal to the
    aggregated posterior's (exact over all points)."""
    model, guide, x = build("aggregated", device, n=12)
    prior = model.prior
    with torch.no_grad():
        loc, log_scale = prior.atoms(torch.arange(12, device=device))
    from pyrozoo.distributions import FiniteMixing, LogScaleNormal, SemiImplicit

    exact = SemiImplicit(FiniteMixing((loc, log_scale)), lambda p: LogScaleNormal(p[0], p[1]).to_event(1), (3,), num_mixing=None)
    z = torch.randn(4, 3, device=device)
    densities = torch.stack([prior.empirical_distribution(5).log_prob(z).exp() for _ in range(800)])
    target = exact.log_prob(z).exp()
    se = densities.std(0) / math.sqrt(densities.shape[0])
    assert ((densities.mean(0) - target).abs() < 4.5 * se).all()


@pytest.mark.parametrize("chunk_size", [5, 4096])
def test_all_points_mixture_is_the_aggregated_posterior(device, chunk_size):
    """Without a random transform, ``empirical_distribution(None)`` is Eq. 21 exactly, in
    any chunking: the density equals the mean of the component densities computed directly."""
    model, guide, x = build("aggregated", device, n=12)
    prior = model.prior
    z = torch.randn(7, 3, device=device, dtype=torch.float64)
    with torch.no_grad():
        loc, log_scale = (t.double() for t in prior.atoms(torch.arange(12, device=device)))
        components = torch.distributions.Normal(loc, log_scale.exp()).log_prob(z.unsqueeze(1)).sum(-1)
        direct = torch.logsumexp(components, 1) - math.log(12)
        mixture = prior.empirical_distribution(None, chunk_size=chunk_size)
        assert torch.allclose(mixture.log_prob(z.float()).double(), direct, atol=1e-4)
    with pytest.raises(ValueError, match="num_points"):
        prior.empirical_distribution(0)


def test_estimate_gap_shrinks_with_more_mixing_draws(device):
    """Jensen: the K-point estimate of log p(z) is low on average, less so for larger K."""
    model, guide, x = build("aggregated", device, n=30)
    prior = model.prior
    with torch.no_grad():  # separated, narrow components, so that the estimates are visibly loose
        last = [m for m in prior.encoder.modules() if isinstance(m, torch.nn.Linear)][-1]
        last.weight[:3] *= 10.0
        last.bias[3:] = -2.0
    torch.manual_seed(1)
    with torch.no_grad():
        z = guide.distribution(x).sample()
    # one repeat per call: the spread over calls gives the Monte Carlo standard error
    gaps = {k: torch.stack([prior.estimate_gap(z, k, repeats=1).mean() for _ in range(400)]) for k in (1, 8, 64)}
    for small, large in ((1, 8), (8, 64)):
        diff = gaps[small] - gaps[large]
        assert diff.mean() > 4 * diff.std() / math.sqrt(len(diff))
    assert gaps[64].mean() > 4 * gaps[64].std() / math.sqrt(400)
    averaged = prior.estimate_gap(z, 8, repeats=400).mean()
    assert (averaged - gaps[8].mean()).abs() < 4 * gaps[8].std() / math.sqrt(200)
    with pytest.raises(ValueError, match="repeats"):
        prior.estimate_gap(z, 4, repeats=0)


def test_importance_sampling_tightens_with_more_samples(device):
    model, guide, x = build("vamp", device)
    pyro.set_rng_seed(0)
    one = torch.stack([model.log_likelihood(guide, x, 1) for _ in range(20)]).mean(0)
    many = model.log_likelihood(guide, x, 200)
    diff = many - one
    assert diff.mean() > 4 * diff.std() / math.sqrt(len(diff))


def test_validation():
    encoder = GaussianEncoder(MLP(4, [3], 4), 2)
    with pytest.raises(ValueError, match="outputs"):
        GaussianEncoder(MLP(4, [3], 5), 2)(torch.zeros(1, 4))
    with pytest.raises(ValueError):
        VampPrior(encoder, 0, (4,))
    with pytest.raises(ValueError):
        AggregatedPosteriorPrior(encoder, torch.zeros(0, 4))
    with pytest.raises(TypeError):
        VAE(MLP(2, [3], 4), object())
