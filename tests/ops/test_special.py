"""Bessel functions for the von Mises-Fisher distribution, against mpmath references.

The references (``bessel_references.json``, written by ``generate_bessel_references.py`` at 40
significant digits) cover d in [2, 1e5] (every d up to 24 and around the switch between the
asymptotic expansion and the recurrence) and kappa in [1e-4, 1e6], plus the concentrations RDP
uses. ``log I`` is checked for both orders d/2 - 1 and d/2 of every point; the ratio's
kappa-derivative A_d' (and through it the kappa-gradients of the vMF entropy and KLs) against
A_d' formed at 40 digits. ``huge_points`` (kappa from 1e13 to the largest float64, from the
Hankel expansion) check the exponentially scaled forms and the complement 1 - A_d there, and
that nothing overflows to NaN (x^2 in the recurrence used to, beyond 1.3e154).
"""

import json
import math
from pathlib import Path

import pytest
import torch

from pyrozoo.ops.special import (
    UAE_MIN_ORDER,
    bessel_iv_ratio,
    bessel_iv_ratio_and_complement,
    bessel_iv_ratio_bounds,
    bessel_iv_ratio_complement,
    bessel_iv_ratio_derivative,
    log_bessel_iv,
    log_bessel_iv_div_pow,
    log_bessel_ive_div_pow,
)

_FIXTURE = json.loads((Path(__file__).parent / "bessel_references.json").read_text())
REFERENCES = _FIXTURE["points"]
HUGE = _FIXTURE["huge_points"]
F32_EPS = torch.finfo(torch.float32).eps


def _grid(device, dtype=torch.float64):
    d = torch.tensor([p["d"] for p in REFERENCES], dtype=dtype, device=device)
    kappa = torch.tensor([p["kappa"] for p in REFERENCES], dtype=dtype, device=device)
    keys = ("log_iv", "log_iv_next", "ratio", "ratio_derivative")
    ref = {key: torch.tensor([p[key] for p in REFERENCES], dtype=torch.float64) for key in keys}
    return d, kappa, ref


def test_reference_grid_covers_the_required_range():
    ds = {p["d"] for p in REFERENCES}
    kappas = {p["kappa"] for p in REFERENCES}
    assert min(ds) == 2 and max(ds) == 100_000
    assert min(kappas) <= 1e-4 and max(kappas) >= 1e6
    # orders on both sides of the switch from the recurrence to the asymptotic expansion
    orders = {d / 2 - 1 for d in ds}
    assert any(o < UAE_MIN_ORDER - 1 for o in orders) and any(UAE_MIN_ORDER - 1 <= o <= UAE_MIN_ORDER + 1 for o in orders)


def _errors(value, ref):
    value = value.detach().double().cpu()
    return (value - ref).abs() / ref.abs(), (value - ref).abs() / ref.abs().clamp(min=1.0)


def test_log_bessel_iv_float64_matches_mpmath(device):
    d, kappa, ref = _grid(device)
    for order, key in ((d / 2 - 1, "log_iv"), (d / 2, "log_iv_next")):
        value = log_bessel_iv(order, kappa)
        assert value.dtype == torch.float64 and value.device.type == device.type
        relative, scaled = _errors(value, ref[key])
        assert relative.max() <= 1e-6  # the requirement of issue 3
        assert scaled.max() <= 1e-12  # what the method achieves (relative to max(1, |log I|))


def test_bessel_iv_ratio_float64_matches_mpmath(device):
    d, kappa, ref = _grid(device)
    value = bessel_iv_ratio(d / 2, kappa)
    relative, _ = _errors(value, ref["ratio"])
    assert relative.max() <= 1e-13


def test_float32_is_finite_and_correctly_rounded(device):
    d, kappa, ref = _grid(device, torch.float32)
    kappa.requires_grad_()
    log_iv = log_bessel_iv(d / 2 - 1, kappa)
    ratio = bessel_iv_ratio(d / 2, kappa)
    assert log_iv.dtype == torch.float32 and ratio.dtype == torch.float32
    (grad,) = torch.autograd.grad((log_iv + ratio).sum(), kappa)
    for t in (log_iv, ratio, grad):
        assert torch.isfinite(t).all()
    # against float64 evaluated at the same (rounded) arguments; float64 itself is checked above
    k64 = kappa.detach().double()
    _, scaled = _errors(log_iv, log_bessel_iv(d.double() / 2 - 1, k64).cpu())
    assert scaled.max() <= 2 * F32_EPS
    relative, _ = _errors(ratio, bessel_iv_ratio(d.double() / 2, k64).cpu())
    assert relative.max() <= 2 * F32_EPS


