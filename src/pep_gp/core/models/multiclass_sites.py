"""The multi-class EP factors of Villacampa-Calvo & Hernández-Lobato 2017 as scalar mathematics: refinement, removal, accumulation.

A factor ``φ_i^k(f̄) = Φ((m_i^{y_i} − m_i^k)/√(s_i^{y_i} + s_i^k))`` (Villacampa-Calvo & Hernández-Lobato 2017 eq. 6/33) touches class
``y_i`` through ``υ_i^{y_i}ᵀ f̄^{y_i}`` and class ``k`` through ``υ_i^kᵀ f̄^k`` only, so its Gaussian
approximation is rank one in each class (eqs. 20–23) and every EP operation reduces to scalars:

* the cavity enters only through ``a = υᵀm^∖`` and ``w = υᵀV^∖υ`` per class (eqs. 35–38);
* the refined site is ``(C¹, C²)`` per class (Villacampa-Calvo & Hernández-Lobato 2017, eqs. 48, 49, 52 and 53, *the sign of eq. 53 fixed*: the text's sign is a typo);
* removing a stored site from ``q`` and projecting onto a (possibly newer) direction is the
  Sherman–Morrison step of Villacampa-Calvo & Hernández-Lobato 2017, App. C;
* ``g(θ^∖) − g(θ)`` of eq. (61) has the scalar closed form of Villacampa-Calvo & Hernández-Lobato 2017, eq. 9, App. F.

With label noise ``ε`` (:func:`robust_log_factor`) the factor is ``ε + (1 − ε)Φ(·)``: still a function of
``m_i^{y_i} − m_i^k`` only, so its sites stay rank one in each class and the same algebra carries them.

Arrays are laid out per (row i, other class k) as ``[B, C]``; the entry ``k = y_i`` is not a factor and
is masked by the callers. "label" quantities live on class ``y_i``, "other" ones on class ``k``.

Reference: Villacampa-Calvo & Hernández-Lobato, ICML 2017 (arXiv 1706.07258), App. C–F.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.nn import logsumexp
from jax.scipy.special import log_ndtr
from jax.scipy.stats import norm

from ..quadrature import ProbitPowerQuadrature, log_probit_power, probit_power_moments

TILTED_QUADRATURE = ProbitPowerQuadrature()


class SiteScalars(NamedTuple):
    """The four free scalars of a factor ``φ̃_i^k`` (eq. 8); ``log s̃`` is never stored."""

    label_precision: jnp.ndarray  # C^{1,y_i}_{i,k}, [B, C]
    label_shift: jnp.ndarray  # C^{2,y_i}_{i,k}, [B, C]
    other_precision: jnp.ndarray  # C^1_{i,k}, [B, C]
    other_shift: jnp.ndarray  # C^2_{i,k}, [B, C]


class Projections(NamedTuple):
    """A Gaussian over one class's ``f̄`` seen along one direction: ``a = υᵀm``, ``w = υᵀVυ``."""

    mean: jnp.ndarray
    var: jnp.ndarray


def robust_log_factor(z, label_noise: float):
    """``log(ε + (1 − ε)Φ(z))``, the log of the label-noise factor, stable for very negative ``z``.

    With noise-free latents the per-pair factors multiply to ``Π_{k≠y}(ε + (1 − ε)Θ(f_y − f_k)) = ε^{r_y(f)}``,
    ``r_y`` the number of classes ranked above ``y``; summed over the labels this is ``Z_C(ε) = Σ_{r<C} ε^r``
    whatever ``f``, so ``p(y | f) = ε^{r_y(f)}/Z_C(ε)`` is a normalised label-noise model (the observed label is
    the latent argmax with probability ``1/Z_C``, the runner-up with ``ε/Z_C``, …). Where the robust likelihood
    of Hernández-Lobato, Hernández-Lobato & Dupont (2011; Villacampa-Calvo & Hernández-Lobato 2017, eq. 13)
    mixes the whole likelihood with uniform label noise ``ε/C``, this floors each pair's probit, which keeps
    the per-pair factors of Villacampa-Calvo & Hernández-Lobato (2017, eq. 6) and their rank-one sites.
    ``ε = 0`` is ``log Φ(z)``, computed as such.
    """
    if label_noise == 0.0:
        return log_ndtr(z)
    return jnp.logaddexp(jnp.log(label_noise), jnp.log1p(-label_noise) + log_ndtr(z))


