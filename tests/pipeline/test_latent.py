"""Latent predictions and draws of the estimators (issue 39, item 1): ``predict_f`` against the exact GP and
against its own ``sample_f`` draws, ``sample_y`` labels, and the row limit of ``full_cov``."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from pep_gp import CollapsedGPRegressor, ExactGPClassifier
from pep_gp.core.parameters import constrained
from pep_gp.pipeline.estimators.fitted import MAX_FULL_COV_ROWS


def _rbf(a, b, lengthscales, variance):
    scaled_a, scaled_b = a / lengthscales, b / lengthscales
    sq = np.sum(scaled_a**2, 1)[:, None] + np.sum(scaled_b**2, 1)[None] - 2 * scaled_a @ scaled_b.T
    return variance * np.exp(-0.5 * np.maximum(sq, 0.0))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, size=(25, 2))
    return x, np.sin(x[:, 0]) * np.cos(x[:, 1]) + 0.2 * rng.normal(size=25), rng.uniform(-3, 3, size=(7, 2))


@pytest.fixture(scope="module")
def classifier(data):
    x, y, _ = data
    with warnings.catch_warnings():  # 5 L-BFGS-B iterations (~2 s) leave it short of converged
        warnings.simplefilter("ignore", ConvergenceWarning)
        return ExactGPClassifier(max_iter=5).fit(x, np.where(y > 0, "yes", "no"))


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
@pytest.mark.parametrize("alpha", [1.0, 0.0])
def test_collapsed_predict_f_with_inducing_at_the_inputs_is_the_exact_gp_posterior(data, alpha):
    """M = N (the k-means inducing inputs are the training inputs, no jitter): FITC (α = 1) and VFE (α = 0)
    give the exact GP's latent posterior (Rasmussen & Williams 2006, eqs. 2.23–2.24), here in numpy in the
    user's units of y."""
    x, y, x_new = data
    y = 5 * y + 3
    model = CollapsedGPRegressor(num_inducing=len(y), alpha=alpha, jitter=0.0, max_iter=0).fit(x, y)
    values = constrained(model.params_)
    hypers = np.asarray(model.params_.kernel.lengthscales.value[0]), float(model.params_.kernel.variance.value[0])
    xs, xn = (x - model.x_mean_) / model.x_std_, (x_new - model.x_mean_) / model.x_std_
    shift, scale = model.targets_.shift, model.targets_.scale
    gram = _rbf(xs, xs, *hypers) + float(values["noise_variance"]) * np.eye(len(y))
    cross = _rbf(xs, xn, *hypers)
    exact_mean = cross.T @ np.linalg.solve(gram, (y - shift) / scale) * scale + shift
    exact_cov = (_rbf(xn, xn, *hypers) - cross.T @ np.linalg.solve(gram, cross)) * scale**2

    mean, cov = model.predict_f(x_new, full_cov=True)
    np.testing.assert_allclose(mean, exact_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(cov, exact_cov, rtol=0, atol=1e-8)
    diag_mean, var = model.predict_f(x_new)
    np.testing.assert_allclose(diag_mean, exact_mean, rtol=0, atol=1e-8)
    np.testing.assert_allclose(var, np.diag(exact_cov), rtol=0, atol=1e-8)
    draws = model.sample_y(x_new, n_samples=3, seed=1)
    assert draws.shape == (3, len(x_new)) and np.array_equal(draws, model.sample_y(x_new, n_samples=3, seed=1))


@pytest.mark.heavy
def test_classifier_predict_f_agrees_with_its_own_sample_f_draws(classifier, data):
    """The mean and variance of 20,000 joint draws match ``predict_f`` within 5 Monte Carlo standard errors
    (the variance's is ``v·√(2/S)``), and their covariance the full covariance."""
    x_new = data[2]
    mean, var = classifier.predict_f(x_new)
    full_mean, cov = classifier.predict_f(x_new, full_cov=True)
    np.testing.assert_allclose(full_mean, mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.diag(cov), var, rtol=1e-10)
    draws = classifier.sample_f(x_new, n_samples=20_000, seed=0)
    assert draws.shape == (20_000, len(x_new))
    samples = draws.shape[0]
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * np.sqrt(var / samples))
    assert np.all(np.abs(draws.var(0) - var) < 5 * var * np.sqrt(2 / samples))
    scale = np.sqrt(np.outer(var, var))
    assert np.all(np.abs(np.cov(draws.T) - cov) < 5 * scale * np.sqrt(2 / samples))


def test_classifier_sample_y_draws_fitted_labels_reproducibly(classifier, data):
    x_new = data[2]
    labels = classifier.sample_y(x_new, n_samples=200, seed=4)
    assert labels.shape == (200, len(x_new)) and set(np.unique(labels)) <= set(classifier.classes_)
    assert np.array_equal(labels, classifier.sample_y(x_new, n_samples=200, seed=4))
    assert not np.array_equal(labels, classifier.sample_y(x_new, n_samples=200, seed=5))
    proba = classifier.predict_proba(x_new)[:, 1]
    assert np.all(np.abs((labels == "yes").mean(0) - proba) < 5 * np.sqrt(proba * (1 - proba) / 200) + 1e-9)


def test_full_covariance_and_draws_beyond_the_row_limit_are_refused(classifier):
    rows = np.zeros((MAX_FULL_COV_ROWS + 1, 2))
    for call in (lambda: classifier.predict_f(rows, full_cov=True), lambda: classifier.sample_f(rows),
                 lambda: classifier.sample_y(rows)):
        with pytest.raises(ValueError, match="full_cov is limited to 5,000 rows"):
            call()
