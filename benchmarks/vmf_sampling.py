"""Throughput of von Mises-Fisher sampling against ``torch.randn`` of the same size.

For every dimension ``d``: draw ``n`` samples of one ``VonMisesFisher(mu, kappa)`` (``n * d``
numbers, like ``torch.randn(n, d)``), with ``kappa`` such that the expected cosine to the mean is
0.9 (RDP's MNIST prior), in the same process as the baselines (interleaved rounds, medians; see
``timing.py``). Printed: samples per second and the ratio of the vMF's time to ``torch.randn``'s
(the issue's target is <= 3x for d >= 1000), and to ``power_spherical.PowerSpherical`` of the
same mean resultant length when that optional package is installed (``pip install
power-spherical``; skipped otherwise). ``--layer`` times RDP's training shapes instead: one
sample per row of a ``(rows, d)`` batch with a shared concentration, as in LeNet-5's fc1.

    python benchmarks/vmf_sampling.py                       # d = 100, 1e3, 1e4, 1e5 on the CPU
    python benchmarks/vmf_sampling.py --device cuda
    python benchmarks/vmf_sampling.py --quick               # smoke run used by the tests
"""

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_medians  # noqa: E402

from pyrozoo.distributions import VonMisesFisher  # noqa: E402
from pyrozoo.distributions.von_mises_fisher import vmf_concentration  # noqa: E402
from pyrozoo.reporting import to_markdown  # noqa: E402
from pyrozoo.utils import resolve_device  # noqa: E402

#: numbers per draw (n * d) of each case
ELEMENTS = 4_000_000
#: RDP layer shapes (rows, d): LeNet-5 conv2 rows/columns, fc1 rows/columns
LAYER_SHAPES = [(50, 500), (20, 1250), (500, 800), (800, 500)]


def power_spherical_class():
    try:
        from power_spherical import PowerSpherical
    except ImportError:
        return None
    return PowerSpherical


def _sync(device):
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def candidates(rows, d, mean_cosine, device, dtype, shared_mean):
    """``{name: step}``: the vMF draw, ``torch.randn`` of the same size and, if installed, power spherical."""
    g = torch.Generator().manual_seed(0)
    kappa = vmf_concentration(d, mean_cosine, dtype=dtype, device=device)
    if shared_mean:  # one distribution, `rows` samples
        mu = torch.randn(d, generator=g, dtype=torch.float64)
        q = VonMisesFisher((mu / mu.norm()).to(device, dtype), kappa)
        out = {"vmf": lambda: q.rsample((rows,))}
    else:  # one sample per row of a batch, shared concentration (RDP's training draw)
        mu = torch.randn(rows, d, generator=g, dtype=torch.float64)
        q = VonMisesFisher((mu / mu.norm(dim=-1, keepdim=True)).to(device, dtype), kappa)
        out = {"vmf": lambda: q.rsample()}
    out["randn"] = lambda: torch.randn(rows, d, device=device, dtype=dtype)
    power_spherical = power_spherical_class()
    if power_spherical is not None:
        # the same mean resultant length: kappa_PS = (d - 1) A / (1 - A)
        k_ps = torch.tensor((d - 1) * mean_cosine / (1 - mean_cosine), device=device, dtype=dtype)
        if shared_mean:
            ps = power_spherical(q.loc[0] if q.loc.dim() > 1 else q.loc, k_ps)
            out["power_spherical"] = lambda: ps.rsample((rows,))
        else:
            ps = power_spherical(q.loc, k_ps.expand(rows))
            out["power_spherical"] = lambda: ps.rsample()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dims", default="100,1000,10000,100000")
    parser.add_argument("--mean-cosine", type=float, default=0.9, help="A_d(kappa) of the sampled distributions")
    parser.add_argument("--float64", action="store_true")
    parser.add_argument("--layer", action="store_true", help="RDP's layer shapes (one draw per row) instead of --dims")
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
        cases = [(rows, d, False) for rows, d in LAYER_SHAPES]
    else:
        cases = [(max(ELEMENTS // int(float(d)), 10), int(float(d)), True) for d in args.dims.split(",")]
    rounds, steps, warmup = args.rounds, args.steps, 3
    if args.quick:
        cases = [(200, 100, True), (4, 1000, False)]
        rounds, steps, warmup = 3, 1, 1
    rows_out = []
    for rows, d, shared in cases:
        fns = candidates(rows, d, args.mean_cosine, device, dtype, shared)
        med = interleaved_medians(fns, rounds=rounds, steps=steps, warmup=warmup, sync=_sync(device))
        row = {
            "d": d,
            "samples": rows,
            "draw": "one distribution" if shared else "one per row",
            "vmf_samples_per_s": rows / med["vmf"],
            "randn_samples_per_s": rows / med["randn"],
            "vmf_over_randn": med["vmf"] / med["randn"],
        }
        if "power_spherical" in med:
            row["power_spherical_samples_per_s"] = rows / med["power_spherical"]
            row["vmf_over_power_spherical"] = med["vmf"] / med["power_spherical"]
        rows_out.append(row)
        print(f"d={d:>6} n={rows:>6}: vMF {row['vmf_samples_per_s']:.3g}/s, x{row['vmf_over_randn']:.2f} torch.randn" + (f", x{row['vmf_over_power_spherical']:.2f} power-spherical" if "vmf_over_power_spherical" in row else ""), flush=True)
    if power_spherical_class() is None:
        print("power-spherical is not installed: that comparison is skipped")
    table = pd.DataFrame(rows_out)
    print()
    print(f"device {device}, {dtype}, torch {torch.__version__}, {torch.get_num_threads()} threads, mean cosine {args.mean_cosine}")
    print(to_markdown(table, floatfmt=".3g"))
    return table


if __name__ == "__main__":
    main()
