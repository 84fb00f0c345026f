"""The models a new user writes against the zoo (issue 22 §4), as small test fixtures.

Each is what the README invites: a plain Pyro model with no parameters of its own (a 10-class
multiclass logistic regression; a hierarchical regression with a positive scale latent) or a
small CNN wrapped in :class:`~pyrozoo.models.BayesianNeuralNetwork`, on synthetic data of a
realistic shape, with a held-out test set and the score a user would read (test accuracy or
test log-likelihood under the posterior predictive). Every model is called as
``model(x, y=None, subsample=None)``, as :func:`~pyrozoo.inference.fit` and ``SVI`` call it.

:func:`train` fits a guide with an objective through ``fit`` (full batch) or plain
``pyro.infer.SVI``; :func:`score` reads the problem's metric. Tests compare a combination
against the MAP / mean-field ELBO fit of the same problem under the same budget.
"""

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo.inference import fit
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior


@dataclass
class UserProblem:
    """A model with its data and the metric a user reads."""

    name: str
    model: Callable
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    #: "accuracy" or "test_ll" (per test example, nats)
    metric: str
    #: chance level of the metric (accuracy of the most frequent class), where it has one
    chance: Optional[float] = None
    #: ``(draws, x) -> (S, n[, classes])`` per-draw log p(y_test | draw) of a plain Pyro model; None: a classifier BNN (its logits)
    log_predictive: Optional[Callable[[Dict[str, torch.Tensor], torch.Tensor], torch.Tensor]] = None
    sites: Optional[List[str]] = None


def _plate_size(x, subsample, n_train):
    # the training size while fitting (the plate scales a minibatch by N/n); len(x) at prediction
    return n_train if subsample is not None else len(x)


def multiclass_logistic(n_train: int = 1000, n_test: int = 500, dim: int = 20, classes: int = 10, seed: int = 0) -> UserProblem:
    """10-class logistic regression on 20-dim Gaussian clusters (centres ~ N(0, 2^2), unit
    noise 1.5): ``W ~ N(0, 1)``, ``b ~ N(0, 1)``, ``y ~ Categorical(x W + b)``; 210 latents,
    no parameters of the model's own."""
    g = torch.Generator().manual_seed(seed)
    centres = 2.0 * torch.randn(classes, dim, generator=g)

    def draw(n):
        y = torch.randint(0, classes, (n,), generator=g)
        return centres[y] + 1.5 * torch.randn(n, dim, generator=g), y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)

    def model(x, y=None, subsample=None):
        W = pyro.sample("W", dist.Normal(torch.zeros(dim, classes), 1.0).to_event(2))
        b = pyro.sample("b", dist.Normal(torch.zeros(classes), 1.0).to_event(1))
        with pyro.plate("data", _plate_size(x, subsample, n_train), subsample=subsample):
            return pyro.sample("y", dist.Categorical(logits=x @ W + b), obs=y)

    def log_predictive(draws, x):
        logits = x @ draws["W"].reshape(-1, dim, classes) + draws["b"].reshape(-1, 1, classes)
        return logits.log_softmax(-1)  # (S, n, classes): every class, for the predictive mean

    chance = float(torch.bincount(y_test, minlength=classes).max()) / n_test
    return UserProblem("logistic", model, x_train, y_train, x_test, y_test, "accuracy", chance, log_predictive, ["W", "b"])


def hierarchical_regression(n_train: int = 200, n_test: int = 500, dim: int = 8, seed: int = 0) -> UserProblem:
    """Linear regression with a hierarchical scale: ``tau ~ HalfNormal(1)``,
    ``w ~ N(0, tau^2)``, ``sigma ~ HalfNormal(1)``, ``y ~ N(x w, sigma^2)``; two positive
    latents, no parameters of the model's own. Data: ``w ~ N(0, 0.8^2)``, ``sigma = 0.5``."""
    g = torch.Generator().manual_seed(seed)
    w_true = 0.8 * torch.randn(dim, generator=g)

    def draw(n):
        x = torch.randn(n, dim, generator=g)
        return x, x @ w_true + 0.5 * torch.randn(n, generator=g)

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)

    def model(x, y=None, subsample=None):
        tau = pyro.sample("tau", dist.HalfNormal(1.0))
        w = pyro.sample("w", dist.Normal(torch.zeros(dim), tau).to_event(1))
        sigma = pyro.sample("sigma", dist.HalfNormal(1.0))
        with pyro.plate("data", _plate_size(x, subsample, n_train), subsample=subsample):
            return pyro.sample("y", dist.Normal(x @ w, sigma), obs=y)

    def log_predictive(draws, x):
        mean = draws["w"].reshape(-1, dim) @ x.T
        return dist.Normal(mean, draws["sigma"].reshape(-1, 1)).log_prob(y_test)  # (S, n)

    return UserProblem("hierarchical", model, x_train, y_train, x_test, y_test, "test_ll", None, log_predictive, ["w", "sigma", "tau"])


