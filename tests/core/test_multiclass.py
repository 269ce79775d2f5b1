"""Multi-class EP / SEP (Villacampa-Calvo & Hernández-Lobato 2017) against scipy quadrature, dense-algebra and finite-difference oracles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import log_ndtr

from pep_gp.core.models import multiclass_ep as ep
from pep_gp.core.models import multiclass_sites as sites
from pep_gp.core.models.multiclass import CholeskyFactor, MultiClassGP, NaturalFactor
from tests import oracles



def eqx_set(params, where, value):
    """``params`` with the leaf ``where(params)`` replaced by ``value``."""
    target = where(params)
    return jax.tree_util.tree_map(lambda leaf: value if leaf is target else leaf, params)

def _problem(n=24, num_classes=3, num_inducing=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = np.arange(n) % num_classes
    x[:, 0] += y  # separable-ish classes
    model = MultiClassGP(num_classes)
    inducing = rng.normal(size=(num_classes, num_inducing, 2))
    params = model.init(x, num_inducing, inducing=inducing, noise=0.3, seed=seed)
    return model, params, jnp.asarray(x), jnp.asarray(y)


def _random_gaussian(rng, m):
    a = rng.normal(size=(m, m))
    return rng.normal(size=m), a @ a.T / m + 0.3 * np.eye(m)


# --------------------------------------------------------------------------------------------------
# Factor refinement against the tilted distribution (eqs. 34, 43-55 with the sign fix of eq. 53)


@pytest.mark.heavy
@pytest.mark.parametrize("gap, alpha", [(1.5, 1.0), (-0.3, 1.0), (-4.0, 1.0), (-0.3, 0.5), (-4.0, 0.1)])
def test_refined_sites_match_tilted_moments_by_quadrature(gap, alpha):
    """q_new = cavity × site^α has the moments of cavity × φ^α (Power EP; α = 1 is eqs. 43–55)."""
    rng = np.random.default_rng(3)
    m = 3
    cavities = [_random_gaussian(rng, m) for _ in range(2)]  # (mean, cov) of f̄^{y_i}, f̄^k
    ups = [rng.normal(size=m), rng.normal(size=m)]
    fitc_y, fitc_k = 0.4, 0.7
    a = [u @ mu for u, (mu, _) in zip(ups, cavities)]
    cavities[0] = (cavities[0][0] + ups[0] * (gap - a[0] + a[1]) / (ups[0] @ ups[0]), cavities[0][1])
    a = [u @ mu for u, (mu, _) in zip(ups, cavities)]
    w = [u @ cov @ u for u, (_, cov) in zip(ups, cavities)]
    label, other = sites.Projections(a[0], w[0]), sites.Projections(a[1], w[1])
    new = sites.refine(label, other, fitc_y, fitc_k, alpha)
    z, tilted_y, tilted_k = oracles.probit_tilted_moments_2d(a[0], w[0], a[1], w[1], fitc_y + fitc_k, alpha)
    tol = 1e-9  # α = 1: closed form; α < 1: the composite rule of pep_gp.core.quadrature.ProbitPowerQuadrature
    assert float(sites.log_partition(label, other, fitc_y, fitc_k, alpha)) == pytest.approx(np.log(z), abs=tol)
    for (mu, cov), u, c1, c2, (t_mean, t_var), aa, ww in [
        (cavities[0], ups[0], new.label_precision, new.label_shift, tilted_y, a[0], w[0]),
        (cavities[1], ups[1], new.other_precision, new.other_shift, tilted_k, a[1], w[1]),
    ]:
        assert float(c1) > 0
        # q_new = cavity × site (dense), against the tilted moments of the class block, which differ from
        # the cavity only along u (linear-Gaussian conditioning on t = uᵀf̄).
        precision = np.linalg.inv(cov) + alpha * float(c1) * np.outer(u, u)
        q_cov = np.linalg.inv(precision)
        q_mean = q_cov @ (np.linalg.solve(cov, mu) + alpha * float(c2) * u)
        gain = cov @ u / ww
        np.testing.assert_allclose(q_mean, mu + gain * (t_mean - aa), rtol=1e3 * tol, atol=tol)
        np.testing.assert_allclose(q_cov, cov + np.outer(gain, gain) * (t_var - ww), rtol=1e3 * tol, atol=tol)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_power_sites_match_scipy_quad_at_every_cavity_width(alpha):
    """α < 1 at cavity/site variance ratios var/S from exactly 0 (a row far from every inducing input) to
    1e4: ``log Z`` and its gradient in (a, w) — which the energy's gradient uses — within 1e-9 (relative to
    1 + |ref|) of scipy quadrature, the refined sites (from ``g`` and ``ν``, eqs. 43–55) within 1e-6
    relative; the gradient in s is finite and the chain of the others; nothing NaN.
    (64-node Gauss–Hermite gave NaN sites and gradients at var = 0 and erred by ~1e-2 at var/S = 100.)"""
    label_fitc, other_fitc = 0.3, 0.5
    fitc = label_fitc + other_fitc

    def total(a_y, w_y, w_k, s_y, a_k):
        return sites.log_partition(sites.Projections(a_y, w_y), sites.Projections(a_k, w_k), s_y, other_fitc, alpha)

    value_and_grads = jax.jit(jax.value_and_grad(total, argnums=(0, 1, 2, 3)))  # compiled once for the 30 cases
    refine = jax.jit(lambda a_y, w_y, a_k, w_k: sites.refine(sites.Projections(a_y, w_y), sites.Projections(a_k, w_k),
                                                             label_fitc, other_fitc, alpha))
    for ratio in (0.0, 1e-3, 1.0, 1e2, 1e4):
        for gap in (-12.0, -1.0, 0.0, 2.0, -np.sqrt(ratio * fitc), 3.0 * np.sqrt(ratio * fitc)):
            w_y, w_k = 0.25 * ratio * fitc, 0.75 * ratio * fitc  # w_y + w_k = var of d
            a_y, a_k = 0.3 + gap, 0.3
            log_z, slope, curvature = oracles.probit_power_moments(gap / np.sqrt(fitc), ratio, alpha)
            g, nu = slope / np.sqrt(fitc), (slope**2 - curvature) / fitc  # per unit of d (eqs. 39–42)
            value, grads = value_and_grads(*(jnp.asarray(v, jnp.float64) for v in (a_y, w_y, w_k, label_fitc, a_k)))
            new = refine(*(jnp.asarray(v, jnp.float64) for v in (a_y, w_y, a_k, w_k)))
            scale_y, scale_k = alpha * (1 - nu * w_y), alpha * (1 - nu * w_k)
            got = np.array([value, *grads, *new], dtype=float)
            assert np.all(np.isfinite(got)), (ratio, gap)
            np.testing.assert_allclose(got[:4], [log_z, g, 0.5 * curvature / fitc, 0.5 * curvature / fitc],
                                       rtol=1e-9, atol=1e-9, err_msg=f"var/S={ratio}, gap={gap}")
            # The sites divide by α(1 − νw): at w/S = 7500 and α = 0.1 that amplifies ν's error ~1e4-fold.
            np.testing.assert_allclose(got[5:], [nu / scale_y, (g + nu * a_y) / scale_y, nu / scale_k,
                                                 (-g + nu * a_k) / scale_k], rtol=1e-6, err_msg=f"var/S={ratio}, gap={gap}")
            # log Z depends on s only through (gap/√S, var/S): its s-gradient is that chain of the others
            # (against the oracle it would carry var/S = 1e4 times the oracle's own error in ∂/∂w).
            chain = -0.5 * gap / fitc * grads[0] - (w_y + w_k) / fitc * grads[1]
            assert float(got[4]) == pytest.approx(float(chain), rel=1e-12, abs=1e-12)


def test_site_removal_and_normaliser_change_match_dense_algebra():
    rng = np.random.default_rng(5)
    m = 4
    mu, cov = _random_gaussian(rng, m)
    u, o = rng.normal(size=m), rng.normal(size=m)
    c1, c2 = 0.2 / (o @ cov @ o), -0.4  # a proper cavity: 1 − C¹oᵀVo = 0.8
    cav_prec = np.linalg.inv(cov) - c1 * np.outer(o, o)
    cav_cov = np.linalg.inv(cav_prec)
    cav_mean = cav_cov @ (np.linalg.solve(cov, mu) - c2 * o)
    proj, d = sites.remove_site(u @ cov @ u, u @ cov @ o, o @ cov @ o, u @ mu, o @ mu, c1, c2)
    assert float(d) > 0
    assert float(proj.mean) == pytest.approx(u @ cav_mean, rel=1e-10)
    assert float(proj.var) == pytest.approx(u @ cav_cov @ u, rel=1e-10)

    def g(mean, covariance):  # eq. (59) without the constant
        return 0.5 * np.linalg.slogdet(covariance)[1] + 0.5 * mean @ np.linalg.solve(covariance, mean)

    change = sites.log_normaliser_change(c1, c2, o @ cov @ o, o @ mu)
    assert float(change) == pytest.approx(g(cav_mean, cav_cov) - g(mu, cov), rel=1e-10)


# --------------------------------------------------------------------------------------------------
# SEP and EP


def _sep_update(model, params, x, y, damping):
    size = model.data_size(y)
    shared = model.step_shared(params, size)
    stats = model.site_stats(params, shared, x, y, jnp.ones(x.shape[0], bool))
    return model.site_update(params, shared, stats, size, damping)


@jax.jit
def _sep_step(model, params, x, y, damping):
    return _sep_update(model, params, x, y, damping)[0]


_ep_step = jax.jit(lambda model, p, s, x, y, damping: ep.update(model, p, s, x, y, jnp.ones(x.shape[0], bool), damping))
_ep_evidence = jax.jit(ep.log_evidence)
_energy = jax.jit(lambda model, params, x, y: model.energy(params, x, y))
_energy_grad = jax.jit(lambda model, params, x, y: jax.grad(model.energy)(params, x, y))


def _run_sep(model, params, x, y, iterations, damping):
    trace = []
    for _ in range(iterations):
        params = _sep_step(model, params, x, y, damping)
        trace.append(params.factor)
    return params, trace


def _run_ep(model, params, x, y, iterations, damping, state=None):
    state = ep.init_sites(x.shape[0], params) if state is None else state
    trace = []
    for _ in range(iterations):
        params, state, skipped = _ep_step(model, params, state, x, y, damping)
        assert int(skipped) == 0
        trace.append(params.factor)
    return params, state, trace


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_sep_with_one_binary_data_point_equals_ep_at_every_iteration(alpha):
    model, params, x, y = _problem(n=2, num_classes=2)
    model = MultiClassGP(model.num_classes, alpha=alpha)
    x, y = x[:1], y[:1]
    _, sep_trace = _run_sep(model, params, x, y, 15, 0.6)
    ep_params, state, ep_trace = _run_ep(model, params, x, y, 15, 0.6)
    for sep_factor, ep_factor in zip(sep_trace, ep_trace):
        np.testing.assert_allclose(sep_factor.precision, ep_factor.precision, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(sep_factor.shift, ep_factor.shift, rtol=1e-10, atol=1e-12)
    sep_params = ep_params._replace(factor=sep_trace[-1])
    assert float(_energy(model, sep_params, x, y)) == pytest.approx(
        float(_ep_evidence(model, ep_params, state, x, y)), abs=1e-10
    )


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_sep_with_one_data_point_equals_ep_for_three_classes():
    """One point, C = 3: its two factors share the label class. With symmetric other classes EP's two
    label sites coincide, so SEP's averaged removal (n_{y} = C − 1 = 2) is exact and the fixed points agree."""
    _, params, x, y = _problem(n=3, num_classes=3)
    x, y = x[:1], y[:1]  # label 0
    model = MultiClassGP(3)  # N_c = (1, 0, 0): n_c = (2, 1, 1)
    params = params._replace(
        kernel=jax.tree_util.tree_map(lambda a: a.at[2].set(a[1]), params.kernel),
        inducing=params.inducing.at[2].set(params.inducing[1]),
    )
    sep_params, _ = _run_sep(model, params, x, y, 60, 0.7)
    ep_params, state, _ = _run_ep(model, params, x, y, 60, 0.7)
    np.testing.assert_allclose(sep_params.factor.precision, ep_params.factor.precision, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sep_params.factor.shift, ep_params.factor.shift, rtol=1e-9, atol=1e-12)
    assert float(_energy(model, sep_params, x, y)) == pytest.approx(
        float(_ep_evidence(model, ep_params, state, x, y)), abs=1e-9
    )


