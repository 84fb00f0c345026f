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

Every distribution class exported by :mod:`pyrozoo.distributions` must be registered, with a
``param_specs`` entry (a :class:`ParamSpec`) for each constructor argument: the property-based
tests in ``test_fuzz.py`` draw valid arguments from them (including the ends of each range)
and invalid ones derived from each domain, for every registered family. A family whose
generic tests would not apply may register ``examples=[]`` and be fuzzed only. Fields for that:

* ``param_specs`` -- ``{argument: ParamSpec(domain, low, high, ...)}``, see :class:`ParamSpec`.
* ``event_size`` -- ``(min, max)`` of the event size ``D`` for families with vector events.
* ``joint_valid(args)`` -- a condition on valid arguments beyond each one's own domain
  (ElasticNet: ``l1 + l2 > 0`` entrywise).
* ``value_spec`` -- where ``log_prob`` is evaluated for families that cannot be sampled.
* ``has_density`` -- False where ``log_prob`` raises ``NotImplementedError`` (ARDNormal).
* ``checks_values`` -- False where the tensor arguments' values are validated by the user's
  components rather than by the family (SemiImplicit's mixing and conditional).
"""

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
from scipy import stats
from scipy.special import logsumexp

from pyrozoo.distributions import (
    ARDNormal,
    DropoutNormal,
    ElasticNet,
    ExplicitMixing,
    HypersphericalUniform,
    LinearAutoregressiveNormal,
    LogScaleNormal,
    LogUniformImproper,
    ScaleMixtureNormal,
    SemiImplicit,
    SSGLExpectedLogDensity,
    VonMisesFisher,
)

#: the domains a :class:`ParamSpec` can describe
DOMAINS = (
    "real",  # finite reals (drawn with magnitudes in [low, high], either sign)
    "real_or_inf",  # finite reals and +inf (DropoutNormal's log_alpha)
    "positive",  # (0, inf), magnitudes in [low, high]
    "nonnegative",  # [0, inf): 0 and magnitudes in [low, high]
    "unit_interval",  # [0, 1], 0 and 1 included
    "sphere",  # unit vectors (event_dim 1)
    "strictly_lower",  # strictly lower triangular matrices, entries up to high (event_dim 2)
    "int",  # a Python int in [low, high]
    "shape",  # a batch shape (tuple of non-negative ints)
)


@dataclass
class ParamSpec:
    """The valid values of one constructor argument, for the property-based tests.

    :param str domain: one of :data:`DOMAINS`; invalid values (NaN, infinities, negative
        scales, points off the sphere, ...) are derived from it.
    :param float low, high: the range of magnitudes the family is expected to handle with
        finite densities, samples and gradients in float32 and float64 (for ``int``: the
        range of the int). Tests draw both ends and values in between.
    :param dict dtype_ranges: ``{dtype: (low, high)}`` overriding ``low, high`` for that dtype
        (e.g. the whole positive range of each dtype, see :func:`positive_float_range`).
    :param int event_dim: trailing dimensions of size ``D`` (the family's event size).
    :param bool scalar: a 0-dim tensor (no batch dimensions).
    :param bool python: passed as a Python number instead of a tensor.
    """

    domain: str
    low: float = 1e-6
    high: float = 1e6
    event_dim: int = 0
    scalar: bool = False
    python: bool = False
    dtype_ranges: Optional[Dict[torch.dtype, Tuple[float, float]]] = None

    def __post_init__(self):
        if self.domain not in DOMAINS:
            raise ValueError(f"unknown domain {self.domain!r}")

    def for_dtype(self, dtype: torch.dtype) -> "ParamSpec":
        """This spec with ``low, high`` for ``dtype``."""
        if not self.dtype_ranges or dtype not in self.dtype_ranges:
            return self
        low, high = self.dtype_ranges[dtype]
        return dataclasses.replace(self, low=low, high=high, dtype_ranges=None)


def positive_float_range(dtype: torch.dtype) -> Tuple[float, float]:
    """Every positive finite number of ``dtype``: from its smallest subnormal to its largest."""
    info = torch.finfo(dtype)
    return float(torch.nextafter(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype))), float(info.max)


@dataclass(repr=False)
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
    param_specs: Dict[str, ParamSpec] = field(default_factory=dict)
    event_size: Optional[Tuple[int, int]] = None
    joint_valid: Optional[Callable[[Dict[str, object]], bool]] = None
    value_spec: ParamSpec = field(default_factory=lambda: ParamSpec("real"))
    has_density: bool = True
    checks_values: bool = True

    def __repr__(self):
        return f"<{self.name}>"

    def build(self, params: Dict[str, object], device="cpu", dtype=torch.float64, validate_args=None):
        """The distribution with every parameter a tensor on ``device`` / of ``dtype``."""
        if self.make is not None:
            return self.make(params, device, dtype, validate_args)
        tensors = {k: v if self._passed_as_is(k) else torch.as_tensor(v, dtype=dtype, device=device) for k, v in params.items()}
        return self.dist_class(**tensors, validate_args=validate_args)

    def _passed_as_is(self, name: str) -> bool:
        """Python numbers, ints and shapes are not turned into tensors."""
        spec = self.param_specs.get(name)
        return spec is not None and (spec.python or spec.domain in ("int", "shape"))

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
            {"pi": 0.5, "sigma1": float("inf"), "sigma2": 0.1},
            {"pi": 0.5, "sigma1": 1.0, "sigma2": float("inf")},
        ],
        reference_log_prob=_scale_mixture_reference,
        test_values=_scale_mixture_tails,
        param_specs={
            "pi": ParamSpec("unit_interval"),
            "sigma1": ParamSpec("positive", 1e-30, 1e30),
            "sigma2": ParamSpec("positive", 1e-30, 1e30),
        },
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
            {"loc": float("inf"), "log_scale": 0.0},
            {"loc": 0.0, "log_scale": float("inf")},
            {"loc": 0.0, "log_scale": -float("inf")},
        ],
        reference_log_prob=_log_scale_normal_reference,
        param_specs={"loc": ParamSpec("real", 1e-6, 1e30), "log_scale": ParamSpec("real", 1e-3, 80.0)},
    )
)


# -- families registered for the property-based tests only (examples=[]) ------------------
# Their own test modules (test_von_mises_fisher.py, test_elastic_net.py, ...) check their
# densities and samplers against references; here they describe their valid arguments.

_NAN, _INF = float("nan"), float("inf")

register(
    DistributionFixture(
        name="DropoutNormal",
        dist_class=DropoutNormal,
        examples=[],
        invalid=[
            {"loc": 0.0, "log_scale": 0.0, "log_alpha": _NAN},
            {"loc": 0.0, "log_scale": 0.0, "log_alpha": -_INF},
            {"loc": _INF, "log_scale": 0.0, "log_alpha": 0.0},
            {"loc": 0.0, "log_scale": _INF, "log_alpha": 0.0},
        ],
        param_specs={
            "loc": ParamSpec("real", 1e-6, 1e30),
            "log_scale": ParamSpec("real", 1e-3, 80.0),
            "log_alpha": ParamSpec("real_or_inf", 1e-3, 1e3),
        },
    )
)

register(
    DistributionFixture(
        name="ElasticNet",
        dist_class=ElasticNet,
        examples=[],
        invalid=[{"l1": _INF, "l2": 1.0}, {"l1": 1.0, "l2": _INF}, {"l1": 0.0, "l2": 0.0}, {"l1": 1.0, "l2": _NAN}],
        param_specs={"l1": ParamSpec("nonnegative", 1e-30, 1e30), "l2": ParamSpec("nonnegative", 1e-30, 1e30)},
        joint_valid=lambda p: bool(((torch.as_tensor(p["l1"]) > 0) | (torch.as_tensor(p["l2"]) > 0)).all()),
    )
)


register(
    DistributionFixture(
        name="SSGLExpectedLogDensity",
        dist_class=SSGLExpectedLogDensity,
        examples=[],
        invalid=[
            {"kappa0": -1.0, "kappa1": 1.0, "rho": 0.5, "sigma": 1.0, "v0": 0.1, "v1": 10.0},
            {"kappa0": 1.0, "kappa1": _INF, "rho": 0.5, "sigma": 1.0, "v0": 0.1, "v1": 10.0},
            {"kappa0": 1.0, "kappa1": 1.0, "rho": 1.5, "sigma": 1.0, "v0": 0.1, "v1": 10.0},
            {"kappa0": 1.0, "kappa1": 1.0, "rho": 0.5, "sigma": 0.0, "v0": 0.1, "v1": 10.0},
        ],
        improper=True,
        sampleable=False,
        param_specs={
            "kappa0": ParamSpec("nonnegative"),
            "kappa1": ParamSpec("nonnegative"),
            "rho": ParamSpec("unit_interval"),
            "sigma": ParamSpec("positive", scalar=True),
            "v0": ParamSpec("positive", python=True),
            "v1": ParamSpec("positive", python=True),
        },
    )
)


register(
    DistributionFixture(
        name="LinearAutoregressiveNormal",
        dist_class=LinearAutoregressiveNormal,
        examples=[],
        invalid=[
            {"shift": [0.0, 0.0], "weight": [[0.0, 0.0], [_NAN, 0.0]], "scale": [1.0, 1.0]},
            {"shift": [0.0, 0.0], "weight": [[0.0, 0.0], [_INF, 0.0]], "scale": [1.0, 1.0]},
            {"shift": [0.0, 0.0], "weight": [[1.0, 0.0], [0.5, 0.0]], "scale": [1.0, 1.0]},
            {"shift": [0.0, _INF], "weight": [[0.0, 0.0], [0.5, 0.0]], "scale": [1.0, 1.0]},
            {"shift": [0.0, 0.0], "weight": [[0.0, 0.0], [0.5, 0.0]], "scale": [1.0, _INF]},
        ],
        param_specs={
            "shift": ParamSpec("real", 1e-6, 1e6, event_dim=1),
            "weight": ParamSpec("strictly_lower", 1e-3, 10.0, event_dim=2),
            "scale": ParamSpec("positive", 1e-6, 1e6, event_dim=1),
        },
        event_size=(1, 6),
    )
)

register(
    DistributionFixture(
        name="VonMisesFisher",
        dist_class=VonMisesFisher,
        examples=[],
        invalid=[
            {"loc": [1.0, 0.0, 0.0], "concentration": _INF},
            {"loc": [1.0, 0.0, 0.0], "concentration": _NAN},
            {"loc": [1.0, 0.0, 0.0], "concentration": 0.0},
            {"loc": [1.0, 1.0, 0.0], "concentration": 1.0},
            {"loc": [_INF, 0.0, 0.0], "concentration": 1.0},
        ],
        # Every positive finite concentration of the dtype, subnormals and the largest float
        # included: log C + kappa, 1 - A_d and the sampler's b are formed so that neither they nor
        # their gradients cancel, overflow or underflow (test_von_mises_fisher.py checks the
        # values against mpmath up to kappa = 1e300).
        param_specs={
            "loc": ParamSpec("sphere", event_dim=1),
            "concentration": ParamSpec(
                "positive",
                *positive_float_range(torch.float64),
                dtype_ranges={dtype: positive_float_range(dtype) for dtype in (torch.float32, torch.float64)},
            ),
        },
        event_size=(2, 2048),
    )
)


def _make_hyperspherical_uniform(p, device, dtype, validate_args):
    return HypersphericalUniform(p["dim"], p["batch_shape"], dtype=dtype, device=device, validate_args=validate_args)


register(
    DistributionFixture(
        name="HypersphericalUniform",
        dist_class=HypersphericalUniform,
        examples=[],
        make=_make_hyperspherical_uniform,
        param_specs={"dim": ParamSpec("int", 2, 2048), "batch_shape": ParamSpec("shape")},
    )
)

register(
    DistributionFixture(
        name="ARDNormal",
        dist_class=ARDNormal,
        examples=[],
        improper=True,
        sampleable=False,
        has_density=False,
        param_specs={"batch_shape": ParamSpec("shape")},
    )
)

register(
    DistributionFixture(
        name="LogUniformImproper",
        dist_class=LogUniformImproper,
        examples=[],
        improper=True,
        sampleable=False,
        param_specs={"batch_shape": ParamSpec("shape")},
        value_spec=ParamSpec("real", 1e-30, 1e30),
    )
)


def _make_semi_implicit(p, device, dtype, validate_args):
    """Normal(psi, exp(log_scale)) mixed over psi ~ Normal(loc, exp(log_mixing_scale))."""
    loc, log_mixing_scale, log_scale = torch.broadcast_tensors(
        *(torch.as_tensor(p[k], dtype=dtype, device=device) for k in ("loc", "log_mixing_scale", "log_scale"))
    )
    mixing = ExplicitMixing(LogScaleNormal(loc, log_mixing_scale, validate_args=validate_args))
    return SemiImplicit(
        mixing,
        lambda psi: LogScaleNormal(psi, log_scale, validate_args=validate_args).to_event(1),
        loc.shape[-1:],
        loc.shape[:-1],
        num_mixing=3,
        validate_args=validate_args,
    )


register(
    DistributionFixture(
        name="SemiImplicit",
        dist_class=SemiImplicit,
        examples=[],
        make=_make_semi_implicit,
        checks_values=False,
        param_specs={
            "loc": ParamSpec("real", 1e-6, 1e6, event_dim=1),
            "log_mixing_scale": ParamSpec("real", 1e-3, 20.0, event_dim=1),
            "log_scale": ParamSpec("real", 1e-3, 20.0, event_dim=1),
        },
        event_size=(1, 4),
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
    if "dist_family" in metafunc.fixturenames:
        metafunc.parametrize("dist_family", list(DISTRIBUTIONS), ids=[f.name for f in DISTRIBUTIONS])
    if "dist_example" in metafunc.fixturenames:
        metafunc.parametrize("dist_example", registered_examples(), ids=str)
    if "dist_invalid_case" in metafunc.fixturenames:
        cases = registered_invalid_cases()
        metafunc.parametrize("dist_invalid_case", cases, ids=[f"{f.name}-{i}" for i, (f, _) in enumerate(cases)])
