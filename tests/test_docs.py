"""The documentation site (``make docs``) covers the library.

The fast tests read the sources of the site in pure Python: every public name of pyrozoo (each
subpackage's ``__all__``, the public functions and classes of the top-level modules, and
``pyrozoo.save`` / ``pyrozoo.load``) is listed on an API reference page (``docs/api/*.rst``),
every listed name exists, every public function and class has a docstring, and the pages'
links to results tables, figures and notebooks point at files that exist. The slow test runs
the Sphinx build itself with warnings as errors, as ``make docs`` does.
"""

import importlib
import inspect
import pkgutil
import re
import runpy
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

import pyrozoo

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
API = DOCS / "api"


def _module_public_names(module):
    """``__all__``, or, for a module without one, the functions and classes it defines whose
    names do not start with an underscore."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, obj in vars(module).items() if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__]


def public_names():
    """``{dotted name: object}`` of everything the library exports."""
    names = {f"pyrozoo.{name}": getattr(pyrozoo, name) for name in ("save", "load")}
    for info in pkgutil.iter_modules(pyrozoo.__path__):
        module = importlib.import_module(f"pyrozoo.{info.name}")
        if info.ispkg and not hasattr(module, "__all__"):
            raise AssertionError(f"package pyrozoo.{info.name} has no __all__: list its public names")
        for name in _module_public_names(module):
            names[f"{module.__name__}.{name}"] = getattr(module, name)
    return names


#: docs/api_exports.py, which the build runs too (docs/conf.py)
EXPORTS = types.SimpleNamespace(**runpy.run_path(str(DOCS / "api_exports.py")))
_resolve = EXPORTS.resolve


def documented_names():
    """``(page, dotted name)`` of every name the API pages document: those their
    ``autosummary`` tables list, and the exported names the build appends to their package's
    page (``docs/api_exports.py``)."""
    names = [(page.name, name) for page in sorted(API.glob("*.rst")) for name in EXPORTS.listed_in(page.read_text())]
    names += [(f"{page}.rst (appended)", name) for page, rest in EXPORTS.unlisted().items() for name in rest]
    return names


def test_an_unlisted_export_is_appended_to_its_package_page():
    pages = {p.stem: p.read_text() for p in sorted(API.glob("*.rst"))}
    before = EXPORTS.unlisted(pages)
    pages["guides"] = pages["guides"].replace("   MeanFieldNormalGuide\n", "")
    found = EXPORTS.unlisted(pages)
    assert set(found["guides"]) - set(before.get("guides", [])) == {"pyrozoo.guides.MeanFieldNormalGuide"}
    assert {k: v for k, v in found.items() if k != "guides"} == {k: v for k, v in before.items() if k != "guides"}
    section = EXPORTS.appended_section(found["guides"])
    assert ".. autoclass:: pyrozoo.guides.MeanFieldNormalGuide" in section and "Also exported" in section


def test_api_pages_exist():
    assert (API / "index.rst").is_file() and len(documented_names()) > 100


def test_every_documented_name_exists():
    missing = [f"{page}: {name}" for page, name in documented_names() if _resolve(name) is None]
    assert not missing, f"the API reference lists names that do not exist (renamed or removed?): {missing}"


def test_no_documented_name_is_a_deprecated_alias():
    """A former name (served with a FutureWarning) is not documented in place of the new one."""
    import warnings

    deprecated = []
    for page, name in documented_names():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _resolve(name)
        if any(issubclass(w.category, FutureWarning) for w in caught):
            deprecated.append(f"{page}: {name}")
    assert not deprecated, deprecated


def test_every_public_name_is_documented():
    documented = {id(_resolve(name)) for _, name in documented_names()}
    undocumented = sorted(name for name, obj in public_names().items() if id(obj) not in documented)
    assert not undocumented, (
        "public names missing from the API reference: add each to the autosummary table of its package's page in "
        f"docs/api/ (after the '.. currentmodule::' of the package or module): {undocumented}"
    )


def test_every_public_function_and_class_has_a_docstring():
    bare = sorted(
        name
        for name, obj in public_names().items()
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and obj.__module__.startswith("pyrozoo") and not (obj.__doc__ or "").strip()
    )
    assert not bare, f"public functions and classes without a docstring (make docs fails on them): {bare}"


def test_api_pages_are_in_the_index():
    index = (API / "index.rst").read_text()
    pages = {p.stem for p in API.glob("*.rst")} - {"index"}
    assert {p for p in pages if not re.search(rf"^\s+{re.escape(p)}\s*$", index, flags=re.M)} == set()


_LINK = re.compile(r"\]\(([^)#\s]+)")
_DOC_ROLE = re.compile(r"\{doc\}`([^`]+)`")


@pytest.mark.parametrize("page", sorted(DOCS.glob("methods/*.md")) + [DOCS / "tutorials.md"], ids=lambda p: p.stem)
def test_page_links_point_at_files(page):
    text = page.read_text()
    targets = [t for t in _LINK.findall(text) if "://" not in t]
    missing = [t for t in targets if not (page.parent / t).resolve().is_file()]
    # notebooks are documents of the site under docs/notebooks/, copied from notebooks/ at build time
    docs = [t for t in _DOC_ROLE.findall(text)]
    notebooks = [d.split("notebooks/", 1)[1] for d in docs if "notebooks/" in d]
    missing += [d for d in notebooks if not (ROOT / "notebooks" / f"{d}.ipynb").is_file()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_every_notebook_is_a_tutorial_page():
    toctree = (DOCS / "tutorials.md").read_text()
    listed = set(re.findall(r"^notebooks/(\S+)\s*$", toctree, flags=re.M))
    assert listed == {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}


def test_every_source_work_has_a_method_page():
    pages = {p.stem for p in DOCS.glob("methods/*.md")}
    assert pages == {"toronto_deck", "radial_directional", "molchanov_thesis", "sgmcmc_sa", "importance_weighted"}
    index = (DOCS / "index.md").read_text()
    assert all(f"methods/{p}" in index for p in pages)


def _has_sphinx():
    return all(importlib.util.find_spec(name) is not None for name in ("sphinx", "furo", "myst_nb"))


@pytest.mark.slow
@pytest.mark.skipif(not _has_sphinx(), reason="needs the docs extra: pip install -e .[docs]")
def test_sphinx_build_has_no_warnings(tmp_path):
    """What ``make docs`` runs, into a temporary folder: any warning fails."""
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    page = (out / "api" / "inference.html").read_text()
    assert "ClosedFormKL_ELBO" in page and (out / "notebooks" / "tutorial_sgmcmc.html").is_file()
    shutil.rmtree(out, ignore_errors=True)
