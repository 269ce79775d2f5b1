"""Multivariate Gaussians in natural parameters.

A (possibly unnormalised) Gaussian factor is ``exp(hᵀu − ½ uᵀΛu)`` with *shift* ``h = Λμ`` and
*precision* ``Λ``. Products and quotients of factors add and subtract natural parameters, which is how
EP builds posteriors and cavities (seed000 eqs. 19, 119–122).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp

from pepcore.linalg import cholesky, logdet_from_cholesky, solve_lower, solve_upper_from_lower

LOG_2PI = math.log(2.0 * math.pi)


class NaturalGaussian(NamedTuple):
    """Natural parameters of ``exp(hᵀu − ½uᵀΛu)``."""

    shift: jnp.ndarray  # h = Λμ, shape [M]
    precision: jnp.ndarray  # Λ, shape [M, M], symmetric


def log_normaliser(g: NaturalGaussian):
    """``φ(h, Λ) = log ∫ exp(hᵀu − ½uᵀΛu) du = ½hᵀΛ⁻¹h − ½log|Λ| + (M/2)log 2π`` (seed000 eq. 113)."""
    lower = cholesky(g.precision)
    c = solve_lower(lower, g.shift)
    size = g.shift.shape[-1]
    return 0.5 * jnp.sum(c**2) - 0.5 * logdet_from_cholesky(lower) + 0.5 * size * LOG_2PI


def multiply(a: NaturalGaussian, b: NaturalGaussian, power=1.0) -> NaturalGaussian:
    """Natural parameters of ``a · b^power`` (a product of factors; a quotient for negative power)."""
    return NaturalGaussian(a.shift + power * b.shift, a.precision + power * b.precision)


def divide(a: NaturalGaussian, b: NaturalGaussian, power=1.0) -> NaturalGaussian:
    """Natural parameters of ``a / b^power`` (EP's deletion step, seed000 eq. 19)."""
    return multiply(a, b, -power)


def from_moments(mean, covariance) -> NaturalGaussian:
    """Natural parameters of ``N(mean, covariance)`` (up to the normalising constant)."""
    lower = cholesky(covariance)
    precision = solve_upper_from_lower(lower, solve_lower(lower, jnp.eye(mean.shape[-1], dtype=mean.dtype)))
    return NaturalGaussian(precision @ mean, precision)


def to_moments(g: NaturalGaussian):
    """``(mean, covariance)`` of a normalisable factor; requires a positive-definite precision."""
    lower = cholesky(g.precision)
    eye = jnp.eye(g.shift.shape[-1], dtype=g.shift.dtype)
    covariance = solve_upper_from_lower(lower, solve_lower(lower, eye))
    return covariance @ g.shift, covariance


def log_density(x, mean, covariance):
    """``log N(x; mean, covariance)`` via Cholesky."""
    lower = cholesky(covariance)
    c = solve_lower(lower, x - mean)
    return -0.5 * jnp.sum(c**2) - 0.5 * logdet_from_cholesky(lower) - 0.5 * x.shape[-1] * LOG_2PI
