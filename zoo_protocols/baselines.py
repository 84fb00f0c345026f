"""The baselines a user would pick instead of the zoo's methods, run in the UCI and MNIST
protocols for the comparison harness (:mod:`zoo_protocols.compare`).

* ``laplace-ll-kfac``, ``laplace-ll-diag``, ``laplace-kfac``, ``laplace-diag``: the Laplace
  approximation (:class:`pyrozoo.baselines.LaplaceBaseline`, laplace-torch) over the last
  layer's or all weights, KFAC or diagonal, post hoc on a MAP fit with the zoo's ``map``
  objective and schedule; prior precision tuned by the marginal likelihood; linearised
  (GLM) predictive (on MNIST, for all weights, the network at sampled weights: see
  :data:`MNIST_DEFAULTS`);
* ``ivon``: the IVON optimizer (:class:`pyrozoo.baselines.IVONBaseline`, ivon-opt), the
  weight prior ``N(0, 1)`` as its weight decay ``1 / N``;
* ``ensemble``: a deep ensemble of 5 MAP fits (:class:`pyrozoo.baselines.DeepEnsemble`).

Each uses the protocol's network (UCI: one hidden layer of ``split.n_hidden`` ReLU units and
a Gaussian likelihood whose noise precision, under a ``Gamma(6, 6)`` prior, is learned;
MNIST: ``784 -> hidden -> 10``, categorical) and the protocol's minibatches, and is scored
by the same metrics as the zoo's methods (:meth:`pyrozoo.baselines.Baseline.evaluate`, inside
the harness's calibration recorder).

**Budget.** ``config.epochs`` and ``config.batch_size`` are honoured as by every method:
``steps = epochs * steps_per_epoch`` optimizer steps, one gradient evaluation each, for the
MAP fit under Laplace and for IVON (one weight sample per step). The Laplace fit adds one
pass over the training data for the curvature and 100 steps of tuning the prior precision
(no gradient of the training loss); each ensemble member takes the run's steps, so the
ensemble spends ``M`` gradient evaluations per step, as a ``K``-particle objective spends
``K`` (the harness counts one per step for both; ``seconds`` shows the cost).

These methods are not declarations of :mod:`zoo_protocols.methods` (no Pyro prior, guide and
objective): the harness runs them through :func:`run_uci` / :func:`run_mnist`.
"""

import importlib.util
from typing import Callable, Dict, Optional

import pyro.distributions as dist
import torch

from pyrozoo.baselines import DeepEnsemble, IVONBaseline, LaplaceBaseline, train_map
from pyrozoo.data import UCISplit
from pyrozoo.models import MLP, CategoricalLikelihood, GaussianLikelihood
from pyrozoo.utils import set_seed
from zoo_protocols.config import RunConfig
from zoo_protocols.uci import decay_to_tenth

#: (subset of weights, Hessian structure) of each Laplace method
LAPLACE = {
    "laplace-ll-kfac": ("last_layer", "kron"),
    "laplace-ll-diag": ("last_layer", "diag"),
    "laplace-kfac": ("all", "kron"),
    "laplace-diag": ("all", "diag"),
}

#: the baselines, in table order, with a one-line description
DESCRIPTIONS = {
    "laplace-ll-kfac": "Laplace approximation (laplace-torch), last layer, KFAC, post hoc on MAP",
    "laplace-ll-diag": "Laplace approximation (laplace-torch), last layer, diagonal, post hoc on MAP",
    "laplace-kfac": "Laplace approximation (laplace-torch), all weights, KFAC, post hoc on MAP",
    "laplace-diag": "Laplace approximation (laplace-torch), all weights, diagonal, post hoc on MAP",
    "ivon": "IVON optimizer (ivon-opt): variational online Newton, diagonal Gaussian posterior",
    "ensemble": "deep ensemble of independently initialised MAP fits (Lakshminarayanan et al. 2017)",
}
NAMES = tuple(DESCRIPTIONS)

#: the module each baseline imports, and how to get it
REQUIRES = {**{name: "laplace" for name in LAPLACE}, "ivon": "ivon"}
INSTALL = {"laplace": "laplace-torch (scripts/setup.sh installs it; see pyrozoo/baselines/laplace.py)", "ivon": "ivon-opt (pip install ivon-opt)"}

