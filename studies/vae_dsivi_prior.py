"""Controlled experiment (issue 23, item 2): is the DSIVI aggregated-posterior prior's place
below the plain Normal prior a bug in pyrozoo or the budget?

Molchanov's thesis (Table 3) reports that a VAE whose prior is the aggregated posterior
``p(z) = (1/N) sum_n q(z | x_n)`` (Eq. 21), trained with the DSIVI bound from ``K`` sampled
training points, beats the VampPrior (>= -82.16 nats at K = 5000 against -82.38), which beats
the standard Normal prior. ``docs/results/vae_dsivi_prior.md`` (full MNIST, 30 epochs, one
seed) has the order reversed: DSIVI K = 5000 -92.16, VampPrior -90.62, Normal -91.38.

This script trains the three priors on a subset of MNIST for many more passes, over several
seeds, twice for the two priors the committed table puts in the wrong order:

* **pyrozoo**: the example's own protocol (:func:`zoo_protocols.vae_priors.run_one`: the declarations
  ``vae-normal``, ``vae-vamp``, ``vae-dsivi``, the example's networks, warm-up, binarisation and
  importance-sampled test log-likelihood);
* **independent** (Normal and DSIVI priors): a plain-PyTorch re-implementation written from the
  thesis, not from pyrozoo: the same encoder and decoder shapes, one reparameterised draw per
  image, the Normal prior's KL in closed form, the DSIVI prior term
  ``log (1/K) sum_k q(z | x_k)`` from ``K`` training images drawn with replacement per step
  and binarised afresh (Eq. 14 with ``K1 = 0``; gradient through the sampled components),
  and its own importance-sampled test log-likelihood whose prior density is the mixture over
  all training images, each binarised once.

**Why the claim should show here if the method has it.** The committed run stopped at 30
passes over the data, far from convergence (VampPrior's protocol: up to 2000 epochs), and a
prior built from the encoder's own posteriors can only help once those have settled. Here
the first ``--train-size`` images (default 10,000) are passed over ``--epochs`` times (default
200: 20,000 Adam steps, more than the committed run's 18,000, with every image seen 200 times
instead of 30), and ``K`` keeps the thesis' fraction of the training set (``--K``, default
833 = 5000 x 10,000 / 60,000), so the DSIVI estimate misses as much of the aggregated
posterior's mass per step as at full scale. The VampPrior keeps its 500 pseudo-inputs. If
pyrozoo and the re-implementation disagree, it is a bug; if both put DSIVI above Normal and
at least level with the VampPrior here, the committed table is a budget; if neither does,
the ordering is not shown at this scale and the full protocol (a runbook leg) decides it.

Every run keeps its result beside its checkpoint under ``--checkpoint-dir``, so an interrupted
invocation resumes, and seeds can be trained by separate processes (``--seeds 0``, ``--seeds
1``, ...) before one invocation with all the seeds writes
``<results-dir>/vae_dsivi_prior.{csv,md}``::

    python studies/vae_dsivi_prior.py              # 3 seeds, 10000 images, 200 epochs
    python studies/vae_dsivi_prior.py --quick      # smoke run used by the tests
"""

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from pyrozoo import atomic
from pyrozoo.data import load_mnist
from zoo_protocols.cli import parse_seeds, positive_int, run_main
from zoo_protocols.intervals import mean_se
from zoo_protocols.study import study_notes, study_parser, write_study
from zoo_protocols.vae_priors import run_one

STEM = "vae_dsivi_prior"
#: the example's defaults (reproductions/vae_dsivi_prior.py), shared by both implementations
BATCH_SIZE, LR, HIDDEN, LATENT_DIM, WARMUP_EPOCHS = 100, 5e-4, 300, 40, 10
#: the encoder's log standard deviation is kept in this range (as pyrozoo's GaussianEncoder and
#: VampPrior's code do): a tiny variance early in training makes the objective explode
LOG_SCALE_BOUNDS = (-3.0, 1.0)
VAMP_K = 500
#: runs: (prior, implementation)
RUNS = (("normal", "pyrozoo"), ("normal", "independent"), ("vamp", "pyrozoo"), ("dsivi", "pyrozoo"), ("dsivi", "independent"))
IMPLEMENTATIONS = ("pyrozoo", "independent")
#: implementations disagree when their mean test log-likelihoods over seeds differ by more
#: than this many nats and by more than three standard errors of the difference
AGREEMENT_NATS = 1.0


# -- the independent re-implementation (plain PyTorch) ------------------------------------------

