"""A training path beside the trainer: exact-GP EP or QP with untied sites for small N (the experiments of
Zhang et al. 2020): the kernel's amplitude and one shared lengthscale (the authors' GPy ``RBF``) maximise the
EP evidence ``log Z_EP`` (Zhang et al. 2020, eq. 4) by
L-BFGS-B, EP (or QP) re-run to convergence from the previous sites at every evaluation (GPy's
``ep_mode="nested"``); the gradient is the Gaussian part's with the sites fixed (R&W §5.5.2; exact at an
EP fixed point, and used unchanged for QP, as the paper's code does). Each evaluation — the sweeps to
convergence, ``log Z_EP`` and its gradient — is one compiled call (:func:`_evaluate`), compiled once per
shape of the training inputs."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from ...core import float64
from ...core.initialisation import median_lengthscale
from ...core.kernels import SquaredExponential
from ...core.parameters import Positive
from ...core.models.ep import EP, SiteData, Sites, gaussian_part, predict_latent, sweep_until, zero_sites

JITTER = 1e-8  # relative, on the prior covariance's diagonal


class UntiedFit(NamedTuple):
    """The outcome of :func:`fit`."""

    log_theta: np.ndarray  # [log lengthscale, log variance]
    sites: Sites
    log_evidence: float
    evaluations: int
    unconverged: int  # evaluations whose EP stopped at max_sweeps
    iterations: int  # L-BFGS-B iterations
    converged: bool  # L-BFGS-B's own convergence test held (not stopped by max_iter or a failed line search)
    message: str  # L-BFGS-B's reason for stopping


def _kernel(log_theta):
    """The squared exponential of one GP with one shared lengthscale, from ``[log ℓ, log σ_f²]``."""
    return SquaredExponential().replace(lengthscales=Positive(log_theta[None, :1]), variance=Positive(log_theta[1:2]))


def _prior_cov(log_theta, x):
    return _kernel(log_theta).gram(x[None])[0] + JITTER * jnp.exp(log_theta[1]) * jnp.eye(x.shape[0])


@partial(jax.jit, static_argnums=0)
def _evaluate(ep: EP, log_theta, x, data: SiteData, sites: Sites, max_sweeps, tol):
    """One compiled evaluation of the objective: EP (or QP) from ``sites`` at ``log_theta`` to ``tol``, then
    ``log Z_EP`` and its gradient in ``log_theta`` (the Gaussian part's with the sites held fixed).
    Compiled once per ``ep`` and shape of ``x``; returns ``(sites, log Z_EP, gradient, converged)``."""
    sites, _, change, _ = sweep_until(ep, _prior_cov(log_theta, x), data, sites, max_sweeps, tol)
    gradient = jax.grad(lambda t: gaussian_part(_prior_cov(t, x), data, sites))(log_theta)
    return sites, ep.log_evidence(_prior_cov(log_theta, x), data, sites), gradient, change <= tol


def fit(ep: EP, x, data: SiteData, log_theta=None, sites: Sites | None = None, max_iter: int = 100,
        seed: int = 0, max_sweeps: int = 200, tol: float = 1e-7) -> UntiedFit:
    """Maximise ``log Z_EP`` over ``[log ℓ, log σ_f²]`` from ``log_theta`` (default: median distance, 1);
    EP runs from the previous evaluation's sites (``sites``, default zero, the first time)."""
    ep.check()
    with float64():
        x = jnp.asarray(x, dtype=jnp.float64)
        start = np.array([np.log(median_lengthscale(np.asarray(x), seed)), 0.0]) if log_theta is None else log_theta
        state = {"sites": zero_sites(data.y.shape[0]) if sites is None else sites, "evaluations": 0, "unconverged": 0}

        def objective(theta):
            new, value, gradient, converged = _evaluate(ep, jnp.asarray(theta, jnp.float64), x, data, state["sites"],
                                                        max_sweeps, tol)
            state["sites"] = new
            state["evaluations"] += 1
            state["unconverged"] += int(not converged)
            return -float(value), -np.asarray(gradient)

        solution = optimize.minimize(objective, start, jac=True, method="L-BFGS-B",
                                     options={"maxiter": max_iter, "ftol": 1e-9})
        value, _ = objective(solution.x)  # the sites at the returned parameters
        return UntiedFit(np.asarray(solution.x), state["sites"], -value, state["evaluations"], state["unconverged"],
                         int(solution.nit), bool(solution.success), str(solution.message))


def predict(log_theta, sites: Sites, x_train, data: SiteData, x_test, full_cov: bool = False):
    """Latent mean and variance (``full_cov``: covariance ``[B, B]``) at ``x_test`` (jit-able: every argument
    but ``full_cov`` is an array or a pytree of them)."""
    kernel = _kernel(log_theta)
    test_cov = kernel.gram(x_test[None])[0] if full_cov else kernel.diag(x_test)[0]
    return predict_latent(_prior_cov(log_theta, x_train), kernel.cross(x_train[None], x_test)[0], test_cov, data,
                          sites)
