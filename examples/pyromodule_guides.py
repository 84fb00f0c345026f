"""Your own PyroModule network, fitted with several of pyrozoo's guides.

Shows a Bayesian MLP written as a plain Pyro ``PyroModule`` (no pyrozoo code in the model):
``PyroSample`` priors on its weights, a learned noise scale ``sigma ~ HalfNormal(1)`` and a
data plate that subsamples itself (``pyro.plate("data", len(x), subsample_size=B)``), so that
``pyrozoo.inference.fit`` passes it all the data at every step and it draws its own minibatch.
On scikit-learn's diabetes data (442 patients, 10 features, standardised) it is fitted with

* ``MeanFieldNormalGuide``: a factorised Gaussian posterior (the ELBO, KL in closed form);
* ``DeltaGuide``: point masses, i.e. MAP;
* ``SemiImplicitGuide``: Gaussians mixed over hypernetwork-generated locations (the SIVI bound);
* ``CompositeGuide(model, SparseVariationalDropoutGuide)``: sparse variational dropout on every
  weight and bias, mean-field on ``sigma`` (which a dropout posterior cannot cover), with the
  fraction of weights sparse VD would prune (log alpha > 3).

It prints the test log-likelihood and RMSE per guide (original units), the 5 / 50 / 95 %
posterior quantiles of ``sigma`` (``guide.quantiles``) and, for the mean-field fit, the split
of the predictive variance into its aleatoric and epistemic parts (``uncertainty``).

Run:

    python examples/pyromodule_guides.py              # about 30 seconds on one CPU core
    python examples/pyromodule_guides.py --quick      # smoke test, a few seconds
    python examples/pyromodule_guides.py --hidden 50 --epochs 200 --device cuda
"""

import argparse
import time
from functools import partial

import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule, PyroSample
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split
from torch import nn

from pyrozoo.guides import CompositeGuide, DeltaGuide, MeanFieldNormalGuide, SemiImplicitGuide, SparseVariationalDropoutGuide
from pyrozoo.inference import ClosedFormKL_ELBO, SIVI_ELBO, evaluate, fit, uncertainty


class BayesianMLP(PyroModule):
    """y ~ N(f(x), sigma^2) with f a one-hidden-layer tanh network whose weights have N(0, prior_scale^2) priors."""

    def __init__(self, in_features, hidden, batch_size, prior_scale=1.0, device="cpu"):
        super().__init__()
        self.batch_size = batch_size
        self.fc1 = PyroModule[nn.Linear](in_features, hidden)
        self.fc2 = PyroModule[nn.Linear](hidden, 1)
        zero = torch.zeros((), device=device)  # the priors' tensors live where the data do
        for layer in (self.fc1, self.fc2):
            layer.weight = PyroSample(dist.Normal(zero, prior_scale).expand(layer.weight.shape).to_event(2))
            layer.bias = PyroSample(dist.Normal(zero, prior_scale).expand(layer.bias.shape).to_event(1))
        self.sigma_prior = dist.HalfNormal(zero + 1.0)

    def forward(self, x, y=None):
        sigma = pyro.sample("sigma", self.sigma_prior)
        # the network runs on all rows outside the plate, so its weights are global (one draw per step)
        mean = self.fc2(torch.tanh(self.fc1(x))).squeeze(-1)
        with pyro.plate("data", len(x), subsample_size=min(self.batch_size, len(x))) as idx:
            return pyro.sample("y", dist.Normal(mean[idx], sigma), obs=None if y is None else y[idx])