def log_label_noise_normaliser(label_noise: float, num_classes: int) -> float:
    """``log Z_C(ε) = log Σ_{r=0}^{C−1} ε^r``: the constant that normalises the label-noise likelihood
    (:func:`robust_log_factor`) over the ``C`` labels."""
    return float(np.log(np.sum(float(label_noise) ** np.arange(num_classes))))


def normalise_energy(energy, label_noise: float, num_classes: int, mask):
    """A data term of unnormalised factors as the log-likelihood of ``ε^{r_y}/Z_C(ε)``: ``energy`` less
    ``log Z_C(ε)`` per unmasked row (nothing to subtract at ``ε = 0``, where ``energy`` is returned as is)."""
    if label_noise == 0.0:
        return energy
    return energy - log_label_noise_normaliser(label_noise, num_classes) * jnp.sum(mask.astype(energy.dtype))


def check_label_noise(alpha: float, label_noise: float) -> None:
    """Refuse ``label_noise > 0`` with ``alpha ≠ 1`` (the label-noise moments are EP's, α = 1)."""
    if label_noise != 0.0 and alpha != 1.0:
        raise ValueError(f"label_noise = {label_noise} needs alpha = 1 (got alpha = {alpha}): the label-noise "
                         "factors' tilted moments are implemented in closed form for EP (α = 1) only")


def log_partition(label: Projections, other: Projections, label_fitc, other_fitc, alpha: float = 1.0,
                  quadrature: ProbitPowerQuadrature = TILTED_QUADRATURE, label_noise: float = 0.0):
    """``log Z_{i,k} = log ∫ φ_i^k(f̄)^α q^∖(f̄) df̄`` (eq. 34; Power EP with power α).

    The factor depends on ``d = t^{y_i} − t^k ~ N(a^{y_i} − a^k, w^{y_i} + w^k)`` only, through
    ``Φ(d/√S)``, ``S = s^{y_i} + s^k``. At ``α = 1`` this is ``log Φ(α̂)``, ``α̂ = (a^{y_i} − a^k)/√b``,
    ``b = S + w^{y_i} + w^k``; otherwise ``log E[Φ(u)^α]`` for ``u = d/√S ~ N(mean/√S, var/S)`` by the
    composite rule of :class:`~pep_gp.core.quadrature.ProbitPowerQuadrature` (Bui, Yan & Turner 2017, §3.8, App. G.2), whose gradient is
    finite also where the cavity variance along ``υ`` underflows to 0 (rows far from every inducing input).

    With ``label_noise = ε > 0`` (α = 1 only) the factor is ``ε + (1 − ε)Φ(d/√S)`` and
    ``Z = ε + (1 − ε)Φ(α̂)`` (:func:`robust_log_factor`).
    """
    check_label_noise(alpha, label_noise)
    mean, var, fitc = label.mean - other.mean, label.var + other.var, label_fitc + other_fitc
    if alpha == 1.0:
        return robust_log_factor(mean / jnp.sqrt(fitc + var), label_noise)
    return log_probit_power(mean / jnp.sqrt(fitc), var / fitc, alpha, quadrature)