@pytest.mark.heavy
def test_ep_incremental_sums_equal_the_site_sums():
    model, params, x, y = _problem()
    params, state, _ = _run_ep(model, params, x, y, 5, 0.5)
    rebuilt = ep.site_factor(state, y)
    np.testing.assert_allclose(params.factor.precision, rebuilt.precision, atol=1e-10)
    np.testing.assert_allclose(params.factor.shift, rebuilt.shift, atol=1e-10)


@pytest.mark.exhaustive
@pytest.mark.slow
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_eq10_matches_finite_differences_of_log_zq_at_ep_convergence(alpha):
    """Also at the fixed point of Power EP (α = 0.5), where the same cavity-held gradient is exact."""
    model, params, x, y = _problem(n=18)
    model = MultiClassGP(model.num_classes, alpha=alpha)
    params, state, _ = _run_ep(model, params, x, y, 200, 0.7)
    evidence = lambda p, s: _ep_evidence(model, p, s, x, y)
    grad = jax.jit(jax.grad(ep.log_evidence, argnums=1), static_argnums=0)(model, params, state, x, y)
    h = 1e-5
    leaves = {"noise": lambda p: p.raw_noise, "amplitude": lambda p: p.kernel.variance.raw,
              "lengthscales": lambda p: p.kernel.lengthscales.raw, "inducing": lambda p: p.inducing}
    for name, index in [("noise", (0,)), ("amplitude", (1,)), ("lengthscales", (2, 1)), ("inducing", (1, 2, 0))]:
        values = []
        for sign in (1.0, -1.0):
            moved = eqx_set(params, leaves[name], leaves[name](params).at[index].add(sign * h))
            moved, moved_state, _ = _run_ep(model, moved, x, y, 120, 0.7, state)
            values.append(float(evidence(moved, moved_state)))
        fd = (values[0] - values[1]) / (2 * h)
        assert float(leaves[name](grad)[index]) == pytest.approx(fd, rel=1e-5, abs=1e-7), name


