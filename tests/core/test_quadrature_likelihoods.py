"""The likelihoods whose Power-EP terms are quadratures (Student-t, logistic, Poisson and negative binomial
with the log link; :class:`pep_gp.core.likelihoods.QuadratureLikelihood`): ``log Z̃`` and the tilted moments
against adaptive quadrature (``scipy.integrate.quad``) at α ∈ {0.1, 0.5, 1}, the rule against the probit's
closed form and Monte Carlo, gradients against central differences, and the predictive moments."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import log_ndtr
from scipy import integrate
from scipy import stats
from scipy.stats import norm

from pep_gp.core.likelihoods import (LIKELIHOODS, BernoulliLogistic, NegativeBinomial, Poisson, Probit,
                                     QuadratureLikelihood, StudentT)
from pep_gp.core.quadrature import tilted_moments_by_quadrature

CASES = [  # (likelihood, its parameters' constrained values, observations)
    (StudentT(), (0.1, 4.0), [0.0, 2.0, 15.0]),  # 15: an outlier 150 scales away
    (StudentT(), (1.0, 1.5), [0.5]),
    (BernoulliLogistic(), (), [0.0, 1.0]),
    (Poisson(), (), [0.0, 1.0, 7.0, 60.0]),
    (NegativeBinomial(), (2.0,), [0.0, 3.0, 40.0]),
]
CAVITIES = [(0.0, 1.0), (1.0, 0.05), (-2.0, 9.0), (3.0, 30.0), (0.5, 0.001)]


def numpy_log_prob(name: str, values: tuple, y: float):
    """``f ↦ log p(y|f)`` written independently in plain floats (fast under ``quad``); the constants from
    scipy.stats at one point."""
    if name == "student-t":
        scale, dof = values
        const = stats.t.logpdf(0.0, dof, scale=scale)
        return lambda f: const - 0.5 * (dof + 1) * math.log1p(((y - f) / scale) ** 2 / dof)
    if name == "logistic":
        return lambda f: -np.logaddexp(0.0, -(2 * y - 1) * f)
    if name == "poisson":
        const = -math.lgamma(y + 1)
        return lambda f: y * f - math.exp(f) + const
    (r,) = values
    const = stats.nbinom.logpmf(y, r, 0.5) - (y + r) * math.log(0.5)  # log Γ(y+r)/(Γ(r) y!)
    return lambda f: const + r * math.log(r) + y * f - (r + y) * np.logaddexp(math.log(r), f)


def quad_moments(log_prob, y, mean, var, alpha):
    """``log ∫ N(f; m, v) p(y|f)^α df`` and the tilted mean and variance by adaptive quadrature on ``ℝ``,
    split at ``m ± 40√v`` with the likelihood's features (``y``, ``log(y + ½)``, 0) as break points."""
    sd = np.sqrt(var)
    lo, hi = mean - 40 * sd, mean + 40 * sd
    points = [p for p in (y, np.log(y + 0.5), 0.0) if lo < p < hi]

    def integral(h):
        parts = [(-np.inf, lo, None), (lo, hi, points), (hi, np.inf, None)]
        return sum(integrate.quad(lambda f: h(f) * norm.pdf(f, mean, sd) * np.exp(alpha * log_prob(f)), a, b,
                                  epsabs=0, epsrel=1e-13, limit=500, points=p)[0] for a, b, p in parts)

    z = integral(lambda f: 1.0)
    tilted_mean = integral(lambda f: f) / z
    return np.log(z), tilted_mean, integral(lambda f: (f - tilted_mean) ** 2) / z


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood, values, ys", CASES, ids=lambda c: getattr(c, "name", ""))
def test_tilted_normaliser_and_moments_match_adaptive_quadrature(likelihood, values, ys):
    """To 1e-8: ``log Z̃`` absolutely, the mean in cavity deviations, the variance relative to the cavity's;
    cavities from v = 0.001 to 30 and counts to 60, an outlier 150 Student-t scales from the cavity."""
    params = likelihood.init_params(*values)
    moments = jax.jit(lambda y, m, v, a: likelihood.tilted_moments(y, m, v, a, params), static_argnums=3)
    for alpha in (0.1, 0.5, 1.0):
        y, m, v = (np.asarray(a, float) for a in zip(*[(y, m, v) for y in ys for m, v in CAVITIES]))
        log_z, mean, var = (np.asarray(a) for a in moments(y, m, v, alpha))
        for i in range(len(y)):
            expected = quad_moments(numpy_log_prob(likelihood.name, values, y[i]), y[i], m[i], v[i], alpha)
            assert abs(log_z[i] - expected[0]) < 1e-8, (y[i], m[i], v[i], alpha)
            assert abs(mean[i] - expected[1]) < 1e-8 * np.sqrt(v[i]), (y[i], m[i], v[i], alpha)
            assert abs(var[i] - expected[2]) < 1e-8 * v[i], (y[i], m[i], v[i], alpha)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_rule_gives_the_probits_closed_form_and_monte_carlo():
    """The composite rule on ``log Φ(sf)`` (centre 0, unit scale) against the probit's closed-form tilted
    moments at α = 1 (Rasmussen & Williams 2006, eq. 3.58) to 1e-10, and against 10⁶ importance-weighted
    cavity draws at α = 0.5 within 5 Monte Carlo standard errors."""
    m, v = jnp.array([-3.0, 0.0, 1.5, 4.0]), jnp.array([0.2, 1.0, 10.0, 50.0])
    y = jnp.array([1.0, 0.0, 1.0, 0.0])
    s = 2 * y - 1
    ones = jnp.ones_like(m)
    got = tilted_moments_by_quadrature(lambda f: log_ndtr(s[:, None] * f), m, v, 1.0, 0 * ones, ones)
    for a, b in zip(got, Probit().tilted_moments(y, m, v, 1.0)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10, atol=1e-12)
    half = [np.asarray(a) for a in tilted_moments_by_quadrature(lambda f: log_ndtr(s[:, None] * f), m, v, 0.5,
                                                                0 * ones, ones)]
    rng = np.random.default_rng(0)
    f = np.asarray(m)[:, None] + np.sqrt(np.asarray(v))[:, None] * rng.standard_normal((4, 1_000_000))
    w = norm.cdf(np.asarray(s)[:, None] * f) ** 0.5
    z = w.mean(1)
    assert np.all(np.abs(np.exp(half[0]) - z) < 5 * w.std(1) / 1e3)
    mean = (w * f).mean(1) / z
    assert np.all(np.abs(half[1] - mean) < 5 * np.sqrt(half[2] * (w**2).mean(1)) / z / 1e3)


