"""Priors and mean functions of the EP models (issue 65): the tied EP/QP classifier, multi-class EP with untied
factors and the exact GP's EP. EP's site updates do not change with a prior on the hyper-parameters, and the
energy they are fitted by gains scipy's log density of the stored values; a mean shifts the latent's prior, so
a site update with a mean is untied EP's with the cavity moved by it, and predictions far from the data revert
to it."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from pep_gp.core import bank, float64, means
from pep_gp.core.bank import NaturalFactor
from pep_gp.core.kernels import SquaredExponential
from pep_gp.core.likelihoods import Probit
from pep_gp.core.models import multiclass_ep
from pep_gp.core.models.ep import EP, site_data
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.core.models.tied_ep import TiedEPClassifier
from pep_gp.core.priors import Gamma
from pep_gp.pipeline.training import exact_ep

PRIOR = Gamma(2.0, 1.5)


def scipy_term(raw) -> float:
    """``Σ log p(e^r) + r`` of :data:`PRIOR` over the stored logarithms ``raw``."""
    raw = np.asarray(raw)
    return float(np.sum(stats.gamma(a=2.0, scale=1 / 1.5).logpdf(np.exp(raw)) + raw))


def without_priors(kernel):
    """``kernel``'s values under the structure of a kernel without priors."""
    groups, dims = kernel.lengthscales.raw.shape
    plain = SquaredExponential().bank(groups, dims, np.ones(dims))
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(plain), jax.tree_util.tree_leaves(kernel))


def tied_state(seed: int, mean=None, kernel=None):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(12, 2))
    model = TiedEPClassifier()
    params = model.init(x, num_inducing=4, seed=seed, mean=mean, kernel=kernel)
    a = 0.5 * rng.normal(size=(4, 4))
    factor = NaturalFactor(jnp.asarray(rng.normal(size=(1, 4))), jnp.asarray((a @ a.T)[None]))
    return model, params._replace(factor=factor), jnp.asarray(x), jnp.asarray((x[:, 0] > 0).astype(float))


@pytest.mark.parametrize("y", [1.0, 0.0])
def test_a_tied_site_update_with_a_mean_is_untied_ep_with_the_cavity_moved_by_it(y):
    """N = 2 tied factors, ρ = 1: along the row's direction ``q`` (of ``g = f − m``) is untied EP's posterior on
    one site ``Φ(s τ/c)`` whose prior is the cavity's projection moved by ``m(x) = 0.8``, less ``m(x)``."""
    with float64():
        model, params, x, _ = tied_state(0, mean=means.Constant(0.8))
        x = x[:1]
        shared = model.step_shared(params, 2)
        stats_ = model.site_stats(params, shared, x, jnp.asarray([y]), jnp.ones(1, bool))
        updated, _, accepted = model.site_update(params, shared, stats_, 2, 1.0)
        rows = bank.row_projections(model.sparse_gp(params), shared.prior, x)
        q = bank.project(bank.gaussians(shared.prior, updated.factor, 1.0), rows.directions)
        cavity = bank.project(shared.cavity, rows.directions)
        a, w = float(cavity.mean[0, 0]), float(cavity.var[0, 0])
        c = float(jnp.sqrt(1.0 + rows.fitc_var[0, 0]))
        untied = EP(Probit()).run(jnp.asarray([[w]]), site_data([0], [y], weight=1.0 / c, prior_mean=[a + 0.8]))
    assert bool(accepted) and untied.converged
    assert float(q.mean[0, 0]) == pytest.approx(float(untied.posterior.mean[0]) + a, rel=1e-9, abs=1e-12)
    assert float(q.var[0, 0]) == pytest.approx(float(untied.posterior.cov[0, 0]), rel=1e-8)


@pytest.mark.heavy  # op by op: ~4 s
def test_the_tied_energy_with_a_mean_or_a_prior_is_the_zero_means_with_the_latent_shifted_or_scipys_term():
    with float64():
        model, params, x, y = tied_state(1)
        shifted = params._replace(mean=means.Constant(-0.6).build(2))
        mask = jnp.ones(x.shape[0], bool)
        shared = model.step_shared(params, 12)
        marginals = bank.latent_marginals(model.sparse_gp(params), shared.prior, shared.cavity, x)
        oracle = model.global_energy(params, shared, 12) + jnp.sum(
            Probit().log_tilted({}, y, marginals.mean[:, 0] - 0.6, marginals.var[:, 0], 1.0))
        energy = model.global_energy(shifted, shared, 12) + model.data_energy(shifted, shared, x, y, mask)
        assert float(energy) == pytest.approx(float(oracle), abs=1e-10)
        far_mean, _ = model.predict_f(shifted, x + 40.0)
        np.testing.assert_allclose(far_mean, -0.6, atol=1e-8)
        _, with_prior, _, _ = tied_state(1, kernel=SquaredExponential(prior={"lengthscales": PRIOR}))
        plain = with_prior._replace(kernel=without_priors(with_prior.kernel))
        difference = model.global_energy(with_prior, shared, 12) - model.global_energy(plain, shared, 12)
    assert float(difference) == pytest.approx(scipy_term(with_prior.kernel.lengthscales.raw), abs=1e-10)


