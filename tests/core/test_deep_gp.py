"""Deep GP with approximate EP (Bui et al. 2016) against oracles: ψ-statistics and propagated moments vs Monte
Carlo (10⁶ samples), one layer vs the exact sparse-GP evidence and the tied Power-EP energy, gradients vs
central differences, minibatch estimates vs the full energy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.stats import norm

from pep_gp.core import bank
from pep_gp.core.input_quadrature import DEFAULT_POINTS
from pep_gp.core.kernels import Matern52
from pep_gp.core.likelihoods import Gaussian, Probit
from pep_gp.core.models import deep_gp
from pep_gp.core.models.deep_gp import ALPHA_FLOOR, DeepGP, DeepGPParams, tied_factor
from pep_gp.core.models.power_ep import PowerEPSparseGP, SparseGPParams
from pep_gp.core.psi_statistics import (fixed_input_marginals, pair_terms, projected_gaussians, psi1, psi2_traces,
                                        trace_weights, uncertain_input_marginals)
from tests import oracles

SAMPLES = 1_000_000


def _data(n=20, d=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return jnp.asarray(x), jnp.asarray(np.sin(2 * x[:, 0]) + 0.1 * rng.normal(size=n))


def _model_and_params(hidden, likelihood=Gaussian(), alpha=1.0, num_inducing=4, seed=0, n=20, kernel=None,
                      quadrature_points=DEFAULT_POINTS):
    """A model whose parameters are not at their starting values: perturbed hyper-parameters, inducing
    inputs and noises, and tied factors of moderate size."""
    x, y = _data(n, seed=seed)
    model = DeepGP(likelihood, alpha=alpha, quadrature_points=quadrature_points)
    params = model.init(x, hidden_dims=hidden, num_inducing=num_inducing, seed=seed, kernel=kernel)
    flat, unravel = ravel_pytree(params)
    rng = np.random.default_rng(seed + 1)
    return model, unravel(flat + 0.2 * jnp.asarray(rng.normal(size=flat.shape))), x, y


def _bank_gaussians(model: DeepGP, params: DeepGPParams, scale):
    """Every layer's ``p·t^scale`` by :func:`pep_gp.core.bank.gaussians` (triangular solves, not the
    inverses of :func:`pep_gp.core.psi_statistics.projected_gaussians`): the reference."""
    return [bank.gaussians(bank.prior_factors(model.layer_bank(layer)), tied_factor(layer), scale)
            for layer in params.layers]


def _numpy_layers(model: DeepGP, params: DeepGPParams, scale, kernel=oracles.se_kernel):
    """Each layer as plain numpy arrays: kernel (``kernel`` of its ℓ and σ_f², numpy), Z, diagonal, the
    Gaussian ``p·t^scale`` over u, output noise."""
    layers = []
    for index, (layer, gaussian) in enumerate(zip(params.layers, _bank_gaussians(model, params, scale))):
        gps = model.layer_bank(layer)
        last = index == len(params.layers) - 1
        layers.append(dict(
            kernel=kernel, ell=np.asarray(gps.kernel.lengthscales.value), sf2=np.asarray(gps.kernel.variance.value),
            z=np.asarray(gps.inducing), d=np.asarray(gps.diagonal), m=np.asarray(gaussian.mean),
            cov=np.asarray(gaussian.sqrt_cov @ jnp.swapaxes(gaussian.sqrt_cov, -1, -2)),
            noise=0.0 if last else float(Gaussian.noise_variance(layer.likelihood))))
    return layers


def _conditional_moments(layer, g, h):
    """Exact mean and variance of GP ``g``'s output given fixed inputs ``h`` (dense numpy)."""
    kernel = layer["kernel"]
    kuu = kernel(layer["z"][g], layer["z"][g], layer["ell"][g], layer["sf2"][g]) + layer["d"][g] * np.eye(
        layer["z"].shape[1])
    k = kernel(h, layer["z"][g], layer["ell"][g], layer["sf2"][g])  # [S, M]
    a = np.linalg.solve(kuu, k.T).T
    mean = a @ layer["m"][g]
    var = layer["sf2"][g] + layer["d"][g] - np.sum(a * k, 1) + np.sum((a @ layer["cov"][g]) * a, 1)
    return mean, var


