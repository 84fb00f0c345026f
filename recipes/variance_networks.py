"""Variance networks (Neklyudov et al. 2019; Molchanov 2022, sec. 2.2): training variational
dropout under the parameterisations of the thesis' eq. 11 and evaluating them as in its
Table 2 — the ELBO and its two terms, mean-propagation accuracy and test-time-averaging
accuracy."""

from typing import Callable, Dict, List, Optional, Tuple

import pyro
import torch
from torch.distributions import kl_divergence

from pyrozoo.guides.variational_dropout import VariationalDropoutGuide
from pyrozoo.inference import ClosedFormKL_ELBO, evaluate, fit
from pyrozoo.models import BayesianNeuralNetwork, Categorical, LeNet5BatchNorm
from pyrozoo.models.dropout_priors import ARDPrior, LogUniformPrior
from pyrozoo.utils import evaluation_mode
from recipes.lenet import ARCHITECTURES as LENET_ARCHITECTURES
from recipes.lenet_recipes import classification_error, kl_warmup, linear_to_zero, make_network

PRIORS = {"log-uniform": LogUniformPrior, "ard": ARDPrior}

#: ``lenet5-bn`` is the authors' network (:class:`~pyrozoo.models.LeNet5BatchNorm`); the
#: LeNet compression networks have no normalisation, under which zero-mean layers cannot learn
ARCHITECTURES = ("lenet5-bn",) + LENET_ARCHITECTURES


def make_variance_network(arch: str) -> torch.nn.Module:
    """The network of ``arch`` with PyTorch's default initialisation (as in the authors' code)."""
    if arch == "lenet5-bn":
        return LeNet5BatchNorm()
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {ARCHITECTURES}")
    return make_network(arch, "torch")

#: log alpha may grow far beyond Sparse VD's clip for the phase transition to happen
#: (the authors' phase-transition layers clip to [-20, 20])
VARIANCE_NETWORK_LOG_ALPHA_BOUNDS = (-20.0, 20.0)

#: the thesis' Table 2, labelled as published by examples/variance_networks.py (its setup
#: is not named there; units of the ELBO terms as printed)
PUBLISHED_TABLE2 = {
    "zero-mean": {"elbo": -4.0, "data_term": -4.0, "kl": 0.0, "mean_propagation_accuracy": 11.3, "test_time_averaging_accuracy": 99.4},
    "layer": {"elbo": -17.4, "data_term": -15.8, "kl": 1.7, "mean_propagation_accuracy": 11.3, "test_time_averaging_accuracy": 99.2},
    "neuron": {"elbo": -31.4, "data_term": -17.0, "kl": 14.4, "mean_propagation_accuracy": 11.3, "test_time_averaging_accuracy": 99.2},
    "weight": {"elbo": -602.6, "data_term": -33.8, "kl": 568.8, "mean_propagation_accuracy": 96.6, "test_time_averaging_accuracy": 99.4},
    "additive": {"elbo": -227.9, "data_term": -31.2, "kl": 196.7, "mean_propagation_accuracy": 99.2, "test_time_averaging_accuracy": 99.2},
}


