"""Provenance of the committed results: ``docs/results/MANIFEST.csv``, one row per results file.

A row says how the file was made and what it depends on (issue 23, item 4):

``file``
    the path under ``docs/results`` (``uci_bbb.csv``, ``reference/yacht_mlp.json``);
``command``
    the command line that wrote it (``python examples/... --options``; a backfilled row whose
    arguments were never recorded says so);
``commit``
    the commit the code was at: a 12-digit hash, ``+dirty`` when a module the file depends on
    differed from it, or ``uncommitted`` outside a git checkout;
``settings``
    JSON of the run's settings (the options of its command line unless the script gave more);
``device``, ``threads``, ``seconds``, ``created``
    where it ran (``cpu``, ``cuda:0 (NVIDIA H100 ...)``), torch's intra-op threads, the wall
    seconds of the invocation that wrote it, and when (UTC, ISO 8601); blank when unknown;
``depends``
    the repository files its numbers depend on, ``;``-separated: the script that wrote it and
    the :mod:`zoo_protocols` modules that script imports, followed transitively (and the method
    modules a registry loads by prefix, :func:`zoo_protocols.load_methods`, and the scripts it runs
    with :func:`runpy.run_path`, :func:`script_loads`), less
    :data:`INFRASTRUCTURE`; then the results files the run read (``docs/results/...``: the runs
    a table is built from, the statistics an analysis reads, the ledger's evidence), noted as
    they are opened (:func:`tracking_reads`, only in a run with ``PYROZOO_RECORD_INPUTS=1``:
    an ordinary run installs no audit hook, and its rows keep the inputs recorded before). The
    library (``pyrozoo/``) is not listed yet: it changes with nearly every commit, and a change
    there is caught by its own tests;
``waiver``
    empty, or why a file whose ``depends`` changed after it was committed is accepted for now;
``verified``
    empty, or ``<commit> `<command>```: a short run of the file's script gave the same numbers
    on the code of the file's commit and on the code of ``<commit>``
    (:mod:`zoo_protocols.equivalence`, ``tools/results_manifest.py --verify``), so the changes in
    between did not alter its computation; staleness is then counted from ``<commit>``;
``source``
    ``run`` (written by :func:`record_outputs` as the file was written) or ``backfill``
    (reconstructed afterwards by ``tools/results_manifest.py``).

A result is *stale* when a file of its ``depends`` was changed by a commit that came after the
file's own last commit, or after its ``verified`` commit when that is later: for the results
files it read only when the check was its own command writing it again byte for byte, since a
short run checks the code, not the committed results the file was made from (:func:`staleness`);
:func:`check_manifest` reports stale files without a waiver, files listed but missing and
results files not listed.

Every example records its rows itself: :func:`zoo_protocols.cli.run_main` runs ``main`` inside
:func:`recording_outputs`, which notes every file written through :mod:`pyrozoo.atomic` (the one
place every results file passes through) and upserts the rows of those under this checkout's
``docs/results`` when ``main`` ends. A script may call :func:`record_outputs` itself with its
resolved settings; those rows are then not overwritten by the automatic ones.
"""

import ast
import csv
import io
import json
import os
import re
import shlex
import subprocess
import sys
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

from pyrozoo import atomic

PathLike = Union[str, Path]

#: the manifest's columns, in order
COLUMNS = ("file", "command", "commit", "settings", "device", "threads", "seconds", "created", "depends", "waiver", "source", "verified")
#: the columns of manifests written before ``verified`` existed (GPU bundles made then): read with it blank
OLD_COLUMNS = COLUMNS[:-1]
#: the manifest's name inside the results folder (it lists every file there but itself)
MANIFEST_NAME = "MANIFEST.csv"
#: repository modules left out of ``depends``: they read options, find folders, check the files
#: a resume reads back and record provenance; they decide where results go and whether a run
#: is refused, not what a result's numbers are, and every example imports them, so listing them
#: would make every result stale on every change of the command line
INFRASTRUCTURE = frozenset({"zoo_protocols/__init__.py", "zoo_protocols/cli.py", "zoo_protocols/paths.py", "zoo_protocols/provenance.py"})
#: hashes in the manifest are this many hex digits
SHORT_HASH = 12
#: where the results a run reads (its inputs among ``depends``) live, repository-relative
RESULTS_PREFIX = "docs/results/"


def repo_root() -> Path:
    """The checkout holding :mod:`zoo_protocols` (its parent folder)."""
    return Path(__file__).resolve().parents[1]


def results_dir(root: Optional[PathLike] = None) -> Path:
    """``<root>/docs/results``, the folder the manifest describes."""
    return Path(root or repo_root()) / "docs" / "results"


def manifest_path(root: Optional[PathLike] = None) -> Path:
    return results_dir(root) / MANIFEST_NAME


# -- git -------------------------------------------------------------------------------------

def git(root: PathLike, *args: str) -> Optional[str]:
    """``git <args>``'s standard output in ``root``, or ``None`` when git is missing, ``root`` is
    no checkout or the command fails (provenance is then recorded as unknown, never guessed)."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def head_commit(root: PathLike) -> Optional[str]:
    """HEAD's hash (:data:`SHORT_HASH` digits), or ``None`` outside a checkout with commits."""
    out = git(root, "rev-parse", "HEAD")
    return out.strip()[:SHORT_HASH] if out and out.strip() else None


