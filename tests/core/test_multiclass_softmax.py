"""The softmax likelihood's integrals (:mod:`pep_gp.core.models.multiclass_softmax`): the Gumbel rule against
the Gumbel's moments, the Gaussian–Gumbel convolutions against adaptive quadrature, and ``E[softmax(f)_c]``
against Monte Carlo of the softmax itself."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

from pep_gp.core.models import multiclass_softmax as softmax


def test_the_gumbel_rule_has_the_gumbels_moments():
    """Weights summing to 1; mean ``γ``, variance ``π²/6`` and third central moment ``2ζ(3)`` (exact for
    polynomials of degree below 32), to 1e-10."""
    nodes, weights = softmax.gumbel_rule(16)
    assert np.all(weights > 0)
    assert weights.sum() == pytest.approx(1.0, abs=1e-10)
    mean = weights @ nodes
    assert mean == pytest.approx(np.euler_gamma, abs=1e-10)
    assert weights @ (nodes - mean) ** 2 == pytest.approx(np.pi**2 / 6, abs=1e-10)
    assert weights @ (nodes - mean) ** 3 == pytest.approx(2 * special.zeta(3), abs=1e-9)


def _reference(offset, sd):
    """``F`` and ``p`` of ``U = f + g`` at ``u − m = offset``, ``f ~ N(0, sd²)``, by adaptive quadrature over
    ``x = f/sd``, with breakpoints where the Gumbel's CDF turns."""
    span, turns = (-12.0, 12.0), [x for x in ((offset - 4) / sd, offset / sd, (offset + 4) / sd) if abs(x) < 12]

    def integral(function):
        return integrate.quad(lambda x: stats.norm.pdf(x) * function(offset - sd * x), *span, points=turns,
                              epsabs=0, epsrel=1e-12, limit=1000)[0]

    return integral(lambda t: np.exp(-np.exp(-t))), integral(lambda t: np.exp(-t - np.exp(-t)))


@pytest.mark.heavy
@pytest.mark.parametrize("sd", [1e-3, 0.3, 0.99, 1.01, 2.0, 10.0])
def test_the_convolutions_match_adaptive_quadrature_on_both_sides_of_the_switch(sd):
    """``F`` within rel 1e-4 wherever ``F > 10⁻³``, and ``p`` within rel 1e-3 wherever ``p > 10⁻⁶``, at offsets
    from the left tail to 15 units into the exponential right tail, for latent spreads on both sides of the
    switch between the two rules (``√v = 1``)."""
    offsets = np.array([-2.0, -1.0, 0.0, 1.0, 3.0, 6.0, 10.0, 15.0])
    functions = jax.jit(lambda u, m, v: (softmax.log_cdf(u, m, v), softmax.log_density(u, m, v)))
    log_cdf, log_density = (np.exp(np.asarray(v)[0, :, 0]) for v in functions(
        jnp.asarray(offsets)[None], jnp.zeros((1, 1)), jnp.full((1, 1), sd**2)))
    cdf, density = np.array([_reference(offset, sd) for offset in offsets]).T
    np.testing.assert_allclose(log_cdf[cdf > 1e-3], cdf[cdf > 1e-3], rtol=1e-4)
    np.testing.assert_allclose(log_density[density > 1e-6], density[density > 1e-6], rtol=1e-3)


def _rows(rng):
    """Latent moments of 6 rows of 4 classes and their labels: alike classes, spreads from 10⁻³ to 5, a label
    far on the wrong side, and one far on the right side."""
    mean = rng.normal(size=(6, 4))
    sd = rng.choice([1e-3, 0.3, 1.0, 2.0, 5.0], size=(6, 4))
    mean[0], sd[0] = 0.0, 1e-3
    mean[4] = [8.0, -2.0, 0.0, 1.0]
    mean[5] = [8.0, -2.0, 0.0, 1.0]
    return mean, sd**2, np.array([0, 1, 2, 3, 1, 0])