def _slope_and_curvature(label: Projections, other: Projections, label_fitc, other_fitc, alpha, quadrature,
                         label_noise=0.0):
    """``g = ∂log Z/∂a^{y_i}`` and ``ν = g² − 2∂log Z/∂w`` (eqs. 39–42: ``∂/∂a^k = −g``, ``∂/∂w^k = ∂/∂w^{y_i}``).

    With label noise ``ε`` (α = 1), ``Z = ε + (1 − ε)Φ(α̂)`` gives the same forms with
    ``β = (1 − ε)N(α̂)/Z``: ``g = β/√b`` and, from ``∂α̂/∂w = −α̂/(2b)``, ``ν = β(β + α̂)/b``. The factor is not
    log-concave, so ``ν`` is negative where ``α̂ < −β`` (a label far on the wrong side: the tilted
    distribution is wider than the cavity); it is clipped at 0 — the site keeps the mean step and adds no
    precision, as EP implementations do with negative site precisions (Minka 2001; Vanhatalo et al.
    2013, GPstuff) — which keeps every site precision ``C¹ ≥ 0`` and so the tied update positive
    semi-definite. ``ν ≤ 1/b`` holds exactly (the tilted variance ``w − w²ν`` of a mixture of the cavity and a
    probit-tilted cavity is positive for every ``w ≤ b``); the upper clip is against round-off only.
    """
    if alpha == 1.0:  # closed form, with β = (1 − ε)N(α̂)/Z, at ε = 0 N(α̂)/Φ(α̂) (eqs. 39–46)
        b = label_fitc + label.var + other_fitc + other.var
        ahat = (label.mean - other.mean) / jnp.sqrt(b)
        # at ε = 0, log1p(−ε) adds an exact zero: the paper's β to the last bit (the pinned tests)
        beta = jnp.exp(jnp.log1p(-label_noise) + (norm.logpdf(ahat) - robust_log_factor(ahat, label_noise)))
        return beta / jnp.sqrt(b), jnp.clip(beta * (beta + ahat), 0.0, 1.0) / b
    # In u = d/√S: ∂log Z/∂a = G/√S and 2∂log Z/∂w = H/S (quadrature sums, Price's theorem), no autodiff.
    fitc = label_fitc + other_fitc
    _, slope, curvature = probit_power_moments((label.mean - other.mean) / jnp.sqrt(fitc),
                                               (label.var + other.var) / fitc, alpha, quadrature)
    return slope / jnp.sqrt(fitc), jnp.maximum((slope**2 - curvature) / fitc, 0.0)


def refine(label: Projections, other: Projections, label_fitc, other_fitc, alpha: float = 1.0,
           quadrature: ProbitPowerQuadrature = TILTED_QUADRATURE, label_noise: float = 0.0) -> SiteScalars:
    """Moment-matched site scalars from the (power-α) cavity projections (eqs. 43–55, Villacampa-Calvo & Hernández-Lobato 2017, App. D).

    With ``g = ∂log Z/∂a^{y_i}`` and ``ν = g² − 2∂log Z/∂w`` (at ``α = 1``: ``g = β/√b``,
    ``ν = β(β + α̂)/b``), the tilted moments along ``υ`` are ``a ± wg`` and ``w − w²ν``, and the site is
    ``(tilted / cavity)^{1/α}``:

        C¹ = ν / (α(1 − ν w)),      C² = (±g + ν a) / (α(1 − ν w))     (+ on class y_i, − on class k),

    which at ``α = 1`` is eqs. (48)/(49) and (52)/(53) rearranged; (53) carries the sign fix (the text's
    sign is a typo; the authors' code has the fixed one). Since ``Φ^α`` is log-concave, ``0 ≤ ν < 1/b`` and ``w < b``, so ``C¹ ≥ 0`` (Villacampa-Calvo & Hernández-Lobato 2017, App. D); at
    ``α = 1`` ``β(β + α̂)`` is clipped to ``[0, 1]`` against round-off for very negative ``α̂``. With
    ``label_noise = ε > 0`` (α = 1 only) the factor is ``ε + (1 − ε)Φ`` and a negative ``ν`` is clipped to 0
    (:func:`_slope_and_curvature`), so ``C¹ ≥ 0`` still.
    """
    check_label_noise(alpha, label_noise)
    slope, nu = _slope_and_curvature(label, other, label_fitc, other_fitc, alpha, quadrature, label_noise)

    def site(proj: Projections, sign):
        denominator = alpha * (1.0 - nu * proj.var)
        return nu / denominator, (sign * slope + nu * proj.mean) / denominator

    label_precision, label_shift = site(label, 1.0)
    other_precision, other_shift = site(other, -1.0)
    return SiteScalars(label_precision, label_shift, other_precision, other_shift)


