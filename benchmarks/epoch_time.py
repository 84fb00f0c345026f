"""Epoch time of the long CPU protocols, against the deterministic network's epoch in the same process.

Three protocols, each timed on its own data and against a deterministic network of the same
architecture, batch size and data (interleaved rounds, medians; see ``timing.py``):

* ``lenet5``: LeNet-5-Caffe compression (``reproductions/compress_lenet.py``, 200 epochs of 600
  steps at batch 100): the steps of ``zoo_protocols/compress_sparse_vd.py``,
  ``zoo_protocols/compress_bayesian_compression.py`` (``bc-gnj``, ``bc-ghs``) and
  ``zoo_protocols/compress_rdp.py``, built as the recipes build them and run as
  :func:`pyrozoo.inference.fit` runs them (:func:`~pyrozoo.inference.training.training_step` with the
  recipe's estimator, objective and KL weight of a mid-run epoch, the parameters ``fit``
  collects, fused Adam); against plain LeNet-5 with fused Adam.
* ``cnn``: the 2-Conv-2-FC CNN with SG-MCMC (``reproductions/classify_cnn.py``, 100 epochs of 60
  steps at batch 1000): ``sghmc`` and ``sghmc-sa`` as ``zoo_protocols/cnn.py`` builds them; against
  SGD with momentum 0.9.
* ``vae``: the VAE of ``reproductions/vae_dsivi_prior.py`` (MLP 784-300-300-40 and back, batch 100,
  dynamically binarised batches): the standard Normal prior, the VampPrior (K = 500) and the
  DSIVI aggregated-posterior prior with K2 = 5000, uncached (the paper's estimator: "before")
  and with ``--prior-refresh-every`` R (its components reused for up to R steps, without
  gradient through them: "after"; see :class:`~pyrozoo.distributions.PriorComponentCache`);
  against a deterministic autoencoder of the same MLPs with Adam.

Every timed step draws its minibatch from the protocol's own batching (a
:class:`~pyrozoo.data.TensorBatches` or the dynamic binariser, cycled), so data loading is in
the step. The work the protocol does once per epoch besides its steps is timed on its own
(median of ``--epoch-work-repeats`` calls) and added to the projected epoch: the per-epoch
checkpoint every run writes (the state ``fit`` / ``StochasticGradientMCMC.run`` saves), and
for the samplers the thinning share of an epoch (a thinned sample every ``thin`` iterations
is written to the disk sink and its predictive over the test set averaged online, as
``zoo_protocols/cnn.py`` does).

Columns: ``ms_per_step``; ``epoch_s``, the projected epoch (steps per epoch x ms/step +
per-epoch work); ``ratio``, ``epoch_s`` over the deterministic network's epoch (steps per
epoch x its ms/step); ``protocol_h``, the projected protocol (epochs x ``epoch_s``).

    python benchmarks/epoch_time.py --threads 1 --rounds 10 --steps 20   # all three protocols
    python benchmarks/epoch_time.py --protocols cnn --cnn-rounds 3 --cnn-steps 2
    python benchmarks/epoch_time.py --smoke                          # tiny sizes, for the tests
"""

import argparse
import itertools
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Dict, List

import pyro
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_medians  # noqa: E402

from pyrozoo.data import TensorBatches, load_mnist  # noqa: E402
from pyrozoo.inference import ClosedFormKL_ELBO, collect_parameters, default_optimizer  # noqa: E402
from pyrozoo.inference.training import training_step  # noqa: E402
from pyrozoo.inference.posterior_averaging import StepSizeWeightedAverage  # noqa: E402
from pyrozoo.inference.sample_storage import DiskSamples  # noqa: E402
from pyrozoo.inference.sgmcmc import model_output  # noqa: E402
from pyrozoo.inference.training import checkpoint_state as fit_state  # noqa: E402
from pyrozoo.models import MLP, LeNet5, TwoConvTwoFCNet  # noqa: E402
from pyrozoo.models.dropout_priors import KLWarmupWarning  # noqa: E402
from pyrozoo.reporting import to_markdown  # noqa: E402
from pyrozoo.serialization import save_state  # noqa: E402
from pyrozoo.utils import rng_states  # noqa: E402

BASELINE = "deterministic"


class Case:
    """A timed candidate: ``step()`` runs one iteration of the protocol's loop (its batch
    included); ``epoch_work`` maps a name to ``(fn, calls per epoch)`` for what the protocol
    does per epoch besides its steps."""

    def __init__(self, description: str, step: Callable[[], None], epoch_work: Dict[str, tuple] = None):
        self.description, self.step, self.epoch_work = description, step, dict(epoch_work or {})


