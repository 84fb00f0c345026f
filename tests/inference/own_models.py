"""A user's own Pyro models, written the way Pyro documents them (issue 42): functions
``model(x, y=None)`` and ``PyroModule``s with ``PyroSample`` weights, with a full data plate
or one that subsamples itself. Each case knows what an exact answer is where one exists.

:data:`CASES` is the registry the calling-convention and prediction tests run over; every
model has a twin written with the other plate style (:attr:`OwnModel.twin`), so prediction on
a self-subsampling model can be checked against the same model on a full plate, exactly.
"""

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import config_enumerate
from pyro.nn import PyroModule, PyroSample

from pyrozoo.data import linear_regression

PROBLEM = linear_regression(n=120, d=3, noise_scale=0.5, prior_scale=1.0, orthogonal=True, seed=3, dtype=torch.float32)
SUBSAMPLE = 32


def linear(x, y=None, subsample_size=None):
    """Conjugate linear regression with known noise: the exact posterior is Gaussian."""
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), PROBLEM.prior_scale).to_event(1))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        return pyro.sample("y", dist.Normal(x[idx] @ w, PROBLEM.noise_scale), obs=None if y is None else y[idx])


def poisson_glm(x, y=None, subsample_size=None):
    """Poisson regression with a log link."""
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        return pyro.sample("y", dist.Poisson((x[idx] @ w).exp()), obs=None if y is None else y[idx])


def heteroscedastic(x, y=None, subsample_size=None):
    """A mean and a log-scale, both linear in x."""
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    v = pyro.sample("v", dist.Normal(torch.zeros(x.shape[1]), 0.5).to_event(1))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        return pyro.sample("y", dist.Normal(x[idx] @ w, (x[idx] @ v).exp()), obs=None if y is None else y[idx])


def logistic(x, y=None, subsample_size=None):
    """Binary logistic regression (a Bernoulli site: scored as classification)."""
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), 1.0).to_event(1))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        return pyro.sample("y", dist.Bernoulli(logits=x[idx] @ w), obs=None if y is None else y[idx])


@config_enumerate
def mixture(x, y=None, subsample_size=None):
    """Two Gaussian components with equal weights, the assignment summed out (enumerated)."""
    locs = pyro.sample("locs", dist.Normal(torch.tensor([-1.0, 1.0]), 5.0).to_event(1))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        a = pyro.sample("a", dist.Categorical(torch.tensor([0.5, 0.5])))
        return pyro.sample("y", dist.Normal(locs[a], 0.5), obs=None if y is None else y[idx])


def hierarchical(x, y=None, subsample_size=None):
    """A global scale over the weights and an unknown noise scale (two positive latents)."""
    tau = pyro.sample("tau", dist.HalfNormal(1.0))
    w = pyro.sample("w", dist.Normal(torch.zeros(x.shape[1]), tau).to_event(1))
    sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        return pyro.sample("y", dist.Normal(x[idx] @ w, sigma), obs=None if y is None else y[idx])


#: the sparse regression's prior scale (Laplace) and known noise scale
SPARSE_PRIOR_SCALE, SPARSE_NOISE_SCALE = 0.1, 1.0


def sparse_regression(x, y=None, subsample_size=None):
    """p = 200 weights under a Laplace prior, n = 100, three signals, unit noise."""
    w = pyro.sample("w", dist.Laplace(torch.zeros(x.shape[1]), SPARSE_PRIOR_SCALE).to_event(1))
    with pyro.plate("data", len(x), subsample_size=subsample_size) as idx:
        return pyro.sample("y", dist.Normal(x[idx] @ w, SPARSE_NOISE_SCALE), obs=None if y is None else y[idx])


def bayesian_lasso_draws(x, y, *, num_samples: int, warmup: int = 500, seed: int = 0) -> torch.Tensor:
    r"""Exact posterior draws of :func:`sparse_regression`'s ``w`` by Gibbs sampling (Park &
    Casella 2008, with the noise scale known): a Laplace prior of scale :math:`b` is a
    Gaussian scale mixture, :math:`w_j \mid s_j \sim N(0, s_j)`, :math:`s_j \sim
    \mathrm{Exp}(\lambda^2 / 2)`, :math:`\lambda = 1/b`, so that :math:`w \mid s, y` is
    Gaussian and :math:`1/s_j \mid w_j` is inverse Gaussian with mean
    :math:`\lambda / |w_j|` and shape :math:`\lambda^2`. The Gaussian step draws in
    :math:`O(n^2 p)` for :math:`p > n` (Bhattacharya, Chakraborty & Mallick 2016)."""
    rng = np.random.default_rng(seed)
    phi = x.double().numpy() / SPARSE_NOISE_SCALE
    alpha = y.double().numpy() / SPARSE_NOISE_SCALE
    n, p = phi.shape
    lam = 1.0 / SPARSE_PRIOR_SCALE
    variances = np.full(p, SPARSE_PRIOR_SCALE**2)
    out = np.empty((num_samples, p))
    for t in range(warmup + num_samples):
        u = rng.standard_normal(p) * np.sqrt(variances)
        v = phi @ u + rng.standard_normal(n)
        solved = np.linalg.solve((phi * variances) @ phi.T + np.eye(n), alpha - v)
        w = u + variances * (phi.T @ solved)
        variances = 1.0 / rng.wald(lam / np.maximum(np.abs(w), 1e-300), lam**2)
        if t >= warmup:
            out[t - warmup] = w
    return torch.as_tensor(out, dtype=x.dtype)


