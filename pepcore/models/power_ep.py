"""Tied-factor Power-EP sparse GP with a general likelihood: the energy ``F = G + Σ_chunks L``.

Every likelihood term is approximated by one shared (tied) Gaussian factor in the inducing outputs
``u`` — stochastic / approximate EP (Li et al. 2015; Bui et al. 2016) with power α (seed000 §2.3). With
``t_tot(u) = exp(ηᵀu − ½uᵀΛu)`` the product of the N tied factors (``η``, ``Λ = LLᵀ`` are the stored
state), the posterior and the cavity are

    q(u)   ∝ p(u) t_tot(u),            cav(u) ∝ p(u) t_tot(u)^(1 − α/N),

and the Power-EP energy (seed000 eq. 110 with tied sites) splits into a global part and data parts

    G = φ(q) − φ(p) + (N/α)(φ(cav) − φ(q)),      L = Σ_n (1/α) log Z̃_n,
    Z̃_n = ∫ N(f_n; μ_n, v_n) p(y_n|f_n)^α df_n,  μ_n = k_nᵀK_uu⁻¹m_cav,
    v_n = k_nn − k_nᵀK_uu⁻¹k_n + k_nᵀK_uu⁻¹V_cav K_uu⁻¹k_n.

As α → 0 the cavity becomes q and ``F`` the uncollapsed VFE bound ``−KL(q‖p) + Σ E_q[log p]``
(seed000 eqs. 144–146); ``alpha=0`` is that branch exactly. α = 1 is the (tied) EP energy.

Numerics: everything is expressed through ``L_uu = chol(K_uu)``, ``A = L_uuᵀL`` and
``B_s = I + s AAᵀ`` (``s = 1`` for q, ``1 − α/N`` for the cavity), so that
``φ(s) − φ(p) = ½‖R_s⁻¹ s L_uuᵀη‖² − log|R_s|`` with ``R_s = chol(B_s)``; no matrix is inverted and
``K_uu`` cancels from the global part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from pepcore.initialisation import initial_kernel_and_inducing
from pepcore.kernels import ARDSquaredExponential
from pepcore.likelihoods import scaled_log_tilted
from pepcore.linalg import DEFAULT_JITTER, cholesky, solve_lower, solve_upper_from_lower
from pepcore.parameters import positive, unconstrain_positive


class SparseGPParams(NamedTuple):
    """The trainable state: unconstrained hyper-parameters, inducing inputs and the tied factor."""

    raw_lengthscales: jnp.ndarray  # [D]
    raw_variance: jnp.ndarray  # []
    inducing: jnp.ndarray  # Z, [M, D]
    likelihood: dict  # the likelihood's unconstrained parameters
    factor_shift: jnp.ndarray  # η = N θ₁, [M]
    factor_chol: jnp.ndarray  # lower-triangular L with Λ = N θ₂ = LLᵀ, [M, M]


def kernel_of(params: SparseGPParams) -> ARDSquaredExponential:
    """The constrained kernel of ``params``."""
    return ARDSquaredExponential(positive(params.raw_lengthscales), positive(params.raw_variance))


class _Posterior(NamedTuple):
    chol_uu: jnp.ndarray  # L_uu, [M, M]
    factor_root: jnp.ndarray  # A = L_uuᵀL, [M, M]
    chol_b: jnp.ndarray  # R_s, [M, M]
    whitened: jnp.ndarray  # c_s = R_s⁻¹ s L_uuᵀη, [M]


@dataclass(frozen=True)
class PowerEPSparseGP:
    """Sparse GP with tied Power-EP factors (static configuration; the state is :class:`SparseGPParams`).

    Args:
        likelihood: a likelihood of :mod:`pepcore.likelihoods`.
        alpha: the power, in [0, 1]; 0 is the variational (VFE) limit, 1 is EP.
        jitter: relative jitter on ``K_uu`` (see :mod:`pepcore.linalg`).

    Example:
        >>> from pepcore.likelihoods import Probit
        >>> model = PowerEPSparseGP(Probit(), alpha=0.5)
        >>> x = jax.random.normal(jax.random.key(0), (20, 2)); y = (x[:, 0] > 0).astype(float)
        >>> params = model.init(x, num_inducing=5)
        >>> float(model.energy(params, x, y)) < 0
        True
    """

    likelihood: Any
    alpha: float = 0.5
    jitter: float = DEFAULT_JITTER

    def __post_init__(self):
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {self.alpha}")

    # ----------------------------------------------------------------------------------------------
    def init(
        self,
        x,
        num_inducing: int,
        *,
        inducing=None,
        lengthscales=None,
        variance: float = 1.0,
        likelihood_params: dict | None = None,
        seed: int = 0,
    ) -> SparseGPParams:
        """Starting state: k-means inducing inputs, median-distance lengthscales, and a tied factor with
        ``Λ = K_uu⁻¹`` and ``η = 0`` (q(u) = N(0, K_uu/2): a non-zero start avoids the saddle at Λ = 0)."""
        lengthscales, variance, z = initial_kernel_and_inducing(
            x, num_inducing, inducing=inducing, lengthscales=lengthscales, variance=variance, seed=seed
        )
        kernel = ARDSquaredExponential(jnp.asarray(lengthscales), jnp.asarray(float(variance)))
        chol_uu = cholesky(kernel(jnp.asarray(z), jnp.asarray(z)), self.jitter * kernel.variance)
        inv_chol_t = solve_lower(chol_uu, jnp.eye(z.shape[0])).T  # L_uu⁻ᵀ: K_uu⁻¹ = L_uu⁻ᵀL_uu⁻¹
        factor_chol = cholesky(inv_chol_t @ inv_chol_t.T)
        lik = self.likelihood.init_params() if likelihood_params is None else likelihood_params
        return SparseGPParams(
            raw_lengthscales=unconstrain_positive(jnp.asarray(lengthscales)),
            raw_variance=unconstrain_positive(jnp.asarray(float(variance))),
            inducing=jnp.asarray(z),
            likelihood=lik,
            factor_shift=jnp.zeros(z.shape[0]),
            factor_chol=factor_chol,
        )

    # ----------------------------------------------------------------------------------------------
    def _posterior(self, params: SparseGPParams, scale) -> _Posterior:
        kernel = kernel_of(params)
        z = params.inducing
        chol_uu = cholesky(kernel(z, z), self.jitter * kernel.variance)
        a = chol_uu.T @ jnp.tril(params.factor_chol)
        chol_b = cholesky(jnp.eye(z.shape[0], dtype=z.dtype) + scale * (a @ a.T))
        whitened = solve_lower(chol_b, scale * (chol_uu.T @ params.factor_shift))
        return _Posterior(chol_uu, a, chol_b, whitened)

    @staticmethod
    def _relative_log_normaliser(post: _Posterior):
        """``φ(q_s) − φ(p) = ½‖c_s‖² − log|R_s|``."""
        return 0.5 * jnp.sum(post.whitened**2) - jnp.sum(jnp.log(jnp.diagonal(post.chol_b)))

    def _cavity_scale(self, n_total):
        return 1.0 - self.alpha / n_total

    def global_energy(self, params: SparseGPParams, n_total):
        """``G = φ(q) − φ(p) + (N/α)(φ(cav) − φ(q))``; for α = 0, ``φ(q) − φ(p) − E_q[log t_tot(u)]``."""
        post = self._posterior(params, 1.0)
        rel_q = self._relative_log_normaliser(post)
        if self.alpha == 0.0:
            a = post.factor_root
            b_inv_a = solve_lower(post.chol_b, a)  # R⁻¹A
            quad_mean = jnp.sum((a.T @ solve_upper_from_lower(post.chol_b, post.whitened)) ** 2)  # mᵀΛm
            expected_log_factor = jnp.sum(post.whitened**2) - 0.5 * (jnp.sum(b_inv_a**2) + quad_mean)
            return rel_q - expected_log_factor
        cav = self._posterior(params, self._cavity_scale(n_total))
        return rel_q + (n_total / self.alpha) * (self._relative_log_normaliser(cav) - rel_q)

    def _marginals(self, post: _Posterior, params: SparseGPParams, x):
        """Mean and variance of ``f(x)`` under the Gaussian described by ``post`` (q or the cavity)."""
        kernel = kernel_of(params)
        proj = solve_lower(post.chol_uu, kernel(params.inducing, x))  # a_n = L_uu⁻¹k_n, [M, B]
        mean = proj.T @ solve_upper_from_lower(post.chol_b, post.whitened)
        var = (
            jnp.maximum(kernel.diag(x) - jnp.sum(proj**2, axis=0), 0.0)
            + jnp.sum(solve_lower(post.chol_b, proj) ** 2, axis=0)
        )
        return mean, var

    def local_energy(self, params: SparseGPParams, x, y, mask, n_total):
        """Data term of one chunk: ``Σ_n mask_n (1/α) log Z̃_n`` (``Σ mask_n E_q[log p]`` at α = 0).

        Rows with ``mask = 0`` (padding) contribute exactly zero to the value and the gradient.
        """
        scale = 1.0 if self.alpha == 0.0 else self._cavity_scale(n_total)
        mean, var = self._marginals(self._posterior(params, scale), params, x)
        terms = scaled_log_tilted(self.likelihood, params.likelihood, y, mean, var, self.alpha)
        return jnp.sum(jnp.where(mask, terms, 0.0))

    def energy(self, params: SparseGPParams, x, y):
        """The whole energy ``F = G + L`` on in-memory data (all rows, no minibatching)."""
        n = x.shape[0]
        return self.global_energy(params, n) + self.local_energy(params, x, y, jnp.ones(n, bool), n)

    # ----------------------------------------------------------------------------------------------
    def predict_f(self, params: SparseGPParams, x):
        """Posterior mean and variance of the latent function at ``x``."""
        return self._marginals(self._posterior(params, 1.0), params, x)

    def predict_y(self, params: SparseGPParams, x):
        """The likelihood's predictive distribution at ``x`` (mean/variance, or class-1 probability)."""
        mean, var = self.predict_f(params, x)
        return self.likelihood.predict(params.likelihood, mean, var)

    def posterior_moments(self, params: SparseGPParams):
        """``(m, V)`` of ``q(u)``: ``m = L_uu R⁻ᵀc``, ``V = L_uu B⁻¹ L_uuᵀ``."""
        post = self._posterior(params, 1.0)
        mean = post.chol_uu @ solve_upper_from_lower(post.chol_b, post.whitened)
        half = solve_lower(post.chol_b, post.chol_uu.T)
        return mean, half.T @ half


jax.tree_util.register_static(PowerEPSparseGP)
