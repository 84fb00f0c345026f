"""Writes ``bessel_references.json``: mpmath references for the von Mises-Fisher special functions.

For every grid point ``(d, kappa)`` it stores, computed at 40 significant digits and rounded
to float64:

* ``log_iv``      = log I_{d/2-1}(kappa)
* ``log_iv_next`` = log I_{d/2}(kappa)
* ``ratio``       = A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa)
* ``ratio_derivative`` = A_d'(kappa) = 1 - A^2 - (d-1) A / kappa, formed at 40 digits (it cancels
  down to about (d-1)/(2 kappa^2) for large kappa, losing at most 13 of them on this grid);
  checked against the closed form 1/kappa^2 - 1/sinh(kappa)^2 at d = 3
* ``log_normalizer`` = log C_d(kappa) = (d/2-1) log kappa - (d/2) log(2 pi) - log I_{d/2-1}(kappa)

``mpmath.besseli`` is too slow for large orders and arguments (minutes per value at
nu = 5e4, kappa = 1e6), so orders nu >= 1/2 use the integral representation (DLMF 10.32.2)

    I_nu(x) = (x/2)^nu / (sqrt(pi) Gamma(nu + 1/2)) * int_{-1}^{1} (1 - t^2)^(nu - 1/2) e^(x t) dt,

integrated by mpmath's tanh-sinh quadrature with break points around the peak of the
integrand; nu = 0 uses ``mpmath.besseli``. Where ``besseli`` is fast the two are checked to
agree to 1e-25. Run from the repository root (takes a few minutes):

    python tests/ops/generate_bessel_references.py

``huge_points`` (a few seconds; ``--huge-only`` rewrites just them) hold the exponentially scaled
quantities at concentrations from 1e13 to the largest float64, where I_nu(kappa) itself is far
beyond float64 and log C + kappa, 1 - A and A' cannot be formed from the unscaled values:

* ``log_ive_div_pow`` / ``log_ive_div_pow_next`` = log(I_nu(kappa) / kappa^nu) - kappa for
  nu = d/2 - 1 and d/2;
* ``ratio_complement`` = 1 - A_d(kappa); ``ratio_derivative`` = A_d'(kappa) (0.0 where it underflows);
* ``log_normalizer_plus_kappa`` = log C_d(kappa) + kappa (the log-density at the mode),
  ``entropy`` = -(log C + kappa) + kappa (1 - A) and ``kl_uniform`` = KL(vMF || uniform on
  S^{d-1}) = (log C + kappa) - kappa (1 - A) + log |S^{d-1}|.

They come from the Hankel expansion (DLMF 10.40.1) I_nu(x) = e^x (2 pi x)^(-1/2) S_nu(x),
S_nu(x) = sum_k (-1)^k a_k(nu) x^(-k), a_k(nu) = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! 8^k), whose
neglected part is O(e^(-2x)) and whose remainder after the last term used (below 1e-60 of the
sum) is bounded by the first omitted term for k > nu - 1/2 (DLMF 10.40(ii)); 1 - A = (S_nu - S_{nu+1}) / S_nu
is summed from k = 1 (the k = 0 terms cancel exactly) and A' = -(1 - A)' from the termwise
derivatives, so nothing cancels at any kappa. The expansion is checked against the main
grid's references at kappa = 1e6 and against ``mpmath.besseli`` at enough digits to subtract kappa.
"""

import json
import math
import sys
from pathlib import Path

import mpmath

mp = mpmath.mp
mp.dps = 40

DIMENSIONS = sorted(
    set(range(2, 25)) | set(range(36, 49)) | {50, 64, 75, 100, 150, 300, 500, 800, 1000, 1250, 3000, 10_000, 30_000, 100_000}
)
KAPPAS = [1e-4, 1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5, 3e5, 1e6]
#: the concentrations RDP uses: ml_kappa(d, eps) = (max(4, d) - 3)(1 - eps) / (1 - (1 - eps)^2)
RDP_EPSILONS = [0.5, 0.1, 0.005, 0.002]


def rdp_ml_kappa(d: int, eps: float) -> float:
    return (max(4, d) - 3) * (1 - eps) / (1 - (1 - eps) ** 2)


