"""The combination matrix of issue 22: every prior x guide x objective and prior x sampler the
package exports, on the reference problems and on plain Pyro models, scored against the
reference posteriors (:mod:`zoo_protocols.reference_matrix` describes the axes, the budget, the
scores, the statuses and the quality bar). Writes, under ``--results-dir``:

* ``reference_matrix/<problem>.csv``: every run of a problem (the baseline's seeds included),
  rewritten atomically after each run; a rerun skips the runs already there (resumable);
* ``reference_matrix.csv``: all problems, one row per run, with its status (``ok``,
  ``refused``, ``warned``, ``diverged``, ``failed``, ``below_quality``), message and scores;
  ``reference_matrix.md``: the matrix as a page, one combination per row and one problem per
  column; ``reference_matrix_refusals.csv`` / ``.md``: the distinct refusal messages;
* ``reference_matrix_summary.csv`` / ``.md``: per problem, the reference's convergence, the
  baseline's quality bars and the counts of each status, with the provenance notes;
  ``reference_matrix_priors.csv`` / ``.md``: per problem and prior, mean-field VI under that
  prior against the reference prior (what the prior does to the model; each prior's row is
  the bar of the other combinations under it);
* ``reference_matrix.png``: the heat map (status by combination x problem).

The references are read from ``--reference-dir`` (default ``<results-dir>/reference``; build
them with ``tools/reference_posteriors.py``).

Examples::

    python tools/reference_matrix.py                                  # the full matrix
    nohup python tools/reference_matrix.py --jobs 2 > matrix.log 2>&1 &   # resumable
    python tools/reference_matrix.py --problems yacht_mlp,mnist_softmax_plain --seeds 0-4
    python tools/reference_matrix.py --quick --results-dir /tmp/m     # smoke run (tests)
"""

import argparse
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import torch

from pyrozoo import atomic
from pyrozoo.reporting import save_figure, save_table
from zoo_protocols import provenance as prov
from zoo_protocols import reference_matrix as rm
from zoo_protocols.cli import DEFAULT_RESULTS_DIR, data_dir_default, existing_directory, name_list, parse_seeds, positive_int, run_main

#: what ``--quick`` runs: two small problems (a BNN, a plain model) and a few combinations
QUICK_PROBLEMS = ["yacht_mlp", "bostonHousing_linear_nig"]
QUICK_COMBINATIONS = [
    rm.Combination("NormalPrior", "DeltaGuide", "ClosedFormKL_ELBO"),
    rm.Combination("NormalPrior", "MeanFieldNormalGuide", "ImportanceWeighted_ELBO"),
    rm.Combination("RadialDirectionalPrior", "MeanFieldNormalGuide", "ClosedFormKL_ELBO"),
    rm.Combination("NormalPrior", rm.SAMPLES, "SGLD"),
    rm.Combination(rm.OWN_PRIOR, "DeltaGuide", "ClosedFormKL_ELBO"),
    rm.Combination(rm.OWN_PRIOR, "SemiImplicitGuide", "DSIVI_ELBO"),
    rm.Combination(rm.OWN_PRIOR, rm.SAMPLES, "SGLD"),
]


def quick_combinations(problem: rm.MatrixProblem):
    return [c for c in QUICK_COMBINATIONS if (c.prior == rm.OWN_PRIOR) == problem.plain]


def _run_one(name, args, budget):
    """One problem in a worker process (one torch thread: these models are small)."""
    torch.set_num_threads(1)
    problem = rm.load_problem(name, args.data_dir)
    combos = quick_combinations(problem) if args.quick else None
    log = (lambda line: print(line, flush=True)) if not args.no_progress else (lambda line: None)
    frame = rm.run_problem(problem, budget, args.seeds, runs_dir=args.runs_dir, reference_dir=args.reference_dir, quick_reference=args.quick, combos=combos, log=log)
    return name, len(frame)


def provenance(argv) -> str:
    root = prov.repo_root()
    modified = prov.modified(root, ["zoo_protocols/reference_matrix.py", "tools/reference_matrix.py"])
    return (
        f"command: `python {' '.join(argv)}`; commit {(prov.git(root, 'rev-parse', 'HEAD') or '')[:12]}"
        f"{' (the matrix code modified since)' if modified else ''}; torch {torch.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPU cores (shared with other jobs: the seconds are wall clock under that load)"
    )


