"""pyrozoo's parts depend on each other in one direction only.

The parts are the subpackages (``pyrozoo.guides``, ``pyrozoo.compression``, ...), each
top-level module (``pyrozoo.utils``, ...) and the package root (``pyrozoo/__init__.py``).
Every import is counted, including those inside functions (which hide a cycle from the
interpreter but not from a reader), relative ones and ``importlib.import_module("pyrozoo...")``
with a literal name. A cycle between parts fails the test, naming the imports that make it.
"""

import ast
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set, Tuple

LIBRARY = Path(__file__).resolve().parents[1] / "pyrozoo"

#: part -> {part it imports: [(file, line), ...]}
Graph = Dict[str, Dict[str, List[Tuple[str, int]]]]


def _module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str, root: Path) -> bool:
    """Whether ``name`` (dotted, starting with the package's name) is a module or package under ``root``."""
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    target = root / rel
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def imported_modules(path: Path, root: Path) -> List[Tuple[str, int]]:
    """``(module, line)`` of every module of the package ``root`` that the file imports, anywhere in it."""
    package = root.name
    module = _module_of(path, root)
    # the package a relative import starts from
    here = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from pyrozoo import atomic`` imports the module pyrozoo.atomic
                sub = f"{source}.{alias.name}"
                found.append((sub if _is_module(sub, root) else source, node.lineno))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append((first.value, node.lineno))
    return [(name, line) for name, line in found if name == package or name.startswith(package + ".")]


def part_of(module: str) -> str:
    """``pyrozoo.guides.base`` -> ``pyrozoo.guides``; ``pyrozoo.utils`` -> itself; ``pyrozoo`` -> itself."""
    return ".".join(module.split(".")[:2])


def import_graph(root: Path = LIBRARY) -> Graph:
    graph: Graph = defaultdict(lambda: defaultdict(list))
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        source = part_of(_module_of(path, root))
        graph[source]  # every part is a node, even one that imports nothing
        for name, line in imported_modules(path, root):
            target = part_of(name)
            if target != source:
                graph[source][target].append((str(path.relative_to(root.parent)), line))
    return graph


def cycles(graph: Graph) -> List[List[str]]:
    """The strongly connected components with more than one part (Tarjan), each sorted."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out = []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def describe(graph: Graph, component: List[str]) -> str:
    lines = []
    for a in component:
        for b in component:
            for file, line in graph.get(a, {}).get(b, []):
                lines.append(f"  {a} -> {b}: {file}:{line}")
    return "\n".join(lines)


def test_no_cycle_between_the_parts_of_the_package():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles between pyrozoo's parts:\n" + "\n".join(describe(graph, c) for c in found)


def test_compression_builds_on_guides_not_the_reverse():
    graph = import_graph()
    assert "pyrozoo.guides" in graph["pyrozoo.compression"]  # graves.py prunes mean-field guides
    assert "pyrozoo.compression" not in graph["pyrozoo.guides"], describe(graph, ["pyrozoo.guides", "pyrozoo.compression"])


def _write(root: Path, files: Dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_checker_sees_function_local_and_relative_imports(tmp_path):
    package = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/util.py": "",
        "pkg/a/__init__.py": "from .core import f\n",
        "pkg/a/core.py": "from .. import util\n\ndef f():\n    from pkg.b.mod import g\n    return g\n",
        "pkg/b/__init__.py": "",
        "pkg/b/mod.py": "import importlib\n\ndef g():\n    return importlib.import_module('pkg.a')\n",
        "pkg/c.py": "from pkg.util import *\n",
    })
    graph = import_graph(package)
    assert set(graph["pkg.a"]) == {"pkg.util", "pkg.b"}
    assert graph["pkg.a"]["pkg.b"] == [("pkg/a/core.py", 4)]
    assert set(graph["pkg.b"]) == {"pkg.a"}
    assert set(graph["pkg.c"]) == {"pkg.util"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    (package / "b" / "mod.py").write_text("def g():\n    return None\n")
    assert cycles(import_graph(package)) == []


def test_no_exported_name_shadows_a_submodule():
    """A name in a package's ``__all__`` that is also one of its submodules makes
    ``pkg.name`` the one or the other depending on what was imported first."""
    import importlib
    import pkgutil

    import pyrozoo

    clashes = []
    for info in pkgutil.walk_packages(pyrozoo.__path__, "pyrozoo."):
        if not info.ispkg:
            continue
        package = importlib.import_module(info.name)
        submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        clashes += [f"{info.name}.{name}" for name in getattr(package, "__all__", ()) if name in submodules]
    assert not clashes, clashes
