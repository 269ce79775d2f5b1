"""Projections of a one-dimensional tilted distribution onto a Gaussian: the site update's one choice.

An EP-style site update forms the tilted distribution ``q̃(f) ∝ N(f; m, v)·p(y|f)`` of a cavity
``N(f; m, v)`` and replaces it by a Gaussian; the site is that Gaussian divided by the cavity (Zhang et al. 2020
eq. 6). Which Gaussian is the projection:

* :func:`kl` — ``argmin KL(q̃ ‖ N)``: moment matching, the mean and variance of ``q̃`` (EP; Zhang et al. 2020 eq. 5).
* :func:`wasserstein` — ``argmin W₂²(q̃, N)``: the same mean and the standard deviation
  ``σ* = ∫ φ(Φ⁻¹(F(f))) df`` (Quantile Propagation; Zhang et al. 2020 eqs. 7, 23). ``σ*² ≤`` the variance of
  ``q̃``, with equality only for a Gaussian ``q̃``, and ``W₂²(q̃, N(μ, σ*²)) = Var q̃ − σ*²`` (Thm 2).

Both take ``(likelihood, y, mean, var)`` and return ``(log Z, mean, var)`` of the projected Gaussian
(``log Z`` = ``log ∫ N(f; m, v) p(y|f) df``, the same for both), so a site update takes the projection
as a parameter. The likelihood supplies ``tilted_moments(y, mean, var)`` (its closed form) and
``log_prob(y, f)``.

σ* by quadrature. The tilted CDF ``F`` is integrated from the tilted density on a composite
Gauss–Legendre rule: panels cut at ``m + t√v`` (the cavity), ``μ + tσ`` (the tilted moments) and ``t``
(the likelihood's own unit scale about ``f = 0``, where the probit's and the Poisson square link's
features and the Heaviside's step sit), ``t ∈ [−L, L]``, plus one panel each side out to ``μ ± 40σ``
(a nearly exponential tilted distribution, a Heaviside cut 12 or more cavity deviations beyond its
mean, still has ``e^{−13}`` of its mass beyond ``μ + 12σ``); within a panel ``F`` at each node is the
exact integral of the polynomial through the panel's nodes (spectral integration), so ``F`` is accurate
wherever the density is smooth on the panels. ``φ(Φ⁻¹(F)) = φ(Φ⁻¹(min(F, 1 − F)))`` needs ``F`` only to
absolute accuracy. Where the density jumps (the Heaviside's step, a panel edge) ``φ(Φ⁻¹(F)) ≈ F√(2 log 1/F)``
is not smooth and the rule is good to 1.2e-6 relative only (measured 1.12e-6, the Heaviside with the
cavity mean at or up to 35 deviations beyond the step); where the density is smooth, to 1e-10 (the
probit against its Owen's-T closed-form CDF, Zhang et al. 2020 eq. 45) and 1e-11 (against ``mpmath``). Both
measured in ``tests/core/test_projections.py``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtri
from jax.scipy.stats import norm


class QuantileRule(NamedTuple):
    """The composite rule of :func:`wasserstein`: ``num_breaks`` cut points per scale over ``±half_width``
    scales, one more panel each side out to ``±tail_width`` tilted standard deviations, ``panel_nodes``
    Gauss–Legendre nodes per panel."""

    num_breaks: int = 9
    half_width: float = 12.0
    panel_nodes: int = 16
    tail_width: float = 40.0

    def cumulative_weights(self):
        """Nodes ``x`` on ``[−1, 1]``, weights ``w`` and ``S[j, k] = ∫_{−1}^{x_j} ℓ_k(t) dt`` (``ℓ_k`` the
        Lagrange basis of the nodes): ``S @ g(x)`` integrates ``g`` from the panel's start to each node."""
        x, w = np.polynomial.legendre.leggauss(self.panel_nodes)
        vander = np.polynomial.legendre.legvander(x, self.panel_nodes - 1)
        antiderivatives = np.stack([np.polynomial.legendre.legval(x, np.polynomial.legendre.legint(np.eye(self.panel_nodes)[m], lbnd=-1.0))
                                    for m in range(self.panel_nodes)], axis=1)
        return x, w, antiderivatives @ np.linalg.inv(vander)


