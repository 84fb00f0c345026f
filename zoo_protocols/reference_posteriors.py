"""Reference posteriors: full-batch NUTS on small Bayesian neural networks over real data,
and conjugate models whose posterior is exact (issue 22, section 1).

Every problem is a pyrozoo model, ``BayesianNeuralNetwork(MLP(...), NormalPrior(s),
GaussianLikelihood(N, precision=1/sigma^2) | CategoricalLikelihood(N))`` on a fixed training set
(:func:`reference_model`), so any prior, guide and objective of the zoo can be run on *the same
posterior* and scored against the stored reference (:func:`load_reference`). NUTS (Hoffman &
Gelman 2014, Pyro's multinomial variant) runs on a hand-written potential over one flat
parameter vector (:class:`FlatPotential`), tested to equal minus the log joint of the pyrozoo
model, so that no step runs Pyro's effect stack.

The problems (:data:`PROBLEMS`):

* ``<uci>_mlp`` for bostonHousing, concrete, energy and yacht: split 0 of the standard splits
  (Hernandez-Lobato & Adams 2015), inputs and targets standardised with the training split's
  statistics (:class:`pyrozoo.data.UCIDataset`; concrete keeps 450 of its 927 and energy 300 of its
  691 training rows, :data:`UCI_TRAIN_SIZE`, and all their test rows), a one-hidden-layer ReLU network of
  :data:`UCI_HIDDEN` units, ``NormalPrior`` of scale :data:`UCI_PRIOR_SCALE` on every weight and
  bias, and Gaussian noise of a *fixed* standard deviation :data:`UCI_NOISE_SCALE` (standardised
  units; see below). Why this size: a leapfrog step costs one full-batch gradient plus Pyro's
  bookkeeping (~0.6 ms on one core at N < 1000, measured), and NUTS's trajectories grow with the
  ratio of the posterior's widest to narrowest scale, roughly ``s sqrt(N) / sigma`` (the prior
  bounds the directions the data leave free, the likelihood the others), and with the curvature
  the hidden units add. With ten units and ``sigma = 0.5`` NUTS needs trees of depth 8-9
  (250-600 leapfrog steps per iteration), so a chain of 600 iterations takes 2-5 CPU minutes
  and four of them converge in function space at N <= 455; with concrete's and energy's full
  training splits they did not (:data:`UCI_TRAIN_SIZE`). The network is still
  clearly nonlinear: its test error is well below the linear model's on all four sets
  (``diagnostics.md``).
* ``mnist_softmax``: multiclass logistic regression (``MLP(d, [], 10)``) on the first
  :data:`MNIST_PCA_DIMS` principal components (fitted on the training subset, then
  standardised) of :data:`MNIST_TRAIN_SIZE` MNIST training images, tested on
  :data:`MNIST_TEST_SIZE` test images. The posterior is log-concave and unimodal under the Normal
  prior (which also pins the softmax's shift invariance), so weight-space diagnostics are
  meaningful too and NUTS converges in a few hundred iterations; a hidden layer would add the
  mode structure of the regression problems at many times the cost.
* ``bostonHousing_linear``: Bayesian linear regression (``MLP(13, [], 1)``, ``NormalPrior``,
  known noise): the posterior is Gaussian and the predictive Gaussian, in closed form
  (:func:`gaussian_linear_posterior`). The noise scale maximises the model's evidence (type-II
  maximum likelihood, :func:`evidence_noise_scale`), rounded.
* ``bostonHousing_linear_nig``: the same regression with unknown noise under the conjugate
  Normal-inverse-gamma prior (``tau ~ Gamma(a0, b0)``, ``w | tau ~ N(0, v0 / tau)``): the
  posterior is Normal-Gamma and the predictive Student-t (:func:`nig_linear_posterior`). The
  weight prior depends on the noise, which ``BayesianNeuralNetwork``'s priors cannot express, so
  this problem is a plain Pyro model (:func:`nig_linear_model`).

**The fixed noise.** ``Gaussian`` takes a fixed precision, so the noise needs no latent site
(the zoo's UCI protocol puts a Gamma prior on it, which would couple one more scale to every
weight's). The noise sets NUTS's cost: in a short trial on Boston, ``sigma = 0.32`` (about the
residual noise of a well-fitted network) made nearly every iteration hit the maximum tree depth
of 10 (~900 leapfrog steps), ``sigma = 0.5`` needed ~250. :data:`UCI_NOISE_SCALE` is one value
for all four data sets (in units of the training targets' standard deviation): the noise the
evidence-maximising *linear* model finds on Boston (0.52), rounded: a regression that leaves a
quarter of the target variance to noise. It is larger than the residual noise of the better
fitting sets (energy, yacht), so those references describe this model, not the best regressor.

**Diagnostics.** Four or more chains from different MAP-like starts (a short Adam run from the
network's default initialisation, one seed per chain). A BNN's weights are not identified
(hidden units permute, ReLU units rescale), so convergence is judged in function space: the
rank-normalised split R-hat and bulk effective sample size (Vehtari et al. 2021,
:func:`rank_normalized_rhat`, :func:`bulk_ess`) of the network output at every test input (the
predictive mean function; for classification the probability of the true class) and of the
training log-likelihood, against :data:`RHAT_MAX` and :data:`ESS_MIN`. Every problem's JSON
records them with the step sizes, tree depths, divergences, times, settings, command and commit.

**Storage** (``<results_dir>/<problem>.npz``, plain arrays, read with ``allow_pickle=False``):
the test inputs and targets, and the predictive at the test inputs: for regression the mean and
variance of ``f(x)`` over all draws plus at most :data:`MAX_STORED_DRAWS` evenly thinned draws of
``f(x)`` (the predictive of ``y`` is their mixture with the fixed noise); for classification
the mean class probabilities over all draws plus :data:`MAX_STORED_PROB_DRAWS` thinned draws of
them; for both the log predictive density of each test target over all draws; for the exact
problems the posterior and predictive parameters. ``<problem>.json`` holds the diagnostics.
"""

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from torch import nn