def remove_site(v_uu, v_uo, v_oo, mu_u, mu_o, precision, shift) -> tuple[Projections, jnp.ndarray]:
    """Cavity ``q/φ̃`` along the current direction ``u`` for a site stored along ``o`` (Villacampa-Calvo & Hernández-Lobato 2017, App. C).

    ``q`` is seen through ``v_uu = uᵀVu``, ``v_uo = uᵀVo``, ``v_oo = oᵀVo``, ``μ_u = uᵀm``, ``μ_o = oᵀm``;
    the site is ``exp(−½C¹(oᵀf̄)² + C²oᵀf̄)``. With ``d = 1 − C¹v_oo``:

        uᵀV^∖u = v_uu + C¹v_uo²/d,      uᵀm^∖ = μ_u + v_uo(C¹μ_o − C²)/d.

    For ``u = o`` this is the 1-D removal ``v/(1 − C¹v)``, ``(μ − C²v)/(1 − C¹v)`` (eqs. 29–32).

    Returns:
        The cavity projections and ``d``; the cavity is proper only where ``d > 0``.
    """
    d = 1.0 - precision * v_oo
    return Projections(mu_u + v_uo * (precision * mu_o - shift) / d, v_uu + precision * v_uo**2 / d), d


def log_normaliser_change(precision, shift, var, mean):
    """``g(θ^∖) − g(θ)`` for removing the site ``(C¹, C²)`` seen along its direction (Villacampa-Calvo & Hernández-Lobato 2017, eq. 9, App. F, eq. 61).

    With ``v = υᵀVυ``, ``μ = υᵀm`` under ``q``:  ``½(C¹μ² − 2C²μ + C²²v)/(1 − C¹v) − ½log(1 − C¹v)``.
    """
    d = 1.0 - precision * var
    return 0.5 * (precision * mean**2 - 2.0 * shift * mean + shift**2 * var) / d - 0.5 * jnp.log(d)


def factor_mask(y, mask, num_classes: int):
    """``[B, C]`` booleans: True for the factors ``(i, k)``, ``k ≠ y_i``, of unmasked rows."""
    return (jnp.arange(num_classes)[None, :] != y[:, None]) & mask[:, None]


def per_class_coefficients(sites: SiteScalars, y, mask):
    """The per-(row, class) site coefficients ``Δ_i^c`` and ``μ̃_i^c`` of eqs. (26)–(27), ``[B, C]``.

    Class ``y_i`` collects ``Σ_{k≠y_i} C^{1,y_i}_{i,k}`` (all its factors share the direction
    ``υ_i^{y_i}``, Villacampa-Calvo & Hernández-Lobato 2017 and the authors' code); class ``c ≠ y_i`` gets the single ``C^1_{i,c}``.
    """
    num_classes = sites.label_precision.shape[-1]
    factors = factor_mask(y, mask, num_classes)
    on_label = (jnp.arange(num_classes)[None, :] == y[:, None]) & mask[:, None]

    def combine(label, other):
        label_sum = jnp.sum(jnp.where(factors, label, 0.0), axis=1, keepdims=True)
        return jnp.where(on_label, label_sum, jnp.where(factors, other, 0.0))

    return combine(sites.label_precision, sites.other_precision), combine(sites.label_shift, sites.other_shift)


