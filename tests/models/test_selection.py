"""ParameterSelector: which parameters of a module a prior makes random."""

import pytest
import torch
from torch import nn

from pyrozoo.models import ParameterSelector


class TiedLinear(nn.Linear):
    """A subclass: selection by type must include subclasses."""


class Net(nn.Module):
    """encoder (Sequential of Linear, ReLU, LayerNorm), a conv, a head tied to the first layer,
    and a parameter owned directly by the root module."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.LayerNorm(4))
        self.conv = nn.Conv1d(1, 2, 3)
        self.head = TiedLinear(4, 4, bias=False)
        self.head.weight = self.encoder[0].weight  # shared parameter
        self.temperature = nn.Parameter(torch.ones(()))


ALL = {"temperature", "encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias", "conv.weight", "conv.bias"}

# (id, selector keyword arguments, expected full names)
CASES = [
    ("default-selects-all", {}, ALL),
    ("expose-type", {"expose_types": [nn.Linear]}, {"encoder.0.weight", "encoder.0.bias"}),
    ("expose-single-type", {"expose_types": nn.Conv1d}, {"conv.weight", "conv.bias"}),
    ("expose-two-types", {"expose_types": (nn.Conv1d, nn.LayerNorm)}, {"conv.weight", "conv.bias", "encoder.2.weight", "encoder.2.bias"}),
    ("hide-type", {"hide_types": [nn.LayerNorm]}, ALL - {"encoder.2.weight", "encoder.2.bias"}),
    ("expose-module", {"expose_modules": ["encoder.0"]}, {"encoder.0.weight", "encoder.0.bias"}),
    ("expose-module-is-not-recursive", {"expose_modules": "encoder"}, set()),
    ("expose-root-module", {"expose_modules": [""]}, {"temperature"}),
    ("hide-module", {"hide_modules": ["conv"]}, ALL - {"conv.weight", "conv.bias"}),
    ("expose-parameter-suffix", {"expose_parameters": "weight"}, {"encoder.0.weight", "encoder.2.weight", "conv.weight"}),
    ("expose-parameter-dotted-suffix", {"expose_parameters": ["0.weight"]}, {"encoder.0.weight"}),
    ("expose-parameter-full-name", {"expose_parameters": ["conv.bias"]}, {"conv.bias"}),
    ("partial-word-does-not-match", {"expose_parameters": ["eight", "ias"]}, set()),
    ("hide-parameter", {"hide_parameters": ["bias"]}, ALL - {"encoder.0.bias", "encoder.2.bias", "conv.bias"}),
    ("union-of-exposes", {"expose_types": [nn.Conv1d], "expose_parameters": ["temperature"]}, {"conv.weight", "conv.bias", "temperature"}),
    ("hide-type-wins", {"expose_parameters": ["weight"], "hide_types": [nn.Conv1d]}, {"encoder.0.weight", "encoder.2.weight"}),
    ("hide-module-wins", {"expose_types": [nn.Linear], "hide_modules": ["encoder.0"]}, set()),
    ("hide-parameter-wins", {"expose_modules": ["conv"], "hide_parameters": ["conv.bias"]}, {"conv.weight"}),
    ("predicate-alone", {"predicate": lambda mn, m, pn, p: p.dim() >= 2}, {"encoder.0.weight", "conv.weight"}),
    ("predicate-and-expose", {"expose_parameters": ["weight"], "predicate": lambda mn, m, pn, p: p.dim() == 1}, {"encoder.2.weight"}),
    ("hide-wins-over-predicate", {"hide_parameters": ["conv.weight"], "predicate": lambda mn, m, pn, p: True}, ALL - {"conv.weight"}),
]


def _names(selector, net):
    out = [f"{mn}.{pn}" if mn else pn for mn, _, pn, _ in selector.select(net)]
    assert len(out) == len(set(out)), f"a parameter was reported twice: {out}"
    return set(out)


@pytest.mark.parametrize("kwargs,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_selection(kwargs, expected):
    assert _names(ParameterSelector(**kwargs), Net()) == expected


@pytest.mark.parametrize("kwargs,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_is_selected_agrees_with_select(kwargs, expected):
    selector, net = ParameterSelector(**kwargs), Net()
    for module_name, module in net.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            full = f"{module_name}.{param_name}" if module_name else param_name
            if full == "head.weight":
                continue  # the shared tensor: reported under its first owner only
            assert selector.is_selected(module_name, module, param_name, param) == (full in expected), full


def test_yields_the_owning_module_and_the_parameter_itself():
    net = Net()
    params = dict(net.named_parameters())
    modules = dict(net.named_modules())
    for module_name, module, param_name, param in ParameterSelector().select(net):
        full = f"{module_name}.{param_name}" if module_name else param_name
        assert module is modules[module_name]
        assert param is params[full]
        assert getattr(module, param_name) is param


def test_shared_parameter_reported_once_at_first_owner():
    net = Net()
    shared = net.encoder[0].weight
    hits = [(mn, pn) for mn, _, pn, p in ParameterSelector().select(net) if p is shared]
    assert hits == [("encoder.0", "weight")]
    # the same set as torch's own de-duplicated listing
    assert _names(ParameterSelector(), net) == set(dict(net.named_parameters()))


def test_type_selection_includes_subclasses():
    class Only(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = TiedLinear(2, 2)

    assert _names(ParameterSelector(expose_types=[nn.Linear]), Only()) == {"layer.weight", "layer.bias"}


def test_predicate_receives_module_and_parameter_names():
    calls = []

    def predicate(module_name, module, param_name, param):
        calls.append((module_name, type(module).__name__, param_name, tuple(param.shape)))
        return True

    list(ParameterSelector(expose_modules=["conv"], predicate=predicate).select(Net()))
    assert sorted(calls) == [("conv", "Conv1d", "bias", (2,)), ("conv", "Conv1d", "weight", (2, 1, 3))]


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"expose_types": ["Linear"]}, TypeError),
        ({"expose_types": [int]}, TypeError),
        ({"hide_types": nn.Linear(2, 2)}, TypeError),
        ({"expose_modules": [0]}, TypeError),
        ({"hide_parameters": [None]}, TypeError),
        ({"predicate": "weight"}, TypeError),
        ({"expose_parameter": ["weight"]}, TypeError),  # misspelt keyword
    ],
    ids=["type-name-string", "not-a-module-class", "module-instance", "int-module-name", "none-name", "uncallable-predicate", "unknown-keyword"],
)
def test_bad_arguments_raise(kwargs, error):
    with pytest.raises(error):
        ParameterSelector(**kwargs)


def test_positional_arguments_are_rejected():
    with pytest.raises(TypeError):
        ParameterSelector([nn.Linear])


def test_repr_names_the_criteria():
    r = repr(ParameterSelector(expose_types=[nn.Linear], hide_parameters="bias"))
    assert "expose_types" in r and "Linear" in r and "hide_parameters" in r and "'bias'" in r
    assert "hide_types" not in r