def test_sep_batch_converges_to_a_fixed_point():
    model, params, x, y = _problem()
    params, trace = _run_sep(model, params, x, y, 120, 0.5)
    again, _ = _run_sep(model, params, x, y, 1, 1.0)
    np.testing.assert_allclose(again.factor.precision, params.factor.precision, rtol=1e-8, atol=1e-8)
    eigenvalues = np.linalg.eigvalsh(np.asarray(params.factor.precision))
    assert eigenvalues.min() > -1e-10  # sums of C¹υυᵀ with C¹ > 0


@pytest.mark.heavy
def test_non_finite_site_statistics_are_rejected():
    model, params, x, y = _problem()
    n, size = x.shape[0], model.data_size(y)
    shared = model.step_shared(params, size)
    stats = jax.jit(lambda p: model.site_stats(p, shared, x, y, jnp.ones(n, bool)))(params)
    bad = stats._replace(shift=stats.shift.at[0, 0].set(jnp.nan))
    kept, _, accepted = jax.jit(model.site_update)(params, shared, bad, size, 1.0)
    assert not bool(accepted)
    np.testing.assert_array_equal(kept.factor.shift, params.factor.shift)
    np.testing.assert_array_equal(kept.factor.precision, params.factor.precision)


# --------------------------------------------------------------------------------------------------
# The energy contract (pep_gp.pipeline.models.protocol): masking, chunking, gradients


