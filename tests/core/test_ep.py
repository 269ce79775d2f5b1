"""Untied EP / Power EP / QP (src/pep_gp/core/models/ep.py) on Swaroop's (2017) toy problems, against closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core.likelihoods import Heaviside, Probit
from pep_gp.core.models.collapsed_regression import log_marginal_likelihood
from pep_gp.core.models.ep import (ALPHA_FLOOR, EP, Sites, gaussian_part, marginal_moments, posterior, site_data,
                                   sweep_until, zero_sites)
from tests import oracles

PRIOR = jnp.eye(1)  # N(x; 0, 1)


def _evidence(ep, data, **run):
    result = ep.run(PRIOR, data, **run)
    assert result.converged
    return float(jnp.exp(ep.log_evidence(PRIOR, data, result.sites))), result


def _box(b):
    """``h(x + b) h(−x + b)`` (Swaroop 2017 eq. 36)."""
    return site_data([0, 0], [1, 1], weight=[1.0, -1.0], offset=[b, b])


@pytest.mark.heavy
@pytest.mark.parametrize("b, z_ep, z_true", [(0.1, 0.0866590335, 0.0796556746), (0.5, 0.4106398736, 0.3829249225),
                                             (1.0, 0.7102628497, 0.6826894921), (2.0, 0.9584686387, 0.9544997361)])
def test_symmetric_box_overestimates_the_evidence(b, z_ep, z_true):
    """Swaroop 2017, §4: Z_EP at the report's fixed point, above Z_true = erf(b/√2)."""
    z, result = _evidence(EP(Heaviside()), _box(b))
    assert z == pytest.approx(z_ep, rel=1e-9)
    assert oracles.box_evidence(b) == pytest.approx(z_true, rel=1e-9)
    assert z > oracles.box_evidence(b)


@pytest.mark.parametrize("w, c, z_ep, z_true", [(1.0, 0.5, 0.3469021850, 0.3456268321), (5.0, 0.5, 0.3998075109, 0.3794519569),
                                                (0.5, 1.0, 0.4798932462, 0.4796682277)])
def test_probit_box_overestimates_the_evidence(w, c, z_ep, z_true):
    """Swaroop 2017, §4: factors probit(w(±x + c)) = Φ(√2w(±x + c))."""
    a = np.sqrt(2.0) * w
    z, _ = _evidence(EP(Probit()), site_data([0, 0], [1, 1], weight=[a, -a], offset=[a * c, a * c]))
    assert z == pytest.approx(z_ep, rel=1e-8)
    assert oracles.probit_box_evidence(w, c) == pytest.approx(z_true, rel=1e-8)
    assert z > z_true


@pytest.mark.heavy
@pytest.mark.parametrize("n, ratio", [(1, 1.0), (2, 0.884795), (5, 0.768910), (10, 0.701772)])
def test_repeated_heavisides_underestimate_and_equal_power_ep(n, ratio):
    """Swaroop 2017, §5: N copies of h(−x) (Z_true = ½) give Z_EP/Z_true of the report; Power EP with power
    1/N on one copy (damping 1/N, as the spec) reaches the same Z, mean and variance to 1e-6 relative."""
    z, result = _evidence(EP(Heaviside()), site_data([0] * n, [1] * n, weight=-1.0))
    assert z / 0.5 == pytest.approx(ratio, abs=5e-7)
    power = EP(Heaviside(), alpha=1.0 / n, damping=1.0 / n)
    z_power, power_result = _evidence(power, site_data([0], [1], weight=-1.0), max_sweeps=5000, tol=1e-13)
    assert z_power == pytest.approx(z, rel=1e-6)
    np.testing.assert_allclose(power_result.posterior.mean, result.posterior.mean, rtol=1e-6)
    np.testing.assert_allclose(power_result.posterior.cov, result.posterior.cov, rtol=1e-6)


@pytest.mark.parametrize("w, n, ratio", [(1.0, 5, 0.982015), (3.0, 2, 0.954225)])
def test_repeated_probits_underestimate(w, n, ratio):
    z, _ = _evidence(EP(Probit()), site_data([0] * n, [1] * n, weight=-np.sqrt(2.0) * w))
    assert z / oracles.repeated_probit_evidence(w, n) == pytest.approx(ratio, abs=5e-7)


@pytest.mark.parametrize("b, var_ep, var_qp", [(0.1, 4.659101e-03, 4.289027e-03), (1.0, 3.503294e-01, 3.356560e-01)])
def test_quantile_propagation_shrinks_the_box_variance(b, var_ep, var_qp):
    """reference values computed by high-precision quadrature for Zhang et al. 2020's projections: at the fixed points EP's and QP's posterior variances of the box."""
    for projection, expected in [("kl", var_ep), ("wasserstein", var_qp)]:
        result = EP(Heaviside(), projection=projection).run(PRIOR, _box(b))
        assert float(result.posterior.cov[0, 0]) == pytest.approx(expected, rel=2e-6)


