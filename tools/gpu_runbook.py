"""Every full-length protocol on a CUDA device, in resumable legs (issue 23, item 3).

The legs (:data:`LEGS`) are the command lines of the existing examples with the settings of the
protocol their committed tables reduce (the papers' epochs, iterations, splits and seeds where
the CPU tables are shorter), ``--device cuda`` and results written to their own folder
(``docs/results/gpu/`` by default), so GPU results never mix with the CPU ones: the folder and
the ``device`` column of ``docs/results/MANIFEST.csv`` (which each example fills in as it writes,
:mod:`zoo_protocols.provenance`) say where a result was computed. Checkpoints and the runbook's state go
under ``runs/gpu/`` (not committed).

A machine may be held for a few minutes at a time, so a leg runs for at most ``--limit``
seconds (default 510, under nine minutes). The examples checkpoint (every epoch, or every run
of a sweep) and resume, so a leg that reaches the limit is interrupted (SIGINT, then SIGKILL
after ``--grace`` seconds), marked ``partial`` and continued by the next call; one that
exits 0 is ``done``. A partial leg that changed no file in the results or runs folder
made no progress (its smallest resumable unit outlasts the limit) and is marked ``stalled``:
``--next`` skips it, and it needs a longer ``--limit`` on a machine that allows one. The
state (``runs/gpu/runbook_state.json``, written atomically) records each leg's status,
attempts and seconds; carry ``runs/gpu`` to the next machine to resume there.

Left out, with the reason: ``reference_posteriors.py`` and ``reference_matrix.py`` (NUTS and
thousands of runs on models of a few hundred parameters: CPU-bound, built on CPU by their
own issue), the comparison notebooks (short matched budgets by design; rerun by
``scripts/execute_notebook.py``). The 5-split SGHMC-SA Boston summary is gone (superseded by the
20-split SG-MCMC table, dropped under issue 23).

    python tools/gpu_runbook.py --dry-run         # the plan; checks each leg's script and options; runs nothing
    python tools/gpu_runbook.py --next            # the next unfinished leg, for at most --limit seconds
    python tools/gpu_runbook.py --next --budget 3000   # legs one after another for up to 50 minutes
    python tools/gpu_runbook.py --leg 7           # leg 7 (the numbers --dry-run shows)
    python tools/gpu_runbook.py --status          # the state of every leg
    python tools/gpu_runbook.py --export out.tgz  # on the GPU machine: results, their manifest rows, the state
    python tools/gpu_runbook.py --import out.tgz  # back here: the same, merged in (scripts/gpu_legs.sh does both ends)

``--dry-run`` imports each example and calls its ``main`` with the leg's arguments until its
argument parser has parsed them (types, choices, ranges), then stops it: no data is read and
nothing trained. On a machine without CUDA, ``--device cuda`` is checked as ``cpu``; an input
that an earlier leg writes is checked with a stand-in file. Checks an example makes after
parsing (a data set's folder, method names) run when the leg runs.
"""

import argparse
import contextlib
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from pyrozoo import atomic
from zoo_protocols import provenance as prov
from zoo_protocols.cli import name_list, non_negative_int, positive_int, run_main

ROOT = Path(__file__).resolve().parents[1]
#: where GPU results go: beside the CPU ones, never over them
DEFAULT_RESULTS = Path("docs") / "results" / "gpu"
#: checkpoints, streamed samples and the runbook's state
DEFAULT_RUNS = Path("runs") / "gpu"
#: seconds a leg may run: under nine minutes, so a leg and its start-up fit a ten-minute slot
DEFAULT_LIMIT = 510
STATE_VERSION = 1
#: what --device takes (checked when the legs run, not here: a dry run on a CPU plans a GPU's work)
DEVICES = ("cuda", "cpu", *(f"cuda:{i}" for i in range(16)))
DONE, PARTIAL, STALLED, FAILED = "done", "partial", "stalled", "failed"


@dataclass(frozen=True)
class Leg:
    """One command of the plan. ``args`` may hold ``{results}``, ``{runs}`` and ``{device}``,
    replaced when the leg runs (by plain substitution, so JSON arguments keep their braces)."""

    name: str
    script: str  # relative to the repository root (or absolute)
    args: Tuple[str, ...]
    minutes: float  # a rough guess of the whole leg's GPU time, before any was measured
    why: str  # which committed table it reproduces at full length, and how that differs
    needs: Tuple[str, ...] = ()  # legs whose outputs this one reads
    inputs: Tuple[str, ...] = ()  # files of those outputs named in args (stand-ins in a dry run)
    resumable: bool = True  # False: a partial leg starts over
    common: bool = True  # takes the shared --device --results-dir --no-progress options

    def argv(self, results: Path, runs: Path, device: str, data_dir: Optional[Path] = None) -> List[str]:
        def expand(text: str) -> str:
            return text.replace("{results}", str(results)).replace("{runs}", str(runs)).replace("{device}", device)

        out = [expand(a) for a in self.args]
        if self.common:
            out += ["--device", device, "--results-dir", str(results), "--no-progress"]
        if data_dir is not None:
            out += ["--data-dir", str(data_dir)]
        return out

    def input_paths(self, results: Path, runs: Path, device: str) -> List[str]:
        return [a.replace("{results}", str(results)).replace("{runs}", str(runs)).replace("{device}", device) for a in self.inputs]


