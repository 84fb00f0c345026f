"""Compressing LeNet-300-100 / LeNet-5-Caffe on MNIST with the zoo's sparsifying methods.

For every (method, architecture, seed): train, prune, export the compressed network (units
removed, see ``pyrozoo.compression``), and evaluate *that* network on the MNIST test set.
Writes one CSV row per run to ``--out`` with the columns

    method, arch, dataset, seed, test_error, params_total, params_kept, compression_ratio,
    flops, pruned_architecture

(``test_error`` in percent; parameters are weights, FLOPs are multiply-accumulates of the
kept weights per example — the convention of ``pyrozoo/compression/counting.py``), and
prints and saves (``<results-dir>/<table stem>.{csv,md}``) a table of these rows beside the
published ones, which are labelled as published.

Examples::

    python reproductions/compress_lenet.py --method sparse-vd --arch lenet300 --out results.csv
    python reproductions/compress_lenet.py --method bc-gnj,bc-ghs --arch lenet5 --epochs 30
    python reproductions/compress_lenet.py --summarize a.csv b.csv --table-stem compress_lenet
    python reproductions/compress_lenet.py --quick          # smoke run used by the tests
    python reproductions/compress_lenet.py --method sparse-vd --arch lenet300 --data digits.npz

``--data`` takes a user's images instead of MNIST (an ``.npz`` with ``x``, ``y``, optionally
``x_test``, ``y_test``): LeNet-300-100 reads them flattened whatever their shape, with an output
per class; LeNet-5-Caffe is built for MNIST's 1 x 28 x 28 and stops before any work on another
shape. The files are named after the data set (``compress_lenet_<name>_runs.csv``, ...), and
its table has no published rows.

Methods register in ``zoo_protocols/compress_*.py`` (``--list-methods``); a module may
define ``PUBLISHED``, a list of dicts with ``method, arch, test_error, compression_ratio`` and
optional ``per_layer_sparsity, pruned_architecture, bits, flops, source``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

from pyrozoo import atomic
from pyrozoo.data import load_mnist
from pyrozoo.reporting import save_table, to_markdown
from pyrozoo.utils import set_seed
from zoo_protocols import read_runs
from zoo_protocols.cli import (
    add_common_arguments, add_image_data_arguments, device_from_args, existing_file, file_digest, image_data, image_data_note, name_list, parse_seeds,
    positive_float, positive_int, run_main, settings_digest,
)
from zoo_protocols.config import RunConfig
from zoo_protocols.lenet import ARCHITECTURES, CSV_COLUMNS, available_methods
from zoo_protocols.lenet_recipes import check_network_input

TABLE_COLUMNS = ["method", "arch", "source", "test_error", "compression_ratio", "params_kept", "flops", "pruned_architecture", "per_layer_sparsity", "bits", "compression_with_bits", "epochs"]


#: ``--extra`` keys that only change how a trained model is pruned or evaluated: they do not
#: select a different training checkpoint
EVALUATION_SETTINGS = ("thresholds", "min_gap", "statistics_out", "predictive_samples")
DEFAULT_CHECKPOINT_DIR = Path("runs") / "compress_lenet"
#: what every run row has a value in (the others may be blank, e.g. FLOPs a method does not count)
RUN_REQUIRED = ["method", "arch", "dataset", "seed", "test_error", "params_total", "params_kept", "compression_ratio"]
#: what a per-run CSV must hold for the table
SUMMARY_COLUMNS = ["method", "arch", "seed", "test_error"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", type=name_list, default="sparse-vd", help="method name(s), comma-separated (see --list-methods)")
    parser.add_argument("--arch", type=name_list, default="lenet300", help=f"architecture(s), comma-separated: {', '.join(ARCHITECTURES)}")
    parser.add_argument("--seeds", type=parse_seeds, default=None, help="seeds, e.g. 0-2 or 0,3 (default: --seed)")
    parser.add_argument("--epochs", type=positive_int, default=None, help="training epochs (default: the method's own, 200 for the papers' recipes)")
    parser.add_argument("--batch-size", type=positive_int, default=None)
    parser.add_argument("--lr", type=positive_float, default=None)
    parser.add_argument("--extra", default="{}", help="JSON of method-specific settings, e.g. '{\"thresholds\": [-3, -3, -3, -3]}'")
    parser.add_argument("--out", type=Path, default=None, help="CSV of one row per run (default: <results-dir>/compress_lenet_runs.csv)")
    parser.add_argument("--table-stem", default=None, help="stem of the saved table (default: compress_lenet_<methods>_<archs>)")
    parser.add_argument("--notes", default=None, help="text appended to the saved table (e.g. the settings and reductions)")
    parser.add_argument("--summarize", type=existing_file, nargs="+", default=None, help="only build the table from these run CSVs")
    parser.add_argument("--resume", action="store_true", help="keep the runs already in --out and skip them (an interrupted sweep continues)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help=f"per-epoch training checkpoints, one per method, architecture, seed and settings, resumed when present "
                             f"(default {DEFAULT_CHECKPOINT_DIR}, none with --quick; a 'checkpoint' in --extra takes precedence)")
    parser.add_argument("--list-methods", action="store_true")
    add_common_arguments(parser)
    add_image_data_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.extra = json.loads(args.extra)
    except json.JSONDecodeError as e:
        parser.error(f"argument --extra: not valid JSON ({e})")
    if not isinstance(args.extra, dict):
        parser.error(f"argument --extra: must be a JSON object of settings, got {type(args.extra).__name__}")
    bad = [a for a in args.arch if a not in ARCHITECTURES]
    if bad:
        parser.error(f"argument --arch: unknown architecture(s) {bad}; choose from {', '.join(ARCHITECTURES)}")
    return args


def published_rows() -> pd.DataFrame:
    """``PUBLISHED`` of every loaded ``zoo_protocols.compress_*`` module, labelled as published."""
    rows = []
    for name, module in sorted(sys.modules.items()):
        if name.startswith("zoo_protocols.compress_"):
            rows.extend(getattr(module, "PUBLISHED", []))
    table = pd.DataFrame(rows)
    if len(table):
        table["source"] = "published: " + table.get("source", pd.Series([""] * len(table))).fillna("")
    return table


def build_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Our runs (``source = "measured (this repository)"``) beside the published rows for the
    same (method, architecture) pairs on MNIST (a user's data set has none)."""
    ours = runs.copy()
    ours["source"] = "measured (this repository)"
    published = published_rows()
    if len(published):
        on_mnist = runs if "dataset" not in runs else runs[runs["dataset"].fillna("mnist") == "mnist"]
        keys = set(zip(on_mnist["method"], on_mnist["arch"]))
        published = published[[(m, a) in keys for m, a in zip(published["method"], published["arch"])]]
    table = pd.concat([ours, published], ignore_index=True, sort=False)
    for column in TABLE_COLUMNS:
        if column not in table:
            table[column] = float("nan")
    table = table[TABLE_COLUMNS]
    order = {key: i for i, key in enumerate(dict.fromkeys(zip(runs["method"], runs["arch"])))}
    table["_order"] = [order.get((m, a), len(order)) for m, a in zip(table["method"], table["arch"])]
    return table.sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)


