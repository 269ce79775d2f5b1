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


def bisect_quantiles(cdf, lower, upper, levels, steps: int = 64, integer: bool = False):
    """The ``y`` with ``cdf(y) = p`` for each level ``p`` ``[B, Q]`` of an increasing ``cdf`` (``[B, Q] → [B, Q]``)
    bracketed by ``cdf(lower) < p ≤ cdf(upper)``: ``steps`` bisection halvings (64: the last bit of
    float64). ``integer``: a count's quantile, the least integer ``k`` with ``cdf(k) ≥ p`` (``lower``,
    ``upper`` integers)."""

    def halve(_, bracket):
        low, high = bracket
        middle = jnp.floor(0.5 * (low + high)) if integer else 0.5 * (low + high)
        below = cdf(middle) < levels
        return jnp.where(below, middle, low), jnp.where(below, high, middle)

    low, high = jax.lax.fori_loop(0, steps, halve, (lower + jnp.zeros_like(levels), upper + jnp.zeros_like(levels)))
    return high if integer else 0.5 * (low + high)


def mixture_quantiles(means, stds, levels, steps: int = 64):
    """Quantiles of equally weighted Gaussian mixtures: per row ``b`` the ``y`` with
    ``(1/S) Σ_s Φ((y − μ_sb)/σ_sb) = p`` for each level ``p`` of row ``b``.

    The mixture's CDF is increasing, so bisection (:func:`bisect_quantiles`) on
    ``[min_s(μ − 9σ), max_s(μ + 9σ)]`` (where it is below ``Φ(−9) ≈ 1e-19`` and above ``1 − 1e-19``) brackets
    each quantile to the bracket's width times ``2^−steps``. One component (``S = 1``) is the Gaussian's own
    quantile ``μ + σΦ⁻¹(p)`` up to that rounding.

    Args:
        means, stds: the components, ``[S, B]`` each (``σ > 0``).
        levels: ``[B, Q]`` in ``(0, 1)``.
        steps: bisection steps.

    Returns:
        ``[B, Q]``.
    """
    return bisect_quantiles(lambda y: jnp.mean(ndtr((y[None] - means[..., None]) / stds[..., None]), axis=0),
                            jnp.min(means - 9.0 * stds, axis=0)[:, None], jnp.max(means + 9.0 * stds, axis=0)[:, None],
                            levels, steps)
