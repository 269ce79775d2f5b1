"""Untied EP (and Power EP, and Quantile Propagation) on a Gaussian prior over a few hundred variables.

Prior ``p(f) = N(f; 0, K)`` over ``n`` variables; site ``s`` approximates the factor ``p(y_s | u_s)`` on the
affine projection ``u_s = w_s f_{i_s} + b_s`` by ``t̃_s(u) = exp(ν̃_s u − ½τ̃_s u²)`` (several sites may
share a variable). A prior mean ``m`` is folded into the offsets (``b_s + w_s m_{i_s}``). One update of a
site (Zhang et al. 2020 Algorithm 1; Power EP with power ``α``, Bui, Yan & Turner 2017, §3.4):

    cavity  q^∖s(u) ∝ q(u) / t̃_s(u)^α                (natural parameters: q's minus α·site's)
    tilted  q̃(u) ∝ q^∖s(u) p(y_s|u)^α
    new q   = projection(q̃)   (``"kl"``: EP's moment matching, ``"wasserstein"``: QP; pep_gp.core.projections)
    site    ← (1 − δ)·site + δ·(new q ÷ cavity)^{1/α}   (damping δ; Zhang et al. 2020 eq. 6)

A site whose cavity is improper or whose new parameters are not finite keeps its old value and is
counted. ``schedule="sequential"`` updates one site at a time with a rank-one change of ``Σ`` (Zhang et al. 2020
Algorithm 1; R&W Algorithm 3.5), ``"parallel"`` all sites from the same ``q``; ``q`` is recomputed from
the prior and all sites after every sweep.

The evidence (Zhang et al. 2020 eq. 4 with the site scales of R&W eq. 3.58; Swaroop 2017 eqs. 19–30; Power EP:
Bui, Yan & Turner 2017 eq. 110) is

    log Z_EP = log ∫ p(f) Π_s t̃_s(u_s) df + Σ_s (1/α)[log Ẑ_s + g(q^∖s) − g(q_s)],

``g(τ, ν) = ν²/(2τ) + ½log(2π/τ)`` the log-normaliser of ``exp(νu − ½τu²)``, ``q_s`` the marginal of
``u_s``. For QP the same formula is evaluated at QP's sites (Zhang et al. 2020, §4, as the paper's code).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..gaussian import LOG_2PI
from ..linalg import cholesky, solve_lower
from ..parameters import on_device
from ..projections import projection as named_projection


class SiteData(NamedTuple):
    """Where each site acts: ``u_s = weight_s · f[index_s] + offset_s`` with observation ``y_s``."""

    index: jnp.ndarray  # [S] int
    y: jnp.ndarray  # [S]
    weight: jnp.ndarray  # [S]
    offset: jnp.ndarray  # [S]


def site_data(index, y, weight=None, offset=None, prior_mean=None) -> SiteData:
    """``SiteData`` with unit weights and zero offsets by default; ``prior_mean`` ([n]) is folded into the offsets."""
    xp = jnp if any(isinstance(a, jax.Array) for a in (index, y, weight, offset, prior_mean)) else np  # np: no programs
    index = xp.asarray(index)
    y = xp.asarray(y, dtype=np.float64)
    weight = xp.ones(y.shape) if weight is None else xp.broadcast_to(xp.asarray(weight, float), y.shape)
    offset = xp.zeros(y.shape) if offset is None else xp.broadcast_to(xp.asarray(offset, float), y.shape)
    if prior_mean is not None:
        offset = offset + weight * xp.asarray(prior_mean)[index]
    return SiteData(*(on_device(a) for a in (index, y, weight, offset)))


class Sites(NamedTuple):
    """Site natural parameters on ``u_s``: ``t̃_s(u) = exp(shift_s·u − ½ precision_s·u²)``."""

    precision: jnp.ndarray  # τ̃, [S]
    shift: jnp.ndarray  # ν̃, [S]


def zero_sites(num_sites: int) -> Sites:
    """All sites 1: ``q`` is the prior."""
    return Sites(on_device(np.zeros(num_sites)), on_device(np.zeros(num_sites)))


class Posterior(NamedTuple):
    mean: jnp.ndarray  # [n]
    cov: jnp.ndarray  # [n, n]


def _variable_factors(n, data: SiteData, sites: Sites):
    """The sites as a factor ``exp(hᵀf − ½fᵀdiag(T)f)`` on ``f``: ``T = Σ w²τ̃``, ``h = Σ w(ν̃ − τ̃b)``."""
    precision = jnp.zeros(n).at[data.index].add(data.weight**2 * sites.precision)
    shift = jnp.zeros(n).at[data.index].add(data.weight * (sites.shift - sites.precision * data.offset))
    return precision, shift


def posterior(cov, data: SiteData, sites: Sites) -> Posterior:
    """``q(f) = N(μ, Σ)``, ``Σ = (K⁻¹ + T)⁻¹ = (I + KT)⁻¹K``, ``μ = Σh`` (Zhang et al. 2020 eq. 3; any sign of ``T``)."""
    n = cov.shape[0]
    precision, shift = _variable_factors(n, data, sites)
    sigma = jnp.linalg.solve(jnp.eye(n) + cov * precision[None, :], cov)
    sigma = 0.5 * (sigma + sigma.T)
    return Posterior(sigma @ shift, sigma)


def _marginals(q: Posterior, data: SiteData):
    """Mean and variance of ``u_s`` under ``q``."""
    return _site_marginals(q.mean, jnp.diagonal(q.cov), data)


def _site_marginals(mean, variance, data: SiteData):
    """Mean and variance of ``u_s`` from those of ``f`` under ``q``."""
    return data.weight * mean[data.index] + data.offset, data.weight**2 * variance[data.index]


def marginal_moments(cov, data: SiteData, sites: Sites):
    """``μ`` and ``diag Σ`` of ``q`` (:func:`posterior`) without the rest of ``Σ``, what a parallel sweep needs.
    Where no site precision is negative, by R&W Algorithm 3.5's symmetric form: ``B = I + S K S`` with
    ``S = T^½``, ``V = L⁻¹SK`` for ``B = LLᵀ``, so ``Σ = K − VᵀV`` and ``μ = Kh − Vᵀ(Vh)`` — a Cholesky factor and
    one triangular solve, half the arithmetic of :func:`posterior`'s general solve, which it falls back to
    where a precision is negative (Power EP and QP sites may be)."""
    n = cov.shape[0]
    precision, shift = _variable_factors(n, data, sites)

    def symmetric(_):
        root = jnp.sqrt(precision)
        factor = cholesky(jnp.eye(n) + root[:, None] * cov * root[None, :])
        v = solve_lower(factor, root[:, None] * cov)
        return cov @ shift - v.T @ (v @ shift), jnp.diagonal(cov) - jnp.sum(v**2, axis=0)

    def general(_):
        q = posterior(cov, data, sites)
        return q.mean, jnp.diagonal(q.cov)

    return jax.lax.cond(jnp.all(precision >= 0), symmetric, general, None)


def _log_normaliser(precision, shift):
    """``g(τ, ν) = ν²/(2τ) + ½log(2π/τ)``."""
    return 0.5 * shift**2 / precision + 0.5 * (LOG_2PI - jnp.log(precision))


class _Refined(NamedTuple):
    sites: Sites
    valid: jnp.ndarray  # bool


def _refine(likelihood, project, alpha, damping, y, marginal_mean, marginal_var, old: Sites) -> _Refined:
    """The damped new site from the marginal of ``u`` under ``q`` (elementwise)."""
    cavity_precision = 1.0 / marginal_var - alpha * old.precision
    cavity_shift = marginal_mean / marginal_var - alpha * old.shift
    proper = cavity_precision > 0
    safe_precision = jnp.where(proper, cavity_precision, 1.0)
    cavity_var = 1.0 / safe_precision
    _, new_mean, new_var = project(likelihood, y, cavity_shift * cavity_var, cavity_var, alpha)
    precision = (1.0 / new_var - safe_precision) / alpha
    shift = (new_mean / new_var - cavity_shift) / alpha
    valid = proper & jnp.isfinite(precision) & jnp.isfinite(shift)
    new = Sites(jnp.where(valid, (1 - damping) * old.precision + damping * precision, old.precision),
                jnp.where(valid, (1 - damping) * old.shift + damping * shift, old.shift))
    return _Refined(new, valid)


class EPResult(NamedTuple):
    sites: Sites
    posterior: Posterior
    sweeps: int
    converged: bool
    skipped: int  # site updates skipped in the last sweep (improper cavity or non-finite site)


ALPHA_FLOOR = 1e-3
"""The smallest Power-EP power :class:`EP` accepts. A site update divides by ``α`` (``(1/σ² − cavity
precision)/α``), so the projection's error grows as ``1/α``: on a 20-row probit problem QP stops converging
(site changes never below 1e-9 in 200 sweeps) at ``α = 1e-4`` and EP at ``1e-8``; both converge at the floor
(tests/core/test_ep.py)."""


class EP(NamedTuple):
    """Untied EP with a projection (``"kl"``: EP, ``"wasserstein"``: QP), a Power-EP power ``alpha`` in
    [:data:`ALPHA_FLOOR`, 1], damping in (0, 1] and a ``"sequential"`` or ``"parallel"`` schedule.

    Example:
        >>> import jax.numpy as jnp
        >>> import pep_gp.core
        >>> from pep_gp.core.likelihoods import Heaviside
        >>> with pep_gp.core.float64():
        ...     box = site_data([0, 0], [1, 1], weight=[1.0, -1.0], offset=[0.1, 0.1])   # h(x + b) h(−x + b)
        ...     ep = EP(Heaviside())
        ...     result = ep.run(jnp.eye(1), box)
        ...     print(round(float(jnp.exp(ep.log_evidence(jnp.eye(1), box, result.sites))), 10))   # Swaroop 2017, §4
        0.0866590335
    """

    likelihood: object
    projection: str = "kl"
    alpha: float = 1.0
    damping: float = 1.0
    schedule: str = "sequential"

    def check(self) -> "EP":
        named_projection(self.projection)
        if not ALPHA_FLOOR <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [{ALPHA_FLOOR:g}, 1] (below {ALPHA_FLOOR:g} the site updates, "
                             f"divided by alpha, stop converging); got {self.alpha}")
        if not 0.0 < self.damping <= 1.0:
            raise ValueError(f"damping must lie in (0, 1]; got {self.damping}")
        if self.schedule not in ("sequential", "parallel"):
            raise ValueError(f"schedule must be 'sequential' or 'parallel'; got {self.schedule!r}")
        return self

    def run(self, cov, data: SiteData, sites: Sites | None = None, max_sweeps: int = 200,
            tol: float = 1e-9) -> EPResult:
        """Sweeps until no site's natural parameters move by more than ``tol`` (absolute), at most
        ``max_sweeps``; starts from ``sites`` (default: all zero). One compiled call (:func:`sweep_until`)."""
        self.check()
        sites = zero_sites(data.y.shape[0]) if sites is None else sites
        sites, sweeps, change, skipped, _ = sweep_until(self, cov, data, sites, max_sweeps, tol)
        return EPResult(sites, posterior(cov, data, sites), int(sweeps), bool(change <= tol), int(skipped))

    def log_evidence(self, cov, data: SiteData, sites: Sites):
        """``log Z_EP`` of the module docstring."""
        return _log_evidence(self, cov, data, sites)


def gaussian_part(cov, data: SiteData, sites: Sites):
    """``log ∫ p(f) Π_s t̃_s(u_s) df = −½log|I + KT| + ½hᵀΣh + Σ_s(ν̃_s b_s − ½τ̃_s b_s²)``: the only part of
    ``log Z_EP`` that depends on ``K`` with the sites held fixed, so its gradient in the kernel's
    hyper-parameters is ``log Z_EP``'s at an EP fixed point (R&W §5.5.2)."""
    n = cov.shape[0]
    precision, shift = _variable_factors(n, data, sites)
    q = posterior(cov, data, sites)
    _, logdet = jnp.linalg.slogdet(jnp.eye(n) + cov * precision[None, :])
    offsets = jnp.sum(sites.shift * data.offset - 0.5 * sites.precision * data.offset**2)
    return -0.5 * logdet + 0.5 * shift @ q.mean + offsets


