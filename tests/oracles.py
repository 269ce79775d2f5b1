"""Independent dense numpy/scipy reference computations used as test oracles (no pepcore code)."""

from __future__ import annotations

import jax
import numpy as np
from scipy.stats import multivariate_normal


def se_kernel(x1, x2, lengthscales, variance):
    d = (x1[:, None, :] - x2[None, :, :]) / np.asarray(lengthscales)
    return variance * np.exp(-0.5 * np.sum(d**2, axis=-1))


def gaussian_log_evidence(y, cov):
    """``log N(y; 0, cov)``."""
    return multivariate_normal(mean=np.zeros(len(y)), cov=cov).logpdf(y)


def exact_gp_evidence(x, y, lengthscales, variance, noise):
    return gaussian_log_evidence(y, se_kernel(x, x, lengthscales, variance) + noise * np.eye(len(y)))


def _q_ff_and_diag(x, z, lengthscales, variance, jitter=0.0):
    kuu = se_kernel(z, z, lengthscales, variance) + jitter * np.eye(len(z))
    kuf = se_kernel(z, x, lengthscales, variance)
    qff = kuf.T @ np.linalg.solve(kuu, kuf)
    return qff, variance - np.diag(qff)


def fitc_evidence(x, y, z, lengthscales, variance, noise):
    """FITC: ``log N(y; 0, Q_ff + diag(K_ff − Q_ff) + σ²I)`` (seed000 eq. 8/129)."""
    qff, d = _q_ff_and_diag(x, z, lengthscales, variance)
    return gaussian_log_evidence(y, qff + np.diag(d) + noise * np.eye(len(y)))


def titsias_bound(x, y, z, lengthscales, variance, noise):
    """VFE: ``log N(y; 0, Q_ff + σ²I) − tr(K_ff − Q_ff)/(2σ²)`` (seed000 eq. 10)."""
    qff, d = _q_ff_and_diag(x, z, lengthscales, variance)
    return gaussian_log_evidence(y, qff + noise * np.eye(len(y))) - np.sum(d) / (2 * noise)


def titsias_optimal_q(x, y, z, lengthscales, variance, noise):
    """Natural parameters (η, Λ) of the total likelihood factor at the VFE optimum:
    ``Λ = σ⁻² K_uu⁻¹K_uf K_fu K_uu⁻¹``, ``η = σ⁻² K_uu⁻¹K_uf y``."""
    kuu = se_kernel(z, z, lengthscales, variance)
    w = np.linalg.solve(kuu, se_kernel(z, x, lengthscales, variance))  # K_uu⁻¹K_uf
    return w @ y / noise, w @ w.T / noise


def assert_gradient_matches_central_differences(fn, grad_fn, theta, eps, rtol=1e-5, atol_fraction=1e-6):
    """``grad_fn(theta)`` equals the central differences of scalar ``fn`` at flat ``theta``, to ``rtol``
    (and to ``atol_fraction`` of the largest component, for entries near zero). Both are compiled once."""
    fn, grad_fn = jax.jit(fn), jax.jit(grad_fn)
    fd = np.array([(fn(theta.at[i].add(eps)) - fn(theta.at[i].add(-eps))) / (2 * eps) for i in range(theta.size)])
    np.testing.assert_allclose(np.asarray(grad_fn(theta)), fd, rtol=rtol, atol=atol_fraction * np.max(np.abs(fd)))
