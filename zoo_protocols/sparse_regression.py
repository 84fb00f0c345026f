"""The large-p-small-n linear regression of Deng et al. (2019), Sec. 5.1: its data, its
methods (SGLD-SA, SGLD-EM and SGLD on the SSGL model, evaluated from their declarations in
:mod:`zoo_protocols.methods`) and one run. ``reproductions/sparse_regression.py`` runs it and writes the
tables and figures; its docstring describes the settings.
"""

import math
from typing import Optional, Tuple

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.inference.posterior_averaging import StepSizeWeightedAverage
from pyrozoo.inference.step_sizes import PolynomialDecay
from pyrozoo.models import BayesianNeuralNetwork, GaussianLikelihood
from pyrozoo.utils import set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration

METHODS = ("sgld-sa", "sgld-em", "sgld")
#: SA step size and minibatch size: the paper's Sec. 5.1 text, and the authors' R script
RECIPES = {"paper": (PolynomialDecay(10.0, 0.7, offset=1000.0), 50), "authors-script": (0.1, None)}
#: what identifies a run: the rows of the per-run CSV and of its trajectories share it
RUN_KEY = ["method", "v0", "sigma", "seed"]
COLUMNS = RUN_KEY + ["mae", "mse"]
TRAJECTORY_COLUMNS = RUN_KEY + ["step", "sigma_k", "rho_mean", "delta_k"]
TRAJECTORY_POINTS = 50
#: a run whose final sum of rho is below this expects no weight in the slab: every coefficient,
#: the three signals included, sits in the Laplace spike
SPIKE_ONLY_SLAB_COUNT = 0.5
#: the plot separates runs by the issue's bound on SGLD-SA's test MAE
MAE_BOUND = 2.0
NUM_TRAIN = 100
#: the authors' thinning and burn-in (100k of 500k iterations) and the paper's epsilon_k = 0.001 k^(-1/3)
DEFAULT_THIN, DEFAULT_BURN_IN, DEFAULT_LR = 100, 0.2, 1e-3
NUM_PREDICTORS = 1000

#: Deng et al. (2019), Table 1: MAE / MSE on the test set, by (v0, initial sigma)
PUBLISHED = {
    ("sgld-sa", 0.01, 2.0): (1.89, 5.56), ("sgld-sa", 0.1, 2.0): (1.72, 5.64), ("sgld-sa", 0.01, 1.0): (1.48, 3.51), ("sgld-sa", 0.1, 1.0): (1.54, 4.42),
    ("sgld-em", 0.01, 2.0): (3.49, 19.31), ("sgld-em", 0.1, 2.0): (2.23, 8.22), ("sgld-em", 0.01, 1.0): (2.23, 19.28), ("sgld-em", 0.1, 1.0): (2.07, 6.94),
    ("sgld", 0.01, 2.0): (15.85, 416.39), ("sgld", 0.1, 2.0): (15.85, 416.39), ("sgld", 0.01, 1.0): (11.86, 229.38), ("sgld", 0.1, 1.0): (7.72, 88.90),
}


def simulate(seed: int, n: int = NUM_TRAIN, p: int = NUM_PREDICTORS, n_test: int = 50, dtype=torch.float64):
    """The Sec. 5.1 data: AR(1) predictors with correlation 0.6, three signals, noise variance 3."""
    g = torch.Generator().manual_seed(seed)

    def predictors(m):
        z = torch.randn(m, p, generator=g, dtype=dtype)
        x = torch.empty_like(z)
        x[:, 0] = z[:, 0]
        for j in range(1, p):  # stationary AR(1): unit variances, Sigma_ij = 0.6^|i-j|
            x[:, j] = 0.6 * x[:, j - 1] + 0.8 * z[:, j]
        return x

    beta = torch.zeros(p, dtype=dtype)
    beta[:3] = torch.tensor([3.0, 2.0, 1.0], dtype=dtype) + 0.2 * torch.randn(3, generator=g, dtype=dtype)
    x, x_test = predictors(n), predictors(n_test)
    noise = math.sqrt(3.0)
    y = x @ beta + noise * torch.randn(n, generator=g, dtype=dtype)
    y_test = x_test @ beta + noise * torch.randn(n_test, generator=g, dtype=dtype)
    return x, y, x_test, y_test, beta