class TinyCNN(nn.Module):
    """One 3x3 convolution (4 channels), ReLU, 2x2 max-pool, a linear read-out: 8x8 images to 10 logits."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.out = nn.Linear(4 * 4 * 4, classes)

    def forward(self, x):
        h = nn.functional.max_pool2d(torch.relu(self.conv(x.reshape(-1, 1, 8, 8))), 2)
        return self.out(h.flatten(1))


def small_cnn(n_train: int = 500, n_test: int = 500, classes: int = 10, seed: int = 0) -> UserProblem:
    """A small CNN in a ``BayesianNeuralNetwork`` (``N(0, 1)`` prior on every weight) on
    8x8 images: one random template per class, a random shift of up to one pixel, noise 0.8."""
    g = torch.Generator().manual_seed(seed)
    templates = torch.randn(classes, 10, 10, generator=g)

    def draw(n):
        y = torch.randint(0, classes, (n,), generator=g)
        i, j = torch.randint(0, 3, (2, n), generator=g)
        rows = (i[:, None] + torch.arange(8))[:, :, None]
        cols = (j[:, None] + torch.arange(8))[:, None, :]
        images = templates[y[:, None, None], rows, cols]
        return (images + 0.8 * torch.randn(n, 8, 8, generator=g)).reshape(n, 64), y

    x_train, y_train = draw(n_train)
    x_test, y_test = draw(n_test)
    torch.manual_seed(seed)  # the network's initialisation (the guides start at it)
    model = BayesianNeuralNetwork(TinyCNN(classes), NormalPrior(1.0), CategoricalLikelihood(n_train))
    chance = float(torch.bincount(y_test, minlength=classes).max()) / n_test
    return UserProblem("cnn", model, x_train, y_train, x_test, y_test, "accuracy", chance)


#: the problems, by name (tests parametrize over these)
PROBLEMS = {"logistic": multiclass_logistic, "hierarchical": hierarchical_regression, "cnn": small_cnn}


def train(problem: UserProblem, guide, objective, *, steps: int, lr: float, seed: int = 0, via: str = "fit"):
    """Full-batch training of ``guide`` for ``steps`` steps of Adam at ``lr``, through
    :func:`~pyrozoo.inference.fit` (``via="fit"``) or plain ``pyro.infer.SVI`` (``via="svi"``)."""
    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    x, y = problem.x_train, problem.y_train
    if via == "fit":
        return fit(problem.model, guide, (x, y), epochs=steps, objective=objective, batch_size=len(x), lr=lr, progress=False, seed=seed)
    svi = pyro.infer.SVI(problem.model, guide, pyro.optim.Adam({"lr": lr}), objective)
    idx = torch.arange(len(x))
    for _ in range(steps):
        svi.step(x, y, idx)
    return None


@torch.no_grad()
def per_example(problem: UserProblem, guide, num_samples: int = 100, seed: int = 0) -> torch.Tensor:
    """Per test example: whether the posterior predictive's mean probabilities classify it
    correctly (0/1), or its log predictive density ``log (1/S) sum_s p(y | draw_s)``, from
    ``num_samples`` draws of ``guide``."""
    pyro.set_rng_seed(seed)
    if problem.log_predictive is None:
        samples = pyro.infer.Predictive(problem.model, guide=guide, num_samples=num_samples, return_sites=["_RETURN"])(problem.x_test)
        log_p = samples["_RETURN"].log_softmax(-1)  # a classifier BNN's logits, (S, n, classes)
    else:
        draws = pyro.infer.Predictive(problem.model, guide=guide, num_samples=num_samples, return_sites=problem.sites)(problem.x_test)
        log_p = problem.log_predictive(draws, problem.x_test)
    log_mean = torch.logsumexp(log_p, 0) - math.log(num_samples)
    if problem.metric == "accuracy":
        return (log_mean.argmax(-1) == problem.y_test).to(log_mean.dtype)
    return log_mean


def score(problem: UserProblem, guide, num_samples: int = 100, seed: int = 0) -> float:
    """The problem's metric: the mean of :func:`per_example`."""
    return float(per_example(problem, guide, num_samples, seed).mean())


def quality_floor(problem: UserProblem, baseline: torch.Tensor, fraction: float = 0.9, z: float = 3.0) -> float:
    """The least score a combination must reach against a baseline fit's :func:`per_example`
    values: for accuracy, ``fraction`` of the baseline's gain over chance; for test
    log-likelihood, the baseline's mean minus ``z`` standard errors of it (the test set's
    sampling error of the mean)."""
    mean = float(baseline.mean())
    if problem.metric == "accuracy":
        return problem.chance + fraction * (mean - problem.chance)
    return mean - z * float(baseline.std()) / len(baseline) ** 0.5
