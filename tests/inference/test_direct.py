"""Direct evaluation is declared, not detected: objectives take it for exactly the models and
guides that implement the protocols of :mod:`pyrozoo.inference.direct`, whatever their class,
and only where no foreign effect handler is active (the one reader of Pyro's handler stack is
:func:`pyrozoo.poutine.stack.active_handlers`)."""

from contextlib import ExitStack
from pathlib import Path

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer.autoguide import AutoNormal

from pyrozoo.guides import BayesianCompressionGuide, MeanFieldNormalGuide
from pyrozoo.inference import ClosedFormKL_ELBO, ImportanceWeighted_ELBO, ReweightedWakeSleep
from pyrozoo.inference.direct import ConditionalDirectGuide, DirectGuide, DirectModel, DirectParticlesModel
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior
from pyrozoo.poutine import flipout, latent_scale, local_reparameterization
from pyrozoo.poutine.stack import active_handlers
from tests.inference.cases import small_bnn

LIBRARY = Path(__file__).resolve().parents[2] / "pyrozoo"

pytestmark = [
    pytest.mark.filterwarnings("ignore:importance-weighted objective on a subsampled data plate"),
    pytest.mark.filterwarnings("ignore:Found vars in model but not guide"),
]


def guide_runs(guide, evaluate) -> int:
    """How often ``evaluate()`` runs the guide: the trace-based path runs it once per
    particle, the direct path never (it draws from ``guide.posterior``)."""
    calls = [0]
    forward = guide.forward

    def counted(*args, **kwargs):
        calls[0] += 1
        return forward(*args, **kwargs)

    guide.forward = counted
    try:
        evaluate()
    finally:
        del guide.forward
    return calls[0]


@pytest.fixture
def bnn():
    x, y = torch.randn(10, 5), torch.randn(10, 1)
    model = small_bnn()
    guide = MeanFieldNormalGuide(model, init_scale=0.1)
    guide(x, y)
    return model, guide, x, y


def test_bnn_and_sitewise_guides_implement_the_protocols(bnn):
    model, guide, x, y = bnn
    assert isinstance(model, DirectModel) and isinstance(model, DirectParticlesModel)
    assert isinstance(guide, DirectGuide)
    assert set(guide.direct_sites(model)) == {name for name, _ in model.latent_sites(x)}
    assert guide.direct_sites(small_bnn()) is None  # a guide of another model
    assert MeanFieldNormalGuide(model).direct_sites(model) is None  # not set up yet


def _under(handler, fn):
    def run():
        with handler():
            return fn()

    return run


@pytest.mark.parametrize(
    "case, direct",
    [
        ("plain", True),
        ("keywords", True),
        ("subsample", True),
        ("latent_scale", True),
        ("local_reparameterization", True),
        ("flipout", True),
        ("latent_scale+flipout", True),
        ("trace", False),
        ("block", False),
        ("no targets", False),
        ("no fuse", False),
        ("hidden site", False),
        ("guide of another model", False),
    ],
)
def test_the_elbo_evaluates_directly_exactly_where_declared(bnn, case, direct):
    model, guide, x, y = bnn
    elbo = ClosedFormKL_ELBO(fuse=case != "no fuse")
    if case == "hidden site":
        guide = MeanFieldNormalGuide(model, hide=["noise_precision"])
        guide(x, y)
    elif case == "guide of another model":
        guide = MeanFieldNormalGuide(small_bnn())
        guide(x, y)
    call = {
        "keywords": lambda: elbo.loss(model, guide, x=x, y=y),
        "subsample": lambda: elbo.loss(model, guide, x[:4], y[:4], torch.arange(4)),
        "no targets": lambda: elbo.loss(model, guide, x),
    }.get(case, lambda: elbo.loss(model, guide, x, y))
    handlers = {
        "latent_scale": lambda: latent_scale(0.3),
        "local_reparameterization": local_reparameterization,
        "flipout": flipout,
        "trace": lambda: pyro.poutine.trace(param_only=True),
        "block": pyro.poutine.block,
    }
    if case == "latent_scale+flipout":
        call = _under(lambda: latent_scale(0.3), _under(flipout, call))
    elif case in handlers:
        call = _under(handlers[case], call)
    assert guide_runs(guide, call) == (0 if direct else 1)


