"""Shared fixtures of the experiment-runner tests."""

import pytest

from pyrozoo.data import UCIDataset


@pytest.fixture(scope="module")
def boston_split():
    """Split 0 of Boston housing, the UCI runners' smoke-test data."""
    return UCIDataset("bostonHousing").split(0)
