"""Covariance functions."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal, NamedTuple, get_args

import jax
import jax.numpy as jnp


ProductDtype = Literal["float64", "float32"]
"""The dtypes :class:`BatchedARDSquaredExponential` can run its products over the inputs in."""
PRODUCT_DTYPES = get_args(ProductDtype)


def check_product_dtype(value: str, name: str = "products") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is one of :data:`PRODUCT_DTYPES`."""
    if value not in PRODUCT_DTYPES:
        raise ValueError(f"{name} must be one of {PRODUCT_DTYPES}; got {value!r}")


class ARDSquaredExponential(NamedTuple):
    """ARD squared exponential ``k(x, x') = σ_f² exp(−½ Σ_d (x_d − x'_d)² / ℓ_d²)`` (Bui, Yan & Turner 2017).

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
        # differentiated) the backward pass needs one [N1, D] matrix product instead of two. The
        # expansion ‖x1‖² + ‖x2‖² − 2x1·x2 is taken about x1's mean (see `_centre`; x1 holds the
        # inducing inputs in every caller).
        centre = _centre(x1)
        x1, x2 = x1 - centre, x2 - centre
        weights = 1.0 / self.lengthscales**2
        sq = (jnp.sum(x1**2 * weights, axis=1)[:, None] + jnp.sum(x2**2 * weights, axis=1)[None, :]
              - 2.0 * (x1 * weights) @ x2.T)
        return self.variance * jnp.exp(-0.5 * jnp.maximum(sq, 0.0))

    def diag(self, x):
        """``k(x_n, x_n)`` for each row, shape [N]."""
        return jnp.full(x.shape[:1], self.variance, dtype=x.dtype)


def _centre(points):
    """The mean of the rows of ``points`` ([..., D]), a constant for autodiff: shape [D].

    Squared distances are translation invariant, but their expansion ``‖x‖² + ‖z‖² − 2x·z`` cancels
    catastrophically when the inputs share a large offset ``o`` (round-off ``~ε‖o‖²/ℓ²``: at ``o = 1e6``
    the kernel was off by 2.6e-4, at 1e8 it was meaningless). Expanding about a point inside the
    inputs costs ``O(N·D)`` and leaves round-off ``~ε·spread²/ℓ²``. The centre carries no gradient: the
    exact distances do not depend on it, so the derivative with it held fixed is the exact one. Callers
    take it from the inducing inputs only, so it (and the rounding) does not depend on how the data rows
    are chunked.
    """
    return jax.lax.stop_gradient(jnp.mean(points.reshape(-1, points.shape[-1]), axis=0))


@jax.custom_vjp
def _symmetric_gram(a):
    """``a aᵀ`` per leading index, ``[C, M, D] -> [C, M, M]``; its backward pass is one matrix product
    ``(G + Gᵀ) a`` instead of autodiff's two."""
    return jnp.einsum("cmd,cnd->cmn", a, a)


def _symmetric_gram_forward(a):
    return _symmetric_gram(a), a


def _symmetric_gram_backward(a, cotangent):
    return (jnp.einsum("cmn,cnd->cmd", cotangent + jnp.swapaxes(cotangent, 1, 2), a),)


_symmetric_gram.defvjp(_symmetric_gram_forward, _symmetric_gram_backward)


@functools.partial(jax.tree_util.register_dataclass, data_fields=["lengthscales", "variance"],
                   meta_fields=["products"])
@dataclass(frozen=True)
class BatchedARDSquaredExponential:
    """``C`` ARD squared-exponential kernels evaluated together (one per class of a multi-class model).

    Written as whole-batch matrix products rather than ``jax.vmap`` of :class:`ARDSquaredExponential`:
    a vmapped product with a shared ``x`` broadcasts it and its backward pass costs twice as much, and
    the Gram matrices' backward pass uses their symmetry (measured: C = 10, M = B = 200, D = 784,
    value and gradient 11 ms for either form vs 22 and 27 ms vmapped).

    Args:
        lengthscales: ``ℓ_c``, shape [C, D], positive.
        variance: ``σ_c``, shape [C], positive.
        products: dtype of the matrix products over the input dimension D, the O(C·M·B·D) and
            O(C·M²·D) part of the cost, and of the Gram matrices' squared norms (one pass over the
            [C, M, D] inputs in that dtype serves both); a static field. ``"float32"`` halves their time
            on a CPU and leaves an absolute error ``~6e-8·(‖z − c‖² + ‖x − c‖²)/ℓ²`` in the squared
            distances (``c`` the centre of the inducing inputs, :func:`_centre`); the distances,
            exponentials and everything downstream stay in the inputs' dtype. ``"float64"`` (default)
            keeps all of it exact to double precision. (The cross matrices keep their norms in the
            inputs' dtype: summed in float32 they took the distances past that bound, which
            tests/core/test_primitives.py checks.)
    """

    lengthscales: jnp.ndarray  # [C, D]
    variance: jnp.ndarray  # [C]
    products: ProductDtype = "float64"

    def __post_init__(self):
        check_product_dtype(self.products)

    def gram(self, z):
        """``k_c(Z_c, Z_c)`` for ``z`` [C, M, D], shape [C, M, M]."""
        scaled = (z - _centre(z)) / self.lengthscales[:, None, :]
        in_products = scaled.astype(self.products)  # the norms too: one pass over [C, M, D] in that dtype
        norms = jnp.sum(in_products**2, axis=-1).astype(scaled.dtype)
        inner = _symmetric_gram(in_products).astype(scaled.dtype)
        sq = norms[:, :, None] + norms[:, None, :] - 2.0 * inner
        return self.variance[:, None, None] * jnp.exp(-0.5 * jnp.maximum(sq, 0.0))

    def cross(self, z, x):
        """``k_c(Z_c, x)`` for ``z`` [C, M, D] and rows ``x`` [B, D] shared by all kernels, shape [C, M, B]."""
        centre = _centre(z)  # the expansion point of `gram`: inside the data, where Z lies
        z, x = z - centre, x - centre
        weights = 1.0 / self.lengthscales**2
        weighted = z * weights[:, None, :]
        inner = jnp.einsum("cmd,bd->cmb", weighted.astype(self.products), x.astype(self.products)).astype(x.dtype)
        sq = jnp.sum(z * weighted, axis=-1)[:, :, None] + (weights @ (x**2).T)[:, None, :] - 2.0 * inner
        return self.variance[:, None, None] * jnp.exp(-0.5 * jnp.maximum(sq, 0.0))