def test_plain_pyro_models_and_guides_take_the_trace_path():
    x, y = torch.randn(10, 3), torch.randn(10)

    def model(x, y=None):
        w = pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))
        with pyro.plate("data", len(x)):
            pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)

    guide = AutoNormal(model)
    guide(x, y)
    assert not isinstance(model, DirectModel) and not isinstance(guide, DirectGuide)
    assert guide_runs(guide, lambda: ClosedFormKL_ELBO().loss(model, guide, x, y)) == 1
    assert guide_runs(guide, lambda: ImportanceWeighted_ELBO(3).loss(model, guide, x, y)) == 3


def test_importance_weights_are_direct_only_without_any_handler(bnn):
    model, guide, x, y = bnn
    # traced: one guide run per particle; reweighted wake-sleep replays each once more, at the
    # draws held fixed (log q's parameter gradient there)
    for objective, runs in ((ImportanceWeighted_ELBO(3), 3), (ReweightedWakeSleep(3), 6)):
        assert guide_runs(guide, lambda: objective.loss(model, guide, x, y)) == 0
        assert guide_runs(guide, _under(lambda: latent_scale(0.5), lambda: objective.loss(model, guide, x, y))) == runs
        assert guide_runs(guide, _under(pyro.poutine.block, lambda: objective.loss(model, guide, x, y))) == runs


class DeclaredRegression:
    """Bayesian linear regression that is no BayesianNeuralNetwork, with direct evaluation
    declared through the protocol (not the particle extension)."""

    def __init__(self, d):
        self.prior = dist.Normal(torch.zeros(d, dtype=torch.float64), 1.0).to_event(1)

    def __call__(self, x, y=None):
        w = pyro.sample("w", self.prior)
        with pyro.plate("data", len(x)):
            pyro.sample("obs", dist.Normal(x @ w, 0.5), obs=y)

    @staticmethod
    def split_args(x, y=None):
        return x, y, None

    def latent_sites(self, x):
        return [("w", self.prior)]

    def log_likelihood(self, values, x, y, subsample=None):
        return dist.Normal(x @ values["w"], 0.5).log_prob(y).sum()


class DeclaredGuide:
    def __init__(self, model, d):
        self.model = model
        self.loc = torch.linspace(-1, 1, d, dtype=torch.float64).requires_grad_()
        self.runs = 0

    def posterior(self, name):
        return dist.Normal(self.loc, 0.3).to_event(1)

    def direct_sites(self, model):
        return ("w",) if model is self.model else None

    def __call__(self, x, y=None):
        self.runs += 1
        pyro.sample("w", self.posterior("w"))


def test_any_model_and_guide_that_declare_it_are_evaluated_directly():
    """The objectives ask the protocol, not the class: a hand-written model and guide get the
    direct path, with the same value and gradient as the trace-based one on the same draws."""
    x, y = torch.randn(12, 3, dtype=torch.float64), torch.randn(12, dtype=torch.float64)
    model = DeclaredRegression(3)
    guide = DeclaredGuide(model, 3)
    assert isinstance(model, DirectModel) and not isinstance(model, DirectParticlesModel)
    assert isinstance(guide, DirectGuide)
    results = []
    for fuse, runs in ((True, 0), (False, 1)):
        guide.runs = 0
        pyro.set_rng_seed(1)
        loss = ClosedFormKL_ELBO(fuse=fuse).differentiable_loss(model, guide, x, y)
        assert guide.runs == runs
        results.append((loss, torch.autograd.grad(loss, [guide.loc])[0]))
    (direct, g_direct), (traced, g_traced) = results
    torch.testing.assert_close(direct, traced)
    torch.testing.assert_close(g_direct, g_traced)
    # without log_likelihood_particles the importance-weighted objectives run the guide
    guide.runs = 0
    ImportanceWeighted_ELBO(3).loss(model, guide, x, y)
    assert guide.runs == 3


def test_active_handlers():
    assert active_handlers() == (0, False, 1.0, None)
    with latent_scale(0.5), local_reparameterization() as outer, latent_scale(0.2), flipout() as inner:
        handlers = active_handlers()
        assert handlers.count == 4 and not handlers.foreign
        assert handlers.latent_scale == pytest.approx(0.1)
        assert handlers.weight_noise is inner and handlers.weight_noise is not outer
    with latent_scale(0.5), pyro.poutine.block():
        handlers = active_handlers()
        assert handlers.count == 2 and handlers.foreign and handlers.latent_scale is None


