"""The guides trace their model under their own handlers (set-up, initial values) through the
``model`` property, never by rewriting Pyro's private ``AutoGuide._model``."""

import ast
from pathlib import Path

import pyro
import pyro.distributions as dist
import torch

from pyrozoo.distributions import LogUniformImproper
from pyrozoo.guides import CompositeGuide, MeanFieldNormalGuide, SparseVariationalDropoutGuide
from pyrozoo.guides.base import model_under

LIBRARY = Path(__file__).resolve().parents[2] / "pyrozoo"


def test_no_module_assigns_autoguides_private_model():
    offenders = []
    for path in sorted(LIBRARY.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            offenders += [f"{path.name}:{node.lineno}" for t in targets if isinstance(t, ast.Attribute) and t.attr == "_model"]
    assert not offenders, offenders


def _model(x, y=None):
    w = pyro.sample("w", LogUniformImproper(torch.Size([3])).to_event(1))
    sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    with pyro.plate("data", len(x)):
        pyro.sample("y", dist.Normal(x @ w, sigma), obs=y)


def test_the_model_is_read_under_handlers_only_within_model_under():
    x, y = torch.randn(8, 3), torch.randn(8)
    for guide in (MeanFieldNormalGuide(_model), CompositeGuide(_model, SparseVariationalDropoutGuide)):
        guide(x, y)  # the set-up traces the improper prior at initial values, under handlers
        assert guide.model is _model
        seen = []
        with model_under(guide, lambda m: seen.append(m) or m):
            assert guide.model is _model and seen == [_model]
        assert guide.model is _model and guide.prototype_trace is not None
