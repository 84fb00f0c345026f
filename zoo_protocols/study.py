"""How a controlled study (``studies/``) writes its result.

Every study ends the same way: its table (summary rows and the runs behind them, in a stated
column order), a results page whose notes are the verdict, the setting and the provenance line,
and the summary and verdict printed for the person who ran it. :func:`write_study` is that
ending, so a study states only what is its own: the numbers, the verdict and the setting.
"""

import argparse
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import pandas as pd

from pyrozoo.reporting import save_table, to_markdown
from zoo_protocols.cli import DEFAULT_RESULTS_DIR, add_common_arguments, positive_int
from zoo_protocols.provenance import provenance_line

QUICK_BANNER = "QUICK SMOKE CONFIGURATION - not a result."
#: where a study's results go by default
STUDY_RESULTS_DIR = DEFAULT_RESULTS_DIR / "controlled"


def study_parser(description: str, threads: Union[bool, str] = True) -> argparse.ArgumentParser:
    """A study's command line: :func:`~zoo_protocols.cli.add_common_arguments`, results under
    :data:`STUDY_RESULTS_DIR` and, unless ``threads`` is false, ``--threads`` (torch's intra-op
    threads, one by default: the studies' models are small; a string is its help)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser)
    if threads:
        parser.add_argument("--threads", type=positive_int, default=1, help=threads if isinstance(threads, str) else "torch intra-op threads")
    parser.set_defaults(results_dir=STUDY_RESULTS_DIR)
    return parser


def ordered(table: pd.DataFrame, columns: Optional[Sequence[str]] = None, first: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """``table`` with ``columns`` in that order (those it has; the rest dropped), or with
    ``first`` leading and every other column after them in its own order; as given with
    neither."""
    if columns is not None and first is not None:
        raise ValueError("give the columns to keep or the ones to put first, not both")
    if columns is not None:
        return table[[c for c in columns if c in table]]
    if first is not None:
        return table[list(first) + [c for c in table if c not in first]]
    return table


def study_notes(verdict: str, setting: str, script: str, depends: Iterable[str], seconds: float, argv: Optional[Sequence[str]] = None, quick: bool = False) -> str:
    """A study's results notes: the verdict (led by ``Verdict:``), the setting and the
    provenance line of ``script`` over ``depends``; a ``quick`` run is marked as no result."""
    verdict = verdict if verdict.startswith("Verdict:") else f"Verdict: {verdict}"
    notes = f"{verdict}\n\n{setting}\n\n" + provenance_line(script, depends, seconds, argv)
    return f"{QUICK_BANNER}\n\n{notes}" if quick else notes


def write_study(table: pd.DataFrame, stem: str, results_dir: Union[str, Path], *, title: str, verdict: str, notes: str,
                shown: Sequence[pd.DataFrame] = (), columns: Optional[Sequence[str]] = None, first: Optional[Sequence[str]] = None,
                quiet: bool = False, floatfmt: str = ".4g", shown_floatfmt: str = ".4g") -> pd.DataFrame:
    """Print ``shown`` (the summaries) and the verdict unless ``quiet``, write ``table`` (in the
    order :func:`ordered` gives) as ``stem`` under ``results_dir`` with ``title`` and ``notes``
    (:func:`study_notes`), and return the table as written."""
    table = ordered(table, columns, first)
    if not quiet:
        for frame in shown:
            print(to_markdown(frame, floatfmt=shown_floatfmt))
        print(verdict)
    save_table(table, stem, results_dir, title=title, notes=notes, floatfmt=floatfmt)
    return table