def test_one_order_for_many_arguments_matches_mpmath(device):
    """An order given as one number (the vMF's d/2, d/2 - 1) takes its own path (the per-order
    work done once, in Python): the same accuracy as orders given per element."""
    d_all, kappa_all, ref = _grid(device)
    worst = {"log_iv": 0.0, "ratio": 0.0, "ratio_derivative": 0.0}
    for dim in sorted({p["d"] for p in REFERENCES}):
        at = d_all == dim
        kappa = kappa_all[at].clone().requires_grad_()
        log_iv = log_bessel_iv(dim / 2 - 1, kappa)
        ratio = bessel_iv_ratio(dim / 2, kappa)
        (grad,) = torch.autograd.grad(ratio.sum(), kappa)
        _, scaled = _errors(log_iv, ref["log_iv"][at.cpu()])
        worst["log_iv"] = max(worst["log_iv"], float(scaled.max()))
        for key, value in (("ratio", ratio), ("ratio_derivative", grad)):
            relative, _ = _errors(value, ref[key][at.cpu()])
            worst[key] = max(worst[key], float(relative.max()))
    assert worst["log_iv"] <= 1e-12
    assert worst["ratio"] <= 1e-13
    assert worst["ratio_derivative"] <= 1e-11


def test_ratio_derivative_float64_matches_mpmath(device):
    """A_d'(kappa) over d in [2, 1e5], kappa in [1e-4, 1e6]. The textbook form
    1 - A^2 - (d-1) A / kappa cancels (its error grows like kappa^2 / d: 6e-3 at d = 2,
    kappa = 1e6); the requirement is 1e-6, the method achieves about 1e-12."""
    d, kappa, ref = _grid(device)
    dims = {p["d"] for p in REFERENCES}
    assert {2, 3, 10, 100, 1000, 10_000, 100_000} <= dims
    for dim in (2, 3, 10, 100, 1000, 10_000, 100_000):  # every decade of kappa for these d
        kappas = {p["kappa"] for p in REFERENCES if p["d"] == dim}
        assert all(any(abs(k / 10.0**e - 1) < 1e-12 for k in kappas) for e in range(-4, 7))
    kappa.requires_grad_()
    ratio = bessel_iv_ratio(d / 2, kappa)
    (grad,) = torch.autograd.grad(ratio.sum(), kappa)
    direct = bessel_iv_ratio_derivative(d / 2, kappa.detach())
    assert grad.dtype == direct.dtype == torch.float64 and direct.device.type == device.type
    for value in (grad, direct):
        relative, _ = _errors(value, ref["ratio_derivative"])
        assert relative.max() <= 1e-6  # the requirement
        assert relative.max() <= 1e-11  # what the method achieves (about 2e-12, at d = 2)
        assert relative[d.cpu() >= 100].max() <= 1e-13
    # the scalar path (one concentration) at the hardest points: d = 2 and 3, the largest kappa
    for p in REFERENCES:
        if p["d"] in (2, 3, 100_000) and p["kappa"] >= 1e5:
            k = torch.tensor(p["kappa"], dtype=torch.float64, requires_grad=True)
            (g,) = torch.autograd.grad(bessel_iv_ratio(p["d"] / 2, k), k)
            assert float(g) == pytest.approx(p["ratio_derivative"], rel=1e-11)
            assert float(bessel_iv_ratio_derivative(p["d"] / 2, k.detach())) == pytest.approx(p["ratio_derivative"], rel=1e-11)


