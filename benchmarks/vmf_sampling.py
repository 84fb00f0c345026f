"""Throughput of von Mises-Fisher sampling against ``torch.randn`` of the same size.

For every dimension ``d``: draw ``n`` samples of one ``VonMisesFisher(mu, kappa)`` (``n * d``
numbers, like ``torch.randn(n, d)``), with ``kappa`` such that the expected cosine to the mean is
0.9 (RDP's MNIST prior), in the same process as the baselines (interleaved rounds, medians; see
``timing.py``). Printed: samples per second and the ratio of the vMF's time to ``torch.randn``'s
(the issue's target is <= 3x for d >= 1000), and to ``power_spherical.PowerSpherical`` of the
same mean resultant length when that optional package is installed (``pip install
power-spherical``, the ``bench`` extra; skipped otherwise).

``--layer`` times RDP's training draws instead: one sample per row of a ``(rows, d)`` batch of
mean directions with a shared concentration, at every layer shape of the double-grouped RDP
networks (:func:`rdp_layer_shapes`: LeNet-5, LeNet-300-100 and the UCI networks). ``--grad``
makes the parameters require gradients and times draw + backward, as a training step pays.
``--cpu-time`` measures the thread's CPU time instead of wall time (with ``--threads 1``: on a
shared machine, time spent descheduled is then not counted).

Each run also times the sampler as it was before the batched sampler (issue 26):
:func:`previous_rsample` is a frozen copy of that code, kept here only as the "before" of the
comparison (it draws from the same distribution with another use of the random stream), so that
before and after are measured in one process on the same machine state.

    python benchmarks/vmf_sampling.py                       # d = 100, 1e3, 1e4, 1e5 on the CPU
    python benchmarks/vmf_sampling.py --layer --threads 1   # RDP's layer shapes
    python benchmarks/vmf_sampling.py --layer --threads 1 --grad --cpu-time
    python benchmarks/vmf_sampling.py --device cuda
    python benchmarks/vmf_sampling.py --quick               # smoke run used by the tests
"""

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_medians  # noqa: E402

from pyrozoo.distributions import VonMisesFisher  # noqa: E402
from pyrozoo.distributions.von_mises_fisher import vmf_concentration  # noqa: E402
from pyrozoo.models import MLP, LeNet5, LeNet300100  # noqa: E402
from pyrozoo.models.radial_directional import RadialDirectionalPrior, weight_groups  # noqa: E402
from pyrozoo.reporting import to_markdown  # noqa: E402
from pyrozoo.utils import resolve_device  # noqa: E402

#: numbers per draw (n * d) of each case
ELEMENTS = 4_000_000
#: input features of the UCI sets (their ``index_features.txt``) and the protocol's hidden width
UCI_NETWORKS = {
    "bostonHousing": (13, 50), "concrete": (8, 50), "energy": (8, 50), "kin8nm": (8, 50),
    "naval-propulsion-plant": (16, 50), "power-plant": (4, 50), "protein-tertiary-structure": (9, 100),
    "wine-quality-red": (11, 50), "yacht": (6, 50),
}


def rdp_layer_shapes():
    """``{(rows, d): [network, ...]}`` of the vMF draws of one RDP step: every weight that
    :class:`RadialDirectionalPrior` groups, double-grouped as in ``zoo_protocols/compress_rdp.py`` and
    ``zoo_protocols/uci_rdp.py`` (LeNet-5, LeNet-300-100, the UCI networks)."""
    networks = {"lenet5": LeNet5(), "lenet300": LeNet300100()}
    networks.update({name: MLP(inputs, [hidden], 1) for name, (inputs, hidden) in UCI_NETWORKS.items()})
    shapes = {}
    for net_name, net in networks.items():
        for module_name, module in net.named_modules():
            for param_name, param in module.named_parameters(recurse=False):
                if RadialDirectionalPrior.is_grouped(module, param_name, param):
                    for group in weight_groups(f"{module_name}.{param_name}", param.shape, "double"):
                        users = shapes.setdefault((group.num_groups, group.dim), [])
                        if net_name not in users:
                            users.append(net_name)
    return shapes