def cycle(batches) -> Callable[[], tuple]:
    """``next()`` over the epochs of ``batches``, restarting it at every epoch end (what the loop does)."""
    it = itertools.chain.from_iterable(iter(batches) for _ in itertools.count())
    return lambda: next(it)


def checkpoint_work(state: Callable[[], dict], folder: Path, name: str) -> Callable[[], None]:
    """Writing the per-epoch checkpoint (the loop's entries around ``state()``), atomically as the loop does."""
    path = folder / f"{name}.pt"
    return lambda: save_state({"epoch": 1, "history": [], **state(), "rng": rng_states()}, path)


# -- (a) LeNet-5 compression ----------------------------------------------------------------


def deterministic_classifier(net, batches, optimizer):
    next_batch = cycle(batches)

    def step():
        x, y, _ = next_batch()
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    return step


def compression_case(name: str, batches, epochs: int, folder: Path) -> Case:
    """The step of ``name``'s LeNet-5 recipe as ``fit`` runs it (the model, guide and options
    of the recipe's own ``build_*``), at a mid-run epoch's learning rate and KL weight."""
    from zoo_protocols import compress_bayesian_compression as bc, compress_rdp as rdp, compress_sparse_vd as svd
    from zoo_protocols.config import RunConfig
    from zoo_protocols.methods import method

    builders = {
        "sparse-vd": svd.build_sparse_vd,
        "bc-gnj": lambda *a: bc.build_bayesian_compression(*a, method("bc-gnj")),
        "bc-ghs": lambda *a: bc.build_bayesian_compression(*a, method("bc-ghs")),
        "rdp": rdp.build_rdp,
    }
    if name not in builders:
        raise ValueError(f"unknown compression method {name!r}; choose from {', '.join(builders)}")
    config = RunConfig(arch="lenet5", epochs=epochs, seed=0, progress=False)
    model, guide, lr, options = builders[name](batches.tensors[:2], config, epochs)
    lr = config.settings({"lr": lr})["lr"]  # as fit_recipe resolves it
    objective = options.get("objective") or ClosedFormKL_ELBO()
    estimator, schedule = options.get("estimator"), options.get("kl_schedule")
    first = next(iter(TensorBatches(*batches.tensors, batch_size=batches.batch_size, shuffle=False)))
    if getattr(guide, "prototype_trace", True) is None:
        with pyro.poutine.block():
            guide(*first)
    params = collect_parameters(model, guide, objective, first)
    opt = default_optimizer(params, lr)
    num_batches, epoch = len(batches), epochs // 2
    if options.get("lr_schedule") is not None:
        for group in opt.param_groups:
            group["lr"] = lr * float(options["lr_schedule"](epoch))
    next_batch = cycle(batches)
    counter = itertools.count()

    def step():
        b = next(counter) % num_batches
        kl_scale = schedule(epoch, b, num_batches) if schedule is not None else 1.0
        training_step(model, guide, objective, opt, next_batch(), kl_scale=kl_scale, estimator=estimator, params=params)

    work = {"checkpoint": (checkpoint_work(lambda: {**fit_state(model, guide, opt), "batches": batches.state_dict()}, folder, name), 1)}
    return Case(f"the step of the {name} recipe as fit runs it (estimator {estimator!r})", step, work)


def lenet5_protocol(data, args, folder) -> Dict[str, Case]:
    x, y = data["train"]
    batches = TensorBatches(x, y, batch_size=args.lenet_batch, seed=0)
    torch.manual_seed(0)
    net = LeNet5()
    cases = {BASELINE: Case("LeNet-5-Caffe, cross-entropy, fused Adam", deterministic_classifier(net, TensorBatches(x, y, batch_size=args.lenet_batch, seed=0), default_optimizer(net.parameters(), 1e-3)))}
    for name in args.lenet_methods:
        cases[name] = compression_case(name, TensorBatches(x, y, batch_size=args.lenet_batch, seed=0), args.lenet_epochs, folder)
    return cases, len(batches), args.lenet_epochs


# -- (b) the SG-MCMC CNN --------------------------------------------------------------------


