"""Priors on hyper-parameters (issue 65, item 1) against scipy: each distribution's density is scipy.stats'; the
term added for a stored parameter is that density plus the log-Jacobian of its bijection (GPflow's
``prior_on="constrained"``); and the MAP objective of a collapsed regression with its inducing inputs at the
rows (the exact GP's evidence) plus the log prior equals a numpy/scipy one at several parameter values."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special, stats

from pep_gp.core import float64
from pep_gp.core.kernels import Matern52, SquaredExponential
from pep_gp.core.models.collapsed_regression import CollapsedRegression, RegressionParams
from pep_gp.core.parameters import Positive
from pep_gp.core.priors import Gamma, HalfNormal, LogNormal, log_density, prior_from_dict, prior_to_dict

VALUES = np.array([0.03, 0.4, 1.0, 2.5, 11.0])
PRIORS = [(LogNormal(0.3, 0.7), stats.lognorm(s=0.7, scale=np.exp(0.3))),
          (Gamma(2.5, 4.0), stats.gamma(a=2.5, scale=1 / 4.0)),
          (HalfNormal(1.7), stats.halfnorm(scale=1.7))]


@pytest.mark.parametrize("prior, scipy_prior", PRIORS, ids=lambda p: getattr(p, "name", ""))
def test_each_density_is_scipys_and_its_description_round_trips(prior, scipy_prior):
    with float64():
        np.testing.assert_allclose(prior.log_prob(jnp.asarray(VALUES)), scipy_prior.logpdf(VALUES), rtol=1e-13)
    assert prior_from_dict(prior_to_dict(prior)) == prior


def test_the_stored_value_s_density_adds_the_log_jacobian():
    """``log p(r) = log p_θ(g(r)) + log|g'(r)|``: ``+ r`` for a logarithm, ``+ log σ(r)`` for a softplus."""
    prior, scipy_prior = PRIORS[1]
    raw = np.array([-1.2, 0.1, 0.9])
    with float64():
        assert float(log_density(prior, jnp.exp, jnp.asarray(raw))) == pytest.approx(
            np.sum(scipy_prior.logpdf(np.exp(raw)) + raw), rel=1e-13)
        assert float(log_density(prior, jax.nn.softplus, jnp.asarray(raw))) == pytest.approx(
            np.sum(scipy_prior.logpdf(np.logaddexp(0, raw)) + np.log(special.expit(raw))), rel=1e-13)


@pytest.mark.parametrize("description, words", [
    ({"name": "lognormal"}, ["'lognormal'", "log-normal, gamma, half-normal"]),
    ({"name": "gamma", "scale": 1.0}, ["gamma", "['scale']", "['shape', 'rate']"]),
    ({"name": "half-normal", "scale": -1.0}, ["half-normal", "scale", "positive"]),
])
def test_a_bad_prior_is_refused_in_one_line(description, words):
    with pytest.raises(ValueError) as error:
        prior_from_dict(description)
    assert "\n" not in str(error.value) and all(word in str(error.value) for word in words), str(error.value)


def numpy_map_objective(x, y, lengthscale, variance, noise, priors):
    """The exact GP's log evidence ``log N(y; 0, K + σ²I)`` with a squared exponential, plus the log prior of the
    stored values by scipy: ``log ℓ`` and ``log σ_f²`` (Jacobians ``+ log ℓ``, ``+ log σ_f²``) and the noise's
    softplus (``+ log(1 − e^{−σ²})``, the softplus's slope at its inverse)."""
    sq = (x[:, None, 0] - x[None, :, 0]) ** 2
    cov = variance * np.exp(-0.5 * sq / lengthscale**2) + noise * np.eye(len(y))
    evidence = stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(y)
    ls_prior, var_prior, noise_prior = priors
    return (evidence + ls_prior.logpdf(lengthscale) + np.log(lengthscale) + var_prior.logpdf(variance)
            + np.log(variance) + noise_prior.logpdf(noise) + np.log(-np.expm1(-noise)))


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(-1.5, 1.5, 9))[:, None]
    return x, np.sin(2 * x[:, 0]) + 0.2 * rng.normal(size=9)


@pytest.mark.heavy
def test_the_map_objective_equals_the_numpy_one_at_several_values(rows):
    x, y = rows
    (ls, ls_scipy), (var, var_scipy), (noise, noise_scipy) = PRIORS
    model = CollapsedRegression(alpha=0.5, jitter=0.0, priors=(("raw_noise_variance", noise),))
    kernel = SquaredExponential(prior={"lengthscales": ls, "variance": var}).bank(1, 1, [1.0])
    with float64():
        for lengthscale, variance, noise_variance in [(0.4, 1.3, 0.05), (0.9, 0.6, 0.3), (1.6, 2.2, 0.011)]:
            params = RegressionParams(kernel.replace(lengthscales=Positive(jnp.log(jnp.full((1, 1), lengthscale))),
                                                     variance=Positive(jnp.log(jnp.full(1, variance)))),
                                      jnp.asarray(np.log(np.expm1(noise_variance))), jnp.asarray(x))
            ours = model.global_energy(params, (), 9) + model.data_energy(params, (), jnp.asarray(x), jnp.asarray(y),
                                                                           jnp.ones(9, bool))
            theirs = numpy_map_objective(x, y, lengthscale, variance, noise_variance, (ls_scipy, var_scipy, noise_scipy))
            assert float(ours) == pytest.approx(theirs, rel=1e-9, abs=1e-9)
            assert float(model.global_energy(params, (), 9)) == pytest.approx(
                theirs - stats.multivariate_normal(np.zeros(9), _cov(x, lengthscale, variance, noise_variance)).logpdf(y),
                rel=1e-9, abs=1e-9)  # the prior is the global term: counted once, not per row


def _cov(x, lengthscale, variance, noise):
    return variance * np.exp(-0.5 * (x[:, None, 0] - x[None, :, 0]) ** 2 / lengthscale**2) + noise * np.eye(len(x))


def test_without_priors_the_energy_is_the_same_bits():
    """No prior adds nothing: the global term is the same object's bits as before."""
    model = CollapsedRegression(alpha=0.5)
    with float64():
        params = RegressionParams(Matern52(lengthscales=0.7).bank(1, 1), jnp.asarray(0.1), jnp.zeros((3, 1)))
        assert float(model.global_energy(params, (), 3)) == 0.0
        assert Matern52().bank(1, 1, [1.0]).log_prior() is None
