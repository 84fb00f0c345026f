"""The method declarations (zoo_protocols.methods) and the one settings resolver (zoo_protocols.config).

Adding a method = its prior/guide module(s) + one ``MethodSpec``: every declaration is built on
a small network and trained or sampled for a few steps here (``CASES`` is derived from them).
"""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

from pyrozoo.distributions import PriorComponentCache
from pyrozoo.inference import DSIVI_ELBO, fit
from pyrozoo.inference.sample_storage import InMemorySamples
from pyrozoo.models import MLP, VAE, AmortizedNormalGuide, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, GaussianEncoder, NormalGammaPrior
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import HIERARCHIES, METHODS, MethodSpec, method, normal_prior

#: the declarations built under a classification likelihood here (the compression and
#: variance-network priors group the units of a network's layers; any likelihood would do)
CATEGORICAL = {"bc-gnj", "bc-ghs", "vd-additive", "vd-weight", "vd-neuron", "vd-layer", "vd-zero-mean"}


def _likelihood_of(spec: MethodSpec) -> str:
    """``"vae"`` for a VAE's latent prior, else the likelihood the case is built under."""
    if spec.latent_prior is not None:
        return "vae"
    return "categorical" if spec.name in CATEGORICAL else "gaussian"


#: every declaration with the likelihood it is built under: derived from the declarations, so
#: a new one is built, trained (or sampled) and checked here with no edit of this file
CASES = {name: _likelihood_of(spec) for name, spec in METHODS.items()}


def test_the_hand_listed_cases_name_declarations():
    assert CATEGORICAL <= set(METHODS)


def test_every_protocol_evaluates_the_declarations_that_name_it():
    from zoo_protocols import mnist_mlp, uci_importance_weighted, uci_vi
    from zoo_protocols.methods import PROTOCOLS, evaluated_by

    modules = {"uci": uci_vi, "mnist": mnist_mlp, "uci-importance-weighted": uci_importance_weighted}
    assert set(modules) == set(PROTOCOLS)
    for protocol, module in modules.items():
        named = [n for n, spec in METHODS.items() if protocol in spec.protocols]
        assert named and module.NAMES == evaluated_by(protocol) == tuple(named)
        registry = module.MNIST_REGISTRY if protocol == "mnist" else module.UCI_REGISTRY
        assert set(named) <= set(registry.available())
    with pytest.raises(ValueError, match="protocols must be a tuple"):
        MethodSpec("x", "x", normal_prior, lambda m, s: None, protocols=("cifar",))
    with pytest.raises(ValueError, match="protocols must be a tuple"):
        MethodSpec("x", "x", normal_prior, lambda m, s: None, protocols="uci")