def kl(likelihood, y, mean, var, alpha=1.0):
    """EP's projection: ``(log Z, E_q̃[f], Var_q̃[f])`` (Zhang et al. 2020 eq. 5) of ``q̃ ∝ N(f; m, v) p(y|f)^α``."""
    return likelihood.tilted_moments(y, mean, var, alpha)


def wasserstein(likelihood, y, mean, var, alpha=1.0, rule: QuantileRule = QuantileRule()):
    """Quantile Propagation's projection: ``(log Z, E_q̃[f], σ*²)``, ``σ* = ∫ φ(Φ⁻¹(F_q̃(f))) df``
    (Zhang et al. 2020 eqs. 7, 23; App. A) of ``q̃ ∝ N(f; m, v) p(y|f)^α``. Elementwise over broadcast ``y, mean, var``."""
    log_z, tilted_mean, tilted_var = likelihood.tilted_moments(y, mean, var, alpha)
    return log_z, tilted_mean, quantile_std(likelihood, y, mean, var, tilted_mean, tilted_var, alpha, rule) ** 2


def quantile_std(likelihood, y, mean, var, tilted_mean, tilted_var, alpha=1.0, rule: QuantileRule = QuantileRule()):
    """``σ* = ∫ φ(Φ⁻¹(F(f))) df`` of ``q̃ ∝ N(f; mean, var)·p(y|f)^α`` by the composite rule of the module
    docstring; ``tilted_mean``, ``tilted_var`` place its panels."""
    y, mean, var, tilted_mean, tilted_var = jnp.broadcast_arrays(y, mean, var, tilted_mean, tilted_var)
    t = jnp.linspace(-rule.half_width, rule.half_width, rule.num_breaks, dtype=mean.dtype)
    cavity_sd, tilted_sd = jnp.sqrt(var)[..., None], jnp.sqrt(tilted_var)[..., None]
    cavity_breaks = mean[..., None] + cavity_sd * t
    tilted_breaks = tilted_mean[..., None] + tilted_sd * t
    tail_breaks = tilted_mean[..., None] + tilted_sd * jnp.asarray([-rule.tail_width, rule.tail_width], mean.dtype)
    lower = jnp.minimum(cavity_breaks[..., :1], tail_breaks[..., :1])
    upper = jnp.maximum(cavity_breaks[..., -1:], tail_breaks[..., -1:])
    unit_breaks = jnp.clip(jnp.broadcast_to(t, cavity_breaks.shape), lower, upper)
    breaks = jnp.sort(jnp.concatenate([cavity_breaks, tilted_breaks, tail_breaks, unit_breaks], axis=-1), axis=-1)
    x, w, cumulative = (jnp.asarray(a, mean.dtype) for a in rule.cumulative_weights())
    centre = 0.5 * (breaks[..., 1:] + breaks[..., :-1])[..., None]  # [..., P, 1]
    half = 0.5 * (breaks[..., 1:] - breaks[..., :-1])[..., None]
    points = centre + half * x  # [..., P, n]
    log_density = (norm.logpdf(points, mean[..., None, None], cavity_sd[..., None])
                   + alpha * likelihood.log_prob(y[..., None, None], points))
    density = jnp.exp(log_density - jnp.max(log_density, axis=(-2, -1), keepdims=True))
    panel_mass = half[..., 0] * jnp.sum(w * density, axis=-1)  # [..., P]
    before = jnp.cumsum(panel_mass, axis=-1) - panel_mass
    within = half * jnp.einsum("jk,...pk->...pj", cumulative, density)
    total = jnp.sum(panel_mass, axis=-1)[..., None, None]
    cdf = jnp.clip((before[..., None] + within) / total, 0.0, 1.0)
    tail = jnp.minimum(cdf, 1.0 - cdf)
    integrand = jnp.where(tail > 0, norm.pdf(ndtri(jnp.where(tail > 0, tail, 0.5))), 0.0)
    return jnp.sum(half[..., 0] * jnp.sum(w * integrand, axis=-1), axis=-1)


PROJECTIONS = {"kl": kl, "wasserstein": wasserstein}


def projection(name: str):
    """The projection called ``name`` (``"kl"``: EP, ``"wasserstein"``: QP); a clear error otherwise."""
    if name not in PROJECTIONS:
        raise ValueError(f"projection must be one of {sorted(PROJECTIONS)}; got {name!r}")
    return PROJECTIONS[name]