from pyrozoo import atomic
from pyrozoo.data import UCIDataset, load_mnist
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, NormalPrior
from zoo_protocols.cli import DEFAULT_RESULTS_DIR, settings_digest
from zoo_protocols.paths import resolve_data_dir

PathLike = Union[str, Path]

#: hidden units of the UCI networks (see the module docstring for why)
UCI_HIDDEN = 10
#: ``NormalPrior`` scale of every weight and bias of the UCI networks (the zoo's UCI default)
UCI_PRIOR_SCALE = 1.0
#: fixed noise standard deviation of the UCI networks, in units of the training targets' std
UCI_NOISE_SCALE = 0.5
#: the UCI split every problem uses
UCI_SPLIT = 0
MNIST_PCA_DIMS = 10
MNIST_TRAIN_SIZE = 1000
MNIST_TEST_SIZE = 500
#: convergence thresholds every stored NUTS reference meets (function-space quantities)
RHAT_MAX = 1.05
ESS_MIN = 100.0
#: chains per problem
MIN_CHAINS = 4
#: draws of the predictive kept per problem (thinned evenly across chains): of f(x_test) for
#: regression, of the class probabilities (float16, ten per test input) for classification
MAX_STORED_DRAWS = 200
MAX_STORED_PROB_DRAWS = 100
#: file format version of the stored references
FORMAT_VERSION = 2


@dataclass(frozen=True)
class ReferenceProblem:
    """One reference problem: data, model and how its reference is computed.

    :ivar kind: ``"regression"`` / ``"classification"`` (NUTS), ``"linear"`` (Gaussian
        posterior, closed form; NUTS as a check), ``"nig"`` (Normal-inverse-gamma, closed form).
    :ivar dataset: a UCI data set name or ``"mnist"``.
    :ivar hidden: hidden layer widths of the MLP (empty: a linear model).
    :ivar noise_scale: fixed Gaussian noise std (standardised units); ``None`` for classification and NIG.
    """

    name: str
    kind: str
    dataset: str
    hidden: Tuple[int, ...] = ()
    prior_scale: float = 1.0
    noise_scale: Optional[float] = None
    train_size: Optional[int] = None
    test_size: Optional[int] = None
    pca_dims: Optional[int] = None
    # Normal-inverse-gamma hyperparameters: tau ~ Gamma(a0, b0), w | tau ~ N(0, v0 / tau)
    nig: Optional[Tuple[float, float, float]] = None
    description: str = ""

    @property
    def uses_nuts(self) -> bool:
        return self.kind in ("regression", "classification", "linear")

    @property
    def is_exact(self) -> bool:
        return self.kind in ("linear", "nig")


def _uci_problem(dataset: str, train_size: Optional[int] = None) -> ReferenceProblem:
    rows = f", the first {train_size} training rows" if train_size else ""
    return ReferenceProblem(
        f"{dataset}_mlp", "regression", dataset, (UCI_HIDDEN,), UCI_PRIOR_SCALE, UCI_NOISE_SCALE, train_size,
        description=f"{dataset} split {UCI_SPLIT}{rows}, MLP 1x{UCI_HIDDEN} ReLU, NormalPrior({UCI_PRIOR_SCALE:g}), Gaussian noise std {UCI_NOISE_SCALE:g} (fixed)",
    )


#: training rows kept of the larger training splits (the first ones: the splits' rows are in
#: random order). With all 927 of concrete's, four chains of 300 draws left 10 of its 103 test
#: inputs above the R-hat threshold (worst 1.13, bulk ESS 24; 16-49% of the iterations at the
#: maximum tree depth); with all 691 of energy's, eight chains of 300 draws settled in two
#: function-space modes (3 chains against 5, 0.1 apart at 3 of its 77 test inputs; R-hat 1.063)
#: that no chain crossed. At Boston's size (455) four chains converged; concrete at 450 rows did
#: (R-hat 1.01); energy at 450 rows did not (4 chains: R-hat 1.056, 8 chains: 1.073, at a few of
#: its 77 test inputs), at 300 rows it did (4 chains of 300 draws: R-hat 1.026, bulk ESS 110).
#: A smaller data set widens the posterior, which the chains then cross between its modes.
UCI_TRAIN_SIZE = {"concrete": 450, "energy": 300}


#: the reference problems by name
PROBLEMS: Dict[str, ReferenceProblem] = {
    p.name: p
    for p in [
        _uci_problem("bostonHousing"),
        _uci_problem("concrete", UCI_TRAIN_SIZE["concrete"]),
        _uci_problem("energy", UCI_TRAIN_SIZE["energy"]),
        _uci_problem("yacht"),
        ReferenceProblem(
            "mnist_softmax", "classification", "mnist", (), 1.0, None, MNIST_TRAIN_SIZE, MNIST_TEST_SIZE, MNIST_PCA_DIMS,
            description=f"MNIST, {MNIST_TRAIN_SIZE} training / {MNIST_TEST_SIZE} test images, {MNIST_PCA_DIMS} PCA dims, softmax regression, NormalPrior(1)",
        ),
        # noise: evidence_noise_scale of this model, 0.5206 on split 0, rounded (tested)
        ReferenceProblem(
            "bostonHousing_linear", "linear", "bostonHousing", (), 1.0, 0.52,
            description="bostonHousing split 0, Bayesian linear regression, NormalPrior(1), Gaussian noise std 0.52 (evidence maximiser)",
        ),
        ReferenceProblem(
            "bostonHousing_linear_nig", "nig", "bostonHousing", nig=(6.0, 6.0, 1.0),
            description="bostonHousing split 0, linear regression, tau ~ Gamma(6, 6), w | tau ~ N(0, 1/tau) (plain Pyro model)",
        ),
    ]
}


