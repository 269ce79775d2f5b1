"""Swaroop's (2017) Cases 1c, 2b, 3 and the Case 4 surface: pep's EP evidence against an EP written out
independently in numpy (``oracles.step_ep_log_evidence``, Swaroop's §3 in ``x``-space) and the report's values
as recomputed in the spec, and the true evidence by closed form or quadrature. Each test asserts a gap between
``Z_EP`` and ``Z_true`` many times its tolerance, so EP code that returned the true evidence fails it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

from pep_gp.core.likelihoods import Heaviside, Probit
from pep_gp.core.models.collapsed_regression import log_marginal_likelihood
from pep_gp.core.models.ep import EP, site_data
from tests import oracles

ROOT2 = np.sqrt(2.0)  # Swaroop's probit(t) = ½ + ½erf(t) = Φ(√2 t) (eq. 31)


def _log_z_ep(likelihood, cov, index, weight, offset):
    """pep's ``ln Z_EP`` at its sequential EP's fixed point (prior ``N(0, cov)``, sites ``u = w f_i + b``, y = 1)."""
    ep = EP(likelihood)
    data = site_data(index, np.ones(len(index)), weight=weight, offset=offset)
    result = ep.run(jnp.asarray(cov, float), data, max_sweeps=1000, tol=1e-13)
    assert result.converged
    return float(ep.log_evidence(jnp.asarray(cov, float), data, result.sites))


# --- Case 1c: the d-dimensional box (Swaroop 2017, §4) -----------------------------------------------------

@pytest.mark.exhaustive
@pytest.mark.parametrize("b, d, log_z_ep", [(0.5, 2, -1.7800773369), (1.0, 2, -0.6842403333),
                                            pytest.param(0.5, 5, -4.4501933422, marks=pytest.mark.slow),
                                            pytest.param(1.0, 5, -1.7106008331, marks=pytest.mark.slow)])
def test_a_d_dimensional_box_overestimates_d_times_the_one_dimensional_gap(b, d, log_z_ep):
    """d independent pairs ``h(±x_k + b)`` under ``N(0, I_d)``: ``ln Z_EP − ln Z_true`` is d times the 1-D gap
    (the report's claim), ``Z_true = erf(b/√2)^d``; ``ln Z_EP`` also equals the spec's full-covariance EP run. d = 5 (a compilation of its own) in the slow tier."""
    index = list(range(d)) * 2
    weight = [1.0] * d + [-1.0] * d
    pep = _log_z_ep(Heaviside(), np.eye(d), index, weight, b)
    oracle, _, _ = oracles.step_ep_log_evidence(np.vstack([np.eye(d), -np.eye(d)]), [b] * (2 * d))
    one_d, _, _ = oracles.step_ep_log_evidence([[1.0], [-1.0]], [b, b])
    log_z_true = d * np.log(oracles.box_evidence(b))
    assert pep == pytest.approx(oracle, abs=1e-9)
    assert pep == pytest.approx(log_z_ep, abs=1e-9)
    gap_1d = one_d - np.log(oracles.box_evidence(b))
    assert gap_1d > 0.03
    assert pep - log_z_true == pytest.approx(d * gap_1d, abs=1e-8)


def test_a_correlated_box_overestimates_less_than_two_independent_ones():
    """Two pairs of steps on non-orthogonal directions ``e₁`` and ``(0.6, 0.8)`` (pep: ``f = (x₁, 0.6x₁ +
    0.8x₂)``, prior correlation 0.6), ``b = 0.5``: still ``Z_EP > Z_true`` (the rectangle probability of the
    correlated normal, by quadrature), by 0.1274 nats, less than the 0.1398 of two independent pairs."""
    b, c = 0.5, 0.6
    pep = _log_z_ep(Heaviside(), [[1.0, c], [c, 1.0]], [0, 0, 1, 1], [1.0, -1.0, 1.0, -1.0], b)
    oracle, _, _ = oracles.step_ep_log_evidence([[1, 0], [-1, 0], [c, 0.8], [-c, -0.8]], [b] * 4)
    s = np.sqrt(1 - c * c)
    z_true = integrate.quad(lambda f: norm.pdf(f) * (norm.cdf((b - c * f) / s) - norm.cdf((-b - c * f) / s)),
                            -b, b, epsabs=0, epsrel=1e-13)[0]
    assert pep == pytest.approx(oracle, abs=1e-9)
    assert pep - np.log(z_true) == pytest.approx(0.1273679147, abs=1e-8)
    assert pep - np.log(z_true) < 2 * (oracles.step_ep_log_evidence([[1.0], [-1.0]], [b, b])[0]
                                      - np.log(oracles.box_evidence(b)))


# --- Case 2b: two Heavisides with jitter (Swaroop 2017, §5.1) ------------------------------------------------

def test_jitter_between_two_heavisides_shrinks_the_underestimation():
    """``h(−x) h(−x + Δb)`` (``Z_true = ½``): Z_EP/Z_true rises from N = 2's 0.8848 towards 1 as Δb grows, the
    spec's values; the other direction ``h(−x) h(−x − Δb)`` (``Z_true = Φ(−Δb)``) too."""
    spec = {0.0: 0.4423977453, 0.1: 0.4590547453, 0.25: 0.4765610645, 0.5: 0.4916535355, 1.0: 0.4992794618}
    ratios = []
    for jitter, z_ep in spec.items():
        pep = _log_z_ep(Heaviside(), np.eye(1), [0, 0], -1.0, [0.0, jitter])
        assert pep == pytest.approx(oracles.step_ep_log_evidence([[-1.0], [-1.0]], [0.0, jitter])[0], abs=1e-9)
        assert np.exp(pep) == pytest.approx(z_ep, rel=1e-8)
        log_z_true = oracles.step_log_evidence_1d([-1, -1], [0.0, jitter])
        assert log_z_true == pytest.approx(np.log(0.5), abs=1e-12)
        ratios.append(np.exp(pep - log_z_true))
    assert np.all(np.diff(ratios) > 0) and ratios[-1] < 1 - 1e-3
    for jitter, z_true, z_ep in [(0.5, 0.3085375387, 0.3040860606), (1.0, 0.1586552539, 0.1586053578)]:
        pep = _log_z_ep(Heaviside(), np.eye(1), [0, 0], -1.0, [0.0, -jitter])
        assert np.exp(oracles.step_log_evidence_1d([-1, -1], [0.0, -jitter])) == pytest.approx(z_true, rel=1e-9)
        assert np.exp(pep) == pytest.approx(z_ep, rel=1e-8)
        assert np.exp(pep) / z_true < 1 - 3e-4


def test_jitter_between_two_probits_shrinks_the_underestimation():
    """``probit(−x) probit(−x + Δb)``: the ratios 0.994103, 0.994207, 0.995397, 0.998729 of the spec."""
    ratios = []
    for jitter, ratio in [(0.0, 0.994103), (0.5, 0.994207), (1.0, 0.995397), (2.0, 0.998729)]:
        offsets = [0.0, ROOT2 * jitter]
        pep = _log_z_ep(Probit(), np.eye(1), [0, 0], -ROOT2, offsets)
        assert pep == pytest.approx(oracles.step_ep_log_evidence([[-1.0], [-1.0]], [0.0, jitter], slope=ROOT2)[0],
                                    abs=1e-9)
        ratios.append(np.exp(pep - oracles.step_log_evidence_1d([-1, -1], [0.0, jitter], slope=ROOT2)))
        assert ratios[-1] == pytest.approx(ratio, abs=6e-7)
    assert np.all(np.diff(ratios) > 0)


# --- Case 3: 12-point probit classification with swapped pairs (Swaroop 2017, §6) ----------------------------

@pytest.mark.parametrize("swaps, log_z_true, log_z_ep", [(0, -1.94952599, -1.98166559), (1, -6.86508032, -6.86735229),
                                                         (2, -9.04393920, -9.04418632), (3, -9.71013938, -9.71005623)])
def test_swapping_pairs_of_points_turns_the_underestimation_into_a_tiny_overestimation(swaps, log_z_true, log_z_ep):
    """Weight ``w ~ N(0, 1)``, ``P(y|x, w) = probit(ywx)`` on 6 × (1, 1) and 6 × (−1, −1) with ``swaps`` pairs
    swapped: ``12 − 2k`` factors ``probit(w)`` and ``2k`` factors ``probit(−w)``. ``ln Z_true`` by quadrature;
    ``ln Z_EP − ln Z_true`` is −3.2e−2, −2.3e−3, −2.5e−4 and +8.3e−5 (the report's Fig. 15, the spec's values)."""
    signs = np.array([1.0] * (12 - 2 * swaps) + [-1.0] * (2 * swaps))
    pep = _log_z_ep(Probit(), np.eye(1), [0] * 12, ROOT2 * signs, 0.0)
    true = oracles.step_log_evidence_1d(signs, np.zeros(12), slope=ROOT2)
    assert true == pytest.approx(log_z_true, abs=1e-8)
    assert pep == pytest.approx(oracles.step_ep_log_evidence(signs[:, None], np.zeros(12), slope=ROOT2)[0], abs=1e-9)
    assert pep == pytest.approx(log_z_ep, abs=1e-8)
    gap = pep - true
    assert abs(gap) > 8e-5  # 80 times the tolerances above
    assert (gap > 0) == (swaps == 3)


# --- Case 4: the FITC surface over two inducing inputs (Swaroop 2017, §7) ------------------------------------

X = np.array([[1.0], [0.0]])
FAR = 1e3  # an inducing input beyond the kernel's reach: k(FAR, x) = 0 in float64 ("x_u → ∞")
SIGMA_F2, ELL, NOISE = 0.25, 0.5, 0.01


@jax.jit
def _fitc(z, y):
    return log_marginal_likelihood(oracles.se_bank([ELL], SIGMA_F2), z[:, None], NOISE, jnp.asarray(X), y, 1.0, 0.0)


def _fitc_gap(z, y):
    """pep's collapsed PEP at α = 1 (FITC, = Z_EP) minus the exact GP evidence, inducing inputs ``z``."""
    pep = float(_fitc(jnp.asarray(z, float), jnp.asarray(y, float)))
    return pep - oracles.exact_gp_evidence(X, np.asarray(y, float), [ELL], SIGMA_F2, NOISE)


def test_the_fitc_surface_is_numpys_fitc_exact_at_the_data_and_highest_with_one_inducing_input():
    """y = 0, x = (1, 0), σ_f = ℓ = 0.5, σ_n = 0.1: on a grid of ``x_u ∈ [−2, 3]²`` (pairs closer than 0.25 left
    out: ``K_uu`` near singular) and with one input at ∞, ``ln p_FITC − ln p_true`` equals numpy's FITC
    (eq. 58), is symmetric, zero with an inducing input on each data input, and largest at ``x_u = (0.5, ∞)``:
    ``½ln[(a² − σ_f⁴e⁻⁴)/(a² − σ_f⁴e⁻²)] = 0.0583`` with ``a = σ_f² + σ_n²`` (FITC's off-diagonal ``σ_f²e⁻¹``
    against the true ``σ_f²e⁻²``); with both inputs at ∞, ``½ln[(a² − σ_f⁴e⁻⁴)/a²] < 0``."""
    y = np.zeros(2)
    grid = np.linspace(-2.0, 3.0, 11)
    pairs = [(u, v) for u in grid for v in [*grid, FAR] if abs(u - v) >= 0.25]
    gaps = {}
    for u, v in pairs:
        gaps[u, v] = _fitc_gap([u, v], y)
        numpy_fitc = oracles.fitc_evidence(X, y, np.array([[u], [v]]), [ELL], SIGMA_F2, NOISE)
        assert gaps[u, v] + oracles.exact_gp_evidence(X, y, [ELL], SIGMA_F2, NOISE) == pytest.approx(numpy_fitc, abs=1e-8)
    for (u, v), gap in gaps.items():
        if v != FAR:
            assert gap == pytest.approx(gaps[v, u], abs=1e-10)
    a = SIGMA_F2 + NOISE
    one_input = 0.5 * np.log((a * a - SIGMA_F2**2 * np.exp(-4.0)) / (a * a - SIGMA_F2**2 * np.exp(-2.0)))
    assert one_input == pytest.approx(0.0582977467, rel=1e-9)
    assert gaps[0.5, FAR] == pytest.approx(one_input, abs=1e-9)
    assert max(gaps, key=gaps.get) == (0.5, FAR) and max(gaps.values()) == pytest.approx(one_input, abs=1e-9)
    for on_data in [(1.0, 0.0), (0.0, 1.0), (1.0, FAR), (0.0, FAR)]:
        assert gaps[on_data] == pytest.approx(0.0, abs=1e-9)
    assert _fitc_gap([FAR, -FAR], y) == pytest.approx(0.5 * np.log(1 - SIGMA_F2**2 * np.exp(-4.0) / a**2), abs=1e-9)
    assert _fitc_gap([FAR, -FAR], y) == pytest.approx(-0.0085394273, abs=1e-9)


@pytest.mark.parametrize("y, gap_one_input, gap_none", [([0.2, 0.2], 0.0807830202, -0.0262542131),
                                                        ([0.2, -0.2], -0.0028936807, 0.0144755222)])
def test_the_quadratic_term_moves_the_fitc_gap_by_the_sign_of_y1_y2(y, gap_one_input, gap_none):
    """Eq. 60: with ``y₁ = y₂`` the quadratic term adds to the one-inducing-input overestimation, with
    ``y₁ = −y₂`` it outweighs it at |y| = 0.2 (the spec's values, and numpy's FITC)."""
    for z, expected in [([0.5, FAR], gap_one_input), ([FAR, -FAR], gap_none)]:
        gap = _fitc_gap(z, y)
        assert gap == pytest.approx(expected, abs=1e-9)
        numpy_fitc = oracles.fitc_evidence(X, np.asarray(y), np.array(z)[:, None], [ELL], SIGMA_F2, NOISE)
        assert gap == pytest.approx(numpy_fitc - oracles.exact_gp_evidence(X, np.asarray(y), [ELL], SIGMA_F2, NOISE),
                                    abs=1e-9)