def log_iv_integral(nu, x):
    nu, x = mp.mpf(nu), mp.mpf(x)
    a = nu - mp.mpf(1) / 2
    if a < 0:
        raise ValueError("the integral representation needs nu >= 1/2")

    def f(t):
        return x * t + (a * mp.log1p(-t * t) if a != 0 else 0)

    if a > 0:
        peak = (-a + mp.sqrt(a * a + x * x)) / x
        width = (1 - peak * peak) / mp.sqrt(2 * a * (1 + peak * peak))
    else:
        peak, width = mp.mpf(1), 1 / x
    fmax = f(peak)
    points = [mp.mpf(-1)]
    for k in (-40, -10, -3, -1, 0, 1, 3, 10, 40):
        t = peak + k * width
        if -1 < t < 1 and t > points[-1]:
            points.append(t)
    points.append(mp.mpf(1))
    integral = mp.quad(lambda t: mp.exp(f(t) - fmax), points)
    return nu * mp.log(x / 2) - mp.log(mp.pi) / 2 - mp.loggamma(nu + mp.mpf(1) / 2) + fmax + mp.log(integral)


def log_iv(nu, x):
    if nu < 0.5:
        return mp.log(mp.besseli(nu, x, maxterms=10**7))
    value = log_iv_integral(nu, x)
    if x <= 100 and nu <= 50:
        check = mp.log(mp.besseli(nu, x, maxterms=10**6))
        if abs(check - value) > mp.mpf("1e-25") * max(1, abs(value)):
            raise AssertionError(f"references disagree at nu={nu}, x={x}: {value} vs {check}")
    return value


#: the huge-concentration points (d and kappa); 1.7976931348623157e308 is the largest float64
HUGE_DIMENSIONS = [2, 3, 4, 10, 41, 42, 43, 1000, 100_000]
HUGE_KAPPAS = [1e13, 1e20, 1e100, 1e154, 2e154, 1e200, 1e300, 1.7976931348623157e308]


def hankel_terms(nu, x, derivative=False):
    """The terms (-1)^k a_k(nu) x^(-k) of S_nu(x) (and with ``derivative`` their x-derivatives),
    until they fall below 1e-60 of the first; at x >= 1e6 and the orders used here they
    decrease monotonically that far."""
    nu, x = mp.mpf(nu), mp.mpf(x)
    mu = 4 * nu * nu
    terms, term, k = [mp.mpf(1)], mp.mpf(1), 0
    while abs(term) > mp.mpf("1e-60"):
        k += 1
        new = -term * (mu - (2 * k - 1) ** 2) / (8 * k * x)
        if abs(new) >= abs(term) and k > 1:
            raise AssertionError(f"the Hankel series for nu={nu}, x={x} stops decreasing at k={k}")
        term = new
        terms.append(term)
    if not derivative:
        return terms
    return terms, [-k * t / x for k, t in enumerate(terms)]


def log_ive_div_pow(nu, x):
    """log(I_nu(x) / x^nu) - x = -log(2 pi x)/2 - nu log x + log S_nu(x)."""
    x = mp.mpf(x)
    return -mp.log(2 * mp.pi * x) / 2 - nu * mp.log(x) + mp.log(mp.fsum(hankel_terms(nu, x)))


def ratio_complement_and_derivative(nu, x):
    """(1 - R, R') for R = I_{nu+1}(x) / I_nu(x), with 1 - R = N / S, N = S_nu - S_{nu+1} summed from k = 1."""
    lo, dlo = hankel_terms(nu, x, True)
    hi, dhi = hankel_terms(nu + 1, x, True)
    n = max(len(lo), len(hi))
    lo, dlo, hi, dhi = (t + [mp.mpf(0)] * (n - len(t)) for t in (lo, dlo, hi, dhi))
    s, ds = mp.fsum(lo), mp.fsum(dlo)
    num = mp.fsum(a - b for a, b in zip(lo[1:], hi[1:]))
    dnum = mp.fsum(a - b for a, b in zip(dlo[1:], dhi[1:]))
    complement = num / s
    return complement, -(dnum * s - num * ds) / (s * s)


def log_sphere_area(d):
    return mp.log(2) + mp.mpf(d) / 2 * mp.log(mp.pi) - mp.loggamma(mp.mpf(d) / 2)