def cnn_args(args):
    """The options of ``reproductions/classify_cnn.py`` that ``zoo_protocols/cnn.py`` reads (its defaults)."""
    return SimpleNamespace(num_classes=10, v0=1.0, v1=0.1, prior_scale=1.0, lr=5e-7, tau=None, dataset="mnist", thin=args.thin, batch_size=args.cnn_batch)


def sampler_case(method: str, data, args, folder: Path) -> Case:
    """``zoo_protocols/cnn.run_sampler``'s chain: one step, plus the per-epoch checkpoint and the
    thinning share of an epoch (a recorded sample and its online-averaged test predictive)."""
    from zoo_protocols.cnn import TAU, chunked_probs, sampler_model

    x, y = data["train"]
    x_test = data["test"][0]
    opts = cnn_args(args)
    torch.manual_seed(0)
    model, spec, s, adaptations = sampler_model(method, x, opts, x.device)
    sampler = spec.sampler(model, s, opts.lr, inverse_temperature=TAU["mnist"], adaptations=adaptations)
    batches = TensorBatches(x, y, batch_size=opts.batch_size, seed=0)
    sampler.setup(*next(iter(TensorBatches(x, y, batch_size=opts.batch_size, shuffle=False))))
    average = StepSizeWeightedAverage()
    sink = DiskSamples(folder / f"{method}-samples", shard_size=10)
    next_batch = cycle(batches)

    def step():
        sampler.step(*next_batch())

    def record_sample():
        sink.append(sampler.recorded_values())
        values = sampler.values()
        average.update(chunked_probs(lambda inputs: model_output(model, values, inputs).softmax(-1), x_test), 1.0)
        sink.flush()

    def state():
        sink.flush()
        return {"sampler": sampler.state_dict(), "sink": sink.state_dict(), "stateful": [average.state_dict()], "batches": batches.state_dict()}

    per_epoch = len(batches) / opts.thin
    work = {"checkpoint": (checkpoint_work(state, folder, method), 1), f"thinned sample (1 per {opts.thin} steps)": (record_sample, per_epoch)}
    what = {"sghmc": "SGHMC on the SSGL model, its latent variables fixed", "sghmc-sa": "SGHMC-SA: SGHMC with the SA step of the SSGL latent variables"}.get(method, method)
    return Case(f"{what}: the step of zoo_protocols/cnn.py", step, work)


def cnn_protocol(data, args, folder):
    x, y = data["train"]
    torch.manual_seed(0)
    net = TwoConvTwoFCNet()
    batches = TensorBatches(x, y, batch_size=args.cnn_batch, seed=0)
    cases = {BASELINE: Case("2-Conv-2-FC CNN, cross-entropy, SGD momentum 0.9", deterministic_classifier(net, batches, torch.optim.SGD(net.parameters(), lr=0.03, momentum=0.9)))}
    for method in args.cnn_methods:
        cases[method] = sampler_case(method, data, args, folder)
    return cases, len(batches), args.cnn_epochs


# -- (c) the DSIVI-prior VAE ----------------------------------------------------------------


def vae_case(prior_name: str, K: int, refresh, data, args, folder) -> Case:
    from zoo_protocols.binarized_mnist import DynamicallyBinarized
    from zoo_protocols.vae_priors import build, declared

    x_train, y_train = data["train"]
    spec, s = declared(prior_name, K, args.warmup_epochs, refresh)
    pyro.clear_param_store()
    torch.manual_seed(0)
    model, guide = build(spec, s, x_train, latent_dim=args.latent_dim, hidden=args.hidden, device=x_train.device)
    batches = DynamicallyBinarized(x_train.flatten(1), y_train, batch_size=args.vae_batch, seed=0)
    arguments = spec.fit_arguments(s, args.vae_epochs)
    objective, schedule = arguments["objective"], arguments.get("kl_schedule")
    first = next(iter(TensorBatches(*batches.tensors, batch_size=batches.batch_size, shuffle=False)))
    params = collect_parameters(model, guide, objective, first)
    opt = default_optimizer(params, args.vae_lr)
    next_batch = cycle(batches)
    num_batches, epoch = len(batches), args.vae_epochs // 2
    counter = itertools.count()

    def step():
        b = next(counter) % num_batches
        kl_scale = schedule(epoch, b, num_batches) if schedule is not None else 1.0
        training_step(model, guide, objective, opt, next_batch(), kl_scale=kl_scale, params=params)

    label = prior_name + {"normal": "", "vamp": f" K={K}", "dsivi": f" K2={K}"}[prior_name] + ("" if refresh is None else f" refresh_every={refresh}")
    work = {"checkpoint": (checkpoint_work(lambda: {**fit_state(model, guide, opt), "batches": batches.state_dict()}, folder, label.replace(" ", "_")), 1)}
    what = {
        "normal": "standard Normal prior",
        "vamp": f"VampPrior of {K} pseudo-inputs, exact",
        "dsivi": f"DSIVI aggregated-posterior prior, {K} components per step, "
        + ("fresh with gradient (the paper's estimator)" if refresh is None else f"each reused for up to {refresh} steps without gradient (PriorComponentCache)"),
    }[prior_name]
    return Case(f"VAE, {what}: the step of zoo_protocols/vae_priors.py", step, work)


