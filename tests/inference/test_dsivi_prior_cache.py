"""DSIVI_ELBO with a PriorComponentCache on a VAE with an aggregated-posterior prior: with a
fresh cache the bound's value is the uncached one (bitwise) and its gradient is the uncached
gradient without the components' path (to rounding); a parameter change is never served
stale draws with refresh_every=1; with refresh_every=R each step encodes K2/R points; stale
draws only loosen the bound (Gibbs); and the dropped path is the one that has mean zero for
the exact aggregated posterior (Danskin), which is what makes dropping it sound."""

import math

import pyro
import pytest
import torch

from pyrozoo.distributions import PriorComponentCache, semi_implicit_role, semi_implicit_samples
from pyrozoo.inference import DSIVI_ELBO
from pyrozoo.models import MLP, VAE, AggregatedPosteriorPrior, AmortizedNormalGuide, GaussianEncoder

N, D_IN, LATENT, K2 = 40, 12, 3, 16

#: objective settings under which a fresh cache reproduces the uncached bound
PARTICLE_CASES = {"one": {}, "vectorized": dict(num_particles=3, vectorize_particles=True, max_plate_nesting=1)}


class DetachedAtomsPrior(AggregatedPosteriorPrior):
    """The uncached prior with its components computed without gradient: the reference for
    the cached gradient."""

    def atoms(self, idx):
        with torch.no_grad():
            return super().atoms(idx)


def vae(prior_cls=AggregatedPosteriorPrior, n=N, batch=10, k=K2, hidden=16):
    torch.manual_seed(0)
    x = (torch.rand(n, D_IN) < 0.4).float()
    encoder = GaussianEncoder(MLP(D_IN, [hidden], 2 * LATENT), LATENT)
    model = VAE(MLP(LATENT, [hidden], D_IN), prior_cls(encoder, x, num_mixing=k), dataset_size=n)
    guide = AmortizedNormalGuide(encoder, dataset_size=n)
    idx = torch.arange(batch)
    return model, guide, (x[idx], None, idx)


def parameters(model, guide):
    """Model and guide parameters, each once (the encoder is in both)."""
    return list({id(p): p for p in list(model.parameters()) + list(guide.parameters())}.values())


@torch.no_grad()
def sgd_step(params, lr=0.05):
    """A plain gradient step (torch.optim's first step imports torch._dynamo: seconds)."""
    for p in params:
        if p.grad is not None:
            p -= lr * p.grad


def loss_and_grads(objective, model, guide, args, seed):
    params = dict(model.named_parameters())
    params.update({f"guide.{k}": v for k, v in guide.named_parameters()})
    for p in params.values():
        p.grad = None
    pyro.set_rng_seed(seed)
    loss = objective.differentiable_loss(model, guide, *args)
    loss.backward()
    return loss.detach(), {k: p.grad.clone() for k, p in params.items() if p.grad is not None}


def close(a, b):
    """Equal to float32 rounding of sums of a few hundred terms."""
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6 * float(b.abs().max()))


@pytest.mark.parametrize("particles", list(PARTICLE_CASES), ids=list(PARTICLE_CASES))
def test_a_fresh_cache_gives_the_uncached_bound(particles):
    kw = PARTICLE_CASES[particles]
    model, guide, args = vae()
    uncached = loss_and_grads(DSIVI_ELBO(0, K2, **kw), model, guide, args, seed=3)
    cached = loss_and_grads(DSIVI_ELBO(0, K2, prior_cache=PriorComponentCache(), **kw), model, guide, args, seed=3)
    ref_model, ref_guide, _ = vae(DetachedAtomsPrior)
    detached = loss_and_grads(DSIVI_ELBO(0, K2, **kw), ref_model, ref_guide, args, seed=3)
    assert torch.equal(cached[0], uncached[0]) and torch.equal(detached[0], uncached[0])
    assert cached[1].keys() == detached[1].keys()
    for name, g in cached[1].items():
        assert close(g, detached[1][name]), name
        if name.startswith("decoder"):  # not upstream of the components: same as uncached
            assert close(g, uncached[1][name]), name
    # the components' path is really dropped: the encoder's gradient differs beyond rounding
    enc = [n for n in cached[1] if "encoder" in n]
    assert any(not close(cached[1][n], uncached[1][n]) for n in enc)


def test_each_step_redraws_the_pool_with_refresh_every_1():
    """Training: at every step the cached bound equals the uncached bound at the same
    parameters and random numbers, so no draw from before a parameter change is used."""
    model, guide, args = vae()
    cache = PriorComponentCache(refresh_every=1)
    objective, plain = DSIVI_ELBO(0, K2, prior_cache=cache), DSIVI_ELBO(0, K2)
    params = parameters(model, guide)
    for step in range(4):
        with torch.no_grad():
            pyro.set_rng_seed(step)
            expected = plain.differentiable_loss(model, guide, *args)
        loss, _ = loss_and_grads(objective, model, guide, args, seed=step)
        assert torch.equal(loss, expected), step
        assert int(cache.ages("z").max()) == 0
        sgd_step(params)
    assert cache.drawn == 4 * K2


