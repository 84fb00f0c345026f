"""Cost of one SVI step of a Bayesian network relative to a deterministic PyTorch step.

Every case times one optimisation step on the same minibatch in the same process
(interleaved rounds, medians; see ``timing.py``) and is reported as a ratio to the
deterministic step of the same architecture with the same optimizer (fused Adam).

The pyrozoo cases run exactly the step of ``pyrozoo.inference.fit``
(:func:`pyrozoo.inference.training.training_step`). For scale, the table also shows the stock
Pyro recipe (``AutoNormal`` + ``Trace_ELBO`` + ``pyro.optim.Adam`` through ``SVI``).

    python benchmarks/step_overhead.py                  # LeNet-300-100, batch 100
    python benchmarks/step_overhead.py --cases mfvi-lrt --rounds 30
    python benchmarks/step_overhead.py --arch lenet5 --cases sparse-vd-lrt
    python benchmarks/step_overhead.py --arch tiny      # the fixed cost per step, without arithmetic
"""

import argparse
import sys
from pathlib import Path
from typing import Callable, Dict

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_medians  # noqa: E402

from pyrozoo.guides import MeanFieldNormalGuide  # noqa: E402
from pyrozoo.guides.bayesian_compression import BayesianCompressionGuide  # noqa: E402
from pyrozoo.guides.variational_dropout import SparseVariationalDropoutGuide  # noqa: E402
from pyrozoo.inference import ClosedFormKL_ELBO, collect_parameters, default_optimizer  # noqa: E402
from pyrozoo.inference.training import training_step  # noqa: E402
from pyrozoo.inference.elbo import ReferenceClosedFormKL_ELBO  # noqa: E402
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, LeNet5, LeNet300100, NormalPrior  # noqa: E402
from pyrozoo.models.compression_priors import GroupHorseshoePrior, GroupNormalJeffreysPrior  # noqa: E402
from pyrozoo.models.dropout_priors import LogUniformPrior  # noqa: E402
from pyrozoo.poutine.weight_noise import local_reparameterization_reference  # noqa: E402
from pyrozoo.reporting import to_markdown  # noqa: E402

#: ``tiny`` (an 8-8-8-10 MLP) has almost no arithmetic: its ratios are the per-step fixed cost
#: (Python, autograd, optimizer calls), the part of the LeNet ratios no kernel work removes
ARCHS = {"lenet300": (LeNet300100, (784,)), "lenet5": (LeNet5, (1, 28, 28)), "tiny": (lambda: MLP(8, [8, 8], 10), (8,))}
NUM_TRAIN = 60000


