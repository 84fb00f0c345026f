"""Every example checks its options before any work: a bad count, rate, fraction, range or
name ends in a one-line error (argparse's ``error: argument --x: ...``, or ``run_main``'s one
line), and nothing is written, neither in ``--results-dir`` nor anywhere else.

The cases are generated: each example's parser is captured and every option is tried with the
shared bad values of its type (:data:`BAD_VALUES`); :func:`test_every_option_has_a_checked_type`
keeps new options from going unchecked. Checks that need more than one option (or the data)
are listed by hand in :data:`CHECKED_AFTER_PARSING`. Nothing here trains: each case ends
before any work, in well under a second.
"""

import argparse
import ast
import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

from zoo_protocols import cli
from tests.runner import experiment_drivers, script_path

SCRIPTS = experiment_drivers()

#: bad values of each option type (by the type's name); every one must be refused
BAD_VALUES = {
    "positive_int": ["0", "-3", "1.5", "x", ""],
    "non_negative_int": ["-1", "2.5", "x"],
    "positive_float": ["0", "-1e-3", "nan", "inf", "x"],
    "finite_float": ["nan", "inf", "x"],
    "fraction": ["-0.1", "1", "nan", "x"],
    "probability": ["-0.1", "1.5", "nan"],
    "number in (-1, 1)": ["-1", "1", "nan"],
    "number in (0, 1)": ["0", "1", "nan", "x"],
    "float_list": ["", "x", "1,nan"],
    "non_negative_float_list": ["-0.1", "0,nan", ""],
    "positive_float_list": ["0", "1,-2", "1,x", ""],
    "positive_int_list": ["0", "2,-1", "1.5", "", "x"],
    # the range specs: a reversed or empty range selects nothing, which is an error, not an empty run
    "parse_seeds": ["3-1", "", ",", "-1", "x"],
    "int_ranges": ["5-2", "", ",", "-1", "x"],
    "split_spec": ["5-2", "", ",", "-1", "x"],
    "name_list": ["", " , "],
    "device_spec": ["gpu0"],
    "existing_directory": ["no/such/folder"],
    "existing_file": ["no/such/file.csv"],
    # a user's own data (zoo_protocols.cli.add_user_data_arguments)
    "data_file": ["no/such/file.csv", "no/such/images.npz"],
    "column_name": ["", "  "],
    "splits_by_spec": ["random", "column:", "files:no/such/folder", "kfold:3", ""],
    "_points": ["0", "-1", "x"],  # vae_dsivi_prior.py --prior-points: 'all' or >= 1
    "beta_hyperparameters": ["0.5,1000", "2,0", "2", "a,b", "2,nan"],  # sparse_regression.py --delta-prior A,B
    # results_manifest.py --verify FILE --command CMD
    "results_file": ["", "/abs/uci_bbb.csv", "../uci_bbb.csv"],
    "verify_command": ["", "python examples/ex.py", "python examples/ex.py --results-dir '{out}"],
}
RANGE_TYPES = {"parse_seeds", "int_ranges", "split_spec"}
#: option types that need no check (a path to write to; a stem or free text)
UNCHECKED_TYPES = {"Path"}


def _load(script):
    path = script_path(script)
    name = f"example_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


class _Captured(Exception):
    pass