def reference_problems() -> List[str]:
    """The names of the reference problems, in a fixed order."""
    return list(PROBLEMS)


def get_problem(problem: Union[str, ReferenceProblem]) -> ReferenceProblem:
    if isinstance(problem, ReferenceProblem):
        return problem
    if problem not in PROBLEMS:
        raise ValueError(f"unknown reference problem {problem!r}; choose from {', '.join(PROBLEMS)}")
    return PROBLEMS[problem]


# -- data ------------------------------------------------------------------------------------

@dataclass
class ReferenceData:
    """A problem's data: float64 inputs, float64 targets (regression) or int64 labels.

    ``y_mean`` and ``y_std`` turn standardised regression targets back into original units
    (``y * y_std + y_mean``); they are 0 and 1 for classification.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    y_mean: float = 0.0
    y_std: float = 1.0

    @property
    def num_features(self) -> int:
        return self.x_train.shape[1]


def reference_data(problem, data_dir: Optional[PathLike] = None) -> ReferenceData:
    """The training and test data of ``problem`` (``data_dir``: the data root, default
    :func:`zoo_protocols.paths.default_data_dir`)."""
    spec = get_problem(problem)
    root = resolve_data_dir(data_dir)
    if spec.dataset == "mnist":
        return _mnist_pca(root, spec.train_size, spec.test_size, spec.pca_dims)
    split = UCIDataset(spec.dataset, root).split(UCI_SPLIT)
    # the split's rows are in random order, so the first rows are a random subset; the
    # standardisation stays the whole training split's
    n = spec.train_size or len(split.y_train)
    return ReferenceData(split.x_train[:n], split.y_train[:n], split.x_test, split.y_test, split.y_mean, split.y_std)


def _mnist_pca(root: Path, train_size: int, test_size: int, dims: int) -> ReferenceData:
    """The first ``train_size`` training and ``test_size`` test images, projected on the
    training subset's first ``dims`` principal components and standardised (training statistics)."""
    x_train, y_train = load_mnist("mnist", train=True, data_dir=root)
    x_test, y_test = load_mnist("mnist", train=False, data_dir=root)
    x_train = x_train[:train_size].flatten(1).double()
    x_test = x_test[:test_size].flatten(1).double()
    mean = x_train.mean(0)
    # right singular vectors: the principal axes; the sign of each is fixed (largest entry
    # positive) so that the features do not depend on the LAPACK build
    _, _, vt = torch.linalg.svd(x_train - mean, full_matrices=False)
    axes = vt[:dims]
    axes = axes * torch.sign(axes.gather(1, axes.abs().argmax(1, keepdim=True)))
    z_train, z_test = (x_train - mean) @ axes.T, (x_test - mean) @ axes.T
    scale = z_train.std(0)
    return ReferenceData(z_train / scale, y_train[:train_size].clone(), z_test / scale, y_test[:test_size].clone())


# -- models ----------------------------------------------------------------------------------

def reference_model(problem, data_dir: Optional[PathLike] = None, data: Optional[ReferenceData] = None):
    """``(model, (x_train, y_train))``: the problem's Pyro model and its training data, float64.

    For every problem but ``*_nig`` the model is a
    :class:`~pyrozoo.models.BayesianNeuralNetwork` (``model(x, y)``), whose posterior given the
    training data is the stored reference; ``*_nig`` is the plain Pyro model
    :func:`nig_linear_model` (its weight prior depends on the noise)."""
    spec = get_problem(problem)
    data = data if data is not None else reference_data(spec, data_dir)
    if spec.kind == "nig":
        a0, b0, v0 = spec.nig
        return nig_linear_model(a0, b0, v0), (data.x_train, data.y_train)
    n = len(data.y_train)
    if spec.kind == "classification":
        out, likelihood = int(data.y_train.max()) + 1, CategoricalLikelihood(n)
    else:
        out, likelihood = 1, GaussianLikelihood(n, precision=spec.noise_scale ** -2)
    net = MLP(data.num_features, list(spec.hidden), out).double()
    return BayesianNeuralNetwork(net, NormalPrior(spec.prior_scale), likelihood), (data.x_train, data.y_train)


def nig_linear_model(a0: float, b0: float, v0: float) -> Callable:
    """Linear regression ``y ~ N(x w + b, 1/tau)`` under the conjugate prior ``tau ~ Gamma(a0,
    b0)``, ``[w, b] | tau ~ N(0, v0/tau I)``: sites ``"noise_precision"``, ``"weight"``
    (features then bias, one vector) and ``"obs"`` in plate ``"data"``."""

    def model(x, y=None):
        tau = pyro.sample("noise_precision", dist.Gamma(torch.tensor(a0, dtype=x.dtype), torch.tensor(b0, dtype=x.dtype)))
        d = x.shape[1] + 1
        w = pyro.sample("weight", dist.Normal(torch.zeros(d, dtype=x.dtype), (v0 / tau).sqrt()).to_event(1))
        with pyro.plate("data", x.shape[0]):
            return pyro.sample("obs", dist.Normal(x @ w[:-1] + w[-1], tau.rsqrt()), obs=y)

    return model