def accumulate(directions, sites: SiteScalars, y, mask):
    """Sums of rank-one site natural parameters per class (eq. 25): ``(Σ_i μ̃_i^c υ_i^c, Σ_i Δ_i^c υ_i^c υ_i^cᵀ)``.

    Args:
        directions: ``υ_i^c``, ``[B, C, M]``.
        sites: the rows' site scalars, ``[B, C]`` each.
        y, mask: labels ``[B]`` and row mask ``[B]`` (masked rows contribute exactly zero).

    Returns:
        ``shift [C, M]`` and ``precision [C, M, M]``.
    """
    return class_sums(directions, *per_class_coefficients(sites, y, mask))


def class_sums(directions, delta, mu):
    """:func:`accumulate` from the coefficients of :func:`per_class_coefficients` (``delta``, ``mu``
    ``[B, C]``): each class's sums from its own column, ``(shift [C, M], precision [C, M, M])``."""
    shift = jnp.einsum("bc,bcm->cm", mu, directions)
    precision = jnp.einsum("bc,bcm,bcn->cmn", delta, directions, directions)
    return shift, precision


def factor_counts(y, mask, num_classes: int):
    """Number of factors touching each class, ``n_c = Σ_i [1 + (C − 2)·1(y_i = c)]`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1)."""
    on_label = jnp.arange(num_classes)[None, :] == y[:, None]
    return jnp.sum(jnp.where(mask[:, None], 1.0 + (num_classes - 2) * on_label, 0.0), axis=0)


class PredictiveQuadrature(NamedTuple):
    """Composite Gauss–Legendre rule for the predictive integral, shared by all classes of a row.

    Breakpoints are ``m_k + √v_k·t`` for ``t`` on ``num_breaks`` equally spaced points in
    ``[−half_width, half_width]`` for *every* class ``k``; each gap between sorted breakpoints gets
    ``panel_nodes`` Gauss–Legendre nodes. The grid so resolves both the density of the target class and
    the steps ``Φ((f − m_k)/√v_k)`` of much sharper classes, where a Gauss–Hermite rule on the target
    alone fails (64 nodes err by ~1e-2 when one latent is 20× sharper than another).
    """

    num_breaks: int = 16
    panel_nodes: int = 5
    half_width: float = 8.0

    def nodes(self, mean, var):
        """Nodes ``[B, K]`` and log-weights ``[B, K]`` (``−inf`` on empty panels), ``K = (C·num_breaks − 1)·panel_nodes``."""
        t = jnp.linspace(-self.half_width, self.half_width, self.num_breaks, dtype=mean.dtype)
        return composite_nodes(mean, jnp.sqrt(var), t, self.panel_nodes)


def composite_nodes(centre, scale, t, panel_nodes: int):
    """A composite Gauss–Legendre rule on the union of every class's breakpoints ``centre_k + scale_k·t``
    (``centre``, ``scale`` ``[B, C]``, ``t`` a fixed grid): nodes ``[B, K]`` and log-weights ``[B, K]``
    (``−inf`` on empty panels), ``K = (C·len(t) − 1)·panel_nodes`` (:func:`composite_rule`)."""
    return composite_rule((centre[..., None] + scale[..., None] * t).reshape(centre.shape[0], -1), panel_nodes)


def composite_rule(breaks, panel_nodes: int):
    """A composite Gauss–Legendre rule with ``panel_nodes`` nodes in each gap between the sorted breakpoints
    ``[B, P]``: nodes ``[B, K]`` and log-weights ``[B, K]`` (``−inf`` on empty panels),
    ``K = (P − 1)·panel_nodes``.

    The breakpoints are placed at the moments but not differentiated through them: a derivative of the rule
    is then the rule over the integrand's derivative (smooth), not that of where the sorted breakpoints fall
    (which jumps where two cross).
    """
    breaks = jax.lax.stop_gradient(jnp.sort(breaks, axis=-1))
    x, w = np.polynomial.legendre.leggauss(panel_nodes)
    middle = 0.5 * (breaks[:, 1:] + breaks[:, :-1])[..., None]
    half = 0.5 * (breaks[:, 1:] - breaks[:, :-1])[..., None]
    points = (middle + half * jnp.asarray(x, breaks.dtype)).reshape(breaks.shape[0], -1)
    weights = (half * jnp.asarray(w, breaks.dtype)).reshape(breaks.shape[0], -1)
    return points, jnp.where(weights > 0, jnp.log(jnp.where(weights > 0, weights, 1.0)), -jnp.inf)