def _lenet(method: str, arch: str, minutes: float, why: str, extra: Optional[dict] = None, stem: Optional[str] = None, more: Sequence[str] = ()) -> Leg:
    stem = stem or f"compress_lenet_{method}_{arch}"
    args = ["--method", method, "--arch", arch, *more, "--out", f"{{results}}/{stem}_runs.csv", "--table-stem", stem, "--resume", "--checkpoint-dir", "{runs}/compress_lenet"]
    if extra:
        args += ["--extra", json.dumps(extra)]
    return Leg("lenet-" + stem[len("compress_lenet_"):].replace("_", "-"), "reproductions/compress_lenet.py", tuple(args), minutes, why)


#: Oh et al.'s LeNet-5 recipe (zoo_protocols/compress_rdp.py's docstring): 200 epochs, lr 1e-3, KL
#: warm-up over the first half, posteriors starting at sd 1e-4
_RDP_PAPER = {"warmup_fraction": 0.5, "init_scale": 1e-4}
_RDP_FULL = ["--epochs", "200", "--lr", "0.001"]
_UCI_SMALL = "bostonHousing,concrete,energy,wine-quality-red,yacht"
_UCI_LARGE = "kin8nm,naval-propulsion-plant,power-plant,protein-tertiary-structure"
#: Oh et al.'s UCI protocol: 400 epochs, minibatches of 5, lr 1e-3 (uci_rdp_comparison.md's notes)
_RDP_UCI = ["--method", "rdp", "--splits", "all", "--epochs", "400", "--batch-size", "5", "--lr", "0.001", "--resume"]
_CNN = ["--method", "adam,dropout,sghmc,sghmc-sa", "--epochs", "100", "--fgsm", "--fgsm-protocol", "posterior,authors", "--run-dir", "{runs}/classify_cnn"]
#: the LeNet runs by stem (less compress_lenet_): the LeNet-5 ones, 200 epochs each, named as the
#: CPU runs the claims ledger reads (compress_lenet_<method>_lenet5_e200)
_LENET_RUNS = ("sparse-vd_lenet300", "sparse-vd_lenet5_e200", "bc-gnj_lenet300", "bc-gnj_lenet5_e200", "bc-ghs_lenet5_e200", "rdp_lenet5_e200")

