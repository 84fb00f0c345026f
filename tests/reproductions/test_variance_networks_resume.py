"""reproductions/variance_networks.py runs a subset of the parameterizations and merges it into the
table of the others (``--resume``, by parameterization, from its runs file), never across two
settings."""

import pandas as pd
import pytest

from tests.runner import run_example

#: 100 training images (--quick: 1 epoch, 200 test images, 2 weight samples)
SMALL = ["--quick", "--arch", "lenet300", "--no-progress", "--train-size", "100"]


def test_a_subset_is_merged_into_the_table_of_the_others(tmp_path, monkeypatch, capsys):
    run_example("variance_networks.py", *SMALL, "--parameterizations", "layer", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    first = pd.read_csv(tmp_path / "variance_networks_runs.csv")
    assert first.parameterization.tolist() == ["layer"] and first.train_examples.tolist() == [100]
    capsys.readouterr()
    run_example("variance_networks.py", *SMALL, "--parameterizations", "zero-mean,layer", "--resume", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    assert "layer: kept from" in capsys.readouterr().out  # not trained again
    runs = pd.read_csv(tmp_path / "variance_networks_runs.csv")
    assert runs.parameterization.tolist() == ["layer", "zero-mean"]
    pd.testing.assert_frame_equal(runs.iloc[:1], first)
    table = pd.read_csv(tmp_path / "variance_networks.csv")
    measured = table[table.source == "measured (this repository)"].reset_index(drop=True)
    assert measured.parameterization.tolist() == ["layer", "zero-mean"]
    pd.testing.assert_frame_equal(measured[["elbo", "kl", "test_time_averaging_accuracy"]], runs[["elbo", "kl", "test_time_averaging_accuracy"]])
    assert table[table.source.str.startswith("published")].parameterization.tolist() == ["layer", "zero-mean"]
    notes = (tmp_path / "variance_networks.md").read_text()
    assert "The zero-mean network: every hidden layer zero-mean, the output layer a point estimate" in notes
    assert "Kept from variance_networks_runs.csv (--resume; run earlier, in this setting): layer." in notes


def test_runs_of_another_setting_are_not_merged(tmp_path, monkeypatch):
    run_example("variance_networks.py", *SMALL, "--parameterizations", "layer", "--results-dir", tmp_path, monkeypatch=monkeypatch)
    before = (tmp_path / "variance_networks.csv").read_bytes()
    argv = [*SMALL[:-1], "60", "--parameterizations", "zero-mean", "--resume", "--results-dir", tmp_path]
    with pytest.raises(SystemExit) as info:
        run_example("variance_networks.py", *argv, monkeypatch=monkeypatch)
    assert "holds a run of layer in another setting: train_examples 100 (now 60)" in info.value.code and "leave out --resume" in info.value.code
    assert (tmp_path / "variance_networks.csv").read_bytes() == before
    assert pd.read_csv(tmp_path / "variance_networks_runs.csv").parameterization.tolist() == ["layer"]
