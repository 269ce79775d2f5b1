"""Sums over rows whose gradient is accumulated a few rows at a time.

A data term ``L(θ) = Σ_n ℓ_n(θ)`` is a sum of per-row terms, so ``∇L = Σ_chunks ∇(Σ_{n∈chunk} ℓ_n)``:
:func:`row_chunked_sum` computes the value and the gradient of each chunk of rows together, while the
chunk's intermediates are still in the cache, and adds the gradients up (``lax.scan``). Autodiff of the
whole sum would instead keep every row's intermediates until the backward pass, or recompute them there
(``jax.checkpoint``); for the deep GP's ψ₂ (``rows × M(M+1)/2`` exponentials) the first costs memory
``O(rows·M²)`` and the second a second pass of exponentials. Without differentiation the value is
computed chunk by chunk as well (``lax.map``), so memory is ``O(chunk)`` either way.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp


def _chunks(rows: int, size: int, *arrays):
    """``arrays`` (leading axis ``rows``) padded with zeros to a multiple of ``size`` and cut into
    ``[count, size, ...]`` chunks (padded rows of a boolean mask are False)."""
    count = -(-rows // size)
    pad = count * size - rows
    return tuple(jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1)).reshape(count, size, *a.shape[1:]) for a in arrays)


def row_chunked_sum(term: Callable[..., Any], rows_per_chunk: int) -> Callable[..., Any]:
    """``total(params, x, y, mask) = term(params, x, y, mask)`` for a ``term`` that is a sum over the
    rows of ``x``, ``y``, ``mask`` (a row with ``mask = False`` must add exactly zero, as padding does),
    evaluated ``rows_per_chunk`` rows at a time; its gradient w.r.t. ``params`` (any pytree) is the sum
    of the chunks' gradients, computed in the forward pass. ``x``, ``y`` and ``mask`` are data: they get
    no gradient.

    Example:
        >>> total = row_chunked_sum(lambda w, x, y, m: jnp.sum(jnp.where(m, (x @ w - y) ** 2, 0.0)), 2)
        >>> x, y = jnp.ones((5, 3)), jnp.arange(5.0)
        >>> bool(jnp.allclose(jax.grad(total)(jnp.ones(3), x, y, jnp.ones(5, bool)), 2 * (x @ jnp.ones(3) - y) @ x))
        True
    """

    def chunked(x, y, mask):
        return _chunks(x.shape[0], min(rows_per_chunk, x.shape[0]), x, y, mask)

    @jax.custom_vjp
    def total(params, x, y, mask):
        return jnp.sum(jax.lax.map(lambda chunk: term(params, *chunk), chunked(x, y, mask)))

    def forward(params, x, y, mask):
        def add_chunk(grad, chunk):
            value, chunk_grad = jax.value_and_grad(term)(params, *chunk)
            return jax.tree_util.tree_map(jnp.add, grad, chunk_grad), value

        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        grad, values = jax.lax.scan(add_chunk, zeros, chunked(x, y, mask))
        return jnp.sum(values), grad

    def backward(grad, cotangent):
        return jax.tree_util.tree_map(lambda g: cotangent * g, grad), None, None, None

    total.defvjp(forward, backward)
    return total