def changed_paths(root: PathLike, paths: Iterable[str]) -> Optional[Set[str]]:
    """The repository-relative files under ``paths`` that differ from HEAD or are untracked
    (a rename's new name; None when git cannot say)."""
    out = git(root, "status", "--porcelain", "--untracked-files=all", "--", *paths)
    if out is None:
        return None
    return {line[3:].split(" -> ")[-1].strip('"') for line in out.splitlines() if len(line) > 3}


def modified(root: PathLike, paths: Iterable[str]) -> bool:
    """Whether any of ``paths`` (repository-relative) differs from HEAD or is untracked."""
    paths = list(paths)
    return bool(paths) and bool(changed_paths(root, paths))


#: names the commit of a copy of the working tree whose git history is missing or lags (the
#: GPU machine's copy: there, ``git rev-parse HEAD`` printed an earlier commit than the one sent)
SOURCE_COMMIT_VARIABLE = "PYROZOO_SOURCE_COMMIT"


def commit_label(root: PathLike, depends: Iterable[str]) -> str:
    """``<hash>`` of HEAD, ``<hash>+dirty`` when a file of ``depends`` differs from it, or
    ``uncommitted`` outside a git checkout; ``$PYROZOO_SOURCE_COMMIT`` (:data:`SOURCE_COMMIT_VARIABLE`),
    when set, is taken as the commit instead, by whoever copied a clean checkout of it.

    :raises ValueError: naming the variable when its value is not a commit hash."""
    given = os.environ.get(SOURCE_COMMIT_VARIABLE, "").strip()
    if given:
        if not re.fullmatch(r"[0-9a-f]{7,40}", given):
            raise ValueError(f"${SOURCE_COMMIT_VARIABLE}={given!r} is not a commit hash (7 to 40 hex digits); unset it or give the hash of the commit copied")
        return given[:SHORT_HASH]
    head = head_commit(root)
    if head is None:
        return "uncommitted"
    return head + ("+dirty" if modified(root, depends) else "")


def provenance_line(script: str, depends: Iterable[str], seconds: float, argv: Optional[Sequence[str]] = None) -> str:
    """The ``Provenance:`` line of a results page that ``script`` (repository-relative) wrote:
    the command (``argv``, default this process's arguments), the commit
    (:func:`commit_label` over ``script`` and ``depends``), torch's threads, the device and the
    wall time in seconds."""
    import torch

    args = sys.argv[1:] if argv is None else [str(a) for a in argv]
    commit = commit_label(repo_root(), [script, *depends])
    return (f"Provenance: python {' '.join([script, *args])}; commit {commit}; torch threads {torch.get_num_threads()}; "
            f"device cpu; {seconds:.0f} s. Produced by {script}.")


# -- the manifest ----------------------------------------------------------------------------

def read_manifest(path: PathLike) -> Dict[str, Dict[str, str]]:
    """The manifest's rows by ``file`` (every value a string); a missing file is an empty one.

    :raises ValueError: naming the file when its header is not :data:`COLUMNS` or a file is
        listed twice."""
    path = Path(path)
    return parse_manifest(path.read_text(), path) if path.exists() else {}


def parse_manifest(text: str, source: PathLike) -> Dict[str, Dict[str, str]]:
    """The rows of manifest CSV ``text`` by ``file`` (:func:`read_manifest`'s checks; errors
    name ``source``)."""
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) not in (COLUMNS, OLD_COLUMNS):
        raise ValueError(f"{source}: columns {reader.fieldnames} are not the manifest's {list(COLUMNS)}; rebuild it with tools/results_manifest.py")
    rows = {}
    for line, row in enumerate(reader, start=2):
        if None in row or any(v is None for v in row.values()):
            raise ValueError(f"{source}: line {line} does not have the {len(COLUMNS)} columns of the manifest")
        if row["file"] in rows:
            raise ValueError(f"{source}: {row['file']} is listed twice (line {line}); keep one row")
        rows[row["file"]] = {**row, "verified": row.get("verified", "")}
    return rows


