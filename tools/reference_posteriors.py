"""Builds the reference posteriors of issue 22 (full-batch NUTS on small BNNs over UCI and MNIST
data, and conjugate linear regressions with exact posteriors); the problems, their sizes and
the diagnostics are described in :mod:`zoo_protocols.reference_posteriors`.

Resumable: every finished chain is written atomically to its own file under ``--cache-dir``
(named by the problem and a digest of the settings) and reused on a rerun with the same
settings, so an interrupted build loses at most the chain in progress. Once a problem's
chains are all there, its reference (``<problem>.npz``: the predictive at the test inputs) and
diagnostics (``<problem>.json``) are written to ``--results-dir``, and ``diagnostics.csv/.md``
tabulates every problem stored there.

Example::

    python tools/reference_posteriors.py                        # every problem, as committed
    python tools/reference_posteriors.py --problems yacht_mlp --chains 4 --warmup 500 --samples 500
    nohup python tools/reference_posteriors.py --no-progress > build.log 2>&1 &   # resumable
"""

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import torch

from pyrozoo import atomic
from pyrozoo.reporting import save_table
from zoo_protocols import reference_posteriors as ref
from zoo_protocols.cli import (
    DEFAULT_RESULTS_DIR, bounded_float, data_dir_default, existing_directory, name_list, non_negative_int, positive_int, run_main,
)

#: what ``--quick`` runs: the smallest network and an exact problem
QUICK_PROBLEMS = ["yacht_mlp", "bostonHousing_linear_nig"]


def build_problem(name, args, settings, progress):
    """Runs (or reuses) the chains of one problem and writes its reference; returns its info."""
    spec = ref.get_problem(name)
    data = ref.reference_data(spec, args.data_dir)
    stem = ref.reference_stem(spec, args.quick)
    info = {"problem": spec.name, "description": spec.description, "kind": spec.kind, "spec": asdict(spec),
            "train_size": len(data.y_train), "test_size": len(data.y_test), "quick": args.quick}
    if spec.kind == "nig":
        arrays = ref.exact_arrays(spec, data)
        info["diagnostics"] = {"exact": True, "converged": True}
    else:
        chains = []
        for c in range(args.chains):
            path = ref.chain_path(args.cache_dir, spec, settings, c)
            if path.is_file():
                chains.append(ref.load_npz(path))
                print(f"{spec.name} chain {c}: cached ({path.name})", flush=True)
                continue
            chain = ref.run_chain(spec, data, c, settings, progress=progress)
            ref.save_npz(path, chain)
            chains.append(chain)
            depth = ref.tree_depths(chain["leapfrogs"][settings.warmup:])
            print(
                f"{spec.name} chain {c}: {float(chain['wall_seconds']):.0f} s, step size {float(chain['step_size']):.3g}, "
                f"mean tree depth {depth.mean():.1f}, divergences {int(chain['divergent'].sum())}", flush=True,
            )
        arrays = ref.combine_chains(spec, data, chains)
        diag = ref.summarize_chains(spec, chains, settings)
        if spec.kind == "linear":
            diag["nuts_vs_exact"] = ref.nuts_vs_exact(chains, arrays)
        info["diagnostics"] = diag
        info["settings"] = asdict(settings)
    info["predictive"] = ref.predictive_summary(spec, arrays)
    info["provenance"] = ref.provenance()
    ref.save_npz(Path(args.results_dir) / f"{stem}.npz", arrays)
    atomic.write_json(Path(args.results_dir) / f"{stem}.json", info)
    return info


def diagnostics_row(info) -> dict:
    d = info["diagnostics"]
    if d.get("exact"):
        return {"problem": info["problem"], "kind": info["kind"], "train": info["train_size"], "test": info["test_size"], **info["predictive"], "converged": True}
    return {
        "problem": info["problem"], "kind": info["kind"], "train": info["train_size"], "test": info["test_size"],
        "chains": d["chains"], "samples": d["samples_per_chain"], "rhat_max": d["rhat_max"], "ess_bulk_min": d["ess_bulk_min"],
        "divergences": d["divergences"], "tree_depth_mean": d["tree_depth_mean"],
        "step_size_mean": sum(c["step_size"] for c in d["per_chain"]) / d["chains"],
        **info["predictive"], "minutes": d["wall_seconds"] / 60, "cpu_minutes": d["cpu_seconds"] / 60, "converged": d["converged"],
    }


