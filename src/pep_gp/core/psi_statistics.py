"""A layer of sparse GPs seen through a fixed or a *Gaussian* input: the RBF ψ-statistics and the moments
they give.

A deep GP (Bui et al. 2016) feeds its first layer fixed rows and every later layer the diagonal Gaussian
``h ~ N(μ, diag(s))`` of the previous layer's outputs. Each GP's inducing outputs ``u`` have a Gaussian
``N(m̂, V̂) ∝ p(u)·t(u)^s`` (``q`` at ``s = 1`` or a cavity) with ``p = N(0, K)``, ``L = chol(K)`` and the tied
factor's precision ``Λ = L_Λ L_Λᵀ`` (:class:`pep_gp.core.bank.CholeskyFactor`). With ``R = chol(I + s LᵀΛL)``
and ``c = R⁻¹ s Lᵀη`` (the whitened form of :mod:`pep_gp.core.bank`) everything a row needs is

    a = K⁻¹m̂ = Pᵀc,   K⁻¹V̂K⁻¹ = PᵀP,   P = R⁻¹L⁻¹,   φ(p·t^s) − φ(p) = ½‖c‖² − log|R|,

computed once per step (:func:`projected_gaussians`, inverses from :func:`pep_gp.core.linalg.cholesky_and_inverse`,
whose backward pass is matrix products only). At a fixed row ``x`` with ``k = k(Z, x)`` the output has
mean ``kᵀa`` and variance ``[κ − ‖L⁻¹k‖²]_{≥d} + ‖Pk‖²`` (:func:`fixed_input_marginals`: one product
of ``[L⁻¹; P]`` with the rows). For the ARD squared-exponential kernel the expectations over a Gaussian
input (Bui et al. 2016, App. D eqs. 3–5) are closed form (Titsias & Lawrence 2010)::

    ψ₀ = σ_f²,
    [ψ₁]_m   = σ_f² Π_j (ℓ_j²/(ℓ_j² + s_j))^½ exp(−½ Σ_j (μ_j − z_mj)²/(ℓ_j² + s_j)),
    [ψ₂]_mm' = σ_f⁴ Π_j (ℓ_j²/(ℓ_j² + 2s_j))^½ exp(−Σ_j [(z_mj − z_m'j)²/(4ℓ_j²) + (μ_j − z̄_mm'j)²/(ℓ_j² + 2s_j)]),

with ``z̄ = (z_m + z_m')/2``, and the output ``f(h) = k(h)ᵀK⁻¹u + FITC noise`` has (Bui et al. 2016,
App. D eqs. 1–7) ``mean = ψ₁ᵀa`` and ``var = ψ₀ + tr(Bψ₂) − mean²`` with ``B = K⁻¹(V̂ + m̂m̂ᵀ)K⁻¹ − K⁻¹``.
``tr(Bψ₂) − mean²`` cancels badly, so the variance is computed as a sum of three parts that are each
non-negative in exact arithmetic, each clamped at its floor:

    var = [κ − tr(K⁻¹ψ₂)]_{≥d}  +  [tr(PᵀPψ₂)]_{≥0}  +  [aᵀψ₂a − (ψ₁ᵀa)²]_{≥0}
          E[FITC variance]         E[spread of u]       variance of the mean over h,

with ``κ = σ_f² + d`` and ``d`` the bank's diagonal (jitter), as in :func:`pep_gp.core.bank.row_projections`.

ψ₂ is used only through such traces ``tr(Wψ₂)``, so it is never formed: :func:`psi2_traces` writes its
logarithm about the centre ``c₀`` of the inducing inputs as a row part plus a pair part plus a product of
small matrices (``z̃ = z − c₀``, ``μ̃ = μ − c₀``, ``w_j = 1/(ℓ_j² + 2s_j)``)::

    log [ψ₂]_{pair} = row + offset_{pair} + Σ_k coeff_k · basis_{pair,k},
    row = log σ_f⁴ + ½ Σ_j log(ℓ_j² w_j) − Σ_j w_j μ̃_j²,   offset = −Σ_j (z_mj − z_m'j)²/(4ℓ_j²),
    coeff = (2w_j μ̃_j, −w_j)_j,   basis = (z̄̃_j, z̄̃_j²)_j,

over the ``M(M+1)/2`` pairs ``m ≤ m'`` only (ψ₂ is symmetric; an off-diagonal pair carries
``W_mm' + W_m'm``; these and the pair parts are computed once per step, :func:`pair_terms`), a few rows at a time under ``lax.map`` with the exponentials
recomputed in the backward pass (``jax.checkpoint``): memory ``O(rows per chunk · M²)`` instead of
``[B, M, M]`` arrays. The expansion about ``c₀`` keeps the round-off of the exponent at
``~ε·w·(|μ̃| + |z̄̃|)²``; the traces and their gradients match a 40-digit reference to 1e-10
(``tests/core/test_psi_statistics.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .bank import Bank, CholeskyFactor, Marginals, PriorFactors
from .kernels import SquaredExponential, _centre
from .linalg import cholesky_and_inverse

PSI2_CHUNK_ROWS = 32  # rows per chunk of the ψ₂ traces: [G, 32, M(M+1)/2] exponentials at a time


class Projected(NamedTuple):
    """The Gaussians ``p_g·t_g^s`` of a layer's ``G`` GPs in the form the forward pass uses (module docstring)."""

    mean_weights: jnp.ndarray  # a = K⁻¹m̂, [G, M]
    spread: jnp.ndarray  # P = R⁻¹L⁻¹ (lower triangular), K⁻¹V̂K⁻¹ = PᵀP, [G, M, M]
    log_normaliser: jnp.ndarray  # φ(p·t^s) − φ(p), [G]


