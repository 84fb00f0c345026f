"""The data root: the library takes it as an argument or from ``$PYROZOO_DATA_DIR`` and never
searches for one; the examples' search for ``shared/data`` is :mod:`zoo_protocols.paths`'s."""

import pytest

from pyrozoo.data import UCIDataset, load_mnist, resolve_data_dir
from pyrozoo.data.cifar import find_cifar10
from pyrozoo.data.paths import ENV_VAR


def test_an_explicit_folder_wins_over_the_variable(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "b"))
    assert resolve_data_dir(tmp_path / "a") == tmp_path / "a"
    assert resolve_data_dir(str(tmp_path / "a")) == tmp_path / "a"
    assert resolve_data_dir() == tmp_path / "b"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_data_dir(tmp_path / "nowhere")


def test_without_a_folder_or_the_variable_the_loaders_say_what_to_do(tmp_path, monkeypatch):
    """No search: not beside the working directory, even where a ``shared/data`` is there."""
    (tmp_path / "shared" / "data" / "uci").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    for load in (resolve_data_dir, lambda: UCIDataset("bostonHousing"), lambda: load_mnist("mnist")):
        with pytest.raises(FileNotFoundError, match=rf"pass data_dir .*or set \${ENV_VAR}"):
            load()
    with pytest.raises(FileNotFoundError, match=rf"no data directory given: pass data_dir or set \${ENV_VAR}"):
        find_cifar10()


def test_the_recipes_find_shared_data_by_walking_up(tmp_path, monkeypatch):
    from zoo_protocols.paths import default_data_dir, resolve_data_dir as recipes_data_dir

    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    deep = tmp_path / "checkout" / "notebooks"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert default_data_dir() == data
    assert recipes_data_dir() == data and recipes_data_dir(tmp_path) == tmp_path
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "elsewhere"))
    assert default_data_dir() == tmp_path / "elsewhere"
    with pytest.raises(FileNotFoundError, match="does not exist"):
        recipes_data_dir()
