"""UCI regression with radial-directional posteriors (Oh, Adamczewski & Park 2020, Sec. 5.1).

The protocol's one-hidden-layer ReLU network (50 units; 100 for protein). The hidden layer
has RDP's double-grouped radial-directional prior and posterior; the output layer (50 -> 1,
a dimension of size 1) and the biases are mean-field Gaussians with ``N(0, 1)`` priors, as in
the paper. The Gaussian noise precision has a Gamma(1, 1) prior (the paper's) and a
log-normal posterior. Radius prior: half-Cauchy local and global scales ``tau = 1``;
direction prior: vMF with expected cosine 0.5 to its mean (RDP's UCI setting); closed-form
KLs, a linear KL warm-up, Adam.

Defaults, and how they differ from the paper's (``config`` / ``config.extra`` override each):
the paper trains 400 epochs with minibatches of 5 and Adam 1e-3 (50 warm-up epochs). On the
shared two-core CPU of this project one step costs ~30 ms, which would put that protocol at
hundreds of CPU hours, so the default is a fixed budget of about ``steps`` (1200) Adam steps
per split with learning rate 3e-3 (ten times that for the noise precision's posterior, whose
log must travel several units from the prior median within the run), minibatches of 32 (256
from 5000 training points up), and a KL warm-up over the first 10% of the epochs. The
directions start at concentrations with expected cosine 0.995 to their means, the value the
authors' UCI runs effectively used (their configuration's intended 0.95 is not read, see the
notes): at 0.95 the initial weight noise slows the short runs down markedly. Test log-likelihood per example in original
units, from 100 posterior samples: the predictive mixture with the noise scale mapped back by
the target's standard deviation and ``- log sigma_y`` added (RDP's code omits both).
"""

import math

import pyro
import torch

from pyrozoo.data import UCISplit
from pyrozoo.guides.base import param_key
from pyrozoo.inference import default_optimizer, evaluate
from pyrozoo.models import GaussianLikelihood
from zoo_protocols.config import RunConfig, Settings
from zoo_protocols.methods import method
from zoo_protocols.uci import fit_split, register_uci_method, uci_model

#: this protocol's schedule (``config.epochs/batch_size/lr`` and ``config.extra`` override it;
#: the prior's and guide's settings are the ``rdp`` declaration's, :mod:`zoo_protocols.methods`)
DEFAULTS = {
    "steps": 1200,  # Adam steps per split when ``epochs`` is not given
    "batch_size": None,  # None: 32, or 256 for 5000+ training points
    "lr": 3e-3,
    "num_samples": 100,
    "precision_prior": (1.0, 1.0),  # Gamma(concentration, rate) on the noise precision
    "noise_lr_factor": 10.0,  # learning-rate multiplier of the noise precision's posterior
}

#: smoke runs (``config.quick``) train this many epochs at most
QUICK_EPOCHS = 2

SPEC = method("rdp")


def settings(config: RunConfig = None) -> Settings:
    """The settings of a run (``config``: default settings when ``None``)."""
    return (config or RunConfig()).settings(SPEC.defaults, DEFAULTS)


def schedule(split: UCISplit, config: RunConfig):
    """``(epochs, batch_size)`` of a run (see the module docstring)."""
    s = settings(config)
    n = len(split.y_train)
    batch_size = s["batch_size"] or (256 if n >= 5000 else 32)
    batch_size = min(int(batch_size), n)
    if config.epochs is not None:
        epochs = int(config.epochs)
    else:
        steps_per_epoch = math.ceil(n / batch_size)
        epochs = max(1, round(s["steps"] / steps_per_epoch))
    if config.quick:
        epochs = min(epochs, QUICK_EPOCHS)
    return epochs, batch_size


def build(split: UCISplit, config: RunConfig):
    """The model and guide of one split."""
    s = settings(config)
    model = uci_model(split, SPEC.prior(s), s["precision_prior"], config)
    return model, SPEC.guide(model, s)


def optimizer_factory(guide, lr: float, noise_factor: float):
    """Adam over all parameters, with the noise precision's log-normal parameters at
    ``noise_factor`` times the learning rate: within a short budget the noise level must
    travel several units in log space from its prior median (e.g. to ~log 400 on energy),
    which at one learning rate would take longer than the whole run."""

    def make(params):
        key = param_key(GaussianLikelihood.PRECISION_SITE)
        noise = {id(p) for d in (guide.locs, guide.log_scales) if key in d for p in [d[key]]}
        groups = [{"params": [p for p in params if id(p) not in noise], "lr": lr}]
        if noise and noise_factor != 1.0:
            groups.append({"params": [p for p in params if id(p) in noise], "lr": lr * noise_factor})
        else:
            groups[0]["params"] = list(params)
        return default_optimizer(groups, lr)

    return make


@register_uci_method(SPEC.name, SPEC.description)
def run_rdp(split: UCISplit, config: RunConfig) -> dict:
    pyro.clear_param_store()
    s = settings(config)
    seed = config.seed + split.split
    torch.manual_seed(seed)
    model, guide = build(split, config)
    epochs, batch_size = schedule(split, config)
    history = fit_split(
        model,
        guide,
        split,
        config,
        epochs,
        batch_size=batch_size,
        lr=s["lr"],
        optimizer=optimizer_factory(guide, float(s["lr"]), float(s["noise_lr_factor"])),
        **SPEC.fit_arguments(s, epochs),
    )
    result = evaluate(model, guide, split.x_test, split.y_test, num_samples=s["num_samples"], y_scale=split.y_std, y_shift=split.y_mean)
    result.update({"epochs": epochs, "batch_size": batch_size, "final_loss": float(history.loss.iloc[-1]) if len(history) else math.nan})
    return result
