"""Stochastic-gradient MCMC on a plain Pyro regression model, and SG-MCMC-SA variable selection.

Shows, on scikit-learn's diabetes data (442 patients, 10 features, standardised):

1. SGLD and SGHMC (pyrozoo.inference) sampling a Bayesian linear regression written in plain
   Pyro (``model(x, y=None)`` with ``pyro.plate("data", len(x))``), with minibatches: the
   samplers scale the minibatch likelihood by N / B themselves. The kept draws go to an
   ``InMemorySamples`` sink and ``evaluate`` scores the posterior predictive on the test rows.
2. SG-MCMC-SA (Deng et al. 2019): the same model on the 10 real features plus ``--noise-features``
   columns of pure noise, with a spike-and-slab prior on the weights whose inclusion
   probabilities rho are adapted by stochastic approximation while SGHMC samples. A feature is
   selected when rho > 0.5; the script counts how many real and noise features are selected.

Run:

    python examples/sgmcmc.py            # about 20-30 seconds on one CPU core
    python examples/sgmcmc.py --quick    # smoke test, a few seconds
    python examples/sgmcmc.py --epochs 800 --lr 2e-4 --noise-features 80 --device cuda
"""

import argparse
import math
import time

import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

from pyrozoo.inference import SGHMC, SGLD, InMemorySamples, PolynomialDecay, StochasticApproximation, evaluate
from pyrozoo.models import SpikeAndSlabPrior


def load_data(noise_features, seed, device):
    data = load_diabetes()
    x, y = torch.tensor(data.data, dtype=torch.float32), torch.tensor(data.target, dtype=torch.float32)
    x = torch.cat([x, torch.randn(len(x), noise_features, generator=torch.Generator().manual_seed(seed))], 1)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    x_mean, x_std = x_train.mean(0), x_train.std(0)
    y_mean, y_std = float(y_train.mean()), float(y_train.std())

    def standardise(x_, y_):  # with the training rows' statistics
        return ((x_ - x_mean) / x_std).to(device), ((y_ - y_mean) / y_std).to(device)

    names = list(data.feature_names) + [f"noise{i}" for i in range(noise_features)]
    return (*standardise(x_train, y_train), *standardise(x_test, y_test), y_mean, y_std, names)


def regression(draw_beta):
    """y ~ N(x @ beta + b, 1 / tau): the weights come from ``draw_beta(x)``, tau is the noise precision."""

    def model(x, y=None):
        beta = draw_beta(x)
        b = pyro.sample("b", dist.Normal(x.new_zeros(()), 1.0))
        tau = pyro.sample("tau", dist.Gamma(x.new_tensor(6.0), 6.0))
        with pyro.plate("data", len(x)):
            return pyro.sample("y", dist.Normal(x @ beta + b, tau.rsqrt()), obs=y)

    return model


def normal_weights(x):
    return pyro.sample("beta", dist.Normal(x.new_zeros(x.shape[1]), 1.0).to_event(1))


