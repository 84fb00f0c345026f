"""Property-based tests (hypothesis) over every distribution registered in ``conftest.py``.

Each family describes its constructor arguments there once (``param_specs``: a domain and the
range of magnitudes it supports). From that, for every registered family:

* **valid arguments** -- random ones, including both ends of each range, the boundary points
  of each domain (0 rates, ``pi`` of 0 and 1, ``log_alpha = +inf``, poles of the sphere),
  broadcasting batch shapes, event sizes from the family's range, float32 and float64 -- give
  the expected batch shape, finite samples and ``log_prob``, and, where the family has
  ``rsample``, finite gradients of ``rsample(...).sum() + log_prob(rsample(...)).sum()`` with
  respect to every tensor argument;
* **invalid values** -- one entry of one argument replaced by a value outside its domain (NaN,
  infinities, zero or negative scales, probabilities outside [0, 1], points off the sphere, a
  nonzero on the diagonal, negative sizes, ...) -- are a ``ValueError`` (``TypeError`` for a
  wrong type) that names the argument, with ``validate_args=True``;
* **wrong shapes and types** -- arguments whose batch or event shapes do not broadcast, an
  event size below the family's minimum, a string for a tensor -- are a ``ValueError`` /
  ``TypeError``.

Bounded and deterministic: ``derandomize=True``, no example database, and few examples per
family (the whole file runs in under 10 s on one core); ``PYROZOO_FUZZ_SCALE=20`` multiplies
the number of examples for a longer local search (with ``derandomize`` a given scale is still
deterministic).
"""

import math
import os
import re

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import pyrozoo.distributions as pd
from tests.distributions.conftest import DISTRIBUTIONS, DistributionFixture, ParamSpec

