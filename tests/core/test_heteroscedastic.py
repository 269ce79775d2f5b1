"""The heteroscedastic Gaussian likelihood ``N(y; f, σ₀² e^g)`` of two latent functions: its Power-EP tilted
normaliser against scipy's nested adaptive quadrature over ``(f, g)``, its ``α → 0`` term against the same
integral of the log-likelihood, and its predictive's moments and CDF against quadrature over ``g``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate

from pep_gp.core.heteroscedastic import HeteroscedasticGaussian

NOISE0 = 0.3
# (y, m_f, v_f, m_g, v_g): a typical row, an outlier under a narrow f and a wide g, a wide f, a sharp f and
# small noise
ROWS = [(0.5, 0.1, 0.2, -1.0, 0.5), (3.0, -0.2, 0.05, -2.0, 2.0), (-1.0, 0.0, 1.0, 0.5, 0.1),
        (0.0, 0.0, 0.01, -3.0, 4.0)]
FAR_OUTLIER = (8.0, 0.0, 0.01, -3.0, 0.01)
"""A target 80 deviations of ``f`` away under a narrow ``g``: its tilted mass in ``g`` lies about 22 of ``g``'s
deviations above ``m_g`` on a scale of half of one, far from both the Gaussian's and the likelihood's centre, where
the composite rule's panels alone are too wide (0.75 and 0.13 nats off scipy at α = 1 and 0.5): the rule's
Laplace set about the tilted mode resolves it."""


def log_normal(x, mean, var):
    return -0.5 * (x - mean) ** 2 / var - 0.5 * math.log(2.0 * math.pi * var)


def normal(x, mean, var):
    return math.exp(log_normal(x, mean, var))


def nested(integrand, y, m_f, v_f, m_g, v_g):
    """``∫∫ N(f; m_f, v_f) N(g; m_g, v_g) h(f, g) df dg`` by scipy's adaptive quadrature, ``f`` inside: ``f`` from
    ten deviations below the lower of ``m_f`` and ``y`` to ten above the higher, ``g`` over ten deviations about
    ``m_g`` and up to where ``σ₀² e^g`` is ``(y − m_f)²`` (an outlier's tilted mass moves towards both)."""
    f_low, f_high = min(m_f, y) - 10 * math.sqrt(v_f), max(m_f, y) + 10 * math.sqrt(v_f)
    g_low = m_g - 10 * math.sqrt(v_g)
    g_high = max(m_g + 10 * math.sqrt(v_g), math.log((y - m_f) ** 2 / NOISE0 + 1e-300) + 5.0)

    def over_f(g):
        return normal(g, m_g, v_g) * integrate.quad(lambda f: normal(f, m_f, v_f) * integrand(f, g), f_low, f_high,
                                                    epsabs=0.0, epsrel=1e-11, limit=200)[0]
    return integrate.quad(over_f, g_low, g_high, epsabs=0.0, epsrel=1e-10, limit=200)[0]


def latents(m_f, v_f, m_g, v_g):
    return jnp.array([m_f, m_g]), jnp.array([v_f, v_g])


@pytest.mark.heavy  # scipy's nested quadrature: 4 s at α = 1 on an idle 2-core machine
@pytest.mark.parametrize("alpha", [1.0, pytest.param(0.5, marks=pytest.mark.exhaustive),
                                   pytest.param(0.1, marks=pytest.mark.exhaustive)])
def test_log_tilted_matches_nested_quadrature(alpha):
    """``log ∫∫ N(f) N(g) N(y; f, σ₀² e^g)^α`` to 1e-8 at every row of :data:`ROWS`."""
    lik = HeteroscedasticGaussian()
    params = lik.init_params(NOISE0)
    for y, m_f, v_f, m_g, v_g in ROWS:
        expected = math.log(nested(lambda f, g: normal(y, f, NOISE0 * math.exp(g)) ** alpha, y, m_f, v_f, m_g, v_g))
        got = float(lik.log_tilted(params, y, *latents(m_f, v_f, m_g, v_g), alpha))
        assert got == pytest.approx(expected, abs=1e-8), (y, m_f, v_f, m_g, v_g)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_log_tilted_of_a_far_outlier_matches_nested_quadrature(alpha):
    """:data:`FAR_OUTLIER`'s ``log Z̃`` to 1e-8 of scipy's (measured: equal to the last bit at both powers)."""
    lik = HeteroscedasticGaussian()
    y, m_f, v_f, m_g, v_g = FAR_OUTLIER
    expected = math.log(nested(lambda f, g: normal(y, f, NOISE0 * math.exp(g)) ** alpha, y, m_f, v_f, m_g, v_g))
    log_tilted = jax.jit(lik.log_tilted, static_argnums=4)  # compiled: a second faster than op by op
    assert float(log_tilted(lik.init_params(NOISE0), y, *latents(m_f, v_f, m_g, v_g), alpha)) == pytest.approx(
        expected, abs=1e-8)


def test_expected_log_prob_matches_nested_quadrature():
    """``E[log N(y; f, σ₀² e^g)]`` in closed form to 1e-9 of the nested quadrature."""
    lik = HeteroscedasticGaussian()
    params = lik.init_params(NOISE0)
    for y, m_f, v_f, m_g, v_g in ROWS:
        expected = nested(lambda f, g: log_normal(y, f, NOISE0 * math.exp(g)), y, m_f, v_f, m_g, v_g)
        got = float(lik.expected_log_prob(params, y, *latents(m_f, v_f, m_g, v_g)))
        assert got == pytest.approx(expected, abs=1e-9, rel=1e-11), (y, m_f, v_f, m_g, v_g)


@pytest.mark.heavy  # scipy's quadrature row by row: 5 s on an idle 2-core machine
def test_predictive_moments_and_cdf_match_quadrature_over_g():
    """The predictive's variance ``v_f + E[σ₀² e^g]`` and its CDF (the Gauss–Hermite mixture) against scipy's
    quadrature of ``N(g) Φ((y − m_f)/√(v_f + σ₀² e^g))``, and its quantiles invert that CDF."""
    from scipy.special import ndtr

    lik = HeteroscedasticGaussian()
    params = lik.init_params(NOISE0)
    rows = np.array(ROWS[:4])
    mean, var = jnp.asarray(rows[:, [1, 3]]), jnp.asarray(rows[:, [2, 4]])
    _, predictive_var = lik.predict(params, mean, var)
    cdf = np.asarray(lik.predictive_cdf(params, jnp.asarray(rows[:, 0]), mean, var)[1])
    for k, (y, m_f, v_f, m_g, v_g) in enumerate(rows):
        second = integrate.quad(lambda g: normal(g, m_g, v_g) * NOISE0 * math.exp(g), m_g - 12 * math.sqrt(v_g),
                                m_g + 12 * math.sqrt(v_g), epsabs=0.0, epsrel=1e-12)[0]
        assert float(predictive_var[k]) == pytest.approx(v_f + second, rel=1e-10)
        expected = integrate.quad(lambda g: normal(g, m_g, v_g) * ndtr((y - m_f) / math.sqrt(v_f + NOISE0 * math.exp(g))),
                                  m_g - 12 * math.sqrt(v_g), m_g + 12 * math.sqrt(v_g), epsabs=0.0, epsrel=1e-12)[0]
        assert cdf[k] == pytest.approx(expected, abs=1e-7)
    levels = jnp.asarray(np.tile([0.05, 0.5, 0.95], (4, 1)))
    quantiles = lik.quantiles(params, mean, var, levels)
    back = np.stack([np.asarray(lik.predictive_cdf(params, quantiles[:, j], mean, var)[1]) for j in range(3)], axis=1)
    np.testing.assert_allclose(back, levels, atol=1e-9)



def log_tilted_over_g(y, m_f, v_f, m_g, v_g, alpha):
    """``log ∫ N(g; m_g, v_g) exp(ℓ_α(g)) dg`` (the integral over ``f`` in closed form, Bui, Yan & Turner 2017
    eq. 127, in plain floats) by scipy's adaptive quadrature over 12 deviations below ``m_g`` to 40 above."""
    def ell(g):
        s = NOISE0 * math.exp(g)
        return (-0.5 * alpha * math.log(2.0 * math.pi * s) - 0.5 * math.log1p(alpha * v_f / s)
                - 0.5 * alpha * (y - m_f) ** 2 / (alpha * v_f + s))
    sd = math.sqrt(v_g)
    return math.log(integrate.quad(lambda g: normal(g, m_g, v_g) * math.exp(ell(g)), m_g - 12 * sd, m_g + 40 * sd,
                                   points=[m_g], epsabs=0.0, epsrel=1e-13, limit=500)[0])


def test_log_tilted_at_a_small_power_matches_quadrature_over_g():
    """At small ``α`` the rule's octaves reach ``g`` where ``e^g`` overflows or vanishes (the terms were NaN at
    α = 1e-3): ``log Z̃`` at α = 1e-3 to 1e-12 of scipy's quadrature over ``g`` at every row and
    :data:`FAR_OUTLIER` (measured: within 5e-16 at α = 1e-4 … 0.1)."""
    alpha = 1e-3
    lik = HeteroscedasticGaussian()
    rows = np.array(ROWS + [FAR_OUTLIER])
    got = jax.jit(lambda mean, var: lik.log_tilted(lik.init_params(NOISE0), jnp.asarray(rows[:, 0]), mean, var,
                                                   alpha))(jnp.asarray(rows[:, [1, 3]]), jnp.asarray(rows[:, [2, 4]]))
    expected = [log_tilted_over_g(*row, alpha) for row in rows]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=0.0, atol=1e-12)


