"""Controlled experiment (issue 23, item 2): is "marginal and joint training of the hierarchical
prior fit equally well" a bug in pyrozoo or a property of the setting?

``docs/results/dsivi_hierarchical_bnn_concrete.md`` scores a BNN with the prior
``w | lambda ~ N(0, 1/lambda)``, ``lambda ~ Gamma(1, 1)`` per weight, trained with the joint bound
(Molchanov 2022, Eq. 18: a mean-field posterior over ``w`` and a log-normal over ``lambda``) and
with the marginal bound (Eq. 19: ``lambda`` integrated out, the semi-implicit prior estimated by
DSIVI from ``K2`` draws), by the marginal ELBO of each trained ``q(w)``: marginal - joint =
-0.002 +- 0.016 nats per example over 5 splits, where the thesis (Theorem 3, Figure 6) says the
marginal optimum fits the posterior better. This script decides between the two readings on a
model small enough that every quantity is known:

* **the setting**: Bayesian linear regression ``y ~ N(x w + b, 1/tau)`` (``tau`` fixed) with the
  thesis' hierarchical prior on each of the 9 coefficients, on ``n`` random rows of concrete
  (n = 5, 20, 50, 200: the hyperprior matters most with few data), 5 seeds (seed k: split k's
  training rows, its own subset and initialisation);
* **independent** (plain PyTorch, written from Eqs. 18-19): the joint bound in closed form and
  the marginal bound with the exact Student-t marginal by Gauss-Hermite quadrature, both
  deterministic, maximised by L-BFGS: the exact optima of the two objectives;
* **pyrozoo**: the declarations the concrete result ran (``normal-gamma-joint``: closed-form KL
  ELBO; ``normal-gamma-marginal``: ``DSIVI_ELBO(0, K2)``) trained by :func:`~pyrozoo.inference.fit`
  (full batch, Adam, learning rate decayed linearly to 0);
* the **log evidence** ``log p(D)``, by importance sampling with a multivariate-t proposal around
  the Laplace approximation of the true posterior (its standard error and effective sample size
  are reported), so that ``KL(q(w) || p(w | D)) = log p(D) - L_marginal(q)`` is measured for every
  trained posterior, the quantity of Theorem 3;
* a **bound check** on fixed parameters: pyrozoo's DSIVI marginal bound (the training path,
  ``differentiable_loss``) against the thesis' bound re-implemented here,
  ``E_q log p(D | w) + E_q log (1/K2) sum_k N(w; 0, 1/lambda_k) + H[q]`` with
  ``lambda_k ~ Gamma(a, b)``, for several ``K2``; and pyrozoo's joint bound against its closed form.

**Why the claim must show here if it holds at all.** For a factorised ``q(w) q(lambda)`` the two
bounds differ by ``E_q(w) KL(q(lambda) || p(lambda | w))`` with ``p(lambda | w) = Gamma(a + 1/2,
b + w^2 / 2)`` (DSIVI paper, Eq. 18-19): a single ``q(lambda)`` cannot follow a posterior whose
rate moves with ``w``, and the joint optimum buys a smaller gap by distorting ``q(w)``. That
distortion is what Theorem 3 bounds, and it is largest when ``q(w)`` is wide, i.e. with few data.
With full-batch deterministic objectives the optima are exact, so the ordering of Theorem 3
(``L_m(q_m) >= L_m(q_j) >= L_joint(q_j, q_lambda)``) cannot be hidden by optimisation noise; its
*size* (in nats, per coefficient) is what carries over to the concrete BNN.

Writes ``<results-dir>/marginal_vs_joint.{csv,md}``::

    python studies/marginal_vs_joint.py            # n = 5, 20, 50, 200; 5 seeds
    python studies/marginal_vs_joint.py --quick    # smoke run used by the tests
"""

import functools
import math
import time
from typing import Dict, Optional, Tuple

import numpy as np
import pandas as pd
import pyro
import scipy.stats
import torch
from torch import nn

from pyrozoo.data.uci import UCIDataset
from pyrozoo.inference import ClosedFormKL_ELBO, fit
from pyrozoo.models import BayesianNeuralNetwork, GaussianLikelihood
from pyrozoo.utils import set_seed
from zoo_protocols.cli import DEFAULT_RESULTS_DIR, positive_int, run_main
from zoo_protocols.config import RunConfig
from zoo_protocols.intervals import mean_se
from zoo_protocols.lenet_recipes import linear_to_zero
from zoo_protocols.methods import method as declaration
from zoo_protocols.study import study_notes, study_parser, write_study