#: shared settings (``config`` fields, ``config.extra`` and the protocol's own below override them)
DEFAULTS = {
    "prior_scale": 1.0,
    "members": 5,
    "ivon_hess_init": 1.0,
    "laplace_tune_prior": "marglik",
    "laplace_pred_type": "glm",
    "laplace_batch_size": 256,
}
#: the zoo's ``map`` on UCI: Adam 1e-2, minibatches of 32, ``Gamma(6, 6)`` on the noise precision
UCI_DEFAULTS = {
    "epochs": 40, "batch_size": 32, "lr": 1e-2, "num_samples": 100, "precision_prior": (6.0, 6.0),
    # coarsely tuned on Boston split 0, 60 epochs: 0.1-0.3 with h0 = 1 matched MAP, 1.0 diverged
    "ivon_lr": 0.1,
}
#: the zoo's MNIST protocol: Adam 1e-3, minibatches of 128
MNIST_DEFAULTS = {
    "epochs": 10, "batch_size": 128, "lr": 1e-3, "num_samples": 20, "hidden": (100,),
    # all weights of a 784-100-10 network: the linearised predictive's Jacobians cost seconds
    # per 100 images on a CPU (times the OOD and rotated sets), so the network is sampled
    "laplace_pred_type": {"last_layer": "glm", "all": "nn"},
    # coarsely tuned on 2000 training images, 200 steps: 0.3 matched MAP's error, 1.0 beat it
    "ivon_lr": 1.0,
}

#: smoke runs (``config.quick``) train this many epochs at most
QUICK_EPOCHS = 5


def missing_dependency(name: str) -> Optional[str]:
    """What to install for baseline ``name``, or ``None`` when it can run (or is no baseline)."""
    module = REQUIRES.get(name)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return INSTALL[module]


def _fit(name: str, likelihood, make_net: Callable[[], torch.nn.Module], x: torch.Tensor, y: torch.Tensor, s, seed: int):
    if name not in DESCRIPTIONS:
        raise ValueError(f"unknown baseline {name!r}; choose from {', '.join(NAMES)}")
    epochs = min(s["epochs"], QUICK_EPOCHS) if s.quick else s["epochs"]
    schedule = decay_to_tenth(epochs)  # the zoo's runners' schedule
    common = dict(epochs=epochs, batch_size=s["batch_size"], lr_schedule=schedule, seed=seed)
    if name == "ensemble":
        return DeepEnsemble(make_net, likelihood, s["members"]).fit(x, y, lr=s["lr"], prior_scale=s["prior_scale"], **common)
    torch.manual_seed(seed)
    net = make_net().to(x.device, x.dtype)
    if name == "ivon":
        baseline = IVONBaseline(net, likelihood, prior_scale=s["prior_scale"], hess_init=s["ivon_hess_init"])
        baseline.fit(x, y, lr=s["ivon_lr"], noise_lr=s["lr"], **common)
        return baseline
    noise = train_map(net, likelihood, x, y, lr=s["lr"], prior_scale=s["prior_scale"], **common)
    subset, hessian = LAPLACE[name]
    baseline = LaplaceBaseline(
        net, likelihood, noise, subset=subset, hessian=hessian, prior_precision=1.0 / s["prior_scale"] ** 2,
        tune_prior=s["laplace_tune_prior"], pred_type=s.pick("laplace_pred_type", subset),
    )
    return baseline.fit(x, y, batch_size=s["laplace_batch_size"])


def _extras(baseline) -> Dict[str, float]:
    if isinstance(baseline, LaplaceBaseline):
        p = baseline.fitted_prior_precision
        return {"prior_precision": p if isinstance(p, float) else float(p.mean())}
    return {}


def run_uci(name: str, split: UCISplit, config: RunConfig) -> dict:
    """Baseline ``name`` on one UCI split: ``rmse`` and ``test_ll`` in the original units (as
    :func:`zoo_protocols.uci.run_split`, seeded with ``config.seed + split.split``)."""
    s = config.settings(UCI_DEFAULTS, DEFAULTS)
    set_seed(config.seed + split.split)
    split = split.to(config.device, config.dtype)
    a, b = s["precision_prior"]
    likelihood = GaussianLikelihood(len(split.y_train), precision=dist.Gamma(float(a), float(b)))
    features, hidden = split.num_features, split.n_hidden

    def make_net():
        return MLP(features, [hidden], 1)

    baseline = _fit(name, likelihood, make_net, split.x_train, split.y_train, s, config.seed + split.split)
    result = baseline.evaluate(split.x_test, split.y_test, s["num_samples"], y_scale=split.y_std, y_shift=split.y_mean)
    return {**result, **_extras(baseline)}


def run_mnist(name: str, data, config: RunConfig) -> dict:
    """Baseline ``name`` on MNIST (:class:`zoo_protocols.mnist.MNISTData`): ``error`` (percent),
    ``test_ll``, ``accuracy`` and ``ece``, as the protocol's methods report them."""
    from zoo_protocols.mnist import shape

    s = config.settings(MNIST_DEFAULTS, DEFAULTS)
    set_seed(config.seed)
    data = data.to(config.device)
    features, classes = shape(data)
    hidden = list(s["hidden"])

    def make_net():
        return MLP(features, hidden, classes)

    baseline = _fit(name, CategoricalLikelihood(len(data.y_train)), make_net, data.x_train, data.y_train, s, config.seed)
    return {**baseline.evaluate(data.x_test, data.y_test, s["num_samples"]), **_extras(baseline)}