@partial(jax.jit, static_argnums=0)
def _log_evidence(ep: EP, cov, data: SiteData, sites: Sites):
    q = posterior(cov, data, sites)
    mean, var = _marginals(q, data)
    cavity_precision = 1.0 / var - ep.alpha * sites.precision
    cavity_shift = mean / var - ep.alpha * sites.shift
    log_z, _, _ = ep.likelihood.tilted_moments(data.y, cavity_shift / cavity_precision, 1.0 / cavity_precision,
                                               ep.alpha)
    local = log_z + _log_normaliser(cavity_precision, cavity_shift) - _log_normaliser(1.0 / var, mean / var)
    return gaussian_part(cov, data, sites) + jnp.sum(local) / ep.alpha


@partial(jax.jit, static_argnums=0)
def sweep_until(ep: EP, cov, data: SiteData, sites: Sites, max_sweeps, tol, damping=None):
    """Sweeps in one ``lax.while_loop`` until the largest change of a site parameter is ``≤ tol`` or
    ``max_sweeps`` sweeps ran: ``(sites, sweeps, last change, skipped updates of the last sweep, damping)``.
    Traceable, so a caller can compile it into a larger function (the evidence optimiser does).

    The sweeps' step is ``damping`` (default ``ep.damping``). Parallel sweeps halve it, down to
    ``ep.damping/2``, after every sweep whose change is larger than the one before: the oscillation of
    undamped parallel EP (on near-duplicate inputs at large kernel amplitudes: tests/core/test_ep.py) is damped
    where it starts, while sweeps that settle keep their full step. No lower: from the sites of other
    hyper-parameters a change may grow for a while on the way to the new fixed point, and smaller steps only
    slow that (a floor of a sixteenth left the sweeps of a 1,100-row separable table unconverged after 200;
    tests/core/test_ep.py). The step they ended at comes back for the next call to start from. Sequential
    sweeps keep theirs."""

    def unfinished(state):
        _, sweeps, change, _, _ = state
        return (sweeps < max_sweeps) & (change > tol)

    def one_sweep(state):
        old, sweeps, last, _, step = state
        new, skipped = _sweep(ep, cov, data, old, step)
        change = jnp.maximum(jnp.max(jnp.abs(new.precision - old.precision)), jnp.max(jnp.abs(new.shift - old.shift)))
        if ep.schedule == "parallel":
            step = jnp.where((sweeps > 0) & (change > last), jnp.maximum(0.5 * step, ep.damping / 2), step)
        return new, sweeps + 1, change, skipped.astype(jnp.int32), step

    inf = jnp.asarray(jnp.inf, sites.precision.dtype)
    step = jnp.asarray(ep.damping if damping is None else damping, inf.dtype)
    return jax.lax.while_loop(unfinished, one_sweep, (sites, jnp.zeros((), jnp.int32), inf, jnp.zeros((), jnp.int32), step))


