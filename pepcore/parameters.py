"""Positive parameters are stored unconstrained; this is the one place the bijection lives."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def positive(raw):
    """Map an unconstrained value to a positive one (softplus)."""
    return jax.nn.softplus(raw)


def unconstrain_positive(value):
    """Inverse of :func:`positive`: ``log(expm1(value))`` computed stably."""
    value = jnp.asarray(value)
    return value + jnp.log(-jnp.expm1(-value))
