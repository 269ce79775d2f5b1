"""Stable dense linear algebra: Cholesky with explicit jitter, triangular solves, log-determinants.

Jitter policy (used everywhere in pep): a covariance ``K`` is factorised as ``chol(K + jitter·s·I)``,
where ``s`` is the kernel amplitude (so the jitter is *relative*, as in the seed000 Matlab code) and
``jitter`` defaults to :data:`DEFAULT_JITTER`. With inducing inputs equal to the training inputs the
jitter perturbs the residual variances ``D_nn`` by at most ``jitter·s`` and the log evidence by at most
about ``jitter·s·tr((K + σ²I)⁻¹) ≤ jitter·s·N/σ²`` — 5e-5·N/σ² for the default, i.e. ≤ 1e-6 relative on
the test problems.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular

DEFAULT_JITTER = 1e-6


def cholesky(matrix, jitter: float = 0.0):
    """Lower Cholesky factor of ``matrix + jitter·I``.

    Cholesky cannot raise inside ``jit``; a non-PD input gives NaNs, which the coordinator rejects as a
    non-finite step. Pass an explicit jitter rather than relying on a silent fallback.
    """
    size = matrix.shape[-1]
    return jnp.linalg.cholesky(matrix + jitter * jnp.eye(size, dtype=matrix.dtype))


def solve_lower(lower, rhs):
    """``lower⁻¹ rhs`` for a lower-triangular ``lower``."""
    return solve_triangular(lower, rhs, lower=True)


def solve_upper_from_lower(lower, rhs):
    """``lower⁻ᵀ rhs`` for a lower-triangular ``lower``."""
    return solve_triangular(lower, rhs, lower=True, trans="T")


def logdet_from_cholesky(lower):
    """``log|A|`` from the Cholesky factor ``L`` of ``A = L Lᵀ``."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(lower, axis1=-2, axis2=-1)), axis=-1)