def _mlp(sizes):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class PlainVAE(nn.Module):
    def __init__(self, input_dim: int, hidden: int, latent_dim: int):
        super().__init__()
        self.encoder = _mlp([input_dim, hidden, hidden, 2 * latent_dim])
        self.decoder = _mlp([latent_dim, hidden, hidden, input_dim])

    def encode(self, x):
        loc, log_scale = self.encoder(x).chunk(2, -1)
        return loc, log_scale.clamp(*LOG_SCALE_BOUNDS)

    def log_px(self, x, z):
        return -F.binary_cross_entropy_with_logits(self.decoder(z), x.expand(z.shape[:-1] + x.shape[-1:]), reduction="none").sum(-1)


def gaussian_log_density(z, loc, log_scale):
    """``log N(z; loc, diag exp(log_scale)^2)`` summed over the last dimension (broadcasting)."""
    return (-0.5 * ((z - loc) / log_scale.exp()) ** 2 - log_scale - 0.5 * math.log(2 * math.pi)).sum(-1)


def mixture_log_density(z, loc, log_scale, chunk: int = 2048):
    """``log (1/M) sum_m N(z; loc_m, diag scale_m^2)`` for ``z`` of shape ``(n, d)`` against ``M``
    components, by expanding the square (``z^2 / s^2 - 2 z m / s^2 + m^2 / s^2``) into matrix
    products, ``chunk`` values of ``z`` at a time."""
    precision = (-2 * log_scale).exp()
    const = -0.5 * (loc * loc * precision).sum(-1) - log_scale.sum(-1) - 0.5 * loc.shape[-1] * math.log(2 * math.pi)
    out = []
    for zc in z.split(chunk):
        quad = -0.5 * (zc * zc) @ precision.T + zc @ (loc * precision).T
        out.append(torch.logsumexp(quad + const, -1) - math.log(loc.shape[0]))
    return torch.cat(out)


def _binarize(probs, generator=None):
    return (torch.rand(probs.shape, generator=generator) < probs).to(probs.dtype)


def train_independent(prior: str, K: int, x_train, epochs: int, seed: int):
    """Adam on the negative bound with the likelihood and the KL term scaled to the ``N``
    training images, the KL weighted by a linear warm-up over ``WARMUP_EPOCHS`` epochs;
    returns the model and the last epoch's mean negative bound per image."""
    torch.manual_seed(seed)
    n, d = x_train.shape
    vae = PlainVAE(d, HIDDEN, LATENT_DIM)
    optimizer = torch.optim.Adam(vae.parameters(), lr=LR)
    num_batches = math.ceil(n / BATCH_SIZE)
    for epoch in range(epochs):
        order, total = torch.randperm(n), 0.0
        for b, start in enumerate(range(0, n, BATCH_SIZE)):
            x = _binarize(x_train[order[start : start + BATCH_SIZE]])
            loc, log_scale = vae.encode(x)
            z = loc + log_scale.exp() * torch.randn_like(loc)
            if prior == "normal":  # KL(N(loc, s^2) || N(0, 1)) in closed form
                kl = 0.5 * (loc * loc + (2 * log_scale).exp() - 1 - 2 * log_scale).sum(-1)
            else:  # the DSIVI prior term from K training images drawn with replacement
                k_loc, k_log_scale = vae.encode(_binarize(x_train[torch.randint(n, (K,))]))
                log_prior = mixture_log_density(z, k_loc, k_log_scale)
                kl = gaussian_log_density(z, loc, log_scale) - log_prior
            weight = min(1.0, (epoch + b / num_batches) / WARMUP_EPOCHS) if WARMUP_EPOCHS else 1.0
            loss = -(vae.log_px(x, z) - weight * kl).sum() * (n / len(x))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
    return vae, total / num_batches / n


@torch.no_grad()
def independent_log_likelihood(vae: PlainVAE, prior: str, x_train, x_test, num_samples: int, seed: int, chunk: int = 250):
    """Per-image ``log (1/S) sum_s p(x | z_s) p(z_s) / q(z_s | x)``, ``z_s ~ q(z | x)``; the
    aggregated prior's density is the mixture over every training image, each binarised once."""
    if prior == "dsivi":
        prior_loc, prior_log_scale = vae.encode(_binarize(x_train, torch.Generator().manual_seed(50_000 + seed)))
    out = []
    for x in x_test.split(BATCH_SIZE):
        loc, log_scale = vae.encode(x)
        log_w = []
        for s in range(0, num_samples, chunk):
            z = loc + log_scale.exp() * torch.randn((min(chunk, num_samples - s),) + loc.shape)
            if prior == "normal":
                log_p = gaussian_log_density(z, torch.zeros(()), torch.zeros(()))
            else:
                log_p = mixture_log_density(z.reshape(-1, z.shape[-1]), prior_loc, prior_log_scale).reshape(z.shape[:-1])
            log_w.append(vae.log_px(x, z) + log_p - gaussian_log_density(z, loc, log_scale))
        out.append(torch.logsumexp(torch.cat(log_w), 0) - math.log(num_samples))
    return torch.cat(out)