# -- the sampler before issue 26, frozen (the benchmark's "before") ---------------------------
def _previous_first_accepted(n, tries, draw, device):
    out = None
    pending = None
    for _ in range(10_000):
        k = n if pending is None else pending.numel()
        values, accept = draw(pending, k, tries)
        accepted = accept.any(-1)
        chosen = values.gather(-1, accept.to(torch.uint8).argmax(-1, keepdim=True)).squeeze(-1)
        if pending is None:
            out = chosen
            pending = (~accepted).nonzero().flatten()
        else:
            out[pending[accepted]] = chosen[accepted]
            pending = pending[~accepted]
        if pending.numel() == 0:
            return out
    raise RuntimeError("rejection sampler did not terminate")


def _previous_standard_gamma(alpha, n, device):
    boost = alpha < 1.0
    a = alpha + 1.0 if boost else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)

    def draw(index, k, tries):
        z = torch.randn(k, tries, dtype=torch.float64, device=device)
        v = 1.0 + c * z
        ok = v > 0
        v3 = torch.where(ok, v, 1.0) ** 3
        log_u = torch.rand(k, tries, dtype=torch.float64, device=device).log()
        return d * v3, ok & (log_u < 0.5 * z * z + d - d * v3 + d * v3.log())

    out = _previous_first_accepted(n, 3 if n <= 4096 else 2, draw, device)
    if boost:
        out = out * torch.rand(n, dtype=torch.float64, device=device).pow(1.0 / alpha)
    return out


def _previous_wood_b(dim, kappa64):
    quarter_m = 0.25 * (dim - 1.0)
    half = 0.5 * kappa64
    den = half + torch.hypot(half, torch.full_like(kappa64, quarter_m))
    return quarter_m / den, den


def _previous_accepted_proposals(dim, kappa64):
    m = dim - 1.0
    flat_kappa = kappa64.reshape(-1)
    b, den = _previous_wood_b(dim, flat_kappa)
    log_half_1pb = torch.log1p(b) - math.log(2.0)
    scale = (0.5 * m) * (flat_kappa / den) / (1.0 + b)
    device = kappa64.device

    def draw(index, k, tries):
        bp, sp, lp = (b, scale, log_half_1pb) if index is None else (b[index], scale[index], log_half_1pb[index])
        bp, sp, lp = bp.unsqueeze(-1), sp.unsqueeze(-1), lp.unsqueeze(-1)
        n = k * tries
        g = _previous_standard_gamma(0.5 * m, 2 * n, device)
        e = (g[:n] / (g[:n] + g[n:])).reshape(k, tries)
        denom = 1.0 - (1.0 - bp) * e
        log_accept = sp * (1.0 - 2.0 * e) / denom + m * (lp + torch.log1p((1.0 - bp) * e / denom))
        return e, torch.rand(k, tries, dtype=torch.float64, device=device).log() <= log_accept

    n = flat_kappa.numel()
    return _previous_first_accepted(n, 8 if n <= 512 else (4 if n <= 4096 else 2), draw, device).reshape(kappa64.shape)


