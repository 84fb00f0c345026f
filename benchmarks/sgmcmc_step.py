"""Cost of one SG-MCMC-SA step relative to a plain SGD step on the same CNN.

Every case takes one step on the same minibatch of the 2-Conv-2-FC CNN of Deng et al.
(2019, Sec. 5.2) in the same process (interleaved rounds, medians; see ``timing.py``); the
ratios are against ``sgd``: ``torch.optim.SGD`` with momentum 0.9 on the cross-entropy.

* ``sghmc``: :class:`pyrozoo.inference.SGHMC` on the Pyro model (minibatch log-joint from
  the trace, N(0, 1) prior);
* ``sghmc-sa``: the same model with the SSGL prior on FC1 and the stochastic-approximation
  step of every latent variable (Algorithm 1), i.e. the paper's SGHMC-SA;
* ``sghmc-sa-prune``: SGHMC-SA plus magnitude pruning of FC1 after every step;
* ``sghmc-sa-nchw``: SGHMC-SA with the convolution weights in NCHW order instead of the
  network's channels-last default (what the layout buys; not with ``--contiguous``).

    python benchmarks/sgmcmc_step.py                     # batch 1000, as in the paper
    python benchmarks/sgmcmc_step.py --batch-size 100 --rounds 15 --steps 10
    python benchmarks/sgmcmc_step.py --contiguous        # NCHW convolution weights throughout
"""

import argparse
import sys
from pathlib import Path

import pyro
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_medians  # noqa: E402

from pyrozoo.inference.pruning import MagnitudePruning  # noqa: E402
from pyrozoo.inference.sgmcmc import SGHMC  # noqa: E402
from pyrozoo.inference.sgmcmc_sa import StochasticApproximation  # noqa: E402
from pyrozoo.inference.step_sizes import PolynomialDecay  # noqa: E402
from pyrozoo.models import BayesianNeuralNetwork, CategoricalLikelihood, NormalPrior, TwoConvTwoFCNet  # noqa: E402
from pyrozoo.models.spike_and_slab import SpikeAndSlabPrior  # noqa: E402
from pyrozoo.reporting import to_markdown  # noqa: E402

NUM_TRAIN = 60000


def sgd_step(x, y, channels_last=True):
    net = TwoConvTwoFCNet(channels_last=channels_last).to(x.device)
    opt = torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def sampler_step(x, y, adaptive: bool, prune: bool, channels_last=True):
    net = TwoConvTwoFCNet(channels_last=channels_last).to(x.device)
    idx = torch.arange(len(x), device=x.device)
    if not adaptive:
        model = BayesianNeuralNetwork(net, NormalPrior(1.0), CategoricalLikelihood(NUM_TRAIN))
        sampler = SGHMC(model, lr=5e-7, momentum=0.9, inverse_temperature=1000.0)
    else:
        p = net.fc1.weight.numel()
        prior = SpikeAndSlabPrior(1.0, 0.1, sparse={"expose_modules": ["fc1"], "hide_parameters": ["bias"]}, nu=1000.0, lam=1000.0, a=float(p), b=float(p))
        model = BayesianNeuralNetwork(net, prior, CategoricalLikelihood(NUM_TRAIN))
        prior.empirical_bayes(net)
        adaptations = [StochasticApproximation(prior, PolynomialDecay(1.0, 0.75, offset=1000.0))]
        if prune:
            adaptations.append(MagnitudePruning(["fc1.weight"], target=0.9))
        sampler = SGHMC(model, lr=5e-7, momentum=0.9, inverse_temperature=1000.0, adaptations=adaptations)

    def step():
        sampler.step(x, y, idx)

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--contiguous", action="store_true", help="NCHW convolution weights (default: the network's channels-last layout)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    pyro.enable_validation(False)
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.rand(args.batch_size, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    layout = not args.contiguous
    candidates = {
        "sgd": sgd_step(x, y, layout),
        "sghmc": sampler_step(x, y, adaptive=False, prune=False, channels_last=layout),
        "sghmc-sa": sampler_step(x, y, adaptive=True, prune=False, channels_last=layout),
        "sghmc-sa-prune": sampler_step(x, y, adaptive=True, prune=True, channels_last=layout),
    }
    if layout:
        candidates["sghmc-sa-nchw"] = sampler_step(x, y, adaptive=True, prune=False, channels_last=False)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    medians = interleaved_medians(candidates, rounds=args.rounds, steps=args.steps, warmup=args.warmup, sync=sync)
    import pandas as pd

    table = pd.DataFrame([{"case": name, "ms_per_step": 1000 * t, "ratio_to_sgd": t / medians["sgd"]} for name, t in medians.items()])
    print(f"2-Conv-2-FC CNN ({'channels-last' if layout else 'NCHW'} convolution weights), batch {args.batch_size}, {device}, {torch.get_num_threads()} thread(s)")
    print(to_markdown(table, floatfmt=".3f"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