def noisy_argmax_log_probs(nodes, log_cdf, log_density, mean, var, y=None):
    """``log P(argmax_k (f_k + ε_k) = c) = log ∫ p_c(u) Π_{k≠c} F_k(u) du`` for independent
    ``f_k ~ N(mean_k, var_k)`` ``[B, C]`` and i.i.d. noise ``ε`` (Gaussian for the probit models, Gumbel for the
    softmax), on the rule ``nodes(mean, var)`` (nodes ``u`` and log-weights ``[B, K]``), from the noisy latent
    values' ``log_cdf(u, mean, var)`` and ``log_density(u, mean, var)`` (``[B, K, C]``): every class's,
    ``[B, C]``, or with labels ``y`` ``[B]`` the label's alone, ``[B]`` (one class's density a row, not ``C``).
    The product over ``k ≠ c`` is the all-class sum less the class's own term, so a row costs ``O(K·C)``,
    not ``O(K·C²)``."""
    points, log_w = nodes(mean, var)
    every_log_cdf = log_cdf(points, mean, var)
    if y is None:
        own_log_cdf, own_log_density = every_log_cdf, log_density(points, mean, var)
    else:
        label = y[:, None]
        own_mean, own_var = (jnp.take_along_axis(v, label, axis=1) for v in (mean, var))
        own_log_cdf = jnp.take_along_axis(every_log_cdf, label[:, :, None], axis=2)
        own_log_density = log_density(points, own_mean, own_var)
    log_integrand = own_log_density + jnp.sum(every_log_cdf, axis=-1, keepdims=True) - own_log_cdf
    log_probs = logsumexp(log_w[:, :, None] + log_integrand, axis=1)
    return log_probs if y is None else log_probs[:, 0]


def predictive_log_probs(mean, var, quadrature: PredictiveQuadrature = PredictiveQuadrature(), label_noise: float = 0.0,
                         y=None):
    """``log p(y* = c | x*)`` of eq. (68) with the exact (Heaviside) likelihood, by 1-D quadrature.

        p(y* = c) = ∫ N(f; m_c, v_c) Π_{k≠c} Φ((f − m_k)/√v_k) df,

    in log-sum-exp form on the composite rule of :class:`PredictiveQuadrature`. The product over
    ``k ≠ c`` is the all-class sum of ``log Φ`` minus the target's own term, so a row costs
    ``O(K·C)``, not ``O(K·C²)``. Measured accuracy: see
    ``tests/core/test_multiclass.py::test_predictive_quadrature_matches_scipy_quad``.

    With ``label_noise = ε > 0`` it is the predictive of the label-noise likelihood the model trains on
    (:func:`robust_log_factor`): ``p(y* = c) = E[ε^{r_c(f)}]/Z_C(ε)``, and since the classes are independent
    given ``f_c``, ``E[ε^{r_c(f)}] = ∫ N(f; m_c, v_c) Π_{k≠c}(ε + (1 − ε)Φ((f − m_k)/√v_k)) df`` — the same
    quadrature with ``log Φ`` replaced by :func:`robust_log_factor`; the probabilities sum to 1 exactly.

    Args:
        mean, var: latent predictive moments ``m*``, ``v*`` per class, ``[B, C]``.
        y: labels ``[B]``: each row's label's log-probability alone, ``[B]`` (:func:`noisy_argmax_log_probs`).

    Returns:
        ``[B, C]`` log-probabilities (``[B]`` with ``y``).
    """
    def log_cdf(points, mean, var):
        return robust_log_factor((points[:, :, None] - mean[:, None, :]) / jnp.sqrt(var)[:, None, :], label_noise)

    def log_density(points, mean, var):
        return norm.logpdf(points[:, :, None], mean[:, None, :], jnp.sqrt(var)[:, None, :])

    log_probs = noisy_argmax_log_probs(quadrature.nodes, log_cdf, log_density, mean, var, y)
    if label_noise == 0.0:
        return log_probs
    return log_probs - log_label_noise_normaliser(label_noise, mean.shape[-1])


