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

    python tests/distributions/generate_bessel_references.py
"""

import json
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


def main():
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
    path = Path(__file__).with_name("bessel_references.json")
    path.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {len(points)} points to {path}")


if __name__ == "__main__":
    main()