def _padded_chunks(x, y, size):
    for start in range(0, x.shape[0], size):
        xc, yc = x[start : start + size], y[start : start + size]
        pad = size - xc.shape[0]
        mask = jnp.arange(size) < xc.shape[0]
        yield jnp.concatenate([xc, 100.0 * jnp.ones((pad, x.shape[1]))]), jnp.concatenate([yc, jnp.zeros(pad, int)]), mask


@pytest.mark.exhaustive
@pytest.mark.heavy
@pytest.mark.parametrize("factor", ["natural", "cholesky"])
def test_chunked_masked_terms_sum_to_the_whole(factor):
    model, params, x, y = _problem()  # 24 rows: chunks of 10, 10 and 4 + 6 padding
    if factor == "natural":
        params, _ = _run_sep(model, params, x, y, 3, 0.5)
    else:
        params = model.init(np.asarray(x), 4, noise=0.3, factor="cholesky")
    n, size = x.shape[0], model.data_size(y)
    value_and_grad = jax.jit(jax.value_and_grad(lambda p, *rows: model.data_energy(p, model.step_shared(p, size),
                                                                                     *rows)))
    whole = value_and_grad(params, x, y, jnp.ones(n, bool))
    parts = [value_and_grad(params, *chunk) for chunk in _padded_chunks(x, y, 10)]
    assert float(sum(v for v, _ in parts)) == pytest.approx(float(whole[0]), rel=1e-12)
    summed = jax.tree_util.tree_map(lambda *g: sum(g), *[g for _, g in parts])
    for a, b in zip(jax.tree_util.tree_leaves(summed), jax.tree_util.tree_leaves(whole[1])):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    if factor == "natural":
        site_stats = jax.jit(lambda p, *rows: model.site_stats(p, model.step_shared(p, size), *rows))
        stats = [site_stats(params, *chunk) for chunk in _padded_chunks(x, y, 10)]
        total = site_stats(params, x, y, jnp.ones(n, bool))
        for a, b in zip(jax.tree_util.tree_map(lambda *s: sum(s), *stats), total):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_direct_mode_gradient_matches_finite_differences():
    model, _, x, y = _problem(n=15)
    params = model.init(np.asarray(x), 3, noise=0.3, factor="cholesky")
    rng = np.random.default_rng(1)
    params = params._replace(factor=CholeskyFactor(
        jnp.asarray(rng.normal(size=params.factor.shift.shape)), params.factor.chol * 1.5
    ))
    grad = _energy_grad(model, params, x, y)
    h = 1e-6
    leaves, treedef = jax.tree_util.tree_flatten(params)
    grad_leaves = jax.tree_util.tree_leaves(grad)
    for i, (leaf, g) in enumerate(zip(leaves, grad_leaves)):
        flat_index = np.unravel_index(int(rng.integers(leaf.size)), leaf.shape)
        if leaf.ndim == 3 and i == len(leaves) - 1:  # the Cholesky factor: a lower-triangular entry
            flat_index = (1, 2, 1)
        values = []
        for sign in (1.0, -1.0):
            moved = list(leaves)
            moved[i] = leaf.at[flat_index].add(sign * h)
            values.append(float(_energy(model, jax.tree_util.tree_unflatten(treedef, moved), x, y)))
        fd = (values[0] - values[1]) / (2 * h)
        assert float(g[flat_index]) == pytest.approx(fd, rel=1e-5, abs=1e-6), i


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_paper_mode_holds_the_factor_and_agrees_in_value_with_direct_mode():
    model, params, x, y = _problem()
    params, _ = _run_sep(model, params, x, y, 5, 0.5)
    grad = _energy_grad(model, params, x, y)
    assert float(jnp.abs(grad.factor.precision).max()) == 0.0 and float(jnp.abs(grad.factor.shift).max()) == 0.0
    chol = jnp.linalg.cholesky(params.factor.precision + 1e-13 * jnp.eye(4))
    direct = params._replace(factor=CholeskyFactor(params.factor.shift, chol))
    assert float(_energy(model, direct, x, y)) == pytest.approx(float(_energy(model, params, x, y)), rel=1e-8)
    assert isinstance(params.factor, NaturalFactor)


