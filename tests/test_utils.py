"""pyrozoo.utils: evaluation_mode, rng_states_kept, parse_int_ranges."""

import random

import numpy as np
import pyro
import pytest
import torch
from torch import nn

from pyrozoo.utils import evaluation_mode, rng_states_kept


def test_evaluation_mode_freezes_batch_statistics_and_restores_each_modules_mode(device):
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).to(device)
    net[2].eval()  # a mixed state, as in MC dropout or a partly frozen network
    before = {k: v.clone() for k, v in net[1].state_dict().items()}
    x = torch.randn(16, 3, device=device) * 5 + 2
    with evaluation_mode(net):
        assert not any(m.training for m in net.modules())
        out = net(x)
    # eval-mode batch norm uses and keeps its running statistics
    assert all(torch.equal(before[k], v) for k, v in net[1].state_dict().items())
    expected = (net[0](x) - before["running_mean"]) / torch.sqrt(before["running_var"] + net[1].eps) * net[1].weight + net[1].bias
    assert torch.allclose(out, expected, atol=1e-5)
    assert [m.training for m in net] == [True, True, False] and net.training
    with pytest.raises(RuntimeError):
        with evaluation_mode(net):
            raise RuntimeError("interrupted")
    assert [m.training for m in net] == [True, True, False]


@pytest.mark.parametrize("spec, expected", [("0-4", [0, 1, 2, 3, 4]), ("0,3,5-7", [0, 3, 5, 6, 7]), ("2", [2]), (" 1 - 3 ,", [1, 2, 3]), ("4-4", [4])])
def test_parse_int_ranges(spec, expected):
    from pyrozoo.utils import parse_int_ranges

    assert parse_int_ranges(spec) == expected


@pytest.mark.parametrize("spec", ["abc", "0-x", "1,,b"])
def test_parse_int_ranges_names_the_bad_spec(spec):
    from pyrozoo.utils import parse_int_ranges

    with pytest.raises(ValueError, match="ranges such as 0-4"):
        parse_int_ranges(spec)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("5-2", "'5-2' runs backwards"),  # a reversed range ran nothing and replaced a summary with an empty table
        ("0,7-3", "'7-3' runs backwards"),
        ("", "selects nothing"),
        (" , ", "selects nothing"),
        ("-1", "negative values"),
        ("0--2", "negative values"),
    ],
)
def test_parse_int_ranges_rejects_empty_reversed_and_negative_specs(spec, message):
    """A spec that would run nothing (or a backwards range, read as nothing) is an error
    naming it, so no script can turn it into an empty run that overwrites its tables."""
    from pyrozoo.utils import parse_int_ranges

    with pytest.raises(ValueError, match=message) as info:
        parse_int_ranges(spec)
    assert repr(spec) in str(info.value) and "\n" not in str(info.value)


def draws(device):
    return random.random(), float(np.random.rand()), torch.rand(3, device=device).tolist()


def test_rng_states_kept_leaves_every_stream_where_it_was_even_when_the_block_reseeds(device):
    pyro.set_rng_seed(7)
    expected = draws(device)
    pyro.set_rng_seed(7)
    with rng_states_kept():
        pyro.set_rng_seed(0)  # what a measurement with its own seed does
        draws(device), torch.randn(100, device=device)
    assert draws(device) == expected
    pyro.set_rng_seed(7)
    with pytest.raises(RuntimeError, match="inside"):  # restored on an error too
        with rng_states_kept():
            torch.rand(5, device=device)
            raise RuntimeError("inside")
    assert draws(device) == expected
    assert draws(device) != expected  # the comparison can fail: later draws differ


@pytest.mark.parametrize("module, old, new", [
    ("pyrozoo.inference", "Renyi_ELBO", "RenyiELBO"),
    ("pyrozoo.inference", "ReweightedWakeSleepLoss", "ReweightedWakeSleep"),
    ("pyrozoo.inference.importance_weighted", "Renyi_ELBO", "RenyiELBO"),
    ("pyrozoo.inference.rws", "ReweightedWakeSleepLoss", "ReweightedWakeSleep"),
])
def test_a_former_name_is_the_new_object_with_a_warning_and_not_in_all(module, old, new):
    import importlib

    mod = importlib.import_module(module)
    with pytest.warns(FutureWarning, match=f"{module}.{old} is deprecated.*use {module}.{new}"):
        assert getattr(mod, old) is getattr(mod, new)
    assert old not in getattr(mod, "__all__", ())
    with pytest.raises(AttributeError, match="no attribute 'Renyi_ELBOO'"):
        getattr(mod, "Renyi_ELBOO")


def test_the_bessel_functions_moved_to_ops_with_their_former_paths_kept():
    import importlib

    import pyrozoo.distributions as distributions
    import pyrozoo.ops as ops

    with pytest.warns(FutureWarning, match="pyrozoo.distributions.bessel_iv_ratio is deprecated.*use pyrozoo.ops.bessel_iv_ratio"):
        assert distributions.bessel_iv_ratio is ops.bessel_iv_ratio
    assert "bessel_iv_ratio" not in distributions.__all__
    import sys

    sys.modules.pop("pyrozoo.distributions.special", None)
    with pytest.warns(FutureWarning, match="use pyrozoo.ops.special"):
        special = importlib.import_module("pyrozoo.distributions.special")
    assert special.log_bessel_iv is ops.log_bessel_iv


def test_a_model_without_parameters_trains_where_its_data_are():
    from pyrozoo.utils import resolve_device

    data = torch.zeros(3, device="meta")
    assert resolve_device(None, torch.nn.Linear(2, 2), like=data) == torch.device("cpu")  # the module's own
    assert resolve_device(None, lambda x: x, like=data) == torch.device("meta")
    assert resolve_device(None, torch.nn.Module(), like=data) == torch.device("meta")
    assert resolve_device(None, None) == torch.device("cpu")
