"""The tied-factor Power-EP energy F = G + Σ L against independent oracles."""

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from pep_gp.core import bank
from pep_gp.core.likelihoods import Gaussian, Probit
from pep_gp.core.models.power_ep import PowerEPSparseGP, SparseGPParams
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.parameters import Positive
from tests import oracles

LS, VAR, NOISE = np.array([0.9, 1.4]), 1.3, 0.2


def _params(z, shift, precision, lik_params):
    return SparseGPParams(
        kernel=SquaredExponential(LS, VAR).bank(1, len(LS)),
        inducing=jnp.asarray(z),
        likelihood=lik_params,
        factor_shift=jnp.asarray(shift),
        factor_chol=jnp.linalg.cholesky(jnp.asarray(precision)),
    )


@pytest.fixture
def regression():
    rng = np.random.default_rng(7)
    x = rng.uniform(-2, 2, size=(40, 2))
    y = np.cos(x[:, 0]) + 0.4 * x[:, 1] + 0.2 * rng.normal(size=40)
    z = rng.uniform(-2, 2, size=(6, 2))
    return x, y, z


def _random_factor(rng, m, n):
    a = rng.normal(size=(m, m))
    return rng.normal(size=m) * n / 10, a @ a.T * n / 50 + np.eye(m)


def _at_the_fixed_point(model, params, x, y):
    """``(params, accepted)``: the tied factor moved by one full-batch, undamped site update, to the product of
    the rows' sites."""
    shared = model.step_shared(params, len(y))
    stats = model.site_stats(params, shared, x, y, jnp.ones(len(y), bool))
    updated, _, accepted = model.site_update(params, shared, stats, len(y), 1.0)
    return updated, accepted


def _dense_energy_terms(z, shift, precision, n, alpha):
    """Dense numpy G = φ(q) − φ(p) + (N/α)(φ(cav) − φ(q)) and the cavity (mean, cov) in u-space."""
    kuu = oracles.se_kernel(z, z, LS, VAR)
    kinv = np.linalg.inv(kuu)

    def phi(h, lam):
        return 0.5 * h @ np.linalg.solve(lam, h) - 0.5 * np.linalg.slogdet(lam)[1]

    s = 1 - alpha / n
    phi_p = -0.5 * np.linalg.slogdet(kinv)[1]
    phi_q, phi_c = phi(shift, kinv + precision), phi(s * shift, kinv + s * precision)
    cav_cov = np.linalg.inv(kinv + s * precision)
    return phi_q - phi_p + n / alpha * (phi_c - phi_q), cav_cov @ (s * shift), cav_cov


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.05])
def test_global_and_data_terms_match_dense_formulas(regression, alpha):
    x, y, z = regression
    shift, precision = _random_factor(np.random.default_rng(1), 6, 40)
    model = PowerEPSparseGP(Gaussian(), alpha=alpha, jitter=0.0)
    params = _params(z, shift, precision, Gaussian.init_params(NOISE))
    g_ref, cav_mean, cav_cov = _dense_energy_terms(z, shift, precision, 40, alpha)
    shared = model.step_shared(params, 40)
    assert float(model.global_energy(params, shared, 40)) == pytest.approx(g_ref, rel=1e-9)
    kuu, kuf = oracles.se_kernel(z, z, LS, VAR), oracles.se_kernel(z, x, LS, VAR)
    w = np.linalg.solve(kuu, kuf)  # K_uu⁻¹K_uf
    mu = w.T @ cav_mean
    v = VAR - np.sum(kuf * w, 0) + np.sum(w * (cav_cov @ w), 0)
    s2 = NOISE
    log_z = [np.log(integrate.quad(lambda f: stats.norm.pdf(f, m_, np.sqrt(v_)) * stats.norm.pdf(y_, f, np.sqrt(s2)) ** alpha,
                                   m_ - 12 * np.sqrt(v_), m_ + 12 * np.sqrt(v_), epsabs=0, epsrel=1e-12)[0])
             for m_, v_, y_ in zip(mu, v, y)]
    local = model.data_energy(params, shared, jnp.asarray(x), jnp.asarray(y), jnp.ones(40, bool))
    assert float(local) == pytest.approx(np.sum(log_z) / alpha, rel=1e-8)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.01])
