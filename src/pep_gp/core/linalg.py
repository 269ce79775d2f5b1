"""Stable dense linear algebra: Cholesky with explicit jitter, triangular solves, log-determinants.

Jitter policy (used everywhere in pep): a covariance ``K`` is factorised as ``chol(K + jitter·s·I)``,
where ``s`` is the kernel amplitude (so the jitter is *relative*, as in the Bui, Yan & Turner 2017 Matlab code) and
``jitter`` defaults to :data:`DEFAULT_JITTER` = √eps(float64) ≈ 1.5e-8 (dtype-derived, as tinygp).
That keeps ``cond(K_uu) ≤ M/1.5e-8``, safe for float64 Cholesky even when inducing inputs coincide.

Effect on the evidence: the jitter moves the PEP-α objective away from the exact GP evidence at every α,
α = 1 included (FITC's diagonal correction absorbs the change of ``D_nn`` but not that of the off-diagonal
``Q_ff``). Measured with inducing inputs at the training inputs (N = 60, σ² = 0.09, cond ``K_uu`` ≈ 1e11,
tests/core/test_collapsed_regression.py), relative departure for jitter 1e-8 / 1e-6: α = 1: 3.9e-9 /
1.3e-6; α = 0.5: 5.7e-8 / 4.0e-6; α = 0.01: 1.2e-7 / 9.2e-6; 5e-15 at zero jitter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jax.scipy.linalg import solve_triangular

DEFAULT_JITTER = float(np.sqrt(np.finfo(np.float64).eps))


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


def per_matrix(fn, *args):
    """``fn`` applied to each slice of ``args`` along their leading axis (e.g. one matrix per class),
    results stacked — use this instead of ``jax.vmap`` around Cholesky factorisations and triangular
    solves.

    ``jax.vmap`` turns them into *batched* LAPACK calls, which jaxlib 0.10 on CPU fans out to the XLA
    thread pool and then blocks on; when as many independent batched calls run at once as the pool
    has threads (2 on a 2-core machine), every pool thread waits for work only a pool thread could do
    and the computation hangs for ever (seen here in ``jax::ParallelBatchMap`` under
    ``lapack_dpotrf_ffi``; jaxlib 0.11 removes that parallel path). ``lax.map`` lowers to a loop of
    unbatched calls, which never enter it.
    """
    return jax.lax.map(lambda sliced: fn(*sliced), args)


def _lower_half_diagonal(x):
    """``Φ(X)``: the lower triangle of ``X`` with its diagonal halved (per matrix of a batch)."""
    return jnp.tril(x) - 0.5 * jnp.eye(x.shape[-1], dtype=x.dtype) * x


@jax.custom_vjp
def cholesky_and_inverse(matrices):
    """``(L, L⁻¹)`` with ``L = chol(A)`` for each symmetric positive definite ``A`` of ``[C, M, M]``.

    The forward pass factorises one matrix at a time (:func:`per_matrix`); the backward pass is matrix
    products only, batched over ``C`` (autodiff would run four triangular solves per matrix, one at a
    time). With ``P = L⁻¹``, ``dL = LΦ(P dA Pᵀ)`` and ``dP = −Φ(P dA Pᵀ)P``, so cotangents ``L̄, P̄``
    (lower triangles) give ``Ā = Pᵀ Φ(LᵀL̄ − P̄Pᵀ) P``, symmetrised (Murray 2016, "Differentiation of
    the Cholesky decomposition", for the ``L`` part). When nothing differentiates through ``L`` (its
    cotangent is a symbolic zero: SEP's held cavities, with ``log|A| = −2Σ log P_ii``) the ``LᵀL̄``
    product is skipped: three matrix products per matrix instead of four.
    """
    return _factorise(matrices)


@jax.jit  # one compiled loop per shape when called outside a jit (a model's init), not one per call
def _factorise(matrices):
    def one(matrix):
        lower = cholesky(matrix)
        return lower, solve_lower(lower, jnp.eye(matrix.shape[-1], dtype=matrix.dtype))

    return per_matrix(one, matrices)


def _cholesky_and_inverse_forward(matrices):
    factors = _factorise(matrices.value)  # symbolic_zeros: the primal comes wrapped
    return factors, factors


def _cholesky_and_inverse_backward(factors, cotangents):
    lower, inverse = factors
    lower_bar, inverse_bar = cotangents
    inner = -jnp.einsum("cik,cjk->cij", _dense_tril(inverse_bar, inverse), inverse)
    if not isinstance(lower_bar, SymbolicZero):
        inner = inner + jnp.einsum("cki,ckj->cij", lower, jnp.tril(lower_bar))
    grad = jnp.einsum("cki,ckl,clj->cij", inverse, _lower_half_diagonal(inner), inverse)
    return (0.5 * (grad + jnp.swapaxes(grad, -1, -2)),)


def _dense_tril(cotangent, like):
    """The lower triangle of a cotangent, zeros for a symbolic zero."""
    return jnp.zeros_like(like) if isinstance(cotangent, SymbolicZero) else jnp.tril(cotangent)


cholesky_and_inverse.defvjp(_cholesky_and_inverse_forward, _cholesky_and_inverse_backward, symbolic_zeros=True)