def huge_point(d, kappa):
    nu = mp.mpf(d) / 2 - 1
    x = mp.mpf(kappa)
    scaled = log_ive_div_pow(nu, x)
    log_c_plus_kappa = -mp.mpf(d) / 2 * mp.log(2 * mp.pi) - scaled
    complement, derivative = ratio_complement_and_derivative(nu, x)
    return {
        "d": d,
        "kappa": kappa,
        "log_ive_div_pow": float(scaled),
        "log_ive_div_pow_next": float(log_ive_div_pow(nu + 1, x)),
        "ratio_complement": float(complement),
        "ratio_derivative": float(derivative),
        "log_normalizer_plus_kappa": float(log_c_plus_kappa),
        "entropy": float(-log_c_plus_kappa + x * complement),
        "kl_uniform": float(log_c_plus_kappa - x * complement + log_sphere_area(d)),
    }


def check_hankel(grid_points):
    """The Hankel references against the main grid (kappa = 1e6) and mpmath.besseli (kappa = 1e13, 1e20)."""
    for p in grid_points:
        if p["kappa"] == 1e6 and p["d"] <= 1000:
            nu = mp.mpf(p["d"]) / 2 - 1
            x = mp.mpf(p["kappa"])
            log_iv = log_ive_div_pow(nu, x) + x + nu * mp.log(x)
            complement, derivative = ratio_complement_and_derivative(nu, x)
            assert abs(log_iv - p["log_iv"]) <= 1e-15 * abs(log_iv), (p["d"], log_iv, p["log_iv"])
            assert abs((1 - complement) - p["ratio"]) <= 1e-15 * p["ratio"], (p["d"], 1 - complement, p["ratio"])
            assert abs(derivative - p["ratio_derivative"]) <= 1e-14 * p["ratio_derivative"], (p["d"], derivative)
    for d in (2, 3, 10, 1000):
        for kappa in (1e13, 1e20):
            nu = mp.mpf(d) / 2 - 1
            with mp.workdps(40 + int(math.log10(kappa))):
                x = mp.mpf(kappa)
                direct = mp.log(mp.besseli(nu, x)) - nu * mp.log(x) - x
                ratio = mp.besseli(nu + 1, x) / mp.besseli(nu, x)
                complement = 1 - ratio
            assert abs(direct - log_ive_div_pow(nu, kappa)) <= mp.mpf("1e-30") * abs(direct), (d, kappa)
            assert abs(complement - ratio_complement_and_derivative(nu, kappa)[0]) <= mp.mpf("1e-20") * complement, (d, kappa)


def huge_points():
    return [huge_point(d, kappa) for d in HUGE_DIMENSIONS for kappa in HUGE_KAPPAS]


def main():
    path = Path(__file__).with_name("bessel_references.json")
    if "--huge-only" in sys.argv[1:]:
        out = json.loads(path.read_text())
        check_hankel(out["points"])
        out["huge_points"] = huge_points()
        path.write_text(json.dumps(out, indent=0) + "\n")
        print(f"wrote {len(out['huge_points'])} huge points to {path}")
        return
    points = []
    for d in DIMENSIONS:
        kappas = sorted(set(KAPPAS) | {rdp_ml_kappa(d, e) for e in RDP_EPSILONS})
        for kappa in kappas:
            nu = mp.mpf(d) / 2 - 1
            a = log_iv(nu, kappa)
            b = log_iv(nu + 1, kappa)
            log_c = nu * mp.log(kappa) - (nu + 1) * mp.log(2 * mp.pi) - a
            ratio = mp.exp(b - a)
            derivative = 1 - ratio * ratio - (d - 1) * ratio / kappa
            if d == 3:  # A_3 = coth(kappa) - 1/kappa
                exact = 1 / mp.mpf(kappa) ** 2 - 1 / mp.sinh(kappa) ** 2
                if abs(derivative - exact) > mp.mpf("1e-20") * exact:
                    raise AssertionError(f"A_3'({kappa}): {derivative} vs {exact}")
            points.append(
                {
                    "d": d,
                    "kappa": kappa,
                    "log_iv": float(a),
                    "log_iv_next": float(b),
                    "ratio": float(ratio),
                    "ratio_derivative": float(derivative),
                    "log_normalizer": float(log_c),
                }
            )
        print(f"d={d}: {len(kappas)} points", flush=True)
    out = {
        "description": __doc__.split("\n\n")[0],
        "mpmath_version": mpmath.__version__,
        "dps": mp.dps,
        "points": points,
    }
    check_hankel(points)
    out["huge_points"] = huge_points()
    path.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {len(points)} points and {len(out['huge_points'])} huge points to {path}")


if __name__ == "__main__":
    main()
