"""pyrozoo.cli: the argument types and the command runner shared by the examples."""

import argparse
import sys
from types import SimpleNamespace

import pytest
import torch

from pyrozoo.cli import device_from_args, existing_directory, float_list, positive_float, positive_int, run_main, settings_digest


@pytest.mark.parametrize("text, value", [("1", 1), ("250", 250)])
def test_positive_int_accepts(text, value):
    assert positive_int(text) == value


@pytest.mark.parametrize("text", ["0", "-3", "1.5", "abc", ""])
def test_positive_int_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int(text)


@pytest.mark.parametrize("text", ["0", "-1e-3", "inf", "nan", "abc"])
def test_positive_float_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_float(text)


def test_positive_float_and_directory_accept(tmp_path):
    assert positive_float("5e-7") == 5e-7
    assert existing_directory(str(tmp_path)) == tmp_path
    with pytest.raises(argparse.ArgumentTypeError, match="not an existing directory"):
        existing_directory(str(tmp_path / "nowhere"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(argparse.ArgumentTypeError):
        existing_directory(str(tmp_path / "file"))


def test_float_list():
    assert float_list("0,0.05, 1e-1") == [0.0, 0.05, 0.1]
    for bad in ("", "0,abc", "inf", "nan,1"):
        with pytest.raises(argparse.ArgumentTypeError):
            float_list(bad)


def test_settings_digest_names_settings():
    a = settings_digest([("lr", 0.001), ("hidden", 64)])
    assert len(a) == 8 and a == settings_digest([("lr", 0.001), ("hidden", 64)])
    assert a != settings_digest([("lr", 0.002), ("hidden", 64)])


def test_run_main_turns_user_errors_into_one_line_exits(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["example.py"])
    monkeypatch.delenv("PYROZOO_TRACEBACK", raising=False)

    def bad():
        raise ValueError("epochs must be >= 1")

    with pytest.raises(SystemExit) as info:
        run_main(bad)
    assert info.value.code == "example.py: error: epochs must be >= 1 (PYROZOO_TRACEBACK=1 shows where)"
    monkeypatch.setenv("PYROZOO_TRACEBACK", "1")
    with pytest.raises(ValueError):
        run_main(bad)
    # other exceptions are bugs: their tracebacks stay
    with pytest.raises(KeyError):
        run_main(lambda: {}["x"])
    for returned, code in ((None, 0), (3, 3), ("a table", 0)):
        with pytest.raises(SystemExit) as info:
            run_main(lambda: returned)
        assert info.value.code == code


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_unavailable_device_is_a_user_error():
    with pytest.raises(ValueError, match="--device cuda"):
        device_from_args(SimpleNamespace(device="cuda"))
