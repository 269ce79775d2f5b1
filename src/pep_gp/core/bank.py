"""A bank of G independent sparse GPs with tied Gaussian factors: the piece every model of pep shares.

Power EP (Bui, Yan & Turner 2017) is one such GP (G = 1) with a likelihood per row; the multi-class classifier of
Villacampa-Calvo & Hernández-Lobato 2017 is a bank of G = C GPs, one per class; a deep GP (Bui et al. 2016) is one bank per layer. A model adds
only its per-row term (:mod:`pep_gp.core.likelihoods`, :mod:`pep_gp.core.models.multiclass_sites`).

GP ``g`` has inducing inputs ``Z_g`` ``[M, D]``, a kernel (:mod:`pep_gp.core.kernels`, one per GP) and a diagonal term
``d_g`` (the inducing-output noise σ₀ of Villacampa-Calvo & Hernández-Lobato's (2017) code, plus the jitter): its prior on the inducing outputs
is ``p_g(u) = N(0, K_g)``, ``K_g = k_g(Z_g, Z_g) + d_g I``, and ``κ_g(x) = k_g(x, x) + d_g``. All N tied factors
of GP ``g`` are one Gaussian ``t_g(u) = exp(η_gᵀu − ½uᵀΛ_gu)`` stored in ``u`` coordinates — natural
parameters moved by EP updates (:class:`NaturalFactor`) or a Cholesky factor ``Λ_g = L_gL_gᵀ`` moved by
the optimiser (:class:`CholeskyFactor`) — or through ``q_g`` in the prior's whitened coordinates
(:class:`WhitenedPosterior`). Every Gaussian a method needs is ``p_g·t_g^s``: ``q`` (``s = 1``)
or the Power-EP cavity (``s = 1 − α/n_g``, ``n_g`` the factors tied into ``t_g``).

Numerics: with ``L = chol(K_g)`` and ``R = chol(I + s LᵀΛL)``, ``p·t^s`` has ``V = SSᵀ``, ``S = LR⁻ᵀ``,
``m = S c``, ``c = R⁻¹sLᵀη`` and ``φ(p·t^s) − φ(p) = ½‖c‖² − log|R|`` (Bui, Yan & Turner 2017 eq. 113 in whitened form);
nothing is inverted explicitly but ``L`` (:func:`pep_gp.core.linalg.cholesky_and_inverse`), whose inverse
turns every projection of rows into matrix products.
"""

from __future__ import annotations

from typing import NamedTuple, Union

import jax.numpy as jnp

from .kernels import Kernel
from .linalg import cholesky, cholesky_and_inverse, per_matrix, solve_lower


class NaturalFactor(NamedTuple):
    """Tied factors in natural parameters, updated by EP (SEP)."""

    shift: jnp.ndarray  # η_g, [G, M]
    precision: jnp.ndarray  # Λ_g, [G, M, M], symmetric positive semi-definite


class CholeskyFactor(NamedTuple):
    """Tied factors as ``(η_g, L_g)`` with ``Λ_g = L_gL_gᵀ``, trained by gradient."""

    shift: jnp.ndarray  # η_g, [G, M]
    chol: jnp.ndarray  # lower-triangular L_g, [G, M, M]


class WhitenedPosterior(NamedTuple):
    """Tied factors held through the Gaussian they make, ``q_g = p_g·t_g``, in the whitened coordinates
    ``v = L_g⁻¹u`` of each GP's prior (``L_g = chol(K_g)``): ``q_g(v) = N(m̂_g, Ŝ_gŜ_gᵀ)``, GPflow's whitened
    ``q(v)`` (Hensman, Matthews & Ghahramani 2015, §3), trained by gradient. The factor is ``t_g = q_g/p_g``:
    ``L_gᵀΛ_gL_g = (Ŝ_gŜ_gᵀ)⁻¹ − I`` and ``L_gᵀη_g = (Ŝ_gŜ_gᵀ)⁻¹m̂_g`` (every Power-EP cavity
    ``p·t^s = (1 − s)p + s q`` in precision is proper for ``s ∈ [0, 1]``). Neither the scale of ``K_g``'s
    conditioning (a :class:`CholeskyFactor` starts at ``Λ = K⁻¹``, entries of 1e6 and more for a squared
    exponential on a dense ``Z_g``) nor the zero gradient of ``Λ = LLᵀ`` at ``L = 0`` stands in the optimiser's way:
    ``Ŝ = I``, ``m̂ = 0`` is ``q = p`` (docs/how-to/heteroscedastic.md)."""

    whitened_mean: jnp.ndarray  # m̂_g, [G, M]
    whitened_sqrt: jnp.ndarray  # lower-triangular Ŝ_g, [G, M, M]


