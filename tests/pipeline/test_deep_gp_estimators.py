"""``DeepGPRegressor`` / ``DeepGPClassifier``: units, what depth buys on data a GP cannot fit, bad input."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy.stats import norm
from sklearn.linear_model import LogisticRegression

from pep_gp import DeepGPClassifier, DeepGPRegressor


def step_data(n, seed):
    """a toy problem: a step at 0 with noise 0.05."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 1))
    return x, (x[:, 0] > 0).astype(float) + 0.05 * rng.normal(size=n)


def test_the_deep_gps_default_to_bui_et_al_s_fixed_steps_in_the_estimators_and_the_trainer():
    """``DeepGPRegressor()`` and ``TrainJob("deep-gp", …)`` with nothing set train as the benchmark's protocol
    (1,000 Adam steps at 0.01, no stopping rule; docs/results/deep-gp.md), the other models as pep's defaults;
    the regressor alone stops early on held-out rows of arrays (``early_stopping="auto"``, 100 steps' patience) and
    adds a line in the inputs to its output's mean (``input_mean_function="linear"``), where ``pep train`` trains
    Bui et al.'s model (none)."""
    from pep_gp import SparseGPRegressor
    from pep_gp.pipeline.runs.config import TrainConfig
    from pep_gp.pipeline.training.trainer import TrainJob

    for estimator in (DeepGPRegressor(), DeepGPClassifier()):
        params = estimator.get_params()
        assert (params["learning_rate"], params["max_iter"], params["tol"]) == (0.01, 1000, 0.0)
        assert (params["early_stopping"], params["n_iter_no_change"], params["input_mean_function"]) == (
            ("auto", 100, "linear") if isinstance(estimator, DeepGPRegressor) else (False, 10, None))
        assert estimator._config(455).model_dump(include={"learning_rate", "max_steps", "tol"}) == {
            "learning_rate": 0.01, "max_steps": 1000, "tol": 0.0}
    assert (SparseGPRegressor().learning_rate, SparseGPRegressor().max_iter, SparseGPRegressor().tol) == (0.05, 2000, 1e-4)
    assert DeepGPRegressor.spec.Settings().input_mean_function is None
    job = TrainJob("deep-gp", None, TrainConfig(epochs=2), None)
    assert (job.config.learning_rate, job.config.tol, job.config.total_steps(4)) == (0.01, 0.0, 8)


@pytest.mark.exhaustive
@pytest.mark.heavy  # deep GP fits
def test_targets_are_standardised_and_results_in_user_units():
    """At the starting state (``max_iter=0``) an affine change of ``y`` moves the predictions with it and
    the log marginal likelihood by the Jacobian ``−N log 10`` (to rounding)."""
    x, y = step_data(40, 0)
    fits = [DeepGPRegressor(hidden_dims=(2,), num_inducing=5, max_iter=0).fit(x, scale * y + shift)
            for scale, shift in ((1.0, 0.0), (10.0, 5.0))]
    (mean, std), (mean10, std10) = (f.predict(x, return_std=True) for f in fits)
    np.testing.assert_allclose(mean10, 10 * mean + 5, rtol=1e-9)
    np.testing.assert_allclose(std10, 10 * std, rtol=1e-9)
    lml, lml10 = (f.log_marginal_likelihood() for f in fits)
    assert lml10 == pytest.approx(lml - 40 * np.log(10.0), rel=1e-10)


@pytest.mark.parametrize("spec, start, settled", [
    ("deep-gp", "linear", True), ("deep-gp", {"name": "linear", "weights": [0.5, 0.5]}, False),
    ("deep-gp", "constant", False), ("deep-gp", None, False), ("deep-gp-classifier", "linear", False)])
def test_a_regressors_line_in_the_inputs_starts_at_least_squares_unless_given(spec, start, settled):
    """The trainer's :meth:`settle` sets a regressor's linear input mean whose weights were left out to the
    least-squares line of its sample of the training rows; weights given, another mean, none, or a classifier (its
    targets are labels): the start :meth:`init` placed."""
    from pep_gp.core.models.deep_gp import least_squares_mean
    from pep_gp.pipeline.models import get_model

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 2))
    y = x @ np.array([2.0, -1.0]) + 0.5 + 0.1 * rng.normal(size=40)
    model_spec = get_model(spec)
    settings = model_spec.Settings(num_inducing=5, input_mean_function=start)
    model = model_spec.build(settings, {})
    params = model_spec.init(model, x, settings, 0)
    after = model_spec.settle(model, params, x, (y > 0).astype(float) if "classifier" in spec else y, settings, 40)
    expected = least_squares_mean(x, y) if settled else params.input_mean
    for got, want in zip(jax.tree_util.tree_leaves(after.input_mean), jax.tree_util.tree_leaves(expected)):
        np.testing.assert_array_equal(got, want)
    assert after.layers is params.layers


