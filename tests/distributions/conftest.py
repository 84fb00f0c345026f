"""A registry of pyrozoo distributions for the generic tests in ``test_distributions.py``.

Each family contributes one :class:`DistributionFixture`: how to build it, a few parameter
sets (``examples``), parameter sets that ``validate_args=True`` must reject (``invalid``) and,
where one exists, an independent reference density (scipy / mpmath, never the code under
test). The generic tests take the arguments ``dist_example`` (every registered (family,
example) pair) and ``dist_invalid_case``, parametrized at collection time by
``pytest_generate_tests`` below, so adding a distribution is one
``register(DistributionFixture(...))`` call: in this file, or in a test module that does
``from tests.distributions.conftest import DistributionFixture, register``.

Fields a new family may need:

* ``reference_log_prob(params, x)`` -- numpy parameters (broadcast to the batch shape) and
  values of shape ``(..., *batch_shape, *event_shape)``; returns ``(..., *batch_shape)``.
  Omit it when no independent reference exists; the density tests then skip.
* ``integrable`` -- whether ``exp(log_prob)`` of a univariate example should be integrated
  numerically over its support (real line or positive half-line) and compared with 1.
  Families with ``event_shape != ()`` (vMF, ...) are skipped by that test; give them a
  ``reference_log_prob`` instead.
* ``make(params, device, dtype, validate_args)`` -- how to build the distribution when its
  constructor does not take every entry of ``params`` as a tensor (default: each value
  becomes a tensor of ``dtype`` on ``device`` and is passed by name). Parameters the tests
  read back (``getattr(d, name)``) should be attributes of the distribution.
* ``batch_shape(params)`` -- the expected batch shape, when it is not the broadcast of the
  parameters' shapes (e.g. a parameter-free improper prior built with a ``batch_shape``).
* ``improper`` -- a density that does not normalise (LogUniformImproper): the sampling,
  moment, entropy and normalisation tests skip it.
* ``sampleable`` -- False when ``sample`` is not implemented.
* ``moment_samples`` -- number of draws for the moment / goodness-of-fit / entropy tests.
* ``test_values(params)`` -- extra points, shape ``(k, *batch_shape, *event_shape)``, at
  which ``log_prob`` is compared with the reference (e.g. far tails).
"""

import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import torch
from scipy import stats
from scipy.special import logsumexp

from pyrozoo.distributions import LogScaleNormal, ScaleMixtureNormal


@dataclass
class DistributionFixture:
    name: str
    dist_class: type
    examples: List[Dict[str, object]]
    invalid: List[Dict[str, object]] = field(default_factory=list)
    reference_log_prob: Optional[Callable[[Dict[str, np.ndarray], np.ndarray], np.ndarray]] = None
    test_values: Optional[Callable[[Dict[str, np.ndarray]], np.ndarray]] = None
    integrable: bool = True
    improper: bool = False
    sampleable: bool = True
    moment_samples: int = 20000
    make: Optional[Callable[..., torch.distributions.Distribution]] = None
    batch_shape: Optional[Callable[[Dict[str, object]], tuple]] = None

    def build(self, params: Dict[str, object], device="cpu", dtype=torch.float64, validate_args=None):
        """The distribution with every parameter a tensor on ``device`` / of ``dtype``."""
        if self.make is not None:
            return self.make(params, device, dtype, validate_args)
        tensors = {k: torch.as_tensor(v, dtype=dtype, device=device) for k, v in params.items()}
        return self.dist_class(**tensors, validate_args=validate_args)

    def expected_batch_shape(self, params: Dict[str, object]) -> torch.Size:
        if self.batch_shape is not None:
            return torch.Size(self.batch_shape(params))
        return torch.Size(np.broadcast_shapes(*[np.shape(v) for v in params.values()]))


@dataclass
class Example:
    """One parameter set of one registered family (what ``dist_example`` receives)."""

    fixture: DistributionFixture
    index: int

    @property
    def params(self) -> Dict[str, object]:
        return self.fixture.examples[self.index]

    def build(self, device="cpu", dtype=torch.float64, validate_args=None):
        return self.fixture.build(self.params, device, dtype, validate_args)

    def numpy_params(self, d) -> Dict[str, np.ndarray]:
        """The parameters as ``d`` holds them (after any dtype rounding), as float64 arrays
        broadcast to its batch shape; non-tensor entries are passed through unchanged."""
        out = {}
        for k, v in self.params.items():
            held = getattr(d, k, None)
            if torch.is_tensor(held):
                out[k] = np.broadcast_to(held.detach().double().cpu().numpy(), tuple(d.batch_shape))
            else:
                out[k] = v
        return out

    def __str__(self):
        return f"{self.fixture.name}-{self.index}"


