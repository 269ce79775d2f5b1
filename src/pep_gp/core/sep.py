"""Stochastic EP with tied factors (Li, Hernández-Lobato & Turner 2015; Villacampa-Calvo & Hernández-Lobato
2017, §2.3): what every SEP model of pep shares — the damped update of the tied factors from summed refined
sites, and the gradient of the energy with the cavity held fixed (their eq. 10), which is the gradient of a
surrogate of the prior term only."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .bank import Gaussians, NaturalFactor, PriorFactors, gaussians, power_ep_global_term


def hold_gradient(value, surrogate):
    """``value`` whose gradient is that of ``surrogate`` (``sg(value) + surrogate − sg(surrogate)``)."""
    return jax.lax.stop_gradient(value) + surrogate - jax.lax.stop_gradient(surrogate)


def damped_site_update(factor: NaturalFactor, shift, precision, count, counts, damping):
    """The SEP update of tied factors from summed refined sites (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1):

        Λ_g ← (1 − ρ_g n_{B,g}/n_g) Λ_g + ρ_g Σ_B Δ υυᵀ,   and likewise for η_g,

    ``shift [G, M]``, ``precision [G, M, M]`` the sums over the ``count [G]`` sites of a minibatch, ``counts``
    the ``n_g`` tied factors. The step is shrunk to ``ρ_g = min(ρ, n_g/n_{B,g})`` so the kept fraction of
    the old factor never goes negative. Returns the new factor, or the old one where the result is not
    finite, and whether the new one was taken."""
    new = damped_factor(factor, shift, precision, count, counts, damping)
    ok = factor_finite(new)
    return chosen_factor(ok, new, factor), ok


def damped_factor(factor: NaturalFactor, shift, precision, count, counts, damping) -> NaturalFactor:
    """The new factor of :func:`damped_site_update`, unchecked: each GP's from its own sums only, so a bank
    split into groups of GPs computes it group by group (the class-parallel step,
    :mod:`pep_gp.pipeline.training.class_groups`)."""
    step = jnp.minimum(damping, counts / jnp.maximum(count, 1.0))
    keep = 1.0 - step * count / counts
    return NaturalFactor(keep[:, None] * factor.shift + step[:, None] * shift,
                         keep[:, None, None] * factor.precision + step[:, None, None] * precision)


def factor_finite(factor: NaturalFactor) -> jnp.ndarray:
    """True when every entry of ``factor`` is finite."""
    return jnp.all(jnp.isfinite(factor.shift)) & jnp.all(jnp.isfinite(factor.precision))


def chosen_factor(ok, new: NaturalFactor, old: NaturalFactor) -> NaturalFactor:
    """``new`` where ``ok``, else ``old`` (a select: the bits of one or the other)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, old)


def prior_surrogate(prior: PriorFactors, q: Gaussians):
    """``Σ_g −½log|K_g| − ½tr(K_g⁻¹(V_g + m_gm_gᵀ))`` with ``q`` held fixed: its gradient is the prior term
    ``(η − η_prior)ᵀ∂θ_prior/∂ξ`` of Villacampa-Calvo & Hernández-Lobato 2017 eq. (10) (eqs. 63–64).

    Only ``P = L⁻¹`` is differentiated (``½log|K| = −Σ log P_ii``), so ``L`` may be held
    (:func:`pep_gp.core.linalg.cholesky_and_inverse` then skips a matrix product in its backward pass)."""
    q = jax.lax.stop_gradient(q)
    whitened_cov = prior.inverse @ q.sqrt_cov
    whitened_mean = jnp.einsum("gmn,gn->gm", prior.inverse, q.mean)
    half_log_det = -jnp.sum(jnp.log(jnp.diagonal(prior.inverse, axis1=-2, axis2=-1)))
    return -half_log_det - 0.5 * (jnp.sum(whitened_cov**2) + jnp.sum(whitened_mean**2))


def held_global_energy(prior: PriorFactors, factor: NaturalFactor, cavity: Gaussians, counts, alpha: float,
                       q: Gaussians | None = None):
    """The Power-EP global term ``Σ_g φ(q_g) − φ(p_g) + (n_g/α)(φ(cav_g) − φ(q_g))`` whose gradient is the
    prior term of eq. (10) only (the factor moves by site updates, the cavity is held); ``q = p·t`` of
    ``factor`` unless given (computed with the cavity, :func:`pep_gp.core.bank.gaussians_at`)."""
    q = gaussians(prior, factor, 1.0) if q is None else q
    return hold_gradient(power_ep_global_term(q, cavity, counts, alpha), prior_surrogate(prior, q))