@pytest.mark.heavy  # a short deep GP fit, saved and loaded
def test_the_regressors_line_in_the_inputs_is_reported_in_the_datas_units_and_saved(tmp_path):
    """A default ``DeepGPRegressor`` on a line in two columns of very different scales plus a wiggle: its fitted
    ``input_mean_function_`` is near the line in the data's own units (weights per column), ``pep_gp.load`` gives
    the same predictions, and Bui et al.'s model (``input_mean_function=None``) reports the zero mean."""
    import pep_gp
    from pep_gp.means import Linear, Zero

    rng = np.random.default_rng(0)
    x = rng.normal(size=(150, 2)) * [1.0, 20.0] + [3.0, -40.0]
    y = 2.0 * x[:, 0] - 0.1 * x[:, 1] + 0.3 * np.sin(3 * x[:, 0]) + 0.05 * rng.normal(size=150)
    model = DeepGPRegressor(num_inducing=10, max_iter=30).fit(x, y)
    line = model.input_mean_function_
    assert isinstance(line, Linear)
    np.testing.assert_allclose(line.weights, [2.0, -0.1], rtol=0.1)
    model.save(tmp_path / "run")
    np.testing.assert_array_equal(pep_gp.load(tmp_path / "run").predict(x), model.predict(x))
    plain = DeepGPRegressor(num_inducing=10, max_iter=2, input_mean_function=None).fit(x, y)
    assert isinstance(plain.input_mean_function_, Zero)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a short deep GP fit
def test_a_matern_deep_gp_fits_predicts_and_reloads(tmp_path):
    """``DeepGPRegressor(kernel=Matern52())`` on the tiny regression table: every layer's kernel is a learned
    Matérn-5/2, the fit explains most of ``sin(x₀)`` (R² > 0.5, scikit-learn's floor for regressors), and a saved
    run rebuilds the kernels and predicts bit-identically."""
    from pep_gp import load
    from pep_gp.kernels import Matern52
    from tests import tiny

    x, y = tiny.data()["regression"]
    model = DeepGPRegressor(kernel=Matern52(), hidden_dims=(2,), **tiny.SETTINGS["DeepGPRegressor"]).fit(x, y)
    layers = model.params_.layers
    assert [type(layer.kernel) for layer in layers] == [Matern52, Matern52]
    assert not np.allclose(layers[1].kernel.lengthscales.value, np.e)  # moved from the hidden layers' start
    mean, std = model.predict(x, return_std=True)
    assert model.score(x, y) > 0.5 and np.all(std > 0)
    model.save(tmp_path / "run")
    np.testing.assert_array_equal(load(tmp_path / "run").predict(x), mean)


@pytest.mark.exhaustive
@pytest.mark.slow  # two fits, ~50 s on the shared 2-core machine (compilation)
def test_a_deep_gp_fits_a_step_better_than_one_gp():
    """Bui et al.'s model (the zero mean of the inputs): the hidden layer buys 0.1 nats per test row on a step."""
    x, y = step_data(120, 1)
    x_test, y_test = step_data(200, 2)
    scores = {}
    for hidden in ((), (2,)):
        model = DeepGPRegressor(hidden_dims=hidden, num_inducing=15, max_iter=180, tol=0, batch_size=40,
                                learning_rate=0.05, input_mean_function=None).fit(x, y)
        mean, std = model.predict(x_test, return_std=True)
        scores[hidden] = float(np.mean(norm.logpdf(y_test, mean, std)))
        assert model.n_rejected_steps_ == 0
    assert scores[(2,)] > scores[()] + 0.1, scores


@pytest.mark.exhaustive
@pytest.mark.slow  # ~45 s on the shared 2-core machine (compilation)
def test_classifier_separates_a_disc_that_logistic_regression_cannot():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 2))
    labels = np.where(np.sum(x**2, axis=1) < 1.2, "in", "out")
    clf = DeepGPClassifier(hidden_dims=(2,), num_inducing=10, max_iter=150, tol=0, learning_rate=0.05).fit(x[:150],
                                                                                                     labels[:150])
    proba = clf.predict_proba(x[150:])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
    assert list(clf.classes_) == ["in", "out"]
    linear = LogisticRegression().fit(x[:150], labels[:150]).score(x[150:], labels[150:])
    assert clf.score(x[150:], labels[150:]) >= 0.85 > linear + 0.1
    assert np.isfinite(clf.log_marginal_likelihood())


class OnlyArray:
    """An array-like with ``__array__`` alone."""

    def __init__(self, values):
        self.values = values

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.values, dtype=dtype)


