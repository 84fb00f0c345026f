"""Semi-implicit variational inference (SIVI, DSIVI) on a hierarchical linear regression.

A plain Pyro model (no pyrozoo model class) regresses disease progression on scikit-learn's
diabetes data (10 standardised features, 80/20 train/test split) with a shrinkage prior::

    tau ~ HalfNormal(1),  w | tau ~ Normal(0, tau),  b ~ Normal(0, 1),  sigma ~ HalfNormal(1)

Two of the features, total serum cholesterol (s1) and LDL (s2), are strongly correlated, so
the posterior of their coefficients is too: a mean-field posterior cannot show that, and
understates their spread. ``SemiImplicitGuide`` makes ``q(w)`` a continuous mixture of
Gaussians whose locations a small hypernetwork generates from noise, which can correlate
the coefficients. It is trained with

* ``SIVI_ELBO(K)`` on the model above (explicit priors; ``K`` fresh mixing draws), and
* ``DSIVI_ELBO(K1, K2)`` on the same model with ``tau`` integrated out: the prior of ``w``
  becomes the semi-implicit scale mixture ``SemiImplicit(HalfNormal, Normal(0, tau))``, whose
  density DSIVI estimates from ``K2`` draws of ``tau``;

against ``MeanFieldNormalGuide`` on both forms of the model. The table shows the test
log-likelihood and RMSE (original units), the final loss (each method's own bound on the
negative evidence) and the posterior standard deviations and correlation of the s1 and s2
coefficients, beside a NUTS reference (``pyro.infer.MCMC``; ``--nuts-samples 0`` skips it).

Run::

    python examples/semi_implicit.py             # about a minute and a half on a CPU
    python examples/semi_implicit.py --quick     # smoke test
    python examples/semi_implicit.py --steps 5000 --K 32
"""

import argparse

import numpy as np
import pandas as pd
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import MCMC, NUTS, Predictive
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

from pyrozoo.distributions import SemiImplicit
from pyrozoo.guides import MeanFieldNormalGuide, SemiImplicitGuide
from pyrozoo.inference import DSIVI_ELBO, SIVI_ELBO, ClosedFormKL_ELBO, evaluate, fit

S1, S2 = 4, 5  # the columns of total cholesterol and LDL in load_diabetes


def load_data(device):
    """Diabetes, split 80/20 with a fixed seed, standardised with the training statistics."""
    x, y = load_diabetes(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0)
    x_mean, x_std, y_mean, y_std = x_train.mean(0), x_train.std(0), y_train.mean(), y_train.std()

    def tensor(a):
        return torch.tensor(a, dtype=torch.float32, device=device)

    train = tensor((x_train - x_mean) / x_std), tensor((y_train - y_mean) / y_std)
    test = tensor((x_test - x_mean) / x_std), tensor((y_test - y_mean) / y_std)
    return train, test, float(y_mean), float(y_std)


def hierarchical(x, y=None):
    """The model with the global shrinkage scale tau as a latent site."""
    one = x.new_ones(())
    tau = pyro.sample("tau", dist.HalfNormal(one))
    w = pyro.sample("w", dist.Normal(0 * one, tau).expand([x.shape[1]]).to_event(1))
    return likelihood(x, y, w)


def make_marginal(num_mixing):
    """The same model with tau integrated out: w's prior is a semi-implicit scale mixture."""

    def marginal(x, y=None):
        zeros = x.new_zeros(x.shape[1])
        prior = SemiImplicit(
            dist.HalfNormal(x.new_ones(())),  # the mixing variable, tau
            lambda tau: dist.Normal(zeros, tau.unsqueeze(-1)).to_event(1),  # w | tau
            zeros.shape, num_mixing=num_mixing,
        )
        return likelihood(x, y, pyro.sample("w", prior))

    return marginal


