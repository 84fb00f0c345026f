"""The library knows no repository layout: protocols, paper tables, published numbers and the
examples' command line live in ``recipes/`` (outside the package), results and data folders are
arguments, and nothing puts folders on ``sys.path``."""

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "pyrozoo"
#: repository folders the library must not name (as a string or as a ``Path / "..."`` chain)
LAYOUT = ("docs/results", "shared/data")


def _modules(folder: Path):
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _docstrings(tree) -> set:
    """The ids of the module, class and function docstring nodes (prose may name the layout)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _path_chain(node) -> list:
    """The string pieces of ``a / "b" / "c"`` (``Path("docs") / "results"`` gives ``["docs", "results"]``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _path_chain(node.left) + _path_chain(node.right)
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in ("Path", "PurePath") and node.args:
        return _path_chain(node.args[0])
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []


def layout_mentions(source: str, filename: str = "<source>") -> list:
    """``(line, text)`` of every place ``source`` names a repository folder of :data:`LAYOUT` in
    code: a string constant other than a docstring (comments are not code), or a path built
    piece by piece (``root / "shared" / "data"``)."""
    tree = ast.parse(source, filename)
    docstrings = _docstrings(tree)
    # a chain ``a / b / c`` is checked whole, once: not again as its part ``a / b``
    inner = {id(n.left) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value.replace("\\", "/")
            if any(folder in text for folder in LAYOUT):
                found.append((node.lineno, node.value))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and id(node) not in inner:
            joined = "/" + "/".join(piece.strip("/") for piece in _path_chain(node)) + "/"
            if any(f"/{folder}/" in joined for folder in LAYOUT):
                found.append((node.lineno, ast.unparse(node)))
    return found


def recipe_imports(source: str, filename: str = "<source>") -> list:
    """``(line, module)`` of every import of :mod:`recipes` (statements, and ``import_module("recipes...")``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "recipes"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "recipes":
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.split(".")[0] == "recipes":
                found.append((node.lineno, first.value))
    return found


def sys_path_edits(source: str, filename: str = "<source>") -> list:
    """``(line, code)`` of every use of ``sys.path`` (inserting a folder to import from it)."""
    return [
        (node.lineno, ast.unparse(node))
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id == "sys"
    ]


def test_the_checks_find_what_they_look_for():
    sample = (
        '"""Writes to docs/results (a docstring may say so)."""\n'
        "import recipes.uci\n"                                   # 2
        "from recipes import cli\n"                              # 3
        "# from recipes import x: a comment is not code\n"
        "DEFAULT = Path('docs') / 'results'\n"                   # 5
        "where = root / 'shared' / 'data'\n"                     # 6
        "other = 'docs/results/x.csv'\n"                         # 7
        "m = importlib.import_module('recipes.compare')\n"       # 8
        "sys.path.insert(0, here)\n"                             # 9
        "fine = root / 'docs' / 'index.md'\n"
        "deep = base / 'shared' / 'data' / 'uci'\n"                # 11
        "def f():\n    '''Reads shared/data/uci.'''\n"
    )
    assert [line for line, _ in recipe_imports(sample)] == [2, 3, 8]
    assert sorted(line for line, _ in layout_mentions(sample)) == [5, 6, 7, 11]
    assert [line for line, _ in sys_path_edits(sample)] == [9]


def test_the_library_has_no_recipes_and_no_repository_layout():
    assert not (LIBRARY / "experiments").exists(), "experiment protocols live in recipes/, outside the library"
    assert not (LIBRARY / "cli.py").exists(), "the examples' command line lives in recipes/cli.py"
    modules = _modules(LIBRARY)
    assert len(modules) > 50
    offenders = []
    for path in modules:
        source = path.read_text()
        name = path.relative_to(ROOT)
        offenders += [f"{name}:{line}: imports {module}" for line, module in recipe_imports(source, str(path))]
        offenders += [f"{name}:{line}: names the repository layout: {text!r}" for line, text in layout_mentions(source, str(path))]
    assert not offenders, "the library takes paths as arguments:\n" + "\n".join(offenders)


def test_examples_and_recipes_edit_no_sys_path():
    """Examples and tools import the installed ``pyrozoo`` and ``recipes``, never a folder put on ``sys.path``."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {code}"
        for folder in ("examples", "recipes", "tools")
        for path in _modules(ROOT / folder)
        for line, code in sys_path_edits(path.read_text(), str(path))
    ]
    assert not offenders, "\n".join(offenders)


def test_recipes_is_installed_with_its_paper_tables(tmp_path):
    """``import recipes`` works from any folder (the project installs it beside pyrozoo), and
    its paper tables are package data."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import importlib.resources, recipes\n"
        "print(recipes.__file__)\n"
        "print(sorted(p.name for p in importlib.resources.files('recipes').joinpath('data').iterdir() if p.name.endswith('.csv')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
    assert Path(out[0]).resolve() == ROOT / "recipes" / "__init__.py"
    assert out[1] == str(["deng2019_uci.csv", "sagar2020_withdrawn.csv"])