def previous_rsample(q: VonMisesFisher, sample_shape=torch.Size()) -> torch.Tensor:
    """``q.rsample(sample_shape)`` as the sampler drew it before issue 26 (without the gradient
    cache): Beta proposals from two Marsaglia-Tsang Gamma variates each, in rounds over the
    elements, and a separate Gaussian tangent."""
    sample_shape = torch.Size(sample_shape)
    shape = q._extended_shape(sample_shape)
    kappa = q.concentration.expand(shape[:-1])
    with torch.no_grad():
        eps = _previous_accepted_proposals(q.dim, kappa.detach().to(torch.float64))
    b, den = _previous_wood_b(q.dim, kappa.to(torch.float64))
    denom = 1.0 - (1.0 - b) * eps
    dtype = q.loc.dtype
    w = (1.0 - 2.0 * b * eps / denom).to(dtype).unsqueeze(-1)
    sin = (2.0 * (math.sqrt(0.25 * (q.dim - 1.0)) / den.sqrt()) * (eps * (1.0 - eps)).sqrt() / denom).to(dtype).unsqueeze(-1)
    g = torch.randn(shape, dtype=dtype, device=q.loc.device)
    g[..., 0] = 0.0
    a = sin / torch.linalg.vector_norm(g, dim=-1, keepdim=True)
    loc = q.loc
    mu1 = loc[..., :1]
    sigma = torch.where(mu1 >= 0, -1.0, 1.0).to(dtype)
    loc_sq = (loc * loc).sum(-1, keepdim=True)
    vv = loc_sq - 2.0 * sigma * mu1 + 1.0
    d = g.shape[-1]
    if loc.dim() == 1:
        g_dot_loc = (g @ loc).unsqueeze(-1)
    elif len(sample_shape) == 0 and loc.is_contiguous():
        g_dot_loc = torch.bmm(g.reshape(-1, 1, d), loc.reshape(-1, d, 1)).reshape(g.shape[:-1] + (1,))
    else:
        g_dot_loc = torch.einsum("...i,...i->...", g, loc).unsqueeze(-1)
    c = 2.0 * (w * (1.0 - sigma * mu1) - a * g_dot_loc) / vv
    x = g * a
    x.addcmul_(c, loc)
    x[..., :1] += sigma * ((w * (loc_sq - 1.0) + 2.0 * a * g_dot_loc) / vv)
    return x


# -- timing ------------------------------------------------------------------------------------
def power_spherical_class():
    try:
        from power_spherical import PowerSpherical
    except ImportError:
        return None
    return PowerSpherical


def _sync(device):
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def cpu_time_medians(candidates, *, rounds, steps, warmup, sync):
    """:func:`timing.interleaved_medians` in this thread's CPU time (one intra-op thread)."""
    return interleaved_medians(candidates, rounds=rounds, steps=steps, warmup=warmup, sync=sync, clock=time.thread_time)