def test_one_module_reads_pyros_handler_stack():
    readers = sorted(str(p.relative_to(LIBRARY.parent)) for p in LIBRARY.rglob("*.py") if "_PYRO_STACK" in p.read_text())
    assert readers == ["pyrozoo/poutine/stack.py"]


@pytest.mark.parametrize("fused", [True, False], ids=["fused-posterior", "reference-posterior"])
@pytest.mark.parametrize("estimator", [None, "local", "flipout"])
@pytest.mark.parametrize("prior", ["bc-gnj", "bc-ghs"])
def test_sites_that_depend_on_earlier_draws_are_evaluated_directly_with_the_traced_numbers(prior, estimator, fused):
    """Bayesian compression's weight posterior and prior depend on the group scales drawn
    before them (``q(w | z)``, ``N(0, z^2)``): the ELBO draws the sites in the model's order,
    with the trace-based path's value and gradients on the same random numbers, while the
    K-particle bounds, which draw all sites at once, keep to traces."""
    priors = {"bc-gnj": GroupNormalJeffreysPrior, "bc-ghs": GroupHorseshoePrior}
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    model = BayesianNeuralNetwork(MLP(5, [6], 3), priors[prior](), CategoricalLikelihood(100))
    guide = BayesianCompressionGuide(model)
    guide.fused = fused  # the reference weight posterior is the one CUDA devices take
    guide(x, y)
    assert isinstance(guide, ConditionalDirectGuide)
    params = list(guide.parameters())
    handler = {None: ExitStack, "local": local_reparameterization, "flipout": flipout}[estimator]
    results = []
    for fuse, runs in ((True, 0), (False, 1)):
        pyro.set_rng_seed(3)
        loss = []
        with handler():
            assert guide_runs(guide, lambda: loss.append(ClosedFormKL_ELBO(fuse=fuse).differentiable_loss(model, guide, x, y))) == runs
        results.append((loss[0], torch.autograd.grad(loss[0], params)))
    (direct, g_direct), (traced, g_traced) = results
    torch.testing.assert_close(direct, traced)
    for a, b in zip(g_direct, g_traced):
        torch.testing.assert_close(a, b)
    assert guide_runs(guide, lambda: ImportanceWeighted_ELBO(2).loss(model, guide, x, y)) == 2


@pytest.mark.parametrize("objective, method", [("elbo", "bc-gnj"), ("elbo", "mean-field"), ("particles", "mean-field")])
def test_point_estimates_come_from_the_param_store_on_both_paths(objective, method):
    """A point estimate (here the biases) that Pyro's param store holds under the model's name,
    put there by another model of the same name, is what the traced path uses; the direct
    paths use it too."""
    pyro.clear_param_store()
    x, y = torch.randn(16, 5), torch.randint(0, 3, (16,))
    made = {
        "bc-gnj": (lambda: GroupNormalJeffreysPrior(), BayesianCompressionGuide),
        "mean-field": (lambda: NormalPrior(1.0, hide_parameters=["bias"]), MeanFieldNormalGuide),
    }[method]
    models = [BayesianNeuralNetwork(MLP(5, [6], 3), made[0](), CategoricalLikelihood(100)) for _ in range(2)]
    guides = [made[1](m) for m in models]
    for m, g in zip(models, guides):
        g(x, y)
    model, guide = models[1], guides[1]
    own = dict(model.net.named_parameters())
    assert model.point_estimates() and all(v is not own[name] for name, v in model.point_estimates().items())
    if objective == "particles":
        # the K-particle likelihood of the importance-weighted objectives, against the model's
        # observed sites traced at each particle's values
        values = {name: guide.posterior(name).sample((2,)) for name, _ in model.latent_sites(x)}
        direct = model.log_likelihood_particles(values, x, y)
        for k in range(2):
            trace = pyro.poutine.trace(pyro.poutine.condition(model, data={n: v[k] for n, v in values.items()})).get_trace(x, y)
            traced = trace.log_prob_sum(site_filter=lambda name, site: name == model.likelihood.name)
            assert float(direct[k]) == pytest.approx(float(traced), rel=1e-6)
        return
    losses = []
    for traced in (False, True):
        pyro.set_rng_seed(5)
        run = lambda: losses.append(ClosedFormKL_ELBO().loss(model, guide, x, y))  # noqa: E731
        assert guide_runs(guide, _under(pyro.poutine.block, run) if traced else run) == traced
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