def test_ratio_derivative_float32(device):
    """float32 derivatives are the float64 ones rounded (half an ulp); against mpmath at the
    unrounded kappa the rounding of kappa itself adds |d log A' / d log kappa| <= 2 ulps' worth."""
    d, kappa, ref = _grid(device, torch.float32)
    worst64, worst_ref = 0.0, 0.0
    for dim in sorted({p["d"] for p in REFERENCES}):
        at = d == dim
        k32 = kappa[at].clone().requires_grad_()
        (grad,) = torch.autograd.grad(bessel_iv_ratio(dim / 2, k32).sum(), k32)
        direct = bessel_iv_ratio_derivative(dim / 2, k32.detach())
        assert grad.dtype == direct.dtype == torch.float32 and bool(torch.equal(grad, direct))
        expected = bessel_iv_ratio_derivative(dim / 2, k32.detach().double()).cpu()
        worst64 = max(worst64, float(((grad.double().cpu() - expected).abs() / expected).max()))
        worst_ref = max(worst_ref, float(_errors(grad, ref["ratio_derivative"][at.cpu()])[0].max()))
    assert worst64 <= F32_EPS / 2  # correctly rounded
    assert worst_ref <= 2 * F32_EPS  # about 1.2e-7 (1.03 eps) on this grid


def test_ratio_derivative_function(device):
    x = torch.tensor([0.0, 1e-3, 2.0, 1e6], dtype=torch.float64, device=device)
    nu = torch.tensor([0.5, 1.0, 3.5, 40.0], dtype=torch.float64, device=device)
    # at x = 0 the derivative is 1 / (2 nu); elsewhere the textbook form where it does not cancel
    value = bessel_iv_ratio_derivative(nu, x)
    assert float(value[0]) == pytest.approx(1.0, rel=1e-15)
    r = bessel_iv_ratio(nu[1:3], x[1:3])
    textbook = 1.0 - r * r - (2.0 * nu[1:3] - 1.0) * r / x[1:3]
    assert torch.allclose(value[1:3], textbook, rtol=1e-13, atol=0)
    # one order for many arguments, a batch, and one value agree (to rounding, which the
    # recurrence below order 21 amplifies up to about 100-fold at d = 2)
    for order in (1.0, 12.5, 30.0):
        one = bessel_iv_ratio_derivative(order, x)
        batch = bessel_iv_ratio_derivative(torch.full_like(x, order), x)
        assert torch.allclose(one, batch, rtol=1e-12, atol=0)
        assert float(bessel_iv_ratio_derivative(order, float(x[3]))) == pytest.approx(float(one[3]), rel=1e-12)
    assert bessel_iv_ratio_derivative(2.0, torch.tensor(1.5)).dtype == torch.float32
    with pytest.raises(ValueError, match="not differentiable"):
        bessel_iv_ratio_derivative(2.0, torch.tensor([1.5], requires_grad=True))
    with pytest.raises(ValueError, match="order nu"):
        bessel_iv_ratio_derivative(0.0, 1.0)


def _vmf_reference_points():
    """(d, kappa, A_d'(kappa)) at the largest concentrations, where A' cancels hardest."""
    return [(p["d"], p["kappa"], p["ratio_derivative"]) for p in REFERENCES if p["d"] in (2, 3, 10, 100, 10_000) and p["kappa"] >= 3e5]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_vmf_entropy_and_kl_kappa_gradients_at_large_kappa(dtype, device):
    """Autograd through the vMF entropy and KLs against closed forms with A' from mpmath:
    dH/dk = -k A'(k), dKL(vMF || uniform)/dk = k A'(k), dKL(vMF(k) || vMF(k_p))/dk = (k - k_p) A'(k)
    (same mean). Each autograd sum cancels A_d(k) against A_d(k) (error ~eps k / d, 4e-11 here)."""
    from pyrozoo.distributions.von_mises_fisher import HypersphericalUniform, VonMisesFisher

    points = _vmf_reference_points()
    assert len(points) >= 10
    tol = 1e-9 if dtype == torch.float64 else 2 * F32_EPS
    for dim, k, a_prime in points:
        loc = torch.zeros(dim, dtype=dtype, device=device)
        loc[0] = 1.0
        kappa = torch.tensor(k, dtype=dtype, device=device, requires_grad=True)
        q = VonMisesFisher(loc, kappa)
        k_p = 0.5 * k
        values = (
            q.entropy(),
            torch.distributions.kl_divergence(q, HypersphericalUniform(dim, dtype=dtype, device=device)),
            torch.distributions.kl_divergence(q, VonMisesFisher(loc, torch.tensor(k_p, dtype=dtype, device=device))),
        )
        expected = (-k * a_prime, k * a_prime, (k - k_p) * a_prime)
        for value, exp in zip(values, expected):
            (grad,) = torch.autograd.grad(value, kappa)
            assert grad.dtype == dtype
            assert abs(float(grad) - exp) <= tol * abs(exp), (dim, k, float(grad), exp)


