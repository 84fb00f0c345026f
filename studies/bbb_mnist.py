"""Controlled experiment (issue 23, item 2): is the gap between our Bayes by Backprop on MNIST
and Blundell et al. (2015) a bug in pyrozoo or the training budget?

``docs/results/bayes_by_backprop_mnist.md`` reports 1.76 % test error for the 784-400-400-10 MLP
with the scale-mixture prior (``pi = 1/2``, ``-log sigma1 = 0``, ``-log sigma2 = 6``; 50 epochs,
Adam 1e-3, one seed), against 1.36 % in the paper's Table 1 (claim ``blundell-mnist``), and its
signal-to-noise pruning loses +35 % relative error at a quarter of the weights kept (claim
``graves-pruning``). This script trains the same model twice, on the same data subset, with the
same optimiser, initialisation, batch size and budget:

* **pyrozoo**: the example's own recipe (:func:`zoo_protocols.bayes_by_backprop.settings`,
  :func:`~zoo_protocols.bayes_by_backprop.train`, :func:`~zoo_protocols.bayes_by_backprop.scores` and
  :func:`~zoo_protocols.bayes_by_backprop.pruning`): :class:`~pyrozoo.models.ScaleMixturePrior`, a
  :class:`~pyrozoo.guides.MeanFieldNormalGuide` (log-parameterised scale) and
  :class:`~pyrozoo.inference.ClosedFormKL_ELBO`, which falls back to the single-sample Monte
  Carlo KL ``log q(w) - log p(w)`` for this prior;
* **independent**: a plain-PyTorch Bayes by Backprop written from the paper (sec. 3.2-3.4):
  ``w = mu + softplus(rho) * eps`` (eq. 12 of the slides' transcription), the cost
  ``pi_i (log q(w) - log P(w)) - log P(D_i | w)`` at one weight sample per minibatch (common random
  numbers for both terms), the scale-mixture density of eq. 7 evaluated by ``logaddexp``, and the
  minibatch KL weights ``pi_i = 1/M`` (``--kl-weights uniform``, the default) or
  ``2^(M-i) / (2^M - 1)`` (``blundell``, eq. 9) - the same option passed to the recipe.

Both start at the same initialisation distribution (means as PyTorch's ``nn.Linear``, the
recipe's "start at the network's initialisation"; every standard deviation ``softplus(-5)``, the
recipe's ``INIT_SCALE``), put the prior on weights and biases alike, train with Adam (1e-3) on
minibatches of 128 in a fresh random order every epoch, and are scored alike: test error of the
posterior predictive (softmax averaged over ``--num-samples`` weight draws) and of the network at
the posterior mean, then the same after removing the weights (biases kept) of smallest
``|mu / sigma|`` so that given fractions are kept (Graves 2011; Blundell et al. 2015, sec. 5.1).

**Why the comparison is faithful, and what it can and cannot show.** Everything that defines the
estimator (prior density, posterior sampling, Monte Carlo KL, its minibatch weight, the data
term's scale up to the constant factor ``M`` that Adam ignores, the optimiser and the scoring) is
the same in kind and written twice; the one deliberate difference is the scale
parameterisation (softplus in the paper, log in pyrozoo), which changes Adam's step geometry but
not the objective. The training set is 10,240 images, 80 full minibatches, because an incomplete
last minibatch would be weighted differently: ``pi_i KL + sum of its NLL`` in the paper's cost,
``KL + (N / n) sum`` in pyrozoo's unbiased minibatch ELBO; for full minibatches the two differ by
the constant factor ``N / n = M`` only. A bug in any of these would show as a systematic difference in the test error,
the complexity cost ``KL / N`` or the pruning curve at this scale, where several seeds give
standard errors of a few tenths of a point. It cannot show what 10,000 images and a few epochs
cannot reach: the paper trains on 50,000 images with 10,000 for validation, "for 600 epochs" per
Blundell et al. sec. 5.1 as we recall it, and picks ``pi``, ``sigma1``, ``sigma2``, the learning
rate and the init by validation over a grid (notes: ``-log sigma1 in {0, 1, 2}``,
``-log sigma2 in {6, 7, 8}``, ``pi in {1/4, 1/2, 3/4}`` [recalled]); our committed run is one grid
point, 50 epochs, one seed. If the two implementations agree, the gap to the paper is the budget.

Writes ``<results-dir>/bbb_mnist.{csv,md}`` (per-run rows and the mean +- s.e. over seeds of each
implementation, the pruning curve at the same kept fractions, and a verdict generated from the
numbers)::

    python studies/bbb_mnist.py                 # 6 seeds, 10,240 images, 5 epochs, uniform KL weights
    python studies/bbb_mnist.py --kl-weights blundell
    python studies/bbb_mnist.py --quick         # smoke run used by the tests
"""