def load_data(device):
    data = load_diabetes()
    x, y = torch.tensor(data.data, dtype=torch.float32), torch.tensor(data.target, dtype=torch.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    x_mean, x_std, y_mean, y_std = x_train.mean(0), x_train.std(0), float(y_train.mean()), float(y_train.std())
    tensors = ((x_train - x_mean) / x_std, (y_train - y_mean) / y_std, (x_test - x_mean) / x_std, (y_test - y_mean) / y_std)
    return [t.to(device) for t in tensors] + [y_mean, y_std]


def main(args):
    torch.set_num_threads(args.threads)
    x, y, x_test, y_test, y_mean, y_std = load_data(args.device)
    print(f"diabetes: {len(x)} training and {len(x_test)} test rows; MLP 10-{args.hidden}-1, minibatches of {args.batch_size} "
          f"drawn by the model's own plate, {args.epochs} epochs; LL, RMSE and sigma in original units")
    guides = {
        "MeanFieldNormalGuide": (lambda m: MeanFieldNormalGuide(m, init_scale=0.01), ClosedFormKL_ELBO()),
        "DeltaGuide (MAP)": (DeltaGuide, ClosedFormKL_ELBO()),
        "SemiImplicitGuide": (lambda m: SemiImplicitGuide(m, init_scale=0.01), SIVI_ELBO(K=args.mixing)),
        # sparse VD's default start, log sigma^2 = -10, suits large networks; from it the variances take
        # hundreds of epochs to grow on a problem this small, so it starts at -4 here
        "CompositeGuide(SparseVD + mean-field)": (lambda m: CompositeGuide(m, partial(SparseVariationalDropoutGuide, init_log_sigma2=-4.0)),
                                                  ClosedFormKL_ELBO()),
    }
    rows, fitted = [], {}
    for name, (make_guide, objective) in guides.items():
        pyro.clear_param_store()
        pyro.set_rng_seed(args.seed)
        model = BayesianMLP(x.shape[1], args.hidden, args.batch_size, device=args.device)
        guide = make_guide(model)
        start = time.perf_counter()
        history = fit(model, guide, (x, y), epochs=args.epochs, lr=args.lr, objective=objective, seed=args.seed,
                      device=args.device, progress=False)  # (the model has no parameters to say where it lives)
        seconds = time.perf_counter() - start
        scores = evaluate(model, guide, x_test, y_test, num_samples=args.num_samples, y_scale=y_std, y_shift=y_mean)
        lo, med, hi = (float(q) * y_std for q in guide.quantiles([0.05, 0.5, 0.95])["sigma"])
        row = {"guide": name, "test LL": scores["test_ll"], "test RMSE": scores["rmse"], "sigma 5%": lo, "sigma 50%": med,
               "sigma 95%": hi, "final loss": history["loss"].iloc[-1], "seconds": seconds, "status": history.attrs["status"]}
        if isinstance(guide, CompositeGuide):
            print(f"CompositeGuide's assignment of the sites: {guide.assignment}")
            vd = next(part for part in guide if isinstance(part, SparseVariationalDropoutGuide))
            masks = vd.keep_masks()  # log alpha < 3
            kept, total = sum(int(m.sum()) for m in masks.values()), sum(m.numel() for m in masks.values())
            row["pruned (log alpha > 3)"] = 1.0 - kept / total
        rows.append(row)
        fitted[name] = (model, guide)
    print(pd.DataFrame(rows).round(3).to_string(index=False))
    print("(final loss: the last epoch's mean minibatch loss, minus the ELBO or SIVI bound; for MAP minus the log joint, no bound)")

    # the predictive variance of the mean-field fit, split by the law of total variance
    model, guide = fitted["MeanFieldNormalGuide"]
    parts = uncertainty(model, guide, x_test, num_samples=args.num_samples)
    sd = pd.DataFrame({k: (v.sqrt() * y_std).cpu().numpy() for k, v in parts.items()})  # sd per test row, original units
    print("\nMeanFieldNormalGuide: predictive sd per test row (original units), total^2 = aleatoric^2 + epistemic^2")
    print(sd.describe().loc[["mean", "min", "max"]].round(2).to_string())
    if args.plot:
        import matplotlib.pyplot as plt

        order = sd["total"].argsort().values
        plt.figure(figsize=(7, 3))
        plt.plot(sd["aleatoric"].values[order], label="aleatoric")
        plt.plot(sd["epistemic"].values[order], label="epistemic")
        plt.xlabel("test row (by total sd)")
        plt.ylabel("predictive sd")
        plt.legend()
        plt.tight_layout()
        plt.show()
    if args.quick:
        print("(--quick: a few steps only, the numbers are not meaningful)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100, help="passes over the training rows (ceil(N / B) steps each)")
    parser.add_argument("--batch-size", type=int, default=32, help="the model plate's subsample_size")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--hidden", type=int, default=20)
    parser.add_argument("--mixing", type=int, default=8, help="K of the SIVI bound")
    parser.add_argument("--num-samples", type=int, default=200, help="posterior draws for the test predictions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (a model this small runs fastest on one)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--plot", action="store_true", help="plot the uncertainty split (needs matplotlib)")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.num_samples = 2, 20
    main(args)
