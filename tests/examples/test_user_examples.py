"""The short example scripts a user copies (issue 43): each runs its smoke command line in a
fresh process, is 60-200 lines long and imports nothing of the repository beside ``pyrozoo``
(no ``zoo_protocols``, no ``tests``), only the packages a user of the field has."""

import ast
import os
import subprocess
import sys

import pytest

from tests.runner import EXAMPLES, USER_EXAMPLES

#: the top-level packages an example may import
ALLOWED = {"pyrozoo", "pyro", "torch", "numpy", "pandas", "sklearn", "matplotlib", "scipy",
           "argparse", "math", "os", "sys", "time", "tempfile", "pathlib", "subprocess", "json", "warnings", "functools", "dataclasses", "typing", "collections", "contextlib", "itertools"}


def test_every_short_script_is_listed():
    """A script of examples/ is either an experiment driver (it imports recipes) or listed."""
    scripts = {p.name for p in EXAMPLES.glob("*.py") if "zoo_protocols" not in p.read_text()}
    assert scripts == set(USER_EXAMPLES)


@pytest.mark.parametrize("script", sorted(USER_EXAMPLES))
def test_a_user_example_is_short_and_self_contained(script):
    source = (EXAMPLES / script).read_text()
    assert 60 <= len(source.splitlines()) <= 200, len(source.splitlines())
    tree = ast.parse(source)
    assert ast.get_docstring(tree), "a module docstring says what it shows and how to run it"
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert imported <= ALLOWED, imported - ALLOWED


@pytest.mark.parametrize("script", sorted(USER_EXAMPLES))
def test_a_user_example_runs_its_smoke_command(script, tmp_path):
    env = {**os.environ, "PYTHONPATH": "", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *USER_EXAMPLES[script]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "it prints its results"
    assert not list(tmp_path.iterdir()) or script == "save_load_predict.py", "a smoke run writes nothing into the working folder"

