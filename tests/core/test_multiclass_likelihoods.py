"""Multi-class likelihoods are objects (issue 64, item 4): the model asks its likelihood for the factor counts,
the data term, the sites, the predictive and the label draws, never its name, so a new likelihood is one
class. Shown with a test-only one, the tempered softmax ``exp(f_y/T)/Σ_k exp(f_k/T)``, the softmax of
``f/T`` (:mod:`pep_gp.core.models.multiclass_softmax`)."""

from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core.models import multiclass_softmax as softmax
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.core.models.multiclass_likelihoods import Exact, Pairwise, Softmax, WholeRow


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
