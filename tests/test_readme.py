"""The README's Python snippets run as written."""

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_snippet_runs(index, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # snippets that save files write them here
    namespace = {}
    exec(compile(SNIPPETS[index], f"README snippet {index}", "exec"), namespace)
    if "guide" in namespace and index == 0:
        w = namespace["guide"].median()["w"]
        assert torch.allclose(w, torch.tensor([1.0, -2.0, 0.5]), atol=0.05)
    if "guide2" in namespace:  # the save/load snippet: the loaded posterior is the saved one
        for a, b in zip(namespace["guide"].state_dict().values(), namespace["guide2"].state_dict().values()):
            assert torch.equal(a, b)