def candidates(rows, d, mean_cosine, device, dtype, shared_mean, grad=False):
    """``{name: step}``: the vMF draw now (``vmf``) and before (``vmf_before``), ``torch.randn``
    of the same size and, if installed, power spherical of the same mean resultant length.
    ``grad``: the parameters (mean directions, concentration) require gradients and each step
    is the draw plus the backward pass of a fixed random linear function of it, as in training
    (randn: the draw alone)."""
    g = torch.Generator().manual_seed(0)
    kappa = vmf_concentration(d, mean_cosine, dtype=dtype, device=device)
    if shared_mean:  # one distribution, `rows` samples
        mu = torch.randn(d, generator=g, dtype=torch.float64)
        mu = (mu / mu.norm()).to(device, dtype)
        sample_shape = (rows,)
    else:  # one sample per row of a batch, shared concentration (RDP's training draw)
        mu = torch.randn(rows, d, generator=g, dtype=torch.float64)
        mu = (mu / mu.norm(dim=-1, keepdim=True)).to(device, dtype)
        sample_shape = ()
    weights = torch.randn(rows, d, generator=g, dtype=torch.float64).to(device, dtype)
    if grad:
        mu.requires_grad_()
        kappa.requires_grad_()

    def step(draw, params):
        if not grad:
            return draw
        return lambda: torch.autograd.grad((draw() * weights).sum(), params)

    q = VonMisesFisher(mu, kappa)
    out = {
        "vmf": step(lambda: q.rsample(sample_shape), [mu, kappa]),
        "vmf_before": step(lambda: previous_rsample(q, sample_shape), [mu, kappa]),
        "randn": lambda: torch.randn(rows, d, device=device, dtype=dtype),
    }
    power_spherical = power_spherical_class()
    if power_spherical is not None:
        # the same mean resultant length: kappa_PS = (d - 1) A / (1 - A)
        k_ps = torch.tensor((d - 1) * mean_cosine / (1 - mean_cosine), device=device, dtype=dtype, requires_grad=grad)
        if shared_mean:
            ps = power_spherical(mu, k_ps)
            out["power_spherical"] = step(lambda: ps.rsample((rows,)), [mu, k_ps])
        else:
            ps = power_spherical(mu, k_ps.expand(rows))
            out["power_spherical"] = step(lambda: ps.rsample(), [mu, k_ps])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dims", default="100,1000,10000,100000")
    parser.add_argument("--mean-cosine", type=float, default=0.9, help="A_d(kappa) of the sampled distributions")
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--layer", action="store_true", help="RDP's layer shapes (one draw per row) instead of --dims")
    parser.add_argument("--grad", action="store_true", help="time draw + backward with parameters that require gradients")
    parser.add_argument("--cpu-time", action="store_true", help="measure this thread's CPU time, not wall time (use with --threads 1)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and rounds (smoke test)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    dtype = torch.float64 if args.float64 else torch.float32
    if args.layer:
        cases = [(rows, d, False, ", ".join(users)) for (rows, d), users in rdp_layer_shapes().items()]
    else:
        cases = [(max(ELEMENTS // int(float(d)), 10), int(float(d)), True, "") for d in args.dims.split(",")]
    rounds, steps, warmup = args.rounds, args.steps, 3
    if args.quick:
        cases = [(200, 100, True, ""), (4, 1000, False, "")]
        rounds, steps, warmup = 3, 1, 1
    measure = cpu_time_medians if args.cpu_time else interleaved_medians
    rows_out = []
    for rows, d, shared, users in cases:
        fns = candidates(rows, d, args.mean_cosine, device, dtype, shared, grad=args.grad)
        med = measure(fns, rounds=rounds, steps=steps, warmup=warmup, sync=_sync(device))
        row = {"d": d, "samples": rows, "draw": "one distribution" if shared else "one per row"}
        if users:
            row["networks"] = users
        row.update({
            "vmf_samples_per_s": rows / med["vmf"],
            "vmf_over_randn": med["vmf"] / med["randn"],
            "before_over_randn": med["vmf_before"] / med["randn"],
            "vmf_over_before": med["vmf"] / med["vmf_before"],
        })
        if "power_spherical" in med:
            row["power_spherical_over_randn"] = med["power_spherical"] / med["randn"]
            row["vmf_over_power_spherical"] = med["vmf"] / med["power_spherical"]
            row["before_over_power_spherical"] = med["vmf_before"] / med["power_spherical"]
        rows_out.append(row)
        versus_ps = f", x{row['vmf_over_power_spherical']:.2f} power-spherical (before x{row['before_over_power_spherical']:.2f})" if "vmf_over_power_spherical" in row else ""
        print(f"d={d:>6} n={rows:>6}: vMF {row['vmf_samples_per_s']:.3g}/s, x{row['vmf_over_randn']:.2f} torch.randn (before x{row['before_over_randn']:.2f}){versus_ps}", flush=True)
    if power_spherical_class() is None:
        print("power-spherical is not installed: that comparison is skipped")
    table = pd.DataFrame(rows_out)
    print()
    clock = "thread CPU time" if args.cpu_time else "wall time"
    what = "draw + backward" if args.grad else "draw"
    print(f"device {device}, {dtype}, torch {torch.__version__}, {torch.get_num_threads()} threads, mean cosine {args.mean_cosine}, "
          f"{what}, {clock}: medians of {rounds} interleaved rounds of {steps} steps")
    print(to_markdown(table, floatfmt=".3g"))
    return table


if __name__ == "__main__":
    main()