class FlatPotential:
    """Minus the log joint density of a :class:`~pyrozoo.models.BayesianNeuralNetwork` whose
    network is an :class:`~pyrozoo.models.MLP` of ``nn.Linear`` layers with ReLUs, whose prior is
    a ``NormalPrior`` on every parameter and whose likelihood is a fixed-noise ``Gaussian`` or a
    ``Categorical``, over one flat vector ``theta`` of all parameters (in the model's
    ``random_parameter_names`` order, each flattened).

    ``potential(theta)`` equals ``-log p(theta, y | x)`` of the pyrozoo model, constants
    included (tested against the model's trace); :meth:`forward` runs the network on a batch of
    draws ``(S, D)`` at once.
    """

    def __init__(self, model: BayesianNeuralNetwork, x: torch.Tensor, y: torch.Tensor):
        net, prior, likelihood = model.net, model.prior, model.likelihood
        if not isinstance(net, MLP) or any(not isinstance(m, (nn.Linear, nn.ReLU)) for m in net):
            raise TypeError("FlatPotential needs an MLP of Linear layers and ReLUs")
        if not isinstance(prior, NormalPrior) or model.deterministic_parameter_names:
            raise TypeError("FlatPotential needs a NormalPrior on every parameter of the network")
        if isinstance(likelihood, GaussianLikelihood):
            if likelihood.precision is None:
                raise TypeError("FlatPotential needs a Gaussian likelihood with a fixed precision")
            self.precision = likelihood.precision
        elif not isinstance(likelihood, CategoricalLikelihood):
            raise TypeError(f"FlatPotential supports Gaussian and Categorical likelihoods, got {type(likelihood).__name__}")
        else:
            self.precision = None
        if likelihood.dataset_size is not None and likelihood.dataset_size != len(y):
            raise ValueError(f"the likelihood's dataset_size {likelihood.dataset_size} is not the {len(y)} training examples")
        self.prior_loc, self.prior_scale = float(prior.base.loc), float(prior.base.scale)
        params = dict(net.named_parameters())
        self.names = model.random_parameter_names
        self.shapes = [tuple(params[n].shape) for n in self.names]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.dim = sum(self.sizes)
        # (weight, bias) slices of theta per Linear layer, in network order
        offsets = dict(zip(self.names, np.cumsum([0] + self.sizes[:-1]).tolist()))
        self.layers = []
        for i, m in enumerate(net):
            if isinstance(m, nn.Linear):
                w, b = f"{i}.weight", f"{i}.bias"
                if b not in offsets:
                    raise TypeError("FlatPotential needs Linear layers with biases")
                self.layers.append((offsets[w], m.out_features, m.in_features, offsets[b]))
        self.x, self.y = x, y
        self._log_norm = self.dim * math.log(self.prior_scale * math.sqrt(2 * math.pi))
        if self.precision is not None:
            self.y = y.reshape(-1)
            self._log_norm += 0.5 * len(y) * (math.log(2 * math.pi) - math.log(self.precision))

    def unflatten(self, theta: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``{site name: value}`` of the pyrozoo model's sample sites (leading batch dims kept)."""
        batch = theta.shape[:-1]
        parts = torch.split(theta, self.sizes, dim=-1)
        return {n: p.reshape(*batch, *s) for n, p, s in zip(self.names, parts, self.shapes)}

    def flatten(self, values: Dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([values[n].reshape(-1) for n in self.names])

    def forward(self, theta: torch.Tensor, x: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Network output for parameters ``theta`` (``(D,)`` or ``(S, D)``) at ``x`` (default: the
        training inputs): ``(n, out)`` or ``(S, n, out)``."""
        h = self.x if x is None else x
        for k, (w0, out, inp, b0) in enumerate(self.layers):
            w = theta[..., w0:w0 + out * inp].reshape(*theta.shape[:-1], out, inp)
            b = theta[..., b0:b0 + out].unsqueeze(-2)
            h = h @ w.transpose(-1, -2) + b
            if k < len(self.layers) - 1:
                h = torch.relu(h)
        return h

    def log_likelihood(self, theta: torch.Tensor) -> torch.Tensor:
        """``log p(y | x, theta)`` of the training data, for ``(D,)`` or ``(S, D)`` parameters."""
        f = self.forward(theta)
        if self.precision is None:
            return f.log_softmax(-1).gather(-1, self.y.expand(*f.shape[:-1]).unsqueeze(-1)).squeeze(-1).sum(-1)
        r = self.y - f.squeeze(-1)
        return -0.5 * self.precision * (r * r).sum(-1) - 0.5 * len(self.y) * (math.log(2 * math.pi) - math.log(self.precision))

    def __call__(self, theta: torch.Tensor) -> torch.Tensor:
        z = (theta - self.prior_loc) / self.prior_scale
        prior = 0.5 * (z * z).sum(-1) + self.dim * math.log(self.prior_scale * math.sqrt(2 * math.pi))
        return prior - self.log_likelihood(theta)

    def pyro_potential(self, params: Dict[str, torch.Tensor]) -> torch.Tensor:
        """The ``potential_fn`` Pyro's ``HMC``/``NUTS`` take: one site ``"theta"``."""
        return self(params["theta"])

    def initial_point(self, seed: int, steps: int = 2000, lr: float = 0.01) -> torch.Tensor:
        """A MAP-like start: the network's default initialisation under ``seed`` (PyTorch's
        ``nn.Linear`` init), then ``steps`` full-batch Adam steps on the potential."""
        torch.manual_seed(seed)
        theta = torch.zeros(self.dim, dtype=self.x.dtype)
        for w0, out, inp, b0 in self.layers:
            layer = nn.Linear(inp, out)
            theta[w0:w0 + out * inp] = layer.weight.detach().reshape(-1)
            theta[b0:b0 + out] = layer.bias.detach()
        theta = theta.detach().requires_grad_()
        opt = torch.optim.Adam([theta], lr=lr)
        for _ in range(steps):
            opt.zero_grad()
            self(theta).backward()
            opt.step()
        return theta.detach()


# -- exact posteriors ------------------------------------------------------------------------

def _with_bias(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)


def gaussian_linear_posterior(x, y, prior_scale: float, noise_scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and covariance of ``[w, b]`` under ``N(0, s^2 I)`` and ``y ~ N(x w + b, sigma^2)``:
    ``Sigma = (X^T X / sigma^2 + I / s^2)^-1``, ``mu = Sigma X^T y / sigma^2`` (Bishop 2006, eq. 3.53-3.54)."""
    X = _with_bias(x)
    precision = X.T @ X / noise_scale**2 + torch.eye(X.shape[1], dtype=X.dtype) / prior_scale**2
    cov = torch.cholesky_inverse(torch.linalg.cholesky(precision))
    return cov @ X.T @ y / noise_scale**2, cov


def gaussian_linear_log_evidence(x, y, prior_scale: float, noise_scale: float) -> float:
    """``log N(y | 0, s^2 X X^T + sigma^2 I)``, the marginal likelihood (Bishop 2006, eq. 3.86)."""
    X = _with_bias(x)
    n, d = X.shape
    mu, cov = gaussian_linear_posterior(x, y, prior_scale, noise_scale)
    fit = ((y - X @ mu) ** 2).sum() / noise_scale**2 + (mu * mu).sum() / prior_scale**2
    logdet = -torch.logdet(cov) + 2 * d * math.log(prior_scale) + 2 * n * math.log(noise_scale)
    return float(-0.5 * (fit + logdet + n * math.log(2 * math.pi)))


def evidence_noise_scale(x, y, prior_scale: float, lo: float = 1e-3, hi: float = 10.0, tol: float = 1e-6) -> float:
    """The noise std maximising :func:`gaussian_linear_log_evidence` (golden-section search on
    ``log sigma``; the evidence is unimodal in it for these data)."""
    f = lambda s: -gaussian_linear_log_evidence(x, y, prior_scale, math.exp(s))  # noqa: E731
    a, b = math.log(lo), math.log(hi)
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return math.exp((a + b) / 2)


def nig_linear_posterior(x, y, a0: float, b0: float, v0: float) -> Dict[str, torch.Tensor]:
    """Normal-inverse-gamma posterior of :func:`nig_linear_model` (Murphy 2007, "Conjugate
    Bayesian analysis of the Gaussian distribution", sec. 7.6): ``tau | y ~ Gamma(a_n, b_n)``,
    ``[w, b] | tau, y ~ N(mu_n, Lambda_n^-1 / tau)`` with ``Lambda_n = X^T X + I / v0``,
    ``mu_n = Lambda_n^-1 X^T y``, ``a_n = a0 + n/2``, ``b_n = b0 + (y^T y - mu_n^T Lambda_n mu_n) / 2``.
    Marginally ``[w, b] ~ t_{2 a_n}(mu_n, b_n / a_n Lambda_n^-1)``."""
    X = _with_bias(x)
    n, d = X.shape
    lam = X.T @ X + torch.eye(d, dtype=X.dtype) / v0
    lam_inv = torch.cholesky_inverse(torch.linalg.cholesky(lam))
    mu = lam_inv @ X.T @ y
    a_n = a0 + n / 2
    b_n = b0 + 0.5 * (y @ y - mu @ lam @ mu)
    return {"mu": mu, "lambda_inv": lam_inv, "a": torch.tensor(a_n, dtype=X.dtype), "b": b_n}


# -- convergence diagnostics -----------------------------------------------------------------

def _rank_normalize(draws: torch.Tensor) -> torch.Tensor:
    """``(C, S, ...)`` draws -> normal scores of their ranks pooled over chains and draws
    (Vehtari et al. 2021, eq. 14: ``Phi^-1((r - 3/8) / (C S + 1/4))``)."""
    C, S = draws.shape[:2]
    flat = draws.reshape(C * S, -1)
    ranks = flat.argsort(0).argsort(0).to(torch.float64) + 1
    z = torch.special.ndtri((ranks - 0.375) / (C * S + 0.25))
    return z.reshape(draws.shape)


def _split_chains(draws: torch.Tensor) -> torch.Tensor:
    half = draws.shape[1] // 2
    return torch.cat([draws[:, :half], draws[:, -half:]], 0)


def rank_normalized_rhat(draws: torch.Tensor) -> torch.Tensor:
    """Rank-normalised split R-hat (Vehtari et al. 2021, sec. 4.1) of ``(chains, draws, ...)``,
    per trailing entry: Pyro's split Gelman-Rubin statistic of the rank-normal scores."""
    return pyro.ops.stats.split_gelman_rubin(_rank_normalize(draws.double()))


def bulk_ess(draws: torch.Tensor) -> torch.Tensor:
    """Bulk effective sample size (Vehtari et al. 2021, sec. 4.2) of ``(chains, draws, ...)``:
    Pyro's (Geyer) effective sample size of the rank-normal scores of the split chains."""
    return pyro.ops.stats.effective_sample_size(_split_chains(_rank_normalize(draws.double())))


# -- running NUTS ----------------------------------------------------------------------------

@dataclass
class NUTSSettings:
    """What a chain depends on besides the problem (part of the chain files' names)."""

    warmup: int = 300
    samples: int = 300
    seed: int = 0
    max_tree_depth: int = 10
    target_accept: float = 0.8
    full_mass: bool = False
    init_steps: int = 2000
    thinned_per_chain: int = MAX_STORED_DRAWS

    def digest(self, problem: ReferenceProblem) -> str:
        return settings_digest([asdict(problem), asdict(self), FORMAT_VERSION])


class _CountingNUTS(pyro.infer.NUTS):
    """Pyro's NUTS that also counts the leapfrog steps of every iteration (each base tree is one)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.leapfrogs: List[int] = []
        self._count = 0

    def _build_basetree(self, *args, **kwargs):
        self._count += 1
        return super()._build_basetree(*args, **kwargs)

    def sample(self, params):
        self._count = 0
        out = super().sample(params)
        self.leapfrogs.append(self._count)
        return out

    def cleanup(self):
        # MCMC resets the kernel when the run ends: keep what the run measured
        self.divergences = list(self._divergences)
        self.mean_accept_prob = self._mean_accept_prob
        super().cleanup()


def _evenly(n: int, k: int) -> np.ndarray:
    """``min(n, k)`` indices spread evenly over ``range(n)``, the last one included."""
    k = min(n, k)
    return np.unique(np.round(np.linspace(0, n - 1, k)).astype(int)) if k > 0 else np.zeros(0, dtype=int)


def run_chain(problem, data: ReferenceData, chain: int, settings: NUTSSettings, progress: bool = True) -> Dict[str, np.ndarray]:
    """One NUTS chain on ``problem``; returns the arrays a chain file holds:

    ``monitor`` ``(S, n_test)`` the function-space quantities R-hat is computed on (regression:
    ``f(x_test)``; classification: the probability of the true class), ``log_lik`` ``(S,)``,
    ``pred_sum`` / ``pred_sq_sum`` (sums over all draws of the predictive quantity: ``f(x_test)``
    or the class probabilities), ``pred_thin`` (evenly thinned draws of it),
    ``test_log_pred_lse`` (``logsumexp`` over the draws of ``log p(y_test | theta_s)``), ``theta`` (all
    draws, linear problems only: their weights are identified), ``leapfrogs`` per iteration
    (warmup included), ``divergent`` ``(S,)``, and scalars ``step_size``, ``accept_prob`` (mean after warmup),
    ``wall_seconds``, ``cpu_seconds``.
    """
    spec = get_problem(problem)
    model, (x, y) = reference_model(spec, data=data)
    potential = FlatPotential(model, x, y)
    seed = settings.seed * 1000 + chain
    init = potential.initial_point(seed, steps=settings.init_steps)
    pyro.set_rng_seed(seed)
    kernel = _CountingNUTS(
        potential_fn=potential.pyro_potential, jit_compile=True, ignore_jit_warnings=True,
        max_tree_depth=settings.max_tree_depth, target_accept_prob=settings.target_accept, full_mass=settings.full_mass,
    )
    mcmc = pyro.infer.MCMC(kernel, num_samples=settings.samples, warmup_steps=settings.warmup, initial_params={"theta": init}, disable_progbar=not progress)
    wall, cpu = time.perf_counter(), time.process_time()
    mcmc.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    theta = mcmc.get_samples()["theta"].detach()
    with torch.no_grad():
        out = potential.forward(theta, data.x_test)
        log_lik = potential.log_likelihood(theta)
    if spec.kind == "classification":
        pred = out.softmax(-1)
        log_pred = out.log_softmax(-1).gather(-1, data.y_test.expand(len(theta), -1).unsqueeze(-1)).squeeze(-1)
        monitor = log_pred.exp()
    else:
        pred = monitor = out.squeeze(-1)
        log_pred = dist.Normal(pred, spec.noise_scale).log_prob(data.y_test)
    divergent = np.zeros(settings.samples, dtype=bool)
    divergent[np.asarray(kernel.divergences, dtype=int)] = True
    arrays = {
        "monitor": monitor.numpy().astype(np.float32),
        "log_lik": log_lik.numpy(),
        "pred_sum": pred.sum(0).numpy(),
        "pred_sq_sum": (pred * pred).sum(0).numpy(),
        "pred_thin": pred[_evenly(len(pred), settings.thinned_per_chain)].numpy().astype(np.float32),
        "test_log_pred_lse": torch.logsumexp(log_pred, 0).numpy(),
        "leapfrogs": np.asarray(kernel.leapfrogs, dtype=np.int64),
        "divergent": divergent,
        "step_size": np.float64(kernel.step_size),
        "accept_prob": np.float64(kernel.mean_accept_prob),
        "wall_seconds": np.float64(wall),
        "cpu_seconds": np.float64(cpu),
    }
    if spec.kind == "linear":
        arrays["theta"] = theta.numpy()
    return arrays


def save_npz(path: PathLike, arrays: Dict[str, np.ndarray]) -> Path:
    """``np.savez_compressed`` of plain arrays, atomically (a reader sees the old file or the
    whole new one); strings are stored as NumPy unicode arrays, never as objects."""
    with atomic.atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **{k: np.asarray(v) for k, v in arrays.items()})
    return Path(path)


def load_npz(path: PathLike) -> Dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file, read as data (``allow_pickle=False``)."""
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def chain_path(cache_dir: PathLike, problem, settings: NUTSSettings, chain: int) -> Path:
    spec = get_problem(problem)
    return Path(cache_dir) / f"{spec.name}_{settings.digest(spec)}_chain{chain}.npz"


# -- combining chains into a reference -------------------------------------------------------

def tree_depths(leapfrogs: np.ndarray) -> np.ndarray:
    """Tree depth of each NUTS iteration from its number of leapfrog steps (a tree of depth
    ``j`` has at most ``2^j - 1`` of them; a doubling cut short by a U-turn or a divergence
    inside it still counts)."""
    return np.ceil(np.log2(np.asarray(leapfrogs) + 1)).astype(int)


def summarize_chains(problem, chains: Sequence[Dict[str, np.ndarray]], settings: NUTSSettings) -> dict:
    """Convergence diagnostics of the chains of one problem (a JSON-able dict)."""
    spec = get_problem(problem)
    monitor = torch.as_tensor(np.stack([c["monitor"] for c in chains]))
    log_lik = torch.as_tensor(np.stack([c["log_lik"] for c in chains]))
    rhat_f, ess_f = rank_normalized_rhat(monitor), bulk_ess(monitor)
    rhat_ll, ess_ll = float(rank_normalized_rhat(log_lik)), float(bulk_ess(log_lik))
    per_chain = []
    for i, c in enumerate(chains):
        depth = tree_depths(c["leapfrogs"][settings.warmup:])
        per_chain.append({
            "chain": i, "step_size": float(c["step_size"]), "accept_prob": float(c["accept_prob"]),
            "tree_depth_mean": float(depth.mean()), "tree_depth_max": int(depth.max()),
            "at_max_tree_depth": float((depth >= settings.max_tree_depth).mean()),
            "leapfrogs_mean": float(c["leapfrogs"][settings.warmup:].mean()),
            "divergences": int(c["divergent"].sum()), "wall_seconds": float(c["wall_seconds"]), "cpu_seconds": float(c["cpu_seconds"]),
        })
    quantity = "p(true class | x_test)" if spec.kind == "classification" else "f(x_test)"
    diag = {
        "monitored": f"{quantity} at each of the {monitor.shape[-1]} test inputs, and the training log-likelihood",
        "chains": len(chains), "samples_per_chain": int(monitor.shape[1]),
        "rhat_max": float(max(rhat_f.max(), rhat_ll)), "rhat_f_max": float(rhat_f.max()), "rhat_f_median": float(rhat_f.median()),
        "rhat_log_lik": rhat_ll,
        "ess_bulk_min": float(min(ess_f.min(), ess_ll)), "ess_bulk_f_min": float(ess_f.min()), "ess_bulk_f_median": float(ess_f.median()),
        "ess_bulk_log_lik": ess_ll,
        "divergences": int(sum(c["divergent"].sum() for c in chains)),
        "tree_depth_mean": float(np.mean([p["tree_depth_mean"] for p in per_chain])),
        "tree_depth_max": int(max(p["tree_depth_max"] for p in per_chain)),
        "wall_seconds": float(sum(p["wall_seconds"] for p in per_chain)),
        "cpu_seconds": float(sum(p["cpu_seconds"] for p in per_chain)),
        "per_chain": per_chain,
    }
    if "theta" in chains[0]:
        theta = torch.as_tensor(np.stack([c["theta"] for c in chains]))
        diag["rhat_theta_max"] = float(rank_normalized_rhat(theta).max())
        diag["ess_bulk_theta_min"] = float(bulk_ess(theta).min())
    diag["thresholds"] = {"rhat_max": RHAT_MAX, "ess_bulk_min": ESS_MIN, "divergences": 0}
    diag["converged"] = bool(diag["rhat_max"] < RHAT_MAX and diag["ess_bulk_min"] >= ESS_MIN and diag["divergences"] == 0)
    return diag


def combine_chains(problem, data: ReferenceData, chains: Sequence[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """The stored arrays of a NUTS reference from its chains: test data, the predictive's mean
    (and variance, for regression) over every draw, and at most :data:`MAX_STORED_DRAWS`
    (classification: :data:`MAX_STORED_PROB_DRAWS`) thinned draws."""
    spec = get_problem(problem)
    max_draws = MAX_STORED_PROB_DRAWS if spec.kind == "classification" else MAX_STORED_DRAWS
    total = sum(len(c["log_lik"]) for c in chains)
    mean = sum(c["pred_sum"] for c in chains) / total
    per_chain = max(1, max_draws // len(chains))
    draws = np.concatenate([c["pred_thin"][_evenly(len(c["pred_thin"]), per_chain)] for c in chains])
    # log (1/S) sum_s p(y | x, theta_s) over every draw of every chain
    test_log_pred = np.logaddexp.reduce(np.stack([c["test_log_pred_lse"] for c in chains]), 0) - math.log(total)
    arrays = {
        "format_version": np.int64(FORMAT_VERSION),
        "test_log_pred": test_log_pred,
        "x_test": data.x_test.numpy().astype(np.float32),
        "y_test": data.y_test.numpy() if spec.kind == "classification" else data.y_test.numpy().astype(np.float32),
        "num_draws": np.int64(total),
    }
    if spec.kind == "classification":
        arrays.update(probs_mean=mean.astype(np.float32), probs_draws=draws.astype(np.float16))
    else:
        var = sum(c["pred_sq_sum"] for c in chains) / total - mean**2
        arrays.update(
            f_mean=mean.astype(np.float32), f_var=np.maximum(var, 0).astype(np.float32), f_draws=draws.astype(np.float32),
            noise_scale=np.float64(spec.noise_scale), y_mean=np.float64(data.y_mean), y_std=np.float64(data.y_std),
        )
    if spec.kind == "linear":
        arrays.update(exact_arrays(spec, data))
    return arrays


def exact_arrays(problem, data: ReferenceData) -> Dict[str, np.ndarray]:
    """The closed-form posterior and predictive at the test inputs of a ``linear`` or ``nig`` problem."""
    spec = get_problem(problem)
    x, y, xt = data.x_train, data.y_train, _with_bias(data.x_test)
    if spec.kind == "linear":
        mu, cov = gaussian_linear_posterior(x, y, spec.prior_scale, spec.noise_scale)
        return {
            "posterior_mean": mu.numpy(), "posterior_cov": cov.numpy(),
            "exact_f_mean": (xt @ mu).numpy(), "exact_f_var": ((xt @ cov) * xt).sum(1).numpy(),
            "noise_scale": np.float64(spec.noise_scale), "y_mean": np.float64(data.y_mean), "y_std": np.float64(data.y_std),
        }
    if spec.kind == "nig":
        a0, b0, v0 = spec.nig
        post = nig_linear_posterior(x, y, a0, b0, v0)
        a, b = float(post["a"]), float(post["b"])
        shape = post["lambda_inv"] * (b / a)
        return {
            "format_version": np.int64(FORMAT_VERSION),
            "x_test": data.x_test.numpy().astype(np.float32), "y_test": data.y_test.numpy().astype(np.float32),
            "posterior_mu": post["mu"].numpy(), "posterior_lambda_inv": post["lambda_inv"].numpy(),
            "posterior_a": np.float64(a), "posterior_b": np.float64(b), "weight_df": np.float64(2 * a),
            "weight_scale_matrix": shape.numpy(),
            "predictive_df": np.float64(2 * a), "predictive_loc": (xt @ post["mu"]).numpy(),
            "predictive_scale": ((b / a) * (1 + ((xt @ post["lambda_inv"]) * xt).sum(1))).sqrt().numpy(),
            "prior": np.array([a0, b0, v0]), "y_mean": np.float64(data.y_mean), "y_std": np.float64(data.y_std),
        }
    raise ValueError(f"{spec.name} has no closed-form posterior")


def nuts_vs_exact(chains: Sequence[Dict[str, np.ndarray]], exact: Dict[str, np.ndarray]) -> dict:
    """How far the NUTS draws of a ``linear`` problem's weights lie from the exact posterior:
    the largest ``|NUTS mean - exact mean| / MCSE`` (MCSE from each weight's bulk ESS: ``sd /
    sqrt(ESS)``) and the largest relative error of the posterior standard deviations."""
    theta = np.stack([c["theta"] for c in chains])
    ess = bulk_ess(torch.as_tensor(theta)).numpy()
    flat = theta.reshape(-1, theta.shape[-1])
    sd = np.sqrt(np.diag(exact["posterior_cov"]))
    z = np.abs(flat.mean(0) - exact["posterior_mean"]) / (sd / np.sqrt(ess))
    return {"mean_error_over_mcse_max": float(z.max()), "sd_relative_error_max": float(np.abs(flat.std(0) / sd - 1).max())}


def predictive_summary(problem, arrays: Dict[str, np.ndarray]) -> dict:
    """The reference predictive's test scores (for the JSON and the table): regression ``rmse``
    and ``test_ll`` (mean log predictive density per example) in the *original* target units;
    classification ``accuracy`` and ``test_ll`` (nats)."""
    spec = get_problem(problem)
    y = arrays["y_test"]
    if spec.kind == "classification":
        return {"accuracy": float((arrays["probs_mean"].argmax(-1) == y).mean()), "test_ll": float(arrays["test_log_pred"].mean())}
    y_std = float(arrays["y_std"])
    if spec.kind == "nig":
        t = dist.StudentT(float(arrays["predictive_df"]), torch.as_tensor(arrays["predictive_loc"]), torch.as_tensor(arrays["predictive_scale"]))
        lp, mean = t.log_prob(torch.as_tensor(y, dtype=torch.float64)).numpy(), arrays["predictive_loc"]
    else:
        lp, mean = arrays["test_log_pred"], arrays["f_mean"]
    out = {"rmse": float(np.sqrt(np.mean((mean - y) ** 2)) * y_std), "test_ll": float(lp.mean() - math.log(y_std))}
    if spec.kind == "linear":
        exact = dist.Normal(torch.as_tensor(arrays["exact_f_mean"]), torch.as_tensor(arrays["exact_f_var"] + spec.noise_scale**2).sqrt())
        out["exact_test_ll"] = float(exact.log_prob(torch.as_tensor(y, dtype=torch.float64)).mean() - math.log(y_std))
    return out


# -- provenance ------------------------------------------------------------------------------

def provenance(argv: Optional[Sequence[str]] = None) -> dict:
    """Command, commit (and whether this module or the script differ from it), threads and versions."""
    from zoo_protocols import provenance as prov

    root = prov.repo_root()
    mine = ["zoo_protocols/reference_posteriors.py", "tools/reference_posteriors.py"]
    return {
        "command": " ".join(["python", *(argv if argv is not None else sys.argv)]),
        "commit": (prov.git(root, "rev-parse", "HEAD") or "").strip(),
        "builder_modified_since_commit": prov.modified(root, mine),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "pyro": pyro.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "cpu_count": os.cpu_count(),
    }


# -- loading ---------------------------------------------------------------------------------

def default_results_dir() -> Path:
    """``docs/results/reference`` of the checkout holding :mod:`zoo_protocols` (the committed references)."""
    return Path(__file__).resolve().parents[1] / DEFAULT_RESULTS_DIR / "reference"


@dataclass
class Reference:
    """A stored reference: ``x_test``, ``y_test``, every stored array (``arrays``) and the
    diagnostics (``info``, the JSON beside it)."""

    problem: str
    x_test: np.ndarray
    y_test: np.ndarray
    arrays: Dict[str, np.ndarray]
    info: dict = field(default_factory=dict)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]


def reference_stem(problem, quick: bool = False) -> str:
    return get_problem(problem).name + ("_quick" if quick else "")


def load_reference(problem, results_dir: Optional[PathLike] = None, *, quick: bool = False) -> Reference:
    """The stored reference of ``problem`` (default folder: :func:`default_results_dir`).

    Regression: ``f_mean``, ``f_var`` (over all draws), ``f_draws`` (thinned), ``noise_scale``,
    ``y_mean``, ``y_std``; classification: ``probs_mean``, ``probs_draws``; both: ``num_draws``
    and ``test_log_pred`` (per test example, ``log (1/S) sum_s p(y | x, theta_s)`` over all draws); ``linear`` adds the
    exact ``posterior_mean``, ``posterior_cov``, ``exact_f_mean``, ``exact_f_var``; ``nig``:
    ``posterior_mu``, ``posterior_lambda_inv``, ``posterior_a``, ``posterior_b``,
    ``predictive_df``, ``predictive_loc``, ``predictive_scale`` (standardised units).
    """
    directory = Path(results_dir) if results_dir is not None else default_results_dir()
    stem = reference_stem(problem, quick)
    path = directory / f"{stem}.npz"
    if not path.is_file():
        raise FileNotFoundError(f"no stored reference {path}; build it with: python tools/reference_posteriors.py --problems {get_problem(problem).name}")
    arrays = load_npz(path)
    info_path = directory / f"{stem}.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    return Reference(get_problem(problem).name, arrays["x_test"], arrays["y_test"], arrays, info)


__all__ = [
    "PROBLEMS", "ReferenceProblem", "ReferenceData", "Reference", "FlatPotential", "NUTSSettings",
    "reference_problems", "get_problem", "reference_data", "reference_model", "nig_linear_model", "load_reference",
    "gaussian_linear_posterior", "gaussian_linear_log_evidence", "evidence_noise_scale", "nig_linear_posterior",
    "rank_normalized_rhat", "bulk_ess", "run_chain", "summarize_chains", "combine_chains", "exact_arrays",
    "nuts_vs_exact", "predictive_summary", "chain_path", "save_npz", "load_npz", "provenance", "default_results_dir",
]
