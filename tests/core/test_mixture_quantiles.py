"""Quantiles of Gaussian mixtures (:func:`pep_gp.core.gaussian.mixture_quantiles`), the deep GP's predictive
intervals: against Monte Carlo draws of the mixture and, for one component, against the Gaussian's own."""

import jax
import numpy as np
import pytest
from scipy.stats import norm

from pep_gp.core.gaussian import mixture_quantiles
from tests.core.test_deep_gp import _model_and_params

LEVELS = np.array([0.05, 0.25, 0.5, 0.75, 0.95])


def test_one_component_is_the_gaussians_quantile():
    means, stds = np.array([[0.3, -2.0, 40.0]]), np.array([[1.0, 0.01, 7.0]])
    levels = np.tile(LEVELS, (3, 1))
    got = np.asarray(jax.jit(mixture_quantiles)(means, stds, levels))
    assert np.all(np.abs(got - (means.T + stds.T * norm.ppf(levels))) <= 1e-12 * (1 + np.abs(got)))


def test_a_skewed_mixture_matches_a_million_of_its_draws():
    """Two rows of 3 unequal components: the quantiles of 10⁶ draws (choose a component, then its Gaussian)
    agree to 1e-2, and the mixture's CDF at the returned quantiles is the level to 1e-12."""
    rng = np.random.default_rng(0)
    means, stds = np.array([[0.0, 3.0], [1.5, 3.5], [4.0, 9.0]]), np.array([[0.5, 1.0], [0.8, 0.3], [2.0, 0.5]])
    levels = np.tile(LEVELS, (2, 1))
    got = np.asarray(jax.jit(mixture_quantiles)(means, stds, levels))
    draws = 1_000_000
    which = rng.integers(0, 3, size=(draws, 2))
    y = means[which, [0, 1]] + stds[which, [0, 1]] * rng.standard_normal((draws, 2))
    np.testing.assert_allclose(got, np.quantile(y, LEVELS, axis=0).T, rtol=0, atol=1e-2)
    cdf = norm.cdf((got[None] - means[..., None]) / stds[..., None]).mean(axis=0)
    np.testing.assert_allclose(cdf, levels, rtol=0, atol=1e-12)
    assert not np.allclose(got[:, 2] - got[:, 0], got[:, 4] - got[:, 2], atol=0.1)  # skewed: not mean ± z·std


@pytest.mark.heavy
def test_the_deep_gps_mixture_quantiles_match_monte_carlo_and_do_not_depend_on_the_other_rows():
    """Two layers: the quantiles of ``predict_y_mixture`` (2,000 components with common draws) against the
    quantiles of 10⁵ draws from the same components; a row's common-draw mixture is the same alone and
    among other rows."""
    model, params, x, _ = _model_and_params((2,))
    mixture = jax.jit(lambda rows: model.predict_y_mixture(params, rows, jax.random.key(1), 2_000, common_draws=True))
    full = mixture(x[:4])
    alone = mixture(x[2:3])
    np.testing.assert_allclose(np.asarray(alone.mean)[:, 0], np.asarray(full.mean)[:, 2], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(alone.var)[:, 0], np.asarray(full.var)[:, 2], rtol=1e-12, atol=1e-14)
    means, stds = np.asarray(full.mean), np.sqrt(np.asarray(full.var))
    got = np.asarray(jax.jit(mixture_quantiles)(means, stds, np.tile(LEVELS, (4, 1))))
    rng = np.random.default_rng(2)
    which = rng.integers(0, means.shape[0], size=(100_000, 4))
    y = means[which, np.arange(4)] + stds[which, np.arange(4)] * rng.standard_normal((100_000, 4))
    spread = np.quantile(y, 0.95, axis=0) - np.quantile(y, 0.05, axis=0)
    np.testing.assert_allclose(got, np.quantile(y, LEVELS, axis=0).T, rtol=0, atol=1e-2 * np.max(spread))
