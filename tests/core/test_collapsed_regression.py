"""The collapsed PEP-α regression objective against exact-GP, FITC and VFE oracles (Bui, Yan & Turner 2017, §3.6)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process import kernels as sk

from pep_gp.core import kernels as k

from pep_gp.core.models.collapsed_regression import log_marginal_likelihood, predict_f
from tests import oracles

LS, VAR, NOISE = np.array([0.8, 1.3]), 1.4, 0.09


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, size=(60, 2))
    y = np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + 0.3 * rng.normal(size=60)
    z = x[rng.choice(60, 8, replace=False)] + 0.05 * rng.normal(size=(8, 2))
    return x, y, z


def _lml(x, y, z, alpha, noise=NOISE, jitter=1e-6):
    kernel = oracles.se_bank(LS, VAR)
    return float(log_marginal_likelihood(kernel, jnp.asarray(z), noise, jnp.asarray(x), jnp.asarray(y), alpha, jitter))


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.01])
def test_inducing_at_training_inputs_gives_exact_gp_evidence(data, alpha):
    """At zero jitter, like the dense oracle (cond K_uu ≈ 1e11 here; measured 5e-15 relative)."""
    x, y, _ = data
    exact = oracles.exact_gp_evidence(x, y, LS, VAR, NOISE)
    assert _lml(x, y, x, alpha, jitter=0.0) == pytest.approx(exact, rel=1e-10)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.01])
def test_jitter_moves_the_evidence_at_every_alpha(data, alpha):
    """Relative jitter 1e-6 on K_uu with Z = X moves the objective by 1e-7..1e-5 relative, α = 1 included
    (docs/results/sparse-gp.md, "Jitter": measured 1.3e-6 at α = 1, 4.0e-6 at 0.5, 9.2e-6 at 0.01)."""
    x, y, _ = data
    exact = oracles.exact_gp_evidence(x, y, LS, VAR, NOISE)
    assert 1e-7 < abs(_lml(x, y, x, alpha, jitter=1e-6) / exact - 1) < 1e-5


@pytest.mark.heavy
def test_alpha_one_is_fitc(data):
    x, y, z = data
    assert _lml(x, y, z, 1.0, jitter=0.0) == pytest.approx(oracles.fitc_evidence(x, y, z, LS, VAR, NOISE), rel=1e-10)


def test_alpha_zero_is_titsias_bound(data):
    x, y, z = data
    vfe = oracles.titsias_bound(x, y, z, LS, VAR, NOISE)
    assert _lml(x, y, z, 0.0, jitter=0.0) == pytest.approx(vfe, rel=1e-10)


def test_small_alpha_approaches_vfe_at_rate_alpha(data):
    x, y, z = data
    vfe = _lml(x, y, z, 0.0)
    assert _lml(x, y, z, 1e-6) == pytest.approx(vfe, rel=1e-4)
    gap_6, gap_4 = abs(_lml(x, y, z, 1e-6) - vfe), abs(_lml(x, y, z, 1e-4) - vfe)
    assert gap_4 / gap_6 == pytest.approx(100.0, rel=0.05)  # the gap is O(α)


def test_energy_decreases_from_fitc_to_vfe(data):
    x, y, z = data
    values = [_lml(x, y, z, a) for a in (1.0, 0.8, 0.5, 0.2, 0.0)]
    assert all(a > b for a, b in zip(values, values[1:]))
    assert values[-1] <= oracles.exact_gp_evidence(x, y, LS, VAR, NOISE)  # VFE is a lower bound


def test_prediction_matches_eq7(data):
    """Predictive mean/variance equal the dense formulas of Bui, Yan & Turner 2017 eq. 7 with K̄ = Q + αdiag(D) + σ²I."""
    x, y, z = data
    alpha = 0.5
    xs = np.random.default_rng(1).uniform(-2, 2, size=(7, 2))
    kernel = oracles.se_bank(LS, VAR)
    mean, var = predict_f(kernel, jnp.asarray(z), NOISE, jnp.asarray(x), jnp.asarray(y), jnp.asarray(xs), alpha, 0.0)
    kuu = oracles.se_kernel(z, z, LS, VAR)
    kus, kuf = oracles.se_kernel(z, xs, LS, VAR), oracles.se_kernel(z, x, LS, VAR)
    qff = kuf.T @ np.linalg.solve(kuu, kuf)
    kbar = qff + alpha * np.diag(VAR - np.diag(qff)) + NOISE * np.eye(len(y))
    qsf = kus.T @ np.linalg.solve(kuu, kuf)
    np.testing.assert_allclose(mean, qsf @ np.linalg.solve(kbar, y), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, VAR - np.einsum("ij,ji->i", qsf, np.linalg.solve(kbar, qsf.T)), rtol=1e-7)


@pytest.mark.heavy
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_gradient_matches_central_differences(data, alpha):
    x, y, z = data

    def objective(theta):
        kernel = oracles.se_bank(jnp.exp(theta[:2]), jnp.exp(theta[2]))
        zz = theta[4:].reshape(z.shape)
        return log_marginal_likelihood(kernel, zz, jnp.exp(theta[3]), jnp.asarray(x), jnp.asarray(y), alpha)

    theta = jnp.concatenate([jnp.log(jnp.asarray(LS)), jnp.log(jnp.asarray([VAR, NOISE])), jnp.asarray(z).ravel()])
    oracles.assert_gradient_matches_central_differences(objective, jax.grad(objective), theta, eps=1e-5, atol_fraction=1e-7)


def test_rejects_alpha_outside_unit_interval(data):
    x, y, z = data
    with pytest.raises(ValueError, match="alpha must lie in"):
        _lml(x, y, z, 1.5)


KERNELS = {  # pep's kernel and scikit-learn's, same values
    "se": (lambda: k.SquaredExponential(LS, VAR), lambda: sk.ConstantKernel(VAR) * sk.RBF(LS)),
    "matern12": (lambda: k.Matern12(LS, VAR), lambda: sk.ConstantKernel(VAR) * sk.Matern(LS, nu=0.5)),
    "matern32": (lambda: k.Matern32(LS, VAR), lambda: sk.ConstantKernel(VAR) * sk.Matern(LS, nu=1.5)),
    "matern52": (lambda: k.Matern52(LS, VAR), lambda: sk.ConstantKernel(VAR) * sk.Matern(LS, nu=2.5)),
    "linear+se": (lambda: k.Linear(0.4) + k.SquaredExponential(LS, VAR),
                  lambda: sk.ConstantKernel(0.4) * sk.DotProduct(0.0) + sk.ConstantKernel(VAR) * sk.RBF(LS)),
    "periodic": (lambda: k.Periodic(1.1, VAR, 1.7, active_dims=[0]) * k.SquaredExponential(LS[1], active_dims=[1]),
                 None),
    "rq": (lambda: k.RationalQuadratic(1.1, VAR, 0.7), lambda: sk.ConstantKernel(VAR) * sk.RationalQuadratic(1.1, 0.7)),
}


def _sklearn_gram(name, a, b):
    """scikit-learn's kernel matrix (the periodic product: ExpSineSquared on column 0 times RBF on column 1)."""
    if name == "periodic":
        return (VAR * sk.ExpSineSquared(1.1, 1.7)(a[:, :1], b[:, :1])) * sk.RBF(LS[1])(a[:, 1:], b[:, 1:])
    return KERNELS[name][1]()(a, b)