@pytest.mark.exhaustive
@pytest.mark.parametrize("likelihood, values", [(StudentT(), (0.3, 3.0)),
                                                (NegativeBinomial(), (1.5,)),
                                                (Poisson(), ()), (BernoulliLogistic(), ())],
                         ids=lambda c: getattr(c, "name", ""))
@pytest.mark.heavy
def test_log_z_gradients_match_central_differences(likelihood, values):
    """``∂log Z̃/∂m``, ``∂/∂v`` and ``∂/∂`` (the likelihood's parameters) through the held nodes, α = 0.5."""
    params = likelihood.init_params(*values)
    y = jnp.asarray(2.0 if likelihood.name != "logistic" else 1.0)

    def log_z(m, v, raw):
        return likelihood.log_tilted(raw, y, m, v, 0.5)

    point = (jnp.asarray(0.4), jnp.asarray(1.3), params)
    grads = jax.grad(log_z, argnums=(0, 1, 2))(*point)
    eps = 1e-5
    for k, step in ((0, (eps, 0.0)), (1, (0.0, eps))):
        numeric = (log_z(point[0] + step[0], point[1] + step[1], params)
                   - log_z(point[0] - step[0], point[1] - step[1], params)) / (2 * eps)
        np.testing.assert_allclose(float(grads[k]), float(numeric), rtol=1e-6, atol=1e-9)
    for name in params:
        shifted = [{**params, name: params[name] + sign * eps} for sign in (1, -1)]
        numeric = (log_z(point[0], point[1], shifted[0]) - log_z(point[0], point[1], shifted[1])) / (2 * eps)
        np.testing.assert_allclose(float(grads[2][name]), float(numeric), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("alpha", [0.05, 0.01, 1e-3])
def test_small_alpha_gradients_are_finite_and_match_central_differences(alpha):
    """At small α the likelihood's nodes spread to ``|f|`` in the thousands, where the Poisson's ``e^f``
    overflows: those nodes weigh nothing and must carry no gradient (they gave NaN from α ≈ 0.05 down, and
    the full-batch fit stopped at its start)."""
    y, point = jnp.asarray([0.0, 1.0, 5.0]), (jnp.asarray(0.5), jnp.asarray(1.0))

    def log_z(m, v):
        return jnp.sum(Poisson().log_tilted({}, y, m, v, alpha))

    grads = jax.grad(log_z, argnums=(0, 1))(*point)
    eps = 1e-6
    for k, step in ((0, (eps, 0.0)), (1, (0.0, eps))):
        numeric = (log_z(point[0] + step[0], point[1] + step[1])
                   - log_z(point[0] - step[0], point[1] - step[1])) / (2 * eps)
        assert np.isfinite(float(grads[k]))
        np.testing.assert_allclose(float(grads[k]), float(numeric), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("likelihood, values", [(Poisson(), ()), (NegativeBinomial(), (2.5,)),
                                                (StudentT(), (0.5, 5.0))],
                         ids=lambda c: getattr(c, "name", ""))
def test_the_predictive_moments_are_those_of_draws(likelihood, values):
    """``predict``'s mean and variance of ``y`` against 4·10⁵ draws of ``f ~ N(m, v)`` then ``y | f``."""
    params = likelihood.init_params(*values)
    m, v = 0.7, 0.3
    rng = np.random.default_rng(1)
    f = m + np.sqrt(v) * rng.standard_normal(400_000)
    if likelihood.name == "poisson":
        y = rng.poisson(np.exp(f))
    elif likelihood.name == "negative-binomial":
        r = float(likelihood.dispersion(params))
        y = rng.poisson(rng.gamma(r, np.exp(f) / r))
    else:
        scale, dof = (float(a) for a in likelihood.scale_and_dof(params))
        y = f + scale * rng.standard_t(dof, size=f.shape)
    mean, var = (float(a) for a in likelihood.predict(params, jnp.asarray(m), jnp.asarray(v)))
    assert abs(mean - y.mean()) < 5 * y.std() / np.sqrt(y.size)
    assert abs(var - y.var()) < 0.03 * var


@pytest.mark.heavy
def test_the_logistic_predictive_probability_is_the_integral_of_the_sigmoid():
    m, v = 0.8, 2.0
    expected = integrate.quad(lambda f: norm.pdf(f, m, np.sqrt(v)) / (1 + np.exp(-f)), -np.inf, np.inf,
                              epsabs=1e-14)[0]
    assert abs(float(BernoulliLogistic().predict({}, jnp.asarray(m), jnp.asarray(v))) - expected) < 1e-10


def test_every_quadrature_likelihood_is_tested_here():
    tested = {case[0].name for case in CASES}
    assert {name for name, cls in LIKELIHOODS.items() if issubclass(cls, QuadratureLikelihood)} == tested


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood, values", [(Poisson(), ()), (NegativeBinomial(), (2.5,)),
                                                (StudentT(), (0.5, 2.5))], ids=lambda c: getattr(c, "name", ""))
