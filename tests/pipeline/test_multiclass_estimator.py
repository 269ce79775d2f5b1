"""MultiClassGPClassifier: fits a real multi-class set with EP and SEP, minibatches, labels, bad input."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.preprocessing import StandardScaler

from pep_gp import MultiClassGPClassifier


@pytest.fixture(scope="module")
def iris():
    x, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(x), y


def _fit(iris, **kw):
    x, y = iris
    settings = dict(num_inducing=6, max_iter=40, learning_rate=0.05) | kw
    return MultiClassGPClassifier(**settings).fit(x, y)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sep", "ep"])
def test_full_batch_training_fits_iris_and_raises_the_evidence(iris, method):
    x, y = iris
    start = _fit(iris, method=method, max_iter=0).log_marginal_likelihood()
    clf = _fit(iris, method=method)
    assert clf.log_marginal_likelihood() > start + 20
    assert clf.energy_trace_.shape == (40,) and clf.n_rejected_steps_ == 0 and clf.n_skipped_rows_ == 0
    proba = clf.predict_proba(x)
    assert proba.shape == (150, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-8)
    assert clf.score(x, y) > 0.9
    np.testing.assert_array_equal(clf.predict(x), np.argmax(proba, axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sep", "ep"])
def test_minibatch_training_counts_epochs_and_pads_the_last_batch(iris, method):
    x, y = iris
    clf = _fit(iris, method=method, batch_size=40, epochs=3, learning_rate=0.02)  # 4 batches, the last of 30
    assert clf.energy_trace_.shape == (12,) and np.all(np.isfinite(clf.energy_trace_))
    assert clf.score(x, y) > 0.8


@pytest.mark.slow
def test_power_ep_option_trains(iris):
    x, y = iris
    clf = _fit(iris, alpha=0.5, max_iter=20)
    assert clf.n_rejected_steps_ == 0 and np.isfinite(clf.log_marginal_likelihood())
    assert clf.score(x, y) > 0.85


@pytest.mark.slow
@pytest.mark.parametrize("method", ["sep", "ep"])
def test_float32_kernel_products_give_the_float64_fit(iris, method):
    """``kernel_products="float32"`` reaches both training paths: the energy trace and the predictions
    within 1e-6 of the float64 fit's, not bit-equal to them."""
    x, _ = iris
    exact, fast = (_fit(iris, method=method, max_iter=20, kernel_products=p) for p in ("float64", "float32"))
    np.testing.assert_allclose(fast.energy_trace_, exact.energy_trace_, rtol=1e-6)
    np.testing.assert_allclose(fast.predict_proba(x), exact.predict_proba(x), rtol=0, atol=1e-6)
    assert not np.array_equal(fast.energy_trace_, exact.energy_trace_)


def test_string_labels_and_sklearn_clone(iris):
    x, y = iris
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = clone(MultiClassGPClassifier(num_inducing=6, max_iter=5, tol=0.0, learning_rate=0.05)).fit(x, names)
    assert list(clf.classes_) == list(names[[0, 50, 100]])
    assert set(clf.predict(x[:5])) <= set(names)
    assert clf.get_params()["method"] == "sep"


@pytest.mark.parametrize(
    "kw, X, y, match",
    [
        ({}, [[0.0, np.nan], [1.0, 2.0]], [0, 1], "NaN or Inf at row 0, column 1"),
        ({}, np.zeros((3, 2)), [0, 1], "different numbers of rows"),
        ({}, np.zeros((4, 2)), [1, 1, 1, 1], "at least two classes"),
        ({"method": "vi"}, np.eye(4), [0, 1, 2, 0], "method must be one of"),
        ({"batch_size": 0}, np.eye(4), [0, 1, 2, 0], "batch_size must be None or an integer"),
        ({"epochs": 0}, np.eye(4), [0, 1, 2, 0], "epochs must be None or a positive integer"),
        ({"num_inducing": 10}, np.eye(4), [0, 1, 2, 0], "num_inducing=10 exceeds"),
        ({"learning_rate": -1.0}, np.eye(4), [0, 1, 2, 0], "learning_rate must be positive"),
        ({"damping": 0.0}, np.eye(4), [0, 1, 2, 0], "damping must lie in"),
        ({"alpha": 0.0}, np.eye(4), [0, 1, 2, 0], "alpha must lie in"),
        ({"kernel_products": "half"}, np.eye(4), [0, 1, 2, 0], "kernel_products must be one of .*'half'"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(kw, X, y, match):
    with pytest.raises(ValueError, match=match):
        MultiClassGPClassifier(**({"num_inducing": 2} | kw)).fit(X, y)


def test_prediction_input_is_checked(iris):
    clf = _fit(iris, max_iter=0)
    with pytest.raises(ValueError, match="has 3 features but the model was fitted with 4"):
        clf.predict(np.zeros((2, 3)))
