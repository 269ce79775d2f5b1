"""Likelihoods as Power-EP sites: tilted normalisers ``log Z̃ = log ∫ N(f; m, v) p(y|f)^α df``.

A likelihood is math only (STYLE principle 2): it holds no data, and the quadrature rule is an
argument. Each provides

* ``log_tilted(params, y, mean, var, alpha)`` — ``log Z̃`` for ``α ∈ (0, 1]`` (Bui, Yan & Turner 2017 eq. 118),
* ``expected_log_prob(params, y, mean, var)`` — ``E_{N(f;m,v)}[log p(y|f)]``, the ``α → 0`` limit of
  ``log Z̃ / α`` (Bui, Yan & Turner 2017 eqs. 136–143),
* ``predict(params, mean, var)`` — the predictive distribution of ``y``.

``params`` is the likelihood's own dict of unconstrained parameters (empty for the probit).

Likelihoods used as EP/QP sites (:mod:`pep_gp.core.projections`) also provide

* ``log_prob(y, f)`` — ``log p(y|f)``,
* ``tilted_moments(y, mean, var, alpha=1)`` — ``log Z̃`` and the mean and variance of the tilted
  distribution ``∝ N(f; m, v) p(y|f)^α``.

The likelihoods without a closed form — :class:`BernoulliLogistic`, :class:`StudentT`, :class:`Poisson` and
:class:`NegativeBinomial` (:class:`QuadratureLikelihood`) — compute ``log Z̃`` and the tilted moments by
the composite rule :class:`~pep_gp.core.quadrature.TiltedQuadrature` for every ``α ∈ (0, 1]``, and take
their parameters as a last argument there (their starting values when omitted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np
from jax.nn import logsumexp
from jax.nn import softplus
from jax.scipy.special import betainc, gammaincc, gammaln, log_ndtr, ndtr, ndtri, xlogy
from jax.scipy.stats import norm

from .gaussian import LOG_2PI, QuantileProblem, bisect_quantiles, newton_quantiles
from .parameters import on_device, positive, unconstrain_positive
from .quadrature import (GaussHermite, ProbitPowerQuadrature, TiltedQuadrature, log_ndtr_and_mills_ratio,
                         log_probit_power, probit_power_moments, tilted_moments_by_quadrature)


def scaled_log_tilted(likelihood, params, y, mean, var, alpha: float):
    """``(1/α) log Z̃``, continuous at ``α = 0`` where it equals ``E_q[log p(y|f)]`` (Bui, Yan & Turner 2017 eq. 143)."""
    if alpha == 0.0:
        return likelihood.expected_log_prob(params, y, mean, var)
    return likelihood.log_tilted(params, y, mean, var, alpha) / alpha


def gaussian_log_tilted(noise_var, y, mean, var, alpha):
    """``log ∫ N(f; m, v) N(y; f, σ²)^α df = −(α/2)log(2πσ²) − ½log(1 + αv/σ²) − ½α(y−m)²/(αv + σ²)`` at the
    noise variance ``σ²`` (Bui, Yan & Turner 2017 eq. 127)."""
    return (
        -0.5 * alpha * (LOG_2PI + jnp.log(noise_var))
        - 0.5 * jnp.log1p(alpha * var / noise_var)
        - 0.5 * alpha * (y - mean) ** 2 / (alpha * var + noise_var)
    )


@dataclass(frozen=True)
class Gaussian:
    """``p(y|f) = N(y; f, σ_y²)``; closed-form tilted normaliser (Bui, Yan & Turner 2017 eq. 127)."""

    name: str = field(default="gaussian", init=False)

    @staticmethod
    def init_params(noise_variance=1.0):
        return {"raw_noise_variance": on_device(unconstrain_positive(noise_variance))}

    @staticmethod
    def noise_variance(params):
        return positive(params["raw_noise_variance"])

    def log_tilted(self, params, y, mean, var, alpha):
        """:func:`gaussian_log_tilted` at the noise variance ``σ_y²``."""
        return gaussian_log_tilted(self.noise_variance(params), y, mean, var, alpha)

    def expected_log_prob(self, params, y, mean, var):
        s2 = self.noise_variance(params)
        return -0.5 * (LOG_2PI + jnp.log(s2)) - 0.5 * ((y - mean) ** 2 + var) / s2

    def predict(self, params, mean, var):
        """Predictive mean and variance of ``y``."""
        return mean, var + self.noise_variance(params)

    def largest_log_prob(self, params):
        """``sup_{y,f} log p(y|f) = −½ log(2πσ²)``: no log marginal likelihood of ``N`` rows exceeds ``N``
        times it."""
        return -0.5 * (LOG_2PI + jnp.log(self.noise_variance(params)))


@dataclass(frozen=True)
class Probit:
    """``p(y|f) = Φ(s f)`` with ``s = 2y − 1`` for labels ``y ∈ {0, 1}`` (Bui, Yan & Turner 2017, §3.8).

    ``α = 1`` uses the closed form ``log Φ(s m/√(1+v))``; ``0 < α < 1`` uses the composite rule of
    :class:`~pep_gp.core.quadrature.ProbitPowerQuadrature` on ``log E[Φ(s f)^α]`` (accurate and with a finite
    gradient for any cavity variance, 0 included); ``α = 0`` (:meth:`expected_log_prob`) uses
    Gauss–Hermite in log-sum-exp form with ``log Φ`` from ``log_ndtr`` (Bui, Yan & Turner 2017, §3.8, App. G.2).
    """

    quadrature: GaussHermite = GaussHermite()
    tilted_quadrature: ProbitPowerQuadrature = ProbitPowerQuadrature()
    name: str = field(default="probit", init=False)

    @staticmethod
    def init_params():
        return {}

    @staticmethod
    def sample_labels(f, rng):
        """Labels drawn at latent draws ``f``: 1 where ``f + ε > 0``, ``ε ~ N(0, 1)`` (``p = Φ(f)``)."""
        return (f + rng.standard_normal(f.shape) > 0).astype(int)

    @staticmethod
    def _sign(y):
        return 2.0 * y - 1.0

    def log_tilted(self, params, y, mean, var, alpha):
        s = self._sign(y)
        if alpha == 1.0:
            return log_ndtr(s * mean / jnp.sqrt(1.0 + var))
        return log_probit_power(s * mean, var, alpha, self.tilted_quadrature)

    def expected_log_prob(self, params, y, mean, var):
        points, log_w = self.quadrature.nodes(mean, var)
        return jnp.sum(jnp.exp(log_w) * log_ndtr(self._sign(y)[..., None] * points), axis=-1)

    def predict(self, params, mean, var):
        """``p(y = 1 | x) = Φ(m/√(1+v))``."""
        return ndtr(mean / jnp.sqrt(1.0 + var))

    @staticmethod
    def largest_log_prob(params):
        """0: a probability (:meth:`Gaussian.largest_log_prob`)."""
        return 0.0

    def log_prob(self, y, f):
        return log_ndtr(self._sign(y) * f)

    def tilted_moments(self, y, mean, var, alpha=1.0):
        """``log Z̃``, mean and variance of ``∝ N(f; m, v) Φ(sf)^α``. At ``α = 1``: ``z = sm/√(1+v)``,
        ``λ = N(z)/Φ(z)``, mean ``m + svλ/√(1+v)``, variance ``v − v²λ(z + λ)/(1+v)`` (Zhang et al. 2020 eq. 36;
        R&W eqs. 3.58); otherwise the derivatives of :func:`~pep_gp.core.quadrature.probit_power_moments`
        (Zhang et al. 2020 eqs. 29, 34)."""
        s = self._sign(y)
        if alpha == 1.0:
            z = s * mean / jnp.sqrt(1.0 + var)
            log_z, lam = log_ndtr_and_mills_ratio(z)
            return log_z, mean + s * var * lam / jnp.sqrt(1.0 + var), var - var**2 * lam * (z + lam) / (1.0 + var)
        log_z, slope, curvature = probit_power_moments(s * mean, var, alpha, self.tilted_quadrature)
        return log_z, mean + s * var * slope, var - var**2 * (slope**2 - curvature)


@dataclass(frozen=True)
class Heaviside:
    """``p(y|f) = h(sf)``, the step (1 for ``sf > 0``), ``s = 2y − 1``: Swaroop's (2017) factors, a probit of
    zero width. The tilted distribution is a truncated Gaussian; ``h^α = h``, so ``α`` changes nothing."""

    name: str = field(default="heaviside", init=False)

    @staticmethod
    def log_prob(y, f):
        return jnp.where((2.0 * y - 1.0) * f >= 0, 0.0, -jnp.inf)

    @staticmethod
    def tilted_moments(y, mean, var, alpha=1.0):
        """``z = sm/√v``, ``log Z̃ = log Φ(z)``, mean ``m + s√v λ``, variance ``v(1 − λ(z + λ))``,
        ``λ = N(z)/Φ(z)`` (Swaroop 2017 eqs. 13–18 in one dimension)."""
        s = 2.0 * y - 1.0
        sd = jnp.sqrt(var)
        z = s * mean / sd
        log_z, lam = log_ndtr_and_mills_ratio(z)
        return log_z, mean + s * sd * lam, var * (1.0 - lam * (z + lam))


@dataclass(frozen=True)
class PoissonSquare:
    """Poisson counts with the square link, ``p(y|f) = g^y e^{−g}/y!``, ``g = f²`` (Zhang et al. 2020, App. C.2).

    ``e^{−f²} N(f; m, v) = √π N(m; 0, v + ½) N(f; β, s²)`` with ``s² = v/(1 + 2v)``, ``β = m/(1 + 2v)``, so
    the tilted distribution is ``∝ f^{2y} N(f; β, s²)`` and its normaliser and moments are ratios of the
    Gaussian's raw moments ``M_n = E[f^n] = Σ_{k even} C(n, k) β^{n−k} s^k (k − 1)!!`` — every term of
    ``M_{2y}`` and ``M_{2y+2}`` positive, ``M_{2y+1} = sign(β)·|…|`` — the closed form of Zhang et al. 2020
    eqs. 54–60 without the hypergeometric functions. Sums run to the static ``2·max_count + 2``.
    ``α = 1`` only.
    """

    max_count: int = 100
    name: str = field(default="poisson-square", init=False)

    @staticmethod
    def log_prob(y, f):
        return xlogy(2.0 * y, jnp.abs(f)) - f**2 - gammaln(y + 1.0)

    def tilted_moments(self, y, mean, var, alpha=1.0):
        if alpha != 1.0:
            raise ValueError(f"the Poisson square-link tilted moments are for alpha = 1 only; got {alpha}")
        scale2 = var / (1.0 + 2.0 * var)
        centre = mean / (1.0 + 2.0 * var)
        log_m = [self._log_abs_raw_moment(2.0 * y + j, centre, scale2) for j in range(3)]
        log_z = (0.5 * np.log(np.pi) + norm.logpdf(mean, 0.0, jnp.sqrt(var + 0.5)) + log_m[0] - gammaln(y + 1.0))
        tilted_mean = jnp.sign(centre) * jnp.exp(log_m[1] - log_m[0])
        return log_z, tilted_mean, jnp.exp(log_m[2] - log_m[0]) - tilted_mean**2

    def _log_abs_raw_moment(self, order, centre, scale2):
        """``log |E[f^n]|`` under ``N(β, s²)`` for a traced integer ``n ≤ 2·max_count + 2``."""
        k = jnp.arange(0, 2 * self.max_count + 3, 2, dtype=centre.dtype)  # even k
        order, centre, scale2 = (a[..., None] for a in jnp.broadcast_arrays(order, centre, scale2))
        log_double_factorial = gammaln(k + 1.0) - 0.5 * k * np.log(2.0) - gammaln(0.5 * k + 1.0)  # (k − 1)!!
        log_terms = (gammaln(order + 1.0) - gammaln(k + 1.0) - gammaln(jnp.maximum(order - k, 0.0) + 1.0)
                     + xlogy(order - k, jnp.abs(centre)) + 0.5 * k * jnp.log(scale2) + log_double_factorial)
        return logsumexp(jnp.where(k <= order, log_terms, -jnp.inf), axis=-1)

    @staticmethod
    def predict(mean, var):
        """Shape ``k`` and scale ``c`` of the Gamma matched to the mean and variance of ``g = f²``,
        ``f ∼ N(m, v)`` (Zhang et al. 2020 eq. 119); the predictive count is negative binomial
        ``NB(y; k, 1/(1 + c))`` (eq. 122)."""
        second = mean**2 + var
        spread = 2.0 * var * (2.0 * mean**2 + var)
        return second**2 / spread, spread / second


@dataclass(frozen=True)
class QuadratureLikelihood:
    """A likelihood given by ``log_prob(y, f, params)`` and where it varies in ``f`` (``span(params, y)``:
    a centre and a scale), whose Power-EP terms are quadratures: ``log Z̃`` and the tilted moments by
    :func:`~pep_gp.core.quadrature.tilted_moments_by_quadrature` (Bui, Yan & Turner 2017 eq. 118), and the
    ``α → 0`` term ``E_q[log p(y|f)]`` by Gauss–Hermite (eq. 143)."""

    quadrature: GaussHermite = GaussHermite()
    tilted_quadrature: TiltedQuadrature = TiltedQuadrature()

    def log_tilted(self, params, y, mean, var, alpha):
        return self.tilted_moments(y, mean, var, alpha, params)[0]

    def largest_log_prob(self, params):
        """``sup_{y,f} log p(y|f)`` (:meth:`Gaussian.largest_log_prob`): 0 for a probability mass (labels, counts)."""
        return 0.0

    def expected_log_prob(self, params, y, mean, var):
        points, log_w = self.quadrature.nodes(mean, var)
        return jnp.sum(jnp.exp(log_w) * self.log_prob(jnp.asarray(y)[..., None], points, params), axis=-1)

    def quantiles(self, params, mean, var, levels):
        """Quantiles ``[B, Q]`` at the levels ``[B, Q]`` of ``y``'s predictive ``∫ p(y|f) N(f; m, v) df``, ``[B]``
        each (:meth:`quantile_problem`): a count's, an integer, by bisection of its CDF
        (:func:`~pep_gp.core.gaussian.bisect_quantiles`); a continuous ``y``'s by Newton's method
        (:func:`~pep_gp.core.gaussian.newton_quantiles`)."""
        problem = self.quantile_problem(params, mean, var, levels)
        if self.counts:
            return bisect_quantiles(problem.cdf, problem.lower, problem.upper, levels, integer=True)
        return newton_quantiles(problem)

    @staticmethod
    def _mixed(values, log_w):
        """``Σ_i w_i values_i`` over the Gauss–Hermite nodes (the last axis)."""
        return jnp.sum(jnp.exp(log_w) * values, axis=-1)

    def quantile_problem(self, params, mean, var, levels) -> QuantileProblem:
        """``y``'s predictive quantiles as a :class:`~pep_gp.core.gaussian.QuantileProblem`: the CDF
        ``Σ_i w_i F(y | f_i)`` and density ``Σ_i w_i p(y | f_i)`` over the Gauss–Hermite nodes ``f_i`` of
        ``N(f; m, v)`` (``F``: the likelihood's ``cdf``), the likelihood's bracket, starting from the Gaussian
        of the predictive's mean and variance (from its mean where it has no variance: a Student-t of
        ν ≤ 2). A count's quantiles use its CDF and bracket only."""
        points, log_w = self.quadrature.nodes(mean, var)  # [B, K], [K]
        centre, spread = self.predict(params, mean, var)
        spread = jnp.sqrt(spread)
        low, high = self.quantile_bracket(params, mean, var, spread)
        finite = jnp.isfinite(spread)[:, None]
        return QuantileProblem(
            lambda y: self._mixed(self.cdf(params, y[..., None], points[:, None, :]), log_w),
            lambda y: self._mixed(jnp.exp(self.log_prob(y[..., None], points[:, None, :], params)), log_w),
            low[:, None], high[:, None], centre[:, None] + jnp.where(finite, spread[:, None], 0.0) * ndtri(levels),
            levels, jnp.where(finite, spread[:, None], jnp.sqrt(var)[:, None]))

    def predictive_cdf(self, params, y, mean, var):
        """``(P(Y < y), P(Y ≤ y))`` ``[B]`` each under ``y``'s predictive ``∫ p(y|f) N(f; m, v) df`` at ``y`` ``[B]``:
        ``Σ_i w_i F(y | f_i)`` over the Gauss–Hermite nodes, as :meth:`quantiles`; the two differ for a count
        (``P(Y < y) = P(Y ≤ y − 1)``) only. ``y`` lies in the central interval of level ``p`` (between the
        ``(1 − p)/2`` and ``(1 + p)/2`` quantiles) exactly when ``P(Y ≤ y) ≥ (1 − p)/2`` and ``P(Y < y) ≤ (1 + p)/2``."""
        points, log_w = self.quadrature.nodes(mean, var)  # [B, K], [K]
        below = y - 1.0 if self.counts else y
        both = jnp.stack([below, y], axis=-1)  # [B, 2]
        values = self._mixed(self.cdf(params, both[..., None], points[:, None, :]), log_w)
        return values[:, 0], values[:, 1]

    counts = False

    def quantile_bracket(self, params, mean, var, spread):
        """Where ``y``'s quantiles lie, ``[B]`` each (a count's from −1)."""
        top = jnp.exp(mean + 9.0 * jnp.sqrt(var))
        return -jnp.ones_like(mean), jnp.ceil(top + 40.0 * jnp.sqrt(top) + 40.0 * jnp.where(jnp.isfinite(spread), spread, 0.0))

    def tilted_moments(self, y, mean, var, alpha=1.0, params=None):
        """``log Z̃``, mean and variance of ``∝ N(f; m, v) p(y|f)^α``, ``α ∈ (0, 1]``."""
        params = self.init_params() if params is None else params
        y = jnp.asarray(y, dtype=jnp.result_type(mean, var))
        centre, width = self.span(params, y)
        return tilted_moments_by_quadrature(lambda f: self.log_prob(y[..., None], f, params), mean, var, alpha,
                                            centre, width, self.tilted_quadrature)