def _variational_bound(model, params, x, y):
    """Dense oracle: −KL(q‖p) + Σ_{i,k≠y_i} E_q[log Φ((f_i^{y_i} − f_i^k)/√(s^{y_i} + s^k))] (1-D quadrature)."""
    amp, noise = np.asarray(params.kernel.variance.value), np.exp(params.raw_noise)
    ls = np.asarray(params.kernel.lengthscales.value)
    noise = noise + model.jitter * amp
    total, moments = 0.0, []
    for c in range(model.num_classes):
        z = np.asarray(params.inducing[c])
        kzz = oracles.se_kernel(z, z, ls[c], amp[c]) + noise[c] * np.eye(z.shape[0])
        lam, eta = np.asarray(params.factor.precision[c]), np.asarray(params.factor.shift[c])
        cov = np.linalg.inv(np.linalg.inv(kzz) + lam)
        mean = cov @ eta
        kl = 0.5 * (np.trace(np.linalg.solve(kzz, cov)) + mean @ np.linalg.solve(kzz, mean) - z.shape[0]
                    + np.linalg.slogdet(kzz)[1] - np.linalg.slogdet(cov)[1])
        total -= kl
        ups = np.linalg.solve(kzz, oracles.se_kernel(z, np.asarray(x), ls[c], amp[c])).T
        fitc = amp[c] + noise[c] - np.sum(ups * oracles.se_kernel(np.asarray(x), z, ls[c], amp[c]), axis=1)
        moments.append((ups @ mean, np.sum((ups @ cov) * ups, axis=1), fitc))
    grid = np.linspace(-12, 12, 4001)
    for i, label in enumerate(np.asarray(y)):
        for k in range(model.num_classes):
            if k == label:
                continue
            m = moments[label][0][i] - moments[k][0][i]
            v = moments[label][1][i] + moments[k][1][i]
            s = moments[label][2][i] + moments[k][2][i]
            dens = np.exp(-0.5 * grid**2) / np.sqrt(2 * np.pi)
            total += np.trapezoid(dens * log_ndtr((m + np.sqrt(v) * grid) / np.sqrt(s)), grid)
    return total


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_small_power_approaches_the_variational_bound():
    model, params, x, y = _problem(n=12)
    params, _ = _run_sep(model, params, x, y, 10, 0.5)
    bound = _variational_bound(model, params, x, y)
    gaps = [abs(float(_energy(MultiClassGP(model.num_classes, alpha=a), params, x, y)) - bound) for a in (1e-2, 1e-3)]
    assert gaps[1] < 2e-3 * abs(bound)
    assert gaps[1] == pytest.approx(gaps[0] / 10, rel=0.1)  # the gap shrinks linearly in α


