"""One-dimensional quadrature for expectations under ``N(f; m, v)``: Gauss–Hermite, a composite rule
for powers of the probit ``Φ^α`` that stays accurate (with finite derivatives) for any cavity variance, and
a composite rule for the tilted moments of any smooth likelihood (:class:`TiltedQuadrature`)."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.nn import logsumexp
from jax.scipy.special import log_ndtr
from jax.scipy.stats import norm

DEFAULT_NUM_POINTS = 64
MILLS_SWITCH, MILLS_TERMS = 8.0, 16  # see log_ndtr_and_mills_ratio
NEWTON_HALVINGS = 8  # see TiltedQuadrature.laplace


class GaussHermite(NamedTuple):
    """``E_{N(f;m,v)}[h(f)] ≈ Σ_i w_i h(m + √(2v) x_i) / √π`` with ``num_points`` nodes.

    Bui, Yan & Turner 2017, §3.8, App. G.2 recommends ≥ 20 nodes (the reference code's 5 nodes err by ~2e-2 in log Z̃). Plain
    Gauss–Hermite converges slowly once the Gaussian is much wider than the scale on which the
    integrand varies: for the probit ``log Z̃`` at α = 0.5 over m ∈ [−3, 2.5], 64 nodes erred by 1e-14 at
    v ≤ 2, 1e-7 at v = 10, 2e-4 at v = 30 — which is why ``0 < α < 1`` uses :class:`ProbitPowerQuadrature`.
    Its nodes ``m + √(2v)x`` also have an infinite derivative in ``v`` at ``v = 0``.
    """

    num_points: int = DEFAULT_NUM_POINTS

    def nodes(self, mean, var):
        """Evaluation points, shape [..., num_points], and log-weights ``log(w_i/√π)``, shape [num_points]."""
        x, w = np.polynomial.hermite.hermgauss(self.num_points)
        x = jnp.asarray(x, dtype=jnp.result_type(mean, var))
        points = mean[..., None] + jnp.sqrt(2.0 * var)[..., None] * x
        log_weights = jnp.asarray(np.log(w) - 0.5 * np.log(np.pi), dtype=x.dtype)
        return points, log_weights


def gaussian_panels(breaks, panel_nodes: int):
    """``z``-points ``[..., K]`` and log-weights ``[..., K]`` of ``∫ N(z) h(z) dz``: ``panel_nodes``
    Gauss–Legendre nodes in each gap between the sorted ``breaks`` ``[..., P]`` (``−inf`` on empty gaps)."""
    breaks = jnp.sort(breaks, axis=-1)
    x, w = np.polynomial.legendre.leggauss(panel_nodes)
    centre = 0.5 * (breaks[..., 1:] + breaks[..., :-1])[..., None]
    half = 0.5 * (breaks[..., 1:] - breaks[..., :-1])[..., None]
    points = (centre + half * jnp.asarray(x, breaks.dtype)).reshape(breaks.shape[:-1] + (-1,))
    weights = (half * jnp.asarray(w, breaks.dtype)).reshape(breaks.shape[:-1] + (-1,))
    log_weights = jnp.where(weights > 0, jnp.log(jnp.where(weights > 0, weights, 1.0)), -jnp.inf)
    return points, log_weights - 0.5 * (points**2 + np.log(2.0 * np.pi))


class ProbitPowerQuadrature(NamedTuple):
    """Composite Gauss–Legendre rule for ``E_{u∼N(μ,r)}[Φ(u)^α]`` (``0 < α < 1``) at any ``r ≥ 0``.

    Written in the standardised variable ``z = (u − μ)/√r``, the integrand ``N(z)·Φ(μ + √r z)^α`` is the
    prior ``N(z; 0, 1)`` times a step of width ``1/√r`` at ``z₀ = −μ/√r``. Gauss–Hermite on ``N(z)``
    cannot resolve the step once ``r ≫ 1`` (64 nodes err by ~1e-2 in ``log Z`` at ``r ≈ 100``). The tilted
    log-density ``ψ(z) = −z²/2 + α log Φ(μ + √r z)`` is concave with ``ψ'' ≤ −1``, so all but ``e^{−h²/2}``
    of its mass lies within ``h = half_width`` of its mode ``z*``. Breakpoints, each set ``num_breaks``
    points ``t`` on ``[−h, h]``:

    * wide: ``z = z* + t`` (the prior's scale; this set spans the rule);
    * narrow: ``z = z* + σ* t`` in the Laplace scale ``σ* = (−ψ''(z*))^{−1/2} ≤ 1`` (a sharp peak at the step);
    * the step: ``z = (u − μ)/√r`` at ``u = t`` for ``t ≥ 0`` and ``u = t/√α`` for ``t < 0`` (left of the step
      ``Φ(u)^α ≈ exp(−αu²/2)`` decays on the scale ``1/√α``), clipped to the wide span.

    ``z*`` comes from Newton on ``ψ'`` from ``z = 0``, where ``ψ' ≥ 0``; ``ψ'`` is convex and decreasing, so
    the iterates increase monotonically to ``z*``. Each gap between sorted breakpoints gets
    ``panel_nodes`` Gauss–Legendre nodes. ``r = 0`` is exact (the integrand is constant in ``z``). Measured
    accuracy against ``scipy.integrate.quad``: see
    ``tests/core/test_likelihoods.py::test_probit_power_expectation_matches_scipy_quad``.
    """

    num_breaks: int = 5
    panel_nodes: int = 12
    half_width: float = 8.0
    newton_steps: int = 12

    def nodes(self, mean, var, alpha):
        """``z``-points ``[..., K]`` and log-weights ``[..., K]`` of ``∫ N(z) h(z) dz`` (``−inf`` on empty panels).

        The rule depends on ``(μ, r)`` only through where the nodes go; it carries no gradient.
        """
        mean, var = jax.lax.stop_gradient(jnp.broadcast_arrays(mean, var))
        root_var = jnp.sqrt(var)[..., None]
        t = jnp.linspace(-self.half_width, self.half_width, self.num_breaks, dtype=mean.dtype)
        mode, scale = self._mode(mean, var, alpha)
        wide_breaks = mode[..., None] + t
        narrow_breaks = mode[..., None] + scale[..., None] * t
        step = jnp.where(t < 0, t / np.sqrt(alpha), t)  # Φ(u)^α ≈ exp(−αu²/2) left of the step
        step_breaks = jnp.clip((step - mean[..., None]) / jnp.maximum(root_var, jnp.finfo(mean.dtype).tiny),
                               wide_breaks[..., :1], wide_breaks[..., -1:])
        return gaussian_panels(jnp.concatenate([wide_breaks, narrow_breaks, step_breaks], axis=-1), self.panel_nodes)

    def _mode(self, mean, var, alpha):
        """Mode ``z*`` and Laplace scale ``σ*`` of ``ψ``: ``ψ'(z) = −z + α√r λ(u)`` (``λ`` of :func:`log_ndtr_and_mills_ratio`,
        convex) and ``ψ''(z) = −1 − αr λ(u)(u + λ(u))``, ``u = μ + √r z``."""
        root_var = jnp.sqrt(var)

        def curvature(z):
            u = mean + root_var * z
            lam = log_ndtr_and_mills_ratio(u)[1]
            return -z + alpha * root_var * lam, 1.0 + alpha * var * lam * (u + lam)

        def newton(_, z):
            slope, curv = curvature(z)
            return z + slope / curv

        mode = jax.lax.fori_loop(0, self.newton_steps, newton, jnp.zeros_like(mean))
        return mode, jax.lax.rsqrt(curvature(mode)[1])


def log_ndtr_and_mills_ratio(u):
    """``log Φ(u)`` and the inverse Mills ratio ``λ(u) = N(u)/Φ(u)``, both to ~1e-15 relative for every ``u``.

    For ``u ≥ −8``: ``log_ndtr`` and ``λ = exp(log N − log Φ)``. Below, Laplace's continued fraction
    ``1/λ(u) = 1/(x + 1/(x + 2/(x + 3/(x + …))))``, ``x = −u``, with 16 terms (relative error < 1e-15 for
    ``x ≥ 8``) and ``log Φ = log N − log λ``. JAX's ``log_ndtr`` errs by up to 2e-11 relative below
    ``u = −20`` (its asymptotic series): 4e-9 in ``log Φ(−20)``, and more in the curvature ``λ(λ + u)``,
    which loses a factor ``u²``. (``jax.scipy.special.erfcx`` returns 0 near 26.6 in JAX 0.10: not used.)
    """
    x = jnp.maximum(-u, MILLS_SWITCH)
    fraction = x
    for k in range(MILLS_TERMS, 0, -1):
        fraction = x + k / fraction
    log_pdf = norm.logpdf(u)
    left = u < -MILLS_SWITCH
    log_cdf = jnp.where(left, log_pdf - jnp.log(fraction), log_ndtr(jnp.where(left, -MILLS_SWITCH, u)))
    return log_cdf, jnp.where(left, fraction, jnp.exp(log_pdf - log_cdf))


def probit_power_moments(mean, var, alpha: float, rule: ProbitPowerQuadrature = ProbitPowerQuadrature()):
    """``log Z = log E_{u∼N(μ,r)}[Φ(u)^α]`` and its derivatives ``G = ∂log Z/∂μ``, ``H = 2∂log Z/∂r``.

    With ``h = Φ^α``, ``h'/h = αλ`` and ``h''/h = αλ((α − 1)λ − u)`` (``λ`` of :func:`log_ndtr_and_mills_ratio`), so by
    ``∂E[h]/∂μ = E[h']`` and Price's theorem ``∂E[h]/∂r = ½E[h'']`` both are expectations under the tilted
    density ``∝ N(u; μ, r)Φ(u)^α``:

        G = E_t[αλ(u)],      H = E_t[αλ(u)((α − 1)λ(u) − u)],      −∂²log Z/∂μ² = G² − H.

    No derivative of a node is taken, so all three are finite at ``r = 0`` (where they reduce to the
    derivatives of ``α log Φ(μ)``). Sums are in log-sum-exp form (Bui, Yan & Turner 2017, §3.8, App. G.2).
    """
    mean, var = jnp.broadcast_arrays(mean, var)
    z, log_w = rule.nodes(mean, var, alpha)
    u = mean[..., None] + jnp.sqrt(var)[..., None] * z
    log_cdf, lam = log_ndtr_and_mills_ratio(u)
    log_terms = log_w + alpha * log_cdf
    log_z = logsumexp(log_terms, axis=-1)
    tilted = jnp.exp(log_terms - log_z[..., None])
    return (log_z, jnp.sum(tilted * alpha * lam, axis=-1),
            jnp.sum(tilted * alpha * lam * ((alpha - 1.0) * lam - u), axis=-1))


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def log_probit_power(mean, var, alpha: float, rule: ProbitPowerQuadrature = ProbitPowerQuadrature()):
    """``log E_{u∼N(μ,r)}[Φ(u)^α]``, differentiable in ``(μ, r)`` at every ``r ≥ 0`` (including 0).

    Its JVP is ``G dμ + ½H dr`` of :func:`probit_power_moments` (Price's theorem), not autodiff through
    the nodes ``μ + √r z``, whose derivative in ``r`` is infinite at ``r = 0``.
    """
    return probit_power_moments(mean, var, alpha, rule)[0]


@log_probit_power.defjvp
def _log_probit_power_jvp(alpha, rule, primals, tangents):
    log_z, slope, curvature = probit_power_moments(*primals, alpha, rule)
    return log_z, slope * tangents[0] + 0.5 * curvature * tangents[1]


class TiltedQuadrature(NamedTuple):
    """Composite Gauss–Legendre rule for ``∫ N(f; m, v) h(f) df`` when ``h`` (a likelihood to a power α) varies
    on its own scale about its own centre, anywhere relative to the Gaussian: any smooth likelihood's
    Power-EP tilted normaliser and moments (:func:`tilted_moments_by_quadrature`).

    Written in ``z = (f − m)/√v`` the integrand is ``N(z)·h(m + √v z)``. Breakpoints, each set ``num_breaks``
    points ``t`` on ``[−h, h]`` (``h = half_width``):

    * the Gaussian: ``z = t``;
    * the likelihood: ``z = (c ± w·2^k/√α − m)/√v`` and ``z = (c − m)/√v``, ``k = −2 … octaves − 3``, about
      its centre ``c`` on its scale ``w`` (the likelihood says where: e.g. ``y`` and the Student-t's scale,
      ``log(y + ½)`` and ``(y + ½)^{−½}`` for counts; ``p^α`` varies on the scale ``w/√α``), in octaves, so
      that a heavy (polynomial) tail is resolved as well as the peak;
    * the whole span between the lowest and the highest of these, evenly (the tilted density's mass lies
      between the Gaussian's and the likelihood's, and this set resolves it when the two are far apart);
    * with ``newton_steps > 0``, the tilted density's own: ``z = z* + σ* t`` about its mode ``z*`` on its Laplace
      scale ``σ* = (−ψ''(z*))^{−1/2}``, ``ψ(z) = −z²/2 + α log p(y | m + √v z)`` (Laplace-centred quadrature,
      Liu & Pierce 1994): a peak far from both centres and narrower than the octaves about them (a far outlier
      of the heteroscedastic likelihood, :mod:`pep_gp.core.heteroscedastic`). :meth:`laplace` finds it from the
      best of the other breakpoints.

    Each gap between sorted breakpoints gets ``panel_nodes`` Gauss–Legendre nodes. The rule depends on
    ``(m, v, c, w)`` (and ``z*``, ``σ*``) only through where its nodes go and carries no gradient; the integrand's
    dependence on ``(m, v)`` and the likelihood's parameters does. Needs ``v > 0``. Measured accuracy against
    ``scipy.integrate.quad``: ``tests/core/test_quadrature_likelihoods.py``, ``tests/core/test_heteroscedastic.py``.
    """

    num_breaks: int = 9
    panel_nodes: int = 16
    half_width: float = 9.0
    octaves: int = 10
    newton_steps: int = 0

    def breaks(self, mean, var, centre, width, alpha=1.0):
        """The breakpoints ``[..., P]`` in ``z`` of the Gaussian's, the likelihood's and the span's sets (unsorted)."""
        mean, var, centre, width = jax.lax.stop_gradient(jnp.broadcast_arrays(mean, var, centre, width))
        root_var = jnp.sqrt(var)[..., None]
        t = jnp.linspace(-self.half_width, self.half_width, self.num_breaks, dtype=mean.dtype)
        steps = 2.0 ** np.arange(-2, self.octaves - 2)
        octaves = jnp.asarray(np.concatenate([-steps[::-1], [0.0], steps]), mean.dtype)
        own = (centre[..., None] + width[..., None] / np.sqrt(alpha) * octaves - mean[..., None]) / root_var
        gaussian = jnp.broadcast_to(t, mean.shape + t.shape)
        low = jnp.minimum(own[..., :1], gaussian[..., :1])
        high = jnp.maximum(own[..., -1:], gaussian[..., -1:])
        between = low + (high - low) * jnp.linspace(0.0, 1.0, self.num_breaks, dtype=mean.dtype)
        return jnp.concatenate([gaussian, own, between], axis=-1)

    def nodes(self, mean, var, centre, width, alpha=1.0, log_density=None):
        """``z``-points ``[..., K]`` and log-weights ``[..., K]`` of ``∫ N(z) h(z) dz`` (``−inf`` on empty panels);
        ``log_density``: the tilted density's log ``ψ`` in ``z`` (``[..., K] → [..., K]``), whose mode and scale
        (:meth:`laplace`) place the Laplace set when ``newton_steps > 0``."""
        breaks = self.breaks(mean, var, centre, width, alpha)
        if self.newton_steps and log_density is not None:
            mode, scale = self.laplace(log_density, breaks)
            t = jnp.linspace(-self.half_width, self.half_width, self.num_breaks, dtype=breaks.dtype)
            breaks = jnp.concatenate([breaks, mode[..., None] + scale[..., None] * t], axis=-1)
        return gaussian_panels(breaks, self.panel_nodes)

    def laplace(self, log_density, z):
        """Mode ``z*`` and Laplace scale ``σ* = (max(−ψ''(z*), 1))^{−½} ≤ 1`` ``[...]`` of ``ψ = log_density``
        (``[..., K] → [..., K]``, elementwise), from the best of the points ``z`` ``[..., K]`` (the rule's
        other breakpoints) by ``newton_steps`` Newton steps ``ψ'/max(−ψ'', 1)``, each the best of it and its halvings that
        raises ``ψ`` (so ``ψ`` never falls where it is not concave; the floor 1 is the prior's curvature in
        ``z``). Carries no gradient."""
        def value(points):
            values = log_density(points)
            return jnp.where(jnp.isnan(values), -jnp.inf, values)

        def derivatives(point):  # ψ' and ψ'' at [..., 1]
            ones = jnp.ones_like(point)
            return jax.jvp(lambda p: jax.jvp(log_density, (p,), (ones,))[1], (point,), (ones,))

        halvings = jnp.asarray(0.5 ** np.arange(NEWTON_HALVINGS), z.dtype)

        def newton(_, point):
            slope, curvature = derivatives(point)
            trials = point + slope / jnp.maximum(-curvature, 1.0) * halvings  # [..., J]
            values = value(trials)
            best = jnp.argmax(values, axis=-1, keepdims=True)
            better = jnp.take_along_axis(values, best, axis=-1) > value(point)
            return jnp.where(better, jnp.take_along_axis(trials, best, axis=-1), point)

        z = jax.lax.stop_gradient(z)
        start = jnp.take_along_axis(z, jnp.argmax(value(z), axis=-1, keepdims=True), axis=-1)
        mode = jax.lax.fori_loop(0, self.newton_steps, newton, start)
        scale = jax.lax.rsqrt(jnp.maximum(-derivatives(mode)[1], 1.0))
        return jax.lax.stop_gradient((mode[..., 0], scale[..., 0]))


def tilted_moments_by_quadrature(log_likelihood, mean, var, alpha, centre, width,
                                 rule: TiltedQuadrature = TiltedQuadrature()):
    """``log Z̃ = log ∫ N(f; m, v) p(y|f)^α df`` and the mean and variance of the tilted density
    ``∝ N(f; m, v) p(y|f)^α`` (the Power-EP site's moments, Bui, Yan & Turner 2017 eq. 118; Minka 2004), by
    :class:`TiltedQuadrature` in log-sum-exp form.

    Args:
        log_likelihood: ``f ↦ log p(y|f)`` for ``f`` shaped ``[..., K]`` (``y`` broadcast by the caller).
        mean, var: the cavity's marginal, ``[...]``.
        alpha: the power, in ``(0, 1]``.
        centre, width: where the likelihood varies (:class:`TiltedQuadrature`).

    Returns:
        ``(log Z̃, mean, var)``, ``[...]`` each; differentiable in ``(m, v)`` and in what ``log_likelihood``
        closes over (the nodes are held). A node where ``log p = −∞`` (``e^f`` overflowing at a count
        likelihood's far node, which small α spreads to ``|f|`` in the thousands) weighs nothing, and no
        gradient reaches ``(m, v)`` through it, as its weight ``e^{−∞} = 0`` says; through the node it gave
        ``0·∞ = NaN``. A NaN ``log p`` is kept, and shows.
    """
    mean, var = jnp.broadcast_arrays(mean, var)

    def at(z):  # f at the points z
        return mean[..., None] + jnp.sqrt(var)[..., None] * z

    z, log_w = rule.nodes(mean, var, centre, width, alpha, lambda z: alpha * log_likelihood(at(z)) - 0.5 * z**2)
    f = at(z)
    held = jax.lax.stop_gradient(f)
    weighed = ~jnp.isneginf(log_likelihood(held))
    # the same values (XLA evaluates log p once); the gradient of a node that weighs nothing ends at the held copy
    log_terms = log_w + alpha * log_likelihood(jnp.where(weighed, f, held))
    log_z = logsumexp(log_terms, axis=-1)
    tilted = jnp.exp(log_terms - log_z[..., None])
    tilted_mean = jnp.sum(tilted * f, axis=-1)
    return log_z, tilted_mean, jnp.sum(tilted * (f - tilted_mean[..., None]) ** 2, axis=-1)
