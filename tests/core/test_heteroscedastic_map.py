"""Priors and a mean function in the heteroscedastic sparse GP (issue 65): the MAP term is scipy's log density of
every stored value (both GPs' kernel values and ``σ₀²``, with the log-Jacobian of their bijections), and ``f``'s
mean enters the likelihood as ``f = m(x) + (f − m)``: the energy with a mean is the zero-mean energy of ``y − m(x)``,
the predictive mean of ``f`` is shifted by ``m(x*)`` and every variance (``f``'s, ``g``'s) is unchanged."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from pep_gp.core import float64, means
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.models.heteroscedastic import HeteroscedasticSparseGP
from pep_gp.core.priors import Gamma, HalfNormal, LogNormal

NOISE0, LS, VAR = 0.2, 0.7, 1.3


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(5)
    x = rng.uniform(-2.0, 2.0, (30, 1))
    return x, np.sin(2.0 * x[:, 0]) + 0.8 * x[:, 0] + (0.1 + 0.2 * np.abs(x[:, 0])) * rng.normal(size=30)


@pytest.mark.heavy  # two energies, op by op through the quadrature: 10-25 s on 2 shared cores
def test_priors_add_scipys_log_density_of_every_stored_value(rows):
    """Energy with a kernel prior (on both GPs' values) and a ``σ₀²`` prior less the energy without: scipy's
    densities of each value plus ``log θ`` (a kernel's stored logarithm) and ``log σ(r)`` (``σ₀²``'s softplus)."""
    with float64():
        x, y = map(jnp.asarray, rows)
        kernel = SquaredExponential(LS, VAR, prior={"lengthscales": Gamma(2.0, 1.5), "variance": LogNormal(0.1, 0.5)})
        plain = HeteroscedasticSparseGP(alpha=0.5)
        priors = (("raw_noise_variance", HalfNormal(0.3)),)
        params = plain.init(x, 5, kernel=SquaredExponential(LS, VAR), noise_variance=NOISE0)
        with_priors = params._replace(kernel=kernel.bank(2, 1))
        difference = float(HeteroscedasticSparseGP(alpha=0.5, priors=priors).energy(with_priors, x, y)
                           - plain.energy(params, x, y))
        raw = float(params.likelihood["raw_noise_variance"])
    expected = (2 * (stats.gamma(a=2.0, scale=1 / 1.5).logpdf(LS) + np.log(LS)
                     + stats.lognorm(s=0.5, scale=np.exp(0.1)).logpdf(VAR) + np.log(VAR))
                + stats.halfnorm(scale=0.3).logpdf(NOISE0) + np.log(stats.logistic.cdf(raw)))
    assert difference == pytest.approx(expected, abs=1e-10)


@pytest.mark.heavy  # two energies and the predictives: 2-11 s on 2 shared cores
@pytest.mark.parametrize("mean", [means.Constant(0.7), means.Linear(weights=[1.5], bias=-0.4)], ids=lambda m: m.name)
def test_a_mean_is_the_zero_mean_model_of_the_shifted_targets(rows, mean):
    with float64():
        x, y = map(jnp.asarray, rows)
        model = HeteroscedasticSparseGP(alpha=0.5)
        params = model.init(x, 5, noise_variance=NOISE0)
        with_mean = params._replace(mean=mean.build(1))
        shift = with_mean.mean(x)
        assert float(model.energy(with_mean, x, y)) == pytest.approx(float(model.energy(params, x, y - shift)),
                                                                      rel=1e-12)
        new = jnp.linspace(-5.0, 5.0, 7)[:, None]
        (mean_fg, var_fg), (plain_fg, plain_var) = model.predict_latents(with_mean, new), model.predict_latents(params, new)
        np.testing.assert_allclose(mean_fg[:, 0], plain_fg[:, 0] + with_mean.mean(new), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(mean_fg[:, 1], plain_fg[:, 1])
        np.testing.assert_array_equal(var_fg, plain_var)
        f_mean, f_cov = model.predict_f(with_mean, new, full_cov=True)
        np.testing.assert_allclose(f_mean, mean_fg[:, 0], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(f_cov, model.predict_f(params, new, full_cov=True)[1])
        y_mean, y_var = model.predict_y(with_mean, new)
        plain_y, plain_y_var = model.predict_y(params, new)
        np.testing.assert_allclose(y_mean, plain_y + with_mean.mean(new), rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(y_var, plain_y_var)
