"""The multi-output collapsed PEP-α objective (independent outputs sharing Z, and the LMC) against dense numpy
oracles: the stacked exact GP at Z = X, the dense PEP-α formula of the stacked vector (Bui, Yan & Turner 2017,
§3.6, eq. 128) at M < N, the single-output collapsed bound, and central differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.linalg import block_diag

from pep_gp.core.models import collapsed_regression
from pep_gp.core.models.multi_output_regression import MultiOutputParams, MultiOutputRegression
from pep_gp.core.means import Linear
from pep_gp.core.parameters import unconstrained
from tests import oracles
from tests.core.test_no_batched_lapack import _assert_unbatched

N, D, P, Q, M = 12, 2, 3, 2, 5
LS = np.array([[0.8, 1.2], [1.5, 0.7], [1.1, 0.9]])
VAR = np.array([1.3, 0.6, 0.9])
NOISE = np.array([0.1, 0.2, 0.05])


# compiled once per model and shape (the tests share the fixture's shapes)
bound = jax.jit(lambda model, params, x, y: model.log_marginal_likelihood(params, x, y))
predict_f = jax.jit(lambda model, params, x, y, x_new, output_cov=False: model.predict_f(params, x, y, x_new, output_cov),
                    static_argnums=5)
predict_y = jax.jit(lambda model, params, x, y, x_new, output_cov=False: model.predict_y(params, x, y, x_new, output_cov),
                    static_argnums=5)
single_bound = jax.jit(collapsed_regression.log_marginal_likelihood, static_argnames=("alpha", "jitter"))
single_predict_f = jax.jit(collapsed_regression.predict_f, static_argnames=("alpha", "jitter", "full_cov"))


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D))
    y = np.column_stack([np.sin(x[:, 0]), x[:, 1], np.cos(x[:, 0] + x[:, 1])]) + 0.3 * rng.normal(size=(N, P))
    return x, y, rng.normal(size=(M, D)), rng.normal(size=(P, Q)), rng.normal(size=(4, D))


def _params(latents, inducing, mixing=None):
    kernel = oracles.se_bank(LS[:latents], VAR[:latents])
    noise = unconstrained(MultiOutputParams, noise_variance=jnp.asarray(NOISE))
    return MultiOutputParams(kernel, **noise, inducing=jnp.asarray(inducing),
                             mixing=None if mixing is None else jnp.asarray(mixing))


def _stacked(a, b, mixing):
    """``Σ_q (w_q w_qᵀ) ⊗ K_q(a, b)``: the LMC's covariance of the output-major stacked values."""
    return sum(np.kron(np.outer(mixing[:, q], mixing[:, q]), oracles.se_kernel(a, b, LS[q], VAR[q]))
               for q in range(mixing.shape[1]))


@pytest.mark.heavy  # the bound compiled twice (with and without priors): ~10 s on 2 loaded cores
def test_kernel_and_noise_priors_add_scipys_log_density_of_every_value(data):
    """A kernel with ``prior=`` (issue 65: the multi-output objective left it out) and the model's prior on the
    noises: the bound plus, for each of the ``P`` kernels, scipy's log density of each lengthscale and of the
    variance and the log-Jacobian ``log θ`` of the stored logarithm, and for each output's noise ``σ_p²`` its log
    density and the softplus's log-Jacobian ``log(1 − e^(−σ_p²))`` (:mod:`pep_gp.core.priors`' convention)."""
    from scipy import stats

    from pep_gp.core.kernels import SquaredExponential
    from pep_gp.core.priors import Gamma, HalfNormal, LogNormal

    x, y, z, _, _ = data
    plain = _params(P, z)
    kernel = SquaredExponential(LS, VAR, prior={"lengthscales": Gamma(2.0, 1.5), "variance": LogNormal(0.1, 0.5)})
    with_priors = plain._replace(kernel=kernel.bank(P, D))
    evidence = bound(MultiOutputRegression("independent", 0.5), plain, jnp.asarray(x), jnp.asarray(y))
    model = MultiOutputRegression("independent", 0.5, priors=(("raw_noise_variance", HalfNormal(0.3)),))
    ours = bound(model, with_priors, jnp.asarray(x), jnp.asarray(y))
    expected = (np.sum(stats.gamma(a=2.0, scale=1 / 1.5).logpdf(LS) + np.log(LS))
                + np.sum(stats.lognorm(s=0.5, scale=np.exp(0.1)).logpdf(VAR) + np.log(VAR))
                + np.sum(stats.halfnorm(scale=0.3).logpdf(NOISE) + np.log(-np.expm1(-NOISE))))
    assert float(ours - evidence) == pytest.approx(expected, rel=1e-12)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_lmc_bound_at_training_inputs_is_the_stacked_exact_evidence(data, alpha):
    """Z = X, no jitter: every α gives ``log N(vec y; 0, Σ_q (w_q w_qᵀ) ⊗ K_q + Σ ⊗ I)``."""
    x, y, _, mixing, _ = data
    model = MultiOutputRegression("lmc", alpha, jitter=0.0)
    value = float(bound(model, _params(Q, x, mixing), jnp.asarray(x), jnp.asarray(y)))
    cov = _stacked(x, x, mixing) + np.kron(np.diag(NOISE), np.eye(N))
    assert value == pytest.approx(oracles.gaussian_log_evidence(y.T.reshape(-1), cov), rel=1e-8)