LEGS: List[Leg] = [
    # 15 min, not 5: on an H100 (gpu_checks.sh at 51de7e4) no split ended within 30 s, as on the CPU (34-51 s a split)
    Leg("uci-bbb", "reproductions/uci_regression.py", ("--method", "bbb", "--dataset", "bostonHousing", "--splits", "0-19", "--resume"), 15,
        "uci_bbb*: the README's demo (make demo), 20 splits of Boston"),
    Leg("uci-esbo", "reproductions/uci_esbo_table.py", ("--splits", "0-19"), 30,
        "uci_esbo_*: iwae/renyi/esbo/mfvi on the ESBO paper's five sets, 20 splits, 1000 full-batch steps (the script's defaults)"),
    Leg("uci-sgmcmc", "reproductions/uci_sgmcmc_table.py", ("--splits", "0-19"), 150,
        "uci_sgmcmc_*: Deng et al.'s UCI appendix table, learning rate by validation, 20 splits, 200 epochs (the script's defaults)"),
    Leg("uci-rdp-small", "reproductions/uci_regression.py", ("--dataset", _UCI_SMALL, *_RDP_UCI), 120,
        "uci_rdp*: Oh et al.'s schedule (400 epochs, batch 5, lr 1e-3) instead of the CPU table's ~1200 steps; KL warm-up stays the protocol's 10%"),
    Leg("uci-rdp-large", "reproductions/uci_regression.py", ("--dataset", _UCI_LARGE, *_RDP_UCI), 1500,
        "uci_rdp* on the four large sets at Oh et al.'s schedule; one run (hundreds of thousands of steps) may outlast a leg: uci_regression resumes whole runs only, so such a leg stalls until run with a longer --limit"),
    Leg("uci-rdp-summary", "reproductions/uci_regression.py", ("--dataset", "all", *_RDP_UCI), 1,
        "uci_rdp_summary over all nine sets (every run already done: it only summarises)", needs=("uci-rdp-small", "uci-rdp-large")),
    Leg("uci-rdp-table", "reproductions/uci_rdp_table.py", ("--runs", "{results}/uci_rdp.csv"), 1,
        "uci_rdp_comparison: the runs above beside the published numbers", needs=("uci-rdp-summary",)),
    Leg("bbb-mnist", "reproductions/bayes_by_backprop_mnist.py", ("--checkpoint", "{runs}/bayes_by_backprop_mnist/bbb.ckpt"), 15,
        "bayes_by_backprop_mnist*: the script's defaults (784-400-400-10, 50 epochs)"),
    Leg("local-reparam-variance", "reproductions/local_reparam_variance.py", ("--checkpoint", "{runs}/local_reparam_variance/lrv.ckpt"), 20,
        "local_reparam_variance: Kingma et al.'s 3 x 1000 network at epochs 10 and 100 (the CPU table: 500-500)"),
    _lenet("sparse-vd", "lenet300", 25, "compress_lenet_sparse-vd_lenet300: Molchanov et al.'s 200-epoch recipe"),
    _lenet("sparse-vd", "lenet5", 40, "compress_lenet_sparse-vd_lenet5_e200: 200 epochs", stem="compress_lenet_sparse-vd_lenet5_e200"),
    _lenet("bc-gnj", "lenet300", 25, "compress_lenet_bc-gnj_lenet300: 200 epochs (the CPU table: 50)"),
    _lenet("bc-gnj", "lenet5", 40, "compress_lenet_bc-gnj_lenet5_e200: 200 epochs", stem="compress_lenet_bc-gnj_lenet5_e200"),
    _lenet("bc-ghs", "lenet5", 40, "compress_lenet_bc-ghs_lenet5_e200: 200 epochs", stem="compress_lenet_bc-ghs_lenet5_e200"),
    _lenet("rdp", "lenet5", 40, "compress_lenet_rdp_lenet5_e200: Oh et al.'s recipe (200 epochs, lr 1e-3, warm-up over half, initial sd 1e-4) and the pruning statistics",
           extra={**_RDP_PAPER, "statistics_out": "{results}/rdp_lenet5_e200_pruning_statistics.json"}, stem="compress_lenet_rdp_lenet5_e200", more=_RDP_FULL),
    _lenet("rdp", "lenet5", 3, "compress_lenet_rdp_lenet5_threshold0: the same trained network (its checkpoint) pruned at threshold 0",
           extra={**_RDP_PAPER, "thresholds": 0, "statistics_out": "{results}/rdp_lenet5_threshold0_pruning_statistics.json"},
           stem="compress_lenet_rdp_lenet5_threshold0", more=_RDP_FULL),
    Leg("rdp-histogram", "reproductions/rdp_pruning_histogram.py",
        ("--statistics", "{results}/rdp_lenet5_e200_pruning_statistics.json", "--stem", "rdp_lenet5_e200_pruning_histogram"), 1,
        "rdp_lenet5_e200_pruning_histogram: Oh et al.'s Fig. 7 from the 200-epoch run", needs=("lenet-rdp-lenet5-e200",),
        inputs=("{results}/rdp_lenet5_e200_pruning_statistics.json",)),
    Leg("rdp-histogram-threshold0", "reproductions/rdp_pruning_histogram.py",
        ("--statistics", "{results}/rdp_lenet5_threshold0_pruning_statistics.json", "--stem", "rdp_lenet5_threshold0_pruning_histogram"), 1,
        "rdp_lenet5_threshold0_pruning_histogram", needs=("lenet-rdp-lenet5-threshold0",), inputs=("{results}/rdp_lenet5_threshold0_pruning_statistics.json",)),
    Leg("lenet-summary", "reproductions/compress_lenet.py",
        ("--summarize", *(f"{{results}}/compress_lenet_{r}_runs.csv" for r in _LENET_RUNS), "--table-stem", "compress_lenet"), 1,
        "compress_lenet: the summary of the runs above beside the published rows",
        needs=tuple(f"lenet-{r.replace('_', '-')}" for r in _LENET_RUNS), inputs=tuple(f"{{results}}/compress_lenet_{r}_runs.csv" for r in _LENET_RUNS)),
    Leg("variance-networks", "reproductions/variance_networks.py", ("--checkpoint-dir", "{runs}/variance_networks"), 60,
        "variance_networks: the authors' LeNet-5 with batch normalisation, 200 epochs per parameterisation (the CPU table: LeNet-300-100, 15 epochs)"),
    Leg("fgsm-robustness", "reproductions/fgsm_robustness.py", ("--epochs", "200", "--checkpoint-dir", "{runs}/fgsm_robustness"), 40,
        "fgsm_robustness: every model for 200 epochs, Sparse VD's recipe length (the CPU table: 15)"),
    # 4 min, measured: cnn-mnist-seed1 took 178 s on an H100 (four methods, 100 epochs, both FGSM
    # protocols; 35-40 s a method), against 2.4 h a method on the 2-core CPU
    Leg("cnn-mnist", "reproductions/classify_cnn.py", ("--dataset", "mnist", *_CNN), 4,
        "classify_cnn*(_fgsm) on MNIST: Deng et al.'s CNN, all four methods, 100 epochs, both FGSM protocols (the CPU tables: 15 and 100 epochs, some methods)"),
    Leg("cnn-fashion", "reproductions/classify_cnn.py", ("--dataset", "fashion", *_CNN), 4,
        "classify_cnn*(_fgsm) on Fashion-MNIST, as on MNIST"),
    # Table 2's gaps (0.08-0.4 pts) are about one binomial standard error of a single run:
    # its orderings need seeds, appended to the same tables (the claims ledger reads their mean)
    *[Leg(f"cnn-{dataset}-seed{seed}", "reproductions/classify_cnn.py", ("--dataset", dataset, "--seed", str(seed), *_CNN), 4,
          f"classify_cnn*(_fgsm) on {name}, seed {seed}: the seeds that give Table 2's orderings an interval (the CPU tables: seed 0 only)")
      for seed in (1, 2) for dataset, name in (("mnist", "MNIST"), ("fashion", "Fashion-MNIST"))],
    Leg("sparse-regression-paper", "reproductions/sparse_regression.py", ("--iterations", "500000", "--seeds", "0-19"), 900,
        "sparse_regression_500k*: Table 1's whole grid (SGLD-SA, SGLD-EM, SGLD; v0 0.01, 0.1; sigma 2, 1) at 500,000 iterations over 20 data sets (the committed 500k table: one cell)"),
    Leg("sparse-regression-fixed-delta", "reproductions/sparse_regression.py", ("--fix-delta", "--iterations", "500000"), 250,
        "sparse_regression_fixed_delta_*: at the paper's 500,000 iterations (the CPU table: 50,000)"),
    Leg("sparse-regression-authors-script", "reproductions/sparse_regression.py", ("--recipe", "authors-script", "--iterations", "500000"), 250,
        "sparse_regression_authors_script_*: at 500,000 iterations (the CPU table: 50,000)"),
    Leg("dsivi-toy", "reproductions/dsivi_toy.py", ("--seeds", "0-2"), 10,
        "dsivi_toy*: the script's defaults over three seeds", resumable=False),
    Leg("dsivi-hierarchical-bnn", "reproductions/dsivi_hierarchical_bnn.py", ("--dataset", "concrete", "--checkpoint-dir", "{runs}/dsivi_hierarchical_bnn"), 40,
        "dsivi_hierarchical_bnn_concrete*: the script's defaults (500 epochs, splits 0-4)"),
    Leg("vae-dsivi-prior", "reproductions/vae_dsivi_prior.py",
        ("--priors", "normal,vamp:500,dsivi:500,dsivi:5000", "--epochs", "2000", "--warmup-epochs", "100", "--ll-samples", "5000", "--checkpoint-dir", "{runs}/vae_dsivi_prior"), 1200,
        "vae_dsivi_prior*: VampPrior's protocol length (2000 epochs, 100 warm-up, 5000 importance samples on the full test set; the example has no early stopping) against the CPU table's 30 epochs"),
    *[
        Leg(f"resnet-s{sparsity}-{method}", "reproductions/resnet_compression.py",
            ("--method", method, "--sparsity", str(sparsity), "--run-dir", f"{{runs}}/resnet_compression/s{sparsity}"), 180 if first else 90,
            f"resnet_compression (no committed table yet): Deng et al.'s Table 3 cell {method}, S = {sparsity}, 1000 fine-tuning epochs"
            + (" after 1000 pretraining epochs (the CIFAR-10 python batches under --data-dir; one run folder per sparsity, since the example "
               "names its fine-tuning checkpoints by method only, so each sparsity pretrains again)" if first else f" (reusing the pretraining of resnet-s{sparsity}-a-sghmc)"),
            needs=() if first else (f"resnet-s{sparsity}-a-sghmc",))
        for sparsity in (0.9, 0.7, 0.5, 0.3) for first, method in zip((True, False, False, False), ("a-sghmc", "a-sghmc-em", "sghmc-sa", "a-sghmc-sa"))
    ],
]

