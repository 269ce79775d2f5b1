"""Priors and an output mean function in the deep GP (issue 65): the MAP term is scipy's log density of every layer's
kernel values (with the stored logarithm's Jacobian); the moments of ``f = m(h) + g(h)`` propagated through a
hidden layer's Gaussian (a constant and a linear mean, the squared exponential's closed forms and a Matérn
kernel's quadrature) against Monte Carlo of the hidden layer and Gauss–Hermite quadrature over it; the Monte Carlo
mixture carries the mean; one layer's energy with a mean is the zero-mean energy of ``y − m(x)``; the energy's
gradient in the mean's weights against central differences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from pep_gp.core import means
from pep_gp.core.kernels import Matern52, SquaredExponential
from pep_gp.core.likelihoods import Gaussian
from pep_gp.core.models.deep_gp import DeepGP, check_output_mean
from pep_gp.core.priors import Gamma, LogNormal
from pep_gp.core.psi_statistics import fixed_input_marginals
from tests.core.test_deep_gp import _hidden_quadrature, _model_and_params

LINEAR = means.Linear(weights=[0.7, -1.2], bias=0.3)


@pytest.mark.heavy  # two global terms compiled: ~10 s at a load of 12 on 2 cores
def test_a_kernel_prior_adds_scipys_log_density_of_every_layers_values():
    """Two layers (widths 2 and 1, a kernel per GP): the objective with a prior on the lengthscales and the
    variance less the objective without is scipy's log density of each stored value plus ``log θ``, to 1e-10
    (the global term's difference: the data term does not read the priors)."""
    prior = {"lengthscales": Gamma(2.0, 1.5), "variance": LogNormal(0.1, 0.5)}
    x = jnp.asarray(np.random.default_rng(0).normal(size=(12, 2)))
    model = DeepGP(Gaussian())
    plain = model.init(x, (2,), 4, kernel=SquaredExponential())
    with_prior = model.init(x, (2,), 4, kernel=SquaredExponential(prior=prior))
    shared = jax.jit(model.step_shared)(plain, x.shape[0])
    energy = jax.jit(model.global_energy)
    difference = float(energy(with_prior, shared, x.shape[0]) - energy(plain, shared, x.shape[0]))
    expected = 0.0
    for layer in plain.layers:
        lengthscales, variance = (np.exp(np.asarray(p.raw)) for p in (layer.kernel.lengthscales, layer.kernel.variance))
        expected += np.sum(stats.gamma(a=2.0, scale=1 / 1.5).logpdf(lengthscales) + np.log(lengthscales))
        expected += np.sum(stats.lognorm(s=0.5, scale=np.exp(0.1)).logpdf(variance) + np.log(variance))
    assert difference == pytest.approx(expected, abs=1e-10)


def _monte_carlo(model, params, x, samples, seed):
    """The output's mean and variance per row by simulating the hidden layer's exact Gaussian ``h ~ N(μ, S)``
    (``samples`` draws per row) and, given each draw, the output GP's exact moments plus ``m(h)`` (numpy for the
    mean's ``wᵀh + b``); with the standard errors of both."""
    first_mean, first_var = jax.jit(_first_layer, static_argnums=0)(model, params, x)
    std = np.sqrt(np.asarray(first_var) + float(Gaussian.noise_variance(params.layers[0].likelihood)))
    h = np.asarray(first_mean)[:, None] + std[:, None] * np.random.default_rng(seed).normal(size=(x.shape[0], samples, 2))
    g_mean, g_var = (np.asarray(v).reshape(h.shape[:2])
                     for v in jax.jit(_output_layer, static_argnums=0)(model, params, jnp.asarray(h.reshape(-1, 2))))
    f_mean = g_mean + np.asarray(params.mean(jnp.asarray(h.reshape(-1, 2)))).reshape(h.shape[:2])
    mean = f_mean.mean(1)
    second = g_var + (f_mean - mean[:, None]) ** 2  # law of total variance
    return mean, second.mean(1), f_mean.std(1) / np.sqrt(samples), second.std(1) / np.sqrt(samples)


def _first_layer(model, params, x):
    inputs = model.posteriors(params)
    return tuple(fixed_input_marginals(model.layer_bank(params.layers[0]), inputs[0].prior, inputs[0].gaussian, x))


def _output_layer(model, params, h):
    inputs = model.posteriors(params)
    return tuple(fixed_input_marginals(model.layer_bank(params.layers[1]), inputs[1].prior, inputs[1].gaussian, h))


@pytest.mark.heavy  # the pass, 4·10⁵ simulated rows and the quadrature: 60-240 s at a load of 12 on 2 cores
@pytest.mark.parametrize("kernel", [None, Matern52()], ids=["se", "matern52"])
def test_a_linear_output_mean_through_a_hidden_gaussian_matches_monte_carlo(kernel):
    """Hidden width 2: ``predict_f``'s moment-matched mean and variance of ``f = wᵀh + b + g(h)`` lie within 4
    standard errors of 10⁵ simulated hidden values per row (exact for two layers, up to the Matérn quadrature);
    the squared exponential's also equal 48² Gauss–Hermite nodes over the hidden layer to 1e-7."""
    model, params, x, _ = _model_and_params((2,), kernel=kernel)
    params = params._replace(mean=LINEAR.build(2))
    x = x[:4]
    mean, var = (np.asarray(v) for v in jax.jit(model.predict_f)(params, x))
    mc_mean, mc_var, mean_error, var_error = _monte_carlo(model, params, x, 100_000, seed=1)
    assert np.all(np.abs(mean - mc_mean) < 4 * mean_error), (mean, mc_mean, mean_error)
    assert np.all(np.abs(var - mc_var) < 4 * var_error), (var, mc_var, var_error)
    zero_var = np.asarray(jax.jit(model.predict_f)(params._replace(mean=means.Zero()), x)[1])
    assert np.all(np.abs(var - zero_var) > 10 * var_error)  # the mean's spread and covariance count
    if kernel is None:
        weights, g_means, g_vars = jax.jit(_hidden_quadrature, static_argnums=0)(model, params, x)
        first_mean, first_var = jax.jit(_first_layer, static_argnums=0)(model, params, x)
        t, _ = np.polynomial.hermite.hermgauss(48)
        grid = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)
        scale = np.sqrt(2 * (np.asarray(first_var) + float(Gaussian.noise_variance(params.layers[0].likelihood))))
        hidden = np.asarray(first_mean)[:, None, :] + scale[:, None, :] * grid[None]
        f_means = np.asarray(g_means) + hidden @ np.asarray(LINEAR.weights) + LINEAR.bias
        quad_mean = np.sum(weights * f_means, axis=1)
        quad_var = np.sum(weights * (np.asarray(g_vars) + f_means**2), axis=1) - quad_mean**2
        np.testing.assert_allclose(mean, quad_mean, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(var, quad_var, rtol=1e-7, atol=1e-9)


@pytest.mark.heavy  # the forward pass and the mixture compiled: 6-70 s on 2 shared cores
def test_a_constant_output_mean_shifts_the_moments_and_the_mixture():
    model, params, x, _ = _model_and_params((2,))
    shifted = params._replace(mean=means.Constant(0.8).build(2))
    (mean, var), (plain_mean, plain_var) = (jax.jit(model.predict_f)(p, x) for p in (shifted, params))
    np.testing.assert_allclose(mean, plain_mean + 0.8, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(var, plain_var)
    mixture = jax.jit(model.predict_mixture, static_argnums=3)
    with_mean, without = (mixture(p, x, jax.random.key(0), 8) for p in (shifted, params))
    np.testing.assert_allclose(with_mean.mean, without.mean + 0.8, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(with_mean.var, without.var)


@pytest.mark.heavy  # two energies and a gradient compiled: 8-50 s on 2 shared cores
def test_the_energy_with_a_mean_and_its_gradient_in_the_weights():
    """One layer: the energy with a linear mean is the zero-mean energy of ``y − m(x)``; two layers: the
    gradient in the mean's weights (through the forward-mode covariance term) equals central differences."""
    model, params, x, y = _model_and_params(())
    mean = LINEAR.build(2)
    energy = jax.jit(model.energy)
    assert float(energy(params._replace(mean=mean), x, y)) == pytest.approx(float(energy(params, x, y - mean(x))),
                                                                            rel=1e-12)
    model, params, x, y = _model_and_params((2,))
    params = params._replace(mean=mean)
    gradient = jax.jit(jax.grad(model.energy))(params, x, y).mean.weights
    step = 1e-5
    for index in range(2):
        moved = [params._replace(mean=mean.replace(weights=mean.weights.at[index].add(sign * step)))
                 for sign in (1.0, -1.0)]
        central = (float(energy(moved[0], x, y)) - float(energy(moved[1], x, y))) / (2 * step)
        assert float(gradient[index]) == pytest.approx(central, rel=1e-6, abs=1e-8)


def test_a_mean_of_ones_own_needs_a_fixed_input():
    class Quadratic(means.MeanFunction):
        name = "quadratic"
        parameters = ("a",)

    check_output_mean(Quadratic(a=1.0), ())
    with pytest.raises(ValueError, match="'quadratic': a deep GP with hidden layers takes a constant or linear"):
        check_output_mean(Quadratic(a=1.0), (2,))