def run_independent(prior: str, K: int, seed: int, data, args):
    x_train, x_test = data
    done = args.checkpoint_dir / f"independent_{prior}_K{K}_seed{seed}_n{len(x_train)}_epochs{args.epochs}_ll{args.ll_samples}_test{len(x_test)}.json"
    if done.exists():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    vae, final_loss = train_independent(prior, K, x_train, args.epochs, seed)
    train_seconds = time.perf_counter() - t0
    # the test images binarised as pyrozoo's protocol does, the same images for both
    x_test_bin = _binarize(x_test, torch.Generator().manual_seed(10_000 + seed))
    torch.manual_seed(20_000 + seed)
    ll = independent_log_likelihood(vae, prior, x_train, x_test_bin, args.ll_samples, seed)
    row = {
        "prior": prior, "K": K if prior != "normal" else 0, "seed": seed, "test_ll": float(ll.mean()),
        "test_ll_se": float(ll.std() / math.sqrt(len(ll))), "epochs": args.epochs, "final_train_loss_per_example": final_loss,
        "seconds_per_epoch": train_seconds / args.epochs,
    }
    atomic.write_json(done, row)
    return row


def run_pyrozoo(prior: str, K: int, seed: int, data, args):
    x_train, x_test = data
    protocol = SimpleNamespace(
        checkpoint_dir=args.checkpoint_dir, settings_tag=f"_controlled_n{len(x_train)}", epochs=args.epochs, ll_samples=args.ll_samples,
        prior_points=None, gap_points=args.gap_points, warmup_epochs=WARMUP_EPOCHS, latent_dim=LATENT_DIM, hidden=HIDDEN,
        batch_size=BATCH_SIZE, lr=LR, no_progress=args.no_progress, prior_refresh_every=None,
    )
    # run_one takes grey levels (it binarises each batch) and labels (unused by a VAE)
    return run_one(prior, K, seed, protocol, (x_train, torch.zeros(len(x_train), dtype=torch.long), x_test), torch.device("cpu"))


RUNNERS = {"pyrozoo": run_pyrozoo, "independent": run_independent}


# -- summary and verdict ------------------------------------------------------------------------