import math
import time
from typing import Dict, Sequence

import pandas as pd
import pyro
import torch
import torch.nn.functional as F
from torch import nn

from pyrozoo.compression.graves import signal_to_noise
from pyrozoo.data import load_mnist
from pyrozoo.utils import set_seed
from zoo_protocols.bayes_by_backprop import INIT_SCALE, pruning, scores, settings, train
from zoo_protocols.cli import add_subset_argument, positive_int, run_main
from zoo_protocols.intervals import mean_se
from zoo_protocols.study import study_notes, study_parser, write_study

STEM = "bbb_mnist"
IMPLEMENTATIONS = ("independent", "pyrozoo")
#: the committed run's prior: pi, -log sigma1, -log sigma2 (Blundell et al. 2015, eq. 7)
PI, NEG_LOG_SIGMA1, NEG_LOG_SIGMA2 = 0.5, 0.0, 6.0
BATCH_SIZE = 128
LR = 1e-3
#: fractions of the weights kept after pruning: half, Graves' 22.3 % (claim graves-pruning),
#: a tenth, and Blundell et al.'s 5 % (95 % removed, their Table 2)
KEPT_FRACTIONS = (0.5, 0.223, 0.1, 0.05)
#: the decision's family-wise false-alarm rate: each of the PRIMARY differences is tested with
#: Welch's t at level FAMILY_ALPHA / len(PRIMARY) (Bonferroni), as few seeds give noisy s.e.s
FAMILY_ALPHA = 0.05
#: (column, kept fraction) pairs the verdict tests: the predictive test error and the complexity
#: cost unpruned, and the relative error increase at Graves' kept fraction (claim graves-pruning)
PRIMARY = (("test_error", 1.0), ("kl_per_example", 1.0), ("relative_increase", 0.223))
#: Monte Carlo draws of the complexity cost reported per run
KL_DRAWS = 8


# -- the independent re-implementation (plain PyTorch) ------------------------------------------

def log_scale_mixture(w: torch.Tensor, pi: float, sigma1: float, sigma2: float) -> torch.Tensor:
    """``log(pi N(w | 0, sigma1^2) + (1 - pi) N(w | 0, sigma2^2))`` elementwise, by logaddexp
    (``sigma2 = e^-6`` makes the narrow component underflow in plain exp for ``|w| > ~0.1``)."""
    half_log_2pi = 0.5 * math.log(2 * math.pi)
    a = math.log(pi) - math.log(sigma1) - half_log_2pi - 0.5 * (w / sigma1) ** 2
    b = math.log1p(-pi) - math.log(sigma2) - half_log_2pi - 0.5 * (w / sigma2) ** 2
    return torch.logaddexp(a, b)


