"""ψ-statistics of the deep GP against a 50-digit reference: ψ₁, and the traces ``tr(Wψ₂)`` of
:func:`pep_gp.core.psi_statistics.psi2_traces` (written about the inducing inputs' centre, over the pairs
``m ≤ m'``) with their gradients w.r.t. every input, against the textbook formula (Titsias & Lawrence 2010)
evaluated term by term in mpmath and differentiated by central differences at 50 digits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest

from pep_gp.core.bank import Bank
from pep_gp.core.psi_statistics import pair_terms, psi1, psi2_traces
from tests import oracles

DIGITS = 50
STEP = mpmath.mpf("1e-20")  # central differences: truncation ~1e-40, round-off ~1e-30
RTOL = 1e-10


def _psi2(ell, sf2, z, mean, var, g, b, m, n):
    """``[ψ₂]_{g,b,m,n}`` from its definition's closed form, every operation in mpmath."""
    value = sf2[g] ** 2
    for j in range(len(mean[b])):
        spread = ell[g][j] ** 2 + 2 * var[b][j]
        centre = (z[g][m][j] + z[g][n][j]) / 2
        value *= mpmath.sqrt(ell[g][j] ** 2 / spread) * mpmath.exp(
            -(z[g][m][j] - z[g][n][j]) ** 2 / (4 * ell[g][j] ** 2) - (mean[b][j] - centre) ** 2 / spread)
    return value


def _psi1(ell, sf2, z, mean, var, g, b, m):
    value = sf2[g]
    for j in range(len(mean[b])):
        spread = ell[g][j] ** 2 + var[b][j]
        value *= mpmath.sqrt(ell[g][j] ** 2 / spread) * mpmath.exp(-(mean[b][j] - z[g][m][j]) ** 2 / (2 * spread))
    return value


def _objective(statistic, weights):
    """``J = Σ weights · statistic`` as an mpmath function of nested lists (ell, sf2, z, mean, var)."""
    def objective(ell, sf2, z, mean, var):
        return mpmath.fsum(w * statistic(ell, sf2, z, mean, var, *index) for index, w in weights.items())
    return objective


def _reference(objective, inputs):
    """``J`` and its gradient w.r.t. every entry of ``inputs`` (arrays), central differences at 50 digits."""
    with mpmath.workdps(DIGITS):
        values = [np.vectorize(mpmath.mpf, otypes=[object])(a) for a in inputs]
        evaluate = lambda vals: objective(*[v.tolist() for v in vals])
        grads = []
        for k, array in enumerate(values):
            grad = np.empty(array.shape, dtype=object)
            for index in np.ndindex(array.shape):
                up = [v.copy() for v in values]
                down = [v.copy() for v in values]
                up[k][index] += STEP
                down[k][index] -= STEP
                grad[index] = (evaluate(up) - evaluate(down)) / (2 * STEP)
            grads.append(grad.astype(float))
        return float(evaluate(values)), grads


def _case(seed, offset=0.0, var_range=(0.05, 1.0)):
    rng = np.random.default_rng(seed)
    g, m, d, b = 2, 4, 2, 3
    ell = rng.uniform(0.6, 2.0, (g, d))
    sf2 = rng.uniform(0.5, 1.5, g)
    z = offset + rng.normal(size=(g, m, d))
    mean = offset + rng.normal(size=(b, d))
    var = rng.uniform(*var_range, (b, d))
    roots = rng.normal(size=(g, 3, m, m))
    weights = roots @ np.swapaxes(roots, -1, -2) + np.eye(m)  # positive definite, as K⁻¹, PᵀP + εI, aaᵀ + εI
    cotangent = rng.uniform(0.5, 1.5, (b, g, 3))
    return ell, sf2, z, mean, var, weights, cotangent


def _assert_close(actual, expected, what):
    actual, expected = np.asarray(actual), np.asarray(expected)
    error = np.max(np.abs(actual - expected) / np.abs(expected))
    assert error <= RTOL, f"{what}: largest relative error {error:.2e}"


CASES = {"moderate": dict(seed=0), "offset 30": dict(seed=1, offset=30.0),
         "near-fixed input": dict(seed=2, var_range=(1e-9, 1e-7)), "wide input": dict(seed=3, var_range=(2.0, 5.0))}


@pytest.mark.heavy
@pytest.mark.parametrize("case", list(CASES))
def test_psi2_traces_and_gradients_match_mpmath(case):
    """``J = Σ_{b,g,r} u_bgr tr(W_gr ψ₂_gb)`` and ``∂J`` w.r.t. ℓ, σ_f², Z, the input's mean and variance and
    W (each entry to 1e-10 relative; ``∂J/∂W = Σ_b u ψ₂`` is the reference's ψ₂ itself)."""
    ell, sf2, z, mean, var, weights, cotangent = _case(**CASES[case])

    def objective(ell, sf2, z, mean, var, weights):
        kernel = oracles.se_bank(ell, sf2)
        traces = psi2_traces(kernel, z, pair_terms(Bank(kernel, z, jnp.zeros_like(sf2)), weights), mean, var)
        return jnp.sum(cotangent * traces)

    value, grads = jax.jit(jax.value_and_grad(objective, argnums=tuple(range(6))))(ell, sf2, z, mean, var, weights)
    coefficients = np.einsum("bgr,grij->gbij", cotangent, weights)
    per_entry = {index: coefficients[index] for index in np.ndindex(coefficients.shape)}
    expected, expected_grads = _reference(_objective(_psi2, per_entry), (ell, sf2, z, mean, var))
    _assert_close(value, expected, "J")
    for name, grad, reference in zip(("ell", "sf2", "z", "mean", "var"), grads, expected_grads):
        _assert_close(grad, reference, f"dJ/d{name}")
    with mpmath.workdps(DIGITS):
        tolist = lambda a: np.vectorize(mpmath.mpf, otypes=[object])(a).tolist()
        args = [tolist(a) for a in (ell, sf2, z, mean, var)]
        psi2 = np.array([[[[float(_psi2(*args, g, b, i, j)) for j in range(4)] for i in range(4)] for b in range(3)]
                         for g in range(2)])
    _assert_close(grads[5], np.einsum("bgr,gbij->grij", cotangent, psi2), "dJ/dW")


@pytest.mark.parametrize("case", ["moderate", "offset 30"])
def test_psi1_and_gradients_match_mpmath(case):
    ell, sf2, z, mean, var, _, _ = _case(**CASES[case])
    cotangent = np.random.default_rng(7).uniform(0.5, 1.5, (2, 3, 4))

    def objective(ell, sf2, z, mean, var):
        return jnp.sum(cotangent * psi1(oracles.se_bank(ell, sf2), z, mean, var))

    value, grads = jax.jit(jax.value_and_grad(objective, argnums=tuple(range(5))))(ell, sf2, z, mean, var)
    per_entry = {(g, b, m): cotangent[g, b, m] for g, b, m in np.ndindex(2, 3, 4)}
    expected, expected_grads = _reference(_objective(_psi1, per_entry), (ell, sf2, z, mean, var))
    _assert_close(value, expected, "J")
    for name, grad, reference in zip(("ell", "sf2", "z", "mean", "var"), grads, expected_grads):
        _assert_close(grad, reference, f"dJ/d{name}")
