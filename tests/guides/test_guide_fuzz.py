"""Property-based tests (hypothesis) of every guide constructor exported by ``pyrozoo.guides``.

Each guide class with options of its own has a :class:`GuideCase` below: a small model it is
meant for, a strategy of valid constructor arguments (the ends of each range included) and
invalid values per argument; an exported guide without one is fuzzed on the base guide's
arguments (:data:`DEFAULT_CASE`). For every exported guide:

* **valid arguments** construct the guide, and one forward pass on the small model gives
  finite values at every site, a finite ``log q`` of the guide's trace and a finite ELBO;
* **an invalid argument** (zero, negative, NaN or infinite scales, reversed or malformed
  bounds, wrong types, a bare string for a list of site names, ...) is a ``ValueError`` or
  ``TypeError`` that names it, at construction or -- for checks that need the model's sites
  -- at the first call.

Deterministic and bounded: ``derandomize=True``, no example database, under 10 s on one core
(``PYROZOO_FUZZ_SCALE`` multiplies the number of examples, as in
``tests/distributions/test_fuzz.py``).
"""

import math
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import pyro
import pyro.distributions as dist
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyro import poutine
from pyro.infer.autoguide.initialization import InitMessenger, init_to_median, init_to_sample
from torch import nn

import pyrozoo.guides as guides
from pyrozoo.guides import (
    BayesianCompressionGuide,
    DeltaGuide,
    MeanFieldNormalGuide,
    RadialDirectionalGuide,
    SemiImplicitGuide,
    SitewiseGuide,
    SparseVariationalDropoutGuide,
    VariationalDropoutGuide,
    init_to_network,
)
from pyrozoo.guides.variational_dropout import PARAMETERIZATIONS
from pyrozoo.inference import ClosedFormKL_ELBO, DSIVI_ELBO
from pyrozoo.models import (
    MLP,
    BayesianNeuralNetwork,
    CategoricalLikelihood,
    GaussianLikelihood,
    GroupHorseshoePrior,
    GroupNormalJeffreysPrior,
    LogUniformPrior,
    NormalPrior,
    RadialDirectionalPrior,
)

# hidden sites are sampled from the prior by the model, which Pyro's ELBO mentions
pytestmark = pytest.mark.filterwarnings("ignore:Found vars in model but not guide")

_SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
_SCALE = float(os.environ.get("PYROZOO_FUZZ_SCALE", "1"))
VALID = settings(max_examples=int(12 * _SCALE), **_SETTINGS)
INVALID = settings(max_examples=int(40 * _SCALE), **_SETTINGS)

_NAN, _INF = math.nan, math.inf


# -- small models ---------------------------------------------------------------------------------


def _regression(prior):
    torch.manual_seed(0)
    model = BayesianNeuralNetwork(MLP(3, [4], 1), prior, GaussianLikelihood(20, precision=dist.Gamma(2.0, 2.0)))
    g = torch.Generator().manual_seed(1)
    return model, (torch.randn(6, 3, generator=g), torch.randn(6, 1, generator=g))


def _classification(prior):
    torch.manual_seed(0)
    model = BayesianNeuralNetwork(MLP(3, [4], 2), prior, CategoricalLikelihood(dataset_size=20))
    g = torch.Generator().manual_seed(1)
    return model, (torch.randn(6, 3, generator=g), torch.randint(0, 2, (6,), generator=g))


def _model_sites(model, data) -> List[str]:
    # a log-uniform prior cannot be sampled: trace the model at its initial values
    with poutine.block():
        trace = poutine.trace(InitMessenger(init_to_network)(model)).get_trace(*data)
    return [n for n, s in trace.nodes.items() if s["type"] == "sample" and not s["is_observed"]]


# -- argument strategies ------------------------------------------------------------------------------


def _log_uniform(lo, hi):
    """Floats log-uniform in [lo, hi], both ends included."""
    return st.one_of(st.sampled_from([lo, hi]), st.floats(math.log(lo), math.log(hi)).map(math.exp))


INIT_LOC_FNS = st.sampled_from([init_to_network, init_to_median, init_to_sample])
SCALE = _log_uniform(1e-12, 1.0)


@st.composite
def _scales(draw):
    """``init_scale`` and ``max_scale`` (None, or at least init_scale)."""
    init_scale = draw(SCALE)
    max_scale = draw(st.one_of(st.none(), st.sampled_from([init_scale]), _log_uniform(init_scale, 10.0)))
    return {"init_scale": init_scale, "max_scale": max_scale}


