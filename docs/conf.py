"""Sphinx configuration of the pyrozoo documentation site (``make docs``).

Pages are Markdown (MyST) and reStructuredText; the tutorial notebooks in ``notebooks/`` are
rendered from their committed outputs (they are never executed by the docs build); the API
reference is generated from the docstrings of every name in each package's ``__all__``
(``docs/api/*.rst``, kept complete by ``tests/test_docs.py``). Warnings are errors in
``make docs``: a broken cross-reference to a pyrozoo name, a docstring that is not valid
reStructuredText, or a public object without a docstring fails the build.
"""

import inspect
import pkgutil
import re
import runpy
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # pyrozoo is normally installed (pip install -e .); this covers a bare checkout

import pyrozoo  # noqa: E402

project = "pyrozoo"
author = "the pyrozoo developers"
copyright = "the pyrozoo developers"
release = version = pyrozoo.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_nb",
]

html_theme = "furo"
html_title = f"pyrozoo {version}"
templates_path = ["_templates"]
# importance_weighted_objectives.md is included by its method page (methods/importance_weighted.md)
exclude_patterns = ["_build", "**.ipynb_checkpoints", "importance_weighted_objectives.md"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# The notebooks live in notebooks/ (outside the source folder); each build copies the ones that
# changed into docs/notebooks/ (ignored by git), where the tutorials page finds them.
NOTEBOOKS = DOCS / "notebooks"
NOTEBOOKS.mkdir(exist_ok=True)
_sources = {p.name: p for p in (ROOT / "notebooks").glob("*.ipynb")}
for _copy in NOTEBOOKS.glob("*.ipynb"):
    if _copy.name not in _sources:
        _copy.unlink()
for _name, _source in sorted(_sources.items()):
    _copy = NOTEBOOKS / _name
    if not _copy.exists() or _copy.read_bytes() != _source.read_bytes():
        _copy.write_bytes(_source.read_bytes())

# notebooks: rendered from their committed outputs (the test suite executes them)
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3

# API reference
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_inherit_docstrings = False  # the docstrings of torch/pyro base methods are not ours to check
add_module_names = False

# Broken references to pyrozoo names fail the build; references into other projects (torch,
# pyro, numpy, the standard library) have no target here (no intersphinx: the build is offline).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!pyrozoo\b)\w+\..*"),
]


_MULTI_PARAM = re.compile(r"^(\s*):param\s+((?:[^:\s]+\s+)?)(\w+(?:\s*,\s*\w+)+):(.*)$")


def _split_multi_params(app, what, name, obj, options, lines):
    """``:param x, y: the data`` (the house style for parameters described together) as one
    field per name, which is what Sphinx's field lists understand (it would otherwise read
    ``x,`` as the type of ``y``)."""
    for i in range(len(lines) - 1, -1, -1):
        match = _MULTI_PARAM.match(lines[i])
        if match:
            indent, kind, names, text = match.groups()
            first, *rest = [n.strip() for n in names.split(",")]
            end = i + 1  # the field's body: the lines indented under it
            while end < len(lines) and lines[end].strip() and len(lines[end]) - len(lines[end].lstrip()) > len(indent):
                end += 1
            lines[end:end] = [f"{indent}:param {kind}{other}: as ``{first}``." for other in rest]
            lines[i] = f"{indent}:param {kind}{first}:{text}"


def _require_docstring(app, what, name, obj, options, lines):
    """Warn (an error under ``-W``) when a documented pyrozoo object has no docstring of its own."""
    if what in ("module", "attribute", "data", "property") or not name.startswith("pyrozoo"):
        return
    if not (inspect.getdoc(obj) or "").strip() and not any(line.strip() for line in lines):
        from sphinx.util import logging

        logging.getLogger(__name__).warning(f"{name} has no docstring", type="pyrozoo", subtype="docstring")


def _documented_by_object(env):
    """``id(object) -> documented name`` for every object the Python domain documents."""
    cached = getattr(env, "_pyrozoo_documented", None)
    if cached is None:
        cached = {}
        for name in env.get_domain("py").objects:
            obj = _resolve(name)
            if obj is not None:
                cached.setdefault(id(obj), name)
        env._pyrozoo_documented = cached
    return cached


def _resolve(name):
    try:
        return pkgutil.resolve_name(name)
    except Exception:
        return None


