"""A VAE on dynamically binarised MNIST with three latent priors (Molchanov 2022, Table 3).

* ``normal``: the standard Normal prior;
* ``vamp``: VampPrior with ``K`` learned pseudo-inputs, evaluated exactly;
* ``dsivi``: the aggregated posterior over the training inputs (Eq. 21) as a semi-implicit
  prior, trained with the DSIVI bound from ``K`` sampled training points per step.

All three train with :class:`pyrozoo.inference.DSIVI_ELBO` (which is the closed-form-KL ELBO
for the explicit priors), the same encoder/decoder (MLP 784-300-300-40 and back, ReLU),
batch 100, Adam, and a linear KL warm-up. The test log-likelihood is an importance-sampling
estimate with ``--ll-samples`` draws per test point; for ``dsivi`` the prior density inside
it is the mixture over all training images (each binarised once at random; or over
``--prior-points`` sampled ones), an unbiased estimate, so that number is a lower bound in
expectation. For ``dsivi`` the table also reports how loose the prior term of the training
bound is (``prior_term_gap_K<k>``; against one binarisation of the training images, so a lower
estimate of that looseness). Every run checkpoints every epoch under ``--checkpoint-dir``
and is resumed (or skipped when finished) on the next invocation.

Example::

    python examples/vae_dsivi_prior.py --priors normal,vamp,dsivi --K 500 --epochs 50 --out vae.csv
"""

import argparse
import json
import math
import time
from pathlib import Path

import pandas as pd
import pyro
import torch

from pyrozoo import atomic
from pyrozoo.data import TensorBatches, load_mnist
from pyrozoo.inference import DSIVI_ELBO, LinearKLWarmup, collect_parameters, default_optimizer, fit, training_step
from pyrozoo.models import MLP, VAE, AggregatedPosteriorPrior, AmortizedNormalGuide, GaussianEncoder, StandardNormalLatentPrior, VampPrior
from pyrozoo.reporting import save_table
from pyrozoo.utils import set_seed
from recipes.cli import add_common_arguments, device_from_args, non_negative_int, parse_seeds, positive_float, positive_int, run_main, settings_digest

PRIORS = ("normal", "vamp", "dsivi")
#: the K of the thesis' DSIVI rows (Table 3), at which every dsivi run's prior-term looseness is measured
THESIS_KS = (500, 5000)

#: Molchanov (2022), Table 3 (MNIST, single-level VAE); the DSIVI rows are lower bounds.
PUBLISHED = [
    ("VampPrior-data (published, thesis Table 3)", "500", "-85.05"),
    ("VampPrior (published, thesis Table 3)", "500", "-82.38"),
    ("DSIVI aggregated posterior (published, thesis Table 3)", "500", ">= -83.02"),
    ("DSIVI aggregated posterior (published, thesis Table 3)", "5000", ">= -82.16"),
]


class DynamicallyBinarized(TensorBatches):
    """Minibatches of ``Bernoulli(x)`` images, redrawn every epoch from the grey levels ``x``.

    The tensors the base class holds are one fixed binarisation (what ``fit`` uses to set
    up parameters); the iterator draws fresh ones from its own saveable generator.
    """

    def __init__(self, probs, y, *, batch_size, seed=0):
        g = torch.Generator().manual_seed(seed + 1)
        super().__init__((torch.rand(probs.shape, generator=g) < probs).to(probs.dtype), y, batch_size=batch_size, seed=seed)
        self.probs = probs
        self.binarizer = torch.Generator().manual_seed(seed + 2)

    def __iter__(self):
        for x, y, idx in super().__iter__():
            u = torch.rand(x.shape, generator=self.binarizer).to(x.device)
            yield (u < self.probs[idx]).to(x.dtype), y, idx

    def to(self, device):
        super().to(device)
        self.probs = self.probs.to(device)
        return self

    def state_dict(self):
        return {**super().state_dict(), "binarizer": self.binarizer.get_state()}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.binarizer.set_state(state["binarizer"])


def random_binarize(x):
    return (torch.rand_like(x) < x).to(x.dtype)


