"""Covariance functions."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp


class ARDSquaredExponential(NamedTuple):
    """ARD squared exponential ``k(x, x') = σ_f² exp(−½ Σ_d (x_d − x'_d)² / ℓ_d²)`` (seed000 §0).

    Args:
        lengthscales: ``ℓ``, shape [D], positive.
        variance: ``σ_f²``, scalar, positive.

    Example:
        >>> k = ARDSquaredExponential(jnp.ones(2), jnp.asarray(1.0))
        >>> k(jnp.zeros((3, 2)), jnp.zeros((1, 2))).shape
        (3, 1)
    """

    lengthscales: jnp.ndarray  # [D]
    variance: jnp.ndarray  # []

    def __call__(self, x1, x2):
        """Cross-covariance matrix, shape [N1, N2]."""
        if x1.ndim != 2 or x2.ndim != 2 or x1.shape[1] != x2.shape[1]:
            raise ValueError(
                f"kernel inputs must be [N1, D] and [N2, D] with the same D; got {x1.shape} and {x2.shape}"
            )
        # Σ_d (x1_d − x2_d)²/ℓ_d² with the weights on x1's side only: when x2 is data (not
        # differentiated) the backward pass needs one [N1, D] matrix product instead of two.
        weights = 1.0 / self.lengthscales**2
        sq = (jnp.sum(x1**2 * weights, axis=1)[:, None] + jnp.sum(x2**2 * weights, axis=1)[None, :]
              - 2.0 * (x1 * weights) @ x2.T)
        return self.variance * jnp.exp(-0.5 * jnp.maximum(sq, 0.0))

    def diag(self, x):
        """``k(x_n, x_n)`` for each row, shape [N]."""
        return jnp.full(x.shape[:1], self.variance, dtype=x.dtype)
