"""A training path beside the trainer: exact-GP EP or QP with untied sites for small N (the experiments of
Zhang et al. 2020): the kernel's hyper-parameters — by default the amplitude and one shared lengthscale of a
squared exponential (the authors' GPy ``RBF``), or those of any kernel given, less the fixed ones — maximise the
EP evidence ``log Z_EP`` (Zhang et al. 2020, eq. 4) by
L-BFGS-B, EP (or QP) re-run to convergence from the previous sites at every evaluation (GPy's
``ep_mode="nested"``); the gradient is the Gaussian part's with the sites fixed (R&W §5.5.2; exact at an
EP fixed point, and used unchanged for QP, as the paper's code does). Each evaluation — the sweeps to
convergence, ``log Z_EP`` and its gradient — is one compiled call (:func:`_evaluate`), compiled once per
kernel structure and shape of the training inputs.

A mean function ``m`` (trained with the kernel) is the prior's mean ``f ~ GP(m, k)``: folded into the sites'
offsets (:func:`~pep_gp.core.models.ep.site_data`), so EP runs on ``g = f − m``, and its gradient is the Gaussian
part's with the sites fixed, as the kernel's (``m`` is a parameter of the prior; R&W §5.5.2); the predictive mean
is shifted by ``m(x*)``. Priors on the kernel's hyper-parameters add ``log p(θ)`` to the maximised objective (a MAP
fit, :mod:`pep_gp.core.log_prior`); EP's sites do not change with them."""

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
from ...core.log_prior import with_log_prior
from ...core.means import MeanFunction, Zero
from ...core.parameters import fixed_leaves, on_device
from ...core.models.ep import EP, SiteData, Sites, gaussian_part, predict_latent, sweep_until, zero_sites
from ..engine.compilation import every_program_cached, ready_to_compile
from .full_batch import FlatParams

JITTER = 1e-8  # relative, on the prior covariance's diagonal


class UntiedFit(NamedTuple):
    """The outcome of :func:`fit`."""

    log_theta: np.ndarray  # the kernel's stored values (logarithms) and the mean's, flattened; the SE's: [log ℓ, log σ_f²]
    kernel: Kernel  # the fitted kernel (one GP)
    sites: Sites
    log_evidence: float  # log Z_EP, plus log p(θ) with priors: the objective maximised
    evaluations: int
    unconverged: int  # evaluations whose EP stopped at max_sweeps
    iterations: int  # L-BFGS-B iterations
    converged: bool  # L-BFGS-B's own convergence test held (not stopped by max_iter or a failed line search)
    message: str  # L-BFGS-B's reason for stopping
    mean: MeanFunction = Zero()  # the fitted prior mean (standardised inputs)


def _prior_cov(kernel: Kernel, x):
    return kernel.gram(x[None])[0] + JITTER * kernel.amplitude()[0] * jnp.eye(x.shape[0])


def with_mean(data: SiteData, mean: MeanFunction, x) -> SiteData:
    """The sites of the rows ``x`` ``[n, D]`` (one site on each row's ``f`` itself, weight 1) with the prior mean
    folded into their offsets, ``b_s + m(x_s)``: EP on ``g = f − m``; ``data`` itself for the zero mean."""
    return data._replace(offset=mean.plus(x[data.index], data.offset))


def _problem(template, log_theta, x, data: SiteData):
    """The prior covariance, the sites' data with the mean folded in, and the kernel at the values ``log_theta``
    of the leaves of ``template = (kernel, mean)``."""
    kernel, mean = ravel_pytree(template)[1](log_theta)
    return _prior_cov(kernel, x), with_mean(data, mean, x), kernel


@partial(jax.jit, static_argnums=0)
def _evaluate(ep: EP, template, log_theta, x, data: SiteData, sites: Sites, damping, max_sweeps, tol):
    """One compiled evaluation of the objective: EP (or QP) from ``sites`` with the step ``damping`` (halved
    where the sweeps oscillate, :func:`~pep_gp.core.models.ep.sweep_until`) at the values ``log_theta`` of the
    leaves of ``template = (kernel, mean)`` (:func:`jax.flatten_util.ravel_pytree`) to ``tol``, then
    ``log Z_EP + log p(θ)`` and its gradient in ``log_theta`` (the Gaussian part's with the sites held fixed, and
    the prior's). Compiled once per ``ep``, structure of the template and shape of ``x``; returns ``(sites,
    objective, gradient, converged, damping)``, the last the step the sweeps ended at."""
    cov, shifted, kernel = _problem(template, log_theta, x, data)
    sites, _, change, _, damping = sweep_until(ep, cov, shifted, sites, max_sweeps, tol, damping)

    def held(t):
        cov, shifted, kernel = _problem(template, t, x, data)
        return with_log_prior(gaussian_part(cov, shifted, sites), kernel)

    gradient = jax.grad(held)(log_theta)
    return sites, with_log_prior(ep.log_evidence(cov, shifted, sites), kernel), gradient, change <= tol, damping