@pytest.mark.heavy
@pytest.mark.parametrize("name", list(KERNELS))
def test_every_kernel_gives_the_exact_evidence_fitc_and_vfe(data, name):
    """With Z = X (no jitter) the collapsed objective at α = 0.5 is scikit-learn's exact-GP evidence
    (``GaussianProcessRegressor.log_marginal_likelihood``, its kernel plus a white-noise kernel) to 1e-8; with other Z,
    α = 1 is the FITC evidence and α = 0 the VFE bound (Bui, Yan & Turner 2017, eqs. 128, 130), both in numpy from
    scikit-learn's kernel matrices."""
    x, y, z = data
    kernel = KERNELS[name][0]().bank(1, 2)
    lml = lambda zz, alpha: float(log_marginal_likelihood(kernel, jnp.asarray(zz), NOISE, jnp.asarray(x),
                                                          jnp.asarray(y), alpha, 0.0))
    if KERNELS[name][1] is None:
        exact = oracles.gaussian_log_evidence(y, _sklearn_gram(name, x, x) + NOISE * np.eye(len(y)))
    else:
        gp = GaussianProcessRegressor(KERNELS[name][1]() + sk.WhiteKernel(NOISE), optimizer=None).fit(x, y)
        exact = gp.log_marginal_likelihood(gp.kernel_.theta)
    assert lml(x, 0.5) == pytest.approx(exact, rel=1e-8)
    kuu, kuf, kff = _sklearn_gram(name, z, z), _sklearn_gram(name, z, x), _sklearn_gram(name, x, x)
    qff = kuf.T @ np.linalg.solve(kuu, kuf)
    residual = np.diag(kff - qff)
    fitc = oracles.gaussian_log_evidence(y, qff + np.diag(residual) + NOISE * np.eye(len(y)))
    vfe = oracles.gaussian_log_evidence(y, qff + NOISE * np.eye(len(y))) - np.sum(residual) / (2 * NOISE)
    assert lml(z, 1.0) == pytest.approx(fitc, rel=1e-8)
    assert lml(z, 0.0) == pytest.approx(vfe, rel=1e-8)