@pytest.mark.heavy  # four deep GP fits: compiling
def test_the_deep_gp_regressor_stops_on_a_tenth_of_the_rows_of_a_table_of_200_or_more():
    """``early_stopping="auto"``, ``DeepGPRegressor``'s default (issue 63): on arrays of 200 rows it holds out a
    tenth (scikit-learn's split with the estimator's seed, as ``early_stopping=True``) and scores them at every
    step, ending at the best score's parameters; on 199 rows, or with ``early_stopping=False``, it trains on every
    row, as Bui et al. (2016) train. An array-like with only ``__array__`` (no ``shape``, no ``len``: scikit-learn's
    checks pass one) is counted as its array: it had been counted as no rows, so it trained on every row and
    predicted otherwise than the same rows as an array."""
    x, y = step_data(200, 0)
    quick = {"hidden_dims": (), "num_inducing": 5, "max_iter": 4}
    held = DeepGPRegressor(**quick).fit(x, y)
    asked = DeepGPRegressor(**quick, early_stopping=True, n_iter_no_change=100).fit(x, y)
    assert held.n_rows_seen_ == asked.n_rows_seen_ == 180 and len(held.validation_scores_) == 4
    assert held.validation_scores_ == asked.validation_scores_
    assert held.best_validation_score_ == min(held.validation_scores_)
    wrapped = DeepGPRegressor(**quick).fit(OnlyArray(x), OnlyArray(y))
    assert wrapped.n_rows_seen_ == 180 and wrapped.validation_scores_ == held.validation_scores_
    for whole in (DeepGPRegressor(**quick).fit(x[:199], y[:199]),
                  DeepGPRegressor(**quick, early_stopping=False).fit(x, y)):
        assert whole.validation_scores_ is None and whole.n_rows_seen_ in (199, 200)


def test_sparse_rows_are_refused_by_the_fits_own_check_before_early_stopping_counts_them():
    """``early_stopping="auto"`` counts the rows of ``X`` (200 or more hold out a tenth); a sparse matrix, which has
    no ``len``, reaches scikit-learn's refusal of sparse input, not a ``TypeError`` of the count."""
    from scipy import sparse

    x = sparse.random(300, 3, density=0.5, format="csr", random_state=0)
    with pytest.raises(TypeError, match="Sparse data was passed for X, but dense data is required"):
        DeepGPRegressor(max_iter=1).fit(x, np.zeros(300))


@pytest.mark.parametrize("arguments, X, message", [
    ({"hidden_dims": (0,)}, None, "DeepGPRegressor: hidden_dims.0: Input should be greater than or equal to 1"),
    ({"hidden_dims": 2}, None, "DeepGPRegressor: hidden_dims: Input should be a valid tuple"),
    ({"alpha": 0.0}, None, "DeepGPRegressor: alpha: Input should be greater than or equal to 0.0001"),
    ({"batch_size": 0}, None, "batch_size must be None or a positive integer; got 0"),
    ({"learning_rate": -1.0}, None, "DeepGPRegressor: learning_rate: Input should be greater than 0"),
    ({}, "nan", "Input X contains NaN"),
    ({"early_stopping": "yes"}, None, "DeepGPRegressor: early_stopping must be True, False or 'auto'; got 'yes'"),
])
def test_bad_input_is_refused_by_name(arguments, X, message):
    x, y = step_data(40, 0)
    if X == "nan":
        x[3, 0] = np.nan
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        DeepGPRegressor(**{"num_inducing": 5, "max_iter": 1, **arguments}).fit(x, y)


def test_a_deep_gps_kernel_is_each_layers_kernel_input_layer_first():
    """``kernel_`` of a deep GP (issue 65; it read a ``params_.kernel`` that ``DeepGPParams`` lacks): the tuple of
    its layers' kernels, input layer first (GPflux's ``f_layers[l].kernel``), each with one lengthscale per column
    of its layer's input (the data's 3, then the hidden width 2) and one GP per output of its layer. On the state
    the estimator's fit starts from (a deep GP's fit compiles for ~30 s; the fitted estimators' ``kernel_`` is
    checked in tests/pipeline/test_tiny_estimators.py)."""
    from pep_gp.kernels import Matern52

    estimator = DeepGPRegressor(kernel=Matern52(), hidden_dims=(2,), num_inducing=4)
    settings = estimator.spec.Settings(**estimator._settings())
    estimator.params_ = estimator.spec.init(estimator.spec.build(settings, {}), step_data(20, 0)[0].repeat(3, 1),
                                            settings, 0)
    kernels = estimator.kernel_
    assert [type(kernel) for kernel in kernels] == [Matern52, Matern52]
    assert [np.shape(kernel.lengthscales.value) for kernel in kernels] == [(2, 3), (1, 2)]
    assert repr(kernels).startswith("(Matern52(lengthscales=")
