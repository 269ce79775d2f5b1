"""Tilted normalisers of every likelihood against adaptive quadrature (seed000 §4.1)."""

import dataclasses
import inspect

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from pepcore import likelihoods
from pepcore.likelihoods import Gaussian, Probit, scaled_log_tilted

CAVITIES = [(m, v) for m in (-3.0, -0.4, 0.0, 1.2, 2.5) for v in (0.01, 0.3, 1.0, 2.5, 5.0)]
LIKELIHOODS = [(Gaussian(), 0.7), (Probit(), 1.0), (Probit(), 0.0)]
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
    assert defined == {type(lik) for lik, _ in LIKELIHOODS}


@pytest.mark.parametrize("alpha, tol", [(1.0, 1e-10), (0.5, 1e-7)])
def test_probit_tilted_normaliser_matches_adaptive_quadrature(alpha, tol):
    lik = Probit()
    for y in (0.0, 1.0):
        logp = _log_density(lik, y)
        for m, v in CAVITIES:
            ref = np.log(_quad(lambda f: np.exp(alpha * logp(f)), m, v))
            got = float(lik.log_tilted({}, jnp.asarray(y), jnp.asarray(m), jnp.asarray(v), alpha))
            assert got == pytest.approx(ref, abs=tol), (y, m, v)


@pytest.mark.parametrize("lik, y", LIKELIHOODS)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_tilted_normaliser_matches_quadrature(lik, y, alpha):
    params, logp = _params(lik), _log_density(lik, y)
    for m, v in CAVITIES[::3]:
        ref = np.log(_quad(lambda f: np.exp(alpha * logp(f)), m, v))
        got = float(lik.log_tilted(params, jnp.asarray(y), jnp.asarray(m), jnp.asarray(v), alpha))
        assert got == pytest.approx(ref, abs=1e-9), (m, v)


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