def autoencoder_step(data, args):
    """The same encoder and decoder MLPs, deterministic: encoder means to Bernoulli logits."""
    from zoo_protocols.binarized_mnist import DynamicallyBinarized

    x_train, y_train = data["train"]
    torch.manual_seed(0)
    d, h, n_in = args.latent_dim, args.hidden, x_train[0].numel()
    encoder, decoder = MLP(n_in, [h, h], d), MLP(d, [h, h], n_in)
    opt = default_optimizer(list(encoder.parameters()) + list(decoder.parameters()), args.vae_lr)
    next_batch = cycle(DynamicallyBinarized(x_train.flatten(1), y_train, batch_size=args.vae_batch, seed=0))

    def step():
        x, _, _ = next_batch()
        opt.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(decoder(encoder(x)), x, reduction="sum").div(len(x)).backward()
        opt.step()

    return step


def vae_protocol(data, args, folder):
    cases = {BASELINE: Case("autoencoder of the same MLPs, Bernoulli cross-entropy, fused Adam", autoencoder_step(data, args))}
    cases["normal"] = vae_case("normal", 0, None, data, args, folder)
    cases[f"vamp K={args.k_vamp}"] = vae_case("vamp", args.k_vamp, None, data, args, folder)
    for k in args.k2:
        cases[f"dsivi K2={k} (uncached, before)"] = vae_case("dsivi", k, None, data, args, folder)
        for r in args.refresh:
            cases[f"dsivi K2={k} refresh_every={r}"] = vae_case("dsivi", k, r, data, args, folder)
    return cases, math.ceil(args.n_train / args.vae_batch), args.vae_epochs


PROTOCOLS = {"lenet5": lenet5_protocol, "cnn": cnn_protocol, "vae": vae_protocol}


def epoch_work_seconds(case: Case, repeats: int) -> Dict[str, float]:
    """Seconds per epoch of each piece of per-epoch work (median call time x calls per epoch)."""
    out = {}
    for name, (fn, per_epoch) in case.epoch_work.items():
        fn()  # warm-up (first write of a file, first evaluation)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times) * per_epoch
    return out


def measure(protocol: str, data, args, folder: Path, descriptions: Dict[str, str]) -> List[dict]:
    cases, steps_per_epoch, epochs = PROTOCOLS[protocol](data, args, folder)
    # a CNN step at batch 1000 takes seconds: its own, smaller counts
    rounds, steps = (args.cnn_rounds, args.cnn_steps) if protocol == "cnn" else (args.rounds, args.steps)
    medians = interleaved_medians({name: c.step for name, c in cases.items()}, rounds=rounds, steps=steps, warmup=args.warmup)
    base_epoch = medians[BASELINE] * steps_per_epoch
    rows = []
    for name, case in cases.items():
        descriptions[f"{protocol}: {name}"] = case.description
        work = epoch_work_seconds(case, args.epoch_work_repeats) if name != BASELINE else {}
        epoch_s = medians[name] * steps_per_epoch + sum(work.values())
        rows.append({
            "protocol": protocol, "case": name, "steps_per_epoch": steps_per_epoch, "ms_per_step": 1e3 * medians[name], "per_epoch_work_s": sum(work.values()),
            "epoch_s": epoch_s, "ratio": epoch_s / base_epoch, "protocol_h": epochs * epoch_s / 3600,
            "work": ", ".join(f"{k} {v:.3g} s" for k, v in work.items()),
        })
    return rows