@dataclass(frozen=True)
class BernoulliLogistic(QuadratureLikelihood):
    """``p(y|f) = σ(s f)``, the logistic sigmoid, with ``s = 2y − 1`` for labels ``y ∈ {0, 1}`` (Rasmussen &
    Williams 2006, §3.3). Its step is at ``f = 0`` on a unit scale."""

    name: str = field(default="logistic", init=False)

    @staticmethod
    def init_params():
        return {}

    @staticmethod
    def sample_labels(f, rng):
        """Labels drawn at latent draws ``f``: 1 where ``f + ε > 0``, ``ε`` standard logistic (``p = σ(f)``)."""
        return (f + rng.logistic(size=f.shape) > 0).astype(int)

    @staticmethod
    def log_prob(y, f, params=None):
        return -softplus(-(2.0 * y - 1.0) * f)

    @staticmethod
    def span(params, y):
        return jnp.zeros_like(y), jnp.ones_like(y)

    def predict(self, params, mean, var):
        """``p(y = 1 | x) = ∫ σ(f) N(f; m, v) df`` (by the same quadrature)."""
        return jnp.exp(self.log_tilted(params, jnp.ones_like(mean), mean, var, 1.0))


@dataclass(frozen=True)
class StudentT(QuadratureLikelihood):
    """Robust regression: ``p(y|f) = Γ((ν+1)/2)/(Γ(ν/2)√(νπ)σ) · (1 + (y − f)²/(νσ²))^{−(ν+1)/2}`` with scale
    ``σ`` and degrees of freedom ``ν`` (Vanhatalo, Jylänki & Vehtari 2009; Rasmussen & Williams 2006, §9.3).
    Not log-concave in ``f``: an outlier's tilted density may be bimodal, which the quadrature resolves
    (it breaks at the cavity and at ``y`` on the scale ``σ``)."""

    name: str = field(default="student-t", init=False)

    @staticmethod
    def init_params(scale=0.1, dof=4.0):
        return {"raw_scale": on_device(unconstrain_positive(scale)),
                "raw_dof": on_device(unconstrain_positive(dof))}

    @staticmethod
    def scale_and_dof(params):
        return positive(params["raw_scale"]), positive(params["raw_dof"])

    def log_prob(self, y, f, params=None):
        scale, dof = self.scale_and_dof(self.init_params() if params is None else params)
        return (gammaln(0.5 * (dof + 1.0)) - gammaln(0.5 * dof) - 0.5 * jnp.log(dof * np.pi) - jnp.log(scale)
                - 0.5 * (dof + 1.0) * jnp.log1p(((y - f) / scale) ** 2 / dof))

    def span(self, params, y):
        return y, self.scale_and_dof(params)[0] * jnp.ones_like(y)

    def largest_log_prob(self, params):
        """``log p(y | f = y)``, the density at its mode (:meth:`Gaussian.largest_log_prob`)."""
        return self.log_prob(0.0, 0.0, params)

    def cdf(self, params, y, f):
        """``P(Y ≤ y | f)``: ``1 − ½I_x(ν/2, ½)`` above ``f`` (and ``½I_x`` below), ``x = ν/(ν + t²)``,
        ``t = (y − f)/σ`` (Abramowitz & Stegun 26.7.1)."""
        scale, dof = self.scale_and_dof(params)
        t = (y - f) / scale
        tail = 0.5 * betainc(0.5 * dof, 0.5, dof / (dof + t**2))
        return jnp.where(t > 0, 1.0 - tail, tail)

    def quantile_bracket(self, params, mean, var, spread):
        """``m ± (9√v + 10⁹σ)``: a Student-t tail ``∝ |t|^{−ν}`` for small ``ν`` (Newton's method keeps its
        steps inside it, :func:`~pep_gp.core.gaussian.newton_quantiles`)."""
        scale, _ = self.scale_and_dof(params)
        reach = 9.0 * jnp.sqrt(var) + 1e9 * scale
        return mean - reach, mean + reach

    def predict(self, params, mean, var):
        """Predictive mean ``m`` and variance ``v + σ²ν/(ν − 2)`` of ``y`` (infinite for ``ν ≤ 2``)."""
        scale, dof = self.scale_and_dof(params)
        return mean, var + jnp.where(dof > 2.0, scale**2 * dof / jnp.maximum(dof - 2.0, 1e-300), jnp.inf)