def _whitened(prior: PriorFactors, factor: CholeskyFactor, scales: tuple):
    """For each ``s`` of ``scales`` (a scalar, or one per GP ``[G]``): ``R = chol(I + s LᵀΛL)``, ``R⁻¹`` and
    ``c = R⁻¹ s Lᵀη`` per GP, ``LᵀΛL`` formed once and all the factorisations run as one loop."""
    root = jnp.swapaxes(prior.chol, -1, -2) @ jnp.tril(factor.chol)  # LᵀL_Λ, [G, M, M]
    precision = root @ jnp.swapaxes(root, -1, -2)
    eye = jnp.eye(root.shape[-1], dtype=root.dtype)
    per_gp = lambda s, trailing: s if jnp.ndim(s) == 0 else jnp.reshape(s, (-1,) + (1,) * trailing)
    chol, inverse = cholesky_and_inverse(jnp.concatenate([eye + per_gp(s, 2) * precision for s in scales]))
    shift = jnp.einsum("gnm,gn->gm", prior.chol, factor.shift)  # Lᵀη
    whitened = jnp.einsum("gmn,gn->gm", inverse, jnp.concatenate([per_gp(s, 1) * shift for s in scales]))
    return [tuple(part[i * len(shift):(i + 1) * len(shift)] for part in (chol, inverse, whitened))
            for i in range(len(scales))]


def _log_normaliser(chol, whitened):
    """``φ(p·t^s) − φ(p) = ½‖c‖² − log|R|`` (Bui, Yan & Turner 2017, eq. 113, in whitened form)."""
    return 0.5 * jnp.sum(whitened**2, axis=-1) - jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)


def _projected(prior: PriorFactors, chol, inverse, whitened) -> Projected:
    spread = inverse @ prior.inverse  # R⁻¹L⁻¹
    return Projected(jnp.einsum("gmn,gm->gn", spread, whitened), spread, _log_normaliser(chol, whitened))


def projected_gaussians(prior: PriorFactors, factor: CholeskyFactor, scale) -> Projected:
    """``p_g·t_g^s`` for every GP of a layer: ``a``, ``P`` and the log-normaliser (module docstring)."""
    (whitened,) = _whitened(prior, factor, (scale,))
    return _projected(prior, *whitened)


def cavities_and_posteriors(prior: PriorFactors, factor: CholeskyFactor, scale) -> tuple[Projected, jnp.ndarray]:
    """The cavities ``p_g·t_g^s`` (``s`` a scalar or ``[G]``) as :func:`projected_gaussians`, and ``φ(q_g) − φ(p_g)`` ``[G]`` of the
    posteriors ``q_g = p_g·t_g``, from one loop of factorisations."""
    cavity, posterior = _whitened(prior, factor, (scale, 1.0))
    return _projected(prior, *cavity), _log_normaliser(posterior[0], posterior[2])