# --------------------------------------------------------------------------------------------------
# Predictive distribution (eq. 68)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_predictive_quadrature_matches_scipy_quad():
    """Within 1e-9 of ``scipy.integrate.quad`` (absolute, per class probability) on 40 random rows (C = 3..7,
    variances 1e-3..10: latents up to 100× sharper than others) and three hand-picked ones; mass 1 to 1e-9."""
    rng = np.random.default_rng(11)
    rows = [(np.array([0.3, -0.2, 0.1, 0.0]), np.array([1.0, 0.5, 2.0, 1.2])),
            (np.array([2.0, 0.0, -1.0, 1.8]), np.array([0.3, 3.0, 1.0, 0.01])),
            (np.array([0.0, 0.5, 0.2, -0.3]), np.array([4.0, 0.01, 1.0, 0.2]))]
    for _ in range(40):
        c = rng.integers(3, 8)
        rows.append((rng.normal(size=c) * 1.5, 10 ** rng.uniform(-3, 1, size=c)))
    log_probs = jax.jit(sites.predictive_log_probs)  # one program per number of classes
    for mean, var in rows:
        probs = np.exp(np.asarray(log_probs(jnp.asarray(mean[None]), jnp.asarray(var[None]))))[0]
        np.testing.assert_allclose(probs, oracles.multiclass_predictive_probabilities(mean, var), rtol=0, atol=1e-9)
        assert probs.sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.exhaustive