#: examples (or folders of them, ending in /) with committed results that no leg runs, and why
#: (the test holds the plan to this list)
NOT_IN_THE_RUNBOOK = {
    "studies/": "issue 23's controlled experiments: sized for two CPU cores by design",
    "tools/claims_ledger.py": "reads the committed results into the claims ledger; trains nothing",
    "tools/reference_posteriors.py": "NUTS on models of a few hundred parameters: CPU-bound, built on CPU under its own issue",
    "tools/reference_matrix.py": "thousands of short runs on tiny models: CPU-bound, built on CPU under its own issue",
    "notebooks/compare_objectives.ipynb": "matched short budgets by design; rerun by scripts/execute_notebook.py",
    "notebooks/compare_objectives_baselines.ipynb": "matched short budgets by design; rerun by scripts/execute_notebook.py",
}


# -- the state -------------------------------------------------------------------------------

def read_state(path: Path) -> dict:
    """The state file's contents (``{"legs": {}}`` when there is none).

    :raises ValueError: naming the file when it is not a state this script wrote."""
    return parse_state(path.read_text(), path) if path.exists() else {"version": STATE_VERSION, "legs": {}}


def parse_state(text: str, source) -> dict:
    """The state in JSON ``text`` (:func:`read_state`'s checks; errors name ``source``)."""
    try:
        state = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{source} is not a runbook state ({e}); move it aside to start the plan over") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION or not isinstance(state.get("legs"), dict):
        raise ValueError(f"{source} is not a version-{STATE_VERSION} runbook state; move it aside to start the plan over")
    return state