def fixed_input_marginals(bank: Bank, prior: PriorFactors, gaussian: Projected, x) -> Marginals:
    """Mean ``kᵀa`` and variance ``[κ − ‖L⁻¹k‖²]_{≥d} + ‖Pk‖²`` ``[B, G]`` of every GP's output at the
    rows ``x`` ``[B, D]``, ``k = k(Z, x)`` and ``κ = k(x, x) + d`` (any kernel): as
    :func:`pep_gp.core.bank.latent_marginals`, with one product of ``[L⁻¹; P]`` with the rows instead of three."""
    cross = bank.kernel.cross(bank.inducing, x)  # [G, M, B]
    num_inducing = cross.shape[1]
    projections = jnp.concatenate([prior.inverse, gaussian.spread], axis=1) @ cross  # [G, 2M, B]
    kappa = bank.kernel.diag(x) + bank.diagonal[:, None]  # [G, B]
    fitc = jnp.maximum(kappa - jnp.sum(projections[:, :num_inducing] ** 2, axis=1), bank.diagonal[:, None])
    spread = jnp.sum(projections[:, num_inducing:] ** 2, axis=1)
    return Marginals(jnp.einsum("gmb,gm->bg", cross, gaussian.mean_weights), (fitc + spread).T)


class PairTerms(NamedTuple):
    """What :func:`psi2_traces` needs of a layer's pairs ``m ≤ m'`` (module docstring), the same for every
    row: computed once per step."""

    weights: jnp.ndarray  # W_mm (m = m') or W_mm' + W_m'm per weight matrix W, [G, R, M(M+1)/2]
    offset: jnp.ndarray  # −Σ_j (z_mj − z_m'j)²/(4ℓ_j²), [G, M(M+1)/2]
    basis: jnp.ndarray  # (z̄̃_j, z̄̃_j²)_j about the centre of Z, [G, M(M+1)/2, 2D]


def trace_weights(prior: PriorFactors, gaussian: Projected):
    """``K⁻¹``, ``PᵀP`` and ``aaᵀ`` ``[G, 3, M, M]``: the matrices whose traces with ψ₂ the variance needs."""
    inverse, a = prior.inverse, gaussian.mean_weights
    return jnp.stack([jnp.swapaxes(inverse, -1, -2) @ inverse,
                      jnp.swapaxes(gaussian.spread, -1, -2) @ gaussian.spread,
                      a[:, :, None] * a[:, None, :]], axis=1)


def pair_terms(bank: Bank, weights) -> PairTerms:
    """The :class:`PairTerms` of a layer for weight matrices ``weights`` ``[G, R, M, M]``, pairs in the order
    of ``numpy.triu_indices(M)``."""
    first, second = np.triu_indices(bank.inducing.shape[1])  # the pairs m ≤ m', static
    z = bank.inducing - _centre(bank.inducing)
    midpoint = 0.5 * (z[:, first] + z[:, second])  # [G, P, D]
    ell2 = bank.kernel.lengthscales.value[:, None, :] ** 2
    return PairTerms(weights[:, :, first, second] + jnp.where(first != second, weights[:, :, second, first], 0.0),
                     -_sum_over_inputs((z[:, first] - z[:, second]) ** 2 / (4.0 * ell2)),
                     jnp.concatenate([midpoint, midpoint**2], axis=-1))


def psi1(kernel: SquaredExponential, inducing, mean, var):
    """``E[k(h, Z)]`` ``[G, B, M]`` under ``h ~ N(mean, diag(var))`` (Bui et al. 2016, App. D eq. 4).

    Args:
        kernel: ``G`` ARD kernels (lengthscales ``[G, D]``, amplitude ``σ_f²`` ``[G]``).
        inducing: ``Z`` ``[G, M, D]``.
        mean, var: the input's mean and (non-negative) variance per row and dimension, ``[B, D]``.
    """
    ell2 = kernel.lengthscales.value**2  # [G, D]
    spread = ell2[:, None, :] + var[None]  # [G, B, D]
    exponent = 0.5 * _sum_over_inputs(jnp.log(ell2[:, None, :]) - jnp.log(spread))[:, :, None]  # [G, B, 1]
    for j in range(inducing.shape[-1]):
        exponent = exponent - 0.5 * (mean[None, :, None, j] - inducing[:, None, :, j]) ** 2 / spread[:, :, None, j]
    return kernel.variance.value[:, None, None] * jnp.exp(exponent)  # [G, B, M]


