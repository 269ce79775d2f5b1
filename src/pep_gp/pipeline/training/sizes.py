"""Row counts padded to a few sizes, so that programs compiled for one count serve its neighbours.

JAX compiles a program per array shape. A training block of ``n`` rows is padded (with masked rows, which add
exactly zero to every sum) to :func:`bucket` ``(n)``, one of the sizes ``2^k`` and ``3·2^(k−1)``: the folds
of a cross-validation or the candidates of a grid search then share one compiled step, at most a third of a
block is padding. Predictions are padded the same way."""

from __future__ import annotations

import os

import numpy as np

BUCKETS_ENV = "PEP_SIZE_BUCKETS"  # "off" turns the padding off (to measure what it saves)
SMALLEST = 8


def buckets_on() -> bool:
    return os.environ.get(BUCKETS_ENV, "on").lower() not in ("off", "0", "false", "no")


def bucket(n: int) -> int:
    """The smallest size ``2^k`` or ``3·2^(k−1)`` (at least :data:`SMALLEST`) that holds ``n`` rows; ``n``
    itself when the buckets are off."""
    if not buckets_on():
        return n
    size = SMALLEST
    while size < n:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    return size


def padded_rows(x: np.ndarray) -> np.ndarray:
    """``x`` padded with copies of its first row to :func:`bucket` rows (the extra outputs are dropped)."""
    extra = bucket(x.shape[0]) - x.shape[0]
    return np.concatenate([x, np.repeat(x[:1], extra, axis=0)]) if extra else x