def write_state(path: Path, state: dict) -> None:
    atomic.write_json(path, state, indent=1, sort_keys=True)


def status_of(state: dict, leg: Leg) -> str:
    return state["legs"].get(leg.name, {}).get("status", "")


def next_leg(legs: Sequence[Leg], state: dict) -> Optional[Leg]:
    """The first leg neither done, stalled nor failed whose ``needs`` are done (``None``: none left)."""
    for leg in legs:
        if status_of(state, leg) in (DONE, STALLED, FAILED):
            continue
        if all(state["legs"].get(n, {}).get("status") == DONE for n in leg.needs):
            return leg
    return None


def by_name(legs: Sequence[Leg], key) -> Leg:
    """A leg by its name or its 1-based number in the plan."""
    if isinstance(key, int) or str(key).isdigit():
        if 1 <= int(key) <= len(legs):
            return legs[int(key) - 1]
        raise ValueError(f"no leg {key}: the plan has legs 1 to {len(legs)} (--dry-run lists them)")
    for leg in legs:
        if leg.name == key:
            return leg
    raise ValueError(f"no leg {key!r} (--dry-run lists them)")


# -- running a leg ---------------------------------------------------------------------------

def _snapshot(folders: Sequence[Path]) -> Dict[str, Tuple[int, int]]:
    """(modification time, size) of every file under ``folders``: what a leg's progress changes."""
    seen = {}
    for folder in folders:
        if folder.is_dir():
            for path in folder.rglob("*"):
                if path.is_file():
                    stat = path.stat()
                    seen[str(path)] = (stat.st_mtime_ns, stat.st_size)
    return seen