def _parser_of(script) -> argparse.ArgumentParser:
    """The parser ``main`` builds, captured when it parses (nothing else runs)."""
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = capture
    try:
        _load(script).main([])
    except _Captured as e:
        return e.args[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{script}: main() did not parse its arguments")


def _type_name(action):
    return getattr(action.type, "__name__", repr(action.type))


def _options(script):
    return [a for a in _parser_of(script)._actions if a.option_strings and a.nargs != 0 and a.dest != "help"]


def _cases():
    cases = []
    for script in SCRIPTS:
        for action in _options(script):
            for value in BAD_VALUES.get(_type_name(action), []):
                cases.append(pytest.param(script, action.option_strings[0], value, id=f"{script[:-3]}-{action.option_strings[0]}={value!r}"))
    return cases


CASES = _cases()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working folder (so default relative paths such as ``runs/`` land in it too)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _one_line_error(script, argv, monkeypatch, capsys) -> str:
    """Runs ``script``'s ``main(argv)`` as its command line does (through ``run_main``) and
    returns its error line; it must exit with an error, without a traceback."""
    monkeypatch.setattr(sys, "argv", [str(script_path(script))])
    monkeypatch.delenv("PYROZOO_TRACEBACK", raising=False)
    with pytest.raises(SystemExit) as info:
        cli.run_main(lambda: _load(script).main(argv))
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if info.value.code == 2:  # argparse: usage, then one "prog: error: ..." line
        line = err.strip().splitlines()[-1]
        assert line.startswith(f"{script}: error: "), err
        return line
    assert isinstance(info.value.code, str) and info.value.code and "\n" not in info.value.code, info.value.code
    return info.value.code


@pytest.mark.parametrize("script, option, value", CASES)
def test_a_bad_option_value_is_a_one_line_error_before_any_work(script, option, value, workdir, monkeypatch, capsys):
    message = _one_line_error(script, [option, value, "--results-dir", str(workdir / "results")], monkeypatch, capsys)
    assert option in message
    assert list(workdir.iterdir()) == []


def test_the_bad_values_cover_every_range_option():
    """The range options (seeds, splits, budgets) are all typed, so that ``5-2`` or ``""``
    can never become an empty run: one case per bad range value and option."""
    ranges = [(s, a.option_strings[0]) for s in SCRIPTS for a in _options(s) if _type_name(a) in RANGE_TYPES]
    assert {s for s, _ in ranges} >= {"uci_regression.py", "compare_objectives.py", "sparse_regression.py", "compress_lenet.py", "dsivi_toy.py",
                                      "dsivi_hierarchical_bnn.py", "vae_dsivi_prior.py", "uci_esbo_table.py", "uci_sgmcmc_table.py"}
    assert len([c for c in CASES if c.values[1] in {o for _, o in ranges}]) >= 5 * len(ranges)


#: options that take free text, checked after parsing (covered by CHECKED_AFTER_PARSING where
#: they can be wrong) or not numbers at all
FREE_TEXT = {"--stem", "--table-stem", "--notes", "--priors", "--K", "--lr-grid", "--extra", "--dataset"}


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_option_has_a_checked_type(script):
    """No count, rate or range is parsed as a bare int / float / string (whose 0, -1, nan or
    ``5-2`` would surface as a traceback after files were written): each has one of
    :mod:`zoo_protocols.cli`'s checked types, or a fixed set of choices."""
    unchecked = []
    for action in _options(script):
        name = _type_name(action)
        if action.choices is not None or name in BAD_VALUES or name in UNCHECKED_TYPES or action.option_strings[0] in FREE_TEXT:
            continue
        unchecked.append(f"{action.option_strings[0]} (type {name}, default {action.default!r})")
    assert not unchecked, f"{script}: give these a checked type from zoo_protocols.cli: {unchecked}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_example_runs_through_run_main(script):
    """``python examples/<script>`` calls ``run_main(main)``: a user error is one line, not a traceback."""
    tree = ast.parse((script_path(script)).read_text())
    guard = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "__name__ == '__main__'"]
    assert len(guard) == 1 and [ast.unparse(s) for s in guard[0].body] == ["run_main(main)"], script


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


#: ``(script, arguments, what the message says)``: checks argparse cannot make alone
CHECKED_AFTER_PARSING = [
    ("uci_regression.py", ["--method", "nope"], "unknown method"),
    # protein has 5 splits: the sweep stops before its first run, not after bostonHousing's
    ("uci_regression.py", ["--dataset", "bostonHousing,protein-tertiary-structure", "--splits", "0-9"], "out of range 0..4"),
    ("compare_objectives.py", ["--budgets", "0,10"], "--budgets"),
    ("compare_objectives.py", ["--datasets", "iris"], "--datasets"),
    ("sparse_regression.py", ["--method", "nuts"], "unknown method"),
    ("sparse_regression.py", ["--iterations", "10", "--thin", "100"], "no sample would be kept"),
    ("sparse_regression.py", ["--batch-size", "101"], "exceeds"),
    ("classify_cnn.py", ["--method", "sgd"], "unknown method"),
    ("classify_cnn.py", ["--fgsm-protocol", "whitebox"], "--fgsm-protocol"),
    ("compress_lenet.py", ["--arch", "vgg"], "--arch"),
    ("compress_lenet.py", ["--extra", "{bad json"], "--extra"),
    ("compress_lenet.py", ["--extra", "[1, 2]"], "--extra"),
    ("dsivi_toy.py", ["--correlation", "-0.5"], "--correlation"),  # not positive definite for D = 50
    ("dsivi_hierarchical_bnn.py", ["--methods", "both"], "unknown methods"),
    ("local_reparam_variance.py", ["--repeats", "1"], "--repeats"),
    ("resnet_compression.py", ["--method", "sgd"], "unknown method"),
    ("resnet_compression.py", ["--sparsity", "0.8"], "--sparsity"),
    ("uci_sgmcmc_table.py", ["--lr-grid", "1e-5,-1"], "positive"),
    ("uci_sgmcmc_table.py", ["--lr-grid", "1e-5,fast"], "comma-separated"),
    ("uci_sgmcmc_table.py", ["--methods", "sgd"], "unknown method"),
    ("uci_sgmcmc_table.py", ["--tune-split", "20"], "--tune-split 20"),
    ("uci_sgmcmc_table.py", ["--splits", "0-20"], "out of range"),
    ("uci_esbo_table.py", ["--datasets", "iris"], "--datasets"),
    ("uci_esbo_table.py", ["--methods", "iwae,nope"], "--methods"),
    ("uci_esbo_table.py", ["--splits", "20"], "out of range"),
    ("vae_dsivi_prior.py", ["--K", "0"], "K must be positive"),
    ("vae_dsivi_prior.py", ["--K", "many"], "--K"),
    ("vae_dsivi_prior.py", ["--priors", "gauss"], "unknown prior"),
    ("vae_dsivi_prior.py", ["--priors", "dsivi:x"], "--priors"),
    ("vae_dsivi_prior.py", ["--priors", ","], "no priors"),
    ("variance_networks.py", ["--parameterizations", "diag"], "--parameterizations"),
    ("fgsm_robustness.py", ["--variance-parameterization", "diag"], "--variance-parameterization"),
    ("rdp_pruning_histogram.py", ["--arch", "vgg"], "--arch"),
]