def manifest_text(rows: Mapping[str, Mapping[str, str]]) -> str:
    """The manifest as CSV text, rows sorted by file (so rewriting it is a stable diff)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for name in sorted(rows):
        writer.writerow({c: rows[name].get(c, "") for c in COLUMNS})
    return buffer.getvalue()


def write_manifest(path: PathLike, rows: Mapping[str, Mapping[str, str]]) -> Path:
    """Writes the manifest atomically (:func:`pyrozoo.atomic.write_text`)."""
    return atomic.write_text(path, manifest_text(rows))


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``directory`` (POSIX ``flock``; no lock elsewhere), so that two
    examples finishing at once do not each read the manifest and the second drop the first's
    rows. The folder itself is locked: the manifest is replaced on every write, so a lock on
    the file would lock an inode that is about to go."""
    try:
        import fcntl
    except ImportError:  # not POSIX: upserts are unserialised
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def update(path: PathLike, change: Callable[[Dict[str, Dict[str, str]]], Dict[str, Dict[str, str]]]) -> Dict[str, Dict[str, str]]:
    """Reads the manifest at ``path``, applies ``change`` to its rows and writes the result
    atomically, all under a lock (so no concurrent update is lost); returns the new rows."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.parent):
        manifest = change(read_manifest(path))
        write_manifest(path, manifest)
    return manifest


def upsert(path: PathLike, rows: Iterable[Mapping[str, str]], keep_inputs: bool = False) -> Dict[str, Dict[str, str]]:
    """Replaces (or adds) the rows of ``rows``' files in the manifest at ``path``
    (:func:`update`); returns the whole manifest. ``keep_inputs``: the results files a replaced
    row read stay among its ``depends`` (a run that did not track its reads, so its inputs are
    taken to be what they were), less the files being written."""
    rows = [{c: str(row.get(c, "")) for c in COLUMNS} for row in rows]
    written = {RESULTS_PREFIX + row["file"] for row in rows}

    def change(manifest):
        for row in rows:
            if keep_inputs and row["file"] in manifest:
                kept = [p for p in code_and_inputs(split_depends(manifest[row["file"]]["depends"]))[1] if p not in written]
                row["depends"] = ";".join(dict.fromkeys(split_depends(row["depends"]) + kept))
            manifest[row["file"]] = row
        return manifest

    return update(path, change)


# -- what a result depends on ----------------------------------------------------------------

def _module_file(root: Path, module: str) -> Optional[str]:
    """``zoo_protocols.uci`` -> ``zoo_protocols/uci.py`` (or a package's ``__init__.py``), if it exists."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate.as_posix()
    return None


#: calls that name a prefix of method modules (imported when the methods are asked for):
#: function name -> (position, keyword) of the prefix
_PREFIX_ARGUMENT = {"load_methods": (0, "prefix"), "MethodRegistry": (1, "module_prefix")}


def _static_path(node: ast.expr, here: Path, names: Dict[str, ast.expr], depth: int = 0) -> Optional[Path]:
    """The path an expression such as ``Path(__file__).resolve().parents[1] / "x.py"`` or
    ``str(EXAMPLE)`` names in the file ``here`` (absolute), read without running it; ``None``
    when it is built from anything else. ``names`` are the module's simple assignments."""
    if depth > 20:  # a name bound to itself, through others
        return None
    again = lambda n: _static_path(n, here, names, depth + 1)  # noqa: E731
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return Path(node.value)
    if isinstance(node, ast.Name):
        return here if node.id == "__file__" else (again(names[node.id]) if node.id in names else None)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = again(node.left), again(node.right)
        return None if left is None or right is None else left / right
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        base = again(node.value)
        return None if base is None else base.parent
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        base, index = again(node.value.value), node.slice
        if base is None or not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
            return None
        return base.parents[index.value]
    if isinstance(node, ast.Call):
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id in ("Path", "str") and len(args) == 1 and not node.keywords:
            return again(args[0])
        if isinstance(func, ast.Attribute) and func.attr in ("resolve", "absolute") and not args:
            return again(func.value)
        if isinstance(func, ast.Attribute) and func.attr == "with_name" and len(args) == 1:
            base, name = again(func.value), again(args[0])
            return None if base is None or name is None else base.with_name(str(name))
    return None


def script_loads(source: str, root: PathLike, filename: str) -> Tuple[Set[str], List[int]]:
    """The repository files ``source`` (the file ``filename``, relative to ``root``) runs with
    :func:`runpy.run_path` (repository-relative paths), and the lines of the calls whose path
    cannot be read off the code (:func:`_static_path`). A script that loads another this way
    depends on it as on an import; relative paths are taken from ``root``, where the examples run."""
    return _loads_in(ast.parse(source, filename), Path(root), filename)


def _loads_in(tree: ast.Module, root: Path, filename: str) -> Tuple[Set[str], List[int]]:
    root = root.resolve()
    names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    files, unresolved = set(), []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "run_path" and node.args):
            continue
        path = _static_path(node.args[0], root / filename, names)
        path = None if path is None else (root / path).resolve()  # an absolute path stays as it is
        if path is not None and path.is_relative_to(root):
            files.add(path.relative_to(root).as_posix())
        else:  # not read off the code, or outside the repository
            unresolved.append(node.lineno)
    return files, unresolved


