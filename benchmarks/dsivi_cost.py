"""Cost of one DSIVI training step of a VAE whose prior is the aggregated posterior, estimated
from K2 = 5000 sampled training points, against the plain ELBO step of the same VAE
(standard Normal prior), timed in the same process (interleaved rounds, medians).

Before and after in one run: the uncached bound (``DSIVI_ELBO(0, K2)``, fresh components with
gradient every step) and the bound with a :class:`~pyrozoo.distributions.PriorComponentCache`
(``refresh_every=1``: every component encoded at the current parameters, no gradient through
them; ``refresh_every=R``: each component reused for at most R optimisation steps). Also
timed, to show where the time goes: K2 = 500 uncached, and K2 = 5000 with the components
computed once before training (the estimator's own cost without any encoder pass).

The whole interleaved measurement is repeated ``--repeats`` times; each repeat gives a median
over ``--rounds`` rounds per candidate, and the ratios reported are the medians over repeats.

The staleness of the cached components is measured on a separate short training run per R:
after every step, the prior term (nats per data point) of the next minibatch's ``z`` with
the pool's draws minus that with the same training points encoded at the current parameters.

Example::

    python benchmarks/dsivi_cost.py --threads 1
"""

import argparse
import statistics
import sys
from pathlib import Path

import pyro
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved_medians  # noqa: E402

from pyrozoo.data import load_mnist  # noqa: E402
from pyrozoo.distributions import FiniteMixing, LogScaleNormal, PriorComponentCache, SemiImplicit  # noqa: E402
from pyrozoo.inference import DSIVI_ELBO, collect_parameters, default_optimizer  # noqa: E402
from pyrozoo.inference.training import training_step  # noqa: E402
from pyrozoo.models import MLP, VAE, AggregatedPosteriorPrior, AmortizedNormalGuide, GaussianEncoder, StandardNormalLatentPrior  # noqa: E402

BASE = "plain ELBO (standard Normal prior)"


class FixedComponentsPrior(torch.nn.Module):
    """The aggregated-posterior estimator over precomputed component parameters (no encoder pass)."""

    def __init__(self, loc, log_scale, k):
        super().__init__()
        self.loc, self.log_scale, self.k = loc, log_scale, k

    def distribution(self):
        mixing = FiniteMixing((self.loc, self.log_scale))
        return SemiImplicit(mixing, lambda psi: LogScaleNormal(psi[0], psi[1]).to_event(1), (self.loc.shape[-1],), num_mixing=self.k, share_mixing=True)


def make_vae(prior_kind, k, x, args, device, refresh=None):
    """A fresh VAE (same initial weights for every kind), its guide, objective and optimiser."""
    torch.manual_seed(0)
    d, h = args.latent_dim, args.hidden
    # on the device before the fixed prior's components are encoded from it
    encoder = GaussianEncoder(MLP(x.shape[1], [h, h], 2 * d), d).to(device)
    decoder = MLP(d, [h, h], x.shape[1]).to(device)
    if prior_kind == "normal":
        prior = StandardNormalLatentPrior(d)
    elif prior_kind == "aggregated":
        prior = AggregatedPosteriorPrior(encoder, x, num_mixing=k)
    else:
        with torch.no_grad():
            loc, log_scale = encoder(x[:k])
        prior = FixedComponentsPrior(loc, log_scale, k)
    model = VAE(decoder, prior, dataset_size=len(x)).to(device)
    guide = AmortizedNormalGuide(encoder, dataset_size=len(x)).to(device)
    objective = DSIVI_ELBO(0, max(k, 1), prior_cache=None if refresh is None else PriorComponentCache(refresh))

    def batch():
        idx = torch.randint(len(x), (args.batch_size,), device=device)
        return x[idx], None, idx

    opt = default_optimizer(collect_parameters(model, guide, objective, batch()), 5e-4)
    return model, guide, objective, opt, batch


def make_step(prior_kind, k, x, args, device, refresh=None):
    """A closure running one optimisation step on random minibatches."""
    model, guide, objective, opt, batch = make_vae(prior_kind, k, x, args, device, refresh)

    def step():
        training_step(model, guide, objective, opt, batch())

    return step


@torch.no_grad()
def prior_term(prior_dist, z, k, draws):
    """Mean over the minibatch of the prior-side estimate log (1/K) sum_j p(z | draws_j)."""
    return float(prior_dist.log_prob_estimate(z, k, fresh=draws).mean())