Factor = Union[NaturalFactor, CholeskyFactor, WhitenedPosterior]


class Bank(NamedTuple):
    """The constrained hyper-parameters of G sparse GPs."""

    kernel: Kernel  # G covariance functions (hyper-parameters [G, ·])
    inducing: jnp.ndarray  # Z_g, [G, M, D]
    diagonal: jnp.ndarray  # d_g, [G]: added to K_g's diagonal and to κ_g; the floor of the FITC variance


class PriorFactors(NamedTuple):
    """``L_g = chol(K_g)`` and its inverse."""

    chol: jnp.ndarray  # [G, M, M]
    inverse: jnp.ndarray  # [G, M, M]


class Gaussians(NamedTuple):
    """``p_g·t_g^s`` per GP in ``u`` coordinates."""

    mean: jnp.ndarray  # [G, M]
    sqrt_cov: jnp.ndarray  # S with V = SSᵀ, [G, M, M]
    log_normaliser: jnp.ndarray  # φ(·) − φ(p_g), [G]


class RowProjections(NamedTuple):
    """Per GP and row: ``υ = K_g⁻¹k_g(x)`` and the FITC variance ``κ_g(x) − k_gᵀK_g⁻¹k_g ≥ d_g`` (Villacampa-Calvo & Hernández-Lobato 2017 eqs. 4–5)."""

    directions: jnp.ndarray  # [G, B, M]
    fitc_var: jnp.ndarray  # [G, B]
    prior_mean: jnp.ndarray | None = None  # m_g(x), [B, G]: the prior's mean (pep_gp.core.means); None: zero


class Marginals(NamedTuple):
    """A Gaussian over ``u_g`` seen along rows' directions: ``a = υᵀm``, ``w = υᵀVυ``."""

    mean: jnp.ndarray  # [B, G]
    var: jnp.ndarray  # [B, G]


def prior_covariances(bank: Bank):
    """``K_g = k_g(Z_g, Z_g) + d_g I`` for every GP, ``[G, M, M]``."""
    eye = jnp.eye(bank.inducing.shape[1], dtype=bank.diagonal.dtype)
    return bank.kernel.gram(bank.inducing) + bank.diagonal[:, None, None] * eye


def prior_factors(bank: Bank) -> PriorFactors:
    """``chol(K_g)`` and its inverse for every GP, O(G·M³)."""
    return PriorFactors(*cholesky_and_inverse(prior_covariances(bank)))


def prior_precision_cholesky(prior: PriorFactors):
    """``chol(K_g⁻¹) = chol(P_gᵀP_g)`` for every GP, ``[G, M, M]``: the Cholesky factor of a tied factor that
    starts at the prior's precision (``Λ = K⁻¹``)."""
    inverse = prior.inverse
    return per_matrix(cholesky, jnp.swapaxes(inverse, -1, -2) @ inverse)


def _whitened_posterior_precision(factor: WhitenedPosterior):
    """``(ŜŜᵀ)⁻¹`` for one GP."""
    inverse = solve_lower(jnp.tril(factor.whitened_sqrt), jnp.eye(factor.whitened_sqrt.shape[-1],
                                                                  dtype=factor.whitened_sqrt.dtype))
    return inverse.T @ inverse


def _whitened_precision(factor: Factor, chol_k):
    """``LᵀΛL`` for one GP."""
    if isinstance(factor, WhitenedPosterior):
        return _whitened_posterior_precision(factor) - jnp.eye(chol_k.shape[0], dtype=chol_k.dtype)
    if isinstance(factor, CholeskyFactor):
        a = chol_k.T @ jnp.tril(factor.chol)
        return a @ a.T
    a = chol_k.T @ factor.precision @ chol_k
    return 0.5 * (a + a.T)


