"""Streaming mean and variance that merge exactly in a fixed order (Chan et al. 1979)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


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
        """Moments of the rows of ``values`` ((n, D) or (n,), any real dtype), in float64."""
        values = np.asarray(values, dtype=np.float64).reshape(len(values), -1)
        mean = values.mean(axis=0) if len(values) else np.zeros(values.shape[1])
        return cls(len(values), mean, ((values - mean) ** 2).sum(axis=0))

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