def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error over seeds of the test log-likelihood and the final training
    loss per (prior, implementation)."""
    rows = []
    for (prior, impl), group in runs.groupby(["prior", "implementation"], sort=False):
        row = {"prior": prior, "implementation": impl, "K": int(group.K.iloc[0]), "seed": "mean", "seeds": len(group)}
        for col in ("test_ll", "final_train_loss_per_example"):
            row[col], row[f"{col}_se_over_seeds"], _ = mean_se(group[col])
        rows.append(row)
    return pd.DataFrame(rows)


def paired(runs: pd.DataFrame, a, b):
    """Mean and standard error over seeds of ``test_ll(a) - test_ll(b)`` for ``(prior,
    implementation)`` pairs measured on the same seeds; ``None`` when they share none."""
    def by_seed(key):
        rows = runs[(runs.prior == key[0]) & (runs.implementation == key[1])]
        return rows.set_index("seed").test_ll

    diff = (by_seed(a) - by_seed(b)).dropna()
    if not len(diff):
        return None
    return mean_se(diff)


def _sign(result) -> int:
    """+1 above zero by two standard errors, -1 below by two, 0 otherwise (or unmeasured)."""
    if result is None or math.isnan(result[1]):
        return 0
    mean, se, _ = result
    return 1 if mean - 2 * se > 0 else (-1 if mean + 2 * se < 0 else 0)


def _describe(result, what) -> str:
    if result is None:
        return f"{what}: not measured"
    mean, se, n = result
    return f"{what}: {mean:+.2f} ± {se:.2f} nats (n={n} seeds)"


def verdict(runs: pd.DataFrame) -> str:
    """Bug when pyrozoo and the re-implementation disagree (on a prior's test log-likelihood,
    or on whether DSIVI beats Normal); otherwise budget (DSIVI above Normal and not below the
    VampPrior here), not shown (DSIVI not above Normal, both implementations alike) or partly."""
    between = {prior: paired(runs, (prior, "pyrozoo"), (prior, "independent")) for prior in ("normal", "dsivi")}
    disagreements = []
    for prior, result in between.items():
        if result is not None:
            mean, se, _ = result
            # a NaN standard error (one seed) cannot excuse a gap above AGREEMENT_NATS
            if abs(mean) > AGREEMENT_NATS and not (abs(mean) <= 3 * se):
                disagreements.append(_describe(result, f"{prior}, pyrozoo - independent"))
    over_normal = {impl: paired(runs, ("dsivi", impl), ("normal", impl)) for impl in IMPLEMENTATIONS}
    if _sign(over_normal["pyrozoo"]) != _sign(over_normal["independent"]) and None not in over_normal.values():
        disagreements.append("DSIVI over Normal, " + "; ".join(_describe(r, i) for i, r in over_normal.items()))
    if disagreements:
        return "Verdict: BUG. pyrozoo and the independent re-implementation disagree: " + "; ".join(disagreements) + "."
    over_vamp = paired(runs, ("dsivi", "pyrozoo"), ("vamp", "pyrozoo"))
    vamp_over_normal = paired(runs, ("vamp", "pyrozoo"), ("normal", "pyrozoo"))
    agree = "; ".join(_describe(result, f"{prior}, pyrozoo - independent") for prior, result in between.items())
    details = "; ".join([
        _describe(over_normal["pyrozoo"], "DSIVI - Normal (pyrozoo)"), _describe(over_normal["independent"], "DSIVI - Normal (independent)"),
        _describe(over_vamp, "DSIVI - VampPrior (pyrozoo)"), _describe(vamp_over_normal, "VampPrior - Normal (pyrozoo)"),
    ])
    # the VampPrior's lead over the Normal prior is itself published (Tomczak & Welling 2018):
    # where it is missing too, the setting favours the Normal prior whatever DSIVI does
    caveat = ("" if _sign(vamp_over_normal) >= 0 else
              " The VampPrior, published above the Normal prior on full MNIST, falls below it here as well: at this size a prior "
              "fitted to the training images does not carry over to the test images, so this setting cannot show the thesis' "
              "ordering and does not refute it.")
    if _sign(over_normal["pyrozoo"]) > 0 and _sign(over_vamp) >= 0:
        return (f"Verdict: NOT A BUG (budget). With training closer to convergence the DSIVI prior beats the Normal prior and is "
                f"not below the VampPrior ({details}); the implementations agree ({agree}). The committed 30-epoch table stops too early.")
    if _sign(over_normal["pyrozoo"]) <= 0:
        return (f"Verdict: NOT SHOWN in this setting either, by both implementations alike: the DSIVI prior does not beat the Normal "
                f"prior ({details}); the implementations agree ({agree}). Not a bug in pyrozoo's DSIVI prior; whether the thesis' "
                "ordering appears at full scale with its (unstated) protocol is the runbook's to decide." + caveat)
    return (f"Verdict: PARTLY SHOWN, both implementations alike: the DSIVI prior beats the Normal prior but falls below the VampPrior "
            f"({details}); the implementations agree ({agree})." + caveat)


# -- command line -------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = study_parser(__doc__)
    parser.add_argument("--seeds", type=parse_seeds, default=[0, 1, 2], help="seeds, e.g. 0-2 or 0,3 (each run is kept, so seeds may be trained by separate processes)")
    parser.add_argument("--epochs", type=positive_int, default=200)
    parser.add_argument("--K", type=positive_int, default=833, help="DSIVI prior samples per step (default: the thesis' 5000 of 60000, scaled to 10000 images)")
    parser.add_argument("--train-size", type=positive_int, default=10000, help="the first N training images")
    parser.add_argument("--test-size", type=positive_int, default=1000, help="the first N test images")
    parser.add_argument("--ll-samples", type=positive_int, default=1000, help="importance samples per test image")
    parser.add_argument("--gap-points", type=positive_int, default=1000, help="training images on which pyrozoo's DSIVI prior-term looseness is measured")
    parser.add_argument("--runs", default=None, help="comma-separated prior:implementation subset of " + ",".join(f"{p}:{i}" for p, i in RUNS))
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("runs") / "controlled_vae_dsivi_prior")
    args = parser.parse_args(argv)
    args.runs = RUNS if args.runs is None else tuple(tuple(r.strip().split(":", 1)) for r in args.runs.split(",") if r.strip())
    bad = [r for r in args.runs if r not in RUNS]
    if bad:
        parser.error(f"unknown runs {bad}; choose from " + ", ".join(f"{p}:{i}" for p, i in RUNS))
    return args


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    if args.quick:
        args.train_size, args.test_size, args.epochs, args.K, args.ll_samples, args.gap_points, args.seeds = 300, 40, 2, 20, 20, 20, [0, 1]
        args.no_progress = True
    x_train = load_mnist("mnist", train=True, data_dir=args.data_dir)[0][: args.train_size].flatten(1)
    x_test = load_mnist("mnist", train=False, data_dir=args.data_dir)[0][: args.test_size].flatten(1)
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for seed in args.seeds:
        for prior, impl in args.runs:
            K = {"normal": 0, "vamp": VAMP_K, "dsivi": args.K}[prior]
            row = RUNNERS[impl](prior, K, seed, (x_train, x_test), args)
            rows.append({"implementation": impl, **row})
            if not args.no_progress:
                print(f"{prior} {impl} seed {seed}: test LL {row['test_ll']:.2f} ± {row['test_ll_se']:.2f}", flush=True)
    runs = pd.DataFrame(rows)
    summary = summarize(runs)
    text = verdict(runs)
    seconds = time.perf_counter() - started
    gap_col = f"prior_term_gap_K{args.K}"
    gap = runs[gap_col].dropna() if gap_col in runs else pd.Series(dtype=float)
    gap_note = f" pyrozoo's DSIVI bound with K = {args.K} is {gap.mean():.2f} nats per image looser in its prior term than the ELBO under the aggregated posterior (mean over seeds, measured on the trained models)." if len(gap) else ""
    setting = (
        f"Setting: MNIST, the first {len(x_train)} training and {len(x_test)} test images, dynamic binarisation, encoder and "
        f"decoder MLPs {x_train.shape[1]}-{HIDDEN}-{HIDDEN}-{LATENT_DIM} and back (ReLU), batch {BATCH_SIZE}, Adam {LR:g}, linear KL "
        f"warm-up over {WARMUP_EPOCHS} epochs, {args.epochs} epochs ({args.epochs * math.ceil(len(x_train) / BATCH_SIZE)} steps); "
        f"VampPrior with {VAMP_K} pseudo-inputs; DSIVI prior from K = {args.K} sampled training images per step (the thesis' "
        f"fraction of the training set for K = 5000). test_ll: importance sampling with {args.ll_samples} draws per test image "
        "(test_ll_se: standard error over test images), the aggregated prior's density the mixture over all training images, "
        "each binarised once (a lower bound in expectation); rows with seed 'mean': mean and standard error over seeds. "
        f"Implementations: 'pyrozoo' is reproductions/vae_dsivi_prior.py's protocol; 'independent' a plain-PyTorch re-implementation "
        f"in this script. Implementations agree when their mean test log-likelihoods are within {AGREEMENT_NATS:g} nat or three "
        "standard errors of the paired difference; one prior beats another when the paired difference over seeds is two "
        f"standard errors from zero.{gap_note} Training time of the runs: {(runs.seconds_per_epoch * runs.epochs).sum() / 3600:.1f} h "
        f"(the sum over runs, {args.threads} thread each; runs finished by an earlier invocation are read back from "
        f"{args.checkpoint_dir}, so the provenance line's time is this invocation's alone). The thesis (Table 3, full MNIST, its own protocol): DSIVI K = 5000 >= -82.16, "
        "VampPrior -82.38; the committed 30-epoch table: DSIVI -92.16, VampPrior -90.62, Normal -91.38."
    )
    notes = study_notes(text, setting, "studies/vae_dsivi_prior.py", ["pyrozoo", "zoo_protocols/vae_priors.py", "zoo_protocols/methods.py"], seconds, quick=args.quick)
    table = pd.concat([summary, runs], ignore_index=True)
    first = ["prior", "implementation", "K", "seed", "seeds", "test_ll"]
    stem = STEM + ("_quick" if args.quick else "")
    return write_study(table, stem, args.results_dir, title="Controlled experiment: does the DSIVI aggregated-posterior prior beat the Normal prior and the VampPrior?", verdict=text, notes=notes, shown=[summary], first=first)


if __name__ == "__main__":
    run_main(main)