@pytest.mark.heavy  # compiling the rule with its Newton steps and their derivatives, four times: 7 s
def test_log_tilted_gradients_match_central_differences():
    """``∂log Z̃`` in ``(m_f, v_f, m_g, v_g)`` and ``σ₀²``'s unconstrained value at a typical row and at
    :data:`FAR_OUTLIER` (where the rule's nodes follow the tilted mode and carry no gradient), α ∈ {0.01, 1},
    to 1e-6 relative of central differences of step 1e-5."""
    lik = HeteroscedasticGaussian()
    rows = np.array([ROWS[0], FAR_OUTLIER])
    raw = float(lik.init_params(NOISE0)["raw_noise_variance"])
    points = jnp.asarray(np.column_stack([rows[:, 1:], np.full(2, raw)]))  # [2, 5]: m_f, v_f, m_g, v_g, raw σ₀²
    shifts = np.concatenate([1e-5 * np.eye(5), -1e-5 * np.eye(5)])  # [10, 5]
    y = jnp.asarray(rows[:, 0])
    for alpha in (0.01, 1.0):
        def log_z(p, y):
            return lik.log_tilted({"raw_noise_variance": p[4]}, y, p[jnp.array([0, 2])], p[jnp.array([1, 3])], alpha)

        grad = np.asarray(jax.jit(jax.vmap(jax.grad(log_z)))(points, y))
        shifted = np.asarray(jax.jit(jax.vmap(jax.vmap(log_z, (0, None))))(points[:, None] + shifts, y))  # [2, 10]
        central = (shifted[:, :5] - shifted[:, 5:]) / 2e-5
        np.testing.assert_allclose(grad, central, rtol=1e-6, atol=1e-6 * np.abs(central).max())
