"""A VAE on dynamically binarised MNIST with three latent priors (Molchanov 2022, Table 3): the
protocol of ``reproductions/vae_dsivi_prior.py``.

The priors are declarations of :mod:`zoo_protocols.methods` (:data:`DECLARATIONS`: ``vae-normal``,
``vae-vamp``, ``vae-dsivi``), each with its objective (``DSIVI_ELBO(0, K)``) and KL warm-up;
this protocol supplies the encoder and decoder (MLPs with two hidden ReLU layers), the
dynamically binarised data (:mod:`zoo_protocols.binarized_mnist`), the training budget, the
importance-sampled test log-likelihood and, for the DSIVI prior, how loose its training bound
is (:func:`prior_term_gaps`). Every run checkpoints under ``args.checkpoint_dir`` and its
result is kept there, so a finished run is read back instead of trained again.

``args.prior_refresh_every`` (the ``vae-dsivi`` setting ``prior_refresh_every``) trains the
DSIVI prior with its components reused for up to that many steps
(:class:`~pyrozoo.distributions.PriorComponentCache`); ``None``, the default, is the paper's
estimator. It changes training only: the reported numbers (the importance-sampled test
log-likelihood and the prior-term gaps) are computed from the trained model without any
training objective, so the same way for cached and uncached runs.
"""

import json
import math
import time

import pyro
import torch

from pyrozoo import atomic
from pyrozoo.inference import collect_parameters, default_optimizer, fit
from pyrozoo.inference.training import training_step
from pyrozoo.models import MLP, VAE, AmortizedNormalGuide, GaussianEncoder
from pyrozoo.utils import set_seed
from zoo_protocols.binarized_mnist import DynamicallyBinarized
from zoo_protocols.config import RunConfig
from zoo_protocols.methods import method as declaration

#: this protocol's priors: name -> the declaration it evaluates
DECLARATIONS = {"normal": "vae-normal", "vamp": "vae-vamp", "dsivi": "vae-dsivi"}
PRIORS = tuple(DECLARATIONS)
#: the K of the thesis' DSIVI rows (Table 3), at which every dsivi run's prior-term looseness is measured
THESIS_KS = (500, 5000)

#: Molchanov (2022), Table 3 (MNIST, single-level VAE); the DSIVI rows are lower bounds.
PUBLISHED = [
    ("VampPrior-data (published, thesis Table 3)", "500", "-85.05"),
    ("VampPrior (published, thesis Table 3)", "500", "-82.38"),
    ("DSIVI aggregated posterior (published, thesis Table 3)", "500", ">= -83.02"),
    ("DSIVI aggregated posterior (published, thesis Table 3)", "5000", ">= -82.16"),
]


def declared(prior_name: str, K: int, warmup_epochs: int, prior_refresh_every=None):
    """``(spec, settings)`` of the prior ``prior_name`` with ``K`` (VampPrior components / DSIVI
    prior samples per step), a KL warm-up over ``warmup_epochs`` and, for ``dsivi``, its
    components reused for up to ``prior_refresh_every`` steps (``None``: drawn every step)."""
    if prior_name not in DECLARATIONS:
        raise ValueError(f"unknown prior {prior_name!r}; choose from {PRIORS}")
    extra = {"K": K, "warmup_epochs": warmup_epochs}
    if prior_refresh_every is not None:
        if prior_name != "dsivi":
            raise ValueError(f"prior_refresh_every applies to the dsivi prior (its sampled components), not to {prior_name!r}: leave it None")
        extra["prior_refresh_every"] = prior_refresh_every
    spec = declaration(DECLARATIONS[prior_name])
    return spec, RunConfig(extra=extra).settings(spec.defaults)


def refresh_every(prior_name: str, args):
    """The run's ``prior_refresh_every``: ``args.prior_refresh_every`` for ``dsivi``, else ``None``."""
    return getattr(args, "prior_refresh_every", None) if prior_name == "dsivi" else None


def build(spec, s, x_train, *, latent_dim, hidden, device):
    """The VAE (its latent prior from ``spec``) and its amortized guide on inputs like ``x_train``."""
    input_dim = x_train[0].numel()
    encoder = GaussianEncoder(MLP(input_dim, [hidden, hidden], 2 * latent_dim), latent_dim)
    decoder = MLP(latent_dim, [hidden, hidden], input_dim)
    prior = spec.latent_prior(encoder, x_train, s)
    n = len(x_train)
    model = VAE(decoder, prior, dataset_size=n).to(device)
    guide = AmortizedNormalGuide(encoder, dataset_size=n).to(device)
    return model, guide


