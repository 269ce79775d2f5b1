"""k-means inducing inputs on rows with few distinct values: empty clusters keep a row, silently."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.cluster.vq import kmeans2

from pep_gp.core.initialisation import kmeans_inducing


def test_empty_clusters_keep_a_row_and_warn_nothing():
    rows = np.repeat(np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]), 100, axis=0)  # 3 distinct rows, 10 centres
    with pytest.warns(UserWarning, match="One of the clusters is empty"):  # scipy's own call does warn here
        kmeans2(rows, 10, minit="points", seed=np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        centres = kmeans_inducing(rows, 10)
    assert centres.shape == (10, 2)
    assert all(any(np.array_equal(centre, row) for row in rows[::100]) for centre in centres)