@every_program_cached()
def fit(ep: EP, x, data: SiteData, log_theta=None, sites: Sites | None = None, max_iter: int = 100,
        seed: int = 0, max_sweeps: int = 200, tol: float = 1e-7, kernel: Kernel | None = None,
        mean: MeanFunction | None = None) -> UntiedFit:
    """Maximise ``log Z_EP`` (plus ``log p(θ)`` with priors) over the hyper-parameters of ``kernel`` (default a
    squared exponential of variance 1; a lengthscale left unset starts at the median distance, one shared by the
    inputs) that are not fixed and the parameters of ``mean`` (default zero: none), from ``log_theta`` (the
    flattened values of :attr:`UntiedFit.log_theta`; default the kernel's and the mean's own); EP runs from the
    previous evaluation's sites (``sites``, default zero, the first time), its sweeps at twice the step where the
    previous evaluation's ended (at most ``ep.damping``) but never at a step whose sweeps oscillated before: on
    pima's 614 rows a fit took 1.3 s undamped where sweeps damped by ½ throughout took 2.2 s (the same evidence
    to 1e-4), and on crabs, where undamped sweeps oscillate, both took 1.1 s."""
    ep.check()
    ready_to_compile()
    with float64():
        x = on_device(x, np.float64)
        kernel = (kernel or SquaredExponential()).bank(1, x.shape[1], median_lengthscale(np.asarray(x), seed))
        template = (kernel, Zero() if mean is None else mean.build(x.shape[1]))
        flat = FlatParams(template, jax.tree_util.tree_map(lambda _: False, template))  # every leaf, on the host
        start = flat.vector(template) if log_theta is None else np.asarray(log_theta, dtype=np.float64)
        fixed = (fixed_leaves(kernel), jax.tree_util.tree_map(lambda _: False, template[1]))
        free = flat.vector(jax.tree_util.tree_map(lambda held, leaf: np.full(np.shape(leaf), not held, float),
                                                  fixed, template)) > 0
        state = {"sites": zero_sites(data.y.shape[0]) if sites is None else sites, "evaluations": 0, "unconverged": 0,
                 "damping": ep.damping, "ceiling": ep.damping}

        def values(theta):
            full = start.copy()
            full[free] = theta  # the fixed values stay the start's, bit for bit
            return full

        def objective(theta):
            step = min(state["ceiling"], 2 * state["damping"])
            new, value, gradient, converged, ended = _evaluate(ep, template, on_device(values(theta)), x, data,
                                                               state["sites"], step, max_sweeps, tol)
            if float(ended) < step:
                state["ceiling"] = step / 2
            state["sites"], state["damping"] = new, float(ended)
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
        fitted_kernel, fitted_mean = flat.params(fitted, template)
        return UntiedFit(fitted, fitted_kernel, state["sites"], -value, state["evaluations"],
                         state["unconverged"], int(iterations), bool(converged), str(message), fitted_mean)


def predict(kernel: Kernel, sites: Sites, x_train, data: SiteData, x_test, full_cov: bool = False,
            mean: MeanFunction = Zero()):
    """Latent mean and variance (``full_cov``: covariance ``[B, B]``) at ``x_test`` under the fitted ``kernel``
    and ``mean`` (``data`` the sites' without it: :func:`with_mean` folds it in; the mean plus ``m(x_test)``)
    (jit-able: every argument but ``full_cov`` is an array or a pytree of them)."""
    test_cov = kernel.gram(x_test[None])[0] if full_cov else kernel.diag(x_test)[0]
    latent, spread = predict_latent(_prior_cov(kernel, x_train), kernel.cross(x_train[None], x_test)[0], test_cov,
                                    with_mean(data, mean, x_train), sites)
    return mean.plus(x_test, latent), spread