@pytest.mark.parametrize("refresh_every", [2, 4])
def test_refresh_every_R_encodes_K2_over_R_points_per_step(refresh_every):
    model, guide, args = vae()
    cache = PriorComponentCache(refresh_every=refresh_every)
    objective = DSIVI_ELBO(0, K2, prior_cache=cache)
    params = parameters(model, guide)
    for step in range(2 * refresh_every):
        before = cache.drawn
        loss_and_grads(objective, model, guide, args, seed=step)
        assert cache.drawn - before == (K2 if step == 0 else K2 // refresh_every)
        assert int(cache.ages("z").max()) <= refresh_every - 1
        sgd_step(params)


def separated_vae(k):
    """Six data points, the batch covering them all, well-separated components."""
    model, guide, args = vae(n=6, batch=6, k=k, hidden=4)
    with torch.no_grad():
        for p in guide.encoder.parameters():
            p.mul_(3.0)
    return model, guide, args


def test_stale_draws_loosen_the_prior_term():
    """Over z from the current aggregated posterior, the prior term with draws from before a
    parameter change is below the one with fresh draws: on average by KL(p*_now || p*_pool)
    (Gibbs' inequality), which the pool's prior can only lose, never gain."""
    k, samples = 1000, 400
    model, guide, (x, _, _) = separated_vae(k)
    cache = PriorComponentCache(refresh_every=2)

    def prior_term(cached):
        p = model.prior.distribution()
        z = guide.distribution(x).sample((samples,))  # (samples, 6, latent): the data's z
        with semi_implicit_samples(model=k), semi_implicit_role("model"):
            if not cached:
                return p.log_prob(z).flatten()
            with cache.site("z"):
                return p.log_prob(z).flatten()

    with torch.no_grad():
        prior_term(cached=True)  # fill at the old parameters
        for p in guide.encoder.parameters():
            p.add_(0.3 * torch.randn_like(p))
        pyro.set_rng_seed(1)
        stale = prior_term(cached=True)
        pyro.set_rng_seed(1)
        fresh = prior_term(cached=False)
    assert int(cache.ages("z").max()) == 1  # half the pool is from before the change
    diff = (stale - fresh).double()
    mean, se = float(diff.mean()), float(diff.std() / math.sqrt(diff.numel()))
    assert mean < -4 * se, (mean, se)


def test_prior_cache_argument_validation():
    with pytest.raises(TypeError, match="PriorComponentCache"):
        DSIVI_ELBO(1, 2, prior_cache=4)
    with pytest.raises(ValueError, match="upper"):
        DSIVI_ELBO(1, 2, bound="upper", prior_cache=PriorComponentCache())


# -- why dropping the components' gradient is sound ---------------------------------------------


def component_gradient_t(k, replicates):
    """Per encoder coordinate, the t-statistic over replicates of the gradient that the cache
    drops (uncached minus cached, same random numbers), for a full-data batch."""
    model, guide, args = separated_vae(k)  # so that K2 = 1 is far from the mixture
    diffs = []
    for r in range(replicates):
        _, full = loss_and_grads(DSIVI_ELBO(0, k), model, guide, args, seed=100 + r)
        _, cut = loss_and_grads(DSIVI_ELBO(0, k, prior_cache=PriorComponentCache()), model, guide, args, seed=100 + r)
        diffs.append(torch.cat([(full[n] - cut[n]).flatten() for n in full if "encoder" in n]))
    d = torch.stack(diffs).double()
    mean, se = d.mean(0), d.std(0) / math.sqrt(replicates)
    # coordinates the prior term never reaches (a clamped log-scale, a dead unit) are exactly 0
    return torch.where(se > 0, mean / se, torch.where(mean == 0, 0.0, math.inf))


def test_the_dropped_gradient_has_mean_zero_for_the_aggregated_posterior():
    r"""With the batch covering the data the prior mixes over, the components' path of the
    prior term has mean :math:`N\int\nabla_\phi p^*_\phi = 0` as K2 grows; at K2 = 1 it is
    the gradient of the estimator's Jensen gap, clearly non-zero (the test can fail)."""
    t_large = component_gradient_t(k=100, replicates=60)
    t_one = component_gradient_t(k=1, replicates=60)
    # |t| < 5 on every one of the ~50 coordinates: about 1e-3 false alarms overall (Bonferroni)
    assert float(t_large.abs().max()) < 5.0, t_large
    assert float(t_one.abs().max()) > 7.0, t_one