def test_log_bessel_iv_div_pow_is_log_iv_minus_power(device):
    d, kappa, ref = _grid(device)
    nu = d / 2 - 1
    value = log_bessel_iv_div_pow(nu, kappa) + torch.xlogy(nu, kappa)
    _, scaled = _errors(value, ref["log_iv"])
    assert scaled.max() <= 1e-12


def test_derivatives_match_the_bessel_identities(device):
    """d/dk log I_{nu}(k) = R_{nu+1}(k) + nu/k, with R from mpmath."""
    d, kappa, ref = _grid(device)
    kappa.requires_grad_()
    nu = d / 2 - 1
    (grad,) = torch.autograd.grad(log_bessel_iv(nu, kappa).sum(), kappa)
    expected = ref["ratio"] + nu.cpu() / kappa.detach().cpu()
    assert ((grad.cpu() - expected).abs() / expected).max() <= 1e-12
    (grad,) = torch.autograd.grad(log_bessel_iv_div_pow(nu, kappa).sum(), kappa)
    assert ((grad.cpu() - ref["ratio"]).abs() / ref["ratio"]).max() <= 1e-13


@pytest.mark.parametrize("nu, x", [(0.0, 0.7), (0.5, 3.0), (3.5, 20.0), (UAE_MIN_ORDER + 5, 30.0), (400.0, 2000.0), (1.0, 1e-3)])
def test_gradcheck(nu, x, device):
    x_t = torch.tensor([x, 2.0 * x], dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: log_bessel_iv(nu, t), (x_t,))
    assert torch.autograd.gradgradcheck(lambda t: log_bessel_iv(nu, t), (x_t,))
    assert torch.autograd.gradcheck(lambda t: log_bessel_iv_div_pow(nu, t), (x_t,))
    assert torch.autograd.gradcheck(lambda t: bessel_iv_ratio(nu + 1.0, t), (x_t,))
    assert torch.autograd.gradcheck(lambda t: bessel_iv_ratio(nu + 1.0, t, method="midpoint"), (x_t,))
    assert torch.autograd.gradcheck(lambda t: log_bessel_ive_div_pow(nu, t), (x_t,))
    assert torch.autograd.gradgradcheck(lambda t: log_bessel_ive_div_pow(nu, t, normalized=True), (x_t,))
    assert torch.autograd.gradcheck(lambda t: bessel_iv_ratio_complement(nu + 1.0, t), (x_t,))
    assert torch.autograd.gradcheck(lambda t: bessel_iv_ratio_and_complement(nu + 1.0, t), (x_t,))


def test_values_at_zero(device):
    nu = torch.tensor([0.0, 0.5, 3.0, 40.0], dtype=torch.float64, device=device)
    x = torch.zeros(4, dtype=torch.float64, device=device, requires_grad=True)
    expected = -nu * math.log(2.0) - torch.lgamma(nu + 1.0)
    assert torch.allclose(log_bessel_iv_div_pow(nu, x), expected, rtol=1e-14, atol=1e-14)
    log_iv = log_bessel_iv(nu, x.detach())
    assert log_iv[0] == 0 and bool(torch.isneginf(log_iv[1:]).all())
    ratio = bessel_iv_ratio(nu + 1.0, x)
    assert bool((ratio == 0).all())
    (grad,) = torch.autograd.grad(ratio.sum(), x)
    assert torch.allclose(grad, 1.0 / (2.0 * (nu + 1.0)), rtol=1e-13)