def likelihood(x, y, w):
    b = pyro.sample("b", dist.Normal(x.new_zeros(()), 1.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(x.new_ones(())))
    with pyro.plate("data", len(x)):
        return pyro.sample("y", dist.Normal(x @ w + b, sigma), obs=y)


def coefficient_summary(w):
    """Posterior sds of the s1 and s2 coefficients and their correlation, from draws (S, 10)."""
    w = w.reshape(len(w), -1).detach().cpu().numpy()
    return {"sd w_s1": w[:, S1].std(), "sd w_s2": w[:, S2].std(), "corr(w_s1, w_s2)": np.corrcoef(w[:, S1], w[:, S2])[0, 1]}


def main(args):
    torch.set_num_threads(args.threads)
    train, test, y_mean, y_std = load_data(args.device)
    marginal = make_marginal(args.K)
    K = args.K
    methods = [  # (name, model, guide, objective)
        ("mean-field", hierarchical, MeanFieldNormalGuide, ClosedFormKL_ELBO()),
        (f"SIVI, K={K}", hierarchical, SemiImplicitGuide, SIVI_ELBO(K)),
        ("mean-field, marginal prior", marginal, MeanFieldNormalGuide, DSIVI_ELBO(0, K)),
        (f"DSIVI, K1=K2={K}", marginal, SemiImplicitGuide, DSIVI_ELBO(K, K)),
    ]
    rows = []
    for name, model, guide_class, objective in methods:
        pyro.clear_param_store()
        pyro.set_rng_seed(args.seed)
        if guide_class is SemiImplicitGuide:  # a semi-implicit posterior for w; tau, b, sigma stay mean-field
            guide = SemiImplicitGuide(model, sites=["w"], num_mixing=K, noise_dim=args.noise_dim, hidden=(args.hidden,))
        else:
            guide = MeanFieldNormalGuide(model)
        history = fit(model, guide, train, epochs=args.steps, batch_size=None, lr=args.lr, objective=objective,
                      seed=args.seed, progress=not args.quick)  # batch_size=None: one full-batch step per epoch
        metrics = evaluate(model, guide, *test, num_samples=args.num_samples, y_scale=y_std, y_shift=y_mean)
        draws = Predictive(model, guide=guide, num_samples=args.num_samples, return_sites=["w"])(test[0])["w"]
        rows.append({"method": name, "status": history.attrs["status"], "test LL": metrics["test_ll"],
                     "test RMSE": metrics["rmse"], "loss": history["loss"].iloc[-50:].mean(),
                     "train s": history["seconds"].sum(), **coefficient_summary(draws)})
    if args.nuts_samples > 0:
        pyro.set_rng_seed(args.seed)
        mcmc = MCMC(NUTS(hierarchical), num_samples=args.nuts_samples, warmup_steps=args.nuts_samples, disable_progbar=args.quick)
        mcmc.run(*train)
        samples = mcmc.get_samples()
        metrics = evaluate(hierarchical, None, *test, samples=samples, y_scale=y_std, y_shift=y_mean)  # every draw
        rows.append({"method": "NUTS (reference)", "test LL": metrics["test_ll"], "test RMSE": metrics["rmse"],
                     **coefficient_summary(samples["w"])})
    print(f"\ndiabetes, hierarchical linear regression, {args.steps} full-batch steps, "
          f"{len(train[0])} training / {len(test[0])} test examples (RMSE and LL in original units)")
    print(pd.DataFrame(rows).set_index("method").to_string(float_format=lambda v: f"{v:.4g}", na_rep="-"))
    print("loss: mean over the last 50 steps of each objective (a bound on the negative log evidence)")

    if args.plot:
        import matplotlib.pyplot as plt

        from pyrozoo.atomic import save_figure  # replaces the file only once it is complete

        w = draws.reshape(len(draws), -1).cpu()
        plt.scatter(w[:, S1], w[:, S2], s=3, alpha=0.3, label=methods[-1][0])
        if args.nuts_samples > 0:
            plt.scatter(samples["w"][:, S1].cpu(), samples["w"][:, S2].cpu(), s=3, alpha=0.3, label="NUTS")
        plt.xlabel("w_s1 (total cholesterol)")
        plt.ylabel("w_s2 (LDL)")
        plt.legend()
        save_figure(plt.gcf(), "semi_implicit.png", dpi=120)
        print("wrote semi_implicit.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="full-batch optimisation steps")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--K", type=int, default=16, help="fresh mixing draws of the SIVI / DSIVI estimates (K1 = K2 = K)")
    parser.add_argument("--noise-dim", type=int, default=8, help="noise dimension of the hypernetwork")
    parser.add_argument("--hidden", type=int, default=32, help="hidden units of the hypernetwork")
    parser.add_argument("--num-samples", type=int, default=1000, help="posterior draws for the metrics")
    parser.add_argument("--nuts-samples", type=int, default=300, help="NUTS draws (and warm-up steps) of the reference; 0 skips it")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a model this small runs fastest on one)")
    parser.add_argument("--plot", action="store_true", help="scatter the s1 / s2 coefficients of DSIVI and NUTS")
    parser.add_argument("--quick", action="store_true", help="a few steps only (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.num_samples, args.nuts_samples = 60, 50, 10
    main(args)