DISTRIBUTIONS: List[DistributionFixture] = []


def register(fixture: DistributionFixture) -> DistributionFixture:
    if any(f.name == fixture.name for f in DISTRIBUTIONS):
        raise ValueError(f"distribution fixture {fixture.name!r} registered twice")
    DISTRIBUTIONS.append(fixture)
    return fixture


# -- ScaleMixtureNormal (Blundell et al. 2015, eq. 7) -------------------------------------


def _scale_mixture_reference(p, x):
    # log(pi N(x|0,s1^2) + (1-pi) N(x|0,s2^2)) from scipy's normal log-densities
    with np.errstate(divide="ignore"):
        terms = np.stack(
            [
                np.log(p["pi"]) + stats.norm.logpdf(x, 0.0, p["sigma1"]),
                np.log1p(-p["pi"]) + stats.norm.logpdf(x, 0.0, p["sigma2"]),
            ]
        )
    return logsumexp(terms, axis=0)


def _scale_mixture_tails(p):
    # far beyond the narrow component, where its density underflows in float64
    s1 = np.asarray(p["sigma1"])
    return np.stack([np.zeros_like(s1), 3 * s1, -30 * s1, 1e-3 * s1])


register(
    DistributionFixture(
        name="ScaleMixtureNormal",
        dist_class=ScaleMixtureNormal,
        examples=[
            {"pi": 0.5, "sigma1": 1.0, "sigma2": math.exp(-6)},
            {"pi": [0.25, 0.75, 0.5], "sigma1": [1.0, 2.0, 0.5], "sigma2": [0.1, 0.3, 0.05]},
            {"pi": [[0.1], [0.9]], "sigma1": 1.5, "sigma2": [0.2, 0.4]},
            {"pi": 0.0, "sigma1": 1.0, "sigma2": 0.3},  # degenerate weights: a single Normal
            {"pi": 1.0, "sigma1": 1.0, "sigma2": 0.3},
        ],
        invalid=[
            {"pi": 1.5, "sigma1": 1.0, "sigma2": 0.1},
            {"pi": -0.1, "sigma1": 1.0, "sigma2": 0.1},
            {"pi": 0.5, "sigma1": -1.0, "sigma2": 0.1},
            {"pi": 0.5, "sigma1": 1.0, "sigma2": 0.0},
            {"pi": float("nan"), "sigma1": 1.0, "sigma2": 0.1},
        ],
        reference_log_prob=_scale_mixture_reference,
        test_values=_scale_mixture_tails,
    )
)


# -- LogScaleNormal: Normal(loc, exp(log_scale)) ------------------------------------------


def _log_scale_normal_reference(p, x):
    return stats.norm.logpdf(x, p["loc"], np.exp(p["log_scale"]))


register(
    DistributionFixture(
        name="LogScaleNormal",
        dist_class=LogScaleNormal,
        examples=[
            {"loc": 0.0, "log_scale": 0.0},
            {"loc": [1.5, -2.0], "log_scale": [-1.0, 0.7]},
            {"loc": [[0.0, 1.0, 2.0]], "log_scale": [[-2.0], [0.5]]},
            {"loc": 3.0, "log_scale": -4.0},
        ],
        invalid=[
            {"loc": float("nan"), "log_scale": 0.0},
            {"loc": 0.0, "log_scale": float("nan")},
        ],
        reference_log_prob=_log_scale_normal_reference,
    )
)


# -- parametrization -----------------------------------------------------------------------
# Done at collection time (not at import), so families registered anywhere in this file or by
# a test module that imports ``register`` from here are all included.


def registered_examples() -> List[Example]:
    return [Example(f, i) for f in DISTRIBUTIONS for i in range(len(f.examples))]


def registered_invalid_cases():
    return [(f, params) for f in DISTRIBUTIONS for params in f.invalid]


def pytest_generate_tests(metafunc):
    if "dist_example" in metafunc.fixturenames:
        metafunc.parametrize("dist_example", registered_examples(), ids=str)
    if "dist_invalid_case" in metafunc.fixturenames:
        cases = registered_invalid_cases()
        metafunc.parametrize("dist_invalid_case", cases, ids=[f"{f.name}-{i}" for i, (f, _) in enumerate(cases)])