def run_one(prior_name, K, seed, args, data, device):
    """Trains (or resumes) and evaluates one run; its result row is kept beside the checkpoint."""
    x_train, y_train, x_test = data
    refresh = refresh_every(prior_name, args)
    # a cached run trains differently: its own checkpoint and result (uncached names unchanged)
    tag = f"{prior_name}_K{K}" + (f"_R{refresh}" if refresh is not None else "") + f"_seed{seed}{args.settings_tag}"
    # the checkpoint continues across --epochs changes; the result file is per evaluation setting
    pp = f"_pp{args.prior_points or 'all'}" if prior_name == "dsivi" else ""
    done = args.checkpoint_dir / f"{tag}_epochs{args.epochs}_ll{args.ll_samples}{pp}_n{len(x_test)}.json"
    if done.exists():
        try:
            return json.loads(done.read_text())
        except json.JSONDecodeError as e:  # a file cut short: not a result
            raise ValueError(f"{done} is not a complete result ({e}): delete it to evaluate the run again") from None
    spec, s = declared(prior_name, K, args.warmup_epochs, refresh)
    pyro.clear_param_store()
    set_seed(seed)
    model, guide = build(spec, s, x_train, latent_dim=args.latent_dim, hidden=args.hidden, device=device)
    batches = DynamicallyBinarized(x_train.flatten(1), y_train, batch_size=args.batch_size, seed=seed)
    t0 = time.perf_counter()
    history = fit(
        model, guide, batches, epochs=args.epochs, lr=args.lr, device=device, seed=seed,
        checkpoint=args.checkpoint_dir / f"{tag}.pt", progress=not args.no_progress, **spec.fit_arguments(s, args.epochs),
    )
    train_seconds = time.perf_counter() - t0
    # evaluation from the model alone (no training objective, so no cached components)
    g = torch.Generator().manual_seed(10_000 + seed)
    x_test_bin = (torch.rand(x_test.shape, generator=g) < x_test).to(x_test.dtype).to(device)
    model.eval()
    t1 = time.perf_counter()
    pyro.set_rng_seed(20_000 + seed)
    ll = model.log_likelihood(guide, x_test_bin, args.ll_samples, prior_points=args.prior_points if prior_name == "dsivi" else None)
    row = {
        "prior": prior_name,
        "K": K if prior_name != "normal" else 0,
        "seed": seed,
        "test_ll": float(ll.mean()),
        "test_ll_se": float(ll.std() / math.sqrt(len(ll))),
        "epochs": int(history["epoch"].iloc[-1]) if len(history) else args.epochs,
        "final_train_loss_per_example": float(history["loss"].iloc[-1]) / len(x_train) if len(history) else float("nan"),
        "seconds_per_epoch": float(history["seconds"].median()) if len(history) else float("nan"),
        "train_seconds_this_call": train_seconds,
        "eval_seconds": time.perf_counter() - t1,
    }
    if refresh is not None:
        row["prior_refresh_every"] = refresh
    if prior_name == "dsivi":
        row.update(prior_term_gaps(model, guide, x_train, sorted({K, *THESIS_KS}), args.gap_points, seed, device))
    atomic.write_text(done, json.dumps(row))
    return row


def prior_term_gaps(model, guide, x_train, Ks, n, seed, device):
    """Mean ``log p(z) - E log p̂_K(z)`` (nats per example) at ``z ~ q(z | x)`` for ``n``
    freshly binarised training images: the looseness the DSIVI prior-side estimate with ``K``
    points adds to the training bound, against the density over all training points."""
    g = torch.Generator().manual_seed(30_000 + seed)
    idx = torch.randperm(len(x_train), generator=g)[:n]
    probs = x_train.flatten(1)[idx]
    x = (torch.rand(probs.shape, generator=g) < probs).to(probs.dtype).to(device)
    pyro.set_rng_seed(40_000 + seed)
    with torch.no_grad():
        z = guide.distribution(x).sample()
    return {f"prior_term_gap_K{k}": float(model.prior.estimate_gap(z, k).mean()) for k in Ks}


def time_dsivi_step(K, x_train, args, device, steps=5):
    """Seconds per training step of the DSIVI prior with ``K`` prior samples (median of
    ``steps``, after one that fills a cache), with ``args.prior_refresh_every`` as trained."""
    spec, s = declared("dsivi", K, args.warmup_epochs, refresh_every("dsivi", args))
    model, guide = build(spec, s, x_train, latent_dim=args.latent_dim, hidden=args.hidden, device=device)
    objective = spec.objective(s)
    x = (torch.rand(x_train.shape) < x_train).to(x_train.dtype).flatten(1).to(device)
    batch = lambda: (lambda idx: (x[idx], None, idx))(torch.randint(len(x), (args.batch_size,), device=device))  # noqa: E731
    params = collect_parameters(model, guide, objective, batch())
    opt = default_optimizer(params, args.lr)
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        training_step(model, guide, objective, opt, batch())
        times.append(time.perf_counter() - t0)
    return sorted(times[1:])[steps // 2]