def _gaussians_of_one(chol_k, factor: Factor, scales):
    """``p·t^s`` for one GP at each of ``scales`` (see the module docstring for the whitened form), from
    one ``LᵀΛL``."""
    size = chol_k.shape[0]
    whitened_precision = _whitened_precision(factor, chol_k)
    if isinstance(factor, WhitenedPosterior):  # Lᵀη = (ŜŜᵀ)⁻¹m̂
        shift = _whitened_posterior_precision(factor) @ factor.whitened_mean
    else:
        shift = chol_k.T @ factor.shift

    def at(scale):
        chol_b = cholesky(jnp.eye(size, dtype=chol_k.dtype) + scale * whitened_precision)
        whitened = solve_lower(chol_b, scale * shift)
        sqrt_cov = solve_lower(chol_b, chol_k.T).T  # L R⁻ᵀ
        log_normaliser = 0.5 * jnp.sum(whitened**2) - jnp.sum(jnp.log(jnp.diagonal(chol_b)))
        return sqrt_cov @ whitened, sqrt_cov, log_normaliser

    return tuple(at(scale) for scale in scales)


def gaussians(prior: PriorFactors, factor: Factor, scale) -> Gaussians:
    """``p_g·t_g^{s_g}`` for every GP (``scale`` a scalar or ``[G]``: 1 for ``q``, ``1 − α/n_g`` for the
    cavity), one factorisation at a time (:func:`pep_gp.core.linalg.per_matrix`)."""
    return gaussians_at(prior, factor, (scale,))[0]


def gaussians_at(prior: PriorFactors, factor: Factor, scales: tuple) -> tuple[Gaussians, ...]:
    """:func:`gaussians` at each of ``scales`` (e.g. a cavity and ``q``), sharing each GP's whitened
    precision ``LᵀΛL`` (two of the O(G·M³) products per GP and scale otherwise)."""
    size = prior.chol.shape[:1]
    scales = tuple(jnp.broadcast_to(scale, size) for scale in scales)
    return tuple(Gaussians(*parts) for parts in per_matrix(_gaussians_of_one, prior.chol, factor, scales))


def row_projections(bank: Bank, prior: PriorFactors, x) -> RowProjections:
    """``υ = K_g⁻¹k_g(x)`` and the FITC variance for the rows ``x`` ``[B, D]`` (batched over GPs)."""
    proj = prior.inverse @ bank.kernel.cross(bank.inducing, x)  # L⁻¹k, [G, M, B]
    kappa = bank.kernel.diag(x) + bank.diagonal[:, None]  # [G, B]
    fitc = jnp.maximum(kappa - jnp.sum(proj**2, axis=1), bank.diagonal[:, None])
    return RowProjections(jnp.einsum("gmb,gmn->gbn", proj, prior.inverse), fitc)  # υ = L⁻ᵀL⁻¹k


def project(gaussians: Gaussians, directions) -> Marginals:
    """``a = υᵀm`` and ``w = υᵀVυ = ‖υᵀS‖²`` for ``directions`` ``[G, B, M]``; outputs ``[B, G]``.

    ``υᵀS`` is formed ``[G, B, M]``, a plain batched matrix product, and only the ``[G, B]`` sums are
    transposed: formed ``[B, G, M]``, XLA:CPU computed it as a slower product of the other layout plus a copy
    of the whole array (a multi-class SEP step on digits, 10 classes, M = 50, B = 2,000: 9 % faster so)."""
    mean = jnp.einsum("gbm,gm->bg", directions, gaussians.mean)
    var = jnp.sum(jnp.einsum("gbm,gmn->gbn", directions, gaussians.sqrt_cov) ** 2, axis=-1).T
    return Marginals(mean, var)


def latent_marginals(bank: Bank, prior: PriorFactors, gaussian: Gaussians, x) -> Marginals:
    """Mean and variance of every GP's ``f(x)`` under ``gaussian`` (``q`` or a cavity): the projection
    plus the FITC variance, ``[B, G]`` each."""
    rows = row_projections(bank, prior, x)
    proj = project(gaussian, rows.directions)
    return Marginals(proj.mean, proj.var + rows.fitc_var.T)


