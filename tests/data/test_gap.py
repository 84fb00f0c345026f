"""UCI gap splits (Foong et al. 2019): the middle third of each feature's values is the test set."""

import numpy as np
import pytest
import torch

from pyrozoo.data import UCIDataset, gap_rows, gap_split
from zoo_protocols.paths import default_data_dir

#: row counts with each remainder modulo 3, and ties at the boundaries
VALUE_CASES = [
    pytest.param(np.arange(30.0)[::-1], id="n=30-descending"),
    pytest.param(np.random.default_rng(0).normal(size=31), id="n=31-normal"),
    pytest.param(np.random.default_rng(1).integers(0, 4, size=32).astype(float), id="n=32-ties"),
    pytest.param(np.array([2.0, 0.0, 1.0]), id="n=3"),
]


@pytest.mark.parametrize("values", VALUE_CASES)
def test_gap_rows_hold_out_exactly_the_middle_third(values):
    n = len(values)
    train, test = gap_rows(values)
    assert len(test) == (2 * n) // 3 - n // 3 and len(train) + len(test) == n
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(n))
    # the test rows' sorted positions (ties in row order) are floor(n/3) .. floor(2n/3) - 1
    rank = np.empty(n, dtype=int)
    rank[np.argsort(values, kind="stable")] = np.arange(n)
    assert sorted(rank[test].tolist()) == list(range(n // 3, (2 * n) // 3))
    lower, upper = train[rank[train] < n // 3], train[rank[train] >= (2 * n) // 3]
    assert len(lower) == n // 3 and len(upper) == n - (2 * n) // 3
    assert values[lower].max(initial=-np.inf) <= values[test].min() and values[test].max() <= values[upper].min(initial=np.inf)


def test_gap_rows_refuse_what_cannot_be_split():
    with pytest.raises(ValueError, match="at least 3"):
        gap_rows(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="1-d"):
        gap_rows(np.zeros((4, 2)))


@pytest.fixture(scope="module")
def concrete():
    try:
        root = default_data_dir()
    except FileNotFoundError:
        pytest.skip("no shared data directory")
    if not (root / "uci" / "concrete").is_dir():
        pytest.skip("UCI concrete not available")
    return UCIDataset("concrete", root)


@pytest.mark.parametrize("feature", [0, 3, 7])
def test_gap_split_of_a_data_set_is_standardised_on_its_training_rows(concrete, feature):
    split = gap_split(concrete, feature)
    assert split.split == feature
    train, test = gap_rows(concrete.x[:, feature])
    assert len(split.y_test) == len(test) and len(split.y_train) == len(train)
    # in original units, the test inputs are the held-out rows, and on the feature they lie between the training thirds
    x_test = split.x_test * split.x_std + split.x_mean
    np.testing.assert_allclose(x_test.numpy(), concrete.x[test], rtol=1e-10, atol=1e-8)
    torch.testing.assert_close(split.x_train.mean(0), torch.zeros(concrete.x.shape[1], dtype=torch.float64), atol=1e-10, rtol=0)
    assert float(split.y_train.mean()) == pytest.approx(0.0, abs=1e-10)
    held_out = x_test[:, feature]
    x_train = split.x_train[:, feature] * split.x_std[feature] + split.x_mean[feature]
    assert ((x_train <= held_out.min()) | (x_train >= held_out.max())).all()


def test_gap_split_names_its_range(concrete):
    with pytest.raises(ValueError, match="gap splits 0..7"):
        gap_split(concrete, 8)