def main(argv=None):
    args = parse_args(argv)
    methods = available_methods()
    if args.list_methods:
        for name, m in sorted(methods.items()):
            print(f"{name:16s} {m.description}")
        return None
    if args.summarize:
        runs = pd.concat([read_runs(p, SUMMARY_COLUMNS, numeric=["seed", "test_error"], missing_ok=False) for p in args.summarize], ignore_index=True)
        if runs.empty:
            raise ValueError(f"no runs in {', '.join(map(str, args.summarize))}: nothing to summarize")
        return _report(runs, args, args.table_stem or "compress_lenet")
    names, archs, extra = args.method, args.arch, args.extra
    for name in names:
        if name not in methods:
            sys.exit(f"unknown method {name!r}; available: {', '.join(sorted(methods))}")
    seeds = args.seeds or [args.seed]
    # a user's images, read and checked before any work
    own = image_data(args, bundled=("mnist",))
    if own is not None:
        for arch in archs:
            check_network_input(own, arch)
    prefix = "compress_lenet" + (f"_{own.dataset}" if own is not None else "")
    out = args.out or (args.results_dir / f"{prefix}_runs.csv")
    details_path = out.with_name(out.stem + "_details.csv")
    # the finished runs (skipped with --resume), checked before any training
    rows = read_runs(details_path, CSV_COLUMNS, required=RUN_REQUIRED, numeric=["seed", "test_error", "params_total", "params_kept", "compression_ratio"]).to_dict("records") if args.resume else []
    checkpoints = args.checkpoint_dir if args.checkpoint_dir is not None else (None if args.quick else DEFAULT_CHECKPOINT_DIR)
    device = device_from_args(args)
    if own is not None:
        train, test = (own.x_train, own.y_train), (own.x_test, own.y_test)
    else:
        train = load_mnist("mnist", train=True, data_dir=args.data_dir)
        test = load_mnist("mnist", train=False, data_dir=args.data_dir)
    if args.quick:
        train = (train[0][:1000], train[1][:1000])
        test = (test[0][:500], test[1][:500])
    done = {(r["method"], r["arch"], int(r["seed"])) for r in rows}
    for name in names:
        for arch in archs:
            for seed in seeds:
                if (name, arch, seed) in done:
                    continue
                set_seed(seed)
                run_extra = dict(extra)
                if checkpoints is not None and "checkpoint" not in run_extra:
                    trained = {k: v for k, v in extra.items() if k not in EVALUATION_SETTINGS}
                    # a user's data set: its name and contents too, so a changed file never resumes a stale run
                    data = [] if own is None else [own.dataset, file_digest(args.data)]
                    digest = settings_digest([args.epochs, args.batch_size, args.lr, sorted(trained.items())] + data)
                    run_extra["checkpoint"] = str(checkpoints / f"{name}_{arch}_seed{seed}_{digest}.pt")
                if own is not None:  # the network's inputs and outputs (zoo_protocols.lenet_recipes.network_for)
                    run_extra.update(input_shape=own.input_shape, num_classes=own.num_classes)
                config = RunConfig(
                    arch=arch, epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, device=device,
                    seed=seed, quick=args.quick, progress=not args.no_progress, extra=run_extra,
                )
                t0 = time.perf_counter()
                result = methods[name].run(train, test, config)
                row = {
                    "method": name,
                    "arch": arch,
                    "dataset": "mnist" if own is None else own.dataset,
                    "seed": seed,
                    "test_error": result.test_error,
                    "params_total": result.params_total,
                    "params_kept": result.params_kept,
                    "compression_ratio": result.compression_ratio,
                    "flops": result.flops,
                    "pruned_architecture": result.pruned_architecture,
                }
                rows.append({**row, **{k: v for k, v in result.details.items() if k not in row}, "wall_seconds": time.perf_counter() - t0})
                print(f"{name} {arch} seed {seed}: error {result.test_error:.2f}%, x{result.compression_ratio:.1f}, {result.pruned_architecture}", flush=True)
                runs = pd.DataFrame(rows)
                atomic.write_csv(runs[CSV_COLUMNS], out)
                atomic.write_csv(runs, details_path)
    runs = pd.DataFrame(rows)
    stem = args.table_stem or f"{prefix}_{'-'.join(names)}_{'-'.join(archs)}"
    return _report(runs, args, stem, own)


