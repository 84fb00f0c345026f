"""PriorComponentCache: the first pool is the uncached estimator's draw, a pool is shared only
while the mixing's dependencies keep their values, every draw is at most refresh_every - 1
parameter changes old and equals its atom computed at the parameters of the state it was
drawn in, no gradient flows through the draws, and mixings that cannot name their
dependencies are refused."""

import copy

import pyro
import pyro.distributions as dist
import pytest
import torch
from torch import nn

from pyrozoo.distributions import FiniteMixing, LogScaleNormal, PriorComponentCache, SemiImplicit, semi_implicit_role, semi_implicit_samples
from tests.distributions.semi_implicit_cases import CASE_IDS, CASES

K = 7


def model_side(q, value, cache=None, key="z", k=K):
    """The model-side (prior) estimate of ``log q(value)`` with ``k`` draws, through ``cache``."""
    with semi_implicit_samples(model=k), semi_implicit_role("model"):
        if cache is None:
            return q.log_prob(value)
        with cache.site(key):
            return q.log_prob(value)


def perturb(q, amount=0.05):
    """Adds ``amount`` in place to the first writable dependency of ``q``'s mixing."""
    for d in q.mixing.dependencies():
        if all(s != 0 for s in d.stride()):
            with torch.no_grad():
                d.add_(amount)
            return
    raise AssertionError("no writable dependency")


def build(c, copies):
    q, _ = c.build(torch.device("cpu"), torch.float64)
    if copies:
        q = q.expand(torch.Size((copies,)) + q.batch_shape)  # one set of draws per copy
    return q


def writable(c):
    q, _ = c.build(torch.device("cpu"), torch.float64)
    return any(all(s != 0 for s in d.stride()) for d in q.mixing.dependencies())


@pytest.mark.parametrize("copies", [0, 4], ids=["shared", "per_copy"])
@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_first_pool_is_the_uncached_draw(c, copies):
    q = build(c, copies)
    z = q.sample((3,))
    pyro.set_rng_seed(11)
    uncached = model_side(q, z)
    cache = PriorComponentCache(refresh_every=2)
    pyro.set_rng_seed(11)
    cached = model_side(q, z, cache)
    assert torch.equal(cached, uncached)
    assert cache.drawn == K and cache.reused == 0


@pytest.mark.parametrize("c", CASES, ids=CASE_IDS)
def test_unchanged_parameters_share_the_pool(c):
    """Repeated evaluations, even through a distribution rebuilt with equal values (as a
    model rebuilds its prior every call), use the same draws; uncached ones differ."""
    q = build(c, 0)
    z = q.sample((3,))
    cache = PriorComponentCache(refresh_every=1)
    values = []
    for seed in (1, 2):
        pyro.set_rng_seed(seed)
        values.append(model_side(build(c, 0), z, cache))
    assert torch.equal(values[0], values[1])
    assert cache.drawn == K and cache.reused == 1 and int(cache.ages("z").max()) == 0
    pyro.set_rng_seed(2)
    assert not torch.equal(model_side(q, z), values[0])


@pytest.mark.parametrize("c", [c for c in CASES if writable(c)], ids=[c.name for c in CASES if writable(c)])
def test_a_parameter_change_redraws_the_pool(c):
    """refresh_every=1: after a change the cached estimate is the uncached estimate at the
    new parameters (same random numbers), never the old draws."""
    q = build(c, 0)
    z = q.sample((3,))
    cache = PriorComponentCache(refresh_every=1)
    model_side(q, z, cache)
    perturb(q)
    pyro.set_rng_seed(5)
    cached = model_side(q, z, cache)
    pyro.set_rng_seed(5)
    assert torch.equal(cached, model_side(q, z))
    assert cache.drawn == 2 * K and int(cache.ages("z").max()) == 0


# -- rolling refresh of atoms computed by a module --------------------------------------------


class Atoms(nn.Module):
    """``(loc, log_scale)`` of fixed inputs by a linear map: the shape of an encoder's atoms."""

    def __init__(self, n=20, d_in=3, d=2):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.register_buffer("inputs", torch.randn(n, d_in, generator=g, dtype=torch.float64))
        self.net = nn.Linear(d_in, 2 * d).double()
        self.d = d

    def atoms(self, idx):
        out = self.net(self.inputs[idx])
        return out[:, : self.d], out[:, self.d :].clamp(-2, 1)

    def distribution(self, k=K):
        mixing = FiniteMixing(self.atoms, size=self.inputs.shape[0])
        return SemiImplicit(mixing, lambda psi: LogScaleNormal(psi[0], psi[1]).to_event(1), (self.d,), num_mixing=k, share_mixing=True)


