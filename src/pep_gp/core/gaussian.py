"""Gaussian constants, the normal CDF, the dense log-density (the exact-GP baseline of the benchmarks) and the
quantiles of Gaussian mixtures (the deep GP's predictive)."""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import ndtr, ndtri

from .linalg import cholesky, logdet_from_cholesky, solve_lower

LOG_2PI = math.log(2.0 * math.pi)


def normal_cdf(x):
    """``Φ(x) = ½ erfc(−x/√2)``: one evaluation of XLA's ``erfc``, where ``jax.scipy.special.ndtr`` evaluates
    both ``erf`` and ``erfc`` and selects (about 3× the cost in the softmax's convolutions). ``erfc`` is
    accurate relative to its value, so ``Φ`` is too in the left tail (within 1e-12 of ``ndtr`` down to
    ``x = −37``, ``tests/core/test_primitives.py``), where both underflow to 0 below about ``−37.5``."""
    return 0.5 * jax.lax.erfc(-x * math.sqrt(0.5))


def log_density(x, mean, covariance):
    """``log N(x; mean, covariance)`` via Cholesky."""
    lower = cholesky(covariance)
    c = solve_lower(lower, x - mean)
    return -0.5 * jnp.sum(c**2) - 0.5 * logdet_from_cholesky(lower) - 0.5 * x.shape[-1] * LOG_2PI


def bisect_quantiles(cdf, lower, upper, levels, steps: int = 64, integer: bool = False):
    """The ``y`` with ``cdf(y) = p`` for each level ``p`` ``[B, Q]`` of an increasing ``cdf`` (``[B, Q] → [B, Q]``)
    bracketed by ``cdf(lower) < p ≤ cdf(upper)``: at most ``steps`` bisection halvings (64: the last bit of
    float64). ``integer``: a count's quantile, the least integer ``k`` with ``cdf(k) ≥ p`` (``lower``,
    ``upper`` integers).

    The halvings stop once no bracket can shrink further (its midpoint is one of its ends, as for an integer
    bracket of width 1): a halving after that leaves every bracket as it is, so the result is that of all
    ``steps`` halvings, computed with as few evaluations of ``cdf`` as the widest bracket needs."""

    def middle_of(low, high):
        return jnp.floor(0.5 * (low + high)) if integer else 0.5 * (low + high)

    def unfinished(state):
        step, low, high = state
        middle = middle_of(low, high)
        return (step < steps) & jnp.any((middle != low) & (middle != high))

    def halve(state):
        step, low, high = state
        middle = middle_of(low, high)
        below = cdf(middle) < levels
        return step + 1, jnp.where(below, middle, low), jnp.where(below, high, middle)

    _, low, high = jax.lax.while_loop(unfinished, halve, (0, lower + jnp.zeros_like(levels),
                                                          upper + jnp.zeros_like(levels)))
    return high if integer else 0.5 * (low + high)


class QuantileProblem(NamedTuple):
    """``cdf(y) = p`` for each level ``p`` ``[B, Q]`` of a continuous increasing ``cdf`` with derivative ``density``
    (both ``[B, Q] → [B, Q]``), bracketed by ``cdf(lower) < p ≤ cdf(upper)`` (``[B, 1]`` each); ``start``
    ``[B, Q]``: a first guess; ``scale`` ``[B, 1]``: the distribution's spread."""

    cdf: Callable
    density: Callable
    lower: jnp.ndarray
    upper: jnp.ndarray
    start: jnp.ndarray
    levels: jnp.ndarray
    scale: jnp.ndarray


def newton_quantiles(problem: QuantileProblem, steps: int = 100, tol: float = 1e-10):
    """The solutions ``y`` ``[B, Q]`` of a :class:`QuantileProblem`: Newton's method from ``start``, kept inside
    the shrinking bracket — a Newton step that would leave it is a bisection instead (``rtsafe`` of Press et al., *Numerical Recipes*, 3rd ed., §9.4). Newton's quadratic
    convergence needs a few evaluations of ``cdf`` where bisection needs one per bit of the bracket.

    A quantile takes its last Newton step once that step is at most ``tol·(|y| + scale)`` (the step after it
    would be about its square), or stops after ``steps`` steps;
    whether a quantile stops depends on its own steps only, not on those of the others computed with it."""
    cdf, density, lower, upper, start, levels, scale = problem
    levels = jnp.asarray(levels)
    low, high = lower + jnp.zeros_like(levels), upper + jnp.zeros_like(levels)
    start = jnp.clip(start + jnp.zeros_like(levels), low, high)

    def unfinished(state):
        step, *_, done = state
        return (step < steps) & ~jnp.all(done)

    def newton(state):
        step, old_low, old_high, y, done = state
        excess = cdf(y) - levels
        low, high = jnp.where(excess < 0, y, old_low), jnp.where(excess < 0, old_high, y)
        guess = y - excess / density(y)
        settled = done | (jnp.abs(guess - y) <= tol * (jnp.abs(y) + scale))
        inside = (guess > low) & (guess < high)
        after = jnp.where(settled | inside, jnp.clip(guess, low, high), 0.5 * (low + high))
        # a quantile settled before this step keeps its values
        return (step + 1, jnp.where(done, old_low, low), jnp.where(done, old_high, high), jnp.where(done, y, after),
                settled)

    return jax.lax.while_loop(unfinished, newton, (0, low, high, start, jnp.zeros(levels.shape, bool)))[3]


def mixture_problem(means, stds, levels, weights=None) -> QuantileProblem:
    """The quantiles of Gaussian mixtures as a :class:`QuantileProblem`: per row ``b`` the ``y`` with
    ``Σ_s w_s Φ((y − μ_sb)/σ_sb) = p`` for each level ``p`` of row ``b``, bracketed by
    ``[min_s(μ − 9σ), max_s(μ + 9σ)]`` (where the CDF is below ``Φ(−9) ≈ 1e-19`` and above
    ``1 − 1e-19``), from the Gaussian of the mixture's mean and variance.

    Args:
        means, stds: the components, ``[S, B]`` each (``σ > 0``).
        levels: ``[B, Q]`` in ``(0, 1)``.
        weights: the components' weights ``w_s`` ``[S]``, summing to 1; None: equal, ``1/S``.
    """

    def standardised(y):  # [S, B, Q]
        return (y[None] - means[..., None]) / stds[..., None]

    def mixed(values):  # Σ_s w_s values_s
        return jnp.mean(values, axis=0) if weights is None else jnp.tensordot(weights, values, axes=1)

    def cdf(y):
        return mixed(ndtr(standardised(y)))

    def density(y):
        return mixed(jnp.exp(-0.5 * standardised(y) ** 2) / stds[..., None]) / math.sqrt(2.0 * math.pi)

    mean = mixed(means)
    std = jnp.sqrt(mixed(stds**2 + means**2) - mean**2)
    return QuantileProblem(cdf, density, jnp.min(means - 9.0 * stds, axis=0)[:, None],
                           jnp.max(means + 9.0 * stds, axis=0)[:, None], mean[:, None] + std[:, None] * ndtri(levels),
                           levels, std[:, None])


def mixture_quantiles(means, stds, levels, weights=None):
    """The quantiles ``[B, Q]`` of :func:`mixture_problem` by Newton's method (:func:`newton_quantiles`); one
    component (``S = 1``) gives the Gaussian's own quantile ``μ + σΦ⁻¹(p)`` to rounding."""
    return newton_quantiles(mixture_problem(means, stds, levels, weights))