@partial(jax.jit, static_argnums=0)
def _sweep(ep: EP, cov, data: SiteData, sites: Sites, damping):
    """One sweep over all sites with step ``damping``; returns the new sites and the number of skipped updates."""
    project = named_projection(ep.projection)
    refine = partial(_refine, ep.likelihood, project, ep.alpha, damping)
    if ep.schedule == "parallel":
        refined = refine(data.y, *_site_marginals(*marginal_moments(cov, data, sites), data), sites)
        return refined.sites, jnp.sum(~refined.valid)
    q = posterior(cov, data, sites)

    def update(s, carry):
        q, sites, skipped = carry
        i, w = data.index[s], data.weight[s]
        column = q.cov[:, i]
        old = Sites(sites.precision[s], sites.shift[s])
        refined = refine(data.y[s], w * q.mean[i] + data.offset[s], w**2 * column[i], old)
        d_precision = refined.sites.precision - old.precision
        d_shift = refined.sites.shift - old.shift
        d_tau, d_nu = w**2 * d_precision, w * (d_shift - d_precision * data.offset[s])  # on f_i
        new_column = column / (1.0 + d_tau * column[i])
        cov = q.cov - d_tau * jnp.outer(new_column, column)
        mean = q.mean + new_column * (d_nu - d_tau * q.mean[i])
        sites = Sites(sites.precision.at[s].set(refined.sites.precision), sites.shift.at[s].set(refined.sites.shift))
        return Posterior(mean, cov), sites, skipped + (~refined.valid).astype(int)

    _, sites, skipped = jax.lax.fori_loop(0, data.y.shape[0], update, (q, sites, 0))
    return sites, skipped