@pytest.mark.parametrize("script, argv, message", CHECKED_AFTER_PARSING, ids=[f"{s[:-3]}-{' '.join(a)}" for s, a, _ in CHECKED_AFTER_PARSING])
def test_inconsistent_options_are_one_line_errors_before_any_work(script, argv, message, workdir, monkeypatch, capsys):
    line = _one_line_error(script, [*argv, "--results-dir", str(workdir / "results")], monkeypatch, capsys)
    assert message in line
    assert list(workdir.iterdir()) == []


def test_an_unreadable_statistics_file_is_a_one_line_error(tmp_path, workdir, monkeypatch, capsys):
    statistics = _write(tmp_path / "inputs" / "stats.json", '{"groupings": {"fc1.row": {"values": [1.0, 2')
    line = _one_line_error("rdp_pruning_histogram.py", ["--statistics", str(statistics), "--results-dir", str(workdir / "results")], monkeypatch, capsys)
    assert "stats.json is not a complete statistics JSON" in line
    assert list(workdir.iterdir()) == []


# -- a run that would run nothing never replaces a table -------------------------------------

#: ``(script, table stem, arguments that select nothing)``: each was a run of nothing that
#: wrote an empty table over the existing one (and exited 0)
EMPTY_RUNS = [
    ("uci_regression.py", "uci_bbb_summary", ["--splits", "5-2"]),
    ("uci_regression.py", "uci_bbb_summary", ["--splits", ""]),
    ("uci_regression.py", "uci_bbb_summary", ["--method", ","]),
    ("compare_objectives.py", "compare_objectives_summary", ["--seeds", "3-1"]),
    ("compare_objectives.py", "compare_objectives_summary", ["--methods", ""]),
    ("sparse_regression.py", "sparse_regression_500k_table", ["--seeds", "4-0"]),
    ("compress_lenet.py", "compress_lenet_sparse-vd_lenet300", ["--seeds", "2-0"]),
    ("compress_lenet.py", "compress_lenet_sparse-vd_lenet300", ["--method", ","]),
    ("dsivi_toy.py", "dsivi_toy", ["--seeds", "3-1"]),
    ("dsivi_toy.py", "dsivi_toy", ["--dims", ""]),
    ("dsivi_hierarchical_bnn.py", "dsivi_hierarchical_bnn_concrete", ["--splits", "4-0"]),
    ("dsivi_hierarchical_bnn.py", "dsivi_hierarchical_bnn_concrete", ["--methods", ","]),
    ("vae_dsivi_prior.py", "vae_dsivi_prior", ["--seeds", "3-1"]),
    ("variance_networks.py", "variance_networks", ["--parameterizations", ","]),
    ("uci_esbo_table.py", "uci_esbo_table", ["--splits", "19-0"]),
    ("uci_esbo_table.py", "uci_esbo_table", ["--datasets", ""]),
    ("uci_sgmcmc_table.py", "uci_sgmcmc_table", ["--splits", "9-3"]),
    ("uci_sgmcmc_table.py", "uci_sgmcmc_table", ["--methods", " , "]),
]


@pytest.mark.parametrize("script, stem, argv", EMPTY_RUNS, ids=[f"{s[:-3]}-{' '.join(map(repr, a))}" for s, _, a in EMPTY_RUNS])
def test_a_run_that_runs_nothing_leaves_the_existing_table(script, stem, argv, workdir, monkeypatch, capsys):
    results = workdir / "results"
    table = pd.DataFrame({"dataset": ["bostonHousing"], "method": ["bbb"], "rmse": [3.1], "rmse_se": [0.2]})
    csv = _write(results / f"{stem}.csv", table.to_csv(index=False))
    md = _write(results / f"{stem}.md", "# the existing table\n")
    before = {p: p.read_bytes() for p in (csv, md)}
    line = _one_line_error(script, [*argv, "--results-dir", str(results)], monkeypatch, capsys)
    assert argv[0] in line or "nothing" in line
    assert {p: p.read_bytes() for p in (csv, md)} == before
    assert sorted(p.name for p in workdir.rglob("*") if p.is_file()) == sorted([csv.name, md.name])