def _hide(sites):
    return st.lists(st.sampled_from(sites), unique=True, max_size=2).map(tuple)


@st.composite
def _mean_field_args(draw, sites):
    return {**draw(_scales()), "init_loc_fn": draw(INIT_LOC_FNS), "hide": draw(_hide(sites))}


@st.composite
def _delta_args(draw, sites):
    return {"init_loc_fn": draw(INIT_LOC_FNS), "hide": draw(_hide(sites))}


@st.composite
def _semi_implicit_args(draw, sites):
    return {
        **draw(_scales()),
        "noise_dim": draw(st.integers(1, 8)),
        "hidden": tuple(draw(st.lists(st.integers(1, 8), max_size=2))),
        "grouping": draw(st.sampled_from(["site", "row"])),
        "num_mixing": draw(st.integers(0, 5)),
        "mixing_scale": draw(_log_uniform(1e-8, 1.0)),
        "activation": draw(st.sampled_from([nn.Tanh, nn.ReLU])),
        "sites": draw(st.one_of(st.none(), st.lists(st.sampled_from(sites), unique=True, max_size=3))),
        "hide": draw(_hide(sites)),
    }


@st.composite
def _bounds(draw):
    low = draw(st.floats(-20.0, 5.0))
    return low, low + draw(st.floats(0.5, 20.0))


@st.composite
def _variational_dropout_args(draw, sites):
    parameterization = draw(st.sampled_from(PARAMETERIZATIONS))
    low, high = draw(_bounds())
    return {
        "parameterization": parameterization,
        "init_log_sigma2": draw(st.floats(-30.0, 5.0)),
        "init_log_alpha": draw(st.floats(low, high)),
        "log_alpha_bounds": (low, high),
        "threshold": draw(st.floats(low, high, exclude_min=True, exclude_max=True)),
        "train_clip": parameterization != "zero-mean" and draw(st.booleans()),
    }


@st.composite
def _sparse_variational_dropout_args(draw, sites):
    low, high = draw(_bounds())
    return {
        "init_log_sigma2": draw(st.floats(-30.0, 5.0)),
        "log_alpha_bounds": (low, high),
        "threshold": draw(st.floats(low, high, exclude_min=True, exclude_max=True)),
        "train_clip": draw(st.booleans()),
    }


@st.composite
def _bayesian_compression_args(draw, sites):
    init_log_sigma2 = draw(st.floats(-20.0, 2.0))
    # a clip must contain the initial log alpha of the group scales (z0 = 1): init_log_sigma2
    bounds = draw(st.one_of(st.none(), st.tuples(st.floats(0.1, 10.0), st.floats(0.1, 10.0)).map(lambda ab: (init_log_sigma2 - ab[0], init_log_sigma2 + ab[1]))))
    return {
        "init_log_sigma2": init_log_sigma2,
        "init_log_scale": draw(st.floats(-10.0, 1.0)),
        "log_alpha_bounds": bounds,
    }


@st.composite
def _radial_directional_args(draw, sites):
    return {
        **draw(_scales()),
        "init_direction_epsilon": draw(st.one_of(st.sampled_from([1e-6, 1.0 - 1e-6]), st.floats(1e-6, 1.0 - 1e-6))),
        "gradient_correction": draw(st.booleans()),
    }


# -- invalid values per argument ----------------------------------------------------------------------

_NOT_CALLABLE = [None, 3, "init_to_median"]
_BAD_SCALE = [0.0, -1e-3, -1.0, _NAN, _INF, -_INF, "0.1", None, True, torch.tensor(0.1)]
_BAD_FINITE = [_NAN, _INF, -_INF, "1.0", None, True]
_BAD_BOUNDS = [(3.0, -3.0), (1.0, 1.0), (0.0, _NAN), (-_INF, 8.0), (1.0,), (1.0, 2.0, 3.0), 5.0, "ab", None]
_BAD_BOOL = ["False", 0.5, None, "yes"]
_BAD_HIDE = ["0.weight", 3, [1, 2]]
_COMMON = {"model": [None, 3, "model"], "init_loc_fn": _NOT_CALLABLE, "create_plates": [3, "plates"]}