def build(prior_name, K, x_train, *, latent_dim, hidden, device):
    input_dim = x_train[0].numel()
    encoder = GaussianEncoder(MLP(input_dim, [hidden, hidden], 2 * latent_dim), latent_dim)
    decoder = MLP(latent_dim, [hidden, hidden], input_dim)
    if prior_name == "normal":
        prior = StandardNormalLatentPrior(latent_dim)
    elif prior_name == "vamp":
        prior = VampPrior(encoder, K, (input_dim,))
    elif prior_name == "dsivi":
        prior = AggregatedPosteriorPrior(encoder, x_train.flatten(1), num_mixing=K, transform=random_binarize)
    else:
        raise ValueError(f"unknown prior {prior_name!r}; choose from {PRIORS}")
    n = len(x_train)
    model = VAE(decoder, prior, dataset_size=n).to(device)
    guide = AmortizedNormalGuide(encoder, dataset_size=n).to(device)
    return model, guide


#: settings that change what is trained (``--epochs`` continues a checkpoint instead)
TRAINING_SETTINGS = ("hidden", "latent_dim", "lr", "batch_size", "warmup_epochs", "train_points", "quick")


def run_one(prior_name, K, seed, args, data, device):
    x_train, y_train, x_test = data
    tag = f"{prior_name}_K{K}_seed{seed}{args.settings_tag}"
    # the checkpoint continues across --epochs changes; the result file is per evaluation setting
    pp = f"_pp{args.prior_points or 'all'}" if prior_name == "dsivi" else ""
    done = args.checkpoint_dir / f"{tag}_epochs{args.epochs}_ll{args.ll_samples}{pp}_n{len(x_test)}.json"
    if done.exists():
        try:
            return json.loads(done.read_text())
        except json.JSONDecodeError as e:  # a file cut short: not a result
            raise ValueError(f"{done} is not a complete result ({e}): delete it to evaluate the run again") from None
    pyro.clear_param_store()
    set_seed(seed)
    model, guide = build(prior_name, K, x_train, latent_dim=args.latent_dim, hidden=args.hidden, device=device)
    objective = DSIVI_ELBO(K1=0, K2=K)
    batches = DynamicallyBinarized(x_train.flatten(1), y_train, batch_size=args.batch_size, seed=seed)
    warmup = LinearKLWarmup(0, args.warmup_epochs) if args.warmup_epochs > 0 else None
    t0 = time.perf_counter()
    history = fit(
        model, guide, batches, epochs=args.epochs, objective=objective, lr=args.lr, kl_schedule=warmup,
        device=device, seed=seed, checkpoint=args.checkpoint_dir / f"{tag}.pt", progress=not args.no_progress,
    )
    train_seconds = time.perf_counter() - t0
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
    """Seconds per training step of the DSIVI prior with ``K`` prior samples (median of ``steps``)."""
    model, guide = build("dsivi", K, x_train, latent_dim=args.latent_dim, hidden=args.hidden, device=device)
    objective = DSIVI_ELBO(K1=0, K2=K)
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


def _runs(priors: str, Ks: str, quick: bool = False):
    """``[(prior, K), ...]`` from ``--priors`` entries ``name`` (every ``--K``; ``normal``
    has none) or ``name:K``; ``quick`` caps K at 20."""
    try:
        default_ks = [int(k) for k in Ks.split(",") if k.strip()]
    except ValueError:
        raise ValueError(f"--K takes comma-separated integers, got {Ks!r}") from None
    runs = []
    for entry in (e.strip() for e in priors.split(",") if e.strip()):
        name, _, k = entry.partition(":")
        if name not in PRIORS:
            raise ValueError(f"unknown prior {name!r}; choose from {PRIORS}")
        try:
            ks = [0] if name == "normal" else ([int(k)] if k else default_ks)
        except ValueError:
            raise ValueError(f"--priors: {entry!r} is not name or name:K with an integer K") from None
        if name != "normal" and any(k < 1 for k in ks):
            raise ValueError("K must be positive")
        runs += [(name, min(k, 20) if quick else k) for k in ks]
    if not runs:
        raise ValueError("no priors given")
    return list(dict.fromkeys(runs))


def _points(text):
    """``all`` or a number of points >= 1."""
    return None if text == "all" else positive_int(text)