def test_broadcasting_and_python_numbers():
    nu = torch.tensor([[0.0], [2.5], [30.0]])
    x = torch.tensor([0.1, 1.0, 10.0, 100.0])
    out = log_bessel_iv(nu, x)
    assert out.shape == (3, 4) and out.dtype == torch.float32
    assert log_bessel_iv(1.5, 2.0).dtype == torch.get_default_dtype()
    assert bessel_iv_ratio(torch.tensor(2.0, dtype=torch.float64), 3.0).dtype == torch.float64
    # one value (the fast scalar path) agrees with the same value inside a tensor
    for fn in (log_bessel_iv, log_bessel_iv_div_pow, bessel_iv_ratio):
        batch = fn(torch.tensor([3.5, 7.0, 3.5], dtype=torch.float64), torch.tensor([2.0, 1.0, 2.0], dtype=torch.float64))
        assert float(fn(3.5, torch.tensor(2.0, dtype=torch.float64))) == pytest.approx(float(batch[0]), rel=1e-14)
    for method in ("exact", "midpoint"):
        one = bessel_iv_ratio(2.0, torch.tensor(1.5), method=method)
        assert one.shape == () and float(one) == pytest.approx(float(bessel_iv_ratio(torch.tensor([2.0, 3.0]), torch.tensor([1.5, 1.5]), method=method)[0]))
    lower, upper = bessel_iv_ratio_bounds(2.0, 3.0, theorem=4)
    assert float(lower) <= float(bessel_iv_ratio(2.0, 3.0)) <= float(upper)


@pytest.mark.parametrize("theorem", [4, 5])
def test_ruiz_antolin_segura_bounds_bracket_the_ratio(theorem, device):
    d, kappa, ref = _grid(device)
    lower, upper = bessel_iv_ratio_bounds(d / 2, kappa, theorem=theorem)
    slack = 4 * torch.finfo(torch.float64).eps * ref["ratio"]
    assert bool((lower.cpu() <= ref["ratio"] + slack).all())
    assert bool((ref["ratio"] <= upper.cpu() + slack).all())


def test_theorem5_is_tighter_and_its_midpoint_error_falls_like_d_squared(device):
    d, kappa, ref = _grid(device)
    lo5, hi5 = bessel_iv_ratio_bounds(d / 2, kappa, theorem=5)
    lo4, hi4 = bessel_iv_ratio_bounds(d / 2, kappa, theorem=4)
    width5 = ((hi5 - lo5).cpu() / ref["ratio"])
    width4 = ((hi4 - lo4).cpu() / ref["ratio"])
    for dim in {p["d"] for p in REFERENCES if p["d"] >= 10}:
        at = d.cpu() == dim
        assert width5[at].max() < width4[at].max()  # worst case over kappa
    midpoint = bessel_iv_ratio(d / 2, kappa, method="midpoint").cpu()
    rel = (midpoint - ref["ratio"]).abs() / ref["ratio"]
    # the documented accuracy of RDP's approximation: about 1.4e-5 (100 / d)^2
    assert bool((rel <= 3e-5 * (100.0 / d.cpu()) ** 2).all())


@pytest.mark.parametrize(
    "fn, nu, x, match",
    [
        (log_bessel_iv, -0.5, 1.0, "order nu"),
        (log_bessel_iv, 1.0, -1.0, "argument x"),
        (log_bessel_iv, 1.0, float("nan"), "argument x"),
        (log_bessel_iv, float("inf"), 1.0, "order nu"),
        (log_bessel_iv_div_pow, 1.0, float("inf"), "argument x"),
        (bessel_iv_ratio, 0.0, 1.0, "order nu"),
        (bessel_iv_ratio, 2.0, -3.0, "argument x"),
        (log_bessel_ive_div_pow, -1.0, 1.0, "order nu"),
        (log_bessel_ive_div_pow, 1.0, float("inf"), "argument x"),
        (bessel_iv_ratio_complement, 0.0, 1.0, "order nu"),
        (bessel_iv_ratio_and_complement, 1.0, float("nan"), "argument x"),
    ],
)
def test_invalid_arguments_raise(fn, nu, x, match):
    with pytest.raises(ValueError, match=match):
        fn(torch.tensor(nu, dtype=torch.float64), torch.tensor(x, dtype=torch.float64))


def test_other_bad_input_raises():
    with pytest.raises(ValueError, match="derivative with respect to the order"):
        log_bessel_iv(torch.tensor(1.0, requires_grad=True), torch.tensor(2.0))
    with pytest.raises(ValueError, match="theorem"):
        bessel_iv_ratio_bounds(2.0, 1.0, theorem=3)
    with pytest.raises(ValueError, match="order nu"):
        bessel_iv_ratio_bounds(0.5, 1.0)
    with pytest.raises(ValueError, match="method"):
        bessel_iv_ratio(2.0, 1.0, method="scipy")
    with pytest.raises(TypeError, match="real numbers"):
        log_bessel_iv(torch.tensor(1.0), torch.tensor(1.0 + 1.0j))


