"""zoo_protocols.cli: the argument types and the command runner shared by the examples."""

import argparse
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from zoo_protocols import cli
from zoo_protocols.cli import device_from_args, existing_directory, float_list, positive_float, positive_int, run_main, settings_digest


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


# -- the shared option types: each accepts what it should and rejects, with a one-line message,
#    what it should not (the examples' options use these, see tests/reproductions/test_bad_options.py)

ACCEPTS = [
    (cli.non_negative_int, "0", 0),
    (cli.non_negative_int, "7", 7),
    (cli.finite_float, "-2.5", -2.5),
    (cli.fraction, "0", 0.0),
    (cli.fraction, "0.99", 0.99),
    (cli.probability, "1", 1.0),
    (cli.bounded_float(-1, 1, low_inclusive=False), "-0.5", -0.5),
    (cli.non_negative_float_list, "0,0.1", [0.0, 0.1]),
    (cli.positive_float_list, "0.01,2", [0.01, 2.0]),
    (cli.positive_int_list, "300, 100", [300, 100]),
    (cli.int_ranges, "0-2,5", [0, 1, 2, 5]),
    (cli.parse_seeds, "3", [3]),
    (cli.split_spec, "all", "all"),
    (cli.split_spec, "0-19", "0-19"),
    (cli.name_list, "map, mfvi,map", ["map", "mfvi"]),
    (cli.subset_of(("pyrozoo", "independent"), "implementations"), "independent, pyrozoo", ["independent", "pyrozoo"]),
    (cli.device_spec, "cpu", "cpu"),
    (cli.device_spec, "auto", "auto"),
]


@pytest.mark.parametrize("kind, text, value", ACCEPTS, ids=[f"{getattr(k, '__name__', k)}-{t}" for k, t, _ in ACCEPTS])
def test_option_types_accept(kind, text, value):
    assert kind(text) == value


REJECTS = [
    (cli.non_negative_int, "-1"), (cli.non_negative_int, "1.5"), (cli.non_negative_int, "x"),
    (cli.finite_float, "nan"), (cli.finite_float, "-inf"), (cli.finite_float, "x"),
    (cli.fraction, "1"), (cli.fraction, "-0.1"), (cli.fraction, "nan"),
    (cli.probability, "1.01"), (cli.probability, "-0.1"),
    (cli.bounded_float(-1, 1, low_inclusive=False), "-1"),
    (cli.non_negative_float_list, "0.1,-0.1"), (cli.non_negative_float_list, ""),
    (cli.positive_float_list, "0"), (cli.positive_float_list, "1,x"),
    (cli.positive_int_list, "0"), (cli.positive_int_list, "1,-2"), (cli.positive_int_list, ","), (cli.positive_int_list, "1.5"),
    (cli.int_ranges, "5-2"), (cli.int_ranges, ""), (cli.int_ranges, "-1"), (cli.parse_seeds, "3-1"),
    (cli.split_spec, "5-2"), (cli.split_spec, ""), (cli.split_spec, "x"),
    (cli.name_list, ""), (cli.name_list, " , "),
    (cli.subset_of(("pyrozoo", "independent"), "implementations"), "pyrozoo,pyro"), (cli.subset_of(("a",), "variants"), ""),
    (cli.device_spec, "gpu0"), (cli.existing_file, "/no/such/file.csv"),
]


@pytest.mark.parametrize("kind, text", REJECTS, ids=[f"{getattr(k, '__name__', k)}-{t!r}" for k, t in REJECTS])
def test_option_types_reject_with_one_line(kind, text):
    """Each is an ``argparse.ArgumentTypeError`` (argparse reports ``argument --x: <message>``
    before any work) and a ``ValueError`` (called outside argparse, :func:`run_main` makes it
    one line)."""
    with pytest.raises(argparse.ArgumentTypeError) as info:
        kind(text)
    assert isinstance(info.value, ValueError) and str(info.value) and "\n" not in str(info.value)


def test_option_errors_name_the_option_before_any_work(capsys):
    parser = argparse.ArgumentParser(prog="example.py")
    parser.add_argument("--seeds", type=cli.parse_seeds, default="0-2")
    parser.add_argument("--eval-every", type=positive_int, default=100)
    assert parser.parse_args([]).seeds == [0, 1, 2]  # a string default goes through its type
    for argv, message in ((["--seeds", "3-1"], "argument --seeds: '3-1': the range '3-1' runs backwards (write 1-3)"),
                          (["--eval-every", "0"], "argument --eval-every: must be >= 1, got 0")):
        with pytest.raises(SystemExit) as info:
            parser.parse_args(argv)
        assert info.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"example.py: error: {message}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_an_unavailable_device_is_an_option_error():
    with pytest.raises(argparse.ArgumentTypeError, match="CUDA is not available"):
        cli.device_spec("cuda")


def test_the_repository_defaults_are_the_examples_not_the_librarys(tmp_path, monkeypatch):
    """``--results-dir`` defaults to docs/results and ``--data-dir`` to $PYROZOO_DATA_DIR, else
    the nearest shared/data (zoo_protocols.paths), else nothing (the loaders then say what to pass)."""
    def parse(*argv):
        return cli.add_common_arguments(argparse.ArgumentParser()).parse_args(list(argv))

    monkeypatch.setenv("PYROZOO_DATA_DIR", str(tmp_path))
    args = parse()
    assert args.results_dir == Path("docs") / "results" and args.data_dir == tmp_path
    (tmp_path / "given").mkdir()
    assert parse("--data-dir", str(tmp_path / "given"), "--results-dir", "out").data_dir == tmp_path / "given"
    monkeypatch.delenv("PYROZOO_DATA_DIR")
    (tmp_path / "shared" / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse().data_dir == tmp_path / "shared" / "data"

    def nowhere():
        raise FileNotFoundError("no data directory found")

    monkeypatch.setattr(cli, "default_data_dir", nowhere)
    assert parse().data_dir is None
