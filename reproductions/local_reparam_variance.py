"""Variance of minibatch gradient estimators (Kingma, Salimans & Welling 2015, Table 1).

A fully connected mean-field Gaussian BNN is trained on MNIST with the local
reparameterization trick. At chosen epochs, the gradient of the expected
log-likelihood term ``(N/M) sum_m log p(y_m | x_m, w)`` with respect to the posterior means
of the top and bottom weight matrices is estimated ``--repeats`` times on random
minibatches of ``--batch-size`` examples with four estimators sharing the same minibatches:

* local reparameterization (``pyrozoo.poutine.local_reparameterization``);
* an independent weight sample per example (``weights_per_example``; exact but slow);
* one weight sample per minibatch (plain reparameterization);
* no weight noise, weights at the posterior mean (``weight_means``; the minimal variance).

For each, the empirical variance across repeats is averaged over the entries of the
layer's weight matrix, with its standard error from the repeats themselves
(:func:`variance_and_se`): the entries share one weight sample per minibatch in the standard
estimator, so they are far from independent and a chi-square error would understate the noise
several-fold. The table (and the published one, labelled) goes to
``docs/results/local_reparam_variance.{csv,md}``.

    python reproductions/local_reparam_variance.py                       # paper-like: 3x1000, epochs 10 and 100
    python reproductions/local_reparam_variance.py --hidden 500,500 --checkpoints 2,20
    python reproductions/local_reparam_variance.py --quick
    python reproductions/local_reparam_variance.py --data digits.npz --hidden 100 --checkpoints 5,20

``--data`` takes a user's images instead of MNIST (an ``.npz`` with ``x``, ``y``; only the
training images are used): the network reads them flattened whatever their shape, with an
output per class; the table is named after the data set and has no published rows.
"""

import argparse
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pandas as pd
import pyro
import torch

from pyrozoo import atomic
from pyrozoo.data import load_mnist
from pyrozoo.inference import fit
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood
from pyrozoo.poutine import latent_scale, local_reparameterization, weight_means, weights_per_example
from pyrozoo.reporting import save_table, to_markdown
from pyrozoo.serialization import load_state
from zoo_protocols import methods as declared
from zoo_protocols import read_runs
from zoo_protocols.config import RunConfig
from zoo_protocols.cli import add_common_arguments, add_image_data_arguments, device_from_args, image_data, image_data_note, positive_float, positive_int, positive_int_list, run_main

ESTIMATORS = {
    "local reparameterization": local_reparameterization,
    "weight sample per data point (slow)": weights_per_example,
    "weight sample per minibatch (standard)": None,
    "no weight noise (minimal variance)": weight_means,
}

#: the declared method whose gradient estimators are compared (trained with its own, ``local``)
METHOD = "mfvi"

#: Kingma et al. (2015), Table 1, as transcribed in the Toronto lecture slides
#: (variational dropout with independent weight noise; epochs 10 and 100)
PUBLISHED = {
    "local reparameterization": (7.8e3, 1.2e3, 1.9e2, 1.1e2),
    "weight sample per data point (slow)": (1.4e4, 2.6e3, 4.3e2, 2.5e2),
    "weight sample per minibatch (standard)": (4.9e4, 4.3e3, 8.5e2, 3.3e2),
    "no weight noise (minimal variance)": (2.8e3, 5.9e1, 1.3e2, 9.0e0),
}


MEASUREMENT_COLUMNS = ["estimator", "epoch", "var_top", "var_bottom", "seconds_per_estimate", "se_top", "se_bottom"]


def variance_and_se(grads: torch.Tensor):
    """The variance across ``grads``' first dimension (n repeats), averaged over its other
    entries, and that average's standard error over the repeats.

    The average is ``sum_r d_r / (n - 1)`` with ``d_r`` the mean squared deviation of repeat r
    from the mean over repeats: a mean over repeats, so its error is ``n / (n - 1)`` times the
    standard deviation of the ``d_r`` over ``sqrt(n)``, whatever the dependence between entries."""
    n = grads.shape[0]
    d = (grads - grads.mean(0)).flatten(1).pow(2).mean(1)
    return (d.sum() / (n - 1)).item(), (d.std() * n / (n - 1) / n ** 0.5).item()