@pytest.mark.heavy  # one bound and one predictive compiled: ~8 s on 2 cores
def test_each_outputs_linear_mean_is_the_stacked_exact_gp_with_that_mean(data):
    """Z = X, α = 1, each output its own ``m_p(x) = w_pᵀx + b_p``: the bound is ``log N(vec(y − m(X)); 0, K)`` and
    the predictive mean the exact GP's of ``y − m(X)`` plus ``m(x*)`` (Rasmussen & Williams 2006, §2.7)."""
    x, y, _, mixing, x_new = data
    weights, bias = np.array([[0.5, -1.0], [2.0, 0.3], [-0.7, 0.0]]), np.array([1.0, -2.0, 0.5])
    params = _params(Q, x, mixing)._replace(mean=Linear(weights=weights, bias=bias).stacked(P, D))
    model = MultiOutputRegression("lmc", 1.0, jitter=0.0)
    k = _stacked(x, x, mixing) + np.kron(np.diag(NOISE), np.eye(N))
    about = (y - x @ weights.T - bias).T.reshape(-1)
    value = float(bound(model, params, jnp.asarray(x), jnp.asarray(y)))
    assert value == pytest.approx(oracles.gaussian_log_evidence(about, k), rel=1e-8)
    mean, _ = predict_f(model, params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_new))
    exact = (_stacked(x_new, x, mixing) @ np.linalg.solve(k, about)).reshape(P, -1).T + x_new @ weights.T + bias
    np.testing.assert_allclose(mean, exact, rtol=1e-8, atol=1e-10)


@pytest.mark.heavy
def test_lmc_predictive_at_training_inputs_is_the_stacked_exact_gp(data):
    """Z = X, α = 1: the mean and the covariance across the outputs at each test row are the exact GP's."""
    x, y, _, mixing, x_new = data
    model = MultiOutputRegression("lmc", 1.0, jitter=0.0)
    mean, cov = predict_f(model, _params(Q, x, mixing), jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_new), True)
    k = _stacked(x, x, mixing) + np.kron(np.diag(NOISE), np.eye(N))
    cross = _stacked(x_new, x, mixing)  # [P·B, P·N]
    exact_mean = cross @ np.linalg.solve(k, y.T.reshape(-1))
    exact_cov = (_stacked(x_new, x_new, mixing) - cross @ np.linalg.solve(k, cross.T)).reshape(P, 4, P, 4)
    np.testing.assert_allclose(mean, exact_mean.reshape(P, 4).T, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cov, np.stack([exact_cov[:, b, :, b] for b in range(4)]), rtol=1e-8, atol=1e-10)
    _, var = predict_y(model, _params(Q, x, mixing), jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_new))
    np.testing.assert_allclose(var, np.diagonal(cov, axis1=1, axis2=2) + NOISE, rtol=1e-12)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_lmc_bound_is_the_dense_pep_formula_of_the_stacked_vector(data, alpha):
    """M < N: eq. 128 with ``K_uu = blockdiag(K_q,ZZ)``, ``K_uf`` of blocks ``W_pq K_q,ZX`` and each observation's
    own noise, dense."""
    x, y, z, mixing, _ = data
    kuu = block_diag(*(oracles.se_kernel(z, z, LS[q], VAR[q]) for q in range(Q)))
    kuf = np.vstack([np.hstack([mixing[p, q] * oracles.se_kernel(z, x, LS[q], VAR[q]) for p in range(P)])
                     for q in range(Q)])
    expected = oracles.pep_alpha_evidence(kuu, kuf, np.diag(_stacked(x, x, mixing)), y.T.reshape(-1),
                                          np.repeat(NOISE, N), alpha)
    model = MultiOutputRegression("lmc", alpha, jitter=0.0)
    value = float(bound(model, _params(Q, z, mixing), jnp.asarray(x), jnp.asarray(y)))
    assert value == pytest.approx(expected, rel=1e-10)


