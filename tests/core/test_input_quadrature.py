"""The ψ-statistics of every kernel by quadrature over a diagonal Gaussian input (:mod:`pep_gp.core.input_quadrature`)
against Monte Carlo (tolerance from its standard error), the squared exponential's closed forms and the linear
kernel's; and the rules themselves against the normal's moments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss

from pep_gp.core import bank
from pep_gp.core.input_quadrature import (MAX_PRODUCT_NODES, gauss_hermite_rule, input_rule,
                                          quadrature_input_marginals, sobol_rule)
from pep_gp.core.kernels import (Constant, Linear, Matern12, Matern32, Matern52, Periodic, RationalQuadratic,
                                 SquaredExponential)
from pep_gp.core.psi_statistics import (Projected, fixed_input_marginals, pair_terms, trace_weights,
                                        uncertain_input_marginals)

G, M, D = 2, 4, 2
DRAWS = 20_000


def _layer(kernel, dims=D, seed=0):
    """A bank of ``G`` GPs with ``kernel`` on ``dims`` inputs, its prior factors and a random Gaussian over ``u``
    in projected form (any ``a`` and lower-triangular ``P``: the moments are linear in ψ₀, ψ₁, ψ₂ for each)."""
    rng = np.random.default_rng(seed)
    kernel = kernel.bank(G, dims, rng.uniform(0.8, 1.5, dims))
    z = jnp.asarray(rng.normal(size=(G, M, dims)))
    gps = bank.Bank(kernel, z, 1e-6 * kernel.amplitude())
    prior = bank.prior_factors(gps)
    spread = jnp.asarray(np.tril(0.3 * rng.normal(size=(G, M, M))))
    gaussian = Projected(jnp.asarray(rng.normal(size=(G, M))), spread, jnp.zeros(G))
    mean = jnp.asarray(rng.normal(scale=0.7, size=(2, dims)))
    var = jnp.asarray(rng.uniform(0.05, 0.3, (2, dims)))
    return gps, prior, gaussian, mean, var


KERNELS = {
    "matern12": Matern12(), "matern32": Matern32(), "matern52": Matern52(), "rq": RationalQuadratic(alpha=0.7),
    "periodic": Periodic(period=2.0), "linear": Linear(0.5) + Constant(0.3), "matern52+linear": Matern52() + Linear(),
    "se*periodic": SquaredExponential() * Periodic(period=3.0), "matern32 on column 1": Matern32(active_dims=[1]),
}


HEAVY_KERNELS = {"matern52+linear", "matern12"}  # 8 s each on two cores; the others take the same rule


@pytest.mark.heavy
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.heavy) if name in HEAVY_KERNELS else name
                                  for name in KERNELS])
def test_moments_at_a_gaussian_input_match_monte_carlo(name):
    """``ψ₁ᵀa`` and ``ψ₀ − tr(K⁻¹ψ₂) + tr(PᵀPψ₂) + aᵀψ₂a − (ψ₁ᵀa)²`` by the rule (16 points per dimension)
    against 2·10⁴ draws of the input (the moments at each drawn row exact, the law of total variance over the
    rows), within 4 standard errors of the Monte Carlo means."""
    gps, prior, gaussian, mean, var = _layer(KERNELS[name])
    rule = input_rule(gps.kernel, D, 16)
    moments = quadrature_input_marginals(gps, prior, gaussian, rule, mean, var)
    normal = np.random.default_rng(1).normal(size=(DRAWS, 1, D))
    draws = (mean + jnp.sqrt(var) * normal).reshape(-1, D)  # [DRAWS·2, D]: both rows
    at_draws = fixed_input_marginals(gps, prior, gaussian, draws)
    draw_mean, draw_var = (np.asarray(v).reshape(DRAWS, 2, G) for v in at_draws)
    mc_mean = np.mean(draw_mean, axis=0)
    spread = draw_var + (draw_mean - mc_mean) ** 2  # its mean is the variance
    mc_var = np.mean(spread, axis=0)
    error_mean, error_var = np.std(draw_mean, axis=0) / DRAWS**0.5, np.std(spread, axis=0) / DRAWS**0.5
    assert np.all(np.abs(moments.mean - mc_mean) < 4 * error_mean), (moments.mean, mc_mean)
    assert np.all(np.abs(moments.var - mc_var) < 4 * error_var), (moments.var, mc_var)


@pytest.mark.heavy
def test_the_squared_exponential_by_quadrature_is_its_closed_form():
    """The rule on the squared exponential (16 points per dimension) against Titsias & Lawrence's ψ-statistics
    (:func:`~pep_gp.core.psi_statistics.uncertain_input_marginals`): the integrand is smooth, so the
    Gauss–Hermite error is far below 1e-9."""
    gps, prior, gaussian, mean, var = _layer(SquaredExponential())
    closed = uncertain_input_marginals(gps, gaussian, pair_terms(gps, trace_weights(prior, gaussian)), mean, var)
    rule = gauss_hermite_rule(D, 16)
    by_rule = quadrature_input_marginals(gps, prior, gaussian, rule, mean, var)
    np.testing.assert_allclose(by_rule.mean, closed.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(by_rule.var, closed.var, rtol=1e-9)


@pytest.mark.heavy
def test_the_linear_kernel_takes_its_closed_form():
    """A linear kernel's ψ-statistics in closed form in numpy, ``ψ₀ = σ²Σ(μ² + s)``, ``ψ₁ = σ²Zμ``,
    ``ψ₂ = σ⁴Z(μμᵀ + diag s)Zᵀ``, equal the rule's 2 points per dimension (exact for its degree) to rounding;
    ``M ≤ D`` so that ``K_uu`` has full rank and the FITC part is above the jitter without a clamp."""
    rng = np.random.default_rng(3)
    dims = 5
    kernel = Linear(0.7).bank(G, dims)
    z = jnp.asarray(rng.normal(size=(G, M, dims)))
    gps = bank.Bank(kernel, z, 1e-3 * kernel.amplitude())
    prior = bank.prior_factors(gps)
    gaussian = Projected(jnp.asarray(rng.normal(size=(G, M))), jnp.asarray(np.tril(0.3 * rng.normal(size=(G, M, M)))),
                         jnp.zeros(G))
    mean, var = rng.normal(size=(3, dims)), rng.uniform(0.1, 1.0, (3, dims))
    rule = input_rule(kernel, dims)
    assert rule.nodes.shape == (2**dims, dims)
    moments = quadrature_input_marginals(gps, prior, gaussian, rule, jnp.asarray(mean), jnp.asarray(var))
    sf2, d = 0.7, 1e-3 * 0.7
    for g in range(G):
        zg = np.asarray(z[g])
        kuu = sf2 * zg @ zg.T + d * np.eye(M)
        a, p = np.asarray(gaussian.mean_weights[g]), np.asarray(gaussian.spread[g])
        for b in range(3):
            psi0 = sf2 * np.sum(mean[b] ** 2 + var[b]) + d
            psi1 = sf2 * zg @ mean[b]
            psi2 = sf2**2 * zg @ (np.outer(mean[b], mean[b]) + np.diag(var[b])) @ zg.T
            expected_mean = psi1 @ a
            expected_var = (psi0 - np.trace(np.linalg.solve(kuu, psi2)) + np.trace(p.T @ p @ psi2)
                            + a @ psi2 @ a - expected_mean**2)
            np.testing.assert_allclose(moments.mean[b, g], expected_mean, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(moments.var[b, g], expected_var, rtol=1e-8)


@pytest.mark.exhaustive
@pytest.mark.heavy  # 6 s on two cores
def test_at_zero_variance_the_rule_is_the_fixed_row():
    gps, prior, gaussian, mean, _ = _layer(Matern52())
    fixed = fixed_input_marginals(gps, prior, gaussian, mean)
    moments = quadrature_input_marginals(gps, prior, gaussian, input_rule(gps.kernel, D), mean, jnp.zeros_like(mean))
    np.testing.assert_allclose(moments.mean, fixed.mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(moments.var, fixed.var, rtol=1e-12)


def test_the_rules_integrate_the_normals_moments():
    """Product Gauss–Hermite with ``n`` points is exact for ``E[ξ^k]`` up to ``k = 2n − 1`` per coordinate; the
    mirrored Sobol rule has mean exactly 0 and covariance near I; :func:`input_rule` picks the exact rule of a
    polynomial kernel and keeps a product rule within :data:`MAX_PRODUCT_NODES`."""
    rule = gauss_hermite_rule(2, 4)
    double_factorial = {0: 1, 2: 1, 4: 3, 6: 15}
    for i in range(8):
        for j in range(8):
            expected = double_factorial.get(i, 0) * double_factorial.get(j, 0)
            np.testing.assert_allclose(rule.weights @ (rule.nodes[:, 0] ** i * rule.nodes[:, 1] ** j), expected,
                                       atol=1e-11)
    np.testing.assert_allclose(np.sort(np.unique(rule.nodes[:, 0])), hermegauss(4)[0])
    sobol = sobol_rule(3, 256)
    np.testing.assert_allclose(sobol.weights @ sobol.nodes, 0.0, atol=1e-14)
    np.testing.assert_allclose(sobol.nodes.T @ (sobol.weights[:, None] * sobol.nodes), np.eye(3), atol=0.05)
    assert input_rule(Linear() * Linear(), 2).nodes.shape == (9, 2)  # degree 2: 3 points per dimension
    assert input_rule(Matern52(), 2).nodes.shape == (25, 2)
    assert input_rule(Matern52(), 4, 6).nodes.shape == (4**4, 4)  # 6⁴ > 256: 4 per dimension
    assert input_rule(Matern52(), 9).nodes.shape == (MAX_PRODUCT_NODES, 9)  # 2⁹ > 256: Sobol
    with pytest.raises(ValueError, match="at least 2"):
        input_rule(Matern52(), 2, 1)


@pytest.mark.heavy
def test_the_rule_runs_under_jit_and_differentiates():
    """The rule's nodes are constants: the moments compile and have finite gradients in the input's mean and
    variance and in the kernel's hyper-parameters (a Matérn kernel's kink is at a node only by accident)."""
    gps, prior, gaussian, mean, var = _layer(Matern32())
    rule = input_rule(gps.kernel, D)

    def total(kernel, mean, var):
        moments = quadrature_input_marginals(gps._replace(kernel=kernel), prior, gaussian, rule, mean, var)
        return jnp.sum(moments.mean) + jnp.sum(moments.var)

    grads = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(gps.kernel, mean, var)
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(grads))
    step = 1e-6
    shifted = total(gps.kernel, mean, var.at[0, 1].add(step)) - total(gps.kernel, mean, var.at[0, 1].add(-step))
    np.testing.assert_allclose(grads[2][0, 1], shifted / (2 * step), rtol=1e-6)