def write_table(results_dir: Path, quick: bool):
    """``diagnostics.csv/.md`` over every reference stored in ``results_dir``."""
    rows = []
    for name in ref.reference_problems():
        path = results_dir / f"{ref.reference_stem(name, quick)}.json"
        if path.is_file():
            rows.append(diagnostics_row(json.loads(path.read_text())))
    notes = (
        f"Full-batch NUTS (Pyro) reference posteriors, built by tools/reference_posteriors.py; see "
        f"zoo_protocols/reference_posteriors.py for the problems. rhat_max: the largest rank-normalised split R-hat over "
        f"the function-space quantities (f or p(true class) at every test input) and the training log-likelihood; "
        f"ess_bulk_min: the smallest bulk ESS over the same. Thresholds: R-hat < {ref.RHAT_MAX}, bulk ESS >= "
        f"{ref.ESS_MIN:g}, no divergences. minutes: wall clock of all chains (one thread each, on a shared machine); "
        "cpu_minutes: their CPU time. *_nig is exact (closed form)."
    )
    if quick:
        notes = "QUICK SMOKE CONFIGURATION - not a result.\n\n" + notes
    save_table(pd.DataFrame(rows), "diagnostics" + ("_quick" if quick else ""), results_dir, title="Reference posteriors: diagnostics", notes=notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=name_list, default=["all"], help=f"comma-separated, or all: {', '.join(ref.reference_problems())}")
    parser.add_argument("--chains", type=positive_int, default=ref.MIN_CHAINS, help="chains per problem")
    parser.add_argument("--warmup", type=positive_int, default=300, help="warmup (adaptation) iterations per chain")
    parser.add_argument("--samples", type=positive_int, default=300, help="kept iterations per chain")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="chain c of a problem uses seed 1000 * seed + c")
    parser.add_argument("--max-tree-depth", type=positive_int, default=10)
    parser.add_argument("--target-accept", type=bounded_float(0.0, 1.0, low_inclusive=False), default=0.8)
    parser.add_argument("--full-mass", action="store_true", help="adapt a dense mass matrix instead of a diagonal one")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (one per chain is fastest at these sizes)")
    parser.add_argument("--data-dir", type=existing_directory, default=data_dir_default(), help="data root (default: $PYROZOO_DATA_DIR, else the nearest shared/data)")
    default_results = DEFAULT_RESULTS_DIR / "reference"
    parser.add_argument("--results-dir", type=Path, default=default_results, help=f"where the references are written (default: {default_results})")
    parser.add_argument("--cache-dir", type=Path, default=None, help="where finished chains are kept (default: <results-dir>/chains, not committed)")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke configuration (used by the test suite); files end in _quick")
    parser.add_argument("--no-progress", action="store_true", help="hide the per-chain progress bars")
    args = parser.parse_args(argv)
    problems = ref.reference_problems() if args.problems == ["all"] else args.problems
    unknown = [p for p in problems if p not in ref.PROBLEMS]
    if unknown:
        parser.error(f"unknown problem(s) {unknown}; choose from {', '.join(ref.reference_problems())}")
    settings = ref.NUTSSettings(args.warmup, args.samples, args.seed, args.max_tree_depth, args.target_accept, args.full_mass)
    if args.quick:
        if args.problems == ["all"]:
            problems = QUICK_PROBLEMS
        args.chains = min(args.chains, 2)
        settings = ref.NUTSSettings(20, 20, args.seed, 4, args.target_accept, args.full_mass, init_steps=100, thinned_per_chain=10)
    args.cache_dir = args.cache_dir or Path(args.results_dir) / "chains"
    torch.set_num_threads(args.threads)
    infos = [build_problem(name, args, settings, progress=not args.no_progress) for name in problems]
    write_table(Path(args.results_dir), args.quick)
    for info in infos:
        d = info["diagnostics"]
        if d.get("exact"):
            print(f"{info['problem']}: exact", flush=True)
            continue
        verdict = "converged" if d["converged"] else "NOT CONVERGED (thresholds: " + json.dumps(d["thresholds"]) + ")"
        print(f"{info['problem']}: R-hat max {d['rhat_max']:.3f}, bulk ESS min {d['ess_bulk_min']:.0f}, divergences {d['divergences']}: {verdict}", flush=True)
    return infos


if __name__ == "__main__":
    run_main(main)