@dataclass(frozen=True)
class Poisson(QuadratureLikelihood):
    """Counts with the log link: ``p(y|f) = μ^y e^{−μ}/y!``, ``μ = e^f`` (Rasmussen & Williams 2006, §9.3;
    GPflow's ``Poisson``). Its mass in ``f`` sits at ``log(y + ½)`` on the scale ``(y + ½)^{−½}`` (the
    curvature of ``y f − e^f`` at its mode)."""

    name: str = field(default="poisson", init=False)

    @staticmethod
    def init_params():
        return {}

    @staticmethod
    def log_prob(y, f, params=None):
        return y * f - jnp.exp(f) - gammaln(y + 1.0)

    @staticmethod
    def span(params, y):
        return jnp.log(y + 0.5), (y + 0.5) ** -0.5

    counts = True

    @staticmethod
    def cdf(params, y, f):
        """``P(Y ≤ y | f) = Q(⌊y⌋ + 1, e^f)``, the regularised upper incomplete gamma function."""
        return jnp.where(y < 0, 0.0, gammaincc(jnp.floor(jnp.maximum(y, 0.0)) + 1.0, jnp.exp(f)))

    def predict(self, params, mean, var):
        """Mean ``E[μ] = e^{m + v/2}`` and variance ``E[μ] + Var[μ] = E[μ] + (e^v − 1)E[μ]²`` of the count."""
        rate = jnp.exp(mean + 0.5 * var)
        return rate, rate + jnp.expm1(var) * rate**2