@pytest.mark.heavy
def test_fitc_two_point_example():
    """Swaroop 2017, §7: the project's FITC (collapsed PEP at α = 1) on y = 0 at x = (1, 0), σ_f = ℓ = 0.5, σ_n = 0.1:
    exact with inducing inputs at the data, ln p_FITC − ln p_true = 0.0582977467 with one at 0.5."""
    x, y = np.array([[1.0], [0.0]]), np.zeros(2)
    kernel = oracles.se_bank([0.5], 0.25)
    exact = oracles.exact_gp_evidence(x, y, [0.5], 0.25, 0.01)
    assert exact == pytest.approx(-0.4822639911, rel=1e-9)
    fitc = lambda z: float(log_marginal_likelihood(kernel, jnp.asarray(z), 0.01, jnp.asarray(x), jnp.asarray(y), 1.0, 0.0))
    assert fitc(x) == pytest.approx(exact, rel=1e-10)
    assert fitc([[0.5]]) - exact == pytest.approx(0.0582977467, rel=1e-8)


def _classification(n=25, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    labels = (x[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(float)
    return jnp.asarray(x), site_data(jnp.arange(n), labels)


def _cov(x, log_theta):
    kernel = oracles.se_bank(jnp.exp(log_theta[:1]) * jnp.ones(2), jnp.exp(log_theta[1]))
    return kernel.gram(x[None])[0] + 1e-8 * jnp.eye(x.shape[0])


@pytest.mark.parametrize("lowest", [0.0, -0.3])
def test_marginal_moments_are_the_posteriors_mean_and_variances(lowest):
    """The parallel sweep's moments (the symmetric Cholesky form, or the general solve where a site precision is
    negative) against ``(K⁻¹ + T)⁻¹`` by dense numpy inverses, with a site on a repeated variable."""
    x, _ = _classification(n=12)
    cov = _cov(x, jnp.log(jnp.array([1.2, 2.0])))
    rng = np.random.default_rng(1)
    data = site_data(jnp.array([*range(12), 3]), jnp.ones(13), weight=rng.uniform(0.5, 2.0, 13),
                     offset=rng.normal(size=13))
    precision = rng.uniform(0.0, 2.0, 13)
    precision[5] = lowest
    sites = Sites(jnp.asarray(precision), jnp.asarray(rng.normal(size=13)))
    t = np.zeros(12)
    np.add.at(t, np.asarray(data.index), np.asarray(data.weight) ** 2 * precision)
    h = np.zeros(12)
    np.add.at(h, np.asarray(data.index), np.asarray(data.weight) * (np.asarray(sites.shift) - precision * np.asarray(data.offset)))
    sigma = np.linalg.inv(np.linalg.inv(np.asarray(cov)) + np.diag(t))
    mean, variance = marginal_moments(cov, data, sites)
    np.testing.assert_allclose(mean, sigma @ h, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(variance, np.diagonal(sigma), rtol=1e-9, atol=1e-12)
    q = posterior(cov, data, sites)
    np.testing.assert_allclose(variance, np.diagonal(q.cov), rtol=1e-9, atol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("projection", ["kl", "wasserstein"])
def test_parallel_damped_reaches_the_sequential_fixed_point(projection):
    x, data = _classification()
    cov = _cov(x, jnp.log(jnp.array([1.2, 2.0])))
    sequential = EP(Probit(), projection).run(cov, data, tol=1e-11)
    parallel = EP(Probit(), projection, damping=0.5, schedule="parallel").run(cov, data, max_sweeps=1000, tol=1e-11)
    assert sequential.converged and parallel.converged
    np.testing.assert_allclose(parallel.sites.precision, sequential.sites.precision, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(parallel.posterior.mean, sequential.posterior.mean, rtol=1e-8, atol=1e-10)


def test_undamped_parallel_sweeps_halve_their_step_where_they_oscillate():
    """Three nearly equal inputs per row and a large amplitude: undamped parallel EP oscillates (its change
    stayed above 0.2 for 300 sweeps with a fixed step); the step halves after a sweep that moves more than
    the one before, and the sweeps reach the sequential fixed point."""
    rng = np.random.default_rng(2)
    t = rng.normal(size=(40, 1))
    x = np.hstack([t, t + 0.01 * rng.normal(size=(40, 1)), t + 0.01 * rng.normal(size=(40, 1))])
    cov = jnp.asarray(100.0 * np.exp(-0.5 * ((x[:, None] - x[None]) ** 2).sum(-1)) + 1e-6 * np.eye(40))
    data = site_data(np.arange(40), (t[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(float))
    ep = EP(Probit(), schedule="parallel")
    sites, sweeps, change, _, step = sweep_until(ep, cov, data, zero_sites(40), 300, 1e-10)
    assert float(change) <= 1e-10 and int(sweeps) < 300 and float(step) < 1.0
    sequential = EP(Probit()).run(cov, data, tol=1e-11)
    assert sequential.converged
    np.testing.assert_allclose(sites.precision, sequential.sites.precision, rtol=1e-7, atol=1e-9)
    assert float(ep.log_evidence(cov, data, sites)) == pytest.approx(
        float(ep.log_evidence(cov, data, sequential.sites)), abs=1e-8)


def test_sweeps_from_another_evaluations_sites_keep_at_least_half_a_step():
    """The evidence optimiser starts each evaluation's sweeps from the last one's sites (other hyper-parameters):
    a change that grows there for a few sweeps is the way to the new fixed point, not an oscillation, and
    halving on to a sixteenth (the floor before) took 145 sweeps here, and on 1,100 separable rows left every
    later evaluation unconverged after 200 (a fit of 6 minutes, 1 with a step of ½); the step stays at least
    half the EP's."""
    rng = np.random.default_rng(3)
    a, c = rng.normal(size=400), rng.uniform(size=400)
    distances = ((np.stack([a, c], 1)[:, None] - np.stack([a, c], 1)[None]) ** 2).sum(-1)
    data = site_data(np.arange(400), (a + 0.5 * np.sin(3 * c) > 0).astype(float))

    def cov(amplitude, lengthscale):
        return jnp.asarray(amplitude * (np.exp(-0.5 * distances / lengthscale**2) + 1e-8 * np.eye(400)))

    ep = EP(Probit(), schedule="parallel")
    before, *_ = sweep_until(ep, cov(10.0, 1.0), data, zero_sites(400), 300, 1e-7, 0.5)
    _, sweeps, change, _, step = sweep_until(ep, cov(1000.0, 0.5), data, before, 200, 1e-7)
    assert float(change) <= 1e-7 and int(sweeps) < 100 and float(step) == 0.5 * ep.damping


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_evidence_gradient_is_the_gaussian_parts_at_the_fixed_point():
    """R&W §5.5.2: d log Z_EP/dθ = ∂/∂θ of the Gaussian part with the sites fixed (central differences of
    the converged evidence, 1e-5 relative)."""
    x, data = _classification()
    ep = EP(Probit())
    theta = jnp.log(jnp.array([1.2, 2.0]))
    sites = ep.run(_cov(x, theta), data, tol=1e-12).sites
    grad = jax.grad(lambda t: gaussian_part(_cov(x, t), data, sites))(theta)

    def evidence(t):
        return float(ep.log_evidence(_cov(x, t), data, ep.run(_cov(x, t), data, sites, tol=1e-13).sites))

    eps = 1e-5
    fd = [(evidence(theta.at[i].add(eps)) - evidence(theta.at[i].add(-eps))) / (2 * eps) for i in range(2)]
    np.testing.assert_allclose(grad, fd, rtol=1e-5)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="projection"):
        EP(Probit(), "l2").check()
    with pytest.raises(ValueError, match="damping"):
        EP(Probit(), damping=0.0).check()
    with pytest.raises(ValueError, match="schedule"):
        EP(Probit(), schedule="random").check()


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("projection", ["kl", "wasserstein"])
def test_small_powers_converge_down_to_the_floor_and_below_it_are_refused(projection):
    """Issue 27: at α ≤ 1e-6 untied EP/QP stopped converging. On a 20-row probit problem both converge at the
    floor α = 1e-3; below it the power is refused, where QP (at 1e-4) and EP (at 1e-8) stop converging."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 1))
    cov = jnp.asarray(np.exp(-0.5 * (x - x.T) ** 2) + 1e-8 * np.eye(20))
    data = site_data(np.arange(20), (x[:, 0] > 0).astype(float))
    result = EP(Probit(), projection, ALPHA_FLOOR).run(cov, data)
    assert result.converged and result.skipped == 0 and result.sweeps < 50
    with pytest.raises(ValueError, match=r"alpha must lie in \[0.001, 1\] \(below 0.001 the site updates"):
        EP(Probit(), projection, ALPHA_FLOOR / 10).run(cov, data)
    below = {"wasserstein": 1e-4, "kl": 1e-8}[projection]  # what the refusal keeps out (sweeps run unchecked)
    _, sweeps, change, _, _ = sweep_until(EP(Probit(), projection, below), cov, data, zero_sites(20), 200, 1e-9)
    assert int(sweeps) == 200 and float(change) > 1e-9
