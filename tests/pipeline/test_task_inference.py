"""Issue 62, item 1: ``--task auto`` asks instead of guessing. A count target (doctor visits, integers 0–89
with gaps, 56 distinct values) became a 56-class classifier, several classes without a training row. An
integer target is read as class labels only when it looks like labels (two values, or at most
``AUTO_CLASSES_MAX`` consecutive integers each in at least ``MIN_LABEL_ROWS`` rows); otherwise ingest
refuses in one line naming both readings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.table_scan import MIN_LABEL_ROWS
from pep_gp.pipeline.errors import InputError

BOTH = (r"pass --task regression for a numeric target, or --task classification to keep them all as classes; "
        r"counts train with --set model.likelihood=poisson \(or negative-binomial\)$")


def fitted(tmp_path, target: np.ndarray, **request):
    """The transformation ``pep ingest csv`` learns of a table with one feature and ``target``."""
    rng = np.random.default_rng(0)
    pd.DataFrame({"x": rng.normal(size=len(target)), "y": target}).to_csv(tmp_path / "t.csv", index=False)
    return open_source("csv", SourceRequest((tmp_path / "t.csv",), "y", **request)).fitted()


def visits(n: int = 4000) -> np.ndarray:
    """Doctor-visit-like counts: a negative binomial's long tail, 0 … dozens, with gaps near the top."""
    return np.random.default_rng(1).negative_binomial(0.7, 0.08, size=n)


def test_a_count_target_is_not_read_as_classes(tmp_path):
    y = visits()
    distinct = np.unique(y)
    assert len(distinct) < 100 and distinct[-1] - distinct[0] + 1 > len(distinct)  # gaps, and fewer than 100
    with pytest.raises(InputError, match=rf"t.csv, column 'y': {len(distinct)} distinct integers from 0 to "
                                         rf"{distinct[-1]}, {distinct[-1] + 1 - len(distinct)} of the values "
                                         rf"between them absent: counts or class labels\? " + BOTH):
        fitted(tmp_path, y)
    assert fitted(tmp_path, y, task="regression").transforms.labels is None  # either reading, asked for, is taken
    assert fitted(tmp_path, y, task="classification").transforms.labels == tuple(int(v) for v in distinct)


def test_consecutive_integers_with_a_rare_value_are_asked_about(tmp_path):
    y = np.minimum(visits(), 7)
    y[np.flatnonzero(y == 7)[MIN_LABEL_ROWS - 1:]] = 6  # 7 is left in MIN_LABEL_ROWS - 1 rows
    with pytest.raises(InputError, match=rf"t.csv, column 'y': 8 distinct integers, 7 in only "
                                         rf"{MIN_LABEL_ROWS - 1} rows: counts or class labels\? " + BOTH):
        fitted(tmp_path, y)


@pytest.mark.parametrize("labels", [np.arange(10), np.array([-1, 1]), np.array([1, 5]), np.arange(1, 4)])
def test_label_like_integers_are_still_classes(tmp_path, labels):
    """Digits 0..9, −1/+1 and any two values, 1..3: each value in MIN_LABEL_ROWS rows."""
    y = np.repeat(labels, MIN_LABEL_ROWS)
    assert fitted(tmp_path, y).transforms.labels == tuple(int(v) for v in labels)
