"""Gaussian constants and the dense log-density (the exact-GP baseline of the benchmarks)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from .linalg import cholesky, logdet_from_cholesky, solve_lower

LOG_2PI = math.log(2.0 * math.pi)


def log_density(x, mean, covariance):
    """``log N(x; mean, covariance)`` via Cholesky."""
    lower = cholesky(covariance)
    c = solve_lower(lower, x - mean)
    return -0.5 * jnp.sum(c**2) - 0.5 * logdet_from_cholesky(lower) - 0.5 * x.shape[-1] * LOG_2PI