def staleness(k, refresh, x, args, device):
    """Per step of a short training run with the cache: the prior term with the pool's draws
    minus the prior term with the same points encoded at the current parameters (nats per
    data point), and the spread of the fresh prior term over independent draws of K points."""
    model, guide, objective, opt, batch = make_vae("aggregated", k, x, args, device, refresh)
    cache = objective.prior_cache
    for _ in range(args.staleness_warmup):
        training_step(model, guide, objective, opt, batch())
    diffs, spreads, gaps = [], [], []
    for t in range(args.staleness_steps):
        training_step(model, guide, objective, opt, batch())
        xb, _, idx = batch()
        with torch.no_grad():
            z = guide.distribution(xb).sample()
        p = model.prior.distribution()
        cache.draws("z", p.mixing, p.fresh_shape(k, z))  # what the next evaluation does first
        pool = prior_term(p, z, k, cache.stored_draws("z"))
        now = prior_term(p, z, k, cache.current_draws("z"))
        diffs.append(pool - now)
        if t % max(args.staleness_steps // 4, 1) == 0:
            fresh = [prior_term(p, z, k, p.mixing.sample(p.fresh_shape(k, z))) for _ in range(4)]
            spreads.append(statistics.stdev(fresh))
            gaps.append((float(model.prior.estimate_gap(z, k, repeats=2).mean()), float(model.prior.estimate_gap(z, 500, repeats=2).mean())))
    return diffs, spreads, gaps


def timings(x, k, args, device):
    """Interleaved timing of every candidate, repeated; prints and returns the ratios per repeat."""
    candidates = {
        BASE: make_step("normal", 0, x, args, device),
        f"DSIVI K2={k} uncached (before)": make_step("aggregated", k, x, args, device),
    }
    for r in args.refresh:
        candidates[f"DSIVI K2={k} cached, refresh_every={r}"] = make_step("aggregated", k, x, args, device, refresh=r)
    candidates["DSIVI K2=500 uncached"] = make_step("aggregated", 500, x, args, device)
    candidates[f"DSIVI K2={k}, components precomputed"] = make_step("fixed", k, x, args, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    steps = args.steps  # the cache redraws K2/R points every step: the cost is the same at every step
    ratios = {name: [] for name in candidates}
    ms = {name: [] for name in candidates}
    for rep in range(args.repeats):
        times = interleaved_medians(candidates, rounds=args.rounds, steps=steps, warmup=2 if rep == 0 else 0, sync=sync)
        for name, t in times.items():
            ratios[name].append(t / times[BASE])
            ms[name].append(t * 1e3)
    print(
        f"device {device}, {args.threads} thread(s), batch {args.batch_size}, MLP 784-{args.hidden}-{args.hidden}-{args.latent_dim}; "
        f"{args.repeats} repeats x {args.rounds} interleaved rounds x {steps} steps; median over rounds, then over repeats"
    )
    for name in candidates:
        per = " ".join(f"{r:5.2f}" for r in ratios[name])
        print(f"{name:44s} {statistics.median(ms[name]):9.2f} ms/step   ratio {statistics.median(ratios[name]):6.2f}x   (repeats: {per})")
    # arithmetic floor: multiply-adds of the MLPs, backward ~ 2x forward
    h, d, n_in = args.hidden, args.latent_dim, x.shape[1]
    enc = n_in * h + h * h + h * 2 * d
    dec = d * h + h * h + h * n_in
    plain = 3 * args.batch_size * (enc + dec)
    print(
        f"multiply-adds per step: plain {plain / 1e6:.0f}M; encoding {k} prior points adds {k * enc / 1e6:.0f}M forward "
        f"(ratio >= {(plain + k * enc) / plain:.1f}x) and {3 * k * enc / 1e6:.0f}M with its backward pass "
        f"(ratio ~ {(plain + 3 * k * enc) / plain:.1f}x); with refresh_every=R the forward share is divided by R"
    )
    return ratios


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--latent-dim", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=300)
    parser.add_argument("--train-points", type=int, default=60000, help="size of the training set")
    parser.add_argument("--data", default="random", help="'random' (binary, density 0.3) or a folder holding MNIST/raw (binarised at 0.5)")
    parser.add_argument("--k2", type=int, default=5000)
    parser.add_argument("--refresh", type=int, nargs="*", default=[1, 8, 16], help="refresh_every values of the cached bound (none: uncached only)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--staleness-steps", type=int, default=40, help="measured steps of the staleness run per refresh_every > 1 (0: skip)")
    parser.add_argument("--staleness-warmup", type=int, default=0, help="steps trained (with the cache) before the staleness run measures")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.latent_dim, args.train_points, args.rounds, args.steps, args.repeats, args.staleness_steps, args.staleness_warmup = 32, 4, 6000, 2, 2, 1, 4, 0
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    pyro.set_rng_seed(0)
    if args.data == "random":
        x = (torch.rand(args.train_points, 784) < 0.3).float()
    else:
        images, _ = load_mnist("mnist", train=True, data_dir=args.data)
        x = (images.flatten(1)[: args.train_points] > 0.5).float()
    x = x.to(device)
    k = args.k2
    ratios = {}
    if args.repeats > 0:
        ratios = timings(x, k, args, device)
    if args.staleness_steps:
        for r in args.refresh:
            if r == 1:
                continue
            diffs, spreads, gaps = staleness(k, r, x, args, device)
            print(
                f"staleness, refresh_every={r}, {len(diffs)} steps after {args.staleness_warmup}: prior term with the pool minus with current components, "
                f"nats per data point: mean {statistics.fmean(diffs):+.2e} (s.d. over steps {statistics.stdev(diffs):.1e}), "
                f"max |.| {max(map(abs, diffs)):.2e}; for scale, the Jensen gap of the fresh estimate at K2={k} "
                f"{statistics.median(g for g, _ in gaps):.2e} and at K2=500 {statistics.median(g for _, g in gaps):.2e}, "
                f"and its s.d. over draws of {k} points {statistics.median(spreads):.1e} (medians over the run)"
            )
    return ratios


if __name__ == "__main__":
    main()
