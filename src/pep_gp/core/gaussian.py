"""Gaussian constants, the dense log-density (the exact-GP baseline of the benchmarks) and the quantiles of
Gaussian mixtures (the deep GP's predictive)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr

from .linalg import cholesky, logdet_from_cholesky, solve_lower

LOG_2PI = math.log(2.0 * math.pi)


def log_density(x, mean, covariance):
    """``log N(x; mean, covariance)`` via Cholesky."""
    lower = cholesky(covariance)
    c = solve_lower(lower, x - mean)
    return -0.5 * jnp.sum(c**2) - 0.5 * logdet_from_cholesky(lower) - 0.5 * x.shape[-1] * LOG_2PI


def mixture_quantiles(means, stds, levels, steps: int = 64):
    """Quantiles of equally weighted Gaussian mixtures: per row ``b`` the ``y`` with
    ``(1/S) Σ_s Φ((y − μ_sb)/σ_sb) = p`` for each level ``p`` of row ``b``.

    The mixture's CDF is increasing, so bisection on ``[min_s(μ − 9σ), max_s(μ + 9σ)]`` (where it is below
    ``Φ(−9) ≈ 1e-19`` and above ``1 − 1e-19``) with ``steps`` halvings brackets each quantile to the
    bracket's width times ``2^−steps`` (64: the last bit of float64). One component (``S = 1``) is the
    Gaussian's own quantile ``μ + σΦ⁻¹(p)`` up to that rounding.

    Args:
        means, stds: the components, ``[S, B]`` each (``σ > 0``).
        levels: ``[B, Q]`` in ``(0, 1)``.
        steps: bisection steps.

    Returns:
        ``[B, Q]``.
    """
    lower = jnp.min(means - 9.0 * stds, axis=0)[:, None] + jnp.zeros_like(levels)
    upper = jnp.max(means + 9.0 * stds, axis=0)[:, None] + jnp.zeros_like(levels)

    def cdf(y):  # [B, Q]
        return jnp.mean(ndtr((y[None] - means[..., None]) / stds[..., None]), axis=0)

    def halve(_, bracket):
        low, high = bracket
        middle = 0.5 * (low + high)
        below = cdf(middle) < levels
        return jnp.where(below, middle, low), jnp.where(below, high, middle)

    low, high = jax.lax.fori_loop(0, steps, halve, (lower, upper))
    return 0.5 * (low + high)