STEM = "marginal_vs_joint"
#: the hyperprior Gamma(a, b) of the concrete result (and its marginal: Student-t, 2a dof, scale sqrt(b / a))
A, B = 1.0, 1.0
#: fixed noise precision in standardised units: a residual standard deviation of 0.6 (a linear
#: fit to concrete explains about 60 % of the variance of the target)
NOISE_PRECISION = 1.0 / 0.6**2
#: the two pyrozoo declarations of the concrete result
DECLARATIONS = {"joint": "normal-gamma-joint", "marginal": "normal-gamma-marginal"}
METHODS = tuple(DECLARATIONS)
IMPLEMENTATIONS = ("independent", "pyrozoo")
DTYPE = torch.float64
#: Gauss-Hermite nodes (probabilists') for E_{N(mu, sigma^2)} of smooth functions of one weight
_NODES, _WEIGHTS = (torch.tensor(v, dtype=DTYPE) for v in np.polynomial.hermite_e.hermegauss(64))
_WEIGHTS = _WEIGHTS / math.sqrt(2 * math.pi)


# -- the independent re-implementation (plain PyTorch) ------------------------------------------

def log_student_t(w: torch.Tensor, a: float = A, b: float = B) -> torch.Tensor:
    """``log int N(w; 0, 1/lambda) Gamma(lambda; a, b) dlambda``, elementwise (closed form)."""
    return math.lgamma(a + 0.5) - math.lgamma(a) - 0.5 * math.log(2 * math.pi * b) - (a + 0.5) * torch.log1p(w * w / (2 * b))


