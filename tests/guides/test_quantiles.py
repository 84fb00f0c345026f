"""``quantiles()`` and ``median()`` on every zoo guide, as Pyro's AutoGuides have them: each
q-quantile has, elementwise, a fraction q of the guide's own posterior draws below it (within
the binomial error of the draws, plus the empirical quantiles' own error where a guide has no
inverse CDF), and the median is the 0.5-quantile. Cases: every guide class in
``pyrozoo.guides.__all__``, on the first model of :data:`MODELS` it covers (a plain model with
a real and a positive site; one with real sites only; a BNN with a group-scale prior)."""

import math

import pyro
import pyro.distributions as dist
import pytest
import torch

import pyrozoo.guides as guides
from pyrozoo.guides import SitewiseGuide
from tests.api_cases import exported_classes

QUANTILES = (0.05, 0.3, 0.5, 0.9)
DRAWS = 4000
#: the empirical quantiles' error (DKW, at level 1e-6) for a guide that has no inverse CDF
FALLBACK = math.sqrt(math.log(2 / 1e-6) / (2 * 1001))


def mixed(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))
    s = pyro.sample("s", dist.LogNormal(0.0, 0.5))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(x @ w, s), obs=y)


def real_only(x, y=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(3), 1.0).to_event(1))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(x @ w, 1.0), obs=y)


def group_scale_bnn(x=None, y=None):
    from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood
    from pyrozoo.models.compression_priors import GroupNormalJeffreysPrior

    return BayesianNeuralNetwork(MLP(3, [4], 1), GroupNormalJeffreysPrior(), GaussianLikelihood(dataset_size=10))


MODELS = (lambda: mixed, lambda: real_only, group_scale_bnn)


def _guide_classes():
    return exported_classes(guides, SitewiseGuide, exclude=(SitewiseGuide,))


def _set_up(cls):
    refusals = []
    for make in MODELS:
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        x = torch.randn(10, 3)
        model = make()
        y = x[:, 0] if model in (mixed, real_only) else x[:, :1]
        try:
            guide = cls(model)
            guide(x, y)
            break
        except (ValueError, TypeError, NotImplementedError) as refusal:  # a guide for another kind of prior
            refusals.append(str(refusal))
    else:
        raise AssertionError(f"{cls.__name__} covers none of the test models: {refusals}")
    with torch.no_grad():  # away from the initial values: scales of order one
        for p in guide.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return guide


@pytest.mark.parametrize("cls", _guide_classes(), ids=lambda c: c.__name__)
def test_each_quantile_has_its_fraction_of_the_posterior_below_it(cls):
    guide = _set_up(cls)
    qs = guide.quantiles(list(QUANTILES))
    assert set(qs) == set(guide.sites())
    for name, value in qs.items():
        fn = guide.posterior(name)
        assert value.shape == (len(QUANTILES),) + fn.batch_shape + fn.event_shape
        draws = fn.sample((DRAWS,))
        if bool((draws == draws[0]).all()):  # a point mass (DeltaGuide): every quantile is the point
            assert torch.equal(value, draws[0].expand_as(value))
            continue
        for q, quantile in zip(QUANTILES, value):
            below = (draws <= quantile).double().mean(0)
            tol = 5 * math.sqrt(q * (1 - q) / DRAWS) + FALLBACK
            assert ((below - q).abs() <= tol).all(), (name, q, below)


@pytest.mark.parametrize("cls", _guide_classes(), ids=lambda c: c.__name__)
def test_the_median_is_the_half_quantile(cls):
    guide = _set_up(cls)
    half = {k: v[0] for k, v in guide.quantiles([0.5]).items()}
    median = guide.median()
    for name in half:
        # a semi-implicit site's median and quantile are each from their own 1001 draws
        assert torch.allclose(median[name], half[name], atol=0.2 if cls is guides.SemiImplicitGuide else 1e-5), name


@pytest.mark.parametrize("bad", [[0.0], [1.0], [], [0.5, 1.2]])
def test_quantiles_outside_the_unit_interval_are_refused(bad):
    guide = _set_up(guides.MeanFieldNormalGuide)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        guide.quantiles(bad)
