"""Streaming mean and variance that merge exactly in a fixed order (Chan et al. 1979)."""

from __future__ import annotations

from functools import reduce
from typing import Any, NamedTuple

import numpy as np

SLICE_ROWS = 1024


class Moments(NamedTuple):
    """Count, mean and sum of squared deviations of a set of rows, per column.

    References:
        Chan, Golub & LeVeque (1979), "Updating formulae and a pairwise algorithm for computing sample
        variances": merging two sets adds ``delta² · n_a · n_b / n`` to the summed squares.
    """

    n: int             # rows
    mean: np.ndarray   # shape=(D,), float64
    m2: np.ndarray     # shape=(D,), float64: Σ (x - mean)²

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        """Moments of the rows of ``values`` ((n, D) or (n,), any real dtype), in float64.

        Rows are taken :data:`SLICE_ROWS` at a time (merged in order), so the float64 temporaries stay
        small for wide data such as images.
        """
        values = np.asarray(values).reshape(len(values), -1)
        if len(values) <= SLICE_ROWS:
            block = values.astype(np.float64)
            mean = block.mean(axis=0) if len(block) else np.zeros(block.shape[1])
            return cls(len(block), mean, ((block - mean) ** 2).sum(axis=0))
        return reduce(cls.merge, (cls.of(values[i:i + SLICE_ROWS])
                                  for i in range(0, len(values), SLICE_ROWS)))

    @classmethod
    def of_chunks(cls, values: np.ndarray, chunk_rows: int) -> Moments:
        """Moments of ``values`` taken ``chunk_rows`` rows at a time and merged in order: bit for bit what
        ``pep ingest`` computes for a store with chunks of ``chunk_rows`` rows."""
        values = np.asarray(values)
        return reduce(cls.merge, (cls.of(values[i:i + chunk_rows]) for i in range(0, max(len(values), 1), chunk_rows)))

    def merge(self, other: Moments) -> Moments:
        """Moments of the union of both sets of rows."""
        n = self.n + other.n
        if n == 0:
            return self
        delta = other.mean - self.mean
        return Moments(n, self.mean + delta * (other.n / n),
                       self.m2 + other.m2 + delta**2 * (self.n * other.n / n))

    def std(self) -> np.ndarray:
        """Population standard deviation, 1.0 where it is 0 (a constant column) so it can divide."""
        std = np.sqrt(self.m2 / max(self.n, 1))
        return np.where(std > 0, std, 1.0)


def target_statistics(y_moments: Moments | None, n_targets: int) -> dict[str, Any]:
    """Attributes ``y_mean`` and ``y_std`` of a store from its training targets' moments: single numbers for
    one target, a list of ``n_targets`` for more, None for classification."""
    if y_moments is None:
        return {"y_mean": None, "y_std": None}
    mean, std = y_moments.mean.tolist(), y_moments.std().tolist()
    return {"y_mean": mean[0], "y_std": std[0]} if n_targets == 1 else {"y_mean": mean, "y_std": std}
