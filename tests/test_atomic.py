"""pyrozoo.atomic: a results file is either its old self or complete, never half-written; and
every results file of the examples, the recipes and pyrozoo goes through it."""

import ast
import errno
import json
from pathlib import Path

import pandas as pd
import pytest

from pyrozoo import atomic
from tests.runner import SCRIPT_FOLDERS

ROOT = Path(__file__).resolve().parents[1]


def _old_table(tmp_path):
    path = tmp_path / "results" / "runs.csv"
    path.parent.mkdir()
    pd.DataFrame({"split": [0, 1], "rmse": [3.0, 3.5]}).to_csv(path, index=False)
    return path, path.read_bytes()


def _leftovers(directory):
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_write_csv_replaces_the_file_and_leaves_no_temporary(tmp_path):
    path, _ = _old_table(tmp_path)
    new = pd.DataFrame({"split": [0, 1, 2], "rmse": [3.0, 3.5, 2.5]})
    assert atomic.write_csv(new, path) == path
    pd.testing.assert_frame_equal(pd.read_csv(path), new)
    assert _leftovers(path.parent) == []
    # a folder that does not exist yet is made
    assert atomic.write_text(tmp_path / "new" / "deeper" / "notes.md", "# t\n").read_text() == "# t\n"


def test_a_full_disk_mid_write_leaves_the_old_file_and_names_the_file(tmp_path, monkeypatch):
    """The reported failure: the disk filled while the runs CSV was rewritten. The CSV keeps
    its previous rows (not a truncated one), the error names it, and no temporary is left."""
    path, before = _old_table(tmp_path)

    def half_then_full_disk(self, target, *args, **kwargs):
        Path(target).write_text("split,rmse\n0,3.0\n1,3.5\n2,2.")  # half a row, then ENOSPC
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_full_disk)
    with pytest.raises(OSError) as info:
        atomic.write_csv(pd.DataFrame({"split": [0, 1, 2], "rmse": [3.0, 3.5, 2.5]}), path)
    assert str(path) in str(info.value) and "No space left on device" in str(info.value)
    assert info.value.errno == errno.ENOSPC
    assert path.read_bytes() == before and _leftovers(path.parent) == []


@pytest.mark.parametrize("failing", ["os.fsync", "os.replace"])
def test_a_failed_flush_or_rename_leaves_the_old_file(tmp_path, monkeypatch, failing):
    path, before = _old_table(tmp_path)

    def fail(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic.os, failing.split(".")[1], fail)
    with pytest.raises(OSError, match="could not write .*runs.csv"):
        atomic.write_csv(pd.DataFrame({"split": [9], "rmse": [9.0]}), path)
    assert path.read_bytes() == before and _leftovers(path.parent) == []


def test_an_interrupted_write_leaves_the_old_file_and_its_exception(tmp_path):
    """Not only I/O errors: an exception (or Ctrl-C) in the middle of writing keeps the old file."""
    path = tmp_path / "summary.json"
    atomic.write_json(path, {"rmse": 3.0})
    with pytest.raises(KeyboardInterrupt):
        with atomic.atomic_path(path) as tmp:
            tmp.write_text('{"rmse": ')
            raise KeyboardInterrupt
    assert json.loads(path.read_text()) == {"rmse": 3.0} and _leftovers(tmp_path) == []


def test_save_figure_keeps_the_old_figure_when_saving_fails(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    path = atomic.save_figure(fig, tmp_path / "plot.png")
    before = path.read_bytes()
    assert before.startswith(b"\x89PNG")

    def broken_savefig(target, **kwargs):
        Path(target).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    fig.savefig = broken_savefig
    with pytest.raises(OSError, match="plot.png"):
        atomic.save_figure(fig, path)
    plt.close(fig)
    assert path.read_bytes() == before and _leftovers(tmp_path) == []


# -- the rule: no results file is written around pyrozoo.atomic ------------------------------

#: method names that write a file in place (a reader could see it half-written)
WRITERS = {"to_csv", "to_json", "to_parquet", "to_pickle", "savefig", "write_text", "write_bytes", "dump"}
#: modules allowed to write directly: the atomic writers themselves
ALLOWED = {"pyrozoo/atomic.py"}


def _direct_writes(path: Path):
    """``(line, call)`` of every in-place write in ``path``: the calls of :data:`WRITERS`
    (``json.dump`` but not ``json.dumps``) and ``open(..., "w" / "a" / "x")``. A call whose
    target is a temporary of :func:`pyrozoo.atomic.atomic_path` (``with atomic_path(p) as tmp``)
    is atomic and allowed."""
    tree = ast.parse(path.read_text(), str(path))
    temporaries = {
        item.optional_vars.id
        for node in ast.walk(tree) if isinstance(node, ast.With)
        for item in node.items
        if isinstance(item.optional_vars, ast.Name) and isinstance(item.context_expr, ast.Call)
        and getattr(item.context_expr.func, "attr", getattr(item.context_expr.func, "id", None)) == "atomic_path"
    }

    # pyrozoo.atomic's own writers (``atomic.write_text``, or imported from it by name)
    atomic_names = {"atomic"} | {
        alias.asname or alias.name
        for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "pyrozoo.atomic"
        for alias in node.names
    }

    def mentions_temporary(node):
        return any(isinstance(n, ast.Name) and n.id in temporaries for arg in node.args for n in ast.walk(arg)) or (
            isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id in temporaries
        )

    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        receiver = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
        if receiver in atomic_names or (isinstance(func, ast.Name) and name in atomic_names):
            continue
        if name in WRITERS and not mentions_temporary(node):
            found.append((node.lineno, ast.unparse(node)[:80]))
        elif name == "open":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            if isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax") and not mentions_temporary(node):
                found.append((node.lineno, ast.unparse(node)[:80]))
    return found


def test_the_rule_check_finds_direct_writes(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import json\n"
        "from pyrozoo import atomic\n"
        "df.to_csv(out, index=False)\n"               # 3: found
        "Path(p).write_text(json.dumps(x))\n"         # 4: found
        "fig.savefig(path)\n"                         # 5: found
        "json.dump(x, f)\n"                           # 6: found
        "with open(p, 'w') as f:\n    pass\n"         # 7: found
        "with open(p) as f:\n    pass\n"              # read: not found
        "print(json.dumps(x))\n"                      # not a write
        "atomic.write_csv(df, out)\n"                 # atomic
        "atomic.write_text(p, json.dumps(x))\n"       # atomic
        "with atomic.atomic_path(p) as tmp:\n    torch.save(x, tmp)\n    tmp.write_text('x')\n"
    )
    assert [line for line, _ in _direct_writes(sample)] == [3, 4, 5, 6, 7]


def test_scripts_protocols_and_pyrozoo_write_results_only_through_atomic():
    """Every CSV, Markdown, JSON and figure the scripts, the protocols and the package write goes
    through :mod:`pyrozoo.atomic` (a full disk or a kill then leaves the previous file, never
    half of a new one, for ``--resume`` to take as a result)."""
    files = sorted(p for folder in (*SCRIPT_FOLDERS, ROOT / "zoo_protocols", ROOT / "pyrozoo") for p in folder.glob("**/*.py"))
    assert any(path.parent.name == "zoo_protocols" for path in files)
    assert len(files) > 50
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {call}"
        for path in files if path.relative_to(ROOT).as_posix() not in ALLOWED
        for line, call in _direct_writes(path)
    ]
    assert not offenders, "write these through pyrozoo.atomic:\n" + "\n".join(offenders)
