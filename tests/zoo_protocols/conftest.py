"""Shared fixtures of the recipe (experiment protocol) tests."""

import pytest

from pyrozoo.data import UCIDataset
from zoo_protocols.paths import default_data_dir


@pytest.fixture(scope="module")
def boston_split():
    """Split 0 of Boston housing, the UCI runners' smoke-test data."""
    return UCIDataset("bostonHousing", default_data_dir()).split(0)
