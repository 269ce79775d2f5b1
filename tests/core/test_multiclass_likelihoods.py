"""Multi-class likelihoods are objects (issue 64, item 4): the model asks its likelihood for the factor counts,
the data term, the sites, the predictive and the label draws, never its name, so a new likelihood is one
class. Shown with two test-only ones: the label's probit ``Φ(f_y)``, whose row terms have closed forms (the default
tier), and the tempered softmax ``exp(f_y/T)/Σ_k exp(f_k/T)``, the softmax of ``f/T``
(:mod:`pep_gp.core.models.multiclass_softmax`), asked for everything the model computes and trained (heavy)."""

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from pep_gp.core.bank import Marginals
from pep_gp.core.models import multiclass_softmax as softmax
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.core.models.multiclass_likelihoods import Exact, Pairwise, Softmax, WholeRow, label_side


@dataclass(frozen=True)
class TemperedSoftmax(WholeRow):
    """``p(y | f) = softmax(f/T)_y``: under ``f^c ~ N(a^c, v^c)`` the softmax of ``f/T ~ N(a/T, v/T²)``."""

    temperature: float = 2.0
    name: ClassVar[str] = "tempered-softmax"

    def row_log_partition(self, model, mean, var, fitc, y):
        t = self.temperature
        return softmax.softmax_log_probs(mean / t, (var + fitc) / t**2, model.softmax_quadrature, y)

    def predict(self, model, mean, var):
        t = self.temperature
        return softmax.softmax_log_probs(mean / t, var / t**2, model.softmax_quadrature)

    def sample_labels(self, f, rng):
        return np.argmax(f / self.temperature + rng.gumbel(size=f.shape), axis=2)


def _problem(likelihood, classes=3, rows=24):
    x = jax.random.normal(jax.random.key(0), (rows, 2))
    y = jnp.argmax(x @ jnp.array([[1.0, -1.0, 0.2], [0.3, 0.8, -1.0]])[:, :classes], axis=1)
    model = MultiClassGP(classes, likelihood=likelihood)
    params = model.init(x, num_inducing=4, seed=0)
    return model, params, x, y, jnp.ones(rows, bool)


def _terms(model, params, x, y, mask):
    """The data term, the block's site statistics and the predictive of ``model`` at ``params``."""
    sizes = model.data_size(y)
    shared = model.step_shared(params, sizes)
    return (model.data_energy(params, shared, x, y, mask), model.site_stats(params, shared, x, y, mask),
            model.predict(params, x))


def test_names_are_the_likelihood_objects_and_are_refused_as_before():
    assert [MultiClassGP(3, likelihood=name).likelihood for name in ("pairwise", "exact", "softmax")] == [
        Pairwise(), Exact(), Softmax()]
    assert MultiClassGP(3).likelihood == Pairwise() and Pairwise() != Exact()
    with pytest.raises(ValueError, match=r"likelihood must be one of \('pairwise', 'exact', 'softmax'\); got 'logit'"):
        MultiClassGP(3, likelihood="logit")
    with pytest.raises(ValueError, match="likelihood = 'tempered-softmax' needs alpha = 1"):
        MultiClassGP(3, alpha=0.5, likelihood=TemperedSoftmax())
    with pytest.raises(ValueError, match="likelihood = 'softmax' takes no label_noise"):
        MultiClassGP(3, likelihood="softmax", label_noise=0.1)


@dataclass(frozen=True)
class LabelProbit(WholeRow):
    """``p(y | f) ∝ Φ(f_y)``: the label's latent value above zero, a closed form under the cavity
    ``f_y ~ N(a_y, w_y + s_y)``: ``log Z = log Φ(a_y/√(1 + w_y + s_y))`` (Rasmussen & Williams 2006, eq. 3.82)."""

    name: ClassVar[str] = "label-probit"

    def row_log_partition(self, model, mean, var, fitc, y):
        return jax.scipy.stats.norm.logcdf(label_side(mean, y)[:, 0] / jnp.sqrt(1.0 + label_side(var + fitc, y)[:, 0]))

    def predict(self, model, mean, var):
        return jax.nn.log_softmax(jax.scipy.stats.norm.logcdf(mean / jnp.sqrt(1.0 + var)), axis=1)


