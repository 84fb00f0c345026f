"""Importance-weighted objectives (IWAE, Rényi-alpha) against the ELBO on a plain Pyro model.

Shows, on scikit-learn's breast-cancer data (569 tumours, 30 features, standardised), a
Bayesian logistic regression written in plain Pyro, fitted with the same mean-field guide
(``MeanFieldNormalGuide``) under three objectives of ``pyrozoo.inference``:

* ``ClosedFormKL_ELBO``: the ELBO, with the Normal-Normal KL in closed form;
* ``ImportanceWeighted_ELBO(K)``: the IWAE bound of Burda et al. with K particles;
* ``RenyiELBO(alpha, K)``: the Rényi bound (0 < alpha < 1 lies between IWAE and the ELBO).

For each fit it prints the test log-likelihood and accuracy, the ELBO and the IWAE-K bound
the fitted guide reaches on the training data, and, for the importance-weighted ones, the
effective sample size of the K importance weights (``ess_mean`` in the history ``fit``
returns; 1 = collapsed onto one particle, K = all equal). An IWAE fit is the ELBO of the
importance-resampled distribution q_K (Domke & Sheldon 2018), so its predictions are also
made from ``importance_resampled_samples`` (draws of q_K, weighted on the training data).

All fits are full-batch: on minibatches the importance-weighted estimates are biased.

Run:

    python examples/importance_weighted.py              # about 30 seconds on one CPU core
    python examples/importance_weighted.py --quick      # smoke test, a few seconds
    python examples/importance_weighted.py --particles 32 --alpha 0.2 --steps 2000
"""

import argparse
import time
import warnings

import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import train_test_split

from pyrozoo.guides import MeanFieldNormalGuide
from pyrozoo.inference import ClosedFormKL_ELBO, ImportanceWeighted_ELBO, RenyiELBO, RunWarning, evaluate, fit, importance_resampled_samples


def load_data(device):
    data = load_breast_cancer()
    x, y = torch.tensor(data.data, dtype=torch.float32), torch.tensor(data.target, dtype=torch.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    mean, std = x_train.mean(0), x_train.std(0)
    return [t.to(device) for t in ((x_train - mean) / std, y_train, (x_test - mean) / std, y_test)]


def model(x, y=None):
    """Logistic regression: w ~ N(0, I), b ~ N(0, 1), y ~ Bernoulli(sigmoid(x @ w + b))."""
    w = pyro.sample("w", dist.Normal(x.new_zeros(x.shape[1]), 1.0).to_event(1))
    b = pyro.sample("b", dist.Normal(x.new_zeros(()), 1.0))
    with pyro.plate("data", len(x)):
        # (x * w).sum(-1) is x @ w written to broadcast over a leading particle dimension of w and b,
        # so that the K particles of an importance-weighted objective are evaluated at once
        return pyro.sample("y", dist.Bernoulli(logits=(x * w).sum(-1) + b), obs=y)


@torch.no_grad()
def bound(objective, guide, x, y, repeats):
    """Mean of ``repeats`` estimates of the objective's bound (minus its loss) at the fitted guide."""
    return sum(-objective.loss(model, guide, x, y) for _ in range(repeats)) / repeats


def main(args):
    torch.set_num_threads(args.threads)
    x, y, x_test, y_test = load_data(args.device)
    K = args.particles
    print(f"breast cancer: {len(x)} training and {len(x_test)} test rows, {x.shape[1]} features; "
          f"{args.steps} full-batch steps per fit, K = {K} particles")
    objectives = {
        "ELBO": ClosedFormKL_ELBO(),
        f"IWAE (K={K})": ImportanceWeighted_ELBO(num_particles=K, vectorize_particles=True, max_plate_nesting=1),
        f"Renyi (alpha={args.alpha}, K={K})": RenyiELBO(alpha=args.alpha, num_particles=K, vectorize_particles=True, max_plate_nesting=1),
    }
    elbo, iwae = ClosedFormKL_ELBO(), ImportanceWeighted_ELBO(num_particles=K, vectorize_particles=True, max_plate_nesting=1)
    rows = []
    for name, objective in objectives.items():
        pyro.clear_param_store()
        guide = MeanFieldNormalGuide(model, init_scale=0.1)
        start = time.perf_counter()
        with warnings.catch_warnings():  # what went wrong is in history.attrs["events"], shown in the table
            warnings.simplefilter("ignore", RunWarning)
            history = fit(model, guide, (x, y), epochs=args.steps, batch_size=None, lr=args.lr, objective=objective,
                          seed=args.seed, device=args.device, progress=False)
        seconds = time.perf_counter() - start
        pyro.set_rng_seed(args.seed)
        scores = evaluate(model, guide, x_test, y_test, num_samples=args.num_samples)
        row = {"objective": name, "predictions": "guide q", "test LL": scores["test_ll"], "accuracy": scores["accuracy"],
               "ELBO": bound(elbo, guide, x, y, args.repeats), f"IWAE-{K} bound": bound(iwae, guide, x, y, args.repeats),
               "ESS of K (training)": history["ess_mean"].iloc[-1] if "ess_mean" in history else None,
               "posterior sd of w": float(guide.posterior("w").stddev.mean().detach()), "seconds": seconds,
               "events": ", ".join(sorted({e["kind"] for e in history.attrs["events"]})) or "-"}
        rows.append(row)
        if name.startswith("IWAE"):
            # predictions from q_K: for each draw, K proposals from q weighted on the training data, one resampled
            samples, diagnostics = importance_resampled_samples(model, guide, x, y, num_samples=args.num_samples, num_proposals=K,
                                                                return_diagnostics=True)
            scores = evaluate(model, None, x_test, y_test, samples=samples, num_samples=args.num_samples)
            rows.append({**row, "predictions": f"resampled q_{K}", "test LL": scores["test_ll"], "accuracy": scores["accuracy"],
                         "ESS of K (training)": diagnostics["ess"], "seconds": None})
    table = pd.DataFrame(rows)
    print(table.round(4).to_string(index=False))
    print("\n(ELBO <= IWAE bound <= log evidence for every guide; the test LL is the mean log predictive probability per test row)")
    if args.plot:
        import matplotlib.pyplot as plt

        ax = table.plot.bar(x="objective", y=["ELBO", f"IWAE-{K} bound"], figsize=(7, 3), rot=0)
        ax.set_ylabel("nats (training data)")
        plt.tight_layout()
        plt.show()
    if args.quick:
        print("(--quick: a few steps only, the numbers are not meaningful)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1500, help="full-batch optimisation steps per objective")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--particles", type=int, default=16, help="K of the importance-weighted objectives")
    parser.add_argument("--alpha", type=float, default=0.5, help="order of the Renyi bound (not 1)")
    parser.add_argument("--num-samples", type=int, default=500, help="posterior draws for the test predictions")
    parser.add_argument("--repeats", type=int, default=20, help="estimates averaged for the reported bounds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (a model this small runs fastest on one)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--plot", action="store_true", help="bar plot of the bounds (needs matplotlib)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.num_samples, args.repeats = 20, 50, 2
    main(args)
