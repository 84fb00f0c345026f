"""What every zoo objective and sampler checks on a model's trace (issue 42): an enumerated
discrete site is refused naming ``TraceEnum_ELBO`` (never drawn from its prior), a target of
another shape than its plates is refused as ``Trace_ELBO`` refuses it, and a latent site the
guide leaves to the prior is warned about once, by name. Cases: every ``ELBO`` and every
sampler exported in ``pyrozoo.inference.__all__``."""

import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import TraceEnum_ELBO, config_enumerate
from pyro.infer.elbo import ELBO

import pyrozoo.inference as inference
from pyrozoo.guides import DeltaGuide, MeanFieldNormalGuide
from pyrozoo.inference import PriorDrawnSiteWarning, StochasticGradientMCMC, evaluate, fit
from tests.api_cases import exported_classes

OBJECTIVES = exported_classes(inference, ELBO)
SAMPLERS = exported_classes(inference, StochasticGradientMCMC, exclude=(StochasticGradientMCMC,))
LOCS, SCALE, N = (-2.0, 3.0), 0.5, 200


def test_the_cases_are_not_empty():
    assert inference.ClosedFormKL_ELBO in OBJECTIVES and inference.ImportanceWeighted_ELBO in OBJECTIVES and inference.SGLD in SAMPLERS


def _mixture_data():
    g = torch.Generator().manual_seed(0)
    z = torch.bernoulli(torch.full((N,), 0.4), generator=g).long()
    y = torch.tensor(LOCS)[z] + SCALE * torch.randn(N, generator=g)
    return torch.zeros(N, 1), y


@config_enumerate
def mixture(x, y=None):
    """Two Gaussian components with equal weights; the assignment is summed out."""
    locs = pyro.sample("locs", dist.Normal(torch.tensor([-1.0, 1.0]), 5.0).to_event(1))
    with pyro.plate("data", len(x)):
        a = pyro.sample("a", dist.Categorical(torch.tensor([0.5, 0.5])))
        return pyro.sample("y", dist.Normal(locs[a], SCALE), obs=y)


def regression(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)


def with_noise_scale(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    s = pyro.sample("s", dist.HalfNormal(1.0))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(x @ w, s), obs=y)


def _regression_data(n=60):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 2, generator=g)
    return x, x @ torch.tensor([0.5, -1.0]) + torch.randn(n, generator=g)


@pytest.mark.parametrize("objective", OBJECTIVES, ids=lambda c: c.__name__)
def test_every_objective_refuses_an_enumerated_site_naming_trace_enum(objective):
    pyro.clear_param_store()
    x, y = _mixture_data()
    with pytest.raises(NotImplementedError, match="enumerated discrete site 'a'.*TraceEnum_ELBO"):
        fit(mixture, MeanFieldNormalGuide(mixture, hide=["a"]), (x, y), objective=objective(), epochs=1, batch_size=None, progress=False)


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda c: c.__name__)
def test_every_sampler_refuses_an_enumerated_site_naming_trace_enum(sampler):
    x, y = _mixture_data()
    with pytest.raises(NotImplementedError, match="enumerated discrete site 'a'.*TraceEnum_ELBO"):
        sampler(mixture, lr=1e-4).run((x, y), num_steps=1, batch_size=None, progress=False)


def test_trace_enum_with_a_zoo_guide_recovers_the_mixture_and_evaluate_scores_its_marginal():
    """Pyro's TraceEnum_ELBO with a zoo guide over the continuous sites finds both locations
    (within four posterior sds, SCALE / sqrt(n_k)), and evaluate's test log-likelihood is the
    mixture's own marginal density at the fitted locations, exactly."""
    pyro.clear_param_store()
    x, y = _mixture_data()
    guide = DeltaGuide(mixture, hide=["a"])
    history = fit(mixture, guide, (x, y), objective=TraceEnum_ELBO(max_plate_nesting=1), epochs=300, lr=0.05, batch_size=None, progress=False, seed=0)
    assert history.attrs["status"] == "ok"
    locs = guide.median()["locs"]
    for k, truth in enumerate(LOCS):
        n_k = int(((y - truth).abs() < 1.5).sum())
        assert abs(float(locs[k]) - truth) < 4 * SCALE / math.sqrt(n_k) + 0.05, locs
    marginal = torch.logsumexp(torch.stack([math.log(0.5) + dist.Normal(loc, SCALE).log_prob(y) for loc in locs]), 0).mean()
    assert evaluate(mixture, guide, x, y, num_samples=2)["test_ll"] == pytest.approx(float(marginal), abs=1e-5)


def test_an_enumerated_site_shared_by_all_examples_cannot_be_scored_per_example():
    @config_enumerate
    def switch(x, y=None):
        k = pyro.sample("k", dist.Bernoulli(0.5))
        with pyro.plate("data", len(x)):
            return pyro.sample("y", dist.Normal(2.0 * k, 1.0), obs=y)

    x, y = _mixture_data()
    with pytest.raises(ValueError, match="enumerates \\['k'\\] outside its data plate"):
        evaluate(switch, lambda x, y=None: {}, x, y, num_samples=2, obs="y")


@pytest.mark.parametrize("objective", OBJECTIVES, ids=lambda c: c.__name__)
def test_every_objective_refuses_a_target_of_another_shape_than_its_plate(objective):
    """A (N, 1) target against an (N,) mean would broadcast to (N, N)."""
    pyro.clear_param_store()
    x, y = _regression_data()
    with pytest.raises(ValueError, match="invalid log_prob shape"):
        fit(regression, MeanFieldNormalGuide(regression), (x, y.unsqueeze(-1)), objective=objective(), epochs=1, batch_size=None, progress=False)


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda c: c.__name__)
def test_every_sampler_refuses_a_target_of_another_shape_than_its_plate(sampler):
    x, y = _regression_data()
    with pytest.raises(ValueError, match="invalid log_prob shape"):
        sampler(regression, lr=1e-4).run((x, y.unsqueeze(-1)), num_steps=1, batch_size=None, progress=False)


@pytest.mark.parametrize("objective", OBJECTIVES, ids=lambda c: c.__name__)
def test_every_objective_warns_once_about_a_site_left_to_its_prior(objective):
    pyro.clear_param_store()
    x, y = _regression_data()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit(with_noise_scale, MeanFieldNormalGuide(with_noise_scale, hide=["s"]), (x, y), objective=objective(), epochs=3, batch_size=None, progress=False)
    mine = [w for w in record if w.category is PriorDrawnSiteWarning]
    assert len(mine) == 1 and "'s' is in the model but not in the guide" in str(mine[0].message)