@dataclass(frozen=True)
class NegativeBinomial(QuadratureLikelihood):
    """Over-dispersed counts with the log link: ``p(y|f) = Γ(y + r)/(Γ(r) y!) (r/(r + μ))^r (μ/(r + μ))^y``,
    ``μ = e^f``, dispersion ``r`` (variance ``μ + μ²/r``; GPflow's and GPyTorch's parameterisation by
    ``1/r``). Its mass in ``f`` sits at ``log(y + ½)`` on the scale ``√(1/(y + ½) + 1/r)``."""

    name: str = field(default="negative-binomial", init=False)

    @staticmethod
    def init_params(dispersion=1.0):
        return {"raw_dispersion": on_device(unconstrain_positive(dispersion))}

    @staticmethod
    def dispersion(params):
        return positive(params["raw_dispersion"])

    def log_prob(self, y, f, params=None):
        r = self.dispersion(self.init_params() if params is None else params)
        return (gammaln(y + r) - gammaln(r) - gammaln(y + 1.0) + r * jnp.log(r) + y * f
                - (r + y) * jnp.logaddexp(jnp.log(r), f))

    def span(self, params, y):
        return jnp.log(y + 0.5), jnp.sqrt(1.0 / (y + 0.5) + 1.0 / self.dispersion(params))

    counts = True

    def cdf(self, params, y, f):
        """``P(Y ≤ y | f) = I_p(r, ⌊y⌋ + 1)``, ``p = r/(r + e^f)``, the regularised incomplete beta function."""
        r = self.dispersion(params)
        p = jnp.exp(jnp.log(r) - jnp.logaddexp(jnp.log(r), f))
        return jnp.where(y < 0, 0.0, betainc(r, jnp.floor(jnp.maximum(y, 0.0)) + 1.0, p))

    def predict(self, params, mean, var):
        """Mean ``E[μ] = e^{m + v/2}`` and variance ``E[μ] + E[μ²](1 + 1/r) − E[μ]²`` of the count."""
        rate = jnp.exp(mean + 0.5 * var)
        return rate, rate + jnp.exp(2.0 * mean + 2.0 * var) * (1.0 + 1.0 / self.dispersion(params)) - rate**2


LIKELIHOODS = {cls.name: cls for cls in (Gaussian, Probit, BernoulliLogistic, StudentT, Poisson, NegativeBinomial)}
"""The likelihoods a model's ``likelihood`` setting names."""