def _sum_over_inputs(values):
    """``Σ_j values[..., j]`` as a chain of additions: the input dimensions of a hidden layer are few, and
    XLA's reductions over a short last axis ran several times slower than the additions (ψ₁ of the Boston
    deep GP: 2.5 against 0.5 ms for value and gradient)."""
    total = values[..., 0]
    for j in range(1, values.shape[-1]):
        total = total + values[..., j]
    return total


def psi2_traces(kernel: SquaredExponential, inducing, pairs: PairTerms, mean, var):
    """``tr(W_{g,r} ψ₂) = Σ_{m≤m'} [ψ₂]_{g,b,m,m'} W_{g,r,(m,m')}`` ``[B, G, R]`` for the weights of ``pairs``,
    without forming ψ₂ (module docstring).

    Args:
        kernel, inducing, mean, var: as :func:`psi1`.
        pairs: the layer's :class:`PairTerms` (:func:`pair_terms`), for the same kernel and inducing inputs.
    """
    offset, basis, weights = pairs.offset, pairs.basis, pairs.weights
    mu = mean - _centre(inducing)
    ell2 = kernel.lengthscales.value**2  # [G, D]
    precision = 1.0 / (ell2[:, None, :] + 2.0 * var[None])  # w, [G, B, D]
    row = (2.0 * jnp.log(kernel.variance.value)[:, None] + _sum_over_inputs(0.5 * jnp.log(ell2[:, None, :] * precision)
                                                                         - precision * mu**2))  # [G, B]
    coeff = jnp.concatenate([2.0 * precision * mu, -precision], axis=-1)  # [G, B, 2D]

    def chunk(rows):
        row_part, row_coeff = rows  # [G, C], [G, C, 2D]
        log_psi2 = row_part[:, :, None] + offset[:, None, :] + jnp.einsum("gck,gpk->gcp", row_coeff, basis)
        return jnp.einsum("gcp,grp->cgr", jnp.exp(log_psi2), weights)

    width, rows = row.shape
    if rows <= PSI2_CHUNK_ROWS:
        return chunk((row, coeff))
    count = -(-rows // PSI2_CHUNK_ROWS)
    pad = count * PSI2_CHUNK_ROWS - rows  # padded rows are finite and dropped
    row = jnp.pad(row, ((0, 0), (0, pad))).reshape(width, count, PSI2_CHUNK_ROWS).swapaxes(0, 1)
    coeff = jnp.pad(coeff, ((0, 0), (0, pad), (0, 0))).reshape(width, count, PSI2_CHUNK_ROWS, -1).swapaxes(0, 1)
    traces = jax.lax.map(jax.checkpoint(chunk), (row, coeff))  # [count, C, G, R]
    return traces.reshape(count * PSI2_CHUNK_ROWS, width, -1)[:rows]


def uncertain_input_marginals(bank: Bank, gaussian: Projected, pairs: PairTerms, mean, var) -> Marginals:
    """Mean and variance ``[B, G]`` of every GP's output at a Gaussian input ``N(mean, diag(var))``, ``u``
    distributed as ``gaussian`` with ``pairs = pair_terms(bank, trace_weights(prior, gaussian))`` (Bui et al. 2016, App. D
    eqs. 1–2; the guarded split of the module docstring). At ``var = 0`` this equals
    :func:`fixed_input_marginals` at the rows ``mean``."""
    out_mean = jnp.einsum("gbm,gm->bg", psi1(bank.kernel, bank.inducing, mean, var), gaussian.mean_weights)
    traces = psi2_traces(bank.kernel, bank.inducing, pairs, mean, var)  # [B, G, 3]
    kappa = bank.kernel.variance.value + bank.diagonal  # [G]
    fitc = kappa - traces[..., 0]
    mean_spread = traces[..., 2] - out_mean**2
    out_var = jnp.maximum(fitc, bank.diagonal) + jnp.maximum(traces[..., 1], 0.0) + jnp.maximum(mean_spread, 0.0)
    return Marginals(out_mean, out_var)