@dataclass
class GuideCase:
    make_model: Callable
    valid: Callable  # sites -> strategy of keyword arguments
    invalid: Dict[str, list]
    objective: Callable = ClosedFormKL_ELBO
    runs: bool = True  # False: an abstract base class (forward raises NotImplementedError)
    kwargs: Dict[str, object] = field(default_factory=dict)  # fixed arguments of every example


def _regression_normal():
    return _regression(NormalPrior(1.0))


#: the guides whose constructors take more than the base guide's arguments, each with the
#: arguments to fuzz
EXPLICIT_CASES = {
    SitewiseGuide: GuideCase(_regression_normal, _delta_args, {**_COMMON, "hide": _BAD_HIDE}, runs=False),
    DeltaGuide: GuideCase(_regression_normal, _delta_args, {**_COMMON, "hide": _BAD_HIDE}),
    MeanFieldNormalGuide: GuideCase(
        _regression_normal,
        _mean_field_args,
        {**_COMMON, "hide": _BAD_HIDE, "init_scale": _BAD_SCALE, "max_scale": [0.0, -1.0, _NAN, _INF, "1", True]},
    ),
    SemiImplicitGuide: GuideCase(
        _regression_normal,
        _semi_implicit_args,
        {
            **_COMMON,
            "init_scale": _BAD_SCALE,
            "max_scale": [0.0, -1.0, _NAN, _INF, "1"],
            "noise_dim": [0, -1, 2.0, True, None],
            "hidden": [5, "32", (0,), (4, -1), (2.5,)],
            "grouping": ["layer", None, 1],
            "num_mixing": [-1, 1.5, True, None],
            "mixing_scale": _BAD_SCALE,
            "activation": [None, 3],
            "sites": ["0.weight", [1]],
            "hide": _BAD_HIDE,
        },
        objective=lambda: DSIVI_ELBO(num_particles=1),
    ),
    VariationalDropoutGuide: GuideCase(
        lambda: _classification(LogUniformPrior()),
        _variational_dropout_args,
        {
            **_COMMON,
            "parameterization": ["multiplicative", None, 3],
            "init_log_sigma2": _BAD_FINITE,
            "init_log_alpha": _BAD_FINITE,
            "log_alpha_bounds": _BAD_BOUNDS,
            "threshold": _BAD_FINITE,
            "train_clip": _BAD_BOOL,
            "hide": _BAD_HIDE,
        },
    ),
    SparseVariationalDropoutGuide: GuideCase(
        lambda: _classification(LogUniformPrior()),
        _sparse_variational_dropout_args,
        {
            **_COMMON,
            "init_log_sigma2": _BAD_FINITE,
            "log_alpha_bounds": _BAD_BOUNDS,
            "threshold": _BAD_FINITE,
            "train_clip": _BAD_BOOL,
            "parameterization": ["layer"],
        },
    ),
    BayesianCompressionGuide: GuideCase(
        lambda: _classification(GroupNormalJeffreysPrior()),
        _bayesian_compression_args,
        {
            **_COMMON,
            "model": [None, 3, _classification(LogUniformPrior())[0]],
            "init_log_sigma2": _BAD_FINITE,
            "init_log_scale": _BAD_FINITE,
            # None is valid here (no clip); (20, 30) misses the initial log alpha (an error at the first call)
            "log_alpha_bounds": [b for b in _BAD_BOUNDS if b is not None] + [(20.0, 30.0)],
        },
    ),
    RadialDirectionalGuide: GuideCase(
        lambda: _regression(RadialDirectionalPrior()),
        _radial_directional_args,
        {
            **_COMMON,
            "init_scale": _BAD_SCALE,
            "max_scale": [0.0, -1.0, _NAN, _INF],
            "init_direction_epsilon": [0.0, 1.0, -0.5, 1.5, _NAN, "0.1", None],
            "gradient_correction": _BAD_BOOL,
            "hide": _BAD_HIDE,
        },
    ),
}

@st.composite
def _base_args(draw, sites):
    return {"init_loc_fn": draw(INIT_LOC_FNS)}


#: the case of a guide without one of its own: the base guide's arguments on a regression
#: under a Normal prior (a new guide is fuzzed from its export on; its own options need a case)
DEFAULT_CASE = GuideCase(_regression_normal, _base_args, dict(_COMMON))

#: every guide ``pyrozoo.guides`` exports, with its case (derived from ``__all__``)
CASES = {
    cls: EXPLICIT_CASES.get(cls, DEFAULT_CASE)
    for cls in (getattr(guides, n) for n in guides.__all__)
    if isinstance(cls, type) and issubclass(cls, SitewiseGuide)
}

