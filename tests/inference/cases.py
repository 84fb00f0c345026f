"""Small models shared by the inference and guide tests."""

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.data import linear_regression
from pyrozoo.models import MLP, BayesianNeuralNetwork, GaussianLikelihood, NormalPrior, ScaleMixturePrior


def linear_regression_model(problem, dtype=torch.float64, device="cpu", dataset_size=None):
    """Bayesian linear regression ``y ~ N(x w, noise^2)``, ``w ~ N(0, prior^2)`` as a BNN of a bias-free ``nn.Linear``."""
    net = nn.Linear(problem.x.shape[1], 1, bias=False).to(device=device, dtype=dtype)
    likelihood = GaussianLikelihood(dataset_size, precision=problem.noise_scale**-2)
    return BayesianNeuralNetwork(net, NormalPrior(problem.prior_scale), likelihood)


def small_bnn(prior="normal", precision="random", in_features=5, hidden=7, dataset_size=100, device="cpu", dtype=torch.float32):
    priors = {"normal": lambda: NormalPrior(1.0), "mixture": lambda: ScaleMixturePrior(0.5, 1.0, 0.1)}
    precision_arg = dist.Gamma(2.0, 2.0) if precision == "random" else 4.0
    net = MLP(in_features, [hidden], 1).to(device=device, dtype=dtype)
    return BayesianNeuralNetwork(net, priors[prior](), GaussianLikelihood(dataset_size, precision=precision_arg))


def conjugate_problem(orthogonal=True, n=40, d=3, seed=0):
    return linear_regression(n=n, d=d, noise_scale=0.7, prior_scale=1.3, orthogonal=orthogonal, seed=seed)


def unscaled_regression_model(x, y, idx):
    """A minibatch model without the N/n scale of a subsampled plate: a wrong SG-MCMC target."""
    w = pyro.sample("w", dist.Normal(torch.zeros(3, dtype=x.dtype), 1.0).to_event(1))
    with pyro.plate("data", len(x)):
        pyro.sample("obs", dist.Normal(x @ w, 1.0), obs=y)