@pytest.mark.slow
def test_random_grid_matches_live_mpmath():
    """Beyond the committed fixture: log I and the ratio at random (d, kappa), log-uniform over
    d in [2, 1e5] (real d, so orders off the fixture's) and kappa in [1e-4, 1e6], against
    mpmath evaluated now, in float64 (the issue's tolerances) and float32 (finite, rounded); and
    the ratio's kappa-derivative."""
    mpmath = pytest.importorskip("mpmath")
    from tests.ops.generate_bessel_references import log_iv

    g = torch.Generator().manual_seed(2024)
    n = 120
    d = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(math.log(2.0), math.log(1e5), generator=g))
    kappa = torch.exp(torch.empty(n, dtype=torch.float64).uniform_(math.log(1e-4), math.log(1e6), generator=g))
    d[d < 3] = 2.0  # orders in (0, 1/2) would need mpmath.besseli, slow at large kappa; d = 2 (order 0) there
    mp_a = [log_iv(float(di) / 2 - 1, float(ki)) for di, ki in zip(d, kappa)]
    mp_b = [log_iv(float(di) / 2, float(ki)) for di, ki in zip(d, kappa)]
    ref_a = torch.tensor([float(v) for v in mp_a], dtype=torch.float64)
    ref_b = torch.tensor([float(v) for v in mp_b], dtype=torch.float64)
    # A' = 1 - A^2 - (d-1) A / kappa formed at mpmath's precision (it cancels in float64)
    mp_ratio = [mpmath.exp(b - a) for a, b in zip(mp_a, mp_b)]
    ref_derivative = torch.tensor(
        [float(1 - r * r - (float(di) - 1) * r / float(ki)) for r, di, ki in zip(mp_ratio, d, kappa)], dtype=torch.float64
    )
    relative, _ = _errors(log_bessel_iv(d / 2 - 1, kappa), ref_a)
    assert relative.max() <= 1e-6
    relative, _ = _errors(log_bessel_iv(d / 2, kappa), ref_b)
    assert relative.max() <= 1e-6
    relative, _ = _errors(bessel_iv_ratio(d / 2, kappa), torch.exp(ref_b - ref_a))
    assert relative.max() <= 1e-5
    relative, _ = _errors(bessel_iv_ratio_derivative(d / 2, kappa), ref_derivative)
    assert relative.max() <= 1e-6
    k32 = kappa.float().requires_grad_()
    log_iv32, ratio32 = log_bessel_iv(d.float() / 2 - 1, k32), bessel_iv_ratio(d.float() / 2, k32)
    (grad,) = torch.autograd.grad((log_iv32 + ratio32).sum(), k32)
    assert all(bool(torch.isfinite(t).all()) for t in (log_iv32, ratio32, grad))


# -- huge arguments and the exponentially scaled forms ------------------------------------------


def _huge_grid(device, dtype=torch.float64):
    d = torch.tensor([p["d"] for p in HUGE], dtype=dtype, device=device)
    kappa = torch.tensor([p["kappa"] for p in HUGE], dtype=dtype, device=device)
    keys = ("log_ive_div_pow", "log_ive_div_pow_next", "ratio_complement", "ratio_derivative")
    return d, kappa, {key: torch.tensor([p[key] for p in HUGE], dtype=torch.float64) for key in keys}


def test_huge_reference_points_cover_the_range():
    assert {p["d"] for p in HUGE} >= {2, 3, 10, 41, 42, 43, 1000, 100_000}  # orders on both sides of UAE_MIN_ORDER
    assert {1e13, 1e20, 1e100, 1e154, 2e154, 1e200, 1e300, torch.finfo(torch.float64).max} <= {p["kappa"] for p in HUGE}