#: this protocol's methods: name -> the declaration it evaluates
DECLARATIONS = {"sgld-sa": "sgld-sa", "sgld-em": "sgld-em", "sgld": "sgld-ssgl"}


def protocol_settings(v0: float, sigma: float, p: int, update_delta: bool, sa_step_size, delta_prior: Optional[Tuple[float, float]] = None) -> dict:
    """The Sec. 5.1 SSGL settings (over the declarations'): v1 = 10, nu = lambda = 1, a = 1,
    b = p, kappa_0 = kappa_1 = 1 and sigma at their initial values as in the authors' script.

    :param delta_prior: ``(a, b)`` of the Beta prior on delta instead of the paper's ``(1, p)``
        (beyond the paper). With ``a = 1`` Eq. 15's update ``(sum rho + a - 1) / (a + b + p - 2)``
        reaches 0 when every weight leaves the slab, and a chain that gets there stays spike-only
        (6 of our 20 at 500k iterations); ``a > 1`` keeps delta at least ``(a - 1) / (a + b + p - 2)``.
    """
    a, b = delta_prior if delta_prior is not None else (1.0, float(p))
    return {
        "v0": v0, "v1": 10.0, "sparse": {"expose_parameters": ["weight"]}, "bias_scale": 1.0, "nu": 1.0, "lam": 1.0, "a": float(a), "b": float(b),
        "sigma": sigma, "kappa0": 1.0, "kappa1": 1.0, "update_delta": update_delta, "omega": sa_step_size,
    }


def build(method: str, v0: float, sigma: float, p: int, n: int, device, dtype, update_delta: bool = True, sa_step_size=RECIPES["paper"][0], delta_prior: Optional[Tuple[float, float]] = None):
    """Model and sampler adaptations for one method, from its declaration (initial values as in
    the authors' script)."""
    spec = declaration(DECLARATIONS[method])
    net = nn.Linear(p, 1, bias=False).to(device=device, dtype=dtype)
    with torch.no_grad():
        net.weight.normal_(0.0, 0.1)
    s = RunConfig().settings(protocol_settings(v0, sigma, p, update_delta, sa_step_size, delta_prior), spec.defaults)
    # SA and EM tie the noise precision to 1/sigma^2; the plain sampler keeps sigma frozen
    precision = 1.0 / sigma**2 if method == "sgld" else dist.Gamma(0.5, 0.5)
    model = BayesianNeuralNetwork(net, spec.prior(s), GaussianLikelihood(n, precision=precision))
    return model, spec.adaptations(model, s), spec, s


def run_one(method, v0, sigma, seed, args, device):
    x, y, x_test, y_test, beta = simulate(seed)
    x, y, x_test, y_test = (t.to(device) for t in (x, y, x_test, y_test))
    set_seed(seed)
    pyro.clear_param_store()
    model, adaptations, spec, s = build(method, v0, sigma, x.shape[1], len(x), device, x.dtype, not args.fix_delta, RECIPES[args.recipe][0], args.delta_prior)
    sampler = spec.sampler(model, s, PolynomialDecay(args.lr, 1.0 / 3.0), adaptations=adaptations)
    prediction = StepSizeWeightedAverage()
    draws = []

    def on_sample(s, k, weight):
        b = s.values()["weight"].reshape(-1)
        prediction.update(x_test @ b, weight)
        draws.append(b[:3].cpu())

    burn_in = int(args.burn_in * args.iterations)
    batch_size = args.batch_size or len(x)
    history = sampler.run((x, y.unsqueeze(-1)), num_steps=args.iterations, batch_size=batch_size, burn_in=burn_in, thin=args.thin, on_sample=on_sample, seed=seed, progress=not args.no_progress, log_every=max(args.iterations // TRAJECTORY_POINTS, 1))
    residual = prediction.value - y_test
    # the latent variables' path (SA and EM only): it shows which fixed point a chain settled in
    path = history.rename(columns={"steps": "step", "sigma": "sigma_k", "delta_mean": "delta_k"})[TRAJECTORY_COLUMNS[4:]] if adaptations else None
    return {"mae": float(residual.abs().mean()), "mse": float(residual.square().mean())}, torch.stack(draws), beta[:3], path