def run_leg(leg: Leg, argv: Sequence[str], *, limit: float, grace: float, watch: Sequence[Path]) -> Tuple[str, float, Optional[int]]:
    """Runs the leg's script with ``argv`` in its own process group for at most ``limit``
    seconds; returns (status, seconds, exit status). At the limit the group gets SIGINT (the
    examples then checkpoint), and SIGKILL if it is still there ``grace`` seconds later."""
    script = Path(leg.script) if Path(leg.script).is_absolute() else ROOT / leg.script
    before = _snapshot(watch)
    started = time.monotonic()
    # a runbook started in the background (nohup ... &) ignores SIGINT, and its legs would inherit
    # that: the limit's SIGINT must reach them as a KeyboardInterrupt, so that they checkpoint
    process = subprocess.Popen([sys.executable, str(script), *argv], cwd=ROOT, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        code = process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        seconds = time.monotonic() - started
        # an interrupted leg that left every file as it was made no progress: rerunning it
        # under the same limit would only start the same unit of work again
        return (PARTIAL if _snapshot(watch) != before else STALLED), seconds, None
    return (DONE if code == 0 else FAILED), time.monotonic() - started, code


def attempt(leg: Leg, number: int, state: dict, state_path: Path, options) -> str:
    """Runs one attempt of ``leg`` and records it in the state; returns its status."""
    results, runs = options.results_dir, options.run_dir
    argv = leg.argv(results, runs, options.device, options.data_dir)
    record = state["legs"].setdefault(leg.name, {"attempts": 0, "seconds": 0.0})
    if record.get("status") == PARTIAL and not leg.resumable:
        print(f"{leg.name}: not resumable; starting it over", flush=True)
    print(f"== leg {number} {leg.name}: python {leg.script} {' '.join(argv)}  (limit {options.limit:.0f} s)", flush=True)
    status, seconds, code = run_leg(leg, argv, limit=options.limit, grace=options.grace, watch=[results, runs])
    record.update(status=status, attempts=record["attempts"] + 1, seconds=round(record["seconds"] + seconds, 1), last=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  exit_status=code, command=f"python {leg.script} {' '.join(argv)}")
    write_state(state_path, state)
    print(f"== {leg.name}: {status} after {seconds:.0f} s ({record['attempts']} attempt(s), {record['seconds']:.0f} s in all)", flush=True)
    return status


# -- the trip back from a GPU machine ---------------------------------------------------------

#: a bundle's members: the results folder's files, their manifest rows, the state
BUNDLE_RESULTS, BUNDLE_ROWS, BUNDLE_STATE = "results", "manifest_rows.csv", "runbook_state.json"


def _under(manifest: Path, results: Path, name: str) -> bool:
    """Whether the manifest's ``name`` (a path relative to the manifest's folder) is under ``results``."""
    return (manifest.parent / name).resolve().is_relative_to(results.resolve())


def export_bundle(path: Path, results: Path, state_path: Path, manifest: Path) -> List[str]:
    """Packs what the legs produced into one gzip tar at ``path`` for the trip back from a
    machine that is given back (a few files come back from it, and its checkpoints are too large
    to): every file under ``results``, those files' manifest rows and the state. Returns the
    names packed."""
    import tarfile

    names = []
    with atomic.atomic_path(path) as tmp, tarfile.open(tmp, "w:gz") as bundle:
        if results.is_dir():
            for file in sorted(p for p in results.rglob("*") if p.is_file() and not p.name.startswith(".")):
                name = f"{BUNDLE_RESULTS}/{file.relative_to(results).as_posix()}"
                bundle.add(file, arcname=name)
                names.append(name)
        rows = {name: row for name, row in prov.read_manifest(manifest).items() if _under(manifest, results, name)}
        for name, text in ((BUNDLE_ROWS, prov.manifest_text(rows)), (BUNDLE_STATE, json.dumps(read_state(state_path), indent=1, sort_keys=True))):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            bundle.addfile(info, io.BytesIO(data))
            names.append(name)
    return names


def _bundle_members(bundle) -> Dict[str, bytes]:
    """A bundle's files by name. A bundle is data from another machine: a member that is not a
    regular file, or whose name leaves the bundle's three places, is refused, and nothing is
    written."""
    from pathlib import PurePosixPath

    files = {}
    for member in bundle.getmembers():
        name = PurePosixPath(member.name)
        inside = not name.is_absolute() and ".." not in name.parts and (
            member.name in (BUNDLE_ROWS, BUNDLE_STATE) or (len(name.parts) > 1 and name.parts[0] == BUNDLE_RESULTS))
        if not member.isfile() or not inside:
            raise ValueError(f"the bundle's member {member.name!r} is not a file under {BUNDLE_RESULTS}/ nor {BUNDLE_ROWS} or {BUNDLE_STATE}; "
                             "it was not written by gpu_runbook.py --export: nothing was imported")
        files[member.name] = bundle.extractfile(member).read()
    return files


def merge_states(home: dict, away: dict) -> dict:
    """``home`` with each leg's record replaced by ``away``'s where that one is later (or new)."""
    def when(record):
        return time.strptime(record["last"], "%Y-%m-%dT%H:%M:%S%z") if record.get("last") else time.gmtime(0)

    merged = {"version": STATE_VERSION, "legs": dict(home["legs"])}
    for name, record in away["legs"].items():
        if name not in merged["legs"] or when(record) >= when(merged["legs"][name]):
            merged["legs"][name] = record
    return merged


def import_bundle(path: Path, results: Path, state_path: Path, manifest: Path) -> List[str]:
    """Unpacks a bundle of :func:`export_bundle` here: its files into ``results``, their rows
    into the manifest, its legs' records into the state (the later record of a leg wins).
    Returns the results files written."""
    import tarfile

    try:
        with tarfile.open(path, "r:gz") as bundle:
            files = _bundle_members(bundle)
    except (tarfile.TarError, OSError) as e:
        raise ValueError(f"{path} is not a bundle of gpu_runbook.py --export ({e})") from None
    missing = [n for n in (BUNDLE_ROWS, BUNDLE_STATE) if n not in files]
    if missing:
        raise ValueError(f"{path} lacks {' and '.join(missing)}: it was not written by gpu_runbook.py --export")
    away_state = parse_state(files.pop(BUNDLE_STATE).decode(), f"{path}: {BUNDLE_STATE}")
    rows = prov.parse_manifest(files.pop(BUNDLE_ROWS).decode(), f"{path}: {BUNDLE_ROWS}")
    strays = [name for name in rows if not _under(manifest, results, name)]
    if strays:
        raise ValueError(f"{path}: manifest rows of files outside {results}: {strays}; nothing was imported")
    written = []
    for name, data in files.items():
        target = results / name[len(BUNDLE_RESULTS) + 1:]
        with atomic.atomic_path(target) as tmp:
            tmp.write_bytes(data)
        written.append(str(target))
    prov.upsert(manifest, rows.values())
    write_state(state_path, merge_states(read_state(state_path), away_state))
    return written


# -- the dry run -----------------------------------------------------------------------------

class _Parsed(Exception):
    """Raised by the stand-in ``parse_args`` once the real one has accepted the arguments."""


#: each example's module namespace, loaded once per process (several legs share a script)
_loaded: Dict[str, dict] = {}


def check_options(script: Path, argv: Sequence[str]) -> Optional[str]:
    """``None`` when ``argv`` parses with ``script``'s argument parser, else the parser's message.
    The script's ``main(argv)`` is called with :meth:`argparse.ArgumentParser.parse_args`
    replaced by one that parses and then stops ``main``: nothing after the parsing runs."""
    if str(script) not in _loaded:
        _loaded[str(script)] = runpy.run_path(str(script), run_name="gpu_runbook_check")
    main = _loaded[str(script)].get("main")
    if main is None:
        return f"{script.name} has no main(argv)"
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    errors = io.StringIO()
    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            main(list(argv))
    except _Parsed:
        return None
    except SystemExit as e:
        lines = errors.getvalue().strip().splitlines()
        return lines[-1] if lines else f"the parser exited with status {e.code}"
    finally:
        argparse.ArgumentParser.parse_args = original
    return "main() returned before parsing its arguments"


def dry_run(legs: Sequence[Leg], state: dict, options) -> int:
    """Prints the plan in the order ``--next`` would run it and checks every leg; returns the
    number of legs with a problem."""
    import torch

    device = options.device
    checked_device = device if device == "cpu" or torch.cuda.is_available() else "cpu"
    if checked_device != device:
        print(f"(no CUDA here: --device {device} is checked as cpu)")
    problems = 0
    order, simulated = [], {"version": STATE_VERSION, "legs": {k: dict(v) for k, v in state["legs"].items()}}
    while True:
        leg = next_leg(legs, simulated)
        if leg is None:
            break
        order.append(leg)
        simulated["legs"].setdefault(leg.name, {})["status"] = DONE
    position = {leg.name: i + 1 for i, leg in enumerate(order)}
    total = sum(leg.minutes for leg in legs if status_of(state, leg) != DONE)
    print(f"{len(legs)} legs; results in {options.results_dir}, checkpoints and state in {options.run_dir}; limit {options.limit:.0f} s a leg")
    print(f"rough GPU time of the unfinished legs: ~{total / 60:.0f} h (guesses until measured; the state records the seconds each leg took)\n")
    with tempfile.TemporaryDirectory() as scratch:
        for number, leg in enumerate(legs, start=1):
            record = state["legs"].get(leg.name, {})
            status = record.get("status", "not started")
            when = f"order {position[leg.name]}" if leg.name in position else ("finished" if status == DONE else f"not scheduled ({status})")
            measured = f", {record['seconds']:.0f} s measured over {record['attempts']} attempt(s)" if record.get("attempts") else ""
            print(f"{number:3d}. {leg.name} [{status}; {when}; ~{leg.minutes:g} min guessed{measured}]{'' if leg.resumable else ' NOT RESUMABLE'}")
            print(f"     {leg.why}")
            argv = leg.argv(options.results_dir, options.run_dir, device, options.data_dir)
            print(f"     python {leg.script} {' '.join(argv)}")
            problem = None
            script = Path(leg.script) if Path(leg.script).is_absolute() else ROOT / leg.script
            unknown = [n for n in leg.needs if n not in {x.name for x in legs}]
            if not script.is_file():
                problem = f"no script {leg.script}"
            elif unknown:
                problem = f"needs unknown legs {unknown}"
            else:
                check = leg.argv(options.results_dir, options.run_dir, checked_device, options.data_dir)
                for i, path in enumerate(leg.input_paths(options.results_dir, options.run_dir, device)):
                    if not Path(path).exists():  # written by a leg it needs: check with a stand-in
                        stand_in = Path(scratch) / f"input{i}{Path(path).suffix}"
                        atomic.write_text(stand_in, "")
                        check = [str(stand_in) if a == path else a for a in check]
                problem = check_options(script, check)
            if problem:
                problems += 1
                print(f"     PROBLEM: {problem}")
    print(f"\n{problems} leg(s) with a problem" if problems else "\nevery leg's script exists and its arguments parse")
    return problems


def print_status(legs: Sequence[Leg], state: dict) -> None:
    for number, leg in enumerate(legs, start=1):
        record = state["legs"].get(leg.name, {})
        print(f"{number:3d}. {leg.name:40s} {record.get('status', 'not started'):12s} {record.get('attempts', 0):3d} attempt(s) {record.get('seconds', 0):8.0f} s")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--dry-run", action="store_true", help="print the plan and check every leg; run nothing")
    action.add_argument("--next", action="store_true", help="run the next unfinished leg")
    action.add_argument("--leg", type=positive_int, help="run leg N (the numbers --dry-run shows), whatever its state")
    action.add_argument("--status", action="store_true", help="print each leg's state")
    action.add_argument("--export", type=Path, metavar="FILE", help="pack the results folder, its manifest rows and the state into FILE (a gzip tar) for the trip back")
    action.add_argument("--import", dest="import_", type=Path, metavar="FILE", help="unpack a bundle of --export here: results, manifest rows, state")
    parser.add_argument("--device", default="cuda", choices=DEVICES, help="the device every leg runs on (default cuda; cpu for a trial)")
    parser.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS, help=f"where the legs write results (default {DEFAULT_RESULTS})")
    parser.add_argument("--run-dir", type=Path, default=DEFAULT_RUNS, help=f"checkpoints, samples and the state (default {DEFAULT_RUNS})")
    parser.add_argument("--state", type=Path, default=None, help="the state file (default <run-dir>/runbook_state.json)")
    parser.add_argument("--data-dir", type=Path, default=None, help="passed to every leg (default: each example's own)")
    parser.add_argument("--limit", type=positive_int, default=DEFAULT_LIMIT, help=f"seconds a leg may run (default {DEFAULT_LIMIT})")
    parser.add_argument("--grace", type=non_negative_int, default=60, help="seconds between SIGINT and SIGKILL at the limit (default 60)")
    parser.add_argument("--budget", type=positive_int, default=None, help="with --next: run legs one after another while this many seconds last")
    parser.add_argument("--only", type=name_list, default=None, metavar="LEGS", help="with --next: only these legs, by name or number, comma-separated (in the plan's order)")
    parser.add_argument("--manifest", type=Path, default=None, help="the results manifest (default docs/results/MANIFEST.csv)")
    args = parser.parse_args(argv)
    if args.budget is not None and not args.next:
        parser.error("--budget goes with --next")
    if args.only is not None and not args.next:
        parser.error("--only goes with --next")
    args.state = args.state or args.run_dir / "runbook_state.json"
    args.manifest = args.manifest or prov.manifest_path(ROOT)
    if args.import_ is not None and not args.import_.is_file():
        parser.error(f"--import: no file {args.import_}")
    return args


