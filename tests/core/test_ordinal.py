"""The ordinal probit likelihood (:class:`pep_gp.core.ordinal.Ordinal`, Chu & Ghahramani 2005): its Power-EP
``log Z̃`` and tilted moments against adaptive quadrature (``scipy.integrate.quad``) at α ∈ {0.1, 0.5, 1}
(α = 1: the closed form; otherwise the composite rule), the ``α → 0`` term, class probabilities that sum to
one under ordered cut points from any leaves, the cut points' start from class frequencies, and the
gradients of ``log Z̃`` and of a sparse GP's energy in the cut points against central differences."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

from pep_gp.core.models.power_ep import PowerEPSparseGP
from pep_gp.core.ordinal import Ordinal

LIKELIHOOD = Ordinal(4)
RAW = np.array([-1.0, 0.3, 1.5])  # cut points −1, −0.146, 1.556
CAVITIES = [(0.0, 1.0), (2.0, 0.05), (-3.0, 9.0), (4.0, 30.0), (-6.0, 0.5)]


def probit(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian(f: float, mean: float, sd: float) -> float:
    return math.exp(-0.5 * ((f - mean) / sd) ** 2) / (sd * math.sqrt(2.0 * math.pi))


def class_probability(cuts: np.ndarray, k: int, f: float) -> float:
    """``Φ(b_{k+1} − f) − Φ(b_k − f)`` in plain floats, as ``Φ(f − b_k) − Φ(f − b_{k+1})`` above the interval's
    middle (where both probits are near 1 and their difference would lose its digits)."""
    edges = np.concatenate([[-np.inf], cuts, [np.inf]])
    low, high = edges[k] - f, edges[k + 1] - f
    return probit(-low) - probit(-high) if low + high > 0 else probit(high) - probit(low)


def quad_moments(cuts, k, mean, var, alpha):
    """``log ∫ N(f; m, v) p(k|f)^α df`` and the tilted mean and variance by adaptive quadrature on ℝ, split at
    ``m ± 40√v`` with the cut points as break points."""
    sd = math.sqrt(var)
    lo, hi = mean - 40 * sd, mean + 40 * sd
    points = [c for c in cuts if lo < c < hi]

    def integral(h):
        integrand = lambda f: h(f) * gaussian(f, mean, sd) * class_probability(cuts, k, f) ** alpha
        return sum(integrate.quad(integrand, a, b, epsabs=0, epsrel=1e-13, limit=500, points=p)[0]
                   for a, b, p in ((-np.inf, lo, None), (lo, hi, points), (hi, np.inf, None)))

    z = integral(lambda f: 1.0)
    tilted_mean = integral(lambda f: f) / z
    return math.log(z), tilted_mean, integral(lambda f: (f - tilted_mean) ** 2) / z


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_tilted_normaliser_and_moments_match_adaptive_quadrature(alpha):
    """To 1e-10 (measured: 3e-14): ``log Z̃`` absolutely, the mean in cavity deviations, the variance relative
    to the cavity's; every class of four, cavities from v = 0.05 to 30 and as far as 10 deviations from a cut
    point (``log Z̃ = −22``)."""
    params = {"raw_cut_points": RAW}
    cuts = np.asarray(LIKELIHOOD.cut_points(params))
    y, m, v = (np.asarray(a, float) for a in zip(*[(k, m, v) for k in range(4) for m, v in CAVITIES]))
    got = [np.asarray(a) for a in jax.jit(LIKELIHOOD.tilted_moments, static_argnums=3)(y, m, v, alpha, params)]
    for i in range(len(y)):
        expected = quad_moments(cuts, int(y[i]), m[i], v[i], alpha)
        assert abs(got[0][i] - expected[0]) < 1e-10, (y[i], m[i], v[i])
        assert abs(got[1][i] - expected[1]) < 1e-10 * np.sqrt(v[i]), (y[i], m[i], v[i])
        assert abs(got[2][i] - expected[2]) < 1e-10 * v[i], (y[i], m[i], v[i])


def test_the_expected_log_probability_matches_adaptive_quadrature():
    """The ``α → 0`` term ``E_{N(f; m, v)}[log p(y|f)]`` (Gauss–Hermite) to 1e-9."""
    params = {"raw_cut_points": RAW}
    cuts = np.asarray(LIKELIHOOD.cut_points(params))
    expected_log_prob = jax.jit(LIKELIHOOD.expected_log_prob)
    for k, (m, v) in [(0, (0.0, 1.0)), (1, (-0.5, 0.3)), (3, (1.0, 2.0))]:
        expected = integrate.quad(lambda f: gaussian(f, m, math.sqrt(v)) * math.log(class_probability(cuts, k, f)),
                                  m - 12 * math.sqrt(v), m + 12 * math.sqrt(v), epsabs=1e-13, limit=200)[0]
        got = float(expected_log_prob(params, jnp.asarray(float(k)), jnp.asarray(m), jnp.asarray(v)))
        assert abs(got - expected) < 1e-9, k


def test_cut_points_are_ordered_and_probabilities_sum_to_one_for_any_leaves():
    """Leaves drawn at random (gaps' leaves down to −30) give increasing cut points, and every class's
    probability under ``N(m, v)`` is positive and they sum to 1 (to 1e-12), latent means up to ±8."""
    rng = np.random.default_rng(0)
    lik = Ordinal(5)
    predict = jax.jit(lik.predict)
    for _ in range(5):
        params = {"raw_cut_points": jnp.asarray(rng.normal(0.0, 10.0, 4))}
        assert np.all(np.diff(np.asarray(lik.cut_points(params))) > 0)
        mean, var = jnp.asarray(rng.uniform(-8.0, 8.0, 20)), jnp.asarray(rng.uniform(0.0, 5.0, 20))
        proba = np.asarray(predict(params, mean, var))
        assert proba.shape == (20, 5) and np.all(proba >= 0)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_cut_points_start_at_the_class_frequencies_under_the_unit_prior():
    """``P(y < k) = Φ(b_k/√2)`` for ``f ~ N(0, 1)`` with the counts each raised by ½ (an empty class keeps a gap)."""
    counts = np.array([30, 0, 50, 20])
    cuts = np.asarray(LIKELIHOOD.cut_points(LIKELIHOOD.init_params(counts)))
    np.testing.assert_allclose(norm.cdf(cuts / np.sqrt(2.0)), np.cumsum(counts + 0.5)[:-1] / 102.0, rtol=1e-12)
    with pytest.raises(ValueError, match="4 non-negative counts"):
        LIKELIHOOD.init_params([3, 4])
    with pytest.raises(ValueError, match="at least 2 classes"):
        Ordinal(1)


@pytest.mark.parametrize("alpha", [1.0, pytest.param(0.5, marks=pytest.mark.heavy)])  # 0.5: the rule's gradient
def test_log_z_gradients_match_central_differences(alpha):
    """``∂log Z̃/∂`` (the cut points' leaves), ``∂/∂m`` and ``∂/∂v`` summed over every class of four at three
    cavities (the closed form at α = 1, the rule's held nodes otherwise), against central differences of
    step 1e-5 (relative 1e-6)."""
    y = jnp.repeat(jnp.arange(4.0), 3)
    m, v = jnp.tile(jnp.array([-1.2, 0.3, 2.0]), 4), jnp.tile(jnp.array([0.4, 1.5, 0.1]), 4)

    value_and_grad = jax.jit(jax.value_and_grad(lambda raw, shift, scale: jnp.sum(LIKELIHOOD.log_tilted(
        {"raw_cut_points": raw}, y, m + shift, v * scale, alpha)), argnums=(0, 1, 2)))
    log_z = lambda *point: value_and_grad(*point)[0]  # one program for the values and the gradient
    raw = jnp.asarray(RAW)
    grads = value_and_grad(raw, 0.0, 1.0)[1]
    step = 1e-5
    central = [(float(log_z(raw.at[i].add(step), 0.0, 1.0)) - float(log_z(raw.at[i].add(-step), 0.0, 1.0))) / (2 * step)
               for i in range(raw.size)]
    np.testing.assert_allclose(np.asarray(grads[0]), central, rtol=1e-6, atol=1e-8)
    for k, moved in ((1, lambda e: (raw, e, 1.0)), (2, lambda e: (raw, 0.0, 1.0 + e))):
        difference = (float(log_z(*moved(step))) - float(log_z(*moved(-step)))) / (2 * step)
        np.testing.assert_allclose(float(grads[k]), difference, rtol=1e-6)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_the_energy_gradient_in_the_cut_points_matches_central_differences():
    """``∂F/∂`` (the cut points' leaves) of a sparse GP's whole Power-EP energy at α = 0.5 (Bui, Yan & Turner 2017
    eq. 110) on 30 rows of four ordered classes, against central differences of step 1e-5 (relative 1e-6)."""
    model = PowerEPSparseGP(LIKELIHOOD, alpha=0.5)
    x = jax.random.normal(jax.random.key(0), (30, 2))
    y = jnp.searchsorted(jnp.array([-0.8, 0.0, 0.9]), x[:, 0] + 0.3 * x[:, 1]).astype(float)
    params = model.init(x, num_inducing=4, likelihood_params=LIKELIHOOD.init_params(np.bincount(y.astype(int))))

    value_and_grad = jax.jit(jax.value_and_grad(
        lambda raw: model.energy(params._replace(likelihood={"raw_cut_points": raw}), x, y)))
    energy = lambda raw: value_and_grad(raw)[0]  # one program for the values and the gradient
    raw = params.likelihood["raw_cut_points"]
    grad = np.asarray(value_and_grad(raw)[1])
    step = 1e-5
    central = [(float(energy(raw.at[i].add(step))) - float(energy(raw.at[i].add(-step)))) / (2 * step)
               for i in range(raw.size)]
    np.testing.assert_allclose(grad, central, rtol=1e-6, atol=1e-8)