def deterministic_step(arch, x, y, fused=True) -> Callable[[], None]:
    net = ARCHS[arch][0]().to(x.device)
    opt = default_optimizer(net.parameters(), 1e-3) if fused else torch.optim.Adam(net.parameters(), 1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


class _TwoPasses(torch.nn.Module):
    """A linear or convolutional layer run as local reparameterization runs it, minus the
    noise: ``f(x, W, b) + f(x^2, V, c)`` with a second, independent set of parameters. With
    ``noise`` (and ``kl``, a list the layer appends its KL to) it is the whole mean-field
    layer written in plain PyTorch autograd: ``V = exp(2 log_sigma)``, output
    ``mean + sqrt(var) eps`` and the closed-form KL to N(0, 1)."""

    def __init__(self, layer, noise=False, kl=None):
        super().__init__()
        self.layer, self.noise, self.kl = layer, noise, kl
        self.second = torch.nn.ParameterList(torch.nn.Parameter(torch.full_like(p, -6.9) if noise else p.detach().clone()) for p in (layer.weight, layer.bias))

    def _apply_layer(self, x, weight, bias):
        if isinstance(self.layer, torch.nn.Linear):
            return F.linear(x, weight, bias)
        return self.layer._conv_forward(x, weight, bias)

    def forward(self, x):
        weight, bias = self.second
        if not self.noise:
            return self._apply_layer(x, self.layer.weight, self.layer.bias) + self._apply_layer(x * x, weight, bias)
        v, vb = (2 * weight).exp(), (2 * bias).exp()
        mean = self._apply_layer(x, self.layer.weight, self.layer.bias)
        out = mean + self._apply_layer(x * x, v, vb).sqrt() * torch.randn_like(mean)
        self.kl.append(0.5 * (v.sum() + vb.sum() + self.layer.weight.square().sum() + self.layer.bias.square().sum()) - weight.sum() - bias.sum())
        return out


def _with_two_passes(net, **kwargs):
    for name, child in net.named_children():
        if isinstance(child, (torch.nn.Linear, torch.nn.Conv2d)):
            setattr(net, name, _TwoPasses(child, **kwargs))
        else:
            _with_two_passes(child, **kwargs)
    return net


def floor_step(arch, x, y) -> Callable[[], None]:
    """The arithmetic floor of a local-reparameterization step: every layer's product twice
    (means and variances), twice the parameters in fused Adam, and nothing else (no noise,
    no variances from log-scales, no KL)."""
    net = _with_two_passes(ARCHS[arch][0]().to(x.device))
    opt = default_optimizer(net.parameters(), 1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    return step


def plain_lrt_step(arch, x, y) -> Callable[[], None]:
    """Mean-field VI with local reparameterization written directly in PyTorch autograd, as a
    user without a library would (the model of bayesian-torch's layers): the same loss as
    ``mfvi-lrt`` (N times the mean cross-entropy plus the KL to N(0, 1))."""
    kl = []
    net = _with_two_passes(ARCHS[arch][0]().to(x.device), noise=True, kl=kl)
    opt = default_optimizer(net.parameters(), 1e-3)

    def step():
        kl.clear()
        opt.zero_grad(set_to_none=True)
        (F.cross_entropy(net(x), y) * NUM_TRAIN + sum(kl)).backward()
        opt.step()

    return step


def pyrozoo_step(arch, x, y, estimator, prior=lambda: NormalPrior(1.0), guide=lambda m: MeanFieldNormalGuide(m, init_scale=1e-3),
                 objective=ClosedFormKL_ELBO, handler=None) -> Callable[[], None]:
    """The step of ``fit`` for ``prior`` (factory) and ``guide`` (factory of the model), over
    the parameters ``fit`` optimises (the guide's and the model's point estimates);
    ``objective`` is the objective's class, ``handler`` a weight-noise handler (factory)
    around the step in place of ``estimator``'s."""
    model = BayesianNeuralNetwork(ARCHS[arch][0]().to(x.device), prior(), CategoricalLikelihood(NUM_TRAIN))
    q = guide(model)
    q(x, y)
    objective = objective()
    params = collect_parameters(model, q, objective, (x, y))
    opt = default_optimizer(params, 1e-3)
    if handler is None:
        return lambda: training_step(model, q, objective, opt, (x, y), estimator=estimator, params=params)

    def step():
        with handler():
            training_step(model, q, objective, opt, (x, y), params=params)

    return step


def stock_pyro_step(arch, x, y) -> Callable[[], None]:
    from pyro.infer import SVI, Trace_ELBO
    from pyro.infer.autoguide import AutoNormal
    from pyro.nn import PyroSample

    net = ARCHS[arch][0]().to(x.device)
    pyro.nn.module.to_pyro_module_(net)
    for module in net.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            setattr(module, name, PyroSample(dist.Normal(torch.zeros((), device=x.device), 1.0).expand(p.shape).to_event(p.dim())))

    def model(x, y):
        logits = net(x)
        with pyro.plate("data", NUM_TRAIN, subsample=torch.arange(len(x), device=x.device)):
            pyro.sample("obs", dist.Categorical(logits=logits), obs=y)

    guide = AutoNormal(model, init_scale=1e-3)
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-3}), Trace_ELBO())
    return lambda: svi.step(x, y)


def mfvi_reference_step(arch, x, y, estimator) -> Callable[[], None]:
    """The mean-field step of :func:`pyrozoo_step` as computed before issue 26: the reference
    objective (``ReferenceClosedFormKL_ELBO``: variances where first read, KLs after the
    likelihood) and, for ``"local"``, the unfused local reparameterization. Same numbers."""
    if estimator == "local":
        return pyrozoo_step(arch, x, y, None, objective=ReferenceClosedFormKL_ELBO, handler=local_reparameterization_reference)
    return pyrozoo_step(arch, x, y, estimator, objective=ReferenceClosedFormKL_ELBO)


def _traced():
    """The closed-form-KL ELBO on Pyro's traces (no direct evaluation)."""
    return ClosedFormKL_ELBO(fuse=False)


def _unfused(guide):
    """``guide`` with its reference (unfused) computation, for the ``(before)`` cases."""
    guide.fused = False
    return guide


