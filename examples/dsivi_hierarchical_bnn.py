"""Joint vs marginal inference for a BNN with a hierarchical prior (Molchanov 2022, Eqs. 17-20,
Theorem 3, Figure 6) on a UCI regression data set.

Prior: ``w | λ ~ N(0, 1/λ)``, ``λ ~ Gamma(a, b)``, one precision per weight
(:class:`~pyrozoo.models.NormalGammaPrior`); Gaussian likelihood with a Gamma prior on the
noise precision (the UCI protocol). Methods:

* ``joint``: λ kept as latent variables with LogNormal posteriors (mean-field), trained with
  the joint bound (Eq. 18; all KLs in closed form);
* ``marginal``: λ integrated out, the prior of ``w`` semi-implicit, trained with the DSIVI
  bound from ``K2`` draws of λ (Eq. 19) and the same mean-field Normal posterior over ``w``;
* ``marginal+SI``: the same marginal bound with a semi-implicit (hypernetwork) posterior,
  ``K1`` guide draws.

Every trained posterior ``q(w)`` is scored by the same quantity, the *marginal* ELBO: exactly
(the Normal–Gamma marginal is a Student-t) for mean-field posteriors, and by DSIVI lower and
sandwich upper bounds with large ``K``; plus test RMSE and log-likelihood. Theorem 3 predicts a
higher marginal ELBO (a posterior closer to the true one) for the marginal objective.

Example::

    python examples/dsivi_hierarchical_bnn.py --dataset concrete --splits 0-4 --epochs 500
"""

import argparse
import json
import math
from pathlib import Path

import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask

from pyrozoo import atomic
from pyrozoo.data import UCIDataset, parse_splits
from pyrozoo.guides import MeanFieldNormalGuide, SemiImplicitGuide
from pyrozoo.inference import ClosedFormKL_ELBO, DSIVI_ELBO, evaluate, fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, Gaussian, NormalGammaPrior
from pyrozoo.reporting import mean_and_stderr, save_figure, save_table
from pyrozoo.utils import set_seed
from recipes.cli import add_common_arguments, device_from_args, name_list, positive_float, positive_int, run_main, split_spec

METHODS = ("joint", "marginal", "marginal+SI")


def make_model(split, form, args):
    net = MLP(split.num_features, [args.hidden or split.n_hidden], 1)
    prior = NormalGammaPrior(args.gamma_shape, args.gamma_rate, form=form, num_mixing=args.K2)
    likelihood = Gaussian(len(split.y_train), precision=dist.Gamma(args.noise_shape, args.noise_rate))
    return BayesianNeuralNetwork(net, prior, likelihood)


def copy_into(target: MeanFieldNormalGuide, source: MeanFieldNormalGuide, x, y):
    """``target`` (set up on another model) with the variational parameters of the sites it shares with ``source``."""
    target(x, y)
    with torch.no_grad():
        for key in target.locs:
            target.locs[key].copy_(source.locs[key])
            target.log_scales[key].copy_(source.log_scales[key])
    return target


class PairedExactELBO(ClosedFormKL_ELBO):
    """The exact marginal ELBO with ``-H[q]`` in place of ``log q(w)`` at sites without a closed-form
    KL, which is what :class:`DSIVI_ELBO` does for an explicit guide against a semi-implicit prior:
    on the same guide draws the exact value and the DSIVI bounds then differ only in ``log p(w)``
    (``log q(w)`` at a sample alone has a spread of ~sqrt(#weights / 2) nats)."""

    def _kl_term(self, guide_site, model_site):
        kl, at_sample = super()._kl_term(guide_site, model_site)
        if at_sample:
            q, z = guide_site["fn"], guide_site["value"]
            swap = DSIVI_ELBO._explicit_log_q(q, z) - q.log_prob(z)
            kl = kl + scale_and_mask(swap, guide_site["scale"], guide_site["mask"]).sum()
        return kl, at_sample


class Scorer:
    """The marginal ELBO (per training example) of a trained posterior over ``w``."""

    def __init__(self, split, args, x, y):
        self.args, self.x, self.y, self.n = args, x, y, len(x)
        seed_state = torch.random.get_rng_state()
        self.exact = make_model(split, "exact", args).to(x.device)
        self.marginal = make_model(split, "marginal", args).to(x.device)
        # the networks' own initial values only seed guides, which are overwritten: no RNG impact wanted
        torch.random.set_rng_state(seed_state)

    def weight_guide(self, method, guide, model):
        if method == "joint":
            return copy_into(MeanFieldNormalGuide(model), guide, self.x, self.y)
        return guide

    @torch.no_grad()
    def __call__(self, method, guide, particles, k, seed=0):
        # Common random numbers: every estimate is evaluated on the same posterior draws
        # (one guide trace per particle, replayed into each model) with the same log q(w) term,
        # so their differences (exact vs lower vs upper differ only in how log p(w) is
        # estimated) are not buried in the Monte Carlo noise of the likelihood and of log q.
        pyro.set_rng_seed(seed)
        g = self.weight_guide(method, guide, self.marginal)
        lower, upper, exact = DSIVI_ELBO(k, k), DSIVI_ELBO(k, k, bound="upper"), PairedExactELBO()
        sums = {"elbo_dsivi_lower": 0.0, "elbo_dsivi_upper": 0.0}
        if method != "marginal+SI":
            sums["elbo_exact"] = 0.0
        for _ in range(particles):
            guide_trace = poutine.trace(g).get_trace(self.x, self.y)
            replayed = poutine.trace(poutine.replay(self.marginal, trace=guide_trace)).get_trace(self.x, self.y)
            sums["elbo_dsivi_lower"] += float(lower.elbo_particle(replayed, guide_trace))
            sums["elbo_dsivi_upper"] += float(upper.elbo_particle(replayed, guide_trace))
            if "elbo_exact" in sums:
                replayed = poutine.trace(poutine.replay(self.exact, trace=guide_trace)).get_trace(self.x, self.y)
                sums["elbo_exact"] += float(exact.elbo_particle(replayed, guide_trace))
        return {key: value / (particles * self.n) for key, value in sums.items()}