_SETTINGS = dict(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
#: examples per family and property; PYROZOO_FUZZ_SCALE=10 searches ten times longer (locally)
_SCALE = float(os.environ.get("PYROZOO_FUZZ_SCALE", "1"))
VALID = settings(max_examples=int(100 * _SCALE), **_SETTINGS)
INVALID = settings(max_examples=int(50 * _SCALE), **_SETTINGS)

DTYPES = (torch.float32, torch.float64)
TENSOR_DOMAINS = ("real", "real_or_inf", "positive", "nonnegative", "unit_interval", "sphere", "strictly_lower")


def _is_tensor_arg(spec: ParamSpec) -> bool:
    return spec.domain in TENSOR_DOMAINS and not spec.python


# -- drawing valid arguments ------------------------------------------------------------------


def _magnitudes(data, spec: ParamSpec, shape, rng) -> np.ndarray:
    """Magnitudes in ``[spec.low, spec.high]``: both ends, log-uniform between, or about 1."""
    mode = data.draw(st.sampled_from(["low", "high", "spread", "unit"]), label="magnitudes")
    if mode == "low":
        return np.full(shape, spec.low)
    if mode == "high":
        return np.full(shape, spec.high)
    if mode == "spread":  # (clipped: 10 ** log10(high) may round above high, e.g. to inf)
        with np.errstate(over="ignore"):
            return np.clip(10.0 ** rng.uniform(math.log10(spec.low), math.log10(spec.high), shape), spec.low, spec.high)
    return np.clip(rng.uniform(0.5, 2.0, shape), spec.low, spec.high)


def _values(data, spec: ParamSpec, shape, rng) -> np.ndarray:
    """Valid values of ``spec``'s domain, of ``shape`` (float64)."""
    domain = spec.domain
    if domain == "unit_interval":
        if data.draw(st.booleans(), label="interval edges"):
            return rng.choice([0.0, 1.0, spec.low, 1.0 - spec.low], shape)
        return rng.uniform(0.0, 1.0, shape)
    if domain == "sphere":
        x = rng.standard_normal(shape)
        if data.draw(st.booleans(), label="near a pole"):
            # +-e_i, slightly perturbed: the sampler's reflection must not degenerate there
            pole = np.zeros(shape)
            pole[..., data.draw(st.integers(0, shape[-1] - 1), label="pole")] = data.draw(st.sampled_from([1.0, -1.0]))
            x = pole + data.draw(st.sampled_from([0.0, 1e-12, 1e-4])) * x
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    mag = _magnitudes(data, spec, shape, rng)
    if domain == "positive":
        return mag
    if domain == "nonnegative":
        if data.draw(st.booleans(), label="zeros"):
            mag = np.where(rng.random(shape) < 0.5, 0.0, mag)
        return mag
    x = mag * rng.choice([-1.0, 1.0], shape)
    if domain == "real_or_inf" and data.draw(st.booleans(), label="infinities"):
        x = np.where(rng.random(shape) < 0.5, np.inf, x)
    if domain == "strictly_lower":
        x = np.tril(x, -1)
    return x


def _broadcasting_batch(data, batch):
    """A shape that broadcasts to ``batch``: trailing dims of it, some of them 1."""
    keep = data.draw(st.integers(0, len(batch)), label="batch dims kept")
    return tuple(b if data.draw(st.booleans(), label="size kept") else 1 for b in batch[len(batch) - keep :])


def _draw_valid(data, family: DistributionFixture):
    """``(args, dtype, batch_shape, event_size)`` with every argument valid."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    batch = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2), label="batch shape"))
    event = data.draw(st.integers(*family.event_size), label="event size") if family.event_size else None
    args, batches = {}, []
    for name, spec in family.param_specs.items():
        spec = spec.for_dtype(dtype)
        if spec.domain == "int":
            args[name] = data.draw(st.integers(int(spec.low), int(spec.high)), label=name)
        elif spec.domain == "shape":
            args[name] = tuple(data.draw(st.lists(st.integers(0, 3), max_size=3), label=name))
            batches.append(args[name])
        elif spec.python:
            args[name] = float(_values(data, spec, (), rng))
        else:
            b = () if spec.scalar else _broadcasting_batch(data, batch)
            batches.append(b)
            values = _values(data, spec, b + (event,) * spec.event_dim, rng)
            t = torch.tensor(values, dtype=dtype)
            if spec.domain == "sphere":
                t = t / torch.linalg.vector_norm(t, dim=-1, keepdim=True)  # unit norm in this dtype
            args[name] = t
    batch_shape = torch.Size(np.broadcast_shapes(*batches)) if batches else torch.Size()
    return args, dtype, batch_shape, event


def _construct(family: DistributionFixture, args, dtype, validate_args=True):
    if family.make is not None:
        return family.make(args, "cpu", dtype, validate_args)
    return family.dist_class(**args, validate_args=validate_args)


def _test_points(data, family, d, dtype):
    """Two points per batch element in the support: samples, else drawn from ``value_spec``."""
    if family.sampleable and not family.improper:
        return d.sample((2,))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="value seed"))
    shape = (2,) + tuple(d.batch_shape) + tuple(d.event_shape)
    return torch.tensor(_values(data, family.value_spec, shape, rng), dtype=dtype)


def _finite(t) -> bool:
    return bool(torch.isfinite(t).all())


# -- the properties ------------------------------------------------------------------------------


@VALID
@given(data=st.data())
def test_valid_arguments_give_finite_values_and_gradients(dist_family, data):
    family = dist_family
    args, dtype, batch_shape, _ = _draw_valid(data, family)
    if family.joint_valid is not None:
        assume(family.joint_valid(args))
    d = _construct(family, args, dtype)
    assert d.batch_shape == batch_shape
    x = _test_points(data, family, d, dtype)
    assert x.shape == (2,) + batch_shape + d.event_shape and _finite(x)
    if not family.has_density:
        with pytest.raises(NotImplementedError):
            d.log_prob(x)
        return
    lp = d.log_prob(x)
    assert lp.shape == (2,) + batch_shape
    assert _finite(lp), f"log_prob {lp} at {x}"
    if not d.has_rsample:
        return
    leaves = {k: v.clone().requires_grad_() for k, v in args.items() if torch.is_tensor(v)}
    d = _construct(family, {**args, **leaves}, dtype)
    x = d.rsample((2,))
    assert _finite(x)
    if not leaves:
        return
    lp = d.log_prob(x)
    assert _finite(lp), f"log_prob {lp} at rsample {x}"
    grads = torch.autograd.grad(x.sum() + lp.sum(), list(leaves.values()), allow_unused=True)
    assert any(g is not None for g in grads)
    for name, g in zip(leaves, grads):
        assert g is None or _finite(g), f"gradient in {name}: {g}"


def _invalid_values(spec: ParamSpec):
    """Values outside ``spec``'s domain (scalars, put into one entry of a valid tensor)."""
    return {
        "real": [math.nan, math.inf, -math.inf],
        "real_or_inf": [math.nan, -math.inf],
        "positive": [math.nan, math.inf, -math.inf, 0.0, -spec.low, -1.0],
        "nonnegative": [math.nan, math.inf, -spec.low, -1.0],
        "unit_interval": [math.nan, -1e-3, 1.001, math.inf, -math.inf],
    }[spec.domain]


def _corrupt(data, spec: ParamSpec, value: torch.Tensor) -> torch.Tensor:
    """``value`` with one entry (one row on the sphere) outside ``spec``'s domain."""
    value = value.clone()
    if spec.domain == "sphere":
        rows = value.reshape(-1, value.shape[-1])
        i = data.draw(st.integers(0, rows.shape[0] - 1), label="row")
        how = data.draw(st.sampled_from(["nan", "inf", "double", "half", "zero"]), label="off the sphere")
        row = rows[i]
        if how in ("nan", "inf"):
            row[data.draw(st.integers(0, row.numel() - 1), label="entry")] = math.nan if how == "nan" else math.inf
        else:
            row.mul_({"double": 2.0, "half": 0.5, "zero": 0.0}[how])
        return rows.reshape(value.shape)
    if spec.domain == "strictly_lower":
        n = value.shape[-1]
        mats = value.reshape(-1, n, n)
        k = data.draw(st.integers(0, mats.shape[0] - 1), label="matrix")
        i = data.draw(st.integers(0, n - 1), label="row")
        j = data.draw(st.integers(0, n - 1), label="column")
        if j < i:
            mats[k, i, j] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]), label="bad entry")
        else:
            mats[k, i, j] = data.draw(st.sampled_from([1.0, -1e-3, math.nan]), label="on or above the diagonal")
        return mats.reshape(value.shape)
    flat = value.reshape(-1)
    i = data.draw(st.integers(0, max(flat.numel() - 1, 0)), label="entry")
    flat[i] = data.draw(st.sampled_from(_invalid_values(spec)), label="invalid value")
    return flat.reshape(value.shape)


