"""``partial_fit`` and ``warm_start`` in scikit-learn's sense: one call takes exactly ``fit``'s steps, later
calls continue the steps, the Adam state and the frame, and the conventions (``classes=`` first) hold."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from pep_gp import CollapsedGPRegressor, SparseGPClassifier, SparseGPRegressor
from pep_gp.kernels import SquaredExponential
from pep_gp.pipeline.training.sampling import MinibatchSchedule
from tests.trainstores import leaves_equal

SETTINGS = dict(num_inducing=6, batch_size=48, tol=0.0)  # the blocks of tests.trainstores.FAST: compiled once


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(192, 3))
    return X, (X[:, 0] + X[:, 1] ** 2 > 0.5).astype(int)


def test_one_partial_fit_takes_exactly_the_steps_of_fit(rows):
    X, y = rows
    fitted = SparseGPClassifier(**SETTINGS, max_iter=4).fit(X, y)  # 192 rows, 48 a step: one epoch
    streamed = SparseGPClassifier(**SETTINGS).partial_fit(X, y, classes=[0, 1])
    assert leaves_equal(fitted.params_, streamed.params_) and streamed.n_iter_ == 4
    np.testing.assert_array_equal(fitted.energy_trace_, streamed.energy_trace_)


def test_partial_fit_over_halves_continues_steps_state_and_frame(rows):
    X, y = rows
    model = SparseGPClassifier(**SETTINGS).partial_fit(X[:96], y[:96], classes=np.array([0, 1]))
    first = model.params_, model.x_mean_.copy(), model._opt_state
    model.partial_fit(X[96:], y[96:])
    assert (model.n_iter_, model.n_rows_seen_, model.energy_trace_.size) == (4, 192, 4)
    np.testing.assert_array_equal(model.x_mean_, first[1])  # standardised as the first call's rows
    assert not leaves_equal(model.params_, first[0]) and not leaves_equal(model._opt_state, first[2])
    # the second half's energies are of 192 rows (the data term scaled to every row seen), the first's of 96
    assert model.energy_trace_[2:].mean() < 1.5 * model.energy_trace_[:2].mean()


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_partial_fit_over_halves_given_num_data_is_fit_on_the_whole():
    """The stream's size given (``num_data``) and nothing else drawn from the data (the inducing inputs and the
    kernel's values given; two halves with the same column statistics, so the same standardisation),
    ``partial_fit`` over the halves in the order ``fit`` draws them as minibatches is ``fit`` on the whole, bit
    for bit."""
    rng = np.random.default_rng(1)
    quarter = rng.integers(-16, 17, size=(48, 3)) / 8.0
    half = np.vstack([quarter, -quarter])  # dyadic, each column's mean exactly 0: exact statistics in any order
    other = half[rng.permutation(96)] * np.array([-1.0, 1.0, 1.0])  # other rows, other labels, the same statistics
    halves = [(half, _labels(half)), (other, _labels(other))]
    settings = dict(num_inducing=6, batch_size=96, tol=0.0, inducing_points=half[:6],
                    kernel=SquaredExponential(lengthscales=1.0, variance=1.0))
    whole = SparseGPClassifier(**settings, max_iter=2).fit(np.vstack([h[0] for h in halves]),
                                                           np.concatenate([h[1] for h in halves]))
    key_data = tuple(int(k) for k in jax.random.key_data(jax.random.key(0)))
    order = [MinibatchSchedule(2, 1, key_data).blocks(step)[0] for step in (0, 1)]  # fit's minibatch of each step
    streamed = SparseGPClassifier(**settings, num_data=192)
    for index in order:
        streamed.partial_fit(*halves[index], classes=[0, 1])
    np.testing.assert_array_equal(streamed.x_mean_, whole.x_mean_)
    np.testing.assert_array_equal(streamed.x_std_, whole.x_std_)
    assert leaves_equal(streamed.params_, whole.params_) and streamed.n_iter_ == whole.n_iter_ == 2
    np.testing.assert_array_equal(streamed.energy_trace_, whole.energy_trace_)
    with pytest.raises(ValueError, match=r"num_data must be None or an integer of at least the rows trained on so "
                                         r"far \(192\); got 100"):
        SparseGPClassifier(**settings, num_data=100).fit(*halves[0]).partial_fit(*halves[1])


def _labels(x):
    return (x[:, 0] + x[:, 1] ** 2 > 0.5).astype(int)


def test_partial_fit_follows_scikit_learns_conventions(rows):
    X, y = rows
    with pytest.raises(ValueError, match="classes must be passed on the first call"):
        SparseGPClassifier(**SETTINGS).partial_fit(X, y)
    model = SparseGPClassifier(**SETTINGS).partial_fit(X[:96], y[:96], classes=[0, 1])
    with pytest.raises(ValueError, match=r"y has labels \[2\] not among classes \[0, 1\]"):
        model.partial_fit(X[:10], np.full(10, 2))
    with pytest.raises(ValueError, match="is not the same as on the first call"):
        model.partial_fit(X[:10], y[:10], classes=[0, 2])
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(X[:10, :1], y[:10])
    assert hasattr(SparseGPRegressor(), "partial_fit") and not hasattr(CollapsedGPRegressor(), "partial_fit")


def test_warm_start_starts_from_the_previous_fit_in_its_frame(rows):
    X, y = rows
    model = SparseGPClassifier(**SETTINGS, max_iter=4).fit(X, y)
    params, x_mean = model.params_, model.x_mean_.copy()
    model.set_params(warm_start=True, max_iter=0).fit(10 + X[:96], y[:96])  # no steps: nothing moves
    assert leaves_equal(model.params_, params)
    np.testing.assert_array_equal(model.x_mean_, x_mean)  # new rows standardised as the first fit's
    model.set_params(max_iter=2).fit(X[:96], y[:96])
    assert model.n_iter_ == 2 and not leaves_equal(model.params_, params)
    cold = SparseGPClassifier(**SETTINGS, max_iter=0).fit(10 + X[:96], y[:96])
    assert not np.allclose(cold.x_mean_, x_mean)