def latent_moments(bank: Bank, prior: PriorFactors, gaussian: Gaussians, x, full_cov: bool = False):
    """Every GP's ``f(x)`` under ``gaussian``: :func:`latent_marginals` (mean and variance ``[B, G]``) or,
    with ``full_cov``, the mean ``[B, G]`` and the covariance ``[G, B, B]`` of the sparse-GP predictive
    ``∫ p(f|u) q(u) du`` (Titsias 2009, eq. 6; Bui, Yan & Turner 2017, §3.1):

        K_xx + d I − K_xz K⁻¹K_zx + υᵀVυ,    υ = K⁻¹K_zx,

    whose diagonal is the marginal variance (there the FITC term is floored at ``d``). O(G·B²·M)."""
    if not full_cov:
        return latent_marginals(bank, prior, gaussian, x)
    proj = prior.inverse @ bank.kernel.cross(bank.inducing, x)  # L⁻¹K_zx, [G, M, B]
    along = jnp.einsum("gmb,gmn,gnk->gbk", proj, prior.inverse, gaussian.sqrt_cov)  # υᵀS, [G, B, M]
    mean = jnp.einsum("gmb,gmn,gn->bg", proj, prior.inverse, gaussian.mean)  # υᵀm
    prior_cov = bank.kernel.gram(jnp.broadcast_to(x, (bank.inducing.shape[0], *x.shape)))
    eye = jnp.eye(x.shape[0], dtype=x.dtype)
    cov = (prior_cov + bank.diagonal[:, None, None] * eye - jnp.einsum("gmb,gmc->gbc", proj, proj)
           + jnp.einsum("gbk,gck->gbc", along, along))
    return mean, cov


def power_ep_global_term(q: Gaussians, cavity: Gaussians, counts, alpha: float):
    """``Σ_g φ(q_g) − φ(p_g) + (n_g/α)(φ(cav_g) − φ(q_g))`` (Bui, Yan & Turner 2017 eq. 110 with tied factors; Villacampa-Calvo & Hernández-Lobato 2017
    Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1, eq. 9): O(G·M³), independent of the rows."""
    return jnp.sum(q.log_normaliser + (counts / alpha) * (cavity.log_normaliser - q.log_normaliser))


def variational_global_term(q: Gaussians, factor: CholeskyFactor | WhitenedPosterior):
    """``Σ_g φ(q_g) − φ(p_g) − E_{q_g}[log t_g]`` with ``E_q[log t] = ηᵀm − ½tr(Λ(V + mmᵀ))``, ``Λ = LLᵀ``: the
    α → 0 limit of :func:`power_ep_global_term`, where the cavity is ``q`` (Bui, Yan & Turner 2017, eqs. 144–146).
    With ``q = p·t/Z`` it is ``−Σ_g KL(q_g‖p_g)``, for a :class:`WhitenedPosterior` in its whitened form
    ``½(M + log|ŜŜᵀ| − tr(ŜŜᵀ) − ‖m̂‖²)`` (Hensman, Matthews & Ghahramani 2015, eq. 4)."""
    if isinstance(factor, WhitenedPosterior):
        root = jnp.tril(factor.whitened_sqrt)
        log_det = 2.0 * jnp.sum(jnp.log(jnp.abs(jnp.diagonal(root, axis1=-2, axis2=-1))), axis=-1)  # log|ŜŜᵀ|
        return 0.5 * jnp.sum(root.shape[-1] + log_det - jnp.sum(root**2, axis=(-2, -1))
                             - jnp.sum(factor.whitened_mean**2, axis=-1))
    chol_t = jnp.swapaxes(jnp.tril(factor.chol), -1, -2)  # Lᵀ, [G, M, M]
    expected_log_factor = (jnp.einsum("gm,gm->g", factor.shift, q.mean)
                           - 0.5 * (jnp.sum((chol_t @ q.sqrt_cov) ** 2, axis=(-2, -1))
                                    + jnp.sum(jnp.einsum("gmn,gn->gm", chol_t, q.mean) ** 2, axis=-1)))
    return jnp.sum(q.log_normaliser - expected_log_factor)


def one_gp_bank(params, jitter: float) -> Bank:
    """A single sparse GP as a bank of one: ``params`` holds ``kernel`` (a kernel of one GP) and ``inducing``
    ``[M, D]``; the jitter on ``K_uu`` is ``jitter`` times the kernel's amplitude (``σ_f²`` of a stationary one)."""
    return Bank(params.kernel, params.inducing[None], jitter * params.kernel.amplitude())
