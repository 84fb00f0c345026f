"""UCI "gap" splits: test inputs in between two clusters of training inputs.

Foong, Li, Hernández-Lobato & Turner, "'In-Between' Uncertainty in Bayesian Neural
Networks" (ICML 2019 workshop on Uncertainty and Robustness in Deep Learning, Section 4):
for each input feature ``d`` of a UCI data set, sort the rows on feature ``d`` and hold out
the middle third as the test set, so that the test inputs lie *between* the two thirds the
network is trained on. A method whose epistemic uncertainty grows only far from the data
(mean-field VI, the paper argues) is over-confident there, and its test log-likelihood on
the gap splits drops below that on random splits of the same data.

One split per feature; the split's index is the feature's index. A feature with tied
values at the boundaries (e.g. a binary feature) puts equal values on both sides, so its
"gap" is one in the row order only, not in the feature.
"""

from typing import Tuple

import numpy as np

from pyrozoo.data.uci import UCIDataset, UCISplit

__all__ = ["gap_rows", "gap_split"]


def gap_rows(feature_values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` row numbers of the gap split on one feature: the rows sorted by
    ``feature_values`` (stable, so ties keep their row order), the test rows at sorted
    positions ``floor(n/3) .. floor(2n/3) - 1`` (the middle third), the training rows the
    first and last thirds. Both are returned in sorted order of the feature.
    """
    values = np.asarray(feature_values)
    if values.ndim != 1:
        raise ValueError(f"gap_rows: expected the values of one feature (a 1-d array), got shape {values.shape}")
    n = len(values)
    if n < 3:
        raise ValueError(f"gap_rows: {n} rows cannot be split into thirds; a gap split needs at least 3")
    order = np.argsort(values, kind="stable")
    lo, hi = n // 3, (2 * n) // 3
    return np.concatenate([order[:lo], order[hi:]]), order[lo:hi]


def gap_split(dataset: UCIDataset, feature: int) -> UCISplit:
    """The gap split of ``dataset`` on input feature ``feature`` (``0 .. num features - 1``;
    the split's index), standardised with its training rows' statistics as the standard
    splits are (:meth:`~pyrozoo.data.UCIDataset.split_rows`)."""
    num_features = dataset.x.shape[1]
    if isinstance(feature, bool) or not isinstance(feature, (int, np.integer)) or not 0 <= feature < num_features:
        raise ValueError(f"{dataset.name} has gap splits 0..{num_features - 1} (one per input feature), not {feature!r}")
    train, test = gap_rows(dataset.x[:, int(feature)])
    return dataset.split_rows(train, test, int(feature))
