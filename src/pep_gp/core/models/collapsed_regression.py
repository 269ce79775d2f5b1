"""Collapsed Power-EP pseudo-point regression (Bui, Yan & Turner 2017, §3.6, eq. 128, the PEP-α family from VFE to FITC).

With a Gaussian likelihood the Power-EP fixed point is available in closed form (Bui, Yan & Turner 2017, §3.6, App. G.1), so the
sites can be integrated out and the approximate log marginal likelihood is

    log Z_PEP(α) = log N(y; 0, Q_ff + α diag(D_ff) + σ²I) − (1−α)/(2α) Σ_n log(1 + α D_nn/σ²)

with ``Q_ff = K_fu K_uu⁻¹ K_uf`` and ``D_nn = k_nn − [Q_ff]_nn`` (Bui, Yan & Turner 2017, §3.6, eq. 128). α = 1 gives the
FITC evidence, α → 0 the Titsias VFE bound (eq. 10; implemented as its own branch ``alpha=0``), and
inducing inputs at the training inputs the exact GP evidence for every α.

The evaluation is the stable O(N M²) form of the reference code (Bui, Yan & Turner 2017, §3.6, eq. 128): with
``L = chol(K_uu)``, ``A₀ = L⁻¹K_uf``, ``G_n = αD_nn + σ²``, ``J = chol(I + A₀ G⁻¹ A₀ᵀ)`` and
``b = J⁻¹A₀(y/G)``,

    log Z = −(N/2)log 2π − Σ_m log J_mm − ½Σ_n log G_n − ½Σ_n y_n²/G_n + ½‖b‖² − (1−α)/(2α) Σ_n log1p(αD_nn/σ²).

Reference: Bui, Yan & Turner (2017), "A unifying framework for Gaussian process pseudo-point
approximations using Power Expectation Propagation", JMLR 18.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax

import jax.numpy as jnp

from ..gaussian import LOG_2PI
from ..kernels import Kernel
from ..linalg import DEFAULT_JITTER, cholesky, solve_lower, solve_upper_from_lower
from ..log_prior import with_log_prior
from ..means import MeanFunction, Zero
from ..parameters import SOFTPLUS, constrained


class Conditioned(NamedTuple):
    """The Gaussian sites of the collapsed fixed point given the projected rows (Bui, Yan & Turner 2017, §3.6)."""

    site_variance: jnp.ndarray  # G_n = αD_nn + σ_n², [N]
    chol_inner: jnp.ndarray  # J = chol(I + A₀ G⁻¹ A₀ᵀ), [M, M]
    inner_target: jnp.ndarray  # b = J⁻¹A₀(y/G), [M]


class _Factorisation(NamedTuple):
    chol_uu: jnp.ndarray  # L, [M, M]
    projected: jnp.ndarray  # A₀ = L⁻¹K_uf, [M, N]
    residual: jnp.ndarray  # D_nn ≥ 0, [N]
    sites: Conditioned


def condition(projected, residual, noise_variance, y, alpha, mask) -> Conditioned:
    """The sites of the rows with ``mask`` given the whitened cross-covariances ``A₀ = L⁻¹K_uf`` [M, N], the
    residual variances ``D_nn`` [N] and the noise variance ``σ_n²`` (one, or one per row) (the others are
    left out of every sum)."""
    site_variance = alpha * residual + noise_variance
    scaled = projected * (mask / jnp.sqrt(site_variance))
    inner = jnp.eye(projected.shape[0], dtype=projected.dtype) + scaled @ scaled.T
    chol_inner = cholesky(inner)
    return Conditioned(site_variance, chol_inner, solve_lower(chol_inner, projected @ (mask * y / site_variance)))


def evidence(sites: Conditioned, residual, noise_variance, y, alpha: float, mask):
    """``log Z_PEP(α)`` of the rows with ``mask`` from their :func:`condition` (module docstring; Bui, Yan &
    Turner 2017, §3.6, eq. 128), ``σ_n²`` one or one per row (each row's factor has its own noise)."""
    row_sum = lambda terms: jnp.sum(jnp.where(mask, terms, 0.0))
    value = (
        -0.5 * row_sum(jnp.full(y.shape[0], LOG_2PI))
        - jnp.sum(jnp.log(jnp.diagonal(sites.chol_inner)))
        - 0.5 * row_sum(jnp.log(sites.site_variance))
        - 0.5 * row_sum(y**2 / sites.site_variance)
        + 0.5 * jnp.sum(sites.inner_target**2)
    )
    if alpha == 0.0:  # VFE trace term, the α → 0 limit of the last term (Bui, Yan & Turner 2017 eq. 130)
        return value - 0.5 * row_sum(residual / noise_variance)
    return value - (1.0 - alpha) / (2.0 * alpha) * row_sum(jnp.log1p(alpha * residual / noise_variance))


def posterior(sites: Conditioned, projected_new):
    """``(C*ᵀJ⁻ᵀb, J⁻¹C*)`` for the whitened test cross-covariances ``C* = L⁻¹K_u*`` [M, B]: the predictive
    mean and the factor whose squares the predictive (co)variance adds back (Bui, Yan & Turner 2017, §3.6)."""
    mean = projected_new.T @ solve_upper_from_lower(sites.chol_inner, sites.inner_target)
    return mean, solve_lower(sites.chol_inner, projected_new)


def _factorise(kernel, inducing, noise_variance, x, y, alpha, jitter, mask) -> _Factorisation:
    """The factorisation of the rows with ``mask`` (the others are left out of every sum)."""
    chol_uu = cholesky(kernel.gram(inducing[None])[0], jitter * kernel.amplitude()[0])
    projected = solve_lower(chol_uu, kernel.cross(inducing[None], x)[0])
    residual = jnp.maximum(kernel.diag(x)[0] - jnp.sum(projected**2, axis=0), 0.0)
    return _Factorisation(chol_uu, projected, residual,
                          condition(projected, residual, noise_variance, y, alpha, mask))


def log_marginal_likelihood(
    kernel: Kernel,
    inducing,
    noise_variance,
    x,
    y,
    alpha: float,
    jitter: float = DEFAULT_JITTER,
    mask=None,
):
    """Approximate log marginal likelihood ``log Z_PEP(α)`` (Bui, Yan & Turner 2017, §3.6, the boxed formula after eq. 22; eq. 128).

    Args:
        kernel: the GP prior covariance, a kernel of one GP (hyper-parameters ``[1, ·]``, :meth:`~pep_gp.core.kernels.Kernel.bank`).
        inducing: pseudo-inputs ``Z``, [M, D].
        noise_variance: ``σ_y²``.
        x: inputs, [N, D]; y: targets, [N].
        alpha: Power-EP power in [0, 1]; 0 selects the VFE (Titsias) bound.
        jitter: relative jitter on ``K_uu`` (see :mod:`pep_gp.core.linalg`).
        mask: booleans [N]; rows with ``False`` (padding) are left out. None: all rows.

    Returns:
        Scalar ``log Z_PEP(α)``.

    Example:
        >>> k = SquaredExponential(lengthscales=1.0, variance=1.0).bank(1, 1)
        >>> x = jnp.linspace(0, 1, 5)[:, None]
        >>> float(log_marginal_likelihood(k, x, 0.1, x, jnp.sin(x[:, 0]), alpha=1.0)) < 0
        True
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1]; got {alpha}")
    mask = jnp.ones(x.shape[0], bool) if mask is None else mask
    f = _factorise(kernel, inducing, noise_variance, x, y, alpha, jitter, mask)
    return evidence(f.sites, f.residual, noise_variance, y, alpha, mask)


def predict_f(
    kernel: Kernel,
    inducing,
    noise_variance,
    x,
    y,
    x_new,
    alpha: float,
    jitter: float = DEFAULT_JITTER,
    full_cov: bool = False,
):
    """Posterior mean and variance of the latent ``f`` at ``x_new`` (Bui, Yan & Turner 2017 eq. 7 at test points).

    ``m* = c*ᵀ J⁻ᵀ b`` and ``v* = k** − ‖c*‖² + ‖J⁻¹c*‖²`` with ``c* = L⁻¹k_u*`` (Bui, Yan & Turner 2017, §3.6, eq. 128);
    with ``full_cov`` the covariance ``K** − C*ᵀC* + (J⁻¹C*)ᵀ(J⁻¹C*)`` ``[B, B]`` instead (the same predictive,
    ``∫ p(f*|u) q(u) du`` with ``q(u)`` Gaussian; Titsias 2009, eq. 6).
    """
    f = _factorise(kernel, inducing, noise_variance, x, y, alpha, jitter, jnp.ones(x.shape[0], bool))
    c = solve_lower(f.chol_uu, kernel.cross(inducing[None], x_new)[0])
    mean, reduced = posterior(f.sites, c)
    if full_cov:
        return mean, kernel.gram(x_new[None])[0] - c.T @ c + reduced.T @ reduced
    var = kernel.diag(x_new)[0] - jnp.sum(c**2, axis=0) + jnp.sum(reduced**2, axis=0)
    return mean, jnp.maximum(var, 0.0)


class RegressionParams(NamedTuple):
    """Trainable state of the collapsed model: the kernel (hyper-parameters ``[1, ·]``), the unconstrained noise
    variance (softplus, as the Gaussian likelihood's), the inducing inputs and the prior's mean function
    (:mod:`pep_gp.core.means`; :class:`~pep_gp.core.means.Zero`, no leaves, by default)."""

    kernel: Kernel
    raw_noise_variance: jnp.ndarray  # []
    inducing: jnp.ndarray  # Z, [M, D]
    mean: MeanFunction = Zero()

    BIJECTIONS = {"raw_noise_variance": ("noise_variance", SOFTPLUS)}

    @property
    def noise_variance(self):
        return constrained(self)["noise_variance"]


@dataclass(frozen=True)
class CollapsedRegression:
    """:func:`log_marginal_likelihood` in the model protocol (:mod:`pep_gp.pipeline.models.protocol`).

    The sites are integrated out in closed form, so the objective is not a sum over blocks: it is
    trained with the whole training set as one block (its data term), and nothing is shared. With a mean
    function ``m`` (``params.mean``) the prior is ``f ~ GP(m, k)``: the evidence is that of ``y − m(x)`` under
    the zero-mean model and the predictive mean is shifted by ``m(x*)`` (Rasmussen & Williams 2006, §2.7).

    Args:
        alpha: Power-EP power in [0, 1]; 0 selects the VFE (Titsias) bound.
        jitter: relative jitter on ``K_uu``.
        priors: priors on ``raw_noise_variance`` (``(("raw_noise_variance", prior),)`` or none); with them and the
            kernel's own priors the global term is ``log p(θ)`` (a MAP fit, :mod:`pep_gp.core.log_prior`).
    """

    alpha: float = 0.5
    jitter: float = DEFAULT_JITTER
    priors: tuple = ()  # ((leaf, prior), ...): pep_gp.core.priors

    def step_shared(self, params: RegressionParams, n_total):
        return ()

    def global_energy(self, params: RegressionParams, shared, n_total):
        """Zero, or ``log p(θ)`` with priors."""
        return with_log_prior(jnp.zeros((), params.inducing.dtype), params, self.priors)

    def data_energy(self, params: RegressionParams, shared, x, y, mask):
        """``log Z_PEP(α)`` of the rows with ``mask`` (of ``y − m(x)``)."""
        return log_marginal_likelihood(params.kernel, params.inducing, params.noise_variance, x,
                                       params.mean.minus(x, y), self.alpha, self.jitter, mask)

    def predict_f(self, params: RegressionParams, x_train, y_train, x_new, full_cov: bool = False):
        """Latent mean and variance (``full_cov``: covariance) at ``x_new`` given the training rows
        (:func:`predict_f` of ``y_train − m(x_train)``, its mean plus ``m(x_new)``)."""
        mean, spread = predict_f(params.kernel, params.inducing, params.noise_variance, x_train,
                                 params.mean.minus(x_train, y_train), x_new, self.alpha, self.jitter, full_cov)
        return params.mean.plus(x_new, mean), spread

    def predict_y(self, params: RegressionParams, x_train, y_train, x_new):
        """Predictive mean and variance of ``y`` at ``x_new`` given the training rows."""
        mean, var = self.predict_f(params, x_train, y_train, x_new)
        return mean, var + params.noise_variance


jax.tree_util.register_static(CollapsedRegression)