def train(method, split, seed, args, device):
    pyro.clear_param_store()
    set_seed(seed)
    form = "joint" if method == "joint" else "marginal"
    model = make_model(split, form, args).to(device)
    if method == "marginal+SI":
        guide = SemiImplicitGuide(model, num_mixing=args.K1, init_scale=args.init_scale, mixing_scale=args.init_scale)
        objective = DSIVI_ELBO(args.K1, args.K2)
    else:
        guide = MeanFieldNormalGuide(model, init_scale=args.init_scale)
        objective = ClosedFormKL_ELBO() if method == "joint" else DSIVI_ELBO(0, args.K2)
    x, y = split.x_train, split.y_train.unsqueeze(-1)
    scorer = Scorer(split, args, x, y)
    curve = []

    def record(epoch, row):
        if (epoch + 1) % args.curve_every == 0:
            curve.append({"method": method, "split": split.split, "epoch": epoch + 1, **scorer(method, guide, args.curve_particles, args.curve_k)})

    checkpoint = None
    if args.checkpoint_dir is not None:
        # resumable: fit continues from the last saved epoch; the curve points so far live beside it
        checkpoint = args.checkpoint_dir / f"{args.dataset}_{method}_split{split.split}_K1{args.K1}_K2{args.K2}.pt"
        curve_file = checkpoint.with_suffix(".curve.json")
        if checkpoint.exists() and curve_file.exists():
            try:
                curve.extend(json.loads(curve_file.read_text()))
            except json.JSONDecodeError as e:  # a file cut short is not a curve
                raise ValueError(f"{curve_file} is not a complete curve ({e}): delete it and {checkpoint} to train the run again") from None
        inner = record

        def record(epoch, row):
            inner(epoch, row)
            if (epoch + 1) % args.checkpoint_every == 0:  # in step with the checkpoint just saved
                atomic.write_text(curve_file, json.dumps(curve))

    history = fit(
        model, guide, (x, y), epochs=args.epochs, objective=objective, batch_size=args.batch_size, lr=args.lr, device=device,
        seed=seed, progress=False, callback=record, checkpoint=checkpoint, checkpoint_every=args.checkpoint_every,
    )
    seconds = float(history["seconds"].sum())  # optimisation time over all epochs, also across resumes
    scores = scorer(method, guide, args.eval_particles, args.eval_k, seed=seed)
    if method == "joint":
        pyro.set_rng_seed(seed)
        scores["elbo_joint"] = -ClosedFormKL_ELBO(num_particles=args.eval_particles).loss(model, guide, x, y) / len(x)
    pyro.set_rng_seed(seed)
    metrics = evaluate(model, guide, split.x_test, split.y_test, num_samples=args.num_samples, y_scale=split.y_std, y_shift=split.y_mean)
    return {"method": method, "split": split.split, **scores, **metrics, "train_seconds": seconds}, curve