_HORSESHOE = GuideCase(lambda: _classification(GroupHorseshoePrior(tau0=0.1)), _bayesian_compression_args, {})


def _ids(cases):
    return [c.__name__ for c in cases]


def test_the_explicit_cases_are_of_exported_guides():
    assert set(EXPLICIT_CASES) <= set(CASES) and len(CASES) >= len(EXPLICIT_CASES)


def _all_finite(values) -> bool:
    return all(bool(torch.isfinite(v).all()) for v in values)


def _check_forward(guide_class, case, kwargs):
    model, data = case.make_model()
    guide = guide_class(model, **{**case.kwargs, **kwargs})
    trace = poutine.trace(guide).get_trace(*data)
    sites = [s for s in trace.nodes.values() if s["type"] == "sample"]
    assert sites, "the guide emitted no sample site"
    assert _all_finite(s["value"] for s in sites), {s["name"]: s["value"] for s in sites}
    assert math.isfinite(float(trace.log_prob_sum().detach())), "log q of the guide's own draws"
    loss = case.objective().loss(model, guide, *data)
    assert math.isfinite(loss), f"ELBO {loss}"


def _case_with_valid_arguments(guide_class, data, label):
    """A fresh param store, ``guide_class``'s case, its model and batch, and drawn valid arguments."""
    pyro.clear_param_store()
    case = CASES[guide_class]
    model, batch = case.make_model()
    return case, model, batch, data.draw(case.valid(_model_sites(model, batch)), label=label)


@pytest.mark.parametrize("guide_class", list(CASES), ids=_ids(CASES))
@VALID
@given(data=st.data())
def test_valid_arguments_construct_and_run(guide_class, data):
    case, model, batch, kwargs = _case_with_valid_arguments(guide_class, data, "arguments")
    if not case.runs:
        guide = guide_class(model, **kwargs)
        with pytest.raises(NotImplementedError):
            guide(*batch)
        return
    _check_forward(guide_class, case, kwargs)


@VALID
@given(data=st.data())
def test_bayesian_compression_with_horseshoe_scales(data):
    pyro.clear_param_store()
    model, batch = _HORSESHOE.make_model()
    _check_forward(BayesianCompressionGuide, _HORSESHOE, data.draw(_bayesian_compression_args([]), label="arguments"))


def _names(err: Exception, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", str(err)) is not None


@pytest.mark.parametrize("guide_class", list(CASES), ids=_ids(CASES))
@INVALID
@given(data=st.data())
def test_invalid_arguments_are_refused_naming_them(guide_class, data):
    case, model, batch, kwargs = _case_with_valid_arguments(guide_class, data, "valid arguments")
    name = data.draw(st.sampled_from(sorted(case.invalid)), label="argument")
    bad = data.draw(st.sampled_from(case.invalid[name]), label="invalid value")
    if name == "model":
        model = bad
    else:
        kwargs[name] = bad
    with pytest.raises((ValueError, TypeError)) as info:
        guide = guide_class(model, **kwargs)
        guide(*batch)  # checks that need the model's sites run on the first call
    assert _names(info.value, name), f"{info.value!r} does not name {name}"


@pytest.mark.parametrize(
    "guide_class, kwargs, names",
    [
        (MeanFieldNormalGuide, {"init_scale": 0.5, "max_scale": 0.1}, ("init_scale", "max_scale")),
        (RadialDirectionalGuide, {"init_scale": 0.5, "max_scale": 0.1}, ("init_scale", "max_scale")),
        (SemiImplicitGuide, {"init_scale": 0.5, "max_scale": 0.1}, ("init_scale", "max_scale")),
        (VariationalDropoutGuide, {"parameterization": "layer", "init_log_alpha": 12.0}, ("init_log_alpha",)),
        (VariationalDropoutGuide, {"threshold": 9.0}, ("threshold",)),
        (VariationalDropoutGuide, {"parameterization": "zero-mean", "train_clip": True}, ("train_clip",)),
    ],
)
def test_inconsistent_arguments_are_refused_naming_them(guide_class, kwargs, names):
    model = CASES[guide_class].make_model()[0]
    with pytest.raises(ValueError) as info:
        guide_class(model, **kwargs)
    assert all(_names(info.value, n) for n in names), info.value
