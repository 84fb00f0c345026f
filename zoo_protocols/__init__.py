"""Recipes: the experiments of the repository, outside the library. Experiment protocols
shared by the example scripts and notebooks, with registries of methods, per-paper defaults,
paper tables (``zoo_protocols/data/*.csv``, package data) and published numbers; the examples'
command line (:mod:`zoo_protocols.cli`) and where they find data (:mod:`zoo_protocols.paths`).
:mod:`pyrozoo` never imports this package.

* :mod:`zoo_protocols.uci` — the UCI regression protocol; methods register with
  :func:`~zoo_protocols.uci.register_uci_method` in modules named ``uci_*.py``;
  :func:`zoo_protocols.sweep.sweep` runs them over data sets, splits and methods.
* :mod:`zoo_protocols.lenet` — MNIST LeNet compression; methods register with
  :func:`~zoo_protocols.lenet.register_compression_method` in modules named
  ``compress_*.py``.
* :mod:`zoo_protocols.mnist` — MNIST classification with a small fully connected
  network (error, test log-likelihood); methods register with
  :func:`~zoo_protocols.mnist.register_mnist_method` in modules named ``mnist_*.py``.
* :mod:`zoo_protocols.compare` — runs methods of these registries side by side under
  a matched budget of gradient evaluations (``reproductions/compare_objectives.py``).

All three registries are :class:`~zoo_protocols.registry.MethodRegistry` objects
(``UCI_REGISTRY``, ``MNIST_REGISTRY``, ``COMPRESSION_REGISTRY``); method modules in this
package are discovered and imported by :func:`load_methods`.
"""

import importlib
import pkgutil
import warnings


def load_methods(prefix: str) -> None:
    """Imports every module of this package whose name starts with ``prefix``
    (e.g. ``"uci_"``), so that its methods register themselves."""
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith(prefix):
            try:
                importlib.import_module(f"{__name__}.{info.name}")
            except ImportError as e:
                # one broken method module must not take the others down; asking for one of
                # its methods then fails with "unknown method", after this warning
                warnings.warn(f"experiment module {__name__}.{info.name} could not be imported: {e}")


def read_runs(path, columns, *, required=None, numeric=(), missing_ok: bool = True):
    """A per-run results CSV written by an earlier (possibly interrupted) call, checked before
    anything trusts it: what ``--resume`` and the table builders read back.

    :param path: the CSV. A missing file is an empty table with ``columns`` when
        ``missing_ok`` (a sweep not started yet), else ``FileNotFoundError``.
    :param columns: columns the file must have (it may have more).
    :param required: columns every row must have a value in (default: all of ``columns``):
        keys and the metrics a finished run always has. Columns left out may be blank (e.g. a
        point estimate's thinning, a diverged tuning run's score).
    :param numeric: columns that must hold numbers (blank allowed unless ``required``).
    :raises ValueError: naming the file, and the rows and columns at fault, when the file
        is not a complete table: empty, cut off mid-row (no final newline), unparsable,
        missing a column, a required value blank or a number that is not one. Nothing such
        a file holds is taken as a result: move it aside (or delete the rows named) to go on.
    """
    from pathlib import Path

    import pandas as pd

    path = Path(path)
    columns = list(columns)
    required = columns if required is None else list(required)
    hint = "move it aside, or delete the rows named, and run again"
    if not path.exists():
        if missing_ok:
            return pd.DataFrame(columns=columns)
        raise FileNotFoundError(f"results file {path} does not exist")
    raw = path.read_bytes()
    if not raw.strip():
        raise ValueError(f"{path} is empty (an interrupted write?): {hint}")
    if not raw.endswith(b"\n"):
        last = raw.rsplit(b"\n", 1)[-1].decode(errors="replace")
        raise ValueError(f"{path} ends mid-row (an interrupted write?): its last line {last!r} is incomplete; {hint}")
    try:
        # index_col=False: a row with more fields than the header is an error, not an index
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            table = pd.read_csv(path, index_col=False)
    except pd.errors.ParserWarning:
        raise ValueError(f"{path} is not a readable CSV (a row has more fields than the header): {hint}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        reason = " ".join(str(e).split())
        raise ValueError(f"{path} is not a readable CSV ({reason}): {hint}") from None
    missing = [c for c in dict.fromkeys(columns + required + list(numeric)) if c not in table.columns]
    if missing:
        raise ValueError(f"{path} has no column(s) {missing} (columns: {list(table.columns)}): not a results file of this run; {hint}")
    problems = []
    for c in required:
        for i in table.index[table[c].isna()]:
            problems.append((i, f"{c} is blank"))
    for c in numeric:
        values = pd.to_numeric(table[c], errors="coerce")
        for i in table.index[values.isna() & table[c].notna()]:
            problems.append((i, f"{c} = {table.at[i, c]!r} is not a number"))
    if problems:
        problems.sort(key=lambda p: p[0])
        # row i of the table is line i + 2 of the file (line 1 is the header)
        shown = "; ".join(f"line {i + 2}: {what}" for i, what in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ValueError(f"{path} has incomplete rows, not taken as results: {shown}{more}; {hint}")
    for c in numeric:
        table[c] = pd.to_numeric(table[c])
    return table
