"""Cost of data-parallel training on one machine: two gloo ranks against one process at the
same global batch.

Two ranks are started (``torch.multiprocessing``, gloo on a free port, one torch thread each)
and rank 0 times, in interleaved rounds in the same run (medians; see ``timing.py``):

* ``one process``: the step of ``fit`` (:func:`pyrozoo.inference.training.training_step`) on the whole
  global batch ``B``, on rank 0 alone (rank 1 waits at a barrier);
* ``2 ranks``: the data-parallel step: each rank ``B / 2`` examples, the gradients of every
  parameter averaged by one all-reduce (:class:`pyrozoo.distributed.DataParallel`);
* ``all-reduce``: that all-reduce alone, on gradients already computed.

Reported per case: ms per step and the ratio to ``one process``, and the all-reduce's share of
the 2-rank step, both alone and as timed inside the step (which includes waiting for the
slower rank).

    python benchmarks/distributed_overhead.py                      # UCI MLP and LeNet-300-100
    python benchmarks/distributed_overhead.py --cases lenet300 --rounds 30
"""

import argparse
import os
import socket
import sys
from pathlib import Path

import pyro
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import interleaved_medians  # noqa: E402

from pyrozoo.distributed import DataParallel  # noqa: E402
from pyrozoo.guides import MeanFieldNormalGuide  # noqa: E402
from pyrozoo.inference import ClosedFormKL_ELBO, collect_parameters, default_optimizer  # noqa: E402
from pyrozoo.inference.training import training_step  # noqa: E402
from pyrozoo.models import MLP, BayesianNeuralNetwork, CategoricalLikelihood, GaussianLikelihood, LeNet300100, NormalPrior  # noqa: E402

#: name -> (description, network factory, input shape, likelihood factory, global batch, N)
CASES = {
    "uci": ("UCI MLP 13-50-1, mean-field VI, local reparameterization (the UCI example's step)", lambda: MLP(13, [50], 1), (13,), lambda n: GaussianLikelihood(n, precision=4.0), 32, 455),
    "lenet300": ("LeNet-300-100, mean-field VI, local reparameterization (266k weights)", LeNet300100, (784,), CategoricalLikelihood, 128, 60000),
}


def make_step(case, x, y, parallel=None):
    """The step of ``fit`` for ``case`` on ``(x, y)`` (with ``parallel``: this rank's part)."""
    _, net, _, likelihood, _, n = CASES[case]
    pyro.clear_param_store()
    torch.manual_seed(0)  # the same initial parameters on every rank and for every candidate
    model = BayesianNeuralNetwork(net(), NormalPrior(1.0), likelihood(n))
    guide = MeanFieldNormalGuide(model, init_scale=1e-3)
    batch = (x, y, torch.arange(len(x)))
    guide(*batch)
    objective = ClosedFormKL_ELBO()
    params = collect_parameters(model, guide, objective, batch)
    opt = default_optimizer(params, 1e-3)
    return (lambda: training_step(model, guide, objective, opt, batch, estimator="local", params=params, parallel=parallel)), params


def data(case, generator):
    _, _, shape, likelihood, batch, _ = CASES[case]
    x = torch.randn(batch, *shape, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator) if likelihood is CategoricalLikelihood else torch.randn(batch, 1, generator=generator)
    return x, y


def rank_main(rank, world_size, port, args, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    pyro.enable_validation(False)
    parallel = DataParallel()
    rows = []
    for case in args.cases:
        x, y = data(case, torch.Generator().manual_seed(0))  # the same global batch on every rank
        part = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
        two_ranks, params = make_step(case, x[part], y[part], parallel)
        single = make_step(case, x, y)[0] if rank == 0 else (lambda: None)
        in_step = []

        def two_ranks_timed():
            before = parallel.communication_seconds
            two_ranks()
            in_step.append(parallel.communication_seconds - before)

        two_ranks()  # gradients for the all-reduce alone
        medians = interleaved_medians(
            {"one process": single, "2 ranks": two_ranks_timed, "all-reduce": lambda: parallel.average_gradients(params, len(x) // world_size)},
            rounds=args.rounds, steps=args.steps, warmup=args.warmup, sync=dist.barrier,
        )
        in_step_median = sorted(in_step)[len(in_step) // 2]
        if rank == 0:
            base = medians["one process"]
            numel = sum(p.numel() for p in params if p.grad is not None)  # what the all-reduce sends
            for name, seconds in medians.items():
                rows.append({"case": case, "candidate": name, "ms_per_step": seconds * 1e3, "ratio": seconds / base})
            rows.append({"case": case, "candidate": "all-reduce inside the 2-rank step", "ms_per_step": in_step_median * 1e3, "ratio": in_step_median / base})
            share = (f"(all-reduce share of the 2-rank step: alone {medians['all-reduce'] / medians['2 ranks']:.1%}, "
                     f"inside {in_step_median / medians['2 ranks']:.1%}; {numel} gradient entries)")
            rows.append({"case": case, "candidate": share, "ms_per_step": float("nan"), "ratio": float("nan")})
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="all", help=f"comma-separated of {', '.join(CASES)}, or 'all'")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20, help="steps per candidate per round")
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args(argv)
    args.cases = list(CASES) if args.cases == "all" else [c.strip() for c in args.cases.split(",")]
    for case in args.cases:
        if case not in CASES:
            sys.exit(f"unknown case {case!r}; available: {', '.join(CASES)}")
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.start_processes(rank_main, args=(2, free_port(), args, queue), nprocs=2, join=True, start_method="spawn")
    rows = queue.get()
    import pandas as pd

    from pyrozoo.reporting import to_markdown

    for case in args.cases:
        print(f"{case}: {CASES[case][0]}, global batch {CASES[case][4]}; one torch thread per rank; gloo on one machine ({os.cpu_count()} CPUs)")
    print(to_markdown(pd.DataFrame(rows), floatfmt=".3g"))
    return rows


if __name__ == "__main__":
    main()