def test_predictive_quantiles_are_those_of_draws(likelihood, values):
    """``quantiles`` of ``∫ p(y|f) N(f; m, v) df`` against 4·10⁵ draws of ``f`` then ``y | f``: a count's is
    the draws' own quantile (an integer) at levels away from its steps, a Student-t's within 2e-2."""
    params = likelihood.init_params(*values)
    m, v = jnp.array([0.7, 2.0]), jnp.array([0.3, 0.05])
    levels = jnp.tile(jnp.array([0.05, 0.25, 0.5, 0.75, 0.95]), (2, 1))
    got = np.asarray(jax.jit(lambda p, a, b, q: likelihood.quantiles(p, a, b, q))(params, m, v, levels))
    rng = np.random.default_rng(3)
    f = np.asarray(m) + np.sqrt(np.asarray(v)) * rng.standard_normal((400_000, 2))
    if likelihood.name == "poisson":
        y = rng.poisson(np.exp(f))
    elif likelihood.name == "negative-binomial":
        y = rng.poisson(rng.gamma(2.5, np.exp(f) / 2.5))
    else:
        y = f + 0.5 * rng.standard_t(2.5, size=f.shape)
    expected = np.quantile(y, np.asarray(levels[0]), axis=0, method="inverted_cdf").T
    if likelihood.name == "student-t":
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-2)
    else:
        assert np.array_equal(got, np.round(got)) and np.abs(got - expected).max() <= 1
        assert np.mean(got == expected) >= 0.8


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood, values", [(Poisson(), ()), (NegativeBinomial(), (2.5,)),
                                                (StudentT(), (0.5, 2.5)), (StudentT(), (0.5, 1.5))],
                         ids=lambda c: getattr(c, "name", str(c)))
def test_predictive_quantiles_solve_the_predictive_cdf_row_by_row(likelihood, values):
    """At each returned quantile ``q`` of level ``p`` the predictive CDF (``predictive_cdf``, the same
    quadrature) gives ``p`` to 1e-12 for a Student-t (ν = 1.5 has no variance to start Newton from), and
    ``P(Y < q) < p ≤ P(Y ≤ q)`` for a count; a row's quantiles alone and among other rows are the same integers,
    and agree to 1e-13 for a Student-t (XLA's incomplete beta function iterates until every entry of its batch
    has converged, so its last bits depend on the batch)."""
    params = likelihood.init_params(*values)
    m, v = jnp.array([0.7, 2.0, -3.0, 0.0]), jnp.array([0.3, 0.05, 4.0, 1e-6])
    levels = jnp.tile(jnp.array([0.001, 0.05, 0.5, 0.95, 0.999]), (4, 1))
    quantiles = jax.jit(lambda p, a, b, q: likelihood.quantiles(p, a, b, q))
    got = np.asarray(quantiles(params, m, v, levels))
    for column in range(levels.shape[1]):
        below, at_most = (np.asarray(c) for c in likelihood.predictive_cdf(params, jnp.asarray(got[:, column]), m, v))
        p = np.asarray(levels[:, column])
        if likelihood.counts:
            assert np.all(below < p) and np.all(p <= at_most)
        else:
            np.testing.assert_allclose(at_most, p, rtol=0, atol=1e-12)
    for row in range(4):
        alone = np.asarray(quantiles(params, m[row:row + 1], v[row:row + 1], levels[row:row + 1]))
        np.testing.assert_allclose(alone[0], got[row], rtol=1e-13, atol=0 if likelihood.counts else 1e-13)
