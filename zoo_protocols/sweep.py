"""The UCI regression sweep shared by ``reproductions/uci_regression.py`` and the UCI table scripts
(``uci_esbo_table.py``, ``uci_sgmcmc_table.py``): every method of the UCI protocol
(:mod:`zoo_protocols.uci`) on every split of every data set, with resume semantics, writing one
row per run to a CSV after every run. Its arguments are values (lists of names and split
indices, a :class:`~zoo_protocols.uci.RunConfig`, per-run settings), not command-line strings.
"""

import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

import pandas as pd
import pyro

from pyrozoo import atomic
from pyrozoo.data import UCIDataset
from pyrozoo.distributed import is_main
from zoo_protocols import read_runs
from zoo_protocols.paths import resolve_data_dir
from zoo_protocols.config import RunConfig
from zoo_protocols.uci import available_methods, run_split

#: columns of a per-run results CSV (one row per data set, method and split); ``status`` is
#: ``"ok"`` for a valid result, else what went wrong (``"diverged"``, ``"collapsed"``:
#: :mod:`pyrozoo.inference.diagnostics`) — such a row is kept, so a resumed sweep does not
#: rerun it, but summaries leave it out (:func:`pyrozoo.reporting.mean_and_stderr`)
RESULT_COLUMNS = ["dataset", "method", "split", "rmse", "test_ll", "train_seconds", "status"]
#: its numeric columns
RESULT_NUMERIC = ["split", "rmse", "test_ll", "train_seconds"]


def _print_now(line: str) -> None:
    print(line, flush=True)


def read_results(path, missing_ok: bool = True) -> pd.DataFrame:
    """A per-run results CSV (:data:`RESULT_COLUMNS`), checked (:func:`zoo_protocols.read_runs`).
    A file written before runs had a ``status`` holds valid runs only (``"ok"``); a run that
    is not ok may lack its scores, one that is ok may not."""
    columns = [c for c in RESULT_COLUMNS if c != "status"]
    table = read_runs(path, columns, required=["dataset", "method", "split"], numeric=RESULT_NUMERIC, missing_ok=missing_ok)
    if "status" not in table:
        table["status"] = "ok"
    table["status"] = table["status"].fillna("ok")
    problems = []
    for i, row in table.iterrows():
        needed = ["rmse", "test_ll", "train_seconds"] if row["status"] == "ok" else ["train_seconds"]
        # row i of the table is line i + 2 of the file (line 1 is the header)
        problems += [f"line {i + 2}: {c} is blank" for c in needed if pd.isna(row[c])]
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError(f"{path} has incomplete rows, not taken as results: {'; '.join(problems[:5])}{more}; move it aside, or delete the rows named, and run again")
    return table[RESULT_COLUMNS + [c for c in table.columns if c not in RESULT_COLUMNS]]


def _data_root(data_dir):
    """The data root, or ``None`` when none is given or found (a data set given by its path
    needs none; one given by name then fails in the loader, saying to pass one)."""
    try:
        return resolve_data_dir(data_dir)
    except FileNotFoundError:
        if data_dir is None:
            return None
        raise