def predict_latent(cov, cross_cov, test_cov, data: SiteData, sites: Sites):
    """Mean and variance of ``f*`` at test inputs under ``q``: ``k*ᵀ(h − Tμ)`` (``K⁻¹μ = h − Tμ``) and
    ``k** − k*ᵀ(I + TK)⁻¹T k*`` (``(K + T⁻¹)⁻¹ = (I + TK)⁻¹T``, R&W eqs. 3.60–3.61), ``cross_cov`` = ``K(X, X*)``.
    ``test_cov`` is the prior variances ``[B]`` (the variances come back) or covariance ``[B, B]`` (the
    posterior covariance ``K** − K*ᵀ(I + TK)⁻¹TK*`` comes back)."""
    n = cov.shape[0]
    precision, shift = _variable_factors(n, data, sites)
    q = posterior(cov, data, sites)
    mean = cross_cov.T @ (shift - precision * q.mean)
    reduction = jnp.linalg.solve(jnp.eye(n) + precision[:, None] * cov, precision[:, None] * cross_cov)
    if test_cov.ndim == 2:
        return mean, test_cov - cross_cov.T @ reduction
    return mean, test_cov - jnp.sum(cross_cov * reduction, axis=0)


__all__ = ["EP", "EPResult", "Posterior", "SiteData", "Sites", "gaussian_part", "marginal_moments", "posterior",
           "predict_latent", "site_data", "sweep_until", "zero_sites"]