def test_huge_arguments_match_mpmath(device):
    """Every function at x in [1e13, 1.8e308] (orders d/2 - 1 and d/2, d in [2, 1e5]) against the
    Hankel-expansion references: finite (orders below 20 used to give NaN beyond 1.3e154, where
    x^2 overflowed in the recurrence), and the scaled forms, the complement 1 - R and R' accurate
    to a few ulps (the unscaled log I / x^nu is about x there and is checked relatively)."""
    d, kappa, ref = _huge_grid(device)
    nu = d / 2 - 1
    for order, key in ((nu, "log_ive_div_pow"), (nu + 1, "log_ive_div_pow_next")):
        _, scaled = _errors(log_bessel_ive_div_pow(order, kappa), ref[key])
        assert scaled.max() <= 1e-13
        relative, _ = _errors(log_bessel_iv_div_pow(order, kappa), ref[key] + kappa.cpu())
        assert relative.max() <= 1e-15
        log_iv = ref[key] + kappa.cpu() + order.cpu() * kappa.cpu().log()
        relative, _ = _errors(log_bessel_iv(order, kappa), log_iv)
        assert relative.max() <= 1e-15
        # normalized: minus the value at x = 0, -nu log 2 - log Gamma(nu + 1)
        at_zero = -order.cpu() * math.log(2.0) - torch.lgamma(order.cpu() + 1)
        _, scaled = _errors(log_bessel_ive_div_pow(order, kappa, normalized=True), ref[key] - at_zero)
        assert scaled.max() <= 1e-13
    complement = bessel_iv_ratio_complement(d / 2, kappa)
    relative, _ = _errors(complement, ref["ratio_complement"])
    assert relative.max() <= 1e-13  # about 2e-15
    eps = torch.finfo(torch.float64).eps
    assert _errors(bessel_iv_ratio(d / 2, kappa), 1 - ref["ratio_complement"])[0].max() <= eps  # 1 to rounding beyond 1e17
    ratio, complement2 = bessel_iv_ratio_and_complement(d / 2, kappa)
    assert _errors(ratio, 1 - ref["ratio_complement"])[0].max() <= eps
    assert torch.allclose(complement2, complement, rtol=1e-14, atol=0)
    # A' is about (d - 1) / (2 kappa^2): it underflows beyond 1e154 (the reference is then 0)
    derivative = bessel_iv_ratio_derivative(d / 2, kappa).cpu()
    normal = ref["ratio_derivative"] > 1e-300
    assert _errors(derivative[normal], ref["ratio_derivative"][normal])[0].max() <= 1e-13
    assert bool((derivative[~normal] <= 1e-300).all()) and bool((derivative >= 0).all())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_huge_arguments_have_finite_gradients_on_every_path(dtype):
    """The tensor path, the one-value path and per-element orders, up to the dtype's largest
    number: values and first derivatives finite (the second too where it exists), the
    paths in agreement (to the rounding of their last steps, which the recurrence amplifies up
    to about 40-fold at order 1)."""
    big = torch.finfo(dtype).max
    x_values = [1e13, 1e20, 1.34e154, 2e154, 1e300, big] if dtype == torch.float64 else [1e13, 1e20, 1e30, big]
    x_values = [v for v in x_values if v <= big]
    functions = {
        "log_bessel_iv": lambda nu, t: log_bessel_iv(nu, t),
        "log_bessel_iv_div_pow": lambda nu, t: log_bessel_iv_div_pow(nu, t),
        "log_bessel_ive_div_pow": lambda nu, t: log_bessel_ive_div_pow(nu, t),
        "normalized": lambda nu, t: log_bessel_ive_div_pow(nu, t, normalized=True),
        "bessel_iv_ratio": lambda nu, t: bessel_iv_ratio(nu + 1.0, t),
        "bessel_iv_ratio_complement": lambda nu, t: bessel_iv_ratio_complement(nu + 1.0, t),
    }
    for nu in (0.0, 0.5, 1.0, 4.0, 19.5, 20.0, 49.0):
        x = torch.tensor(x_values, dtype=dtype, requires_grad=True)
        for name, fn in functions.items():
            value = fn(nu, x)
            (grad,) = torch.autograd.grad(value.sum(), x, create_graph=name.startswith("log"))
            assert bool(torch.isfinite(value).all()) and bool(torch.isfinite(grad).all()), (name, nu, value, grad)
            if name.startswith("log"):
                (second,) = torch.autograd.grad(grad.sum(), x)
                assert bool(torch.isfinite(second).all()), (name, nu, second)
            one = torch.stack([fn(nu, x.detach()[i]) for i in range(len(x_values))])
            per_element = fn(torch.full((len(x_values),), nu, dtype=torch.float64), x.detach()).to(dtype)
            for other in (one, per_element):
                rtol = 1e-13 if dtype == torch.float64 else 4 * F32_EPS
                assert torch.allclose(other, value.detach(), rtol=rtol, atol=1e-320), (name, nu, value, other)