def test_identical_sites_give_the_exact_evidence(alpha):
    """N copies of one Gaussian observation at one input: the tied factor is exact (Z = x, M = 1)."""
    n, y0, x0 = 7, 0.8, np.array([[0.3, -0.2]])
    model = PowerEPSparseGP(Gaussian(), alpha=alpha, jitter=0.0)
    params = _params(x0, [n * y0 / NOISE], [[n / NOISE]], Gaussian.init_params(NOISE))
    energy = model.energy(params, jnp.asarray(np.repeat(x0, n, 0)), jnp.full(n, y0))
    exact = oracles.gaussian_log_evidence(np.full(n, y0), VAR * np.ones((n, n)) + NOISE * np.eye(n))
    assert float(energy) == pytest.approx(exact, rel=1e-10)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_alpha_zero_at_the_vfe_optimum_is_the_titsias_bound(regression):
    x, y, z = regression
    shift, precision = oracles.titsias_optimal_q(x, y, z, LS, VAR, NOISE)
    params = _params(z, shift, precision, Gaussian.init_params(NOISE))
    bound = oracles.titsias_bound(x, y, z, LS, VAR, NOISE)
    for alpha, rel in [(0.0, 1e-8), (1e-6, 1e-4)]:
        energy = PowerEPSparseGP(Gaussian(), alpha=alpha, jitter=0.0).energy(params, jnp.asarray(x), jnp.asarray(y))
        assert float(energy) == pytest.approx(bound, rel=rel)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_probit_alpha_zero_is_the_uncollapsed_vfe_bound(regression):
    """α = 0 equals −KL(q‖p) + Σ E_q[log Φ] (Bui, Yan & Turner 2017 eqs. 145–146), computed densely with quadrature."""
    x, y, z = regression
    labels = (y > 0.5).astype(float)
    shift, precision = _random_factor(np.random.default_rng(2), 6, 40)
    params = _params(z, shift, precision, {})
    kuu, kuf = oracles.se_kernel(z, z, LS, VAR), oracles.se_kernel(z, x, LS, VAR)
    v_q = np.linalg.inv(np.linalg.inv(kuu) + precision)
    m_q = v_q @ shift
    kl = 0.5 * (np.trace(np.linalg.solve(kuu, v_q)) + m_q @ np.linalg.solve(kuu, m_q) - 6
                + np.linalg.slogdet(kuu)[1] - np.linalg.slogdet(v_q)[1])
    w = np.linalg.solve(kuu, kuf)
    mu, var = w.T @ m_q, VAR - np.sum(kuf * w, 0) + np.sum(w * (v_q @ w), 0)
    ell = sum(integrate.quad(lambda f: stats.norm.pdf(f, m_, np.sqrt(v_)) * stats.norm.logcdf((2 * y_ - 1) * f),
                             m_ - 12 * np.sqrt(v_), m_ + 12 * np.sqrt(v_), epsrel=1e-12)[0]
              for m_, v_, y_ in zip(mu, var, labels))
    model = PowerEPSparseGP(Probit(), alpha=0.0, jitter=0.0)
    assert float(model.energy(params, jnp.asarray(x), jnp.asarray(labels))) == pytest.approx(ell - kl, rel=1e-8)
    gaps = [float(PowerEPSparseGP(Probit(), alpha=a, jitter=0.0).energy(params, jnp.asarray(x), jnp.asarray(labels)))
            - (ell - kl) for a in (1e-3, 1e-4)]
    assert gaps[0] / gaps[1] == pytest.approx(10.0, rel=0.05)  # the gap closes as O(α)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("likelihood", [Gaussian(), pytest.param(Probit(), marks=pytest.mark.exhaustive)],
                         ids=["gaussian", "probit"])  # the padding and the chunks are the same code for each