#: the sparse design: n, p and the signals' positions and sizes
SPARSE_N, SPARSE_P, SPARSE_SIGNALS = 100, 200, {10: 2.0, 80: -3.0, 150: 2.5}


def sparse_design(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SPARSE_N, SPARSE_P, generator=g)
    beta = torch.zeros(SPARSE_P)
    for i, b in SPARSE_SIGNALS.items():
        beta[i] = b
    return x, x @ beta + torch.randn(SPARSE_N, generator=g)


class MLPRegression(PyroModule):
    """A PyroModule MLP with PyroSample weights and a learned noise scale, subsampling itself."""

    def __init__(self, d: int, hidden: int = 8, subsample_size: Optional[int] = SUBSAMPLE):
        super().__init__()
        self.subsample_size = subsample_size
        self.fc1 = PyroModule[torch.nn.Linear](d, hidden)
        self.fc1.weight = PyroSample(dist.Normal(0.0, 1.0).expand([hidden, d]).to_event(2))
        self.fc1.bias = PyroSample(dist.Normal(0.0, 1.0).expand([hidden]).to_event(1))
        self.fc2 = PyroModule[torch.nn.Linear](hidden, 1)
        self.fc2.weight = PyroSample(dist.Normal(0.0, 1.0).expand([1, hidden]).to_event(2))
        self.fc2.bias = PyroSample(dist.Normal(0.0, 1.0).expand([1]).to_event(1))

    def forward(self, x, y=None):
        sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
        # (the PyroSample weights are drawn where first read: outside the plate, as globals)
        mean = self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)
        with pyro.plate("data", len(x), subsample_size=self.subsample_size) as idx:
            return pyro.sample("y", dist.Normal(mean[idx], sigma), obs=None if y is None else y[idx])


@dataclass
class OwnModel:
    name: str
    #: the model with a full data plate, and the same model subsampling itself
    full: Callable
    twin: Callable
    x: torch.Tensor
    y: torch.Tensor
    #: latent sites the model enumerates (a guide leaves them out: ``hide=``)
    enumerated: tuple = ()


def _with(fn, size):
    def model(x, y=None):
        return fn(x, y, subsample_size=size)

    model.__name__ = f"{fn.__name__}_{'full' if size is None else 'subsampled'}"
    return model


def _targets(name: str, x: torch.Tensor) -> torch.Tensor:
    g = torch.Generator().manual_seed(11)
    w = torch.tensor([0.8, -0.5, 0.3])
    if name == "poisson_glm":
        return torch.poisson((x @ w).exp(), generator=g)
    if name == "logistic":
        return torch.bernoulli(torch.sigmoid(3 * x @ w), generator=g)
    if name == "heteroscedastic":
        return x @ w + (0.3 * x[:, 0]).exp() * torch.randn(len(x), generator=g)
    if name == "mixture":
        return torch.where(x[:, 0] > 0, 3.0, -2.0) + 0.5 * torch.randn(len(x), generator=g)
    if name == "hierarchical":
        return x @ w + 0.5 * torch.randn(len(x), generator=g)
    return torch.tanh(x @ w) + 0.2 * torch.randn(len(x), generator=g)


def case(name: str) -> OwnModel:
    """The registry's model ``name``, built fresh (a PyroModule is stateful)."""
    x = PROBLEM.x
    if name == "linear":
        return OwnModel(name, _with(linear, None), _with(linear, SUBSAMPLE), x, PROBLEM.y)
    if name == "mlp_pyromodule":
        pyro.set_rng_seed(0)
        return OwnModel(name, MLPRegression(x.shape[1], subsample_size=None), MLPRegression(x.shape[1]), x, _targets(name, x))
    if name == "sparse_regression":
        xs, ys = sparse_design()
        return OwnModel(name, _with(sparse_regression, None), _with(sparse_regression, SUBSAMPLE), xs, ys)
    fn = {"poisson_glm": poisson_glm, "heteroscedastic": heteroscedastic, "logistic": logistic, "mixture": mixture, "hierarchical": hierarchical}[name]
    return OwnModel(name, _with(fn, None), _with(fn, SUBSAMPLE), x, _targets(name, x), ("a",) if name == "mixture" else ())


#: the models with a hand-written density check and a full-plate twin (the prediction tests)
CASES = ("linear", "poisson_glm", "heteroscedastic", "logistic", "mlp_pyromodule")
#: the whole registry (issue 42): those, a mixture with an enumerated assignment, a
#: hierarchical model with a global scale and a sparse regression with p = 200 > n
REGISTRY = CASES + ("mixture", "hierarchical", "sparse_regression")