def main(argv=None):
    parser = add_common_arguments(argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--dataset", default="concrete")
    parser.add_argument("--splits", type=split_spec, default="0-4")
    parser.add_argument("--methods", type=name_list, default=",".join(METHODS))
    parser.add_argument("--epochs", type=positive_int, default=500)
    parser.add_argument("--batch-size", type=positive_int, default=100)
    parser.add_argument("--lr", type=positive_float, default=5e-3)
    parser.add_argument("--hidden", type=positive_int, default=None, help="hidden units (default: the data set's protocol value)")
    parser.add_argument("--gamma-shape", type=positive_float, default=1.0, help="a of the Gamma hyperprior on the weight precision")
    parser.add_argument("--gamma-rate", type=positive_float, default=1.0, help="b of the Gamma hyperprior")
    parser.add_argument("--noise-shape", type=positive_float, default=6.0)
    parser.add_argument("--noise-rate", type=positive_float, default=6.0)
    parser.add_argument("--K1", type=positive_int, default=16, help="guide mixing draws (marginal+SI)")
    parser.add_argument("--K2", type=positive_int, default=16, help="prior mixing draws (training)")
    parser.add_argument("--init-scale", type=positive_float, default=0.01)
    parser.add_argument("--eval-k", type=positive_int, default=1000, help="K1 = K2 of the evaluation bounds")
    parser.add_argument("--eval-particles", type=positive_int, default=400)
    parser.add_argument("--curve-every", type=positive_int, default=25, help="epochs between marginal ELBO estimates for the plot")
    parser.add_argument("--curve-k", type=positive_int, default=200)
    parser.add_argument("--curve-particles", type=positive_int, default=20)
    parser.add_argument("--num-samples", type=positive_int, default=100, help="posterior samples for test metrics")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="save every --checkpoint-every epochs and resume from there")
    parser.add_argument("--checkpoint-every", type=positive_int, default=50)
    args = parser.parse_args(argv)
    if args.quick:
        args.splits, args.epochs, args.eval_k, args.eval_particles = "0", 4, 20, 4
        args.curve_every, args.curve_k, args.curve_particles, args.num_samples = 2, 10, 2, 10
    methods = args.methods
    bad = [m for m in methods if m not in METHODS]
    if bad:
        parser.error(f"unknown methods {bad}; choose from {METHODS}")
    device = device_from_args(args)
    data = UCIDataset(args.dataset, args.data_dir)
    splits = parse_splits(args.splits, data.n_splits)
    rows, curves = [], []
    for k in splits:
        split = data.split(k).to(device, torch.float32)
        for method in methods:
            row, curve = train(method, split, args.seed + k, args, device)
            rows.append(row)
            curves += curve
            if not args.no_progress:
                print({key: (round(v, 4) if isinstance(v, float) else v) for key, v in row.items()}, flush=True)
    runs = pd.DataFrame(rows)
    columns = [c for c in ("elbo_exact", "elbo_dsivi_lower", "elbo_dsivi_upper", "elbo_joint", "rmse", "test_ll", "train_seconds") if c in runs]
    order = {m: i for i, m in enumerate(methods)}
    summary = mean_and_stderr(runs, ["method"], columns).sort_values("method", key=lambda s: s.map(order)).reset_index(drop=True)
    stem = f"dsivi_hierarchical_bnn_{args.dataset}" + ("_quick" if args.quick else "")
    notes = (
        f"{args.dataset}, splits {splits}; MLP with {args.hidden or data.n_hidden} hidden units; prior w | λ ~ N(0, 1/λ), "
        f"λ ~ Gamma({args.gamma_shape:g}, {args.gamma_rate:g}) per weight; noise precision ~ Gamma({args.noise_shape:g}, "
        f"{args.noise_rate:g}); {args.epochs} epochs, batch {args.batch_size}, Adam lr {args.lr:g}, initial posterior scale "
        f"{args.init_scale:g}; training K2 = {args.K2} (marginal), K1 = {args.K1} (semi-implicit guide). "
        "ELBO columns are per training example and all refer to the marginal model p(y, w) (λ integrated out), except "
        "elbo_joint (the joint model's own bound, Eq. 18, for the joint method): elbo_exact uses the closed-form Student-t "
        f"marginal ({args.eval_particles} particles; not available for the semi-implicit posterior), elbo_dsivi_lower/upper "
        f"are the DSIVI lower and sandwich upper bounds with K1 = K2 = {args.eval_k}; the three use the same posterior draws "
        "(common random numbers), so their order is meaningful beyond the Monte Carlo noise of each. rmse and test_ll (per test point) in "
        f"the original units from {args.num_samples} posterior samples. Mean and standard error over splits; all numbers "
        "produced by examples/dsivi_hierarchical_bnn.py (the thesis' Figure 6 uses its own data and architecture; only "
        "the ordering joint < marginal is comparable)."
    )
    if args.quick:
        notes = "QUICK SMOKE CONFIGURATION - not a result.\n\n" + notes
    save_table(summary, stem, args.results_dir, title=f"Hierarchical-prior BNN on {args.dataset}: joint vs marginal (DSIVI) inference", notes=notes)
    save_table(runs, stem + "_runs", args.results_dir, title="Every run")
    if curves:
        plot(pd.DataFrame(curves), methods, stem, args.results_dir)
    return runs


def plot(curves, methods, stem, results_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for i, method in enumerate(methods):
        sub = curves[curves["method"] == method]
        if sub.empty:
            continue
        column = "elbo_exact" if "elbo_exact" in sub and sub["elbo_exact"].notna().all() else "elbo_dsivi_lower"
        mean = sub.groupby("epoch")[column].mean()
        label = f"{method} ({'exact' if column == 'elbo_exact' else 'DSIVI lower bound'})"
        ax.plot(mean.index, mean.values, label=label, color=f"C{i}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("marginal ELBO per training example")
    ax.set_title("Estimates of the marginal ELBO during training")
    lo = curves[[c for c in ("elbo_exact", "elbo_dsivi_lower") if c in curves]].stack().quantile(0.1)
    hi = curves[[c for c in ("elbo_exact", "elbo_dsivi_lower") if c in curves]].stack().max()
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    ax.legend()
    fig.tight_layout()
    save_figure(fig, stem, results_dir)
    plt.close(fig)


if __name__ == "__main__":
    run_main(main)
