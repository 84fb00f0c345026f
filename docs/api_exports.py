"""Which exported names the API pages list, and the section that documents the rest.

Each package's page (``docs/api/<package>.rst``) groups its names by module in ``autosummary``
tables written by hand. A name a package exports that no page lists yet -- a new guide, say --
is documented all the same: the build appends it to its package's page, under "Also exported"
(``docs/conf.py`` connects :func:`appended_section` to Sphinx's ``source-read``), so adding a
piece to the library needs no edit of the documentation to be documented. ``tests/test_docs.py``
reads the same lists.
"""

import importlib
import re
from pathlib import Path
from typing import Dict, List, Optional

API = Path(__file__).resolve().parent / "api"

_CURRENT = re.compile(r"^\.\. currentmodule:: (\S+)\s*$")
_AUTOSUMMARY = re.compile(r"^\.\. autosummary::\s*$")


def listed_in(text: str) -> List[str]:
    """The dotted names of the ``autosummary`` tables of one page (each entry under the
    ``currentmodule`` before it)."""
    names = []
    current, in_table = None, False
    for line in text.splitlines():
        match = _CURRENT.match(line)
        if match:
            current, in_table = match.group(1), False
        elif _AUTOSUMMARY.match(line):
            in_table = True
        elif in_table and line.startswith("   ") and not line.strip().startswith(":") and line.strip():
            names.append(f"{current}.{line.strip()}")
        elif in_table and line.strip() and not line.startswith(" "):
            in_table = False
    return names


def resolve(name: str):
    """The object ``name`` names as Sphinx reads an autosummary entry: an attribute of its
    parent module, else a module (``None``: neither)."""
    parent, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(parent), attr)
    except (ImportError, AttributeError, ValueError):
        pass
    try:
        import pkgutil

        return pkgutil.resolve_name(name)
    except (ImportError, AttributeError, ValueError):
        return None


def package_of(page: str) -> Optional[str]:
    """The package a page documents (``guides`` -> ``pyrozoo.guides``), ``None`` for the pages
    that document no one package (top-level modules, supporting modules, compression rules)."""
    try:
        module = importlib.import_module(f"pyrozoo.{page}")
    except ImportError:
        return None
    return module.__name__ if hasattr(module, "__path__") and hasattr(module, "__all__") else None


def unlisted(pages: Optional[Dict[str, str]] = None) -> Dict[str, List[str]]:
    """``{page: [exported names of its package that no page lists]}`` (``pages``: ``{page stem:
    text}``, default the files of ``docs/api``). An object listed under any name counts as
    listed (a class documented under its module is not listed again under its package)."""
    if pages is None:
        pages = {p.stem: p.read_text() for p in sorted(API.glob("*.rst"))}
    listed = {id(resolve(n)) for text in pages.values() for n in listed_in(text)}
    found = {}
    for page in pages:
        package = package_of(page)
        if package is None:
            continue
        module = importlib.import_module(package)
        rest = [f"{package}.{n}" for n in module.__all__ if id(getattr(module, n)) not in listed]
        if rest:
            found[page] = rest
    return found


def appended_section(names: List[str]) -> str:
    """The reStructuredText documenting ``names`` (dotted) in place, at the end of a page."""
    lines = ["", "", "Also exported", "-------------", "",
             "Names the package exports that the sections above do not list yet.", ""]
    for name in names:
        obj = resolve(name)
        directive = "autoclass" if isinstance(obj, type) else "autofunction" if callable(obj) else "autodata"
        lines += [f".. {directive}:: {name}", ""]
    return "\n".join(lines) + "\n"


__all__ = ["listed_in", "resolve", "package_of", "unlisted", "appended_section"]