def _resolve_alias(app, env, node, contnode):
    """A reference to a pyrozoo object by the path of the module that defines it
    (``pyrozoo.models.bnn.BayesianNeuralNetwork``) resolves to where it is documented
    (``pyrozoo.models.BayesianNeuralNetwork``); anything else stays unresolved (and fails)."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("pyrozoo."):
        return None
    obj = _resolve(target)
    documented = _documented_by_object(env).get(id(obj)) if obj is not None else None
    if documented is None or documented == target:
        return None
    py = env.get_domain("py")
    return py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], documented, node, contnode)


def _names_a_real_object(node):
    """Whether a reference that has no page names an object that exists (an undocumented
    helper, a method inherited from torch or Pyro, an instance attribute): the reader sees
    its name as code, which is right; only a reference to nothing is broken."""
    target = node.get("reftarget", "").lstrip("~.")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target, f"builtins.{target}"]
    if module:
        candidates.append(f"{module}.{target}")
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
        # a docstring names things relative to the module that defines it, which is a
        # submodule of the package the page documents it under
        candidates += [f"{name}.{target}" for name in list(sys.modules) if name.startswith(f"{module}.")]
    if any(_resolve(c) is not None for c in candidates):
        return True
    if module and node.get("reftype") in ("attr", "meth"):
        # a member of the class the docstring belongs to; in an autosummary table the class is
        # not known, so any class of the module will do
        owners = [_resolve(f"{module}.{cls}")] if cls else [o for o in vars(sys.modules.get(module, object)).values() if inspect.isclass(o)]
        return any(owner is not None and _has_member(owner, target) for owner in owners)
    return False


def _has_member(owner, name):
    """A class attribute, a declared (annotated or dataclass) field, or one set in a method."""
    if hasattr(owner, name) or any(name in getattr(k, "__annotations__", {}) for k in owner.__mro__):
        return True
    try:
        return f"self.{name} =" in inspect.getsource(owner)
    except (OSError, TypeError):
        return False


def _warn_missing_reference(app, domain, node):
    if domain is not None and domain.name == "py" and _names_a_real_object(node):
        return True  # handled: no warning
    return None


def _extract_summary(doc, settings):
    """autosummary's one-line summary, cut at the first sentence end that does not fall inside
    inline markup or parentheses (Sphinx 9's own check parses the whole stanza instead of the
    candidate, so ``0 .. n - 1`` inside a literal cut the summary there)."""
    from docutils import nodes
    from sphinx.ext import autosummary

    stanza = []
    for line in doc:
        if not line.strip():
            if stanza:
                break
            continue
        stanza.append(line)
    if not stanza:
        return ""
    node = autosummary._parse_summary(stanza, settings)
    if not node.children or not isinstance(node[0], nodes.paragraph):
        return _original_extract_summary(doc, settings)
    sentences = autosummary.periods_re.split(" ".join(stanza))
    summary = sentences[0].strip()
    for i in range(len(sentences)):
        summary = ". ".join(sentences[: i + 1]).rstrip(".") + "."
        if summary.endswith(autosummary.WELL_KNOWN_ABBREVIATIONS + ("eq.", "Eq.", "Sec.", "Fig.", "vs.")):
            continue
        if summary.count("(") > summary.count(")") or summary.count("[") > summary.count("]"):
            continue  # a period inside parentheses, e.g. "(Blundell et al. 2015, eq. 9)"
        if not any(autosummary._parse_summary([summary], settings).findall(nodes.system_message)):
            break
    return autosummary.literal_re.sub(".", summary)


_EXPORTS = runpy.run_path(str(DOCS / "api_exports.py"))
_UNLISTED = _EXPORTS["unlisted"]()


def _append_unlisted(app, docname, source):
    # an exported name no API page lists yet is documented at the end of its package's page
    page = docname[len("api/"):] if docname.startswith("api/") else None
    if page in _UNLISTED:
        source[0] += _EXPORTS["appended_section"](_UNLISTED[page])


def setup(app):
    global _original_extract_summary
    from sphinx.ext import autosummary

    _original_extract_summary = autosummary.extract_summary
    autosummary.extract_summary = _extract_summary
    app.connect("source-read", _append_unlisted)
    app.connect("autodoc-process-docstring", _split_multi_params)
    app.connect("warn-missing-reference", _warn_missing_reference)
    app.connect("autodoc-process-docstring", _require_docstring)
    app.connect("missing-reference", _resolve_alias)