def notes(args, budget, table, elapsed, argv) -> str:
    c = rm.counts(table)
    text = f"""Built by tools/reference_matrix.py from the per-problem runs under {args.runs_dir}; see zoo_protocols/reference_matrix.py for the axes, the problems and the rules.

Budget, the same for every combination: {budget.steps} full-batch gradient evaluations (objectives: Adam, learning rate {budget.lr:g}; samplers: step {budget.step_scale:g} / (N h lambda), the inverse of the log-likelihood's largest curvature for a linear model, SGHMC's times 1 - momentum; the first {budget.burn_in:.0%} burn-in); {budget.num_samples} posterior draws for the predictive ({rm.NOISE_DRAWS} noise draws each for W2), {budget.moment_draws} for the conjugate problems' moments. KL warm-up over the first fraction of the run for the priors whose declared methods warm up: {rm.PRIOR_KL_WARMUP}. Importance-weighted objectives: K = {rm.PARTICLES}.

Scores: test_ll, mean log predictive density per test point in the targets' original units (classification: of the label); w2, the 2-Wasserstein distance between the predictive distributions of y and the reference's at each test input (standardised units), averaged; agreement and total_variation against the reference's posterior-averaged class probabilities; coverage90, empirical coverage of the central 90% predictive interval; mean_error / cov_error, relative errors of the posterior mean and covariance of [w, b] against the exact posterior (conjugate problems).

Status: refused (an exception while building the model, guide, objective or sampler or in the first step: the message is the API's); failed (an exception later); diverged (DivergenceWarning or DivergenceError); warned (another run-time warning: the warnings column names them); below_quality (ran without a warning but missed the quality bar: the message says which score); ok. Quality bar: no worse than mean-field VI of the same model. The baseline (MeanFieldNormalGuide, ClosedFormKL_ELBO) is run with seeds {args.seeds} under every prior (the reference's NormalPrior, each other prior, a plain model's own); a combination is below quality when its test_ll (the mean over its seeds where a first seed's miss was rechecked with the further seeds: then the margin is that of a mean of m runs, sqrt(1/m + 1/n) for sqrt(1 + 1/n)) is below both the reference prior's baseline mean and its own prior's (where that baseline ran cleanly on two seeds) by more than max(t_{{{rm.QUALITY_LEVEL}, n-1}} * sd * sqrt(1 + 1/n), floor) (the one-sided {rm.QUALITY_LEVEL:.0%} prediction interval of one more baseline seed; floors {rm.MARGIN_FLOORS}), or, for the combinations whose target is the reference posterior (NormalPrior; the plain models), its w2 (regression) or total_variation (classification) exceeds the reference prior's baseline mean by that margin. What each prior does to the model (its baseline against the reference prior's) is in the _priors table, and the own_prior_quality column says whether a row met its own prior's bar alone: both reported, not judged. The quality column says whether a row met the bar whatever its status.

Counts over the combinations (first seed; {len(table.problem.unique())} problems): {c['combinations']} combination x problem cells, {c['ran']} ran, {c['refused']} refused; of those that ran, {c['ok']} ok, {c['warned']} warned, {c['diverged']} diverged, {c['failed']} failed, {c['below_quality']} below quality without a warning ({c['rechecked']} rechecked with further seeds after a first seed missed the bar; {c['ok_below_own_prior']} of the ok ones below their own prior's mean-field baseline alone, not judged). Time: {pd.to_numeric(table.seconds, errors='coerce').sum() / 60:.0f} min summed over the runs (this invocation: {elapsed / 60:.1f} min wall clock).

{provenance(argv)}"""
    if args.quick:
        text = "QUICK SMOKE CONFIGURATION (quick references, a few combinations, a tiny budget) - not a result.\n\n" + text
    return text


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=name_list, default=["all"], help=f"comma-separated, or all: {', '.join(rm.matrix_problems())}")
    parser.add_argument("--seeds", type=parse_seeds, default="0-2", help=f"seeds of the quality baseline (at least {rm.MIN_SEEDS} for a result); the first seeds every other combination")
    parser.add_argument("--steps", type=positive_int, default=None, help=f"gradient evaluations per combination (default {rm.Budget().steps})")
    parser.add_argument("--jobs", type=positive_int, default=1, help="problems run in parallel processes")
    parser.add_argument("--data-dir", type=existing_directory, default=data_dir_default(), help="data root (default: $PYROZOO_DATA_DIR, else the nearest shared/data)")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS_DIR, help=f"where the tables and the heat map are written (default: {DEFAULT_RESULTS_DIR})")
    parser.add_argument("--reference-dir", type=Path, default=None, help="where the reference posteriors are (default: <results-dir>/reference)")
    parser.add_argument("--quick", action="store_true", help="a smoke configuration (used by the test suite): quick references, two problems, a few combinations; files end in _quick")
    parser.add_argument("--no-progress", action="store_true", help="no line per run")
    args = parser.parse_args(argv)
    problems = rm.matrix_problems() if args.problems == ["all"] else args.problems
    if args.quick and args.problems == ["all"]:
        problems = QUICK_PROBLEMS
    unknown = [p for p in problems if p not in rm.matrix_problems()]
    if unknown:
        parser.error(f"unknown problem(s) {unknown}; choose from {', '.join(rm.matrix_problems())}")
    if len(args.seeds) < 2:
        parser.error(f"--seeds: the quality bar needs at least 2 seeds of the baseline ({rm.MIN_SEEDS} or more for a result)")
    budget = rm.QUICK_BUDGET if args.quick else rm.Budget()
    if args.steps is not None:
        budget = rm.Budget(**{**budget.__dict__, "steps": args.steps})
    suffix = "_quick" if args.quick else ""
    args.reference_dir = args.reference_dir or Path(args.results_dir) / "reference"
    args.runs_dir = Path(args.results_dir) / f"reference_matrix{suffix}"
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    for name in dict.fromkeys(rm.load_problem(p, args.data_dir).reference for p in problems):
        rm.reference_predictive(name, args.reference_dir, quick=args.quick)  # every reference there before the first run
    start = time.perf_counter()
    if args.jobs > 1 and len(problems) > 1:
        with ProcessPoolExecutor(max_workers=min(args.jobs, len(problems))) as pool:
            for name, n in pool.map(_run_one, problems, [args] * len(problems), [budget] * len(problems)):
                print(f"{name}: {n} runs", flush=True)
    else:
        for name in problems:
            print(f"{name}: {_run_one(name, args, budget)[1]} runs", flush=True)
    elapsed = time.perf_counter() - start
    table = rm.collect(args.runs_dir)
    stem = f"reference_matrix{suffix}"
    text = notes(args, budget, table, elapsed, ["tools/reference_matrix.py", *argv])
    # the page shows the matrix one combination per row; the CSV beside it holds every run
    page_notes = (
        f"Each cell: the status of the combination on the problem (first seed) and z, its test log-likelihood minus the "
        f"mean of the baseline it is judged by (its prior's) in quality margins (below -1: under the bar). Combinations refused on every problem are left out: "
        f"{stem}_refusals.md lists every refusal message. {stem}.csv holds every run (one row per problem x combination x "
        f"seed) with its message and all scores.\n\n" + text
    )
    save_table(rm.wide_table(table), stem, args.results_dir, title="Reference matrix: every prior x guide x objective / sampler, scored against the reference posteriors", notes=page_notes)
    atomic.write_csv(table, Path(args.results_dir) / f"{stem}.csv")
    save_table(rm.refusals(table), f"{stem}_refusals", args.results_dir, title="Reference matrix: the API's refusals (distinct messages)", notes=f"The distinct messages of the refused cells of {stem}.csv (first seed), each with the number of cells and problems it refused and one of its combinations.", allow_empty=True)
    save_table(
        rm.prior_effects(table), f"{stem}_priors", args.results_dir, title="Reference matrix: what each prior does to the model (mean-field VI under it against the reference prior)",
        notes="Not judged: another prior is another model. Per problem and prior, mean-field VI's test log-likelihood (mean and sd over its seeds) beside the reference prior's (NormalPrior, or a plain model's own), their difference and that difference in the reference baseline's quality margins. A combination under a prior is below quality when it misses both its prior's bar (from the row here) and the reference prior's.\n\n" + text,
        allow_empty=True,
    )
    save_table(rm.summary(table, args.reference_dir, args.quick), f"{stem}_summary", args.results_dir, title="Reference matrix: per problem", notes=text)
    save_figure(rm.plot_heatmap(table), stem, args.results_dir)
    c = rm.counts(table)
    print(
        f"{c['combinations']} cells: {c['ran']} ran, {c['refused']} refused; {c['ok']} ok, {c['warned']} warned, {c['diverged']} diverged, "
        f"{c['failed']} failed, {c['below_quality']} below quality ({elapsed / 60:.1f} min); tables in {args.results_dir}/{stem}*", flush=True,
    )
    return table


if __name__ == "__main__":
    run_main(main)
