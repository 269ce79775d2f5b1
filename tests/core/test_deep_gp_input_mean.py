"""A deep GP's mean of its input rows past the hidden layers (``params.input_mean``, ``f_L = m_x(x) + m(h) + g(h)``)
against oracles: the same model without it on targets about it (a Gaussian output's ``log Z̃`` depends on ``y``
minus the mean only), the forward pass and the Monte Carlo mixture shifted by exactly ``m_x(x)``, and least
squares for the regressor's start."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import means
from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.models.deep_gp import DeepGP, least_squares_mean
from tests.core.test_multiclass_deep_gp import _problem

WEIGHTS, BIAS = np.array([0.7, -1.3]), 0.4


def _two_layers():
    """A Gaussian deep GP with one hidden layer of width 2, its parameters with and without ``m_x = wᵀx + b``
    (everything else the same), and rows."""
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(20, 2)))
    y = jnp.sin(2 * x[:, 0]) + x @ WEIGHTS
    model = DeepGP(Gaussian())
    with_mean = model.init(x, hidden_dims=(2,), num_inducing=4, seed=0,
                           input_mean=means.Linear(weights=WEIGHTS, bias=BIAS))
    return model, with_mean, with_mean._replace(input_mean=means.Zero()), x, y


@pytest.mark.heavy  # four energies and their gradients compiled: seconds
def test_the_energy_with_an_input_mean_is_that_of_the_targets_about_it():
    """``log Z̃_n = log ∫ N(f; m_n + m_x(x_n), v_n) N(y_n; f, σ²)^α df`` is the zero-mean model's at ``y_n − m_x(x_n)``:
    the energy and its gradient in every other parameter agree to rounding, and the input mean's own gradient is
    the energy's central differences."""
    model, with_mean, plain, x, y = _two_layers()
    shift = x @ WEIGHTS + BIAS
    value, grad = jax.value_and_grad(model.energy)(with_mean, x, y)
    about, grad_about = jax.value_and_grad(model.energy)(plain, x, y - shift)
    np.testing.assert_allclose(value, about, rtol=1e-12)
    for got, expected in zip(jax.tree_util.tree_leaves(grad.layers), jax.tree_util.tree_leaves(grad_about.layers)):
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    energy = jax.jit(lambda mean: model.energy(with_mean._replace(input_mean=mean), x, y))
    line = lambda weights, bias: jax.tree_util.tree_map(jnp.asarray, means.Linear(weights=weights, bias=bias))
    step, eye = 1e-5, np.eye(3)
    differences = [(energy(line(WEIGHTS + step * e[:2], BIAS + step * e[2]))
                    - energy(line(WEIGHTS - step * e[:2], BIAS - step * e[2]))) / (2 * step) for e in eye]
    np.testing.assert_allclose([*grad.input_mean.weights, grad.input_mean.bias], differences, rtol=1e-6)


@pytest.mark.heavy  # two forward passes and two mixtures compiled: seconds
def test_the_forward_pass_and_the_mixture_shift_by_the_input_mean_only():
    """``x`` is fixed, so ``m_x(x)`` moves the predictive mean and nothing else: the variances are the same bits, the
    means the zero-mean model's plus ``wᵀx + b``, in the moment-matched pass and in every Monte Carlo path."""
    model, with_mean, plain, x, _ = _two_layers()
    shift = x @ WEIGHTS + BIAS
    mean, var = model.predict_f(with_mean, x)
    mean_plain, var_plain = model.predict_f(plain, x)
    np.testing.assert_array_equal(var, var_plain)
    np.testing.assert_allclose(mean, mean_plain + shift, rtol=1e-12, atol=1e-12)
    mixture = model.predict_mixture(with_mean, x, jax.random.key(3), 8)
    mixture_plain = model.predict_mixture(plain, x, jax.random.key(3), 8)
    np.testing.assert_array_equal(mixture.var, mixture_plain.var)
    np.testing.assert_allclose(mixture.mean, mixture_plain.mean + shift[None], rtol=1e-12, atol=1e-12)


@pytest.mark.heavy  # two multi-class passes compiled: seconds
def test_each_class_adds_its_own_input_mean():
    """A multi-class deep GP's input mean is one line per class (:meth:`~pep_gp.core.means.MeanFunction.stacked`):
    class ``c``'s mean moves by ``w_cᵀx + b_c``, every variance stays."""
    model, params, x, _ = _problem((2,))
    classes = params.layers[-1].inducing.shape[0]
    weights = np.arange(2.0 * classes).reshape(classes, 2) / 4 - 1
    stacked = means.Linear(weights=weights, bias=np.linspace(-1, 1, classes)).stacked(classes, 2)
    inputs = model.posteriors(params)
    moved = model.output_marginals(params._replace(input_mean=stacked), inputs, x)
    still = model.output_marginals(params, inputs, x)
    np.testing.assert_array_equal(moved.var, still.var)
    np.testing.assert_allclose(moved.mean, still.mean + x @ weights.T + np.linspace(-1, 1, classes), rtol=1e-12,
                               atol=1e-12)


def test_the_regressors_start_is_least_squares():
    """:func:`least_squares_mean` recovers a line from rows on it, and takes the minimum-norm line where two columns
    are the same (their weights shared equally), as float64 arrays of a linear mean's shapes."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 3))
    start = least_squares_mean(x, x @ np.array([1.5, -2.0, 0.25]) + 3.0)
    np.testing.assert_allclose(start.weights, [1.5, -2.0, 0.25], rtol=1e-12)
    np.testing.assert_allclose(start.bias, 3.0, rtol=1e-12)
    assert start.weights.dtype == start.bias.dtype == jnp.float64 and start.bias.shape == ()
    twice = least_squares_mean(np.column_stack([x[:, 0], x[:, 0]]), 2.0 * x[:, 0])
    np.testing.assert_allclose(twice.weights, [1.0, 1.0], rtol=1e-10)
