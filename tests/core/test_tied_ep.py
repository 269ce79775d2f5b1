"""Tied EP / QP site updates (src/pep_gp/core/models/tied_ep.py) against untied EP on a single site."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import bank
from pep_gp.core.bank import NaturalFactor
from pep_gp.core.likelihoods import Probit
from pep_gp.core.models.ep import EP, site_data
from pep_gp.core.models.tied_ep import TiedEPClassifier


def _random_state(model, seed):
    """Parameters with a random tied factor (so the cavity has a non-zero mean) and one row."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(12, 2))
    params = model.init(x, num_inducing=4, seed=seed)
    a = 0.5 * rng.normal(size=(4, 4))
    factor = NaturalFactor(jnp.asarray(rng.normal(size=(1, 4))), jnp.asarray((a @ a.T)[None]))
    return params._replace(factor=factor), x[:1]


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("projection", ["kl", "wasserstein"])
@pytest.mark.parametrize("seed, y", [(0, 1.0), (1, 0.0)])
def test_one_site_update_gives_the_untied_projection(projection, seed, y):
    """With N = 2 tied factors and ρ = 1, one row's update leaves ``q = cav·site``: along the row's
    direction ``τ = υᵀu`` its mean and variance are those of untied EP/QP on one site ``Φ(s τ/c)`` with the
    prior ``N(a, w)`` (the cavity's projection), ``c² = 1 + `` the FITC variance."""
    model = TiedEPClassifier(projection)
    params, x = _random_state(model, seed)
    labels = jnp.asarray([y])
    shared = model.step_shared(params, 2)
    stats = model.site_stats(params, shared, x, labels, jnp.ones(1, bool))
    updated, _, accepted = model.site_update(params, shared, stats, 2, 1.0)
    assert bool(accepted)
    rows = bank.row_projections(model.sparse_gp(params), shared.prior, x)
    q = bank.project(bank.gaussians(shared.prior, updated.factor, 1.0), rows.directions)
    cavity = bank.project(shared.cavity, rows.directions)
    a, w, c = float(cavity.mean[0, 0]), float(cavity.var[0, 0]), float(jnp.sqrt(1.0 + rows.fitc_var[0, 0]))
    assert abs(a) > 0.1  # a non-trivial cavity
    untied = EP(Probit(), projection).run(jnp.asarray([[w]]), site_data([0], [y], weight=1.0 / c, prior_mean=[a]))
    assert untied.converged
    assert float(q.mean[0, 0]) == pytest.approx(float(untied.posterior.mean[0]) + a, rel=1e-9, abs=1e-12)
    assert float(q.var[0, 0]) == pytest.approx(float(untied.posterior.cov[0, 0]), rel=1e-8)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("seed", [1])
def test_quantile_sites_keep_the_mean_and_shrink_the_variance(seed):
    """Zhang et al. 2020 Thm 2 / Cor. 2.1 in the tied model: from the same cavity, QP's refined sites have EP's
    tilted mean and a variance no larger along each row (to 1e-12 relative, the rule's accuracy,
    tests/core/test_projections.py); smaller for most rows, equal where the cavity along ``υ`` is so
    narrow (``w`` ~ 1e-14 here) that the tilted distribution is Gaussian to rounding. Site precisions are
    compared through these variances: where ``w`` is tiny ``ρ = 1/σ*² − 1/w`` carries the rule's error
    divided by ``w``, which changes the variance along ``υ`` only by that relative error."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(30, 2)), jnp.asarray(rng.integers(0, 2, 30), float)
    ep, qp = TiedEPClassifier("kl"), TiedEPClassifier("wasserstein")
    params, _ = _random_state(ep, seed)
    shared = jax.jit(ep.step_shared)(params, 30)
    _, ep_precision, ep_shift = jax.jit(ep.refined_sites)(params, shared, x, y)  # compiled once, not op by op
    directions, qp_precision, qp_shift = jax.jit(qp.refined_sites)(params, shared, x, y)
    cavity = bank.project(shared.cavity, directions[None])
    a, w = cavity.mean[:, 0], cavity.var[:, 0]

    def moments(precision, shift):
        var = 1.0 / (1.0 / w + precision)
        return var * (a / w + shift), var

    (ep_mean, ep_var), (qp_mean, qp_var) = moments(ep_precision, ep_shift), moments(qp_precision, qp_shift)
    np.testing.assert_allclose(qp_mean, ep_mean, rtol=1e-9, atol=1e-12)
    assert bool(jnp.all(ep_precision >= 0))
    assert bool(jnp.all(qp_var <= ep_var * (1 + 1e-12))) and float(jnp.mean(qp_var < ep_var * (1 - 1e-9))) > 0.5


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("projection", ["kl", "wasserstein"])
def test_a_row_far_from_every_inducing_input_leaves_the_other_sites_to_update(projection):
    """Issue 27: a row ~30 lengthscales from every inducing input gave a 0/0 site and the whole minibatch's
    site update was rejected. One row 50 lengthscales out now has a zero site: the minibatch's summed
    sites are those of the other rows (the row still counts, as a flat site), and the update is taken."""
    model = TiedEPClassifier(projection)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(10, 2)), jnp.asarray(rng.integers(0, 2, 10), float)
    params, _ = _random_state(model, 0)
    lengthscales = params.kernel.lengthscales.value[0]
    far = x.copy()
    far[4] = np.asarray(params.inducing).max(axis=0) + 50.0 * np.asarray(lengthscales)
    shared = model.step_shared(params, 100)
    with_far = model.site_stats(params, shared, jnp.asarray(far), y, jnp.ones(10, bool))
    without = model.site_stats(params, shared, jnp.asarray(far), y, jnp.arange(10) != 4)
    directions, precision, shift = model.refined_sites(params, shared, jnp.asarray(far), y)
    assert float(jnp.max(jnp.abs(directions[4]))) == 0.0 and float(precision[4]) == float(shift[4]) == 0.0
    assert bool(jnp.all(jnp.isfinite(precision))) and bool(jnp.all(precision[jnp.arange(10) != 4] > 0))
    np.testing.assert_array_equal(with_far.shift, without.shift)
    np.testing.assert_array_equal(with_far.precision, without.precision)
    assert float(with_far.count[0]) == float(without.count[0]) + 1 == 10
    updated, _, accepted = model.site_update(params, shared, with_far, 100, 0.5)
    assert bool(accepted) and bool(jnp.all(jnp.isfinite(updated.factor.precision)))
    assert float(jnp.max(jnp.abs(updated.factor.precision - params.factor.precision))) > 1e-3


def test_unknown_projection_is_refused():
    with pytest.raises(ValueError, match="projection must be one of"):
        TiedEPClassifier("hellinger")