def test_padding_and_chunking_do_not_change_the_data_term(regression, likelihood):
    x, y, z = regression
    y = y if isinstance(likelihood, Gaussian) else (y > 0.5).astype(float)
    model = PowerEPSparseGP(likelihood, alpha=0.5)
    params = model.init(x, 6, likelihood_params=Gaussian.init_params(NOISE) if isinstance(likelihood, Gaussian) else None)
    data_term = jax.jit(jax.value_and_grad(lambda p, *rows: model.data_energy(p, model.step_shared(p, 40), *rows)))
    whole_v, whole_g = data_term(params, jnp.asarray(x), jnp.asarray(y), jnp.ones(40, bool))
    pad = 24  # chunks of 32 rows: 32 + 8 real rows, the second chunk padded with garbage
    xp = np.concatenate([x, np.full((pad, 2), 1e3)])
    yp = np.concatenate([y, np.full(pad, 7.0)])
    mask = np.arange(64) < 40
    parts = [data_term(params, jnp.asarray(xp[s]), jnp.asarray(yp[s]), jnp.asarray(mask[s]))
             for s in (slice(0, 32), slice(32, 64))]
    assert float(parts[0][0] + parts[1][0]) == pytest.approx(float(whole_v), rel=1e-12)
    summed = jax.tree_util.tree_map(lambda a, b: a + b, parts[0][1], parts[1][1])
    for a, b in zip(jax.tree_util.tree_leaves(summed), jax.tree_util.tree_leaves(whole_g)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("likelihood, alpha", [(Gaussian(), 1.0), (Gaussian(), 0.5), (Probit(), 0.5), (Probit(), 1.0), (Probit(), 0.0)])
def test_energy_gradient_matches_central_differences(regression, likelihood, alpha):
    x, y, z = regression
    y = y if isinstance(likelihood, Gaussian) else (y > 0.5).astype(float)
    model = PowerEPSparseGP(likelihood, alpha=alpha)
    lik_params = Gaussian.init_params(NOISE) if isinstance(likelihood, Gaussian) else None
    params = model.init(x, 6, likelihood_params=lik_params)
    shift, precision = _random_factor(np.random.default_rng(3), 6, 40)
    params = params._replace(factor_shift=jnp.asarray(shift), factor_chol=jnp.linalg.cholesky(jnp.asarray(precision)))
    flat, unravel = ravel_pytree(params)
    energy = lambda v: model.energy(unravel(v), jnp.asarray(x), jnp.asarray(y))
    oracles.assert_gradient_matches_central_differences(energy, jax.grad(energy), flat, eps=1e-6)


@pytest.mark.heavy
def test_predictions_match_dense_posterior(regression):
    x, _, z = regression
    shift, precision = _random_factor(np.random.default_rng(4), 6, 40)
    model = PowerEPSparseGP(Probit(), alpha=0.5, jitter=0.0)
    params = _params(z, shift, precision, {})
    kuu, kus = oracles.se_kernel(z, z, LS, VAR), oracles.se_kernel(z, x, LS, VAR)
    v_q = np.linalg.inv(np.linalg.inv(kuu) + precision)
    w = np.linalg.solve(kuu, kus)
    mean, var = model.predict_f(params, jnp.asarray(x))
    np.testing.assert_allclose(mean, w.T @ v_q @ shift, rtol=1e-8)
    np.testing.assert_allclose(var, VAR - np.sum(kus * w, 0) + np.sum(w * (v_q @ w), 0), rtol=1e-8)
    m_u, v_u = model.posterior_moments(params)
    np.testing.assert_allclose(v_u, v_q, rtol=1e-8)
    np.testing.assert_allclose(model.predict_y(params, jnp.asarray(x)), stats.norm.cdf(np.asarray(mean) / np.sqrt(1 + np.asarray(var))), rtol=1e-10)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_one_shared_lengthscale_is_the_ard_kernel_with_equal_lengthscales(regression):
    """``ard=False`` starts from the geometric mean of the lengthscales and stores one; the energy, its
    gradient (the sum of the ARD gradients in log ℓ) and the predictions are the ARD model's with that
    lengthscale in every input."""
    x, y, z = regression
    y = (y > 0.5).astype(float)
    model = PowerEPSparseGP(Probit(), alpha=0.5)
    mean_ls = float(np.sqrt(LS[0] * LS[1]))
    shared = model.init(x, 6, inducing=z, kernel=SquaredExponential(mean_ls, VAR), ard=False)
    assert shared.kernel.lengthscales.raw.shape == (1, 1)
    np.testing.assert_allclose(shared.kernel.lengthscales.value, [[mean_ls]], rtol=1e-14)
    shift, precision = _random_factor(np.random.default_rng(5), 6, 40)
    shared = shared._replace(factor_shift=jnp.asarray(shift), factor_chol=jnp.linalg.cholesky(jnp.asarray(precision)))
    raw = shared.kernel.lengthscales.raw
    ard = shared._replace(kernel=shared.kernel.replace(lengthscales=Positive(jnp.full((1, 2), raw[0, 0]))))
    energy_and_grad = jax.jit(jax.value_and_grad(lambda p: model.energy(p, jnp.asarray(x), jnp.asarray(y))))
    (value, grad), (ard_value, ard_grad) = energy_and_grad(shared), energy_and_grad(ard)
    assert float(value) == pytest.approx(float(ard_value), rel=1e-13)
    assert float(grad.kernel.lengthscales.raw[0, 0]) == pytest.approx(float(jnp.sum(ard_grad.kernel.lengthscales.raw)),
                                                                        rel=1e-10)
    predict = jax.jit(lambda p: model.predict_f(p, jnp.asarray(x)))
    for a, b in zip(predict(shared), predict(ard)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_alpha_outside_unit_interval_is_rejected():
    with pytest.raises(ValueError, match=r"alpha must lie in \[0, 1\]; got -0.1"):
        PowerEPSparseGP(Probit(), alpha=-0.1)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_exact_gaussian_site_updates_give_the_collapsed_posterior(regression, alpha):
    """A full-batch, undamped site update sets the tied factor to the product of the exact Power-EP sites
    ``N(y_n; υ_nᵀu, σ² + αd_n)`` (Bui, Yan & Turner 2017, §3.1): ``q(u)`` is then the collapsed PEP-α
    posterior, and the predictions equal the collapsed model's at the same hyper-parameters."""
    from pep_gp.core.models.collapsed_regression import predict_f

    x, y, z = regression
    rng = np.random.default_rng(3)
    model = PowerEPSparseGP(Gaussian(), alpha=alpha, jitter=0.0, site_updates=True)
    shift, precision = _random_factor(rng, 6, 40)
    params = _params(z, shift, precision, Gaussian.init_params(NOISE))
    x_new = rng.uniform(-2, 2, size=(9, 2))
    with jax.enable_x64(True):
        updated, accepted = _at_the_fixed_point(model, params, jnp.asarray(x), jnp.asarray(y))
        mean, var = model.predict_f(updated, jnp.asarray(x_new))
        kernel = SquaredExponential(LS, VAR).bank(1, len(LS))
        expected = predict_f(kernel, jnp.asarray(z), NOISE, jnp.asarray(x), jnp.asarray(y), jnp.asarray(x_new),
                             alpha, 0.0)
    assert bool(accepted)
    np.testing.assert_allclose(mean, expected[0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(var, expected[1], rtol=1e-6, atol=1e-9)




@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_exact_site_energy_is_the_collapsed_bound_with_its_gradient(regression, alpha):
    """With exact Gaussian sites each row's cavity removes its own site: at the sites' fixed point the energy is
    the collapsed PEP-α bound (Bui, Yan & Turner 2017, §3.6) and its gradient with the factor held (what the
    trainer's steps and L-BFGS use) is the bound's gradient in the kernel, the noise and the inducing inputs,
    since EP's energy is stationary in its sites there."""
    from pep_gp.core.models.collapsed_regression import log_marginal_likelihood

    x, y, z = regression
    model = PowerEPSparseGP(Gaussian(), alpha=alpha, jitter=0.0, site_updates=True)
    shift, precision = _random_factor(np.random.default_rng(5), 6, 40)
    with jax.enable_x64(True):
        x, y = jnp.asarray(x), jnp.asarray(y)
        params, accepted = _at_the_fixed_point(model, _params(z, shift, precision, Gaussian.init_params(NOISE)), x, y)
        value, grad = jax.value_and_grad(lambda p: model.energy(p, x, y))(params)
        bound, expected = jax.value_and_grad(lambda p: log_marginal_likelihood(
            p.kernel, p.inducing, Gaussian().noise_variance(p.likelihood), x, y, alpha, 0.0))(params)
    assert bool(accepted) and float(value) == pytest.approx(float(bound), rel=1e-10)
    for leaf in ("kernel", "inducing", "likelihood"):
        got, want = ravel_pytree(getattr(grad, leaf))[0], ravel_pytree(getattr(expected, leaf))[0]
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8 * float(jnp.max(jnp.abs(want))))


def test_a_row_whose_site_the_factor_does_not_hold_keeps_a_proper_cavity(regression):
    """Away from the fixed point (a damped minibatch update) ``q`` may hold less of a row's site than the row
    removes: its cavity is then cut to ``q``'s own precision along the row's direction, so the energy and its
    gradient stay finite where the uncut cavity's variance would be negative."""
    x, y, z = regression
    model = PowerEPSparseGP(Gaussian(), alpha=1.0, jitter=0.0, site_updates=True)
    params = _params(z, np.zeros(6), 1e-3 * np.eye(6), Gaussian.init_params(1e-4))  # a near-flat factor, tiny noise
    with jax.enable_x64(True):
        x, y = jnp.asarray(x), jnp.asarray(y)
        shared = model.step_shared(params, 40)
        rows = bank.row_projections(model.sparse_gp(params), shared.prior, x)
        along = bank.project(shared.cavity, rows.directions).var[:, 0]
        site_precision = 1.0 / (1e-4 + rows.fitc_var[0])
        assert np.sum(np.asarray(along * site_precision) > 1.0) > 5  # rows whose site outweighs q along it
        value, grad = jax.value_and_grad(lambda p: model.energy(p, x, y))(params)
    assert np.isfinite(float(value)) and np.all(np.isfinite(ravel_pytree(grad)[0]))