def sweep(
    methods: Iterable[str],
    datasets: Iterable[str],
    splits: Union[Iterable[int], Mapping[str, Iterable[int]]],
    out: Union[str, Path],
    *,
    config: Optional[RunConfig] = None,
    settings: Optional[Callable[[str, str], dict]] = None,
    data_dir=None,
    resume: bool = True,
    splits_outermost: bool = True,
    log: Optional[Callable[[str], None]] = _print_now,
    extra_columns: Sequence[str] = (),
) -> pd.DataFrame:
    """Runs every method on every split of every data set and returns all rows of ``out``
    (:data:`RESULT_COLUMNS`), which is rewritten (atomically) after every run, so an
    interrupted sweep loses nothing.

    :param methods: registered UCI method names (:func:`available_methods`).
    :param datasets: UCI data sets: names or paths of folders in the UCI layout
        (:class:`~pyrozoo.data.UCIDataset`), or loaded data sets with ``name``, ``n_splits`` and
        ``split(k)`` (e.g. a :class:`~pyrozoo.data.RegressionTable`).
    :param splits: split indices for every data set (an index a data set does not have is
        skipped for it, e.g. protein's 5 standard splits), or ``{dataset: indices}``.
    :param out: the per-run CSV.
    :param config: the settings of every run (default :class:`RunConfig()`).
    :param settings: ``settings(dataset, method) -> {field: value}``, per-run changes of
        ``config`` (e.g. ``{"lr": 1e-5}``, ``{"epochs": 50, "batch_size": 2048}``).
    :param data_dir: the data root (default :func:`zoo_protocols.paths.default_data_dir`).
    :param resume: keep the runs already in ``out`` (checked, :func:`read_results`) and skip
        them; without it ``out`` is started afresh.
    :param splits_outermost: the loop order: splits, data sets, methods (so an interrupted
        sweep has every data set and method on the splits it finished), else data sets,
        splits, methods.
    :param log: gets one line per finished run (default: printed at once; ``None``: silent).
    :param extra_columns: further numbers a method's result reports (e.g. a second readout),
        written after :data:`RESULT_COLUMNS` (blank for a run that does not report them).
    """
    methods, datasets = list(dict.fromkeys(methods)), list(dict.fromkeys(datasets))
    if not methods or not datasets:
        raise ValueError(f"nothing to run: methods {methods}, data sets {datasets}")
    registered = available_methods()
    unknown = [m for m in methods if m not in registered]
    if unknown:
        raise ValueError(f"unknown UCI method(s) {unknown}; available: {', '.join(sorted(registered))}")
    # a data set is given by the name or path of a folder in the UCI layout, or loaded (e.g. a
    # pyrozoo.data.RegressionTable); the results know it by its ``name``
    root = _data_root(data_dir) if any(isinstance(d, str) for d in datasets) else None
    loaded = {(d if isinstance(d, str) else d.name): (UCIDataset(d, root) if isinstance(d, str) else d) for d in datasets}
    datasets = list(loaded)
    if isinstance(splits, Mapping):
        chosen = {name: [int(i) for i in splits[name]] for name in datasets}
        for name, indices in chosen.items():
            bad = [i for i in indices if not 0 <= i < loaded[name].n_splits]
            if bad:
                raise ValueError(f"{name}: splits {bad} out of range 0..{loaded[name].n_splits - 1}")
    else:
        wanted = [int(i) for i in splits]
        largest = max(d.n_splits for d in loaded.values())
        bad = [i for i in wanted if not 0 <= i < largest]
        if bad:
            raise ValueError(f"splits {bad} out of range 0..{largest - 1} (the most any of {datasets} has)")
        chosen = {name: [i for i in wanted if i < loaded[name].n_splits] for name in datasets}
    out = Path(out)
    config = config if config is not None else RunConfig()
    # an unreadable ``out`` is an error, not a result (nor silently overwritten): read before any run
    rows = read_results(out).to_dict("records") if resume else []
    done = {(r["dataset"], r["method"], int(r["split"])) for r in rows}
    columns = RESULT_COLUMNS + [c for c in extra_columns if c not in RESULT_COLUMNS]
    # a diverged run ends as the method's own error (e.g. FloatingPointError), not as Pyro's
    # argument validation failing on a non-finite value
    pyro.enable_validation(False)

    if splits_outermost:
        order = [(d, i) for i in dict.fromkeys(i for d in datasets for i in chosen[d]) for d in datasets if i in chosen[d]]
    else:
        order = [(d, i) for d in datasets for i in chosen[d]]
    for dataset_name, split_index in order:
        todo = [m for m in methods if (dataset_name, m, split_index) not in done]
        if not todo:
            continue
        split = loaded[dataset_name].split(split_index)
        for method in todo:
            run_config = dataclasses.replace(config, **settings(dataset_name, method)) if settings else config
            t0, failure = time.perf_counter(), ""
            try:
                result = run_split(method, split, run_config)
            except FloatingPointError as e:
                # a chain or loss that went non-finite (pyrozoo.inference.diagnostics.DivergenceError):
                # recorded as diverged, never as a result, and the sweep goes on
                result = {"rmse": math.nan, "test_ll": math.nan, "train_seconds": time.perf_counter() - t0, "status": "diverged"}
                failure = f" ({e})"
            row = {"dataset": dataset_name, "method": method, "split": split_index, **{k: result[k] for k in ("rmse", "test_ll", "train_seconds")}, "status": result.get("status", "ok"),
                   **{k: result.get(k, math.nan) for k in extra_columns}}
            rows.append(row)
            if not is_main():  # under torchrun every rank runs the sweep; rank 0 logs and writes
                continue
            if log is not None:
                flag = "" if row["status"] == "ok" else f"  {row['status'].upper()}: not a valid result{failure}"
                log(f"{dataset_name:28s} {method:10s} split {split_index:2d}  rmse {row['rmse']:.4f}  test_ll {row['test_ll']:.4f}  ({row['train_seconds']:.1f} s){flag}")
            atomic.write_csv(pd.DataFrame(rows, columns=columns), out)
    return pd.DataFrame(rows, columns=columns)