def _names_argument(err: Exception, name: str) -> bool:
    msg = str(err)
    if msg.startswith("Expected parameter"):  # torch's validation, which also prints the repr of every argument
        return msg.startswith(f"Expected parameter {name} ")
    return re.search(rf"\b{re.escape(name)}\b", msg) is not None


def _families_checking_values():
    return [f for f in DISTRIBUTIONS if f.checks_values]


@INVALID
@given(data=st.data())
def test_invalid_values_are_refused_naming_the_argument(dist_family, data):
    family = dist_family
    if not family.checks_values:
        pytest.skip(f"{family.name}'s argument values are checked by its components")
    args, dtype, _, _ = _draw_valid(data, family)
    if family.joint_valid is not None:
        assume(family.joint_valid(args))
    names = [n for n, s in family.param_specs.items() if not (torch.is_tensor(args[n]) and args[n].numel() == 0)]
    assume(names)
    name = data.draw(st.sampled_from(names), label="corrupted argument")
    spec = family.param_specs[name]
    expected = ValueError
    if spec.domain == "int":
        bad = data.draw(st.sampled_from([int(spec.low) - 1, 0, -1, 2.5, True, "3"]), label="bad int")
        expected = (ValueError, TypeError)
    elif spec.domain == "shape":
        bad = data.draw(st.sampled_from([(-1,), (2, -3)]), label="bad shape")
    elif spec.python:
        bad = data.draw(st.sampled_from(_invalid_values(spec) + [True]), label="bad number")
    else:
        bad = _corrupt(data, spec, args[name])
    with pytest.raises(expected) as info:
        _construct(family, {**args, name: bad}, dtype, validate_args=True)
    assert _names_argument(info.value, name), f"{info.value!r} does not name {name}"


@INVALID
@given(data=st.data())
def test_wrong_shapes_and_types_are_refused(dist_family, data):
    family = dist_family
    if not family.checks_values:
        pytest.skip(f"{family.name}'s argument shapes are checked by its components")
    tensor_args = [n for n, s in family.param_specs.items() if _is_tensor_arg(s)]
    if not tensor_args:
        pytest.skip("no tensor arguments")
    args, dtype, _, event = _draw_valid(data, family)
    name = data.draw(st.sampled_from(tensor_args), label="argument")
    how = data.draw(st.sampled_from(["batch", "event", "event size", "type"]), label="what is wrong")
    event_args = [n for n in tensor_args if family.param_specs[n].event_dim]
    rng = np.random.default_rng(0)
    expected = ValueError
    if how == "type":
        args[name] = data.draw(st.sampled_from(["abc", None, object()]), label="not a tensor")
        expected = (TypeError, ValueError)
    elif how == "batch" and len(tensor_args) >= 2:
        # every tensor argument batch (2,), except one with (3,) (a 0-dim one included)
        for n in tensor_args:
            spec = family.param_specs[n].for_dtype(dtype)
            b = (3,) if n == name else ((2,) if not spec.scalar else ())
            args[n] = torch.tensor(_values(data, spec, b + (event,) * spec.event_dim, rng), dtype=dtype)
    elif how == "event" and name in event_args and len(event_args) >= 2:
        spec = family.param_specs[name].for_dtype(dtype)
        args[name] = torch.tensor(_values(data, spec, (event + 1,) * spec.event_dim, rng), dtype=dtype)
    elif how == "event size" and family.event_size and family.event_size[0] >= 2:
        small = family.event_size[0] - 1
        for n in event_args:
            spec = family.param_specs[n]
            args[n] = torch.ones((small,) * spec.event_dim, dtype=dtype)
    else:
        assume(False)
    with pytest.raises(expected):
        _construct(family, args, dtype, validate_args=True)