@pytest.mark.heavy
def test_the_label_s_probability_is_the_expected_softmax_within_monte_carlo_error():
    """``exp(softmax_log_probs(…, y)) = E[softmax(f)_{y}]`` within four Monte Carlo standard errors of 400,000
    draws per row (the softmax averaged over Gaussian draws of ``f``) plus the rule's relative 1e-4 (which
    counts where the softmax hardly varies: four alike classes of spread 10⁻³ have a standard error of 3e-7),
    both on the label's own rule (``y`` given) and on the rule of every class at the label."""
    rng = np.random.default_rng(0)
    mean, var, y = _rows(rng)
    log_z = np.asarray(jax.jit(softmax.softmax_log_probs)(jnp.asarray(mean), jnp.asarray(var), y=jnp.asarray(y)))
    log_probs = np.asarray(jax.jit(softmax.softmax_log_probs)(jnp.asarray(mean), jnp.asarray(var)))
    draws = mean[:, None] + np.sqrt(var)[:, None] * rng.normal(size=(6, 400_000, 4))
    expected = special.softmax(draws, axis=-1)[np.arange(6), :, y]
    frequency, standard_error = expected.mean(1), expected.std(1) / np.sqrt(expected.shape[1])
    for rule in (log_z, log_probs[np.arange(6), y]):
        assert np.all(np.abs(np.exp(rule) - frequency) < 4 * standard_error + 1e-4 * frequency)


def _hard_rows(rows: int, classes: int, seed: int):
    """Latent moments and labels that stress a rule: means spread up to ±10 apart in a row, variances from
    1e-4 to 100 (a wide label beside sharp classes and the reverse), labels anywhere, far on the wrong side
    included."""
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(rows, classes)) * rng.choice([0.3, 2.0, 5.0, 10.0], size=(rows, 1))
    var = np.exp(rng.uniform(np.log(1e-4), np.log(100.0), size=(rows, classes)))
    return jnp.asarray(mean), jnp.asarray(var), jnp.asarray(rng.integers(0, classes, rows))


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("classes", [2, 4, pytest.param(10, marks=pytest.mark.exhaustive)])  # 10: 30 s more
def test_the_label_s_rule_matches_a_much_finer_rule_in_log_z_and_its_derivatives(classes):
    """On 100 hard rows (:func:`_hard_rows`), ``log Z`` of the label's rule (placed at its integrand's mode,
    :meth:`~pep_gp.core.models.multiclass_softmax.SoftmaxQuadrature.label_nodes`) and its derivatives in the
    latent means and variances (the EP sites' and the energy's) are within 2e-4 of the every-class rule with
    24 breakpoints per class, 8 nodes per panel and 40-node convolutions."""
    mean, var, y = _hard_rows(100, classes, seed=classes)
    fine = softmax.SoftmaxQuadrature(num_breaks=24, panel_nodes=8, latent_nodes=40, gumbel_nodes=40)

    def with_derivatives(log_z):
        return jax.jit(lambda a, v: (log_z(a, v), jax.grad(lambda a, v: jnp.sum(log_z(a, v)), (0, 1))(a, v)))

    rows = jnp.arange(mean.shape[0])
    label = with_derivatives(lambda a, v: softmax.softmax_log_probs(a, v, y=y))(mean, var)
    reference = with_derivatives(lambda a, v: softmax.softmax_log_probs(a, v, fine)[rows, y])(mean, var)
    for ours, theirs in zip(jax.tree_util.tree_leaves(label), jax.tree_util.tree_leaves(reference)):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=0, atol=2e-4)


def test_the_probabilities_of_all_classes_sum_to_one():
    """Over 200 random rows of 5 classes (spreads 10⁻³–5, means up to ±12 apart): within 1e-4."""
    rng = np.random.default_rng(1)
    mean = rng.normal(size=(200, 5)) * rng.choice([0.0, 1.0, 4.0], size=(200, 1))
    var = rng.choice([1e-3, 0.3, 1.0, 2.0, 5.0], size=(200, 5)) ** 2
    total = np.exp(np.asarray(jax.jit(softmax.softmax_log_probs)(jnp.asarray(mean), jnp.asarray(var)))).sum(1)
    np.testing.assert_allclose(total, 1.0, atol=1e-4)