def sample(name, sampler, data, test, args, scale):
    """Runs one chain (the second half kept, thinned to about ``args.draws``) and scores its draws."""
    steps = args.epochs * math.ceil(len(data[0]) / args.batch_size)
    sink = InMemorySamples()
    start = time.perf_counter()
    history = sampler.run(data, num_steps=steps, batch_size=args.batch_size, burn_in=steps // 2,
                          thin=max(1, steps // (2 * args.draws)), sink=sink, seed=args.seed, progress=False)
    samples = {k: v.to(data[0].device) for k, v in sink.load().items()}  # the sink keeps its draws on the CPU
    scores = evaluate(sampler.model, None, *test, samples=samples, num_samples=len(sink), y_scale=scale[1], y_shift=scale[0])
    row = {"sampler": name, "draws": len(sink), "test RMSE": scores["rmse"], "test LL": scores["test_ll"],
           "noise sd": float(samples["tau"].rsqrt().mean()) * scale[1], "seconds": time.perf_counter() - start,
           "status": history.attrs.get("status")}
    return row, samples, history


def main(args):
    torch.set_num_threads(args.threads)
    pyro.set_rng_seed(args.seed)
    x, y, x_test, y_test, y_mean, y_std, _ = load_data(0, args.seed, args.device)
    scale = (y_mean, y_std)
    print(f"diabetes: {len(x)} training and {len(x_test)} test rows, {x.shape[1]} features; RMSE, test LL and noise sd "
          f"in original units (target sd {y_std:.1f})")

    # 1. SGLD and SGHMC on the plain Pyro model. SGHMC moves about lr / (1 - momentum) per step,
    #    so it gets lr * (1 - momentum) for the same step length as SGLD.
    model, sghmc_lr = regression(normal_weights), args.lr * (1 - args.momentum)
    rows = [sample(name, sampler, (x, y), (x_test, y_test), args, scale)[0]
            for name, sampler in [("SGLD", SGLD(model, lr=args.lr)), ("SGHMC", SGHMC(model, lr=sghmc_lr, momentum=args.momentum))]]
    ls = torch.linalg.lstsq(torch.cat([x, torch.ones_like(x[:, :1])], 1), y.unsqueeze(-1)).solution  # reference: least squares
    ls_rmse = float((torch.cat([x_test, torch.ones_like(x_test[:, :1])], 1) @ ls - y_test.unsqueeze(-1)).pow(2).mean().sqrt()) * y_std
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    print(f"(least squares: test RMSE {ls_rmse:.3f})")

    # 2. SG-MCMC-SA: a spike-and-slab prior on the weights of the 10 real and the noise features
    xw, yw, xw_test, yw_test, _, _, names = load_data(args.noise_features, args.seed, args.device)
    P = xw.shape[1]
    prior = SpikeAndSlabPrior(v0=args.v0, v1=10.0, sparse=None)  # Laplace scale v0 sigma, slab variance 10 sigma^2
    prior.empirical_bayes({"beta": torch.zeros(P, device=args.device)}, sigma=1.0, rho=0.5, delta=0.5)
    sa = StochasticApproximation(prior, PolynomialDecay(1.0, 0.7, offset=100.0), tie_noise=True, noise_site="tau")  # omega_k = (100 + k)^-0.7
    sa_model = regression(lambda x: prior.sample_sparse("beta"))
    wide = []
    for name, sampler in [("SGHMC, N(0, 1) prior", SGHMC(regression(normal_weights), lr=sghmc_lr, momentum=args.momentum)),
                          ("SGHMC-SA, spike-and-slab", SGHMC(sa_model, lr=sghmc_lr, momentum=args.momentum, adaptations=[sa]))]:
        row, samples, history = sample(name, sampler, (xw, yw), (xw_test, yw_test), args, scale)
        beta = samples["beta"].mean(0).abs()
        wide.append({**row, "mean |beta| real": float(beta[:10].mean()), "mean |beta| noise": float(beta[10:].mean())})
    print(f"\nthe 10 real features and {P - 10} pure-noise ones (tau is tied to the SA's sigma in SGHMC-SA):")
    print(pd.DataFrame(wide).round(3).to_string(index=False))

    rho = prior.state.rho["beta"].cpu()
    selected = rho > 0.5
    print("\nSG-MCMC-SA: slab (inclusion) probability rho of the real features")
    print(pd.DataFrame({"feature": names[:10], "rho": rho[:10].numpy(), "posterior mean beta": samples["beta"].mean(0)[:10].cpu().numpy(),
                        "selected": selected[:10].numpy()}).round(3).to_string(index=False))
    print(f"selected (rho > 0.5): {int(selected[:10].sum())} of 10 real features "
          f"({', '.join(n for n, s in zip(names[:10], selected[:10]) if s) or 'none'}), {int(selected[10:].sum())} of {P - 10} "
          f"noise features; largest rho of a noise feature {float(rho[10:].max()):.3f}")
    last = history.iloc[-1]
    print(f"SA state at the end: sigma {float(last['sigma']) * y_std:.1f} (original units), mean rho {float(last['rho_mean']):.3f}, "
          f"delta {float(last['delta_mean']):.3f}")
    if args.plot:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3))
        ax.bar(range(P), rho.numpy(), color=["C0"] * 10 + ["C7"] * (P - 10))
        ax.axhline(0.5, color="k", lw=0.8, ls="--")
        ax.set_xlabel("feature (the first 10 real, the rest noise)")
        ax.set_ylabel("slab probability rho")
        fig.tight_layout()
        plt.show()
    if args.quick:
        print("(--quick: short chains, the numbers are not meaningful)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=400, help="passes over the training rows per chain")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4, help="SGLD step size (SGHMC: lr * (1 - momentum))")
    parser.add_argument("--momentum", type=float, default=0.9, help="SGHMC momentum")
    parser.add_argument("--draws", type=int, default=200, help="about how many thinned draws to keep from the second half")
    parser.add_argument("--noise-features", type=int, default=40)
    parser.add_argument("--v0", type=float, default=0.03, help="spike (Laplace) scale factor of the SSGL prior")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (a model this small runs fastest on one)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--plot", action="store_true", help="bar plot of rho (needs matplotlib)")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.draws = 4, 20
    main(args)