def main(argv=None):
    parser = add_common_arguments(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--priors", default="normal,vamp,dsivi", help=f"comma-separated subset of {PRIORS}, each run with every --K, or as name:K for one K (e.g. normal,vamp:500,dsivi:500,dsivi:5000)")
    parser.add_argument("--K", default="500", help="comma-separated K: VampPrior components / DSIVI prior samples per step")
    parser.add_argument("--seeds", type=parse_seeds, default=None, help="seeds, e.g. 0-2 or 0,3 (default: --seed)")
    parser.add_argument("--epochs", type=positive_int, default=50)
    parser.add_argument("--batch-size", type=positive_int, default=100)
    parser.add_argument("--lr", type=positive_float, default=5e-4)
    parser.add_argument("--latent-dim", type=positive_int, default=40)
    parser.add_argument("--hidden", type=positive_int, default=300)
    parser.add_argument("--warmup-epochs", type=non_negative_int, default=10)
    parser.add_argument("--ll-samples", type=positive_int, default=5000, help="importance samples per test point")
    parser.add_argument("--test-points", type=positive_int, default=None, help="evaluate on the first n test images (default all)")
    parser.add_argument("--prior-points", type=_points, default=None, help="training points in the DSIVI prior's evaluation mixture (default: all)")
    parser.add_argument("--gap-points", type=positive_int, default=1000, help="training images on which the DSIVI prior-term looseness is measured")
    parser.add_argument("--train-points", type=positive_int, default=None, help="train on the first n training images (default all)")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("runs") / "vae_dsivi_prior")
    parser.add_argument("--out", type=Path, default=None, help="CSV with columns prior, K, seed, test_ll, epochs")
    parser.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    parser.add_argument("--time-k", type=non_negative_int, default=5000, help="time one DSIVI step with this K when it is not trained (0: skip)")
    args = parser.parse_args(argv)
    # checkpoints and cached results are named by prior, K and seed; any other training setting
    # that differs from the defaults goes into the name, so a changed run never reuses a stale one
    changed = [(k, getattr(args, k)) for k in TRAINING_SETTINGS if getattr(args, k) != parser.get_default(k)]
    args.settings_tag = "_" + settings_digest(changed) if changed else ""
    if args.quick:
        args.epochs, args.hidden, args.latent_dim = 1, 32, 4
        args.train_points, args.test_points = args.train_points or 600, args.test_points or 50
        args.ll_samples, args.prior_points, args.warmup_epochs, args.gap_points = 20, 50, 0, 20
        args.time_k = 0
    try:
        runs = _runs(args.priors, args.K, quick=args.quick)
    except ValueError as e:
        parser.error(str(e))
    if args.threads:
        torch.set_num_threads(args.threads)
    device = device_from_args(args)
    seeds = args.seeds or [args.seed]
    x_train, y_train = load_mnist("mnist", train=True, data_dir=args.data_dir)
    x_test, _ = load_mnist("mnist", train=False, data_dir=args.data_dir)
    if args.train_points:
        x_train, y_train = x_train[: args.train_points], y_train[: args.train_points]
    if args.test_points:
        x_test = x_test[: args.test_points]
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in seeds:
        for prior_name, K in runs:
            row = run_one(prior_name, K, seed, args, (x_train, y_train, x_test), device)
            rows.append(row)
            print(json.dumps(row), flush=True)
    df = pd.DataFrame(rows)
    if args.out is not None:
        atomic.write_csv(df[["prior", "K", "seed", "test_ll", "epochs"]], args.out)
    gap_columns = sorted((c for c in df.columns if c.startswith("prior_term_gap_K")), key=lambda c: int(c[len("prior_term_gap_K"):]))
    table = df[["prior", "K", "seed", "epochs", "test_ll", "test_ll_se", "final_train_loss_per_example", *gap_columns, "seconds_per_epoch"]].copy()
    table["source"] = "measured (this repository)"
    published = pd.DataFrame(PUBLISHED, columns=["prior", "K", "test_ll"])
    published["source"] = "published (Molchanov 2022, Table 3)"
    table = pd.concat([table.astype({"K": str, "test_ll": object}), published], ignore_index=True)
    gaps = []
    for prior_name, K, reference in (("vamp", 500, -82.38), ("dsivi", 500, -83.02), ("dsivi", 5000, -82.16)):
        ours = df[(df.prior == prior_name) & (df.K == K)]
        if len(ours):
            gaps.append(f"{prior_name} K={K}: {ours.test_ll.mean():.2f} here vs {reference} published ({ours.test_ll.mean() - reference:+.2f} nats)")
    timing = ""
    looseness_rows = []
    normal = df[df.prior == "normal"]
    for _, r in df[df.prior == "dsivi"].iterrows():
        own = r.get(f"prior_term_gap_K{int(r.K)}")
        if len(normal) and own is not None and math.isfinite(own):
            excess = r.final_train_loss_per_example - normal.final_train_loss_per_example.mean()
            looseness_rows.append(
                f"dsivi K={int(r.K)} ends training {excess:.1f} nats per image above the Normal prior's loss, and its own "
                f"K-point prior estimate is {own:.1f} nats looser than the ELBO under the aggregated prior"
            )
    looseness = (" Looseness of the training bound: " + "; ".join(looseness_rows) + ".") if looseness_rows else ""
    trained_dsivi = [K for name, K in runs if name == "dsivi"]
    if args.time_k and trained_dsivi and args.time_k not in trained_dsivi:
        seconds = time_dsivi_step(args.time_k, x_train, args, device)
        per_epoch = seconds * math.ceil(len(x_train) / args.batch_size)
        timing = (
            f" DSIVI with K={args.time_k} was not trained: one step measured {seconds * 1e3:.0f} ms here, i.e. "
            f"{per_epoch / 60:.1f} min per epoch and {per_epoch * args.epochs / 3600:.1f} h for {args.epochs} epochs on this machine."
        )
    notes = (
        f"Measured rows: MNIST, dynamic binarisation, MLP encoder/decoder {x_train[0].numel()}-{args.hidden}-{args.hidden}-"
        f"{args.latent_dim} (ReLU), batch {args.batch_size}, Adam lr {args.lr}, KL warm-up over {args.warmup_epochs} epochs, "
        f"{args.epochs} epochs, {len(x_train)} training / {len(x_test)} test images, importance sampling with "
        f"{args.ll_samples} samples per test point (test_ll_se: standard error over test points), device {device}. "
        "The dsivi rows' prior density in the importance weights is the mixture of q(z | x) over "
        + (f"all {len(x_train)} training images, each binarised once at random" if args.prior_points is None else f"{args.prior_points} training images drawn with replacement")
        + ": unbiased for the aggregated prior's density, so a lower bound on the test log-likelihood in expectation. "
        "final_train_loss_per_example is the negative training objective in the last epoch (for dsivi the DSIVI bound "
        "with K2 = K sampled training points). prior_term_gap_K<k> is how much looser that bound is than the ELBO under "
        f"the aggregated prior: the mean of log p(z) - E log p_K(z) at z ~ q(z | x) over {args.gap_points} training "
        "images, p_K being the DSIVI estimate from k sampled training images and p the mixture over all of them, "
        "each binarised once (itself below log p in expectation, so the gap is a lower estimate of the looseness; "
        "nats per image; measured on the trained model).\n\n"
        "Published rows are quoted from the thesis (Table 3), not reproduced. The thesis does not state its training "
        "protocol; it compares against VampPrior (Tomczak & Welling 2018), whose protocol is gated MLP layers, up to "
        "2000 epochs with early stopping (patience 50), 100 warm-up epochs and 5000 importance samples per test point "
        f"on the full test set. Ours: {args.epochs} epochs ({args.epochs / 2000:.1%} of that epoch budget; a CPU budget), "
        f"{args.warmup_epochs} warm-up epochs, plain ReLU MLPs, {args.ll_samples} importance samples on {len(x_test)} "
        "test images; only the ordering of the priors is comparable, not the absolute values. "
        "Differences to the published numbers: " + ("; ".join(gaps) if gaps else "none comparable") + "." + looseness + timing
    )
    if args.quick:
        notes = "QUICK SMOKE CONFIGURATION - not a result.\n\n" + notes
    save_table(table, "vae_dsivi_prior" + ("_quick" if args.quick else ""), args.results_dir, title="VAE on MNIST: standard Normal vs VampPrior vs DSIVI aggregated-posterior prior", notes=notes)
    return df


if __name__ == "__main__":
    run_main(main)
