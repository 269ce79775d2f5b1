"""A training path beside the trainer: exact-GP EP or QP with untied sites for small N (the experiments of
Zhang et al. 2020): the kernel's hyper-parameters — by default the amplitude and one shared lengthscale of a
squared exponential (the authors' GPy ``RBF``), or those of any kernel given, less the fixed ones — maximise the
EP evidence ``log Z_EP`` (Zhang et al. 2020, eq. 4) by
L-BFGS-B, EP (or QP) re-run to convergence from the previous sites at every evaluation (GPy's
``ep_mode="nested"``); the gradient is the Gaussian part's with the sites fixed (R&W §5.5.2; exact at an
EP fixed point, and used unchanged for QP, as the paper's code does). Each evaluation — the sweeps to
convergence, ``log Z_EP`` and its gradient — is one compiled call (:func:`_evaluate`), compiled once per
kernel structure and shape of the training inputs."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy import optimize

from ...core import float64
from ...core.initialisation import median_lengthscale
from ...core.kernels import Kernel, SquaredExponential
from ...core.parameters import fixed_leaves
from ...core.models.ep import EP, SiteData, Sites, gaussian_part, predict_latent, sweep_until, zero_sites

JITTER = 1e-8  # relative, on the prior covariance's diagonal


class UntiedFit(NamedTuple):
    """The outcome of :func:`fit`."""

    log_theta: np.ndarray  # the kernel's stored values (logarithms), flattened; the SE's: [log ℓ, log σ_f²]
    kernel: Kernel  # the fitted kernel (one GP)
    sites: Sites
    log_evidence: float
    evaluations: int
    unconverged: int  # evaluations whose EP stopped at max_sweeps
    iterations: int  # L-BFGS-B iterations
    converged: bool  # L-BFGS-B's own convergence test held (not stopped by max_iter or a failed line search)
    message: str  # L-BFGS-B's reason for stopping


def _prior_cov(kernel: Kernel, x):
    return kernel.gram(x[None])[0] + JITTER * kernel.amplitude()[0] * jnp.eye(x.shape[0])


@partial(jax.jit, static_argnums=0)
def _evaluate(ep: EP, kernel: Kernel, log_theta, x, data: SiteData, sites: Sites, max_sweeps, tol):
    """One compiled evaluation of the objective: EP (or QP) from ``sites`` at the values ``log_theta`` of
    ``kernel``'s leaves (:func:`jax.flatten_util.ravel_pytree`) to ``tol``, then ``log Z_EP`` and its gradient in
    ``log_theta`` (the Gaussian part's with the sites held fixed). Compiled once per ``ep``, kernel structure
    and shape of ``x``; returns ``(sites, log Z_EP, gradient, converged)``."""
    unravel = ravel_pytree(kernel)[1]
    sites, _, change, _ = sweep_until(ep, _prior_cov(unravel(log_theta), x), data, sites, max_sweeps, tol)
    gradient = jax.grad(lambda t: gaussian_part(_prior_cov(unravel(t), x), data, sites))(log_theta)
    return sites, ep.log_evidence(_prior_cov(unravel(log_theta), x), data, sites), gradient, change <= tol


def fit(ep: EP, x, data: SiteData, log_theta=None, sites: Sites | None = None, max_iter: int = 100,
        seed: int = 0, max_sweeps: int = 200, tol: float = 1e-7, kernel: Kernel | None = None) -> UntiedFit:
    """Maximise ``log Z_EP`` over the hyper-parameters of ``kernel`` (default a squared exponential of variance
    1; a lengthscale left unset starts at the median distance, one shared by the inputs) that are not fixed,
    from ``log_theta`` (the flattened logarithms of :attr:`UntiedFit.log_theta`; default the kernel's own);
    EP runs from the previous evaluation's sites (``sites``, default zero, the first time)."""
    ep.check()
    with float64():
        x = jnp.asarray(x, dtype=jnp.float64)
        template = (kernel or SquaredExponential()).bank(1, x.shape[1], median_lengthscale(np.asarray(x), seed))
        flat, unravel = ravel_pytree(template)
        start = np.asarray(flat if log_theta is None else log_theta, dtype=np.float64)
        free = ~np.asarray(ravel_pytree(jax.tree_util.tree_map(lambda fixed, leaf: jnp.full(jnp.shape(leaf), fixed),
                                                                fixed_leaves(template), template))[0], bool)
        state = {"sites": zero_sites(data.y.shape[0]) if sites is None else sites, "evaluations": 0, "unconverged": 0}

        def values(theta):
            full = start.copy()
            full[free] = theta  # the fixed values stay the start's, bit for bit
            return full

        def objective(theta):
            new, value, gradient, converged = _evaluate(ep, template, jnp.asarray(values(theta)), x, data,
                                                        state["sites"], max_sweeps, tol)
            state["sites"] = new
            state["evaluations"] += 1
            state["unconverged"] += int(not converged)
            return -float(value), -np.asarray(gradient)[free]

        if free.any():
            solution = optimize.minimize(objective, start[free], jac=True, method="L-BFGS-B",
                                         options={"maxiter": max_iter, "ftol": 1e-9})
            theta, iterations, converged, message = solution.x, solution.nit, solution.success, solution.message
        else:
            theta, iterations, converged, message = start[free], 0, True, "every hyper-parameter is fixed"
        value, _ = objective(theta)  # the sites at the returned parameters
        fitted = values(theta)
        return UntiedFit(fitted, unravel(jnp.asarray(fitted)), state["sites"], -value, state["evaluations"],
                         state["unconverged"], int(iterations), bool(converged), str(message))


def predict(kernel: Kernel, sites: Sites, x_train, data: SiteData, x_test, full_cov: bool = False):
    """Latent mean and variance (``full_cov``: covariance ``[B, B]``) at ``x_test`` under the fitted ``kernel``
    (jit-able: every argument but ``full_cov`` is an array or a pytree of them)."""
    test_cov = kernel.gram(x_test[None])[0] if full_cov else kernel.diag(x_test)[0]
    return predict_latent(_prior_cov(kernel, x_train), kernel.cross(x_train[None], x_test)[0], test_cov, data,
                          sites)