def test_scaled_forms_agree_with_the_reference_grid(device):
    """On the main grid (kappa <= 1e6) the scaled forms are the unscaled ones minus kappa, and the
    complement is 1 - A_d, to the references' accuracy."""
    d, kappa, ref = _grid(device)
    nu = d / 2 - 1
    log_iv_div_pow = ref["log_iv"] - nu.cpu() * kappa.cpu().log()
    _, scaled = _errors(log_bessel_ive_div_pow(nu, kappa) + kappa, log_iv_div_pow)
    assert scaled.max() <= 1e-12
    at_zero = -nu.cpu() * math.log(2.0) - torch.lgamma(nu.cpu() + 1)
    _, scaled = _errors((log_bessel_ive_div_pow(nu, kappa, normalized=True) + kappa).cpu() + at_zero, log_iv_div_pow)
    assert scaled.max() <= 1e-12
    complement = bessel_iv_ratio_complement(d / 2, kappa)
    assert ((complement.cpu() - (1 - ref["ratio"])).abs()).max() <= 2 * torch.finfo(torch.float64).eps
    ratio, complement2 = bessel_iv_ratio_and_complement(d / 2, kappa)
    assert _errors(ratio, ref["ratio"])[0].max() <= 1e-13
    assert torch.allclose(complement2, complement, rtol=1e-14, atol=0)
    # where A_d is close to 1 the complement is relatively accurate: 1 - A against mpmath at 40 digits
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(40):
        for dim, k in ((2, 1e6), (3, 1e5), (10, 3e5), (100, 1e6)):
            a = mpmath.besseli(mpmath.mpf(dim) / 2, k) / mpmath.besseli(mpmath.mpf(dim) / 2 - 1, k)
            value = float(bessel_iv_ratio_complement(dim / 2, torch.tensor(k, dtype=torch.float64)))
            assert value == pytest.approx(float(1 - a), rel=1e-13)


@pytest.mark.parametrize("nu", [0.0, 0.5, 1.0, 19.5, 20.0, 20.5, 100.0, 499.0, 49_999.0])
def test_normalized_scaled_form_keeps_its_relative_accuracy_at_small_x(nu):
    """log(Gamma(nu + 1) (2/x)^nu I_nu(x)) - x = log 0F1(; nu + 1; x^2/4) - x is 0 at x = 0 and about
    -x + x^2 / (4(nu + 1)) for small x: relative error at most a few ulps there, for every order
    (it is formed without the constant nu log 2 + log Gamma(nu + 1), which has ulps of 1e-10 at
    nu = 5e4), so that the vMF KL between nearby small concentrations keeps its accuracy."""
    mpmath = pytest.importorskip("mpmath")
    xs = [1e-300, 1e-8, 1e-4, 1e-2, 1.0, 50.0]
    x = torch.tensor([0.0] + xs, dtype=torch.float64)
    with mpmath.workdps(40):
        ref = [0.0] + [float(mpmath.log(mpmath.hyp0f1(nu + 1, mpmath.mpf(v) ** 2 / 4)) - mpmath.mpf(v)) for v in xs]
    ref = torch.tensor(ref, dtype=torch.float64)
    for value, tol in ((log_bessel_ive_div_pow(nu, x, normalized=True), 1e-14), (log_bessel_ive_div_pow(torch.full_like(x, nu), x, normalized=True), 1e-12)):
        assert value[0] == 0
        assert ((value[1:] - ref[1:]).abs() / ref[1:].abs()).max() <= tol
    scalar = [float(log_bessel_ive_div_pow(nu, torch.tensor(v, dtype=torch.float64), normalized=True)) for v in xs]
    assert ((torch.tensor(scalar, dtype=torch.float64) - ref[1:]).abs() / ref[1:].abs()).max() <= 1e-14