@pytest.mark.heavy
@pytest.mark.parametrize("shared", [pytest.param(False, marks=pytest.mark.heavy), True])  # separate kernels: 7 s
def test_independent_outputs_are_the_sum_of_single_output_bounds(data, shared):
    """The bound and the predictive of independent outputs are those of the outputs' own collapsed models."""
    x, y, z, _, x_new = data
    groups = [0] * P if shared else list(range(P))
    model = MultiOutputRegression("independent", 0.5)
    params = _params(1 if shared else P, z)
    value = float(bound(model, params, jnp.asarray(x), jnp.asarray(y)))
    singles = [oracles.se_bank(LS[g], VAR[g]) for g in groups]
    expected = sum(float(single_bound(k, jnp.asarray(z), NOISE[p], jnp.asarray(x), jnp.asarray(y[:, p]), alpha=0.5))
                   for p, k in enumerate(singles))
    assert value == pytest.approx(expected, rel=1e-10)
    mean, var = predict_f(model, params, jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_new))
    for p, k in enumerate(singles):
        one_mean, one_var = single_predict_f(k, jnp.asarray(z), NOISE[p], jnp.asarray(x), jnp.asarray(y[:, p]),
                                             jnp.asarray(x_new), alpha=0.5)
        np.testing.assert_allclose(mean[:, p], one_mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(var[:, p], one_var, rtol=1e-10, atol=1e-12)


@pytest.mark.heavy  # pairs with the α = 0.5 case of the dense formula's test, left to releases (this one checks it)
def test_padded_rows_masked_out_add_nothing_to_the_lmcs_dense_pep_formula(data):
    """The trainer's block: rows padded with ``x = 0``, ``y = 0`` and ``mask = False`` leave the LMC's data term
    the dense eq. 128 of the real rows, each row's ``P`` stacked observations masked together."""
    x, y, z, mixing, _ = data
    kuu = block_diag(*(oracles.se_kernel(z, z, LS[q], VAR[q]) for q in range(Q)))
    kuf = np.vstack([np.hstack([mixing[p, q] * oracles.se_kernel(z, x, LS[q], VAR[q]) for p in range(P)])
                     for q in range(Q)])
    expected = oracles.pep_alpha_evidence(kuu, kuf, np.diag(_stacked(x, x, mixing)), y.T.reshape(-1),
                                          np.repeat(NOISE, N), 0.5)
    padded = (np.vstack([x, np.zeros((4, D))]), np.vstack([y, np.zeros((4, P))]), np.arange(N + 4) < N)
    model = MultiOutputRegression("lmc", 0.5, jitter=0.0)
    value = jax.jit(model.data_energy)(_params(Q, z, mixing), (), *map(jnp.asarray, padded))
    assert float(value) == pytest.approx(expected, rel=1e-10)


@pytest.mark.heavy  # compiles both models' predictives: ~20 s of wall time at a load of 20 on two cores
def test_lmc_with_identity_mixing_is_independent_outputs(data):
    x, y, z, _, x_new = data
    lmc, independent = MultiOutputRegression("lmc", 0.5), MultiOutputRegression("independent", 0.5)
    args = jnp.asarray(x), jnp.asarray(y)
    assert float(bound(lmc, _params(P, z, np.eye(P)), *args)) == pytest.approx(
        float(bound(independent, _params(P, z), *args)), rel=1e-10)
    mean, cov = predict_y(lmc, _params(P, z, np.eye(P)), *args, jnp.asarray(x_new), True)
    independent_mean, independent_cov = predict_y(independent, _params(P, z), *args, jnp.asarray(x_new), True)
    np.testing.assert_allclose(mean, independent_mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(cov, independent_cov, rtol=1e-9, atol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy  # ~20 s each at a load of 20 on two cores (one compiled bound and gradient, 2·|θ| evaluations)
@pytest.mark.parametrize("outputs", ["lmc", "independent"])
def test_gradient_matches_central_differences(data, outputs):
    """Every leaf (lengthscales, variances, noises, Z, W) against central differences of the bound."""
    x, y, z, mixing, _ = data
    model = MultiOutputRegression(outputs, 0.5)
    params = _params(Q if outputs == "lmc" else P, z, mixing if outputs == "lmc" else None)
    flat, unravel = ravel_pytree(params)
    fn = lambda theta: model.log_marginal_likelihood(unravel(theta), jnp.asarray(x), jnp.asarray(y))
    oracles.assert_gradient_matches_central_differences(fn, jax.grad(fn), flat, eps=1e-5, rtol=1e-6)


def test_no_batched_lapack(data):
    x, y, z, mixing, x_new = data
    for outputs, params in (("lmc", _params(Q, z, mixing)), ("independent", _params(P, z))):
        model = MultiOutputRegression(outputs)
        _assert_unbatched(lambda p: model.log_marginal_likelihood(p, jnp.asarray(x), jnp.asarray(y)), params)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="outputs must be 'independent' or 'lmc'"):
        MultiOutputRegression("coregional")
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\]"):
        MultiOutputRegression("lmc", 1.5)