#: name -> (description, factory(arch, x, y) -> step). Other methods add their cases here.
CASES: Dict[str, tuple] = {
    "deterministic (default Adam)": ("plain PyTorch step, torch.optim.Adam defaults", lambda a, x, y: deterministic_step(a, x, y, fused=False)),
    # what any implementation pays: the products and the optimizer; and a hand-written one
    "floor (two products per layer)": ("two products per layer, twice the parameters, fused Adam: no noise, variances or KL", floor_step),
    "plain-pytorch-lrt": ("mean-field VI with local reparameterization written in plain PyTorch autograd", plain_lrt_step),
    "mfvi-weight-sampling": ("pyrozoo mean-field VI, one weight sample per minibatch", lambda a, x, y: pyrozoo_step(a, x, y, None)),
    "mfvi-lrt": ("pyrozoo mean-field VI, local reparameterization", lambda a, x, y: pyrozoo_step(a, x, y, "local")),
    "mfvi-flipout": ("pyrozoo mean-field VI, flipout", lambda a, x, y: pyrozoo_step(a, x, y, "flipout")),
    "stock-pyro": ("Pyro AutoNormal + Trace_ELBO + pyro.optim.Adam via SVI", stock_pyro_step),
    # the step of zoo_protocols/compress_sparse_vd.py (biases are point estimates)
    "sparse-vd-lrt": ("Sparse VD (log-uniform prior, additive guide), local reparameterization", lambda a, x, y: pyrozoo_step(a, x, y, "local", LogUniformPrior, SparseVariationalDropoutGuide)),
    "bc-gnj-lrt": ("Bayesian compression, group normal-Jeffreys, local reparameterization", lambda a, x, y: pyrozoo_step(a, x, y, "local", GroupNormalJeffreysPrior, BayesianCompressionGuide)),
    "bc-ghs-lrt": ("Bayesian compression, group horseshoe, local reparameterization", lambda a, x, y: pyrozoo_step(a, x, y, "local", GroupHorseshoePrior, BayesianCompressionGuide)),
    # Bayesian compression through Pyro's traces: before its sites, which depend on the
    # group scales drawn before them, were evaluated directly
    "bc-gnj-lrt (traced)": ("BC-GNJ, the trace-based objective (before direct evaluation of dependent sites)", lambda a, x, y: pyrozoo_step(a, x, y, "local", GroupNormalJeffreysPrior, BayesianCompressionGuide, objective=_traced)),
    "bc-ghs-lrt (traced)": ("BC-GHS, the trace-based objective (before direct evaluation of dependent sites)", lambda a, x, y: pyrozoo_step(a, x, y, "local", GroupHorseshoePrior, BayesianCompressionGuide, objective=_traced)),
    # the same steps with the reference computation (guide.fused = False): before issue 26
    "sparse-vd-lrt (before)": ("Sparse VD, reference posterior + registered KL (pre issue 26)", lambda a, x, y: pyrozoo_step(a, x, y, "local", LogUniformPrior, lambda m: _unfused(SparseVariationalDropoutGuide(m)))),
    "bc-gnj-lrt (before)": ("BC-GNJ, reference weight posterior + elementwise Normal KL, traced (pre issue 26)",
                            lambda a, x, y: pyrozoo_step(a, x, y, "local", GroupNormalJeffreysPrior, lambda m: _unfused(BayesianCompressionGuide(m)), objective=_traced)),
    "bc-ghs-lrt (before)": ("BC-GHS, reference weight posterior + elementwise Normal KL, traced (pre issue 26)", lambda a, x, y: pyrozoo_step(a, x, y, "local", GroupHorseshoePrior, lambda m: _unfused(BayesianCompressionGuide(m)), objective=_traced)),
    # mean-field VI as before issue 26 (reference objective and handler; same numbers)
    "mfvi-weight-sampling (before)": ("mfvi-weight-sampling, reference computation (pre issue 26)", lambda a, x, y: mfvi_reference_step(a, x, y, None)),
    "mfvi-lrt (before)": ("mfvi-lrt, reference computation (pre issue 26)", lambda a, x, y: mfvi_reference_step(a, x, y, "local")),
    "mfvi-flipout (before)": ("mfvi-flipout, reference computation (pre issue 26)", lambda a, x, y: mfvi_reference_step(a, x, y, "flipout")),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=sorted(ARCHS), default="lenet300")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--cases", default="all", help="comma-separated case names or 'all'")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=30, help="steps per case per round")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    pyro.enable_validation(False)
    torch.manual_seed(0)
    shape = ARCHS[args.arch][1]
    x = torch.rand(args.batch_size, *shape, device=device)
    y = torch.randint(0, 10, (args.batch_size,), device=device)
    names = list(CASES) if args.cases == "all" else [c.strip() for c in args.cases.split(",")]
    steps = {"deterministic": deterministic_step(args.arch, x, y)}
    for name in names:
        if name not in CASES:
            sys.exit(f"unknown case {name!r}; available: {', '.join(CASES)}")
        steps[name] = CASES[name][1](args.arch, x, y)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    medians = interleaved_medians(steps, rounds=args.rounds, steps=args.steps, sync=sync)
    base = medians["deterministic"]
    import pandas as pd

    rows = [{"case": "deterministic", "description": "plain PyTorch step, fused Adam (baseline)", "ms_per_step": base * 1e3, "ratio": 1.0}]
    rows += [{"case": n, "description": CASES[n][0], "ms_per_step": medians[n] * 1e3, "ratio": medians[n] / base} for n in names]
    print(f"{args.arch}, batch {args.batch_size}, {device}, torch threads {torch.get_num_threads()}")
    print(to_markdown(pd.DataFrame(rows), floatfmt=".3g"))
    return rows


if __name__ == "__main__":
    main()