def exact_log_partition(mean, var, fitc, y, quadrature: PredictiveQuadrature = PredictiveQuadrature(),
                        label_noise: float = 0.0):
    """``log Z_i = log ∫ p(y_i | f) cav(f) df`` for the whole likelihood of a row (eq. 1 with the latent
    noise; with ``label_noise`` its normalised label-noise form), ``[B]``.

    Under the cavity the classes' latent values at row ``i`` are independent, ``f^c ~ N(a^c, w^c + s^c)``
    (``a``, ``w`` its projections along ``υ_i^c``, ``s`` the FITC variance with the noise), so ``Z_i`` is the
    predictive integral of eq. (68) at those moments:
    ``∫ N(u; a^{y}, w^{y} + s^{y}) Π_{k≠y} Φ((u − a^k)/√(w^k + s^k)) du``
    (:func:`predictive_log_probs`). Where eq. (6) multiplies ``C − 1`` pairwise probits that share the
    label's noise as if independent, this is the probability the predictive gives: on noisy labels eq. (6)
    falls short of it by up to ``(C − 1)log 2 − log C`` nats a row, less the more confident the fit, which
    rewards hyper-parameters that shrink the latent noise (``docs/results/multiclass.md``).

    Args:
        mean, var: the cavity's projections ``a``, ``w`` per class, ``[B, C]``.
        fitc: ``s``, ``[B, C]``.
        y: integer labels ``[B]``.
    """
    return predictive_log_probs(mean, var + fitc, quadrature, label_noise, y)


def row_site_coefficients(log_partition, mean, var, fitc, mask):
    """The refined sites of a whole-row likelihood, per (row, class): ``Δ_i^c``, ``μ̃_i^c`` ``[B, C]``, zero on
    masked rows (the coefficients of eqs. 26–27), from ``log_partition(a, w)``, the rows' ``log Z_i`` ``[B]``
    at cavity projections ``a``, ``w`` ``[B, C]`` (:func:`exact_log_partition`,
    :func:`~pep_gp.core.models.multiclass_softmax.softmax_log_probs` with labels).

    The row's factor touches class ``c`` only through ``υ_i^cᵀf̄^c`` and the approximating family is a
    product over classes, so its site is rank one in each class, fitted to the tilted marginal of each
    class: with ``g = ∂log Z/∂a^c`` and ``ν = g² − 2∂log Z/∂w^c`` (Seeger 2005; the derivatives by automatic
    differentiation of the quadrature), ``C¹ = ν/(1 − νw)`` and ``C² = (g + νa)/(1 − νw)`` as in
    :func:`refine` at α = 1. Both likelihoods are log-concave in ``f`` (Prékopa; the softmax's log is
    ``f_y − logsumexp f``), so ``0 ≤ ν ≤ 1/(w + s)``; ``ν`` is clipped to that range against round-off (with
    label noise, where it may be negative, as in :func:`refine`).
    """
    slope, half_curvature = jax.grad(lambda a, w: jnp.sum(log_partition(a, w)), argnums=(0, 1))(mean, var)
    nu = jnp.clip(slope**2 - 2.0 * half_curvature, 0.0, 1.0 / (var + fitc))
    denominator = 1.0 - nu * var
    keep = mask[:, None]
    return jnp.where(keep, nu / denominator, 0.0), jnp.where(keep, (slope + nu * mean) / denominator, 0.0)


def row_counts(mask, num_classes: int):
    """Factors touching each class under the whole-row likelihood: one per unmasked row, ``[C]``."""
    return jnp.full((num_classes,), jnp.sum(jnp.where(mask, 1.0, 0.0)))