def _report(runs: pd.DataFrame, args, stem: str, own=None) -> pd.DataFrame:
    details = []
    if args.summarize:
        for p in args.summarize:
            d = Path(p).with_name(Path(p).stem + "_details.csv")
            if d.exists():
                details.append(read_runs(d, SUMMARY_COLUMNS, numeric=["seed", "test_error"]))
        if details:
            runs = pd.concat(details, ignore_index=True)
    table = build_table(runs)
    print(to_markdown(table, floatfmt=".4g"))
    notes = [
        "Rows labelled 'published' are the papers' numbers; 'measured' rows were produced by "
        "reproductions/compress_lenet.py. test_error in percent of the compressed (pruned, exported) network; "
        "compression_ratio = |W| / |W != 0| over the weights of all Linear/Conv2d layers; flops = "
        "multiply-accumulates of the kept weights per example; pruned_architecture = kept conv output "
        "channels and linear input features (pyrozoo/compression/counting.py).",
    ]
    if own is not None:
        notes.append(image_data_note(own, args.data) + " No published results exist for it.")
    if args.notes:
        notes.append(args.notes)
    datasets = list(dict.fromkeys(runs["dataset"].fillna("mnist"))) if "dataset" in runs else ["mnist"]
    title = "LeNet compression on " + ", ".join("MNIST" if d == "mnist" else str(d) for d in datasets)
    save_table(table, stem, args.results_dir, title=title, notes="\n\n".join(notes))
    return table


if __name__ == "__main__":
    run_main(main)