def train_variational_dropout(
    arch: str,
    parameterization: str,
    train: Tuple[torch.Tensor, torch.Tensor],
    *,
    epochs: int,
    prior: str = "log-uniform",
    batch_size: int = 100,
    lr: float = 1e-3,
    seed: int = 0,
    device=None,
    checkpoint=None,
    progress: bool = False,
    init_log_alpha: float = -5.0,
    init_log_sigma2: float = -10.0,
    tracker: Optional[Callable] = None,
    track_every: int = 1,
):
    """A variational-dropout BNN of ``arch`` trained with local reparameterization, KL warm-up
    and a learning rate decayed linearly to 0; returns ``(model, guide, history)``.

    ``tracker(epoch, model, guide) -> dict`` is called every ``track_every`` epochs (and after
    the last); its rows are in ``history.attrs["trajectory"]``."""
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {sorted(PRIORS)}, got {prior!r}")
    pyro.clear_param_store()
    torch.manual_seed(seed)
    net = make_variance_network(arch)
    model = BayesianNeuralNetwork(net, PRIORS[prior](), Categorical(dataset_size=len(train[0])))
    guide = VariationalDropoutGuide(
        model,
        parameterization=parameterization,
        log_alpha_bounds=VARIANCE_NETWORK_LOG_ALPHA_BOUNDS,
        init_log_alpha=init_log_alpha,
        init_log_sigma2=init_log_sigma2,
    )
    trajectory: List[dict] = []

    def callback(epoch, row):
        if tracker is not None and ((epoch + 1) % track_every == 0 or epoch + 1 == epochs):
            trajectory.append({"epoch": epoch + 1, **tracker(epoch + 1, model, guide)})

    history = fit(
        model, guide, train, epochs=epochs, objective=ClosedFormKL_ELBO(), batch_size=batch_size, lr=lr,
        lr_schedule=linear_to_zero(epochs), kl_schedule=kl_warmup(epochs), estimator="local",
        device=device, seed=seed, checkpoint=checkpoint, progress=progress, callback=callback,
    )
    history.attrs["trajectory"] = trajectory
    return model, guide, history


def accuracy_tracker(test: Tuple[torch.Tensor, torch.Tensor], num_samples: int = 10, batch_size: int = 1000) -> Callable:
    """``tracker`` for :func:`train_variational_dropout`: mean-propagation and test-time-averaging
    accuracy (percent) on ``test`` and the mean ``log alpha`` of every layer — the quantities
    whose divergence marks the phase transition."""

    def track(epoch, model, guide):
        device = next(model.parameters()).device
        row = {"mean_propagation_accuracy": 100.0 - classification_error(guide.mean_network().to(device), test, batch_size, device)}
        with evaluation_mode(model):  # training continues after this: BN statistics must not see the test set
            metrics = evaluate(model, guide, test[0].to(device), test[1].to(device), num_samples=num_samples, batch_size=batch_size)
        row["test_time_averaging_accuracy"] = 100.0 * metrics["accuracy"]
        for name in guide.sites():
            row[f"mean_log_alpha[{name}]"] = float(guide.log_alpha(name).mean())
        return row

    return track


@torch.no_grad()
def elbo_decomposition(model, guide, data: Tuple[torch.Tensor, torch.Tensor], batch_size: int = 1000, seed: int = 0) -> Dict[str, float]:
    """``data_term = E_q log p(Y | X, W)`` over ``data`` (one weight sample from the guide per
    batch: an unbiased estimate), the closed-form ``kl = KL(q || p)`` and ``elbo = data_term - kl``, in nats."""
    pyro.set_rng_seed(seed)
    x, y = data
    device = next(model.parameters()).device
    data_term = 0.0
    with evaluation_mode(model):
        for start in range(0, len(x), batch_size):
            values = {name: guide.posterior(name).sample() for name in guide.sites()}
            xb, yb = x[start : start + batch_size].to(device), y[start : start + batch_size].to(device)
            out = model.net_output(values, xb)
            data_term += float(model.likelihood.predictive_distribution(out).log_prob(yb).sum())
    kl = 0.0
    for name, prior in model.latent_sites(x[:1].to(device)):
        kl += float(kl_divergence(guide.posterior(name), prior).sum())
    return {"elbo": data_term - kl, "data_term": data_term, "kl": kl}


def evaluate_parameterization(model, guide, train, test, num_samples: int = 20, batch_size: int = 1000) -> Dict[str, float]:
    """The thesis' Table 2 columns (accuracies in percent)."""
    device = next(model.parameters()).device
    row = elbo_decomposition(model, guide, train, batch_size)
    mean_net = guide.mean_network().to(device)
    row["mean_propagation_accuracy"] = 100.0 - classification_error(mean_net, test, batch_size, device)
    with evaluation_mode(model):
        metrics = evaluate(model, guide, test[0].to(device), test[1].to(device), num_samples=num_samples, batch_size=batch_size)
    row["test_time_averaging_accuracy"] = 100.0 * metrics["accuracy"]
    row["mean_log_alpha"] = float(torch.cat([guide.log_alpha(n).flatten() for n in guide.sites()]).mean())  # +inf for zero-mean layers
    return row
