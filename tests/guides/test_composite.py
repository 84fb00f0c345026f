"""Guides that compose (issue 42): a zoo guide that cannot cover a site says so under its own
name and shows the one-line composition; :class:`~pyrozoo.guides.CompositeGuide` puts each
site under the first guide that covers it and the rest under mean-field; hiding a site instead
is warned about, naming it. Cases: every guide of ``pyrozoo.guides.__all__`` whose declarations
(``families``, ``global_sites_only``) restrict what it covers and that takes a plain model."""

import math
import warnings

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.poutine.util import site_is_subsample

import pyrozoo.guides as guides
from pyrozoo.guides import CompositeGuide, MeanFieldNormalGuide, SitewiseGuide
from pyrozoo.inference import PriorDrawnSiteWarning, evaluate, fit
from tests.api_cases import exported_classes

N, P, NOISE = 200, 4, 0.35


def _data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, P, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + NOISE * torch.randn(N, generator=g)
    return x, y


def model(x, y=None):
    """Linear regression with an unknown noise scale: a positive global site and real weights."""
    w = pyro.sample("w", dist.Normal(torch.zeros(P), 1.0).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(x @ w, sigma), obs=y)


def _restricted():
    out = []
    for cls in exported_classes(guides, SitewiseGuide):
        if cls.families is None and not cls.global_sites_only:
            continue
        try:
            cls(model)
        except (TypeError, ValueError):  # made for one kind of prior (Bayesian compression's group scales)
            continue
        out.append(cls)
    return out


RESTRICTED = _restricted()


def test_the_cases_are_not_empty():
    assert guides.SparseVariationalDropoutGuide in RESTRICTED


@pytest.mark.parametrize("cls", RESTRICTED, ids=lambda c: c.__name__)
def test_a_site_the_guide_cannot_cover_is_refused_under_its_own_name_with_the_composition(cls):
    x, y = _data()
    probe = {k: s for k, s in pyro.poutine.trace(model).get_trace(x, y).iter_stochastic_nodes() if not site_is_subsample(s)}
    refused = [name for name, site in probe.items() if cls(model).refusal(name, site) is not None]
    if not refused:
        pytest.skip(f"{cls.__name__} covers every site of this model")
    guide = cls(model)
    with pytest.raises(ValueError, match=f"{cls.__name__} cannot cover site .*CompositeGuide\\(model, {cls.__name__}"):
        guide(x, y)
    assert guide.prototype_trace is None  # refused before any parameter exists


@pytest.mark.parametrize("cls", RESTRICTED, ids=lambda c: c.__name__)
def test_the_composite_guide_covers_every_site_and_fits_the_noise_scale(cls):
    """The noise scale's posterior median is within four posterior sds (sigma / sqrt(2N)) of
    the least-squares residual scale; no site is left to its prior."""
    x, y = _data()
    pyro.clear_param_store()
    guide = CompositeGuide(model, cls)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PriorDrawnSiteWarning)
        history = fit(model, guide, (x, y), epochs=1500, lr=0.02, batch_size=None, progress=False, seed=0)
    assert history.attrs["status"] == "ok"
    assert set(guide.assignment) == {"w", "sigma"}
    assert guide.assignment["sigma"] in (cls.__name__, "MeanFieldNormalGuide")
    w_ls = torch.linalg.lstsq(x, y.unsqueeze(-1)).solution.squeeze(-1)
    residual = float(((y - x @ w_ls) ** 2).mean().sqrt())
    sigma = float(guide.median()["sigma"])
    assert abs(sigma - residual) < 4 * residual / math.sqrt(2 * N), (sigma, residual)
    assert evaluate(model, guide, x, y, num_samples=50)["rmse"] < 1.5 * NOISE


def test_each_site_goes_to_the_first_guide_that_covers_it():
    x, y = _data()
    guide = CompositeGuide(model, guides.DeltaGuide, guides.SparseVariationalDropoutGuide)
    guide(x, y)
    assert guide.assignment == {"w": "DeltaGuide", "sigma": "DeltaGuide"} and len(guide) == 1
    guide = CompositeGuide(model, guides.SparseVariationalDropoutGuide, rest=guides.DeltaGuide)
    guide(x, y)
    assert guide.assignment == {"w": "SparseVariationalDropoutGuide", "sigma": "DeltaGuide"} and len(guide) == 2


def test_a_site_hidden_to_get_past_a_refusal_is_warned_about_by_name():
    x, y = _data()
    pyro.clear_param_store()
    with pytest.warns(PriorDrawnSiteWarning, match="'sigma' is in the model but not in the guide.*CompositeGuide"):
        fit(model, guides.SparseVariationalDropoutGuide(model, hide=["sigma"]), (x, y), epochs=2, batch_size=None, progress=False)


def test_a_non_zoo_guide_among_the_parts_is_refused_naming_rest():
    from pyro.infer.autoguide import AutoNormal

    x, y = _data()
    with pytest.raises(TypeError, match="rest="):
        CompositeGuide(model, AutoNormal)(x, y)
    guide = CompositeGuide(model, guides.SparseVariationalDropoutGuide, rest=AutoNormal)
    guide(x, y)
    assert guide.assignment["sigma"] == "AutoNormal"
    assert set(guide.quantiles([0.5])) == {"w", "sigma"} and set(MeanFieldNormalGuide(model).quantiles([0.5], x, y)) == {"w", "sigma"}