def _data(likelihood: str, n: int = 64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    if likelihood == "gaussian":
        return x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(n, generator=g)
    return x, (x[:, 0] > 0).long()


def _model(spec: MethodSpec, s, likelihood: str, n: int):
    torch.manual_seed(0)
    if likelihood == "gaussian":
        return BayesianNeuralNetwork(MLP(3, [8], 1), spec.prior(s), GaussianLikelihood(n, precision=dist.Gamma(6.0, 6.0)))
    return BayesianNeuralNetwork(MLP(3, [8], 2), spec.prior(s), CategoricalLikelihood(n))


def _vae(spec, s, n: int = 40):
    """A small VAE with ``spec``'s latent prior over grey-level inputs, and binary data."""
    torch.manual_seed(0)
    grey = torch.rand(n, 16)
    encoder = GaussianEncoder(MLP(16, [8], 4), 2)
    model = VAE(MLP(2, [8], 16), spec.latent_prior(encoder, grey, s), dataset_size=n)
    return model, AmortizedNormalGuide(encoder, dataset_size=n), ((grey > 0.5).float(), torch.zeros(n))


@pytest.mark.parametrize("name", sorted(CASES))
def test_declaration_builds_and_trains(name):
    """Every declaration gives a model and a guide that ``fit`` trains, or a sampler that runs,
    and its loss / draws stay finite."""
    spec = method(name)
    likelihood = CASES[name]
    if likelihood == "vae":
        s = RunConfig(extra={"K": 6}).settings(spec.defaults)
        pyro.clear_param_store()
        model, guide, data = _vae(spec, s)
        history = fit(model, guide, data, epochs=3, batch_size=20, lr=1e-3, seed=0, progress=False, **spec.fit_arguments(s, 3))
        assert len(history) == 3 and all(math.isfinite(v) for v in history.loss)
        return
    x, y = _data(likelihood)
    s = RunConfig().settings(spec.defaults, {"v0": 0.1})
    pyro.clear_param_store()
    model = _model(spec, s, likelihood, len(y))
    if spec.is_sampler:
        adaptations = spec.adaptations(model, s) if spec.adaptations else []
        y_obs = y.unsqueeze(-1) if likelihood == "gaussian" else y
        sampler = spec.sampler(model, s, 1e-4, adaptations=adaptations)
        sink = InMemorySamples()
        sampler.run((x, y_obs), num_steps=6, batch_size=32, burn_in=2, thin=1, sink=sink, seed=0, progress=False)
        draws = sink.load()
        assert len(sink) == 4 and all(torch.isfinite(v).all() for v in draws.values())
        return
    guide = spec.guide(model, s)
    history = fit(model, guide, (x, y), epochs=3, batch_size=32, lr=1e-3, seed=0, progress=False, **spec.fit_arguments(s, 3))
    assert len(history) == 3 and all(math.isfinite(v) for v in history.loss)


def test_spec_declares_a_guide_or_a_sampler():
    with pytest.raises(ValueError, match="exactly one of a guide"):
        MethodSpec("neither", "", normal_prior)
    with pytest.raises(ValueError, match="exactly one of a guide"):
        MethodSpec("both", "", normal_prior, guide=lambda m, s: None, sampler=lambda m, s, lr: None)
    with pytest.raises(ValueError, match="exactly one of a guide"):
        MethodSpec("guide-and-latent-prior", "", None, guide=lambda m, s: None, latent_prior=lambda e, x, s: None)


def test_a_weight_prior_is_declared_unless_a_latent_prior_is():
    with pytest.raises(ValueError, match="must declare a prior over the network's parameters"):
        MethodSpec("no-prior", "", None, guide=lambda m, s: None)
    with pytest.raises(ValueError, match="must declare a prior over the network's parameters"):
        MethodSpec("two-priors", "", normal_prior, latent_prior=lambda e, x, s: None)


def test_hierarchy_is_one_of_the_known_treatments():
    with pytest.raises(ValueError, match="hierarchy must be one of"):
        MethodSpec("collapsed", "", normal_prior, guide=lambda m, s: None, hierarchy="collapsed")
    assert {spec.hierarchy for spec in METHODS.values()} <= {None, *HIERARCHIES}


def test_normal_gamma_declarations_build_the_form_their_hierarchy_names():
    """A hierarchy read by protocols (zoo_protocols.dsivi_toy, zoo_protocols.dsivi_hierarchical) agrees with
    the prior the declaration builds."""
    built = {}
    for name, spec in METHODS.items():
        if spec.prior is not None:
            prior = spec.prior(RunConfig().settings(spec.defaults, {"v0": 0.1}))
            if isinstance(prior, NormalGammaPrior):
                built[name] = (prior.form, spec.hierarchy)
    assert {"dsivi", "normal-gamma-joint", "normal-gamma-marginal", "normal-gamma-exact"} <= set(built)
    assert all(form == hierarchy for form, hierarchy in built.values()), built


def test_run_settings_reach_the_dsivi_objectives_elbo_options():
    """Pyro's ELBO options pass through the settings when a run gives them (the DSIVI toy's
    vectorised particles) and are Pyro's defaults otherwise (the UCI protocol's dsivi)."""
    spec = method("dsivi")
    assert vars(spec.objective(RunConfig().settings(spec.defaults))) == vars(DSIVI_ELBO(8, 8))
    options = {"num_particles": 4, "vectorize_particles": True, "max_plate_nesting": 1}
    for name, (K1, K2) in {"dsivi": (3, 5), "normal-gamma-marginal": (0, 5), "normal-gamma-exact": (1, 1)}.items():
        spec = method(name)
        objective = spec.objective(RunConfig(extra={"K1": 3, "K2": 5, **options}).settings(spec.defaults))
        assert type(objective) is DSIVI_ELBO and vars(objective) == vars(DSIVI_ELBO(K1, K2, **options)), name


#: vae-dsivi's prior_refresh_every: None (the paper's estimator, the default) or R steps
PRIOR_REFRESH_CASES = [None, 1, 4]


@pytest.mark.parametrize("refresh", PRIOR_REFRESH_CASES)
def test_vae_dsivi_prior_refresh_every_sets_only_the_prior_cache(refresh):
    """Unset (or None) it builds exactly the uncached DSIVI_ELBO(0, K) the committed results
    were trained with; an integer R adds a PriorComponentCache(R) and changes nothing else.
    The explicit priors' objective has no such setting."""
    spec = method("vae-dsivi")
    extra = {"K": 7} if refresh is None else {"K": 7, "prior_refresh_every": refresh}
    objective = spec.objective(RunConfig(extra=extra).settings(spec.defaults))
    assert type(objective) is DSIVI_ELBO
    cache = objective.prior_cache
    if refresh is None:
        assert vars(objective) == vars(DSIVI_ELBO(0, 7))
    else:
        assert type(cache) is PriorComponentCache and cache.refresh_every == refresh
        assert {k: v for k, v in vars(objective).items() if k != "prior_cache"} == {k: v for k, v in vars(DSIVI_ELBO(0, 7)).items() if k != "prior_cache"}
    for name in ("vae-normal", "vae-vamp"):
        other = method(name)
        assert "prior_refresh_every" not in other.defaults
        assert other.objective(RunConfig(extra={"K": 7}).settings(other.defaults)).prior_cache is None


@pytest.mark.parametrize("value", [0, -2, 2.5, True, "8"])
def test_vae_dsivi_prior_refresh_every_must_be_none_or_a_positive_int(value):
    spec = method("vae-dsivi")
    with pytest.raises(ValueError, match=f"prior_refresh_every must be None .* or a positive int, got {value!r}"):
        spec.objective(RunConfig(extra={"K": 6, "prior_refresh_every": value}).settings(spec.defaults))


def test_vae_dsivi_trains_with_reused_prior_components():
    """With prior_refresh_every=R the declaration trains, encoding its K prior points once and
    then K/R per parameter change (one per optimisation step)."""
    spec = method("vae-dsivi")
    K, R, epochs = 6, 2, 3
    s = RunConfig(extra={"K": K, "prior_refresh_every": R}).settings(spec.defaults)
    pyro.clear_param_store()
    model, guide, data = _vae(spec, s)
    kwargs = spec.fit_arguments(s, epochs)
    history = fit(model, guide, data, epochs=epochs, batch_size=20, lr=1e-3, seed=0, progress=False, **kwargs)
    steps = epochs * len(data[0]) // 20
    assert len(history) == epochs and all(math.isfinite(v) for v in history.loss)
    assert kwargs["objective"].prior_cache.drawn == K + (steps - 1) * K // R


def test_unknown_method_lists_the_declared_ones():
    with pytest.raises(ValueError, match="declared: map, mfvi"):
        method("no-such-method")


def test_settings_layer_config_then_extra_then_defaults_in_order():
    config = RunConfig(epochs=7, extra={"lr": 0.5, "init_scale": 0.25})
    s = config.settings({"init_scale": 1.0, "K": 3, "epochs": 99}, {"K": 4, "batch_size": 16, "lr": 0.1})
    assert s["epochs"] == 7  # a config field wins over every default
    assert s["lr"] == 0.5  # extra wins over defaults when the field is not given
    assert s["init_scale"] == 0.25
    assert s["K"] == 3  # the first defaults mapping wins over later ones
    assert s["batch_size"] == 16
    assert RunConfig(lr=0.01, extra={"lr": 0.5}).settings()["lr"] == 0.01
    assert set(s) == {"epochs", "lr", "init_scale", "K", "batch_size"}
    with pytest.raises(KeyError, match="'missing' has no value.*known settings: K, batch_size"):
        s["missing"]


def test_settings_pick_a_variant_of_per_sampler_values():
    s = RunConfig().settings({"lr": {"sgld": 1e-5, "sghmc": 1e-6}, "momentum": 0.9})
    assert s.pick("lr", "sghmc") == 1e-6 and s.pick("momentum", "sghmc") == 0.9
    assert RunConfig(lr=3e-4).settings({"lr": {"sgld": 1e-5}}).pick("lr", "sgld") == 3e-4


def test_extra_overrides_a_declared_default_in_what_is_built():
    spec = method("bbb")
    prior = spec.prior(RunConfig(extra={"mixture": (0.25, 2.0, 0.5)}).settings(spec.defaults))
    d = prior.base
    assert (float(d.pi), float(d.sigma1), float(d.sigma2)) == (0.25, 2.0, 0.5)


def test_protocols_run_declarations():
    """Every method of the UCI, MNIST and compression protocols is a declaration (the UCI
    table's annealed "a-" variants run the declaration they name with annealing)."""
    from zoo_protocols import lenet, mnist, uci, uci_sgmcmc

    names = set(uci.available_methods()) | set(mnist.available_methods()) | set(lenet.available_methods())
    annealed = {name for name, (_, a) in uci_sgmcmc.VARIANTS.items() if a}
    assert names - annealed <= set(METHODS)
    assert {uci_sgmcmc.VARIANTS[n][0] for n in annealed} <= set(METHODS)


def test_a_new_declaration_runs_in_a_protocol(boston_split):
    """ARCHITECTURE.md's walk-through: a method whose pieces exist is one declaration, and the
    UCI protocol evaluates it (its own default reaches the prior through the settings)."""
    from pyrozoo.models import IIDPrior
    from zoo_protocols import uci_vi
    from zoo_protocols.methods import closed_form_kl, mean_field

    spec = MethodSpec(
        "mfvi-laplace", "mean-field Gaussian VI under a Laplace(0, b) prior",
        lambda s: IIDPrior(dist.Laplace(0.0, s["laplace_scale"])), mean_field, closed_form_kl,
        defaults={"laplace_scale": 1.0},
    )
    built = spec.prior(RunConfig(extra={"laplace_scale": 0.5}).settings(spec.defaults))
    assert float(built.base.scale) == 0.5
    result = uci_vi.run(spec, boston_split.to(dtype=torch.float32), RunConfig(quick=True, num_samples=5))
    baseline = float((boston_split.to_original_units(boston_split.y_test) - boston_split.y_mean).square().mean().sqrt())
    assert 0 < result["rmse"] < baseline and math.isfinite(result["test_ll"])
