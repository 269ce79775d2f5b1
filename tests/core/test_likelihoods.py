"""Tilted normalisers of every likelihood against adaptive quadrature (Bui, Yan & Turner 2017, §3.8, App. G.2)."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from pep_gp.core import likelihoods
from pep_gp.core.likelihoods import Gaussian, Heaviside, PoissonSquare, Probit, QuadratureLikelihood, scaled_log_tilted
from pep_gp.core.quadrature import probit_power_moments
from tests import oracles
from tests.core.test_quadrature_likelihoods import CASES as QUADRATURE_CASES

CAVITIES = [(m, v) for m in (-3.0, -0.4, 0.0, 1.2, 2.5) for v in (0.01, 0.3, 1.0, 2.5, 5.0)]
WIDE_CAVITIES = [(m, v) for v in (0.0, 30.0, 1e2, 1e4) for m in (-3.0, 0.0, 2.5, -0.5 * np.sqrt(v), 2 * np.sqrt(v))]
POWER_VARIANCES = (0.0, 1e-12, 1e-6, 1e-2, 1.0, 1e2, 1e4)  # of u ~ N(μ, r) against the step of Φ(u): r = var/fitc
LIKELIHOODS = [(Gaussian(), 0.7), (Probit(), 1.0), (Probit(), 0.0)]
# EP/QP site likelihoods (tilted_moments, log_prob): (likelihood, y, α)
SITE_LIKELIHOODS = [(Probit(), 1.0, 1.0), (Probit(), 0.0, 0.5), (Heaviside(), 1.0, 1.0), (Heaviside(), 0.0, 0.3),
                    (PoissonSquare(), 0.0, 1.0), (PoissonSquare(), 4.0, 1.0)]
NOISE = 0.3


def _params(lik):
    return Gaussian.init_params(NOISE) if isinstance(lik, Gaussian) else {}


def _log_density(lik, y):
    if isinstance(lik, Gaussian):
        return lambda f: stats.norm.logpdf(y, f, np.sqrt(NOISE))
    return lambda f: stats.norm.logcdf((2 * y - 1) * f)


def _quad(fn, m, v):
    return integrate.quad(lambda f: stats.norm.pdf(f, m, np.sqrt(v)) * fn(f), -np.inf, np.inf, epsabs=1e-15, epsrel=1e-13)[0]


def test_every_likelihood_is_tested():
    defined = {c for _, c in inspect.getmembers(likelihoods, inspect.isclass) if dataclasses.is_dataclass(c)}
    assert defined == ({type(lik) for lik, _ in LIKELIHOODS} | {type(lik) for lik, _, _ in SITE_LIKELIHOODS}
                       | {QuadratureLikelihood} | {type(case[0]) for case in QUADRATURE_CASES})  # the last in their own file


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("lik, y, alpha", SITE_LIKELIHOODS)
def test_tilted_moments_match_adaptive_quadrature(lik, y, alpha):
    """``log Z̃``, mean and variance of ``∝ N(f; m, v) p(y|f)^α`` against ``scipy.integrate.quad`` (1e-9) on
    moderate cavities (the Heaviside's variance ``v(1 − λ(z + λ))`` loses digits to cancellation for z ≪ 0)."""
    log_prob = jax.jit(lik.log_prob)  # called by quad thousands of times: one program, not op by op
    for m, v in [(-0.4, 0.3), (1.2, 2.5), (0.0, 1.0)]:
        log_p = lambda f: alpha * float(log_prob(jnp.asarray(y), jnp.asarray(f)))
        sd = np.sqrt(v)
        cuts = np.unique(np.concatenate([m + sd * np.linspace(-12, 12, 13), [0.0]]))
        moment = lambda k: sum(integrate.quad(lambda f: stats.norm.pdf(f, m, sd) * np.exp(log_p(f)) * f**k, a, b,
                                              epsabs=1e-15, epsrel=1e-12)[0] for a, b in zip(cuts[:-1], cuts[1:]))
        z, first, second = moment(0), moment(1), moment(2)
        log_z, mean, var = (float(a) for a in lik.tilted_moments(jnp.asarray(y), jnp.asarray(m), jnp.asarray(v), alpha))
        assert log_z == pytest.approx(np.log(z), abs=1e-9), (m, v)
        assert mean == pytest.approx(first / z, abs=1e-9 * max(1.0, sd)), (m, v)
        assert var == pytest.approx(second / z - (first / z) ** 2, rel=1e-7, abs=1e-9 * v), (m, v)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("alpha, tol", [(1.0, 1e-10), (0.5, 1e-9)])
def test_probit_tilted_normaliser_matches_adaptive_quadrature(alpha, tol):
    """Cavity variances 0.01..1e4 (Gauss–Hermite erred by 2e-4 at v = 30 and ~1e-2 at v = 100)."""
    lik = Probit()
    for y in (0.0, 1.0):
        logp = _log_density(lik, y)
        for m, v in CAVITIES + WIDE_CAVITIES[5:]:
            ref = np.log(_quad(lambda f: np.exp(alpha * logp(f)), m, v))
            got = float(lik.log_tilted({}, jnp.asarray(y), jnp.asarray(m), jnp.asarray(v), alpha))
            assert got == pytest.approx(ref, abs=tol), (y, m, v)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_probit_power_expectation_matches_scipy_quad(alpha):
    """``log E[Φ(u)^α]``, its slope ``G`` and curvature ``ν = G² − H = −∂²/∂μ²`` for ``u ~ N(μ, r)``, ``r`` from 0
    (exactly) to 1e4 and means from deep in the left tail to far right: within 1e-9 of scipy quadrature
    (absolute for ``log Z``, relative to ``1 + |ref|`` for ``G`` and ``ν``; measured worst 7.5e-11)."""
    cases = [(m, r) for r in POWER_VARIANCES
             for m in sorted({-40.0, -8.0, -1.0, 0.0, 2.0, 8.0} | {k * np.sqrt(r) for k in (-3.0, -1.0, 1.0)})]
    ref = np.array([oracles.probit_power_moments(m, r, alpha) for m, r in cases])
    got = np.array(probit_power_moments(jnp.asarray([c[0] for c in cases]), jnp.asarray([c[1] for c in cases]), alpha)).T
    np.testing.assert_allclose(got[:, 0], ref[:, 0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(got[:, 1], ref[:, 1], rtol=1e-9, atol=1e-9)
    nu, nu_ref = got[:, 1] ** 2 - got[:, 2], ref[:, 1] ** 2 - ref[:, 2]
    np.testing.assert_allclose(nu, nu_ref, rtol=1e-9, atol=1e-9)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_probit_tilted_gradient_is_finite_and_exact_at_zero_cavity_variance(alpha):
    """``∂log Z̃/∂(m, v)`` at ``v = 0`` is ``α∂log Φ(sm)/∂m`` and ``½E[h'']/Z`` (Price's theorem), not NaN."""
    lik = Probit()
    gradient = jax.jit(jax.grad(lambda m, v, y: lik.log_tilted({}, y, m, v, alpha), argnums=(0, 1)))
    for y in (0.0, 1.0):
        for m in (-30.0, -2.0, 0.0, 1.5):
            grad = gradient(jnp.asarray(m), jnp.asarray(0.0), jnp.asarray(y))
            _, slope, curvature = oracles.probit_power_moments((2 * y - 1) * m, 0.0, alpha)
            np.testing.assert_allclose(np.array(grad), [(2 * y - 1) * slope, 0.5 * curvature], rtol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("lik, y", LIKELIHOODS)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_tilted_normaliser_matches_quadrature(lik, y, alpha):
    params, logp = _params(lik), _log_density(lik, y)
    for m, v in CAVITIES[::3]:
        ref = np.log(_quad(lambda f: np.exp(alpha * logp(f)), m, v))
        got = float(lik.log_tilted(params, jnp.asarray(y), jnp.asarray(m), jnp.asarray(v), alpha))
        assert got == pytest.approx(ref, abs=1e-9), (m, v)


@pytest.mark.heavy
@pytest.mark.parametrize("lik, y", LIKELIHOODS)
def test_expected_log_prob_is_the_small_alpha_limit(lik, y):
    params, logp = _params(lik), _log_density(lik, y)
    for m, v in CAVITIES[::4]:
        ref = _quad(logp, m, v)
        args = (jnp.asarray(y), jnp.asarray(m), jnp.asarray(v))
        assert float(lik.expected_log_prob(params, *args)) == pytest.approx(ref, abs=1e-8)
        assert float(scaled_log_tilted(lik, params, *args, 0.0)) == float(lik.expected_log_prob(params, *args))
        assert float(scaled_log_tilted(lik, params, *args, 1e-6)) == pytest.approx(ref, abs=1e-4 * (1 + abs(ref)))


def test_predictions():
    mean, var = jnp.asarray([0.0, 1.0]), jnp.asarray([1.0, 3.0])
    np.testing.assert_allclose(Probit().predict({}, mean, var), stats.norm.cdf(np.array([0.0, 0.5])), rtol=1e-12)
    pm, pv = Gaussian().predict(Gaussian.init_params(0.25), mean, var)
    np.testing.assert_allclose(pv, np.asarray(var) + 0.25, rtol=1e-12)
    np.testing.assert_allclose(pm, mean)


@pytest.mark.parametrize("name, values", [("gaussian", (0.3,)), ("student-t", (0.2, 3.0)), ("student-t", (2.0, 0.7)),
                                          ("probit", ()), ("logistic", ()), ("poisson", ()), ("negative-binomial", (1.5,))])
def test_largest_log_prob_is_the_likelihoods_supremum(name, values):
    """``largest_log_prob`` bounds ``log p(y|f)`` everywhere and is reached: the Gaussian's and the Student-t's
    density at its mode (scipy's), 0 for a probability mass (labels, counts), which it approaches."""
    lik = likelihoods.LIKELIHOODS[name]()
    params = lik.init_params(*values)
    top = float(lik.largest_log_prob(params))
    f = np.linspace(-8.0, 8.0, 801)
    ys = {"gaussian": [0.0, 1.5], "student-t": [0.0, -2.0], "probit": [0.0, 1.0], "logistic": [0.0, 1.0],
          "poisson": [0.0, 1.0, 7.0], "negative-binomial": [0.0, 1.0, 7.0]}[name]
    if name == "gaussian":
        log_p = np.concatenate([stats.norm.logpdf(y, f, np.sqrt(values[0])) for y in ys])
        assert top == pytest.approx(stats.norm.logpdf(0.0, 0.0, np.sqrt(values[0])), rel=1e-12)
    else:
        log_p = np.concatenate([np.asarray(lik.log_prob(jnp.asarray(y), jnp.asarray(f), params) if name != "probit"
                                           else lik.log_prob(jnp.asarray(y), jnp.asarray(f))) for y in ys])
    if name == "student-t":
        assert top == pytest.approx(stats.t.logpdf(0.0, values[1], scale=values[0]), rel=1e-12)
    assert np.all(log_p <= top + 1e-12) and np.max(log_p) > top - 0.05