def main(argv=None, legs: Optional[Sequence[Leg]] = None):
    args = parse_args(argv)
    legs = list(LEGS if legs is None else legs)
    names = [leg.name for leg in legs]
    if len(set(names)) != len(names):
        raise ValueError(f"leg names must be unique: {sorted(n for n in set(names) if names.count(n) > 1)}")
    state = read_state(args.state)
    if args.dry_run:
        return 1 if dry_run(legs, state, args) else 0
    if args.status:
        print_status(legs, state)
        return 0
    if args.export:
        names = export_bundle(args.export, args.results_dir, args.state, args.manifest)
        print(f"{args.export}: {len(names) - 2} results file(s), their manifest rows and the state")
        return 0
    if args.import_:
        written = import_bundle(args.import_, args.results_dir, args.state, args.manifest)
        print(f"{args.import_}: {len(written)} results file(s) into {args.results_dir}, their rows into {args.manifest}, the legs' records into {args.state}")
        print_status(legs, read_state(args.state))
        return 0
    if args.leg:
        leg = by_name(legs, args.leg)
        return 0 if attempt(leg, legs.index(leg) + 1, state, args.state, args) in (DONE, PARTIAL) else 1
    candidates = legs
    if args.only is not None:
        chosen = {by_name(legs, key).name for key in args.only}
        candidates = [leg for leg in legs if leg.name in chosen]
    deadline = time.monotonic() + (args.budget or 0)
    while True:
        leg = next_leg(candidates, state)
        if leg is None:
            left = [f"{leg.name} ({status_of(state, leg)})" for leg in candidates if status_of(state, leg) != DONE]
            print("every leg is done" if not left else "no leg can run next; not done: " + ", ".join(left))
            return 0
        status = attempt(leg, legs.index(leg) + 1, state, args.state, args)
        remaining = deadline - time.monotonic()
        # another leg only while it can have its whole limit (the budget is the machine's time)
        if status == FAILED or args.budget is None or remaining < args.limit + args.grace:
            return 1 if status == FAILED else 0


if __name__ == "__main__":
    run_main(main)
