"""Writing results: tables as CSV + Markdown, figures as PNG, summaries over runs.

Every function that writes takes the folder to write into (``results_dir``); the library
has no default location. Scripts that report results write them all through these functions,
so nothing in a results folder is typed by hand.

**Run status.** A table of runs may carry a ``status`` column: ``"ok"``, or what went wrong at
run time (``"diverged"``, ``"collapsed"``: ``history.attrs["status"]`` of
:func:`~pyrozoo.inference.fit` and the samplers, see :mod:`pyrozoo.inference.diagnostics`).
A run that is not ok is never a valid result: it stays in the per-run table with its status
(:func:`save_table` notes how many), and :func:`mean_and_stderr` leaves it out of every mean
and counts it in an ``excluded`` column. A blank status (rows written before the column
existed) counts as ok.
"""

import math
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import pandas as pd

from pyrozoo import atomic

#: the status of a valid run
OK = "ok"


def _results_dir(results_dir, caller: str) -> Path:
    if results_dir is None:
        raise ValueError(f"{caller}: results_dir is required (the folder to write into); the library has no default location")
    directory = Path(results_dir)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def to_markdown(df: pd.DataFrame, floatfmt: str = ".4g", index: bool = False) -> str:
    """A GitHub-flavoured Markdown table (no dependency on ``tabulate``)."""
    if index:
        df = df.reset_index()

    def fmt(v):
        if isinstance(v, float):
            return "" if math.isnan(v) else format(v, floatfmt)
        return str(v)

    header = [str(c) for c in df.columns]
    rows = [[fmt(v) for v in row] for row in df.itertuples(index=False, name=None)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line(header), "| " + " | ".join("-" * w for w in widths) + " |"]
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


def save_table(df: pd.DataFrame, stem: str, results_dir: Union[str, Path], *, title: Optional[str] = None, notes: Optional[str] = None, floatfmt: str = ".4g", allow_empty: bool = False) -> Path:
    """Writes ``<results_dir>/<stem>.csv`` and ``<stem>.md`` (with optional title and notes),
    each atomically; returns the CSV path. ``results_dir`` is made if missing. A table without
    rows is refused (``ValueError``) unless ``allow_empty``: a run that ran nothing must not
    replace a table of results. When ``df`` has a ``status`` column with runs that are not
    ``"ok"``, the Markdown says how many, by status, below the table."""
    if df.empty and not allow_empty:
        raise ValueError(f"refusing to write an empty table {stem}.csv: a run that ran nothing is not a result (nothing was written)")
    directory = _results_dir(results_dir, "save_table")
    csv_path = directory / f"{stem}.csv"
    atomic.write_csv(df, csv_path)
    parts = []
    if title:
        parts.append(f"# {title}\n")
    parts.append(to_markdown(df, floatfmt))
    failed = _statuses(df)
    failed = failed[failed != OK]
    if len(failed):
        counts = ", ".join(f"{status}: {count}" for status, count in failed.value_counts(sort=False).items())
        parts.append(f"\n{len(failed)} of {len(df)} runs are not ok ({counts}): they are listed with their status and left out of every summary.\n")
    if notes:
        parts.append("\n" + notes.strip() + "\n")
    atomic.write_text(directory / f"{stem}.md", "\n".join(parts))
    return csv_path


def save_figure(fig, stem: str, results_dir: Union[str, Path], dpi: int = 120) -> Path:
    """Writes ``<results_dir>/<stem>.png`` atomically; ``results_dir`` is made if missing."""
    directory = _results_dir(results_dir, "save_figure")
    path = directory / f"{stem}.png"
    return atomic.save_figure(fig, path, dpi=dpi, bbox_inches="tight")


def _statuses(df: pd.DataFrame) -> pd.Series:
    """Each row's run status (``"ok"`` where the table has no ``status`` column or the cell is blank)."""
    if "status" not in df.columns:
        return pd.Series(OK, index=df.index, dtype=object)
    return df["status"].where(df["status"].notna() & (df["status"].astype(str).str.strip() != ""), OK).astype(str)


def mean_and_stderr(df: pd.DataFrame, by: Sequence[str], columns: Iterable[str]) -> pd.DataFrame:
    """Mean and standard error (std / sqrt(count), ddof=1) of ``columns`` grouped by ``by``,
    with a column ``n`` counting the runs. Missing values (NaN) are left out of a column's
    mean, standard deviation and count; with fewer than two values the standard error is
    NaN (unknown), not 0.

    When ``df`` has a ``status`` column, runs whose status is not ``"ok"`` (diverged,
    collapsed, ...) are left out of everything above and counted in a last column
    ``excluded``; a group whose runs were all excluded keeps its row (``n`` 0, no means)."""
    columns, by = list(columns), list(by)
    ok = _statuses(df) == OK
    groups = df.groupby(by, sort=False).size().index  # every group, in order of first appearance
    grouped = df[ok].groupby(by, sort=False)
    out = grouped[columns].mean().reindex(groups)
    counts = grouped[columns].count().reindex(groups, fill_value=0)
    for c in columns:
        out[f"{c}_se"] = grouped[c].std(ddof=1).reindex(groups) / counts[c].pow(0.5)
    out["n"] = grouped.size().reindex(groups, fill_value=0)
    ordered = [c for col in columns for c in (col, f"{col}_se")] + ["n"]
    if "status" in df.columns:
        out["excluded"] = (~ok).groupby([df[b] for b in by], sort=False).sum().reindex(groups, fill_value=0)
        ordered.append("excluded")
    return out[ordered].reset_index()


def format_mean_se(mean: float, se: float, digits: int = 2) -> str:
    """``"3.14 ± 0.03"``; just the mean when the standard error is unknown (NaN)."""
    if se != se:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {se:.{digits}f}"