@pytest.mark.slow
def test_refreshed_shared_quantities_equal_fresh_ones_after_a_site_update():
    """After an EP update (only the factor moves) site_update keeps the prior factors and recomputes
    the cavities: the result equals step_shared of the updated params."""
    model, params, x, y = _problem()
    shared = model.step_shared(params, model.data_size(y))
    updated, refreshed, _ = _sep_update(model, params, x, y, 0.5)
    fresh = model.step_shared(updated, model.data_size(y))
    for a, b in zip(jax.tree_util.tree_leaves(refreshed), jax.tree_util.tree_leaves(fresh)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert not np.allclose(refreshed.cavity.mean, shared.cavity.mean)  # the factor did move


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_one_class_minibatch_at_small_n_keeps_a_valid_factor():
    """Eight rows of class 0 hold 16 factors of class 0, more than the n_0 = 13.3 of N = 10 rows: the
    step shrinks to ρ_0 = n_0/n_{B,0}, so the old factor is dropped (kept fraction exactly 0, not the
    negative 1 − 16/13.3) and the new precision is the batch's sites scaled by n_0/n_{B,0}; the other
    classes keep 1 − 8/13.3 of theirs."""
    model, params, x, y = _problem()
    params, _ = _run_sep(model, params, x, y, 5, 0.5)  # a non-zero factor to keep or drop
    rows, size = np.flatnonzero(np.asarray(y) == 0)[:8], 10.0 * model.data_size(y) / y.shape[0]  # N = 10
    shared = model.step_shared(params, size)
    stats = model.site_stats(params, shared, x[rows], y[rows], jnp.ones(8, bool))
    updated, _, accepted = model.site_update(params, shared, stats, size, 1.0)
    counts = np.asarray(model.factor_counts(size))
    assert bool(accepted) and float(stats.count[0]) == 16.0 > counts[0]
    np.testing.assert_allclose(updated.factor.precision[0], counts[0] / 16.0 * stats.precision[0], rtol=1e-12)
    keep = 1.0 - 8.0 / counts[1:]
    np.testing.assert_allclose(updated.factor.precision[1:], keep[:, None, None] * params.factor.precision[1:]
                               + stats.precision[1:], rtol=1e-12, atol=1e-14)
    for precision in np.asarray(updated.factor.precision):
        assert np.linalg.eigvalsh(precision).min() > -1e-10 * np.abs(precision).max()


@pytest.mark.heavy
def test_minibatch_updates_of_one_batch_reach_the_fixed_point_of_its_copies():
    """SEP with scale N/|B| = 3: updating on one batch as if it were a third of N = 3|B| rows reaches the
    same tied factor as full-batch SEP on the batch repeated three times (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1)."""
    model, params, x, y = _problem()
    n, size = x.shape[0], 3.0 * model.data_size(y)  # the rows of each class in the three copies
    np.testing.assert_array_equal(size, model.data_size(jnp.tile(y, 3)))

    @jax.jit
    def minibatch_step(p):
        shared = model.step_shared(p, size)
        stats = model.site_stats(p, shared, x, y, jnp.ones(n, bool))
        return model.site_update(p, shared, stats, size, 0.5)[0]

    minibatch, _ = jax.lax.scan(lambda p, _: (minibatch_step(p), None), params, None, length=3000)
    full, _ = _run_sep(model, params, jnp.tile(x, (3, 1)), jnp.tile(y, 3), 600, 0.5)  # steps of ρ/3 vs ρ
    for mine, theirs in zip(minibatch.factor, full.factor):  # to 1e-9 of each array's largest entry
        np.testing.assert_allclose(mine, theirs, rtol=0, atol=1e-9 * np.abs(theirs).max())
    alone, _ = _run_sep(model, params, x, y, 200, 0.5)  # the batch as the whole data: scale 1, another point
    assert not np.allclose(alone.factor.precision, minibatch.factor.precision, rtol=0.1)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_untied_ep_skips_and_counts_rows_whose_refined_sites_are_not_finite(monkeypatch):
    """Untied EP is guarded like SEP: a row whose refinement is not finite keeps its old sites and is
    counted in ``skipped``; the per-class sums stay finite and the other rows are refined."""
    model, params, x, y = _problem()
    state = ep.init_sites(x.shape[0], params)
    refine = sites.refine

    def refine_with_a_nan_row(*args, **kwargs):
        refined = refine(*args, **kwargs)
        return refined._replace(label_precision=refined.label_precision.at[3].set(jnp.nan))

    monkeypatch.setattr(sites, "refine", refine_with_a_nan_row)
    updated, new_state, skipped = ep.update(model, params, state, x, y, jnp.ones(x.shape[0], bool), 1.0)
    assert int(skipped) == 1
    assert np.all(np.isfinite(updated.factor.precision)) and np.all(np.isfinite(updated.factor.shift))
    np.testing.assert_array_equal(new_state.scalars.label_precision[3], state.scalars.label_precision[3])
    np.testing.assert_array_equal(new_state.directions[3], state.directions[3])
    assert np.count_nonzero(np.asarray(new_state.scalars.other_precision)) > 0  # the other rows moved


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_float32_kernel_products_keep_energy_gradient_and_site_statistics():
    """``MultiClassGP(kernel_products="float32")`` on 60-dimensional inputs after a few SEP updates: the
    energy within 1e-7 relative of the float64 model's, its gradient and the site statistics within
    1e-4; another dtype is refused by name."""
    rng = np.random.default_rng(4)
    x = rng.uniform(size=(40, 60))
    y = np.arange(40) % 3
    x[:, :3] += np.eye(3)[y]
    exact = MultiClassGP(3)
    fast = MultiClassGP(3, kernel_products="float32")
    params, _ = _run_sep(exact, exact.init(x, 6, noise=0.3), jnp.asarray(x), jnp.asarray(y), 3, 0.5)
    x, y, mask = jnp.asarray(x), jnp.asarray(y), jnp.ones(40, bool)
    energies = [jax.jit(jax.value_and_grad(m.energy))(params, x, y) for m in (exact, fast)]
    (value, grad), (fast_value, fast_grad) = energies
    assert float(fast_value) == pytest.approx(float(value), rel=1e-7)
    assert float(fast_value) != float(value)  # the products did run in float32
    for a, b in zip(jax.tree_util.tree_leaves(fast_grad), jax.tree_util.tree_leaves(grad)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(b))))
    stats = [jax.jit(lambda p, m=m: m.site_stats(p, m.step_shared(p, m.data_size(y)), x, y, mask))(params)
             for m in (fast, exact)]
    for a, b in zip(*stats):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(jnp.max(jnp.abs(b))))
    with pytest.raises(ValueError, match="kernel_products must be one of .*'half'"):
        MultiClassGP(3, kernel_products="half")