def load_data(args):
    """MNIST from ``--data-dir`` (or ``$PYROZOO_DATA_DIR``) when it is there, else random images
    of its shape (the timings do not depend on the pixel values): ``--n-train`` training and
    ``--n-test`` test images."""
    try:
        x, y = load_mnist("mnist", train=True, data_dir=args.data_dir)
        x_test, y_test = load_mnist("mnist", train=False, data_dir=args.data_dir)
        source = "MNIST"
    except (FileNotFoundError, OSError, ValueError):
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(args.n_train, 1, 28, 28, generator=g), torch.randint(0, 10, (args.n_train,), generator=g)
        x_test, y_test = torch.rand(args.n_test, 1, 28, 28, generator=g), torch.randint(0, 10, (args.n_test,), generator=g)
        source = "random images of MNIST's shape"
    return {"train": (x[: args.n_train], y[: args.n_train]), "test": (x_test[: args.n_test], y_test[: args.n_test])}, source


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocols", default="lenet5,cnn,vae", help=f"comma-separated, from {', '.join(PROTOCOLS)}")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20, help="steps per case per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--epoch-work-repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--data-dir", default=None, help="root holding MNIST/raw (default $PYROZOO_DATA_DIR); random images when absent")
    parser.add_argument("--n-train", type=int, default=60000)
    parser.add_argument("--n-test", type=int, default=10000)
    parser.add_argument("--lenet-methods", default="sparse-vd,bc-gnj,bc-ghs,rdp")
    parser.add_argument("--lenet-batch", type=int, default=100)
    parser.add_argument("--lenet-epochs", type=int, default=200)
    parser.add_argument("--cnn-methods", default="sghmc,sghmc-sa")
    parser.add_argument("--cnn-batch", type=int, default=1000)
    parser.add_argument("--cnn-rounds", type=int, default=3, help="interleaved rounds of the cnn protocol (--rounds for the others)")
    parser.add_argument("--cnn-steps", type=int, default=4, help="steps per case per round of the cnn protocol (--steps for the others)")
    parser.add_argument("--cnn-epochs", type=int, default=100)
    parser.add_argument("--thin", type=int, default=500)
    parser.add_argument("--vae-batch", type=int, default=100)
    parser.add_argument("--vae-epochs", type=int, default=50)
    parser.add_argument("--vae-lr", type=float, default=5e-4)
    parser.add_argument("--warmup-epochs", type=int, default=10)
    parser.add_argument("--hidden", type=int, default=300)
    parser.add_argument("--latent-dim", type=int, default=40)
    parser.add_argument("--k2", type=int, nargs="+", default=[500, 5000], help="prior points per step of the DSIVI prior (the example's default 500; the thesis' 500 and 5000)")
    parser.add_argument("--k-vamp", type=int, default=500, help="pseudo-inputs of the VampPrior")
    parser.add_argument("--refresh", type=int, nargs="*", default=[1, 8], help="refresh_every values of the cached DSIVI prior")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and one step per case: checks that every case runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.steps, args.cnn_rounds, args.cnn_steps, args.warmup, args.epoch_work_repeats = 1, 1, 1, 1, 0, 1
        args.lenet_batch, args.vae_batch = 16, 16
        args.n_train, args.n_test, args.cnn_batch, args.thin, args.hidden, args.latent_dim, args.k2, args.k_vamp = 64, 32, 16, 2, 16, 4, [20], 5
        args.data_dir = args.data_dir or "/nonexistent"  # random images: no file reading
    if args.threads:
        torch.set_num_threads(args.threads)
    args.lenet_methods = [m.strip() for m in args.lenet_methods.split(",") if m.strip()]
    args.cnn_methods = [m.strip() for m in args.cnn_methods.split(",") if m.strip()]
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocol(s) {unknown}; choose from {', '.join(PROTOCOLS)}")
    pyro.enable_validation(False)
    data, source = load_data(args)
    rows, descriptions = [], {}
    # the steps are timed mid-run, at the KL weight of the recipes' warm-up there (full), which
    # a prior would take for a run that skipped the warm-up and warn about
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", KLWarmupWarning)
        for protocol in protocols:
            rows += measure(protocol, data, args, Path(tmp), descriptions)
    import pandas as pd

    print(f"{source}, {args.n_train} training / {args.n_test} test images, CPU, torch threads {torch.get_num_threads()}; "
          f"{args.rounds} interleaved rounds x {args.steps} steps per case (cnn: {args.cnn_rounds} x {args.cnn_steps}), median over rounds")
    print(to_markdown(pd.DataFrame(rows), floatfmt=".4g"))
    for name, description in descriptions.items():
        print(f"  {name}: {description}")
    return rows


if __name__ == "__main__":
    main()
