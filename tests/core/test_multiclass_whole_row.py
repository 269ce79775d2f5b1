"""The multi-class model's whole-row likelihoods (``likelihood="exact"`` and ``"softmax"``): ``log Z`` against
Monte Carlo of eq. (1), their sites against finite differences, and, on a problem with no inputs, the class
frequencies and the evidence that the pairwise product of eq. (6) misses. (The softmax's integrals against
Monte Carlo: ``tests/core/test_multiclass_softmax.py``.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pydantic import ValidationError

from pep_gp import MultiClassEPClassifier
from pep_gp.core import bank
from pep_gp.core.kernels import Constant
from pep_gp.core.models import multiclass_sites as sites
from pep_gp.core.models.multiclass import MultiClassGP
from pep_gp.pipeline.models.multiclass import MultiClassSettings


def _cavity(rng, rows=3, classes=4):
    """Cavity projections ``a``, ``w`` and FITC variances ``s`` of ``rows`` rows, and their labels."""
    return (rng.normal(size=(rows, classes)), rng.uniform(0.2, 1.5, (rows, classes)),
            rng.uniform(0.1, 1.0, (rows, classes)), rng.integers(0, classes, rows))


@pytest.mark.heavy
def test_exact_log_partition_is_the_probability_that_the_label_s_latent_is_the_largest():
    """``Z_i = P(argmax_c (t^c + ε^c) = y_i)`` for ``t^c ~ N(a^c, w^c)``, ``ε^c ~ N(0, s^c)`` (eq. 1 under the
    cavity): within four Monte Carlo standard errors of 400,000 draws per row."""
    rng = np.random.default_rng(0)
    mean, var, fitc, y = _cavity(rng)
    log_z = np.asarray(sites.exact_log_partition(*map(jnp.asarray, (mean, var, fitc, y))))
    draws = mean[:, None] + np.sqrt(var + fitc)[:, None] * rng.normal(size=(3, 400_000, 4))
    hits = np.argmax(draws, axis=-1) == y[:, None]
    frequency, standard_error = hits.mean(1), hits.std(1) / np.sqrt(hits.shape[1])
    assert np.all(np.abs(np.exp(log_z) - frequency) < 4 * standard_error)


@pytest.mark.heavy
@pytest.mark.parametrize("likelihood, rel", [("exact", 1e-5), ("softmax", 1e-3)])
def test_whole_row_sites_are_the_tilted_moments_of_each_class_from_derivatives_of_log_z(likelihood, rel):
    """``C¹ = ν/(1 − νw)``, ``C² = (g + νa)/(1 − νw)`` with ``g``, ``ν`` from central differences of the
    model's :meth:`~pep_gp.core.models.multiclass.MultiClassGP.row_log_partition` in each class's ``a`` and
    ``w``, also where the classes' moments coincide; ``C¹ ≥ 0`` (the likelihood is log-concave); masked rows
    get no site. Within the rule's accuracy: a difference also moves the rule's grid, which the derivatives
    hold fixed (:func:`~pep_gp.core.models.multiclass_sites.composite_nodes`), so it sees the rule's error
    change: ~1e-10 of ``log Z`` for the exact likelihood's, ~1e-4 for the softmax's (3e-4 of its curvature)."""
    rng = np.random.default_rng(1)
    mean, var, fitc, y = _cavity(rng)
    mean[1], var[1], fitc[1] = 0.3, 0.8, 0.5  # every class alike: the quadrature's breakpoints coincide
    mask = np.array([True, True, False])
    model = MultiClassGP(4, likelihood=likelihood)
    precision, shift = (np.asarray(v) for v in jax.jit(model.row_site_coefficients)(
        bank.Marginals(jnp.asarray(mean), jnp.asarray(var)), *map(jnp.asarray, (fitc, y, mask))))
    assert np.all(precision[mask] > 0) and np.all(precision[~mask] == 0) and np.all(shift[~mask] == 0)
    h, row_log_partition = 1e-5, jax.jit(model.row_log_partition)

    def log_z(row, c, da=0.0, dw=0.0):
        a, w = mean.copy(), var.copy()
        a[row, c] += da
        w[row, c] += dw
        return float(row_log_partition(*map(jnp.asarray, (a, w, fitc, y)))[row])

    for row in (0, 1):
        for c in range(4):
            slope = (log_z(row, c, da=h) - log_z(row, c, da=-h)) / (2 * h)
            nu = slope**2 - (log_z(row, c, dw=h) - log_z(row, c, dw=-h)) / h
            denominator = 1.0 - nu * var[row, c]
            assert precision[row, c] == pytest.approx(nu / denominator, rel=rel, abs=1e-9)
            assert shift[row, c] == pytest.approx((slope + nu * mean[row, c]) / denominator, rel=rel, abs=1e-9)


def _fit_offsets(likelihood: str, counts, updates: int = 30):
    """SEP site updates (full batch, damping 0.5) of a model whose latent functions are one offset per class
    (a constant kernel of variance 4, one inducing input, noise 1) on rows with no inputs; returns the
    predicted class probabilities and the energy."""
    y = np.repeat(np.arange(len(counts)), counts)
    x = np.zeros((y.size, 1))
    model = MultiClassGP(len(counts), likelihood=likelihood)
    params = model.init(x, 1, inducing=np.zeros((len(counts), 1, 1)), kernel=Constant(variance=4.0), noise=1.0)
    x, y, mask = jnp.asarray(x), jnp.asarray(y), jnp.ones(y.size, bool)
    size = model.data_size(y)
    shared = model.step_shared(params, size)
    stats, update = jax.jit(model.site_stats), jax.jit(model.site_update)
    for _ in range(updates):
        params, shared, ok = update(params, shared, stats(params, shared, x, y, mask), size, 0.5)
        assert bool(ok)
    return np.exp(np.asarray(model.predict(params, x[:1])))[0], float(jax.jit(model.energy)(params, x, y))


@pytest.mark.exhaustive
@pytest.mark.heavy  # three SEP fits, each compiling its site statistics (the whole-row ones through a quadrature)
def test_the_whole_row_likelihoods_give_back_the_class_frequencies_and_their_likelihood():
    """With nothing to learn but the class frequencies (0.1, 0.3, 0.6 of 300 rows), the exact and the softmax
    likelihoods predict them within 0.005 and their energies lie between the multinomial log-likelihood at the
    frequencies less 15 nats (the prior's Occam factor for 3 offsets) and that log-likelihood (an average of
    the likelihood can't exceed its maximum). The pairwise product of eq. (6) predicts the rarest class at
    most 0.09 and its energy is over 30 nats lower: the gap that pushes fits on noisy labels to shrink the
    noise."""
    counts = np.array([30, 90, 180])
    frequencies = counts / counts.sum()
    most_likely = float(np.sum(counts * np.log(frequencies)))
    for likelihood in ("exact", "softmax"):
        predicted, energy = _fit_offsets(likelihood, counts)
        assert np.abs(predicted - frequencies).max() < 0.005, likelihood
        assert most_likely - 15.0 < energy < most_likely, likelihood
    pairwise, pairwise_energy = _fit_offsets("pairwise", counts)
    assert pairwise[0] < 0.09
    assert pairwise_energy < most_likely - 30.0


def test_the_whole_row_likelihoods_need_ep_and_a_known_name():
    """A whole-row likelihood with ``alpha < 1`` is refused by the model and by the settings, the softmax with
    label noise too, an unknown name by both, and the untied EP classifier, whose per-row sites are the
    pairwise ones, refuses both."""
    rng = np.random.default_rng(0)
    for likelihood in ("exact", "softmax"):
        with pytest.raises(ValueError, match="alpha = 1"):
            MultiClassGP(3, alpha=0.5, likelihood=likelihood)
        with pytest.raises(ValidationError, match="alpha = 1"):
            MultiClassSettings(alpha=0.5, likelihood=likelihood)
        with pytest.raises(ValueError, match="likelihood"):
            MultiClassEPClassifier(likelihood=likelihood, max_iter=1).fit(rng.normal(size=(30, 2)), np.arange(30) % 3)
    with pytest.raises(ValueError, match="likelihood must be one of"):
        MultiClassGP(3, likelihood="logit")
    with pytest.raises(ValidationError, match="likelihood"):
        MultiClassSettings(likelihood="logit")
    with pytest.raises(ValueError, match="no label_noise"):
        MultiClassGP(3, likelihood="softmax", label_noise=0.1)
    with pytest.raises(ValidationError, match="no label_noise"):
        MultiClassSettings(likelihood="softmax", label_noise=0.1)