def _checkpoint_epoch(path):
    return load_state(path, map_location="cpu")["epoch"]


def gradient_variances(model, guide, objective, x, y, batch_size, repeats, seed, standard_errors=False):
    """``{estimator: (var_top, var_bottom, seconds per estimate)}`` of ``objective``'s data term;
    with ``standard_errors``, each tuple ends with the two variances' standard errors."""
    names = [n for n in guide.sites() if n.endswith("weight")]
    bottom, top = names[0], names[-1]
    params = [guide.locs[guide.sites()[top].key], guide.locs[guide.sites()[bottom].key]]
    g = torch.Generator().manual_seed(seed)
    batches = [torch.randint(0, len(x), (batch_size,), generator=g).to(x.device) for _ in range(repeats)]
    out = {}
    for estimator, handler in ESTIMATORS.items():
        grads_top, grads_bottom = [], []
        t0 = time.perf_counter()
        for idx in batches:
            with ExitStack() as stack:
                stack.enter_context(latent_scale(0.0))  # the data term only: the KL is deterministic
                if handler is not None:
                    stack.enter_context(handler())
                loss = objective.differentiable_loss(model, guide, x[idx], y[idx], idx)
            g_top, g_bottom = torch.autograd.grad(loss, params)
            grads_top.append(g_top)
            grads_bottom.append(g_bottom)
        seconds = (time.perf_counter() - t0) / repeats
        (var_top, se_top), (var_bottom, se_bottom) = variance_and_se(torch.stack(grads_top)), variance_and_se(torch.stack(grads_bottom))
        out[estimator] = (var_top, var_bottom, seconds) + ((se_top, se_bottom) if standard_errors else ())
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=positive_int_list, default="1000,1000,1000", help="hidden layer widths")
    parser.add_argument("--checkpoints", type=positive_int_list, default="10,100", help="epochs at which variances are measured")
    parser.add_argument("--batch-size", type=positive_int, default=100, help="minibatch size of the gradient estimates and of training")
    parser.add_argument("--repeats", type=positive_int, default=200, help="gradient estimates per estimator (>= 2: a variance)")
    parser.add_argument("--lr", type=positive_float, default=1e-3)
    parser.add_argument("--init-scale", type=positive_float, default=1e-2, help="initial posterior standard deviation")
    parser.add_argument("--checkpoint", type=Path, default=None, help="training checkpoint (resumed if present)")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    if args.repeats < 2:
        parser.error(f"argument --repeats: a variance needs >= 2 estimates, got {args.repeats}")
    device = device_from_args(args)
    pyro.enable_validation(False)
    hidden = args.hidden
    checkpoints = sorted(set(args.checkpoints))
    checkpoint = args.checkpoint or Path(tempfile.mkdtemp()) / "local_reparam_variance.ckpt"
    # measurements live beside the checkpoint, so a resumed run keeps those of earlier epochs
    measured_path = checkpoint.with_name(checkpoint.name + ".variances.csv")
    measured = read_runs(measured_path, MEASUREMENT_COLUMNS, numeric=MEASUREMENT_COLUMNS[1:])  # checked before any work
    own = image_data(args, bundled=("mnist",))  # a user's images (their training part), instead of MNIST
    x, y = (own.x_train, own.y_train) if own is not None else load_mnist("mnist", train=True, data_dir=args.data_dir)
    in_features, num_classes = (own.num_features, own.num_classes) if own is not None else (784, 10)
    if args.quick:
        x, y, hidden, checkpoints, args.repeats = x[:500], y[:500], [32], [1, 2], 8
    x, y = x.flatten(1).to(device), y.to(device)
    pyro.set_rng_seed(args.seed)
    # the declared mean-field method (its prior, guide and closed-form KL objective); the
    # estimator is what this experiment varies
    spec = declared.method(METHOD)
    s = RunConfig(extra={"init_scale": args.init_scale}).settings(spec.defaults)
    model = BayesianNeuralNetwork(MLP(in_features, hidden, num_classes).to(device), spec.prior(s), CategoricalLikelihood(len(x)))
    guide, objective = spec.guide(model, s), spec.objective(s)
    for epoch in checkpoints:
        if epoch in set(measured.epoch):
            continue
        if checkpoint.exists() and _checkpoint_epoch(checkpoint) > epoch:
            raise SystemExit(
                f"{checkpoint} is past epoch {epoch} but holds no measurement for it ({measured_path}); "
                "start from a fresh --checkpoint"
            )
        # each call resumes from the checkpoint of the previous one (same optimizer state)
        fit(model, guide, (x, y), epochs=epoch, batch_size=args.batch_size, lr=args.lr, objective=objective, estimator=spec.estimator,
            seed=args.seed, progress=not args.no_progress, checkpoint=checkpoint)
        variances = gradient_variances(model, guide, objective, x, y, args.batch_size, args.repeats, args.seed + epoch, standard_errors=True)
        rows = [{"estimator": estimator, "epoch": epoch, "var_top": var_top, "var_bottom": var_bottom, "seconds_per_estimate": seconds,
                 "se_top": se_top, "se_bottom": se_bottom}
                for estimator, (var_top, var_bottom, seconds, se_top, se_bottom) in variances.items()]
        measured = pd.concat([measured, pd.DataFrame(rows)], ignore_index=True)
        atomic.write_csv(measured, measured_path)
    long = measured[measured.epoch.isin(checkpoints)]
    table = long.pivot(index="estimator", columns="epoch", values=["var_top", "var_bottom"])
    table.columns = [f"{'top' if a == 'var_top' else 'bottom'} layer, epoch {e}" for a, e in table.columns]
    errors = long.pivot(index="estimator", columns="epoch", values=["se_top", "se_bottom"])
    for (a, e), column in errors.items():
        table[f"{'top' if a == 'se_top' else 'bottom'} layer, epoch {e}, s.e."] = column
    table["seconds per estimate"] = long.groupby("estimator").seconds_per_estimate.mean()
    table = table.loc[list(ESTIMATORS)].reset_index()
    table.insert(1, "source", "measured (this repository)")
    published = pd.DataFrame(
        [{"estimator": k + " (published)", "source": "Kingma et al. 2015, Table 1 (epochs 10, 100)", "top layer, epoch 10": v[0], "top layer, epoch 100": v[1], "bottom layer, epoch 10": v[2], "bottom layer, epoch 100": v[3]} for k, v in PUBLISHED.items()]
    )
    out = pd.concat([table, published], ignore_index=True) if own is None else table  # nothing published for a user's data
    stem = "local_reparam_variance" + ("" if own is None else f"_{own.dataset}") + ("_quick" if args.quick else "")
    notes = (
        f"Measured: {'MNIST' if own is None else own.dataset}, MLP {in_features}-{'-'.join(map(str, hidden))}-{num_classes} with a mean-field Gaussian posterior and N(0, 1) prior, "
        f"trained with local reparameterization (Adam, lr {args.lr}, batch {args.batch_size}); variance over {args.repeats} "
        "minibatch estimates of the gradient of the expected log-likelihood with respect to the posterior means of the top and "
        "bottom weight matrices, averaged over entries; s.e.: its standard error over the repeats (from the spread of each repeat's "
        "mean squared deviation, which holds however the entries depend on each other). Kingma et al. used Gaussian-dropout posteriors and their own network, "
        "so compare orderings and ratios, not absolute values."
    )
    if own is not None:
        notes += " " + image_data_note(own, args.data)
    save_table(out, stem, args.results_dir, title="Variance of minibatch gradient estimators", notes=notes, floatfmt=".3g")
    print(to_markdown(out, floatfmt=".3g"))
    return out


if __name__ == "__main__":
    run_main(main)