def log_normal(w: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    return -0.5 * ((w - mu) / sigma) ** 2 - torch.log(sigma) - 0.5 * math.log(2 * math.pi)


def inverse_softplus(y: float) -> float:
    return y + math.log(-math.expm1(-y))


class BayesLinear(nn.Module):
    """A linear layer with ``q(w) = N(mu, softplus(rho)^2)`` on every weight and bias; each
    forward pass draws one sample of both and records ``log q`` and ``log P`` at it."""

    def __init__(self, n_in: int, n_out: int, init_scale: float, prior):
        super().__init__()
        ref = nn.Linear(n_in, n_out)  # PyTorch's initialisation for the means, as the recipe's guide
        self.weight_mu = nn.Parameter(ref.weight.detach().clone())
        self.bias_mu = nn.Parameter(ref.bias.detach().clone())
        rho = inverse_softplus(init_scale)
        self.weight_rho = nn.Parameter(torch.full((n_out, n_in), rho))
        self.bias_rho = nn.Parameter(torch.full((n_out,), rho))
        self.prior = prior
        self.log_q = self.log_p = torch.zeros(())
        self.mode = "sample"  # or "mean"

    def sigmas(self):
        return F.softplus(self.weight_rho), F.softplus(self.bias_rho)

    def forward(self, x):
        if self.mode == "mean":
            return F.linear(x, self.weight_mu, self.bias_mu)
        sw, sb = self.sigmas()
        w = self.weight_mu + sw * torch.randn_like(sw)
        b = self.bias_mu + sb * torch.randn_like(sb)
        self.log_q = log_normal(w, self.weight_mu, sw).sum() + log_normal(b, self.bias_mu, sb).sum()
        self.log_p = log_scale_mixture(w, *self.prior).sum() + log_scale_mixture(b, *self.prior).sum()
        return F.linear(x, w, b)


class BayesMLP(nn.Module):
    def __init__(self, sizes: Sequence[int], init_scale: float, prior):
        super().__init__()
        self.layers = nn.ModuleList(BayesLinear(a, b, init_scale, prior) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        x = x.flatten(1)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x

    def complexity(self) -> torch.Tensor:
        """``log q(w) - log P(w)`` at the weights of the last forward pass (one-sample KL)."""
        return sum(layer.log_q - layer.log_p for layer in self.layers)

    def set_mode(self, mode: str):
        for layer in self.layers:
            layer.mode = mode


def kl_weight(kind: str, i: int, M: int) -> float:
    """``pi_i`` of minibatch ``i`` (1-based) of ``M``: ``1/M`` or eq. 9's ``2^(M-i) / (2^M - 1)``."""
    if kind == "uniform":
        return 1.0 / M
    return math.ldexp(1.0, -i) / -math.expm1(-M * math.log(2.0))


def independent_kl(net: BayesMLP, draws: int) -> float:
    """Mean of ``draws`` one-sample estimates of ``KL(q || P)``."""
    net.set_mode("sample")
    with torch.no_grad():
        total = 0.0
        for _ in range(draws):
            net(torch.zeros(1, net.layers[0].weight_mu.shape[1]))
            total += float(net.complexity())
    return total / draws


def independent_predict(net: BayesMLP, x, y, num_samples: int) -> Dict[str, float]:
    with torch.no_grad():
        net.set_mode("sample")
        probs = torch.stack([F.softmax(net(x), -1) for _ in range(num_samples)]).mean(0)
        net.set_mode("mean")
        mean_pred = net(x).argmax(-1)
        net.set_mode("sample")
    return {"test_error": 100.0 * float((probs.argmax(-1) != y).double().mean()), "test_error_posterior_mean": 100.0 * float((mean_pred != y).double().mean())}


def independent_pruning(net: BayesMLP, x, y, num_samples: int, fractions) -> Dict[float, Dict[str, float]]:
    """Scores with the weights of smallest ``|mu / sigma|`` (over all layers) set to exactly zero
    (mean 0, no variance; biases kept) so that each fraction of the weights is kept."""
    with torch.no_grad():
        snr = torch.cat([(layer.weight_mu.abs() / layer.sigmas()[0]).flatten() for layer in net.layers])
        saved = [(layer.weight_mu.clone(), layer.weight_rho.clone()) for layer in net.layers]
        out = {}
        for fraction in fractions:
            k = max(1, round(fraction * snr.numel()))
            threshold = snr.topk(k).values[-1]
            kept = 0
            for layer in net.layers:
                prune = layer.weight_mu.abs() / layer.sigmas()[0] < threshold
                layer.weight_mu.masked_fill_(prune, 0.0)
                layer.weight_rho.masked_fill_(prune, -1e4)  # softplus(-1e4) = 0: no variance
                kept += int((~prune).sum())
            out[fraction] = {"fraction_kept": kept / snr.numel(), **independent_predict(net, x, y, num_samples)}
            for layer, (mu, rho) in zip(net.layers, saved):
                layer.weight_mu.copy_(mu)
                layer.weight_rho.copy_(rho)
    return out


def train_independent(train_data, test, *, hidden: int, epochs: int, kl_weights: str, num_samples: int, seed: int, fractions):
    x, y = train_data
    n = len(x)
    set_seed(seed)
    prior = (PI, math.exp(-NEG_LOG_SIGMA1), math.exp(-NEG_LOG_SIGMA2))
    net = BayesMLP([x.shape[-1], hidden, hidden, 10], INIT_SCALE, prior)
    optimizer = torch.optim.Adam(net.parameters(), lr=LR)
    M = math.ceil(n / BATCH_SIZE)
    for epoch in range(epochs):
        order = torch.randperm(n)
        for i in range(M):
            idx = order[i * BATCH_SIZE : (i + 1) * BATCH_SIZE]
            nll = F.cross_entropy(net(x[idx]), y[idx], reduction="sum")
            loss = kl_weight(kl_weights, i + 1, M) * net.complexity() + nll
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    row = {**independent_predict(net, *test, num_samples), "kl_per_example": independent_kl(net, KL_DRAWS) / n}
    sigmas = torch.cat([layer.sigmas()[0].detach().flatten() for layer in net.layers])
    row["median_weight_sigma"] = float(sigmas.median())
    return row, independent_pruning(net, *test, num_samples, fractions)


# -- the same through pyrozoo (the example's recipe) --------------------------------------------

def _pyrozoo_kl(model, guide, x, y, draws: int) -> float:
    """Mean of ``draws`` one-sample KL estimates from the training objective itself: its loss
    with the KL at weight 1 minus the loss with the KL at weight 0, on the same weight sample."""
    from pyrozoo.inference import ClosedFormKL_ELBO
    from pyrozoo.poutine import latent_scale

    elbo = ClosedFormKL_ELBO()
    total = 0.0
    with torch.no_grad():
        for d in range(draws):
            state = torch.get_rng_state()
            full = float(elbo.differentiable_loss(model, guide, x, y))
            torch.set_rng_state(state)
            with latent_scale(0.0):
                data = float(elbo.differentiable_loss(model, guide, x, y))
            total += full - data
    return total / draws


def train_pyrozoo(train_data, test, *, hidden: int, epochs: int, kl_weights: str, num_samples: int, seed: int, fractions):
    x, y = train_data
    n = len(x)
    pyro.clear_param_store()
    s = settings(PI, NEG_LOG_SIGMA1, NEG_LOG_SIGMA2, INIT_SCALE, kl_weights)
    model, guide, _ = train((x, y), s, hidden=hidden, epochs=epochs, batch_size=BATCH_SIZE, lr=LR, seed=seed)
    metrics = scores(model, guide, *test, num_samples)
    row = {"test_error": metrics["test_error"], "test_error_posterior_mean": metrics["test_error_posterior_mean"],
           "kl_per_example": _pyrozoo_kl(model, guide, x[:BATCH_SIZE], y[:BATCH_SIZE], KL_DRAWS) / n}
    snr = signal_to_noise(guide, include=lambda name: name.endswith("weight"))
    sigmas = torch.cat([(guide.loc_and_log_scale(name)[1].detach().exp()).flatten() for name in snr])
    row["median_weight_sigma"] = float(sigmas.median())
    ratios = torch.cat([r.flatten() for r in snr.values()])
    # the |mu/sigma| of the k-th largest ratio: graves_pruned keeps ratio >= threshold
    thresholds = [float(ratios.topk(max(1, round(f * ratios.numel()))).values[-1]) for f in fractions]
    curve = pruning(model, guide, *test, num_samples, thresholds).iloc[1:]
    out = {f: {"fraction_kept": float(r.fraction_kept), "test_error": float(r.test_error), "test_error_posterior_mean": float(r.test_error_posterior_mean)}
           for f, r in zip(fractions, curve.itertuples())}
    return row, out


TRAINERS = {"independent": train_independent, "pyrozoo": train_pyrozoo}


# -- summary and verdict ------------------------------------------------------------------------

VALUE_COLUMNS = ["test_error", "test_error_posterior_mean", "relative_increase", "kl_per_example", "median_weight_sigma", "fraction_kept"]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard error and number of seeds per (kept fraction, implementation)."""
    rows = []
    for (target, impl), group in runs.groupby(["target_kept", "implementation"], sort=False):
        row = {"implementation": impl, "target_kept": target, "seeds": len(group)}
        for col in VALUE_COLUMNS:
            values = group[col].astype(float).dropna()
            if len(values) == 0:
                continue
            row[col], row[f"{col}_se"], _ = mean_se(values)
        rows.append(row)
    return pd.DataFrame(rows)


def welch(a: dict, b: dict, col: str):
    """``(difference of means, its s.e., critical |difference| at the verdict's level)`` of
    column ``col`` between two summary rows, by Welch's t with Welch-Satterthwaite df."""
    from scipy import stats

    diff = a[col] - b[col]
    va, vb = a[f"{col}_se"] ** 2, b[f"{col}_se"] ** 2
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (a["seeds"] - 1) + vb**2 / (b["seeds"] - 1)) if va + vb > 0 else float("inf")
    critical = float(stats.t.ppf(1 - FAMILY_ALPHA / len(PRIMARY) / 2, df)) * se
    return diff, se, critical


def verdict(summary: pd.DataFrame, published: float = 1.36, committed: float = 1.76) -> str:
    """BUG when the implementations differ significantly (Welch's t, Bonferroni over
    :data:`PRIMARY`, family-wise :data:`FAMILY_ALPHA`) in the unpruned test error, the complexity
    cost or the pruning loss at Graves' kept fraction; otherwise the gap to the paper is the
    budget. Also states the smallest difference in test error the run could have detected."""
    by = {(r["target_kept"], r["implementation"]): r for r in summary.to_dict("records")}
    missing = [(c, t) for c, t in PRIMARY if not all((t, i) in by and c in by[(t, i)] for i in IMPLEMENTATIONS)]
    if missing:
        return f"Verdict: NO COMPARISON. Missing for one implementation: {missing}; run both implementations."
    if any(by[(1.0, i)]["seeds"] < 2 for i in IMPLEMENTATIONS):
        return "Verdict: NO COMPARISON. One seed per implementation gives no standard error; run at least two seeds."
    checks = []
    for col, t in PRIMARY:
        a, b = by[(t, "pyrozoo")], by[(t, "independent")]
        diff, se, critical = welch(a, b, col)
        label = col + ("" if t == 1.0 else f" at {100 * t:g} % kept")
        checks.append((label, diff, se, critical, a[col], b[col]))
    off = [c for c in checks if abs(c[1]) > c[3]]
    listing = "; ".join(f"{c[0]}: pyrozoo {c[4]:.4g}, independent {c[5]:.4g}, difference {c[1]:+.3g} +- {c[2]:.2g} (significant beyond {c[3]:.2g})" for c in checks)
    level = f"Welch's t, {len(PRIMARY)} comparisons at a family-wise {FAMILY_ALPHA:g}"
    if off:
        return f"Verdict: BUG (or a difference between the two estimators to find). The implementations differ ({level}): {listing}."
    full = {i: by[(1.0, i)] for i in IMPLEMENTATIONS}
    return (
        f"Verdict: NOT A BUG (budget). The two implementations agree ({level}): {listing}. The pruning loss is the "
        "posterior's at this budget, not pyrozoo's pruning code. Unpruned test error here: pyrozoo "
        f"{full['pyrozoo']['test_error']:.2f} +- {full['pyrozoo']['test_error_se']:.2f} %, independent "
        f"{full['independent']['test_error']:.2f} +- {full['independent']['test_error_se']:.2f} %. The committed {committed} % against "
        f"the paper's {published} % is then the budget: one seed, 50 epochs and one point of the paper's hyperparameter grid "
        "against the paper's longer training with the grid searched on a validation set."
    )


# -- command line -------------------------------------------------------------------------------

def parse_args(argv=None):
    parser = study_parser(__doc__)
    parser.add_argument("--seeds", type=positive_int, default=6, help="seeds --seed, --seed + 1, ...")
    parser.add_argument("--epochs", type=positive_int, default=5)
    parser.add_argument("--hidden", type=positive_int, default=400, help="units in each hidden layer")
    parser.add_argument("--train-size", type=positive_int, default=10240, help="the first N training images (a multiple of the minibatch of 128: see the docstring)")
    parser.add_argument("--test-size", type=positive_int, default=10000, help="the first N test images")
    parser.add_argument("--num-samples", type=positive_int, default=20, help="weight draws of the posterior predictive")
    parser.add_argument("--kl-weights", choices=["uniform", "blundell"], default="uniform", help="minibatch KL weights: 1/M or eq. 9's")
    add_subset_argument(parser, "--implementations", IMPLEMENTATIONS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    torch.set_num_threads(args.threads)
    pyro.enable_validation(False)
    train_x, train_y = load_mnist("mnist", train=True, data_dir=args.data_dir)
    test_x, test_y = load_mnist("mnist", train=False, data_dir=args.data_dir)
    n_train, n_test, epochs, hidden, num_samples, n_seeds = args.train_size, args.test_size, args.epochs, args.hidden, args.num_samples, args.seeds
    if args.quick:
        n_train, n_test, epochs, hidden, num_samples, n_seeds = 512, 300, 1, 32, 4, 2
    train_data = (train_x[:n_train].flatten(1), train_y[:n_train])
    test = (test_x[:n_test].flatten(1), test_y[:n_test])
    rows = []
    for impl in args.implementations:
        for seed in range(args.seed, args.seed + n_seeds):
            t0 = time.perf_counter()
            row, curve = TRAINERS[impl](train_data, test, hidden=hidden, epochs=epochs, kl_weights=args.kl_weights, num_samples=num_samples, seed=seed, fractions=KEPT_FRACTIONS)
            seconds = time.perf_counter() - t0
            rows.append({"implementation": impl, "seed": seed, "target_kept": 1.0, "fraction_kept": 1.0, **row, "seconds": seconds})
            rows += [{"implementation": impl, "seed": seed, "target_kept": f, **c, "relative_increase": 100.0 * (c["test_error"] - row["test_error"]) / row["test_error"]}
                     for f, c in curve.items()]
            if not args.no_progress:
                print(f"{impl} seed {seed}: test error {row['test_error']:.2f} %, KL/N {row['kl_per_example']:.3f}, "
                      f"pruned to {100 * KEPT_FRACTIONS[1]:g} %: {curve[KEPT_FRACTIONS[1]]['test_error']:.2f} %, {seconds:.1f} s", flush=True)
    runs = pd.DataFrame(rows)
    summary = summarize(runs)
    text = verdict(summary)
    script = "studies/bbb_mnist.py"
    seconds = time.perf_counter() - started
    setting = (
        f"Setting: MNIST, the first {n_train} training and {n_test} test images, 784-{hidden}-{hidden}-10 ReLU MLP, scale-mixture "
        f"prior pi = {PI}, -log sigma1 = {NEG_LOG_SIGMA1:g}, -log sigma2 = {NEG_LOG_SIGMA2:g} on weights and biases, posterior sd "
        f"initialised at softplus(-5) = {INIT_SCALE:.4g}, one weight sample per minibatch of {BATCH_SIZE}, Monte Carlo KL, "
        f"minibatch KL weights {args.kl_weights}, Adam {LR:g}, {epochs} epochs; posterior predictive over {num_samples} draws; "
        f"mean +- s.e. over {n_seeds} seeds. target_kept: the fraction of weights kept after pruning by |mu/sigma| (1 = unpruned; "
        f"biases kept); kl_per_example: the mean of {KL_DRAWS} one-sample estimates of KL(q || P) divided by the number of "
        "training images (nats); median_weight_sigma: the median posterior sd of the weights. pyrozoo runs the example's "
        "recipe (zoo_protocols/bayes_by_backprop.py); independent is the plain-PyTorch re-implementation in this script.\n\n"
        "Paper budget (Blundell et al. 2015, sec. 5.1; not in the shared sources, so recalled and unverified except the grid, "
        "which the shared notes give as recalled too): 50,000 training and 10,000 validation images, training up to 600 "
        "epochs, the learning rate and the prior's pi in {1/4, 1/2, 3/4}, -log sigma1 in {0, 1, 2}, -log sigma2 in {6, 7, 8} "
        "chosen on the validation set; Table 1 reports the selected configuration."
    )
    notes = study_notes(text, setting, script, ['pyrozoo', 'zoo_protocols/bayes_by_backprop.py'], seconds)
    table = pd.concat([summary.assign(seed="mean"), runs], ignore_index=True)
    columns = ["implementation", "target_kept", "seed", "seeds"] + [c for col in VALUE_COLUMNS for c in (col, f"{col}_se")] + ["seconds"]
    return write_study(table, STEM, args.results_dir, title="Controlled experiment: Bayes by Backprop on MNIST, pyrozoo against an independent implementation", verdict=text, notes=notes, shown=[summary], columns=columns)


if __name__ == "__main__":
    run_main(main)
