"""Numerical special functions the distributions are built on (as Pyro keeps such code in
``pyro.ops``): the modified Bessel functions of the first kind of the von Mises–Fisher
distribution, and their ratios and bounds."""

from pyrozoo.ops.special import (
    bessel_iv_ratio,
    bessel_iv_ratio_and_complement,
    bessel_iv_ratio_bounds,
    bessel_iv_ratio_complement,
    bessel_iv_ratio_derivative,
    log_bessel_iv,
    log_bessel_iv_div_pow,
    log_bessel_ive_div_pow,
)

__all__ = [
    "log_bessel_iv",
    "log_bessel_iv_div_pow",
    "log_bessel_ive_div_pow",
    "bessel_iv_ratio",
    "bessel_iv_ratio_bounds",
    "bessel_iv_ratio_derivative",
    "bessel_iv_ratio_complement",
    "bessel_iv_ratio_and_complement",
]
