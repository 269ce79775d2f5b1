"""Sites from a likelihood's tilted moments (:func:`pep_gp.core.models.power_ep.tilted_sites`) and the start
they give the Student-t sparse GP (:meth:`PowerEPSparseGP.settled`, issue 63, item 5): a Gaussian
likelihood's exact sites recovered from its tilted moments, a gross outlier's site left without precision
(never a negative one), and the settled factor at the sites' fixed point."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core.likelihoods import StudentT
from pep_gp.core.models.power_ep import PowerEPSparseGP, tilted_sites

jax.config.update("jax_enable_x64", True)


class ClosedFormGaussian:
    """``N(y; f, σ²)`` with its tilted moments in closed form: ``∝ N(f; μ, v) N(y; f, σ²)^α`` is Gaussian of
    precision ``1/v + α/σ²`` (an oracle independent of the quadrature)."""

    def __init__(self, noise):
        self.noise = noise

    def tilted_moments(self, y, mean, var, alpha, params):
        precision = 1.0 / var + alpha / self.noise
        return None, (mean / var + alpha * y / self.noise) / precision, 1.0 / precision


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_a_gaussian_likelihood_gives_its_exact_sites(alpha):
    """Bui, Yan & Turner 2017, §3.1: row n's site is N(y_n; υ_nᵀu, σ² + αd_n) whatever the cavity."""
    rng = np.random.default_rng(0)
    y, mean = rng.normal(size=8), rng.normal(size=8)
    along, fitc = rng.uniform(0.01, 2.0, 8), rng.uniform(1e-6, 0.5, 8)
    precision, shift = tilted_sites(ClosedFormGaussian(0.3), {}, y, mean, along, fitc, alpha)
    np.testing.assert_allclose(precision, 1.0 / (0.3 + alpha * fitc), rtol=1e-10)
    np.testing.assert_allclose(shift, y / (0.3 + alpha * fitc), rtol=1e-10)


@pytest.mark.heavy
def test_a_gross_outliers_site_keeps_the_mean_and_no_negative_precision():
    """Jylänki, Vanhatalo & Vehtari 2011, §3.3: between the cavity and a far target the Student-t's tilted
    density is wider than the cavity; its site then carries the slope of log Z̃ only."""
    likelihood = StudentT()
    params = StudentT.init_params(0.1, 4.0)
    y, mean, along, fitc = jnp.array([0.05, 3.0]), jnp.zeros(2), jnp.full(2, 0.04), jnp.full(2, 0.01)
    precision, shift = jax.jit(tilted_sites, static_argnums=(0, 6))(likelihood, params, y, mean, along, fitc, 0.5)
    _, tilted_mean, tilted_var = jax.jit(likelihood.tilted_moments, static_argnums=3)(y, mean, along + fitc, 0.5, params)
    assert tilted_var[1] > 0.05 > tilted_var[0]  # the outlier widens its tilted density, the inlier narrows it
    assert precision[0] > 0.0 and precision[1] == 0.0
    np.testing.assert_allclose(shift[1], (tilted_mean[1] - mean[1]) / 0.05 / 0.5, rtol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_settled_factor_is_the_fixed_point_of_the_student_t_sites():
    rng = np.random.default_rng(1)
    x = jnp.asarray(np.sort(rng.uniform(-2, 2, 40))[:, None])
    y = jnp.sin(2.0 * x[:, 0]) + 0.1 * jnp.asarray(rng.normal(size=40))
    y = y.at[::10].add(4.0)
    model = PowerEPSparseGP(StudentT(), alpha=0.5)
    start = model.init(x, 8, likelihood_params=StudentT.init_params(0.1, 4.0))
    params = model.settled(start, x, y, 40)

    @jax.jit
    def sweep(params):
        shared = model.step_shared(params, 40)
        return model.site_update(params, shared, model.site_stats(params, shared, x, y, jnp.ones(40, bool)), 40)[0]

    again = sweep(params)
    np.testing.assert_allclose(again.factor_shift, params.factor_shift, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(again.factor_chol, params.factor_chol, rtol=1e-7, atol=1e-7)
    mean, _ = jax.jit(model.predict_f)(params, x)
    assert np.all(np.abs(mean - jnp.sin(2.0 * x[:, 0]))[::10] < 0.5)  # the outliers, 4 above, ignored
    twice = model.settled(start, x, y, 80)  # the same sites standing for 80 rows: the factor's natural parameters doubled
    np.testing.assert_allclose(twice.factor_shift, 2.0 * params.factor_shift, rtol=1e-12)
    np.testing.assert_allclose(twice.factor_chol, np.sqrt(2.0) * params.factor_chol, rtol=1e-12)
