"""A bank of sparse GPs seen through a *Gaussian* input: the RBF ψ-statistics and the moments they give.

:func:`pep_gp.core.bank.latent_marginals` projects fixed rows; a hidden layer of a deep GP (seed004) feeds
the next layer a diagonal Gaussian ``h ~ N(μ, diag(s))`` instead. For the ARD squared-exponential kernel
the expectations over ``h`` are closed form (Titsias & Lawrence 2010; seed004 spec §3.3)::

    ψ₀ = σ_f²,
    [ψ₁]_m   = σ_f² Π_j (ℓ_j²/(ℓ_j² + s_j))^½ exp(−½ Σ_j (μ_j − z_mj)²/(ℓ_j² + s_j)),
    [ψ₂]_mm' = σ_f⁴ Π_j (ℓ_j²/(ℓ_j² + 2s_j))^½ exp(−Σ_j [(z_mj − z_m'j)²/(4ℓ_j²) + (μ_j − z̄_mm'j)²/(ℓ_j² + 2s_j)]),

with ``z̄ = (z_m + z_m')/2``. Given a Gaussian ``N(m̂, V̂)`` over ``u`` (``q`` or a cavity), the output
``f(h) = k(h)ᵀK⁻¹u + FITC noise`` has (seed004 App. D eqs. 1–7, typos fixed by the spec)

    mean = ψ₁ᵀa,   var = ψ₀ + tr(Bψ₂) − mean²,   a = K⁻¹m̂,   B = K⁻¹(V̂ + m̂m̂ᵀ)K⁻¹ − K⁻¹.

``tr(Bψ₂) − mean²`` cancels badly (spec §8.5), so the variance is computed as a sum of three parts that
are each non-negative in exact arithmetic, each clamped at its floor:

    var = [κ − tr(K⁻¹ψ₂)]_{≥d}  +  [tr(K⁻¹V̂K⁻¹ψ₂)]_{≥0}  +  [aᵀψ₂a − (ψ₁ᵀa)²]_{≥0}
          E[FITC variance]         E[spread of u]             variance of the mean over h,

with ``κ = σ_f² + d`` and ``d`` the bank's diagonal (jitter), as in :func:`pep_gp.core.bank.row_projections`.
Squared distances are formed from differences, never expanded, so no offset cancels.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from .bank import Bank, Gaussians, Marginals, PriorFactors
from .kernels import BatchedARDSquaredExponential


class Psi(NamedTuple):
    """ψ₁ ``[G, B, M]`` and ψ₂ ``[G, B, M, M]`` of every GP of a bank for rows ``b`` (ψ₀ is ``σ_f²``)."""

    psi1: jnp.ndarray
    psi2: jnp.ndarray


def psi_statistics(kernel: BatchedARDSquaredExponential, inducing, mean, var) -> Psi:
    """``E[k(h, Z)]`` and ``E[k(Z, h)k(h, Z)]`` under ``h ~ N(mean, diag(var))`` (spec §3.3).

    Args:
        kernel: ``G`` ARD kernels (lengthscales ``[G, D]``, amplitude ``σ_f²`` ``[G]``).
        inducing: ``Z`` ``[G, M, D]``.
        mean, var: the input's mean and (non-negative) variance per row and dimension, ``[B, D]``.
    """
    ell2 = kernel.lengthscales[:, None, :] ** 2  # [G, 1, D]
    var = var[None]  # [1, B, D]
    spread1, spread2 = ell2 + var, ell2 + 2.0 * var  # [G, B, D]
    log_c1 = 0.5 * jnp.sum(jnp.log(ell2) - jnp.log(spread1), axis=-1)  # [G, B]
    log_c2 = 0.5 * jnp.sum(jnp.log(ell2) - jnp.log(spread2), axis=-1)
    diff = mean[None, :, None, :] - inducing[:, None, :, :]  # μ − z_m, [G, B, M, D]
    exponent1 = -0.5 * jnp.sum(diff**2 / spread1[:, :, None, :], axis=-1)  # [G, B, M]
    exponent2 = jnp.zeros(exponent1.shape + exponent1.shape[-1:], exponent1.dtype)  # [G, B, M, M]
    for j in range(inducing.shape[-1]):  # one input dimension at a time: [G, B, M, M] intermediates only
        half_gap = 0.5 * (inducing[:, :, None, j] - inducing[:, None, :, j])  # (z_m − z_m')/2, [G, M, M]
        centred = 0.5 * (diff[..., j][:, :, :, None] + diff[..., j][:, :, None, :])  # μ − z̄, [G, B, M, M]
        exponent2 = exponent2 - (half_gap[:, None] ** 2 / kernel.lengthscales[:, None, None, None, j] ** 2
                                 + centred**2 / spread2[:, :, None, None, j])
    amplitude = kernel.variance[:, None]  # [G, 1]
    psi1 = (amplitude * jnp.exp(log_c1))[..., None] * jnp.exp(exponent1)
    psi2 = (amplitude**2 * jnp.exp(log_c2))[..., None, None] * jnp.exp(exponent2)
    return Psi(psi1, psi2)


def uncertain_input_marginals(bank: Bank, prior: PriorFactors, gaussian: Gaussians, mean, var) -> Marginals:
    """Mean and variance ``[B, G]`` of every GP's output at a Gaussian input ``N(mean, diag(var))``,
    ``u`` distributed as ``gaussian`` (seed004 App. D eqs. 1–2; the guarded split of the module docstring).
    At ``var = 0`` this equals :func:`pep_gp.core.bank.latent_marginals` at the rows ``mean``."""
    psi = psi_statistics(bank.kernel, bank.inducing, mean, var)
    inverse = jnp.swapaxes(prior.inverse, -1, -2) @ prior.inverse  # K⁻¹ = L⁻ᵀL⁻¹, [G, M, M]
    a = jnp.einsum("gmn,gn->gm", inverse, gaussian.mean)  # K⁻¹m̂
    spread = inverse @ gaussian.sqrt_cov  # K⁻¹S with V̂ = SSᵀ
    out_mean = jnp.einsum("gbm,gm->bg", psi.psi1, a)
    kappa = bank.kernel.variance + bank.diagonal  # [G]
    fitc = kappa - jnp.einsum("gbmn,gmn->bg", psi.psi2, inverse)
    projected = jnp.einsum("gbmn,gmn->bg", psi.psi2, spread @ jnp.swapaxes(spread, -1, -2))
    mean_spread = jnp.einsum("gbmn,gm,gn->bg", psi.psi2, a, a) - out_mean**2
    out_var = jnp.maximum(fitc, bank.diagonal) + jnp.maximum(projected, 0.0) + jnp.maximum(mean_spread, 0.0)
    return Marginals(out_mean, out_var)
