"""The library knows no repository layout: protocols, paper tables, published numbers and the
scripts' command line live in ``zoo_protocols/`` (a repository-only package, outside the library and
not installed by ``pip install .``), results and data folders are arguments, and no script puts
folders on ``sys.path``."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests import runner

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
    """``(line, module)`` of every import of :mod:`zoo_protocols` (statements, and ``import_module("zoo_protocols...")``)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "zoo_protocols"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "zoo_protocols":
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.split(".")[0] == "zoo_protocols":
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
        "import zoo_protocols.uci\n"                                   # 2
        "from zoo_protocols import cli\n"                              # 3
        "# from zoo_protocols import x: a comment is not code\n"
        "DEFAULT = Path('docs') / 'results'\n"                   # 5
        "where = root / 'shared' / 'data'\n"                     # 6
        "other = 'docs/results/x.csv'\n"                         # 7
        "m = importlib.import_module('zoo_protocols.compare')\n"       # 8
        "sys.path.insert(0, here)\n"                             # 9
        "fine = root / 'docs' / 'index.md'\n"
        "deep = base / 'shared' / 'data' / 'uci'\n"                # 11
        "def f():\n    '''Reads shared/data/uci.'''\n"
    )
    assert [line for line, _ in recipe_imports(sample)] == [2, 3, 8]
    assert sorted(line for line, _ in layout_mentions(sample)) == [5, 6, 7, 11]
    assert [line for line, _ in sys_path_edits(sample)] == [9]


def test_the_library_imports_no_protocols_and_names_no_repository_layout():
    assert not (LIBRARY / "experiments").exists(), "experiment protocols live in zoo_protocols/, outside the library"
    assert not (LIBRARY / "cli.py").exists(), "the examples' command line lives in zoo_protocols/cli.py"
    modules = _modules(LIBRARY)
    assert len(modules) > 50
    offenders = []
    for path in modules:
        source = path.read_text()
        name = path.relative_to(ROOT)
        offenders += [f"{name}:{line}: imports {module}" for line, module in recipe_imports(source, str(path))]
        offenders += [f"{name}:{line}: names the repository layout: {text!r}" for line, text in layout_mentions(source, str(path))]
    assert not offenders, "the library takes paths as arguments:\n" + "\n".join(offenders)


#: the folders of scripts and of the repository-only package (the benchmarks load their shared
#: timing helper from beside them, by path)
SCRIPT_FOLDERS = (*(folder.name for folder in runner.SCRIPT_FOLDERS), "zoo_protocols")


def test_scripts_and_protocols_edit_no_sys_path():
    """Scripts import ``pyrozoo`` and ``zoo_protocols`` as installed (``scripts/setup.sh`` puts the
    checkout on the environment's path), never a folder put on ``sys.path`` by the script."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {code}"
        for folder in SCRIPT_FOLDERS
        for path in _modules(ROOT / folder)
        for line, code in sys_path_edits(path.read_text(), str(path))
    ]
    assert not offenders, "\n".join(offenders)


def _packaging():
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_pip_install_installs_pyrozoo_and_nothing_else():
    """The packages ``pip install .`` would install (setuptools' search with the project's own
    configuration) are ``pyrozoo`` and its subpackages only, with no package data of others."""
    import setuptools

    config = _packaging()
    found = setuptools.find_packages(str(ROOT), **config["packages"]["find"])
    assert "pyrozoo" in found and "pyrozoo.guides" in found
    assert {name.split(".")[0] for name in found} == {"pyrozoo"}, sorted(found)
    assert {name.split(".")[0] for name in config.get("package-data", {})} <= {"pyrozoo"}
    for folder in SCRIPT_FOLDERS:
        assert folder not in found


def test_zoo_protocols_is_importable_from_the_checkout_with_its_paper_tables(tmp_path):
    """In the environment ``scripts/setup.sh`` made, ``import zoo_protocols`` works from any folder
    and comes from this checkout, whose paper tables it reads as files."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import importlib.resources, zoo_protocols\n"
        "print(zoo_protocols.__file__)\n"
        "print(sorted(p.name for p in importlib.resources.files('zoo_protocols').joinpath('data').iterdir() if p.name.endswith('.csv')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, "zoo_protocols is not importable: run scripts/setup.sh (it puts the checkout on the environment's path)\n" + done.stderr[-800:]
    out = done.stdout.splitlines()
    assert Path(out[0]).resolve() == ROOT / "zoo_protocols" / "__init__.py"
    assert out[1] == str(["deng2019_uci.csv", "sagar2020_withdrawn.csv"])


def test_ci_tests_the_lowest_pyro_the_project_allows():
    """The floor of pyro-ppl in pyproject.toml is the version ``make test-pyro-lowest`` installs,
    and CI runs that target (the newest Pyro is what ``make test`` gets)."""
    import re

    floor = re.search(r'"pyro-ppl>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    lowest = re.search(r"^PYRO_LOWEST \?= ([0-9.]+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert floor == lowest
    assert "make test-pyro-lowest" in (ROOT / ".ci" / "run").read_text()
