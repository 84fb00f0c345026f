"""Cost of one DSIVI training step of a VAE whose prior is the aggregated posterior, estimated
from K2 = 5000 sampled training points, against the plain ELBO step of the same VAE
(standard Normal prior), timed in the same process (interleaved rounds, medians).

Also timed, to show where the time goes: K2 = 500, and K2 = 5000 with the prior's component
parameters precomputed (the estimator's own cost without encoding 5000 inputs per step).

Example::

    python benchmarks/dsivi_cost.py --threads 1
"""

import argparse
import sys
from pathlib import Path

import pyro
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved_medians  # noqa: E402

from pyrozoo.distributions import FiniteMixing, LogScaleNormal, SemiImplicit  # noqa: E402
from pyrozoo.inference import DSIVI_ELBO, collect_parameters, default_optimizer, training_step  # noqa: E402
from pyrozoo.models import MLP, VAE, AggregatedPosteriorPrior, AmortizedNormalGuide, GaussianEncoder, StandardNormalLatentPrior  # noqa: E402


class FixedComponentsPrior(torch.nn.Module):
    """The aggregated-posterior estimator over precomputed component parameters (no encoder pass)."""

    def __init__(self, loc, log_scale, k):
        super().__init__()
        self.loc, self.log_scale, self.k = loc, log_scale, k

    def distribution(self):
        mixing = FiniteMixing((self.loc, self.log_scale))
        return SemiImplicit(mixing, lambda psi: LogScaleNormal(psi[0], psi[1]).to_event(1), (self.loc.shape[-1],), num_mixing=self.k, share_mixing=True)


def make_step(prior_kind, k, x, args, device):
    """A closure running one optimisation step of a fresh VAE on random minibatches."""
    torch.manual_seed(0)
    d, h = args.latent_dim, args.hidden
    encoder = GaussianEncoder(MLP(x.shape[1], [h, h], 2 * d), d)
    decoder = MLP(d, [h, h], x.shape[1])
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
    objective = DSIVI_ELBO(0, max(k, 1))

    def batch():
        idx = torch.randint(len(x), (args.batch_size,), device=device)
        return x[idx], None, idx

    opt = default_optimizer(collect_parameters(model, guide, objective, batch()), 5e-4)

    def step():
        training_step(model, guide, objective, opt, batch())

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--latent-dim", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=300)
    parser.add_argument("--train-points", type=int, default=60000, help="size of the (random binary) training set")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.hidden, args.latent_dim, args.train_points, args.rounds, args.steps = 32, 4, 6000, 2, 1
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    pyro.set_rng_seed(0)
    x = (torch.rand(args.train_points, 784) < 0.3).float().to(device)
    candidates = {
        "plain ELBO (standard Normal prior)": make_step("normal", 0, x, args, device),
        "DSIVI K2=5000": make_step("aggregated", 5000, x, args, device),
        "DSIVI K2=500": make_step("aggregated", 500, x, args, device),
        "DSIVI K2=5000, components precomputed": make_step("fixed", 5000, x, args, device),
    }
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = interleaved_medians(candidates, rounds=args.rounds, steps=args.steps, warmup=2, sync=sync)
    base = times["plain ELBO (standard Normal prior)"]
    print(f"device {device}, {args.threads} thread(s), batch {args.batch_size}, MLP 784-{args.hidden}-{args.hidden}-{args.latent_dim}")
    for name, t in times.items():
        print(f"{name:40s} {t * 1e3:9.2f} ms/step   ratio {t / base:6.2f}x")
    # arithmetic floor: multiply-adds of the MLPs, backward ~ 2x forward
    h, d, n_in = args.hidden, args.latent_dim, x.shape[1]
    enc = n_in * h + h * h + h * 2 * d
    dec = d * h + h * h + h * n_in
    plain = 3 * args.batch_size * (enc + dec)
    print(
        f"multiply-adds per step: plain {plain / 1e6:.0f}M; encoding 5000 prior points adds {5000 * enc / 1e6:.0f}M forward "
        f"(ratio >= {(plain + 5000 * enc) / plain:.1f}x) and {3 * 5000 * enc / 1e6:.0f}M with its backward pass "
        f"(ratio ~ {(plain + 3 * 5000 * enc) / plain:.1f}x)"
    )
    return times


if __name__ == "__main__":
    main()