def gauss_expectation(f, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """``E_{N(mu, sigma^2)} f(w)`` per element, by 64-point Gauss-Hermite quadrature."""
    w = mu.unsqueeze(-1) + sigma.unsqueeze(-1) * _NODES
    return (f(w) * _WEIGHTS).sum(-1)


def data_term(X: torch.Tensor, y: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, tau: float = NOISE_PRECISION) -> torch.Tensor:
    """``E_{q(w)} log N(y; X w, 1/tau)`` for a factorised Gaussian ``q(w)``, in closed form."""
    n = len(y)
    misfit = (y - X @ mu).pow(2).sum() + (X.pow(2).sum(0) * sigma.pow(2)).sum()
    return 0.5 * n * math.log(tau / (2 * math.pi)) - 0.5 * tau * misfit


def gaussian_entropy(sigma: torch.Tensor) -> torch.Tensor:
    return (0.5 * math.log(2 * math.pi * math.e) + sigma.log()).sum()


def marginal_bound(X, y, mu, sigma, tau: float = NOISE_PRECISION) -> torch.Tensor:
    """Eq. 19 with the exact marginal prior (Student-t): ``E log p(D|w) + E log p(w) + H[q(w)]``."""
    return data_term(X, y, mu, sigma, tau) + gauss_expectation(log_student_t, mu, sigma).sum() + gaussian_entropy(sigma)


def kl_lognormal_gamma(m, s, alpha, beta):
    """``KL(LogNormal(m, s) || Gamma(alpha, rate beta))``, elementwise, closed form."""
    return torch.lgamma(alpha) - alpha * beta.log() - alpha * m + beta * torch.exp(m + 0.5 * s * s) - 0.5 * torch.log(2 * math.pi * math.e * s * s)


def joint_bound(X, y, mu, sigma, m, s, tau: float = NOISE_PRECISION) -> torch.Tensor:
    """Eq. 18 for ``q(w) = N(mu, sigma^2)``, ``q(lambda) = LogNormal(m, s)``, in closed form:
    ``E log p(D|w) + E log N(w; 0, 1/lambda) - KL(q(lambda) || Gamma(a, b)) + H[q(w)]``."""
    mean_lam = torch.exp(m + 0.5 * s * s)
    cond = -0.5 * math.log(2 * math.pi) + 0.5 * m - 0.5 * mean_lam * (mu * mu + sigma * sigma)
    a, b = torch.tensor(A, dtype=DTYPE), torch.tensor(B, dtype=DTYPE)
    return data_term(X, y, mu, sigma, tau) + cond.sum() - kl_lognormal_gamma(m, s, a, b).sum() + gaussian_entropy(sigma)


def expected_hyper_kl(mu, sigma, m, s) -> torch.Tensor:
    """``E_{q(w)} KL(q(lambda) || p(lambda | w))`` summed over weights, ``p(lambda | w) =
    Gamma(a + 1/2, b + w^2/2)``: by the DSIVI paper's decomposition, marginal - joint bound."""
    alpha = torch.tensor(A + 0.5, dtype=DTYPE)
    return gauss_expectation(lambda w: kl_lognormal_gamma(m.unsqueeze(-1), s.unsqueeze(-1), alpha, B + 0.5 * w * w), mu, sigma).sum()


def marginal_bound_mc(X, y, mu, sigma, K2: int, particles: int, generator: torch.Generator) -> torch.Tensor:
    """The thesis' DSIVI bound with an explicit ``q(w)``, one value per particle: the closed-form
    data term and entropy plus ``log (1/K2) sum_k N(w; 0, 1/lambda_k)``, ``lambda_k ~ Gamma(a, b)``
    per weight, for ``w ~ q``. Its mean is the bound ``L_{0,K2}`` (below Eq. 19's value)."""
    d = len(mu)
    w = mu + sigma * torch.randn(particles, d, generator=generator, dtype=DTYPE)
    # Gamma(a, b) draws through the generator: -log of a uniform is Exp(1); a = 1 is exactly that
    if A != 1.0:
        raise NotImplementedError("the independent sampler draws Gamma(1, b) as an exponential; extend it for a != 1")
    lam = -torch.rand(particles, K2, d, generator=generator, dtype=DTYPE).log() / B
    log_cond = 0.5 * (lam.log() - math.log(2 * math.pi)) - 0.5 * lam * w.unsqueeze(1).pow(2)
    log_prior = (torch.logsumexp(log_cond, dim=1) - math.log(K2)).sum(-1)
    return data_term(X, y, mu, sigma) + gaussian_entropy(sigma) + log_prior


def _lbfgs(objective, params, iterations: int = 400):
    """Maximises a deterministic ``objective(*params)`` with L-BFGS (strong Wolfe)."""
    optimiser = torch.optim.LBFGS(params, lr=1, max_iter=iterations, tolerance_grad=1e-10, tolerance_change=1e-14, history_size=50, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        loss = -objective(*params)
        loss.backward()
        return loss

    optimiser.step(closure)
    return [p.detach() for p in params]


def fit_independent(method: str, X, y, tau: float = NOISE_PRECISION) -> Dict[str, torch.Tensor]:
    """The exact maximiser of the joint (``"joint"``) or marginal bound over factorised Gaussian
    ``q(w)`` (and log-normal ``q(lambda)``), started from least squares (zero without data)."""
    d = X.shape[1]
    start = torch.linalg.lstsq(X, y.unsqueeze(-1)).solution.squeeze(-1) if len(y) else torch.zeros(d, dtype=DTYPE)
    mu, log_sigma = start.clone().requires_grad_(), torch.full((d,), -2.0 if len(y) else 0.0, dtype=DTYPE, requires_grad=True)
    if method == "marginal":
        mu, log_sigma = _lbfgs(lambda mu, ls: marginal_bound(X, y, mu, ls.exp(), tau), [mu, log_sigma])
        return {"mu": mu, "sigma": log_sigma.exp()}
    m, log_s = torch.zeros(d, dtype=DTYPE, requires_grad=True), torch.full((d,), -1.0, dtype=DTYPE, requires_grad=True)
    mu, log_sigma, m, log_s = _lbfgs(lambda mu, ls, m, lss: joint_bound(X, y, mu, ls.exp(), m, lss.exp(), tau), [mu, log_sigma, m, log_s])
    return {"mu": mu, "sigma": log_sigma.exp(), "m": m, "s": log_s.exp()}


def log_posterior(X, y, w: torch.Tensor, tau: float = NOISE_PRECISION) -> torch.Tensor:
    """``log p(D | w) + log p(w)`` with the exact marginal prior, for ``w`` of shape ``(..., d)``."""
    resid = y - w @ X.T
    return 0.5 * len(y) * math.log(tau / (2 * math.pi)) - 0.5 * tau * resid.pow(2).sum(-1) + log_student_t(w).sum(-1)


def log_evidence(X, y, samples: int, generator: torch.Generator, df: float = 5.0, inflate: float = 1.2) -> Tuple[float, float, float]:
    """``log p(D)`` by importance sampling: ``(estimate, standard error, effective sample size)``.
    Proposal: a multivariate t (``df``) at the posterior mode with the Laplace covariance times
    ``inflate^2`` (heavier tails than the posterior's Gaussian part, as importance sampling needs)."""
    d = X.shape[1]
    start = torch.linalg.lstsq(X, y.unsqueeze(-1)).solution.squeeze(-1).requires_grad_()
    (mode,) = _lbfgs(lambda w: log_posterior(X, y, w), [start])
    hessian = torch.autograd.functional.hessian(lambda w: -log_posterior(X, y, w), mode)
    L = torch.linalg.cholesky(torch.linalg.inv(hessian)) * inflate
    log_det = L.diagonal().log().sum()
    const = math.lgamma((df + d) / 2) - math.lgamma(df / 2) - 0.5 * d * math.log(df * math.pi) - log_det
    log_w = []
    for start_row in range(0, samples, 20000):
        k = min(20000, samples - start_row)
        eps = torch.randn(k, d, generator=generator, dtype=DTYPE)
        chi2 = _chi2(df, k, generator)
        z = eps / (chi2 / df).sqrt().unsqueeze(-1)
        w = mode + z @ L.T
        log_q = const - 0.5 * (df + d) * torch.log1p(z.pow(2).sum(-1) / df)
        log_w.append(log_posterior(X, y, w) - log_q)
    log_w = torch.cat(log_w)
    estimate = float(torch.logsumexp(log_w, 0) - math.log(samples))
    ratio = torch.exp(log_w - log_w.max())
    ess = float(ratio.sum() ** 2 / ratio.pow(2).sum())
    se = float(ratio.std() / ratio.mean() / math.sqrt(samples))  # delta method: sd of the log of the mean
    return estimate, se, ess


def _chi2(df: float, k: int, generator: torch.Generator) -> torch.Tensor:
    """``k`` chi-squared draws with integer ``df`` through ``generator`` (sums of squared normals)."""
    if df != int(df):
        raise ValueError(f"df must be an integer, got {df}")
    return torch.randn(k, int(df), generator=generator, dtype=DTYPE).pow(2).sum(-1)


# -- the same through pyrozoo -------------------------------------------------------------------

def make_pyrozoo(method: str, n: int, d: int, K2: int, init_scale: float):
    """The concrete result's declaration of ``method`` on a linear 'network' (``nn.Linear(d, 1)``:
    8 weights and a bias, each with its own precision) with a fixed-noise Gaussian likelihood."""
    spec = declaration(DECLARATIONS[method])
    s = RunConfig(extra={"normal_gamma": (A, B), "K2": K2, "init_scale": init_scale}).settings(spec.defaults)
    model = BayesianNeuralNetwork(nn.Linear(d, 1).to(DTYPE), spec.prior(s), GaussianLikelihood(n, precision=NOISE_PRECISION))
    return spec, s, model, spec.guide(model, s)


def pyrozoo_parameters(guide, method: str) -> Dict[str, torch.Tensor]:
    """``q(w)`` (and ``q(lambda)``) of a pyrozoo mean-field guide in the order ``[weight..., bias]``
    of the independent design matrix (the precision sites are log-normal: loc/scale of log lambda)."""
    def flat(key, log_scale=False):
        table = guide.log_scales if log_scale else guide.locs
        return table[key].detach().reshape(-1)

    out = {"mu": torch.cat([flat("weight"), flat("bias")]), "sigma": torch.cat([flat("weight", True), flat("bias", True)]).exp()}
    if method == "joint":
        out["m"] = torch.cat([flat("weight__precision"), flat("bias__precision")])
        out["s"] = torch.cat([flat("weight__precision", True), flat("bias__precision", True)]).exp()
    return out


def set_pyrozoo_parameters(guide, params: Dict[str, torch.Tensor], d: int) -> None:
    """The inverse of :func:`pyrozoo_parameters` (for evaluating pyrozoo's bounds at given parameters)."""
    with torch.no_grad():
        guide.locs["weight"].copy_(params["mu"][:d].reshape(1, d))
        guide.locs["bias"].copy_(params["mu"][d:])
        guide.log_scales["weight"].copy_(params["sigma"][:d].log().reshape(1, d))
        guide.log_scales["bias"].copy_(params["sigma"][d:].log())
        if "m" in params:
            guide.locs["weight__precision"].copy_(params["m"][:d].reshape(1, d))
            guide.locs["bias__precision"].copy_(params["m"][d:])
            guide.log_scales["weight__precision"].copy_(params["s"][:d].log().reshape(1, d))
            guide.log_scales["bias__precision"].copy_(params["s"][d:].log())


def fit_pyrozoo(method: str, x, y, *, K2: int, steps: int, lr: float, init_scale: float, seed: int) -> Dict[str, torch.Tensor]:
    """Trains the declaration of ``method`` by :func:`~pyrozoo.inference.fit`, full batch."""
    pyro.clear_param_store()
    set_seed(seed)
    spec, s, model, guide = make_pyrozoo(method, len(x), x.shape[1], K2, init_scale)
    fit(model, guide, (x, y.unsqueeze(-1)), epochs=steps, batch_size=len(x), lr=lr, lr_schedule=linear_to_zero(steps), seed=seed, progress=False, **spec.fit_arguments(s, steps))
    return pyrozoo_parameters(guide, method)


@torch.no_grad()
def pyrozoo_bound_draws(method: str, x, y, params, *, K2: int, particles: int, seed: int) -> torch.Tensor:
    """``particles`` one-particle values of the bound pyrozoo trains ``method`` with, on the
    training path (``objective.differentiable_loss``), at the given parameters."""
    pyro.clear_param_store()
    set_seed(seed)
    spec, s, model, guide = make_pyrozoo(method, len(x), x.shape[1], K2, 0.1)
    objective = spec.fit_arguments(s, 1)["objective"] if spec.objective is not None else ClosedFormKL_ELBO()
    target = y.unsqueeze(-1)
    guide(x, target)
    set_pyrozoo_parameters(guide, params, x.shape[1])
    return torch.tensor([-float(objective.differentiable_loss(model, guide, x, target)) for _ in range(particles)], dtype=DTYPE)


# -- data ---------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _concrete_split(data_dir, k: int):
    return UCIDataset("concrete", data_dir).split(k)


def subset(data_dir, seed: int, n: int):
    """``n`` random rows (by ``seed``) of concrete split ``seed``'s training rows, standardised
    with that split's training statistics: ``(x, y, X)`` with ``X = [x, 1]``."""
    split = _concrete_split(data_dir, seed)
    if n > len(split.y_train):
        raise ValueError(f"--sizes: {n} rows asked, split {seed} has {len(split.y_train)} training rows")
    rows = torch.randperm(len(split.y_train), generator=torch.Generator().manual_seed(1000 + seed))[:n]
    x, y = split.x_train[rows].to(DTYPE), split.y_train[rows].to(DTYPE)
    return x, y, torch.cat([x, torch.ones(n, 1, dtype=DTYPE)], 1)


# -- one (size, seed) cell ----------------------------------------------------------------------

def score(X, y, params, log_ev: float) -> Dict[str, float]:
    """The exact marginal ELBO of ``q(w)`` (quadrature), its KL to the posterior, and for a joint
    posterior its own bound and the expected KL between ``q(lambda)`` and ``p(lambda | w)``."""
    with torch.no_grad():
        lm = float(marginal_bound(X, y, params["mu"], params["sigma"]))
        row = {"marginal_elbo": lm, "kl_to_posterior": log_ev - lm, "joint_bound": float("nan"), "expected_hyper_kl": float("nan")}
        if "m" in params:
            row["joint_bound"] = float(joint_bound(X, y, params["mu"], params["sigma"], params["m"], params["s"]))
            row["expected_hyper_kl"] = float(expected_hyper_kl(params["mu"], params["sigma"], params["m"], params["s"]))
    return row


def run_cell(args, n: int, seed: int, implementations) -> list:
    x, y, X = subset(args.data_dir, seed, n)
    generator = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    log_ev, log_ev_se, ess = log_evidence(X, y, args.is_samples, generator)
    base = {"part": "fit", "n": n, "seed": seed, "log_evidence": log_ev, "log_evidence_se": log_ev_se, "is_ess": ess}
    rows = []
    for impl in implementations:
        for method in METHODS:
            t1 = time.perf_counter()
            if impl == "independent":
                params = fit_independent(method, X, y)
            else:
                params = fit_pyrozoo(method, x, y, K2=args.K2, steps=args.steps, lr=args.lr, init_scale=args.init_scale, seed=seed)
            rows.append({**base, "implementation": impl, "method": method, **score(X, y, params, log_ev), "seconds": time.perf_counter() - t1})
    if not args.no_progress:
        text = ", ".join(f"{r['implementation']}/{r['method']} L_m {r['marginal_elbo']:.3f}" for r in rows)
        print(f"n {n} seed {seed}: log p(D) {log_ev:.3f} +- {log_ev_se:.3f} (ESS {ess:.0f}); {text}; {time.perf_counter() - t0:.1f} s", flush=True)
    return rows


def bound_check(args, n: int, seed: int, K2s, particles: int) -> list:
    """pyrozoo's training bounds against the independent ones at fixed parameters (the exact
    marginal and joint optima of ``(n, seed)``): mean +- s.e. over ``particles`` one-particle values each."""
    x, y, X = subset(args.data_dir, seed, n)
    generator = torch.Generator().manual_seed(10_000 + seed)
    rows = []
    for method in METHODS:
        params = fit_independent(method, X, y)
        for K2 in (K2s if method == "marginal" else (None,)):
            ours = pyrozoo_bound_draws(method, x, y, params, K2=K2 or 1, particles=particles, seed=seed)
            if method == "marginal":
                theirs = marginal_bound_mc(X, y, params["mu"], params["sigma"], K2, particles, generator)
                reference = float(marginal_bound(X, y, params["mu"], params["sigma"]))
            else:
                theirs = joint_bound(X, y, params["mu"], params["sigma"], params["m"], params["s"]).reshape(1)
                reference = float(theirs)
            se = math.sqrt(ours.var().item() / len(ours) + (theirs.var().item() / len(theirs) if len(theirs) > 1 else 0.0))
            rows.append({
                "part": "bound check", "n": n, "seed": seed, "method": method, "K2": K2 if K2 is not None else float("nan"),
                "particles": particles, "pyrozoo_bound": float(ours.mean()), "independent_bound": float(theirs.mean()),
                "difference": float(ours.mean() - theirs.mean()), "difference_se": se, "exact_value": reference,
            })
    return rows


# -- summary and verdict ------------------------------------------------------------------------

def paired(fits: pd.DataFrame, impl: str, n: int, column_a: str, method_a: str, column_b: str, method_b: str):
    """Mean, s.e. and count over seeds of ``column_a[method_a] - column_b[method_b]`` (paired by seed)."""
    cell = fits[(fits.implementation == impl) & (fits.n == n)]
    a = cell[cell.method == method_a].set_index("seed")[column_a]
    b = cell[cell.method == method_b].set_index("seed")[column_b]
    diff = (a - b).dropna()
    mean, se, n = mean_se(diff)
    return mean, se, n, float(diff.min()) if n else float("nan")


def summarize(fits: pd.DataFrame, d: int) -> pd.DataFrame:
    """Per (implementation, n): Theorem 3's fit gain ``L_m(q_m) - L_m(q_j)`` (= ``KL(q_j || post) -
    KL(q_m || post)``), the bound gap ``L_m(q_m) - L_joint(q_j)``, and their size per coefficient."""
    rows = []
    for impl in dict.fromkeys(fits.implementation):
        for n in sorted(set(fits.n)):
            gain = paired(fits, impl, n, "marginal_elbo", "marginal", "marginal_elbo", "joint")
            gap = paired(fits, impl, n, "marginal_elbo", "marginal", "joint_bound", "joint")
            cell = fits[(fits.implementation == impl) & (fits.n == n)]
            rows.append({
                "part": "summary", "implementation": impl, "n": n, "seeds": gain[2],
                "fit_gain": gain[0], "fit_gain_se": gain[1], "fit_gain_min": gain[3], "fit_gain_per_coefficient": gain[0] / d,
                "bound_gap": gap[0], "bound_gap_se": gap[1], "bound_gap_min": gap[3],
                "kl_to_posterior_marginal": cell[cell.method == "marginal"].kl_to_posterior.mean(),
                "kl_to_posterior_joint": cell[cell.method == "joint"].kl_to_posterior.mean(),
            })
    return pd.DataFrame(rows)


#: the one-coefficient grid: the data's precision about the coefficient (``h = tau * sum x^2``
#: for a regression coefficient; about 55 per row-count of 20 here) and the data's estimate of it
ONE_COEFFICIENT_PRECISIONS = (0.0, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
ONE_COEFFICIENT_MEANS = (0.0, 1.0, 3.0, 10.0)


def one_coefficient(h: float, estimate: float) -> Dict[str, float]:
    """Theorem 3's effect for one coefficient whose likelihood is ``N(estimate; w, 1/h)`` (no data
    for ``h = 0``): the exact marginal and joint optima and their marginal ELBOs. A weight of a
    network that the data barely determine is near ``h = 0``."""
    X = torch.ones(1 if h > 0 else 0, 1, dtype=DTYPE)
    y = torch.full((len(X),), estimate, dtype=DTYPE)
    tau = h if h > 0 else 1.0
    q_m, q_j = fit_independent("marginal", X, y, tau), fit_independent("joint", X, y, tau)
    with torch.no_grad():
        lm_m = float(marginal_bound(X, y, q_m["mu"], q_m["sigma"], tau))
        lm_j = float(marginal_bound(X, y, q_j["mu"], q_j["sigma"], tau))
        lj = float(joint_bound(X, y, q_j["mu"], q_j["sigma"], q_j["m"], q_j["s"], tau))
    return {
        "part": "one coefficient", "implementation": "independent", "data_precision": h, "data_estimate": estimate,
        "fit_gain": lm_m - lm_j, "bound_gap": lm_m - lj, "sigma_marginal": float(q_m["sigma"]), "sigma_joint": float(q_j["sigma"]),
    }


def verdict(summary: pd.DataFrame, checks: pd.DataFrame, fits: pd.DataFrame, coefficient: pd.DataFrame, concrete: Optional[Dict[str, float]] = None) -> str:
    """BUG when pyrozoo's training bounds differ from the re-implementation on the same parameters
    (beyond 4 standard errors); CHECK FAILED when the exact optima violate Theorem 3 (the
    re-implementation is then wrong); otherwise NOT A BUG, with the size of Theorem 3's effect,
    pyrozoo's optimisation error, and what they imply for the concrete result."""
    bad = checks[(checks.difference.abs() > 4 * checks.difference_se.clip(lower=1e-9))]
    if len(bad):
        items = "; ".join(f"{r.method}{'' if math.isnan(r.K2) else f' K2={int(r.K2)}'} (n {r.n}): pyrozoo - independent = {r.difference:+.3f} +- {r.difference_se:.3f}" for r in bad.itertuples())
        return f"Verdict: BUG. pyrozoo's training bound differs from the thesis' bound on the same parameters, beyond 4 standard errors: {items}."
    ind = summary[summary.implementation == "independent"].sort_values("n")
    if (ind.fit_gain_min < -1e-6).any() or (coefficient.fit_gain < -1e-6).any():
        return "Verdict: CHECK FAILED. The exact optima violate Theorem 3 (a negative fit gain): the re-implementation or its optimiser is wrong, and nothing is decided."
    text = (f"Verdict: NOT A BUG. pyrozoo's marginal (DSIVI, K2 = {', '.join(str(int(k)) for k in checks.K2.dropna())}) and joint training bounds "
            "equal the thesis' bounds on the same parameters (every difference within 4 standard errors)")
    parts = [f"n = {r.n}: {r.fit_gain:.2g} +- {r.fit_gain_se:.1g} nats ({r.fit_gain_per_coefficient:.1g} per coefficient; bound gap {r.bound_gap:.3f})" for r in ind.itertuples()]
    text += (". Theorem 3 holds at the exact optima in every seed; its size (marginal ELBO of the marginal optimum minus "
             f"that of the joint optimum, mean +- s.e. over seeds): {'; '.join(parts)}")
    if (ind.fit_gain < 0.1 * ind.bound_gap).all():
        text += "; the joint bound is looser by the bound gap, but that is the expected KL between q(lambda) and p(lambda | w), not a worse q(w)"
    worst = coefficient.loc[coefficient.fit_gain.idxmax()]
    free = coefficient[coefficient.data_precision == coefficient.data_precision.min()].iloc[0]
    text += (f". For one coefficient the gain is largest where the data say little: {free.fit_gain:.3f} nats at data precision "
             f"{free.data_precision:g} (joint optimum's scale {free.sigma_joint:.2f} against the marginal's {free.sigma_marginal:.2f}), "
             f"at most {worst.fit_gain:.3f} on the grid (precision {worst.data_precision:g}, estimate {worst.data_estimate:g}), "
             f"{coefficient[coefficient.data_precision == coefficient.data_precision.max()].fit_gain.max():.1g} at precision "
             f"{coefficient.data_precision.max():g}")
    pyr = summary[summary.implementation == "pyrozoo"]
    both = {impl: fits[fits.implementation == impl].set_index(["n", "seed", "method"]) for impl in IMPLEMENTATIONS if impl in set(fits.implementation)}
    if len(pyr) and len(both) == 2:
        common = both["independent"].index.intersection(both["pyrozoo"].index)
        short = both["independent"].loc[common].marginal_elbo - both["pyrozoo"].loc[common].marginal_elbo
        noise = float(pyr.fit_gain_se.max())
        text += (f". pyrozoo's stochastic training ends {short.mean():.3f} nats (at most {short.max():.3f}) below the exact optimum of the "
                 f"marginal ELBO, and its paired marginal - joint differences carry standard errors up to {noise:.3f} nats: "
                 f"{'larger' if noise > ind.fit_gain.max() else 'not larger'} than the effect itself")
    if concrete is not None:
        per_example = concrete["weights"] / concrete["rows"]
        typical, largest = float(free.fit_gain) * per_example, float(worst.fit_gain) * per_example
        half = concrete["half_width"]
        text += (f". Scaled to the concrete BNN ({concrete['weights']} weights, {concrete['rows']} training rows; committed result "
                 f"{concrete['mean']:+.3f} +- {half:.3f} nats per example, 95 % interval over {concrete['splits']} splits): if every weight "
                 f"gained as much as a coefficient at data precision {free.data_precision:g}, the gain would be {typical:.3f} nats per "
                 f"example; at the grid's largest, {largest:.3f}")
        if largest < half:
            text += (": both inside the interval, so the committed 'no difference' is the setting (an effect this small cannot be told "
                     "from zero through stochastic training over five splits), not a defect of pyrozoo's marginal bound")
        elif typical < half:
            text += (": the first inside the interval, only the grid's extreme corner outside it, so the committed 'no difference' is "
                     "what the setting predicts unless most weights sit in that corner; it is not a defect of pyrozoo's marginal bound, "
                     "which equals the thesis' on the same parameters")
        else:
            text += ": outside the interval, so the setting does not explain the committed 'no difference': look at that run's training"
    return text + "."


def concrete_result(results_dir) -> Optional[Dict[str, float]]:
    """The committed concrete comparison (``dsivi_hierarchical_bnn_concrete_runs.csv``): the paired
    marginal - joint difference of ``elbo_exact`` per example over splits, mean and 95 % t half-width;
    ``None`` when the file is not there."""
    path = results_dir / "dsivi_hierarchical_bnn_concrete_runs.csv"
    if not path.exists():
        return None
    runs = pd.read_csv(path)
    by = runs.pivot(index="split", columns="method", values="elbo_exact")
    diff = (by["marginal"] - by["joint"]).dropna()
    if len(diff) < 2:
        return None
    half = float(scipy.stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(len(diff)))
    return {"mean": float(diff.mean()), "half_width": half, "splits": len(diff)}


# -- command line -------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = study_parser(__doc__)
    parser.add_argument("--sizes", type=lambda s: [positive_int(v) for v in s.split(",")], default=[5, 20, 50, 200], help="training-set sizes (comma-separated)")
    parser.add_argument("--seeds", type=positive_int, default=5, help="seeds --seed, --seed + 1, ... (seed k uses concrete split k)")
    parser.add_argument("--steps", type=positive_int, default=2000, help="pyrozoo's full-batch Adam steps")
    parser.add_argument("--lr", type=float, default=0.02, help="pyrozoo's initial learning rate (decayed linearly to 0)")
    parser.add_argument("--init-scale", type=float, default=0.1, help="pyrozoo's initial posterior scale")
    parser.add_argument("--K2", type=positive_int, default=128, help="prior mixing draws of pyrozoo's marginal training (the concrete result's value)")
    parser.add_argument("--check-K2", type=lambda s: [positive_int(v) for v in s.split(",")], default=[1, 8, 128], help="K2 values of the bound check")
    parser.add_argument("--check-particles", type=positive_int, default=2000, help="one-particle bound values per side in the bound check")
    parser.add_argument("--is-samples", type=positive_int, default=200000, help="importance samples of the log evidence")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    sizes, n_seeds = args.sizes, args.seeds
    if args.quick:
        sizes, n_seeds = [20], 2
        args.steps, args.is_samples, args.check_particles, args.check_K2 = 100, 5000, 100, [1, 16]
    seeds = list(range(args.seed, args.seed + n_seeds))
    fits = pd.DataFrame([row for n in sizes for seed in seeds for row in run_cell(args, n, seed, IMPLEMENTATIONS)])
    checks = pd.DataFrame(bound_check(args, sizes[0], seeds[0], args.check_K2, args.check_particles))
    precisions, means = ((0.0, 1.0, 100.0), (0.0, 3.0)) if args.quick else (ONE_COEFFICIENT_PRECISIONS, ONE_COEFFICIENT_MEANS)
    coefficient = pd.DataFrame([one_coefficient(h, m) for h in precisions for m in (means if h > 0 else (0.0,))])
    summary = summarize(fits, d=9)
    concrete = concrete_result(DEFAULT_RESULTS_DIR)
    if concrete is not None:
        # the committed result's network: an MLP with the data set's hidden width (8-50-1 on concrete)
        split = _concrete_split(args.data_dir, 0)
        h = split.n_hidden
        concrete.update(weights=split.num_features * h + h + h + 1, rows=len(split.y_train))
    text = verdict(summary, checks, fits, coefficient, concrete)
    script = "studies/marginal_vs_joint.py"
    seconds = time.perf_counter() - started
    setting = (
        f"Setting: Bayesian linear regression (8 concrete features and an intercept, standardised with the split's training "
        f"statistics) on n = {', '.join(map(str, sizes))} random training rows of concrete split k for seed k ({n_seeds} seeds), "
        f"noise precision fixed at {NOISE_PRECISION:.3g}; prior w | lambda ~ N(0, 1/lambda), lambda ~ Gamma({A:g}, {B:g}) per "
        "coefficient (marginal: Student-t, 2 dof, scale 1); q(w) factorised Gaussian, q(lambda) factorised log-normal (joint). "
        "independent: the exact optima (L-BFGS on the closed-form joint bound, Eq. 18, and the marginal bound, Eq. 19, with "
        "64-point Gauss-Hermite quadrature of the Student-t log density). pyrozoo: the declarations normal-gamma-joint and "
        f"normal-gamma-marginal (DSIVI_ELBO(0, K2 = {args.K2})) trained by fit, full batch, {args.steps} Adam steps from lr "
        f"{args.lr:g} decayed linearly to 0, initial scale {args.init_scale:g}. Every trained q(w) is scored exactly: "
        "marginal_elbo (Eq. 19 by quadrature), kl_to_posterior = log_evidence - marginal_elbo, and for joint fits joint_bound "
        "(Eq. 18) and expected_hyper_kl = E_q(w) KL(q(lambda) || Gamma(a + 1/2, b + w^2/2)), which equals marginal_elbo - "
        f"joint_bound. log_evidence: importance sampling with {args.is_samples} draws from a multivariate t (5 dof) at the "
        "posterior mode with 1.2 x the Laplace scale; log_evidence_se by the delta method, is_ess its effective sample size. "
        "Summary rows (mean over seeds, s.e., minimum): fit_gain = marginal_elbo(marginal fit) - marginal_elbo(joint fit), "
        "Theorem 3's KL(q_j || posterior) - KL(q_m || posterior); bound_gap = marginal_elbo(marginal fit) - joint_bound(joint fit). "
        f"Bound check (n = {sizes[0]}, seed {seeds[0]}, at the exact optima): pyrozoo's training objective "
        f"(differentiable_loss, one particle per call) against the independent Monte Carlo bound "
        f"(E log (1/K2) sum_k N(w; 0, 1/lambda_k), lambda_k ~ Gamma) and the closed-form joint bound, {args.check_particles} "
        "particles each; difference_se from the two sample variances; exact_value: Eq. 19 (marginal) or Eq. 18 (joint) "
        "without Monte Carlo. One-coefficient rows: a single coefficient with the same prior whose likelihood is "
        "N(data_estimate; w, 1/data_precision) (no data at precision 0), exact optima; sigma_marginal / sigma_joint: the "
        "optimal posterior scales. All values in nats for the whole training set. The concrete comparison in the verdict "
        "reads docs/results/dsivi_hierarchical_bnn_concrete_runs.csv (elbo_exact per example, paired by split)."
    )
    notes = study_notes(text, setting, script, ['pyrozoo'], seconds)
    fits = fits.assign(seed=fits.seed.astype(object))
    table = pd.concat([summary, fits, coefficient, checks], ignore_index=True)
    columns = [
        "part", "implementation", "method", "n", "seed", "seeds", "fit_gain", "fit_gain_se", "fit_gain_min", "fit_gain_per_coefficient",
        "bound_gap", "bound_gap_se", "bound_gap_min", "kl_to_posterior_marginal", "kl_to_posterior_joint", "log_evidence", "log_evidence_se",
        "is_ess", "marginal_elbo", "joint_bound", "expected_hyper_kl", "kl_to_posterior", "data_precision", "data_estimate",
        "sigma_marginal", "sigma_joint", "K2", "particles", "pyrozoo_bound",
        "independent_bound", "difference", "difference_se", "exact_value", "seconds",
    ]
    return write_study(table, STEM, args.results_dir, title="Controlled experiment: does marginal training of the hierarchical prior fit better than joint training?", verdict=text, notes=notes, shown=[summary, coefficient, checks], columns=columns)


if __name__ == "__main__":
    run_main(main)