def test_a_likelihood_defined_here_is_what_the_model_asks_of_a_row():
    """Fast (a few rows, no fit): the model's factor counts, a row's ``log Z``, a block's data term and its
    sites under a cavity are the test-only likelihood's; the sites, moment-matched from its ``log Z``, are
    probit EP's in closed form on the label's class (Rasmussen & Williams 2006, eqs. 3.58–3.59, with
    ``ν = r(r + z)/(1 + w + s)``, ``r = N(z)/Φ(z)``) and zero on the others."""
    rng = np.random.default_rng(0)
    mean, var, fitc = (rng.normal(0.0, 2.0, (4, 3)), rng.uniform(0.2, 1.0, (4, 3)), rng.uniform(0.1, 0.5, (4, 3)))
    y, mask = np.array([0, 1, 2, 0]), np.array([True, True, False, True])
    model = MultiClassGP(3, likelihood=LabelProbit())

    @jax.jit  # one program: compiling each operation on its own took seconds
    def asked(mean, var, fitc, y, mask):
        marginals = Marginals(mean, var)
        return (model.factor_counts(jnp.asarray([2.0, 3.0, 5.0])), model.site_counts(y, mask),
                model.row_log_partition(mean, var, fitc, y), model.row_energy(marginals, fitc, y, mask),
                model.row_site_coefficients(marginals, fitc, y, mask))

    counts, site_counts, log_z, energy, (precision, shift) = asked(mean, var, fitc, y, mask)
    np.testing.assert_array_equal(counts, np.full(3, 10.0))  # a whole-row factor: n_c = N
    np.testing.assert_array_equal(site_counts, np.full(3, 3.0))
    rows = np.arange(4)
    a, total = mean[rows, y], 1.0 + var[rows, y] + fitc[rows, y]
    z = a / np.sqrt(total)
    np.testing.assert_allclose(log_z, scipy.stats.norm.logcdf(z), rtol=1e-12)
    np.testing.assert_allclose(energy, np.sum(scipy.stats.norm.logcdf(z)[mask]), rtol=1e-12)
    ratio = np.exp(scipy.stats.norm.logpdf(z) - scipy.stats.norm.logcdf(z))
    nu, slope = ratio * (ratio + z) / total, ratio / np.sqrt(total)
    expected_precision, expected_shift = np.zeros((4, 3)), np.zeros((4, 3))
    expected_precision[rows, y] = nu / (1.0 - nu * var[rows, y])
    expected_shift[rows, y] = (slope + nu * a) / (1.0 - nu * var[rows, y])
    expected_precision[~mask], expected_shift[~mask] = 0.0, 0.0
    np.testing.assert_allclose(precision, expected_precision, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(shift, expected_shift, rtol=1e-10, atol=1e-14)


@pytest.mark.exhaustive
@pytest.mark.heavy  # seconds of compiling: the README's tier keeps its time
def test_a_likelihood_defined_here_is_asked_for_everything_the_model_computes():
    """At ``T = 1`` the tempered softmax is the softmax: the data term, the site statistics and the predictive
    are the softmax's bit for bit (a model that chose by name would have taken it for another); at ``T = 2``
    its predictive is the softmax's at ``f/2``, and a row's ``log Z`` under a cavity differs from the softmax's."""
    softmax_model, params, x, y, mask = _problem("softmax")
    reference = _terms(softmax_model, params, x, y, mask)
    at_one = _terms(MultiClassGP(3, likelihood=TemperedSoftmax(1.0)), params, x, y, mask)
    for ours, theirs in zip(jax.tree_util.tree_leaves(at_one), jax.tree_util.tree_leaves(reference)):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    hot = MultiClassGP(3, likelihood=TemperedSoftmax(2.0))
    energy, stats, log_probs = _terms(hot, params, x, y, mask)
    mean, var = hot.predict_latent(params, x)
    np.testing.assert_allclose(log_probs, softmax.softmax_log_probs(mean / 2, var / 4), rtol=1e-12)
    rng = np.random.default_rng(0)
    cavity = (jnp.asarray(rng.normal(0.0, 2.0, (4, 3))), jnp.asarray(rng.uniform(0.2, 1.0, (4, 3))),
              jnp.asarray(rng.uniform(0.1, 0.5, (4, 3))), jnp.asarray([0, 1, 2, 0]))
    assert np.max(np.abs(hot.row_log_partition(*cavity) - softmax_model.row_log_partition(*cavity))) > 1e-2
    assert np.isfinite(float(energy))
    np.testing.assert_array_equal(np.asarray(stats.count), np.full(3, 24.0))  # a factor a row: n_{B,c} = rows


@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_a_likelihood_defined_here_trains_by_site_updates_and_draws_its_own_labels():
    """Three full-batch SEP updates of the tied factors under the tempered softmax are accepted and finite
    (its sites are the whole-row ones, moment-matched from its ``log Z``); its labels are drawn as it says."""
    model, params, x, y, mask = _problem(TemperedSoftmax(2.0))
    sizes = model.data_size(y)
    shared = model.step_shared(params, sizes)
    for _ in range(3):
        stats = model.site_stats(params, shared, x, y, mask)
        params, shared, accepted = model.site_update(params, shared, stats, sizes)
        assert bool(accepted)
    energy = model.global_energy(params, shared, sizes) + model.data_energy(params, shared, x, y, mask)
    assert np.isfinite(float(energy))
    f = np.random.default_rng(1).normal(size=(2, 5, 3))
    expected = np.argmax(f / 2.0 + np.random.default_rng(2).gumbel(size=f.shape), axis=2)
    np.testing.assert_array_equal(model.likelihood.sample_labels(f, np.random.default_rng(2)), expected)
    np.testing.assert_array_equal(MultiClassGP(3).likelihood.sample_labels(f, None), np.argmax(f, axis=2))