# -- coverage of the registry -------------------------------------------------------------------


def test_every_exported_distribution_is_registered_with_its_arguments():
    """A new distribution in ``pyrozoo.distributions.__all__`` must be registered in conftest.py,
    with a ParamSpec for each constructor argument, to be covered here."""
    registered = {f.dist_class: f for f in DISTRIBUTIONS}
    for name in pd.__all__:
        obj = getattr(pd, name)
        if isinstance(obj, type) and issubclass(obj, torch.distributions.Distribution):
            assert obj in registered, f"{name} is exported but not registered in tests/distributions/conftest.py"
            assert registered[obj].param_specs, f"{name} is registered without param_specs"


def test_custom_constraints_keep_their_transforms():
    from torch.distributions import biject_to, transform_to

    from pyrozoo.distributions.constraints import finite, nonnegative_finite, positive_finite

    x = torch.tensor([-3.0, 0.0, 2.5])
    for c in (finite, positive_finite, nonnegative_finite):
        for registry in (biject_to, transform_to):
            y = registry(c)(x)
            assert bool(c.check(y).all()), (c, y)
    values = torch.tensor([1.0, 0.0, -1.0, math.inf, -math.inf, math.nan])
    assert finite.check(values).tolist() == [True, True, True, False, False, False]
    assert positive_finite.check(values).tolist() == [True, False, False, False, False, False]
    assert nonnegative_finite.check(values).tolist() == [True, True, False, False, False, False]


# -- SemiImplicit's options (its tensor arguments belong to its mixing and conditional) ----------


def _semi_implicit(options, event=3):
    loc = torch.linspace(-1.0, 1.0, event, dtype=torch.float64)
    mixing = pd.ExplicitMixing(pd.LogScaleNormal(loc, torch.zeros_like(loc)))
    return pd.SemiImplicit(mixing, lambda psi: pd.LogScaleNormal(psi, torch.full_like(loc, -1.0)).to_event(1), (event,), **options)


_SEMI_IMPLICIT_INVALID = {
    "num_mixing": [-1, 1.5, True, "3"],
    "group_ndims": [-1, 2, True, 0.5],
    "role": ["prior", 1],
    "chunk_size": [0, -1, 2.5, True],
    "support": ["real", None],
    "batch_shape": [(-2,)],
}


@INVALID
@given(data=st.data())
def test_semi_implicit_options(data):
    options = {
        "num_mixing": data.draw(st.integers(1, 6), label="num_mixing"),
        "group_ndims": data.draw(st.integers(0, 1), label="group_ndims"),
        "role": data.draw(st.sampled_from([None, "guide", "model"]), label="role"),
        "chunk_size": data.draw(st.one_of(st.none(), st.integers(1, 4)), label="chunk_size"),
        "share_mixing": data.draw(st.booleans(), label="share_mixing"),
    }
    q = _semi_implicit(options)
    z = q.rsample((2,))
    assert z.shape == (2, 3) and _finite(z)
    if options["role"] != "model":
        assert _finite(q.log_prob(z))
    with pd.semi_implicit_role("model"):
        assert _finite(q.log_prob(z.detach().clone()))
    name = data.draw(st.sampled_from(sorted(_SEMI_IMPLICIT_INVALID)), label="invalid option")
    bad = data.draw(st.sampled_from(_SEMI_IMPLICIT_INVALID[name]), label="invalid value")
    with pytest.raises((ValueError, TypeError)) as info:
        _semi_implicit({**options, name: bad})
    assert _names_argument(info.value, name), f"{info.value!r} does not name {name}"
    with pytest.raises((ValueError, TypeError), match="conditional"):
        pd.SemiImplicit(q.mixing, "not callable", (3,))
    with pytest.raises(TypeError, match="mixing"):
        pd.SemiImplicit(3, q.conditional, (3,))
    with pytest.raises(ValueError, match="event_shape"):
        pd.SemiImplicit(q.mixing, q.conditional, (-3,))