def recipe_imports(source: str, root: PathLike, filename: str = "<source>", package: Optional[str] = None) -> Tuple[Set[str], Set[str]]:
    """The :mod:`zoo_protocols` files ``source`` imports (repository-relative paths) and the prefixes
    of method modules it names (``load_methods("uci_")``, ``MethodRegistry("UCI", "uci_")``: the
    modules ``zoo_protocols/uci_*.py``, imported when the methods are asked for).

    ``from zoo_protocols import x`` names ``zoo_protocols/x.py`` when that module exists, else the package's
    ``__init__.py``; relative imports are resolved against ``package``."""
    root = Path(root)
    files, prefixes = set(), set()
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                if not package:
                    continue
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(parent + ([module] if module else []))
            names = [module] + [f"{module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in _PREFIX_ARGUMENT:
            # a registry of methods loads the modules named <prefix>*.py when asked for them
            position, keyword = _PREFIX_ARGUMENT[getattr(node.func, "attr", getattr(node.func, "id", None))]
            given = node.args[position] if len(node.args) > position else next((k.value for k in node.keywords if k.arg == keyword), None)
            if isinstance(given, ast.Constant) and isinstance(given.value, str):
                prefixes.add(given.value)
            continue
        else:
            continue
        for name in names:
            if name.split(".")[0] != "zoo_protocols":
                continue
            # "from zoo_protocols import compare" imports the module zoo_protocols.compare; "from zoo_protocols
            # import read_runs" an attribute of the package (its __init__.py)
            found = _module_file(root, name)
            if found is None and "." in name:
                found = _module_file(root, name.rsplit(".", 1)[0])
            if found:
                files.add(found)
    if filename != "<source>":
        files |= _loads_in(tree, root, filename)[0]
    return files, prefixes


def _code_of(path: Path) -> str:
    """A script's source; a notebook's code cells, less IPython's ``%`` and ``!`` lines."""
    if path.suffix != ".ipynb":
        return path.read_text()
    cells = json.loads(path.read_text()).get("cells", [])
    lines = []
    for cell in cells:
        if cell.get("cell_type") == "code":
            source = cell.get("source", "")
            text = "".join(source) if isinstance(source, list) else source
            lines += [line for line in text.splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def declared_threads(script: PathLike) -> Optional[int]:
    """The torch thread count a script or notebook sets itself (``torch.set_num_threads(N)`` in
    its code, the last one), or None: a notebook's kernel is another process, so the
    executor's own count says nothing of it."""
    found = re.findall(r"torch\.set_num_threads\(\s*(\d+)\s*\)", _code_of(Path(script)))
    return int(found[-1]) if found else None


#: parsed imports by (file, modification time, size): a backfill asks for every file's script
_parsed: Dict[Tuple[str, int, int], Tuple[Set[str], Set[str]]] = {}


def _imports_of(path: Path, root: Path, name: str, package: Optional[str]) -> Tuple[Set[str], Set[str]]:
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _parsed:
        _parsed[key] = recipe_imports(_code_of(path), root, name, package)
    files, prefixes = _parsed[key]
    return set(files), set(prefixes)


def depends_of(script: PathLike, root: Optional[PathLike] = None) -> List[str]:
    """The repository files a result written by ``script`` (an example or notebook, absolute or
    relative to ``root``) depends on: the script and the :mod:`zoo_protocols` modules it imports,
    transitively, with the modules of the method-module prefixes met on the way, less
    :data:`INFRASTRUCTURE` (whose own imports are not followed); sorted, the script first.

    :raises FileNotFoundError: when ``script`` is not a file."""
    root = Path(root or repo_root()).resolve()
    path = Path(script)
    path = path if path.is_absolute() else root / path
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such script, so what its results depend on is unknown")
    rel = path.resolve().relative_to(root).as_posix()
    seen: Set[str] = set()
    todo = [rel]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in INFRASTRUCTURE:  # neither listed nor followed: what it imports serves it
            continue
        package = ".".join(Path(current).parts[:-1]) if current.startswith("zoo_protocols/") else None
        files, prefixes = _imports_of(root / current, root, current, package)
        for prefix in prefixes:
            files |= {p.relative_to(root).as_posix() for p in (root / "zoo_protocols").glob(f"{prefix}*.py")}
        todo += sorted(files - seen)
    return [rel] + sorted(seen - {rel} - INFRASTRUCTURE)


def split_depends(text: str) -> List[str]:
    return [p for p in (text or "").split(";") if p]


def code_and_inputs(depends: Iterable[str]) -> Tuple[List[str], List[str]]:
    """``depends`` split into code and the results files a run read (under :data:`RESULTS_PREFIX`)."""
    depends = list(depends)
    return [p for p in depends if not p.startswith(RESULTS_PREFIX)], [p for p in depends if p.startswith(RESULTS_PREFIX)]


# -- recording a run's files -----------------------------------------------------------------

def settings_from_argv(argv: Sequence[str]) -> dict:
    """The options of a command line as a dict: ``--x v`` -> ``{"--x": "v"}``, a flag -> ``True``,
    ``--x a b`` -> ``{"--x": ["a", "b"]}``, ``--x=v`` -> ``{"--x": "v"}``; positional arguments
    under ``""``."""
    out: dict = {}
    key = None
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            if "=" in token:
                name, value = token.split("=", 1)
                out[name], key = value, None
            else:
                key = token
                out[key] = True
        elif key is None:
            out.setdefault("", []).append(token)
        elif out[key] is True:
            out[key] = token
        else:
            out[key] = (out[key] if isinstance(out[key], list) else [out[key]]) + [token]
    return out


def device_label(option: Optional[str] = None) -> str:
    """``cpu``, or ``cuda:0 (<GPU name>)``, for a ``--device`` value (``auto`` or ``None``: CUDA
    when available)."""
    import torch

    if option in (None, "auto"):
        option = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(option)
    if device.type == "cuda" and torch.cuda.is_available():
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return str(device)


def command_line(argv: Sequence[str], root: Optional[PathLike] = None) -> str:
    """``python <script relative to root> <args>``, shell-quoted."""
    root = Path(root or repo_root()).resolve()
    script = Path(argv[0]) if argv else Path("?")
    try:
        script = script.resolve().relative_to(root)
    except ValueError:
        pass
    return "python " + shlex.join([script.as_posix(), *argv[1:]])


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _inside(path: Path, directory: Path) -> Optional[str]:
    try:
        return path.resolve().relative_to(directory.resolve()).as_posix()
    except ValueError:
        return None


def _ignored(root: Path, paths: Sequence[str]) -> Set[str]:
    """The repository-relative ``paths`` git ignores (none when git cannot say)."""
    if not paths:
        return set()
    try:
        done = subprocess.run(["git", "check-ignore", "--stdin"], cwd=root, input="\n".join(paths), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return set()
    return set(done.stdout.split("\n")) - {""}


def unchanged_since_head(root: PathLike, paths: Sequence[str]) -> Set[str]:
    """The repository-relative ``paths`` that are tracked and whose bytes equal HEAD's (none
    when git cannot say)."""
    if not paths:
        return set()
    tracked, changed = git(root, "ls-files", "--", *paths), changed_paths(root, paths)
    if tracked is None or changed is None:
        return set()
    return set(tracked.splitlines()) - changed - {""}


#: files already recorded by an explicit :func:`record_outputs` call inside the current
#: :func:`recording_outputs` block (the automatic rows must not replace them)
_explicit: Set[str] = set()


def record_outputs(
    paths: Iterable[PathLike],
    *,
    argv: Optional[Sequence[str]] = None,
    settings: Optional[Mapping] = None,
    seconds: Optional[float] = None,
    device: Optional[str] = None,
    root: Optional[PathLike] = None,
    script: Optional[PathLike] = None,
    threads: Optional[int] = None,
    inputs: Optional[Iterable[PathLike]] = None,
) -> List[Dict[str, str]]:
    """Upserts the manifest rows of the results files a script just wrote.

    Only files inside ``<root>/docs/results`` that git does not ignore get rows (a test's
    temporary folder, a run's checkpoints and the manifest itself get none); returns the rows
    written. ``argv`` defaults to ``sys.argv`` (the command; its first item the script, whose
    imports give ``depends`` unless ``script`` names the code that ran, as a notebook executed by
    ``scripts/execute_notebook.py``), ``settings`` to the options of ``argv``, ``device`` to
    ``argv``'s ``--device`` (:func:`device_label`), ``threads`` to this process's torch threads;
    ``seconds`` is the wall time of the invocation; ``inputs`` the files it read (default: those
    read so far inside :func:`tracking_reads`; outside one, where nobody tracked the reads, the
    results files the rows replaced had read are kept), whose committed results files other than
    the ones written join ``depends``.

    A file written byte for byte as HEAD has it, by code that is HEAD's (a clean commit
    label), gets ``verified`` at HEAD: git keeps the file's older commit, so without it the file
    would count as stale after a change of its code that this run has just shown to change
    nothing.
    """
    import torch

    root = Path(root or repo_root()).resolve()
    directory = results_dir(root)
    argv = list(sys.argv if argv is None else argv)
    names = _results_among(root, paths)
    if not names:
        return []
    try:
        depends = depends_of(argv[0] if script is None else script, root)
    except (FileNotFoundError, ValueError):  # a script outside the checkout: only itself is known
        depends = []
    written = set(names.values())  # a run reading back its own file to resume does not depend on it
    untracked = inputs is None and _reads is None
    read = sorted(set(_results_among(root, (_reads or []) if inputs is None else inputs).values()) - written)
    options = settings_from_argv(argv[1:])
    if device is None:
        device = device_label(options.get("--device") if isinstance(options.get("--device"), str) else None)
    row = {
        "command": command_line(argv, root),
        "commit": commit_label(root, depends),  # of the code: inputs being regenerated alongside are not a dirty tree
        "settings": json.dumps(dict(settings) if settings is not None else options, sort_keys=True, default=str),
        "device": device,
        "threads": str(torch.get_num_threads() if threads is None else threads),
        "seconds": "" if seconds is None else f"{seconds:.1f}",
        "created": now_iso(),
        "depends": ";".join(depends + read),
        # a regenerated file has nothing to be excused for
        "waiver": "",
        "verified": "",
        "source": "run",
    }
    rows = [{"file": name, **row} for name in sorted(names)]
    if re.fullmatch(r"[0-9a-f]{12}", row["commit"]) and "`" not in row["command"] and not os.environ.get(SOURCE_COMMIT_VARIABLE, "").strip():
        # (a copied checkout whose history lags cannot say what HEAD has)
        same = unchanged_since_head(root, sorted(names.values()))
        for r in rows:
            if names[r["file"]] in same:
                r["verified"] = verified_value(row["commit"], row["command"])
    upsert(directory / MANIFEST_NAME, rows, keep_inputs=untracked)
    _explicit.update(names)
    return rows


def _results_among(root: Path, paths: Iterable[PathLike]) -> Dict[str, str]:
    """``{name under docs/results: repository-relative path}`` of the results files among
    ``paths``: existing files under ``<root>/docs/results`` that git does not ignore, less the
    manifest."""
    directory = results_dir(root)
    names = {}
    for p in dict.fromkeys(paths):  # a run reopens files (its imports, each epoch's data): resolve each once
        name = _inside(Path(p), directory)
        if name is not None and name != MANIFEST_NAME and Path(p).is_file():
            names[name] = RESULTS_PREFIX + name
    ignored = _ignored(root, sorted(names.values()))
    return {n: r for n, r in names.items() if r not in ignored}


#: the files opened for reading inside the innermost :func:`tracking_reads` block (None: none open)
_reads: Optional[List[str]] = None
_audit_hook_added = False


def _note_read(event: str, args: tuple) -> None:
    """Audit hook: notes each file opened for reading (``open``, ``io.open``, ``os.open``) while
    a :func:`tracking_reads` block is open. Audit hooks cannot be removed, so it does nothing
    outside one."""
    if event != "open" or _reads is None:
        return
    path, mode, flags = (tuple(args) + (None, None, None))[:3]
    if not isinstance(path, (str, os.PathLike)):  # a file descriptor or bytes
        return
    if mode is not None:
        if any(c in str(mode) for c in "wax+"):
            return
    elif isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR):
        return
    _reads.append(os.path.abspath(os.fspath(path)))  # now: the working directory may change


@contextmanager
def tracking_reads() -> Iterator[List[str]]:
    """Yields the list of the files opened for reading inside the block (absolute paths, in
    order, repeats included), through a :func:`sys.addaudithook` hook: pandas, numpy, json
    and torch all open files through Python, so whatever a script reads is seen."""
    global _reads, _audit_hook_added
    if not _audit_hook_added:
        sys.addaudithook(_note_read)
        _audit_hook_added = True
    outer, _reads = _reads, []
    try:
        yield _reads
    finally:
        if outer is not None:
            outer.extend(_reads)
        _reads = outer


@contextmanager
def tracking_writes() -> Iterator[List[Path]]:
    """Yields the list of the files written through :mod:`pyrozoo.atomic` inside the block
    (``atomic_path`` and every writer built on it), each appended once its write succeeded."""
    written: List[Path] = []
    original = atomic.atomic_path

    @contextmanager
    def recording(path):
        with original(path) as tmp:
            yield tmp
        written.append(Path(path))

    atomic.atomic_path = recording
    try:
        yield written
    finally:
        atomic.atomic_path = original


#: set to 1 to note the results files a run reads (:func:`tracking_reads`, an audit hook); an
#: ordinary run installs no hook, and its rows keep the inputs recorded before
READS_VARIABLE = "PYROZOO_RECORD_INPUTS"


def tracking_requested() -> bool:
    """Whether :data:`READS_VARIABLE` asks this process to track its reads."""
    return os.environ.get(READS_VARIABLE, "").strip() not in ("", "0")


@contextmanager
def recording_outputs(argv: Optional[Sequence[str]] = None, root: Optional[PathLike] = None, track_reads: Optional[bool] = None) -> Iterator[None]:
    """Runs the block (an example's ``main``) noting what it writes, and what it reads when
    ``track_reads`` (default :func:`tracking_requested`); on leaving it, even by an exception
    or an interrupt (the files written until then are that command's), upserts the manifest
    rows of the results files among them (:func:`record_outputs`) with the block's wall seconds
    and the results files it read. A failure to record warns and leaves the results as written."""
    started = time.perf_counter()
    _explicit.clear()
    track = tracking_requested() if track_reads is None else track_reads
    read: Optional[List[str]] = None
    try:
        with (tracking_reads() if track else nullcontext()) as read, tracking_writes() as written:
            yield
    finally:
        automatic = [p for p in dict.fromkeys(written) if _inside(p, results_dir(root)) not in _explicit]
        _explicit.clear()
        if automatic:
            record_outputs_or_warn(automatic, argv=argv, seconds=time.perf_counter() - started, root=root, inputs=read)


def record_outputs_or_warn(paths: Iterable[PathLike], **kwargs) -> None:
    """:func:`record_outputs`, where a failure warns instead: the results are written, and
    provenance must not undo the run that wrote them."""
    try:
        record_outputs(paths, **kwargs)
    except Exception as e:  # noqa: BLE001
        warnings.warn(f"the results were written, but their rows in {MANIFEST_NAME} were not: {e}; run tools/results_manifest.py to add them")


# -- listing and checking --------------------------------------------------------------------

def _simple_ignored(relative: Path, patterns: Sequence[Tuple[Path, str]]) -> bool:
    """A rough reading of ``.gitignore`` patterns (name globs, ``dir/``) for a checkout without git."""
    from fnmatch import fnmatch

    for base, pattern in patterns:
        try:
            inner = relative.relative_to(base)
        except ValueError:
            continue
        parts = inner.parts
        if pattern.endswith("/"):
            if any(fnmatch(p, pattern[:-1].strip("/")) for p in parts[:-1]):
                return True
        elif any(fnmatch(p, pattern.strip("/")) for p in parts):
            return True
    return False


def results_files(root: Optional[PathLike] = None) -> List[str]:
    """The results files present under ``docs/results`` that belong in the manifest: tracked or
    not ignored by git (so a new result must be listed before it is committed), less hidden
    files (``.gitignore``, temporaries) and the manifest; paths relative to ``docs/results``.
    Without git, ``.gitignore`` patterns are read roughly."""
    root = Path(root or repo_root()).resolve()
    directory = results_dir(root)
    out = git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "docs/results")
    if out is not None:
        candidates = {Path(p).relative_to("docs/results") for p in out.split("\0") if p}
    else:
        patterns = []
        for ignore in [root / ".gitignore", *directory.rglob(".gitignore")]:
            if ignore.is_file():
                base = ignore.parent.relative_to(root)
                patterns += [(base, line.strip()) for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")]
        candidates = {
            p.relative_to(directory) for p in directory.rglob("*")
            if p.is_file() and not _simple_ignored(p.relative_to(root), patterns)
        }
    return sorted(
        p.as_posix() for p in candidates
        if not any(part.startswith(".") for part in p.parts) and p.as_posix() != MANIFEST_NAME and (directory / p).is_file()
    )


@dataclass
class History:
    """The commits of a checkout that touched results or code: for each, its subject and the
    files it changed, and which commits came after which (ancestry)."""

    root: Path
    subjects: Dict[str, str]
    dates: Dict[str, str]  # committer dates, ISO 8601
    files: Dict[str, Set[str]]
    order: List[str]  # newest first (git log's order)
    parents: Dict[str, List[str]]
    _ancestors: Dict[str, Set[str]] = field(default_factory=dict)

    def last_commit(self, path: str) -> Optional[str]:
        """The newest commit that changed the repository-relative ``path`` (None: never committed)."""
        return next((c for c in self.order if path in self.files[c]), None)

    def commit(self, prefix: str) -> Optional[str]:
        """The full hash of the commit of this history whose hash starts with ``prefix`` (None: none)."""
        return next((c for c in self.parents if c.startswith(prefix)), None)

    def ancestors(self, commit: str) -> Set[str]:
        if commit not in self._ancestors:
            seen, todo = set(), [commit]
            while todo:
                c = todo.pop()
                if c not in seen:
                    seen.add(c)
                    todo += self.parents.get(c, [])
            self._ancestors[commit] = seen
        return self._ancestors[commit]

    def changes_after(self, commit: str, paths: Iterable[str]) -> List[Tuple[str, str]]:
        """``(commit, path)`` for every later commit (reachable from HEAD, not from ``commit``)
        that changed one of ``paths``, newest first."""
        paths = set(paths)
        before = self.ancestors(commit)
        return [(c, p) for c in self.order if c not in before for p in sorted(self.files[c] & paths)]


#: the folders whose history decides staleness: the results, the scripts that write them, the
#: protocol package and the notebooks (``examples`` and ``recipes`` held the scripts and the
#: protocols before issue 43 moved them)
HISTORY_PATHS = ("docs/results", "examples", "reproductions", "studies", "tools", "zoo_protocols", "recipes", "notebooks")


def history(root: Optional[PathLike] = None, paths: Sequence[str] = HISTORY_PATHS) -> Optional[History]:
    """The history of ``paths`` from two git calls, or ``None`` when the checkout has none to
    judge staleness by: no git, no commits, or a shallow clone (whose oldest commit would look
    like it wrote every file)."""
    root = Path(root or repo_root()).resolve()
    shallow = git(root, "rev-parse", "--is-shallow-repository")
    if shallow is None or shallow.strip() != "false":
        return None
    graph = git(root, "rev-list", "--parents", "HEAD")
    log = git(root, "log", "--no-renames", "--name-only", "--format=%x1e%H%x1f%cI%x1f%s", "HEAD", "--", *paths)
    if graph is None or log is None:
        return None
    parents = {line.split()[0]: line.split()[1:] for line in graph.splitlines() if line.strip()}
    subjects, dates, files, order = {}, {}, {}, []
    for record in log.split("\x1e")[1:]:
        header, _, names = record.partition("\n")
        commit, date, subject = header.split("\x1f", 2)
        order.append(commit)
        subjects[commit], dates[commit] = subject, date
        files[commit] = {n for n in names.splitlines() if n}
    return History(root, subjects, dates, files, order, parents)


@dataclass
class Stale:
    """A result committed before a later commit changed what it depends on."""

    file: str
    written: str  # the file's last commit
    changes: List[Tuple[str, str]]  # (commit, path) after it, newest first
    verified: Optional[str] = None  # the later commit its computation was checked at, if any

    def describe(self, history: History, limit: int = 3) -> str:
        commits = list(dict.fromkeys(c for c, _ in self.changes))
        shown = ", ".join(f"{c[:7]} ({', '.join(p for cc, p in self.changes if cc == c)})" for c in commits[:limit])
        more = f" and {len(commits) - limit} more" if len(commits) > limit else ""
        checked = f" (verified at {self.verified[:7]})" if self.verified else ""
        return f"{self.file}: written at {self.written[:7]}{checked}; since then {shown}{more}"


#: a ``verified`` value: the commit, then the command in backquotes
VERIFIED = re.compile(r"^(?P<commit>[0-9a-f]{7,40}) `(?P<command>[^`]+)`$")


def verified_value(commit: str, command: str) -> str:
    """The ``verified`` column for a check that ``command`` gives the same numbers at ``commit``."""
    if "`" in command:
        raise ValueError(f"a verified command cannot contain a backquote: {command!r}")
    return f"{commit[:SHORT_HASH]} `{command}`"


def verified_commit(row: Mapping[str, str], hist: History) -> Optional[str]:
    """The full hash of the row's ``verified`` commit when it is in ``hist`` (None: no check, or
    one at a commit this history does not reach, which then counts for nothing)."""
    match = VERIFIED.match(row.get("verified", "").strip())
    if match is None:
        return None
    return hist.commit(match["commit"])


def staleness(rows: Mapping[str, Mapping[str, str]], hist: History) -> Dict[str, Stale]:
    """The stale rows of a manifest: those whose file's last commit, or its ``verified`` commit
    when that descends from it, is older than a commit that changed a file of their
    ``depends``. A file never committed, or changed since its last commit (being regenerated),
    is not stale: what its last commit holds is no longer what it says."""
    stale = {}
    regenerated = changed_paths(hist.root, ["docs/results"]) or set()
    rank = {c: i for i, c in enumerate(hist.order)}
    for name, row in rows.items():
        written = hist.last_commit(f"docs/results/{name}")
        if written is None or f"docs/results/{name}" in regenerated:
            continue
        code, inputs = code_and_inputs(split_depends(row.get("depends", "")))
        checked = verified_commit(row, hist)
        since = checked if checked is not None and written in hist.ancestors(checked) else written
        changes = hist.changes_after(since, code)
        if inputs:
            # a short run (--verify) checks the code, not the committed results the file was made
            # from; the file's own command writing it again byte for byte read them as they were
            match = VERIFIED.match(row.get("verified", "").strip())
            rerun = match is not None and match["command"] == row.get("command")
            changes = sorted(changes + hist.changes_after(since if rerun else written, inputs), key=lambda cp: (rank[cp[0]], cp[1]))
        if changes:
            stale[name] = Stale(name, written, changes, since if since != written else None)
    return stale


@dataclass
class Report:
    """What :func:`check_manifest` found. ``problems`` fail the check; the rest informs."""

    listed: int
    missing: List[str]  # listed, not on disk
    unlisted: List[str]  # results files without a row
    incomplete: List[str]  # rows without a command, commit, device, depends or valid settings
    unknown_depends: List[str]  # rows naming a depends file that does not exist
    stale: Dict[str, Stale]  # all stale rows, waived or not (empty without history)
    waived: List[str]  # stale rows with a waiver
    unwaived: List[str]  # stale rows without one
    needless_waivers: List[str]  # waivers on rows that are not stale
    history_available: bool

    @property
    def problems(self) -> List[str]:
        return (
            [f"listed but missing: {f}" for f in self.missing]
            + [f"not listed: {f}" for f in self.unlisted]
            + [f"incomplete row: {f}" for f in self.incomplete]
            + [f"depends on a file that does not exist: {f}" for f in self.unknown_depends]
            + [f"stale without a waiver: {f}" for f in self.unwaived]
        )


def check_manifest(root: Optional[PathLike] = None, rows: Optional[Mapping[str, Mapping[str, str]]] = None, hist: Optional[History] = None, *, use_history: bool = True) -> Report:
    """Checks the manifest (``rows``, default: the one on disk) against the results folder and
    the history (default: :func:`history`; ``use_history=False`` skips staleness)."""
    root = Path(root or repo_root()).resolve()
    rows = read_manifest(manifest_path(root)) if rows is None else rows
    present = set(results_files(root))
    directory = results_dir(root)
    missing = sorted(f for f in rows if not (directory / f).is_file())
    unlisted = sorted(present - set(rows))
    incomplete, unknown = [], []
    for name, row in sorted(rows.items()):
        try:
            settings_ok = isinstance(json.loads(row.get("settings") or "null"), dict)
        except ValueError:
            settings_ok = False
        if not all(row.get(c) for c in ("command", "commit", "device", "depends", "created", "source")) or not settings_ok:
            incomplete.append(name)
        if any(not (root / p).is_file() for p in split_depends(row.get("depends", ""))):
            unknown.append(name)
    hist = (history(root) if hist is None else hist) if use_history else None
    stale = staleness(rows, hist) if hist is not None else {}
    waived = sorted(f for f in stale if rows[f].get("waiver", "").strip())
    unwaived = sorted(f for f in stale if not rows[f].get("waiver", "").strip())
    needless = sorted(f for f, row in rows.items() if row.get("waiver", "").strip() and f not in stale) if hist is not None else []
    return Report(len(rows), missing, unlisted, incomplete, unknown, stale, waived, unwaived, needless, hist is not None)


__all__ = [
    "COLUMNS", "OLD_COLUMNS", "VERIFIED", "MANIFEST_NAME", "SOURCE_COMMIT_VARIABLE", "INFRASTRUCTURE", "repo_root", "results_dir", "manifest_path", "git", "head_commit",
    "changed_paths", "modified", "commit_label", "read_manifest", "parse_manifest", "manifest_text", "write_manifest", "update", "upsert", "recipe_imports",
    "depends_of", "split_depends", "code_and_inputs", "RESULTS_PREFIX", "READS_VARIABLE", "tracking_requested", "tracking_reads", "settings_from_argv",
    "device_label", "command_line", "now_iso", "record_outputs", "record_outputs_or_warn", "declared_threads",
    "tracking_writes", "recording_outputs", "results_files", "History", "history", "Stale", "verified_value", "verified_commit", "staleness", "Report",
    "check_manifest",
]