def _monte_carlo_moments(layers, row, rng, samples=SAMPLES):
    """Moment propagation by simulation: each layer's input is ``samples`` draws from the diagonal Gaussian
    whose moments the *simulation* of the previous layer gave; u and the FITC noise are integrated exactly
    given each draw (Rao–Blackwell), the input distribution by sampling. Also the standard errors of the
    output's mean and variance as Monte Carlo means (of ``m`` and of ``v + (m − m̄)²``)."""
    h = row[None, :]
    for index, layer in enumerate(layers):
        moments = [_conditional_moments(layer, g, h) for g in range(layer["z"].shape[0])]
        mean = np.array([m.mean() for m, _ in moments])
        var = np.array([v.mean() + m.var() for m, v in moments])  # law of total variance
        if index < len(layers) - 1:
            h = mean + np.sqrt(var + layer["noise"]) * rng.normal(size=(samples, mean.size))
    output_mean, output_var = moments[0]
    errors = np.array([np.std(output_mean), np.std(output_var + (output_mean - mean[0]) ** 2)]) / np.sqrt(len(output_mean))
    return mean[0], var[0], errors


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_psi_statistics_match_monte_carlo():
    """ψ₁ and the ψ₂ traces ``Σ W_mm' [ψ₂]_mm'`` of random symmetric ``W`` against 10⁶ draws of the input."""
    rng = np.random.default_rng(0)
    g, m, d = 2, 4, 3
    kernel = oracles.se_bank(rng.uniform(0.5, 2.0, (g, d)), [0.7, 1.3])
    z = jnp.asarray(rng.normal(size=(g, m, d)))
    mean, var = jnp.asarray(rng.normal(size=(2, d))), jnp.asarray(rng.uniform(0.05, 1.5, (2, d)))
    weights = rng.normal(size=(g, 2, m, m))
    pairs = pair_terms(bank.Bank(kernel, z, jnp.zeros(g)), jnp.asarray(weights))
    psi1_values, traces = psi1(kernel, z, mean, var), psi2_traces(kernel, z, pairs, mean, var)
    for b in range(2):
        h = np.asarray(mean[b]) + np.sqrt(np.asarray(var[b])) * rng.normal(size=(SAMPLES, d))
        for c in range(g):
            k = oracles.se_kernel(h, np.asarray(z[c]), np.asarray(kernel.lengthscales.value[c]), float(kernel.variance.value[c]))
            np.testing.assert_allclose(psi1_values[c, b], k.mean(0), atol=1e-3)
            psi2 = k.T @ k / SAMPLES
            np.testing.assert_allclose(traces[b, c], np.sum(weights[c] * psi2, axis=(-1, -2)), atol=1e-2)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_fixed_input_marginals_are_the_bank_projection():
    """``[L⁻¹; P]`` applied to the rows equals :func:`pep_gp.core.bank.latent_marginals` with the bank's
    triangular-solve Gaussians, and ``a``, ``PᵀP`` are ``K⁻¹m̂`` and ``K⁻¹V̂K⁻¹``."""
    model, params, x, _ = _model_and_params((3, 2))
    layer = params.layers[0]
    gps = model.layer_bank(layer)
    prior = bank.prior_factors(gps)
    reference = bank.gaussians(prior, tied_factor(layer), 0.9)
    gaussian = projected_gaussians(prior, tied_factor(layer), 0.9)
    expected = jax.jit(bank.latent_marginals)(gps, prior, reference, x)
    marginals = jax.jit(fixed_input_marginals)(gps, prior, gaussian, x)
    np.testing.assert_allclose(marginals.mean, expected.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(marginals.var, expected.var, rtol=1e-10)
    np.testing.assert_allclose(gaussian.log_normaliser, reference.log_normaliser, rtol=1e-10)
    inverse_k = np.linalg.inv(np.asarray(prior.chol @ jnp.swapaxes(prior.chol, -1, -2)))
    covariance = np.asarray(reference.sqrt_cov @ jnp.swapaxes(reference.sqrt_cov, -1, -2))
    np.testing.assert_allclose(gaussian.mean_weights, np.einsum("gmn,gn->gm", inverse_k, reference.mean), rtol=1e-8)
    np.testing.assert_allclose(jnp.swapaxes(gaussian.spread, -1, -2) @ gaussian.spread,
                               inverse_k @ covariance @ inverse_k, rtol=1e-8, atol=1e-10)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_uncertain_input_at_zero_variance_is_the_fixed_row_projection():
    model, params, x, _ = _model_and_params((3, 2))
    layer = params.layers[1]
    gps = model.layer_bank(layer)
    prior = bank.prior_factors(gps)
    gaussian = projected_gaussians(prior, tied_factor(layer), 0.9)
    rows = jnp.asarray(np.random.default_rng(2).normal(size=(5, 3)))
    fixed = jax.jit(bank.latent_marginals)(gps, prior, bank.gaussians(prior, tied_factor(layer), 0.9), rows)
    pairs = pair_terms(gps, trace_weights(prior, gaussian))
    uncertain = jax.jit(uncertain_input_marginals)(gps, gaussian, pairs, rows, jnp.zeros_like(rows))
    np.testing.assert_allclose(uncertain.mean, fixed.mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(uncertain.var, fixed.var, rtol=1e-8)


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("hidden", [(), (2,), (3, 2)])
def test_propagated_moments_match_monte_carlo(hidden):
    model, params, x, _ = _model_and_params(hidden)
    shared = jax.jit(model.step_shared)(params, x.shape[0])
    mean, var = jax.jit(model.propagate)(params, shared.layers, x[:3])
    layers = _numpy_layers(model, params, 1.0 - 1.0 / x.shape[0])
    for row in range(3):
        mc_mean, mc_var, _ = _monte_carlo_moments(layers, np.asarray(x[row]), np.random.default_rng(row))
        assert abs(float(mean[row]) - mc_mean) < 1e-3
        assert abs(float(var[row]) - mc_var) < 1e-3


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_matern_layers_propagated_moments_match_monte_carlo():
    """A deep GP of three Matérn-5/2 layers (two with Gaussian inputs, their ψ-statistics by 16² Gauss–Hermite
    nodes, :mod:`pep_gp.core.input_quadrature`) against simulation through the layers with a numpy Matérn kernel, within 4 standard errors of 10⁵ draws."""
    model, params, x, _ = _model_and_params((2, 2), kernel=Matern52(), quadrature_points=16)
    shared = jax.jit(model.step_shared)(params, x.shape[0])
    mean, var = jax.jit(model.propagate)(params, shared.layers, x[:3])
    layers = _numpy_layers(model, params, 1.0 - 1.0 / x.shape[0], oracles.matern52_kernel)
    for row in range(3):
        mc_mean, mc_var, (error_mean, error_var) = _monte_carlo_moments(
            layers, np.asarray(x[row]), np.random.default_rng(row), samples=100_000)
        assert abs(float(mean[row]) - mc_mean) < 4 * error_mean
        assert abs(float(var[row]) - mc_var) < 4 * error_var


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_one_layer_is_the_tied_power_ep_sparse_gp(alpha):
    model, params, x, y = _model_and_params((), alpha=alpha)
    layer = params.layers[0]
    same = SparseGPParams(kernel=layer.kernel, inducing=layer.inducing[0],
                          likelihood=layer.likelihood, factor_shift=layer.factor_shift[0],
                          factor_chol=tied_factor(layer).chol[0])
    reference = PowerEPSparseGP(Gaussian(), alpha=alpha, jitter=model.jitter)
    energy, expected = float(jax.jit(model.energy)(params, x, y)), float(jax.jit(reference.energy)(same, x, y))
    assert abs(energy - expected) <= 1e-8 * abs(expected)
    np.testing.assert_allclose(jax.jit(model.predict_y)(params, x), jax.jit(reference.predict_y)(same, x),
                               rtol=1e-10)


@pytest.mark.heavy
def test_one_layer_log_z_is_the_exact_integral():
    """``log Z_n = log ∫ N(u; m̂, V̂) N(y_n; f_n(u)) du = log N(y_n; kᵀK⁻¹m̂, FITC + kᵀK⁻¹V̂K⁻¹k + σ²)``."""
    model, params, x, y = _model_and_params(())
    shared = jax.jit(model.step_shared)(params, x.shape[0])
    layer = _numpy_layers(model, params, 1.0 - 1.0 / x.shape[0])[0]
    mean, var = _conditional_moments(layer, 0, np.asarray(x))
    noise = float(Gaussian.noise_variance(params.layers[0].likelihood))
    expected = norm.logpdf(np.asarray(y), mean, np.sqrt(var + noise))
    data_energy = jax.jit(model.data_energy)
    rows = [float(data_energy(params, shared, x, y, jnp.arange(x.shape[0]) == n)) for n in range(x.shape[0])]
    np.testing.assert_allclose(rows, expected, rtol=1e-10)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_one_data_point_energy_is_its_log_z():
    """N = 1: the cavity is the prior, ``F = log Z_1`` (Bui et al. 2016)."""
    model, params, x, y = _model_and_params((2,))
    x, y = x[:1], y[:1]
    shared = model.step_shared(params, 1)
    expected = model.data_energy(params, shared, x, y, jnp.ones(1, bool))
    assert float(model.global_energy(params, shared, 1)) == pytest.approx(0.0, abs=1e-12)
    assert float(model.energy(params, x, y)) == pytest.approx(float(expected), rel=1e-12)
    prior_only = model.propagate(params, shared.layers, x)
    no_factor = lambda raw: jnp.where(jnp.eye(raw.shape[-1], dtype=bool), -jnp.inf, 0.0 * raw)  # L = 0
    posteriors = model.posteriors(params._replace(layers=tuple(
        layer._replace(factor_shift=0 * layer.factor_shift, factor_chol=no_factor(layer.factor_chol))
        for layer in params.layers)))
    np.testing.assert_allclose(prior_only, model.propagate(params, posteriors, x), rtol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("hidden, likelihood", [((2,), Gaussian()), ((2,), Probit()), ((2, 2), Gaussian())])
def test_energy_gradient_matches_central_differences(hidden, likelihood):
    model, params, x, y = _model_and_params(hidden, likelihood, num_inducing=3, n=8)
    y = y if isinstance(likelihood, Gaussian) else (y > 0).astype(float)
    flat, unravel = ravel_pytree(params)
    energy = lambda v: model.energy(unravel(v), x, y)
    oracles.assert_gradient_matches_central_differences(energy, jax.grad(energy), flat, eps=1e-6)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_minibatch_estimates_average_to_the_full_energy():
    """One epoch's batches (a permutation cut into equal parts): the mean of ``G + (N/|B|)Σ_B log Z`` is F."""
    model, params, x, y = _model_and_params((2,), n=24)
    n, size = x.shape[0], 6
    shared = model.step_shared(params, n)
    data_energy = jax.jit(model.data_energy)
    order = np.random.default_rng(5).permutation(n)
    estimates = [model.global_energy(params, shared, n)
                 + n / size * data_energy(params, shared, x[rows], y[rows], jnp.ones(size, bool))
                 for rows in order.reshape(-1, size)]
    assert float(np.mean(estimates)) == pytest.approx(float(jax.jit(model.energy)(params, x, y)), rel=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_masked_rows_add_nothing():
    model, params, x, y = _model_and_params((2,))
    shared = model.step_shared(params, 100)
    mask = jnp.arange(x.shape[0]) < 7
    garbage = x.at[7:].set(1e3)
    value_and_grad = jax.jit(jax.value_and_grad(model.data_energy))
    value, grad = value_and_grad(params, shared, garbage, y, mask)
    ref_value, ref_grad = value_and_grad(params, shared, x[:7], y[:7], jnp.ones(7, bool))
    assert float(value) == pytest.approx(float(ref_value), rel=1e-12)
    np.testing.assert_allclose(ravel_pytree(grad)[0], ravel_pytree(ref_grad)[0], rtol=1e-9, atol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_data_term_in_row_chunks_equals_one_pass(monkeypatch):
    """Chunks of 6 rows (20 rows: the last chunk padded) give the value and gradient of one pass over all rows."""
    model, params, x, y = _model_and_params((2,))
    shared = model.step_shared(params, 50)
    mask = jnp.arange(x.shape[0]) < 17
    one_pass = jax.jit(jax.value_and_grad(model._rows_energy))((params, shared), x, y, mask)
    monkeypatch.setattr(deep_gp, "DATA_CHUNK_ROWS", 6)
    chunked = jax.jit(jax.value_and_grad(model.data_energy, argnums=(0, 1)))(params, shared, x, y, mask)
    assert float(chunked[0]) == pytest.approx(float(one_pass[0]), rel=1e-13)
    np.testing.assert_allclose(ravel_pytree(chunked[1])[0], ravel_pytree(one_pass[1])[0], rtol=1e-10, atol=1e-13)


def test_one_layer_mixture_is_the_gaussian_predictive():
    """Without hidden layers every path is the same Gaussian: the mixture's log density is ``log N(y; m, v + σ²)``."""
    model, params, x, y = _model_and_params(())
    mean, var = jax.jit(model.predict_y)(params, x)
    expected = norm.logpdf(np.asarray(y), np.asarray(mean), np.sqrt(np.asarray(var)))
    density = jax.jit(model.mixture_log_density, static_argnums=4)(params, x, y, jax.random.key(0), 5)
    np.testing.assert_allclose(density, expected, rtol=1e-12)


def _hidden_quadrature(model, params, x, nodes=48):
    """``p(f_2 | x)`` of a width-2, two-layer model as a mixture over a 48 × 48 Gauss–Hermite grid of the
    hidden layer's exact Gaussian: weights ``[B, Q]`` and the output's conditional means and variances."""
    inputs = model.posteriors(params)
    first = fixed_input_marginals(model.layer_bank(params.layers[0]), inputs[0].prior, inputs[0].gaussian, x)
    scale = jnp.sqrt(2 * (first.var + Gaussian.noise_variance(params.layers[0].likelihood)))
    t, w = np.polynomial.hermite.hermgauss(nodes)
    grid = np.stack(np.meshgrid(t, t, indexing="ij"), -1).reshape(-1, 2)  # [Q, 2]
    hidden = first.mean[:, None, :] + scale[:, None, :] * grid[None]  # [B, Q, 2]
    out = fixed_input_marginals(model.layer_bank(params.layers[1]), inputs[1].prior, inputs[1].gaussian,
                                hidden.reshape(-1, 2))
    return np.outer(w, w).reshape(-1) / np.pi, out.mean.reshape(hidden.shape[:2]), out.var.reshape(hidden.shape[:2])


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_two_layer_mixture_matches_quadrature_over_the_hidden_layer():
    """Hidden width 2: the Monte Carlo mixture (20,000 paths) against Gauss–Hermite quadrature of the same
    integral — log density of y within 4 Monte Carlo standard errors; and its mean and variance are the
    moment-matched predictive's (exact for two layers: the ψ-statistics give the true first two moments)."""
    model, params, x, y = _model_and_params((2,))
    x, y = x[:4], np.asarray(y[:4])
    samples = 20_000
    noise = float(Gaussian.noise_variance(params.layers[-1].likelihood))
    weights, means, variances = jax.jit(_hidden_quadrature, static_argnums=0)(model, params, x)
    exact = np.log(np.sum(weights * norm.pdf(y[:, None], means, np.sqrt(variances + noise)), axis=1))
    mixture = jax.jit(model.predict_mixture, static_argnums=3)(params, x, jax.random.key(3), samples)
    component_means, component_vars = np.asarray(mixture.mean), np.asarray(mixture.var) + noise
    densities = norm.pdf(y, component_means, np.sqrt(component_vars))
    standard_error = densities.std(axis=0) / np.sqrt(samples) / densities.mean(axis=0)
    assert np.all(np.abs(np.log(densities.mean(axis=0)) - exact) < 4 * standard_error)
    expected_mean, expected_var = (np.asarray(v) for v in jax.jit(model.predict_y)(params, x))
    second = component_vars + component_means**2
    assert np.all(np.abs(component_means.mean(0) - expected_mean) < 4 * component_means.std(0) / np.sqrt(samples))
    assert np.all(np.abs(second.mean(0) - expected_mean**2 - expected_var) < 4 * second.std(0) / np.sqrt(samples))
    np.testing.assert_allclose(expected_mean, np.sum(weights * means, axis=1), rtol=1e-6, atol=1e-9)


@pytest.mark.heavy
def test_the_mixture_is_seeded_and_scored_from_its_components():
    """``mixture_log_density`` and ``mixture_moments`` are the log-mean-exp and the law of total variance
    of :meth:`predict_mixture`'s components; the same key gives the same mixture, another key another."""
    model, params, x, y = _model_and_params((2,))
    samples = 50
    scored = jax.jit(lambda key: (model.predict_mixture(params, x, key, samples),
                                  model.mixture_log_density(params, x, y, key, samples),
                                  model.mixture_moments(params, x, key, samples)))
    mixture, density, (mean, var) = scored(jax.random.key(1))
    noise = float(Gaussian.noise_variance(params.layers[-1].likelihood))
    means, variances = np.asarray(mixture.mean), np.asarray(mixture.var) + noise
    log_components = norm.logpdf(np.asarray(y), means, np.sqrt(variances))
    np.testing.assert_allclose(density, np.logaddexp.reduce(log_components, axis=0) - np.log(samples), rtol=1e-12)
    np.testing.assert_allclose(mean, means.mean(0), rtol=1e-12)
    np.testing.assert_allclose(var, (variances + means**2).mean(0) - means.mean(0) ** 2, rtol=1e-10)
    np.testing.assert_array_equal(scored(jax.random.key(1))[0].mean, means)
    assert not np.allclose(scored(jax.random.key(2))[0].mean, means)


def test_alpha_outside_the_unit_interval_is_rejected():
    for alpha in (0.0, 1e-6, 1.5):
        with pytest.raises(ValueError, match=r"alpha must lie in \[0.0001, 1\] \(below 0.0001 the energy cancels"):
            DeepGP(Gaussian(), alpha=alpha)


class WithoutFloor(DeepGP):
    """The model without its refusal of small α, to measure what the floor keeps out."""

    def __post_init__(self):
        pass


def energy_rounding_error(params, x, y, alpha: float) -> float:
    """The energy's rounding error at ``alpha``: the largest residual of a quadratic fit to the energy at
    ``alpha·(1 + k/100)``, ``k = 0..6`` (the energy is smooth in α; what the fit leaves is rounding)."""
    alphas = alpha * (1.0 + 0.01 * np.arange(7))
    energies = np.array([float(WithoutFloor(Gaussian(), a).energy(params, x, y)) for a in alphas])
    return float(np.max(np.abs(energies - np.polyval(np.polyfit(alphas - alpha, energies, 2), alphas - alpha))))


@pytest.mark.exhaustive
@pytest.mark.slow
def test_the_alpha_floor_keeps_the_energy_free_of_cancellation():
    """Issue 27: at α ≤ 1e-6 the energy cancelled catastrophically (1.7e-2 off at α = 1e-12). At the floor
    its rounding error is below 1e-9, as at α = 1e-2 (an energy of −41.7); a hundred times below the floor it
    is more than ten times larger."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 2))
    y = jnp.asarray(np.sin(x[:, 0]) + 0.1 * rng.normal(size=30))
    params = DeepGP(Gaussian(), 1.0).init(x, hidden_dims=(2,), num_inducing=5)
    x = jnp.asarray(x)
    at_floor, usual = energy_rounding_error(params, x, y, ALPHA_FLOOR), energy_rounding_error(params, x, y, 1e-2)
    assert at_floor < 1e-9 and usual < 1e-9
    below = energy_rounding_error(params, x, y, ALPHA_FLOOR / 100)
    assert below > 10 * max(at_floor, usual)