@partial(jax.jit, static_argnums=0)
def untied_sweep(model, params, state, x, y):
    """One undamped untied-EP update of every row, then ``log Z_q``: ``(params, sites, log Z_q)``."""
    mask = jnp.ones(y.shape[0], bool)
    params, state, _ = multiclass_ep.update(model, params, state, x, y, mask, 1.0)
    return params, state, multiclass_ep.log_evidence(model, params, state, x, y, mask)


@pytest.mark.heavy  # compiles a sweep of untied EP: ~10 s
def test_untied_multiclass_ep_with_a_common_mean_or_a_prior_is_the_zero_means_or_adds_scipys_term():
    """A constant mean common to every class leaves the pairwise factors, hence the sites (of ``g``) and
    ``log Z_q``, as they are with the zero mean (to 1e-10), and moves the latent means by it; a lengthscale prior
    adds scipy's term to ``log Z_q``."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(24, 2))
    y = np.argmax(x @ np.ones((2, 3)) + 0.5 * rng.normal(size=(24, 3)), 1)
    with float64():
        model = MultiClassGP(3)
        x, y = jnp.asarray(x), jnp.asarray(y, jnp.int32)
        zero = model.init(x, 4, kernel=SquaredExponential(prior={"lengthscales": PRIOR}))
        common = zero._replace(mean=means.Constant(1.1).stacked(3, 2))
        start = multiclass_ep.init_sites(24, zero)
        params0, sites0, evidence0 = untied_sweep(model, zero, start, x, y)
        params1, sites1, evidence1 = untied_sweep(model, common, start, x, y)
        for got, want in zip(jax.tree_util.tree_leaves((params1.factor, sites1)),
                             jax.tree_util.tree_leaves((params0.factor, sites0)), strict=True):
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
        assert float(evidence1) == pytest.approx(float(evidence0), abs=1e-10)
        np.testing.assert_allclose(model.predict_latent(params1, x)[0], model.predict_latent(params0, x)[0] + 1.1,
                                   rtol=0, atol=1e-12)
        plain = params0._replace(kernel=without_priors(params0.kernel))
        difference = multiclass_ep.log_evidence(model, params0, sites0, x, y) - multiclass_ep.log_evidence(
            model, plain, sites0, x, y)
    assert float(difference) == pytest.approx(scipy_term(params0.kernel.lengthscales.raw), abs=1e-10)


@pytest.mark.heavy  # three fits of the exact GP: ~10 s
def test_the_exact_gps_objective_with_a_mean_is_ep_with_the_mean_in_the_sites_offsets_and_a_prior_adds_scipys():
    """The exact GP's fit with a ``Constant`` mean has the log evidence of EP run on ``site_data(prior_mean=c)`` at
    the fitted ``c`` and kernel (to EP's tolerance), and far from the data predicts ``c``; with its kernel's values
    fixed (no step moves them) a lengthscale prior adds scipy's term to the objective."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 2))
    y = (x[:, 0] + 0.3 * rng.normal(size=16) > 0.4).astype(float)
    ep = EP(Probit(), damping=0.5, schedule="parallel")
    with float64():
        data = site_data(np.arange(16), y)
        fitted = exact_ep.fit(ep, x, data, max_iter=2, mean=means.Constant(0.5), tol=1e-10)
        constant = float(fitted.mean.constant)
        assert constant != 0.5  # the mean trained
        cov = exact_ep._prior_cov(fitted.kernel, jnp.asarray(x))
        shifted = site_data(np.arange(16), y, prior_mean=np.full(16, constant))
        reference = ep.run(cov, shifted, tol=1e-12)
        assert float(ep.log_evidence(cov, shifted, reference.sites)) == pytest.approx(fitted.log_evidence, abs=1e-8)
        mean, _ = exact_ep.predict(fitted.kernel, fitted.sites, jnp.asarray(x), data, jnp.asarray(x + 40.0),
                                   mean=fitted.mean)
        np.testing.assert_allclose(mean, constant, atol=1e-8)
        fixed = {"lengthscales": 0.7, "variance": 1.3, "fixed": ("lengthscales", "variance")}
        plain = exact_ep.fit(ep, x, data, kernel=SquaredExponential(**fixed))
        held = exact_ep.fit(ep, x, data, kernel=SquaredExponential(**fixed, prior={"lengthscales": PRIOR}))
    assert held.log_evidence - plain.log_evidence == pytest.approx(np.log(0.7) + stats.gamma(
        a=2.0, scale=1 / 1.5).logpdf(0.7), abs=1e-10)