def _same_rounding(a, b):
    """Equal but for float64 rounding: the cache computes its atoms for a batch of indices and
    the reference for one row, and a BLAS may block the two products differently (last bits);
    a neighbouring parameter state differs by ~0.1, twelve orders of magnitude more."""
    return torch.allclose(a, b, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("refresh_every", [1, 3, 7])
def test_every_draw_is_its_atom_at_the_state_it_was_drawn_in(refresh_every):
    torch.manual_seed(0)
    module = Atoms()
    z = torch.randn(5, 2, dtype=torch.float64)
    cache = PriorComponentCache(refresh_every=refresh_every)
    states = []  # parameters of each parameter state
    for step in range(10):
        if step:
            with torch.no_grad():
                module.net.weight.add_(0.1 * torch.randn_like(module.net.weight))
        states.append(copy.deepcopy(module))
        drawn_before = cache.drawn
        model_side(module.distribution(), z, cache)
        model_side(module.distribution(), z, cache)  # same state: nothing new
        ages = cache.ages("z")
        assert int(ages.max()) <= refresh_every - 1
        if step:  # 1/R of the pool per change, every slot once per R changes
            assert cache.drawn - drawn_before in (K // refresh_every, -(-K // refresh_every))
        idx = cache.indices("z").reshape(-1)
        loc, log_scale = cache.stored_draws("z")
        for j in range(K):
            born = states[step - int(ages[j])]
            ref_loc, ref_log_scale = born.atoms(idx[j : j + 1])
            assert _same_rounding(loc[j, 0], ref_loc[0]) and _same_rounding(log_scale[j, 0], ref_log_scale[0])
        current_loc, _ = cache.current_draws("z")
        assert _same_rounding(current_loc.reshape(K, -1), module.atoms(idx)[0].detach())
    assert cache.reused == 10


def test_a_new_number_of_draws_starts_a_new_pool():
    module = Atoms()
    z = torch.randn(5, 2, dtype=torch.float64)
    cache = PriorComponentCache(refresh_every=4)
    model_side(module.distribution(), z, cache)
    model_side(module.distribution(), z, cache, k=K + 2)
    assert cache.drawn == 2 * K + 2 and tuple(cache.stored_draws("z")[0].shape[:2]) == (K + 2, 1)


def test_draws_carry_no_gradient_but_the_conditional_does():
    module = Atoms()
    log_scale_shift = torch.zeros((), dtype=torch.float64, requires_grad=True)
    mixing = FiniteMixing(module.atoms, size=20)
    q = SemiImplicit(mixing, lambda psi: LogScaleNormal(psi[0], psi[1] + log_scale_shift).to_event(1), (2,), num_mixing=K, share_mixing=True)
    z = torch.randn(5, 2, dtype=torch.float64)
    model_side(q, z, PriorComponentCache()).sum().backward()
    assert module.net.weight.grad is None
    assert log_scale_shift.grad is not None and log_scale_shift.grad != 0
    model_side(q, z).sum().backward()  # uncached: the components' path is there
    assert module.net.weight.grad is not None and module.net.weight.grad.abs().sum() > 0


def test_mixings_without_named_dependencies_are_refused():
    module = Atoms()
    mixing = FiniteMixing(lambda idx: module.atoms(idx), size=20)  # a closure: parameters unknown
    q = SemiImplicit(mixing, lambda psi: LogScaleNormal(psi[0], psi[1]).to_event(1), (2,), num_mixing=K, share_mixing=True)
    with pytest.raises(ValueError, match="does not name what its draws depend on"):
        model_side(q, torch.zeros(2, dtype=torch.float64), PriorComponentCache())
    callable_mixing = SemiImplicit(lambda shape: torch.randn(shape + (2,)), lambda psi: dist.Normal(psi, 1.0).to_event(1), (2,), num_mixing=K)
    with pytest.raises(ValueError, match="does not name"):
        model_side(callable_mixing, torch.zeros(2), PriorComponentCache())


def test_guide_side_estimates_are_not_cached():
    module = Atoms()
    q = module.distribution()
    z = q.rsample((3,))
    cache = PriorComponentCache()
    with semi_implicit_samples(guide=K), cache.site("z"):
        q.log_prob(z)  # psi0 known: a guide-side estimate
    assert cache.drawn == 0


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_refresh_every_is_validated(bad):
    with pytest.raises(ValueError, match="refresh_every"):
        PriorComponentCache(refresh_every=bad)
