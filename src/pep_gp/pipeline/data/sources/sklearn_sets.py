"""The small data sets bundled with scikit-learn (offline), by name: ``sklearn:digits`` and others."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...errors import InputError, did_you_mean
from .base import BLOCK_ROWS, RowBlock, Source, SourceRequest

# name -> task; all are shipped inside scikit-learn, none is downloaded.
SETS = {
    "digits": "classification",
    "wine": "classification",
    "iris": "classification",
    "breast_cancer": "classification",
    "diabetes": "regression",
}


def open_sklearn(name: str, request: SourceRequest) -> Source:
    """The bundled scikit-learn set ``name`` (see :data:`SETS`)."""
    request.refuse(f"sklearn:{name}", inputs=True, target=True, task=True, table=True)
    if name not in SETS:
        raise InputError(f"sklearn:{name}: unknown set; expected one of "
                         f"{', '.join(f'sklearn:{s}' for s in SETS)}{did_you_mean(name, SETS)}")
    from sklearn import datasets  # imported here: scikit-learn is large, and only this source needs it

    bunch = getattr(datasets, f"load_{name}")()
    X, y = np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.float64)
    task = SETS[name]
    n_classes = len(bunch.target_names) if task == "classification" else None

    def read() -> Iterator[RowBlock]:
        for start in range(0, len(X), BLOCK_ROWS):
            rows = np.arange(start, min(start + BLOCK_ROWS, len(X)))
            yield RowBlock(X[rows], y[rows], f"sklearn:{name}", rows)

    return Source(f"sklearn:{name}", f"scikit-learn bundled set '{name}' ({len(X)} rows)",
                  tuple(map(str, bunch.feature_names)), "target", task, n_classes, "0.2", read)
