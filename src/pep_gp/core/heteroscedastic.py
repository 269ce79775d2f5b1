"""The heteroscedastic Gaussian likelihood: noise that varies with the input through a second latent GP, the
log of the noise variance (Lázaro-Gredilla & Titsias 2011; Saul et al. 2016, chained GPs):

    p(y | f, g) = N(y; f, σ₀² e^g),

with ``f`` and ``g`` two latent functions of the same input and ``σ₀²`` the noise variance where ``g = 0``
(Lázaro-Gredilla & Titsias 2011, §2, give ``g`` a constant prior mean ``μ₀``; here ``log σ₀² = μ₀`` is a
parameter of the likelihood and ``g``'s prior mean is zero: the same model).

Its Power-EP terms take a row's two latent values under independent Gaussians ``f ~ N(m_f, v_f)``,
``g ~ N(m_g, v_g)`` (the two GPs' marginals at the row, ``mean``, ``var`` ``[..., 2]``: ``f`` then ``g``). The
integral over ``f`` is the Gaussian likelihood's closed form at the noise ``s = σ₀² e^g`` (Bui, Yan & Turner
2017 eq. 127; :func:`~pep_gp.core.likelihoods.gaussian_log_tilted`), which leaves one integral over ``g``:

    Z̃ = ∫∫ N(f; m_f, v_f) N(g; m_g, v_g) p(y | f, g)^α df dg = ∫ N(g; m_g, v_g) exp(ℓ_α(g)) dg,
    ℓ_α(g) = −(α/2) log(2πs) − ½ log(1 + αv_f/s) − ½ α(y − m_f)²/(αv_f + s),

by the composite rule of :class:`~pep_gp.core.quadrature.TiltedQuadrature` (``ℓ_α`` changes from its
``s ≪ (y − m_f)²`` to its ``s ≫`` side about ``s ≈ (y − m_f)² + αv_f``, on a unit scale of ``g``) with its
Laplace set about the tilted density's mode in ``g`` (Liu & Pierce 1994): an outlier under a narrow ``g`` has its
mass far from both centres, on a scale much finer than the rule's octaves there. ``ℓ_α`` is written in
``log s = log σ₀² + g`` and ``log(αv_f + s)`` (a log-sum-exp), finite with finite derivatives at every node: at
small ``α`` the rule's octaves reach ``g`` where ``e^g`` overflows or vanishes. The
``α → 0`` term is in closed form, ``E[e^{−g}] = e^{−m_g + v_g/2}`` (Lázaro-Gredilla & Titsias 2011, §3;
Saul et al. 2016, §3):

    E[log p(y | f, g)] = −½ log(2πσ₀²) − ½ m_g − ½ ((y − m_f)² + v_f) e^{−m_g + v_g/2}/σ₀².

The predictive of ``y`` is a scale mixture, ``∫ N(y; m_f, v_f + σ₀² e^g) N(g; m_g, v_g) dg``: mean ``m_f``,
variance ``v_f + σ₀² e^{m_g + v_g/2}``; its density is ``Z̃`` at ``α = 1``, and its CDF and quantiles are
those of the Gaussian mixture at Gauss–Hermite nodes of ``g``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp
from jax.scipy.special import ndtr

from .gaussian import LOG_2PI, mixture_quantiles
from .likelihoods import Gaussian
from .quadrature import GaussHermite, TiltedQuadrature, tilted_moments_by_quadrature

NEWTON_STEPS = 8  # to the tilted density's mode in g (TiltedQuadrature.laplace)


@dataclass(frozen=True)
class HeteroscedasticGaussian:
    """``p(y | f, g) = N(y; f, σ₀² e^g)`` of two latent functions (module docstring); its parameters are the
    Gaussian likelihood's, ``{"raw_noise_variance"}`` (``σ₀²``, softplus).

    Args:
        quadrature: Gauss–Hermite nodes of ``g`` for the predictive's CDF and quantiles.
        tilted_quadrature: the composite rule of ``log Z̃``'s integral over ``g``.

    Example:
        >>> lik = HeteroscedasticGaussian()
        >>> params = lik.init_params(0.5)
        >>> mean, var = jnp.array([0.1, -0.3]), jnp.array([0.2, 0.4])
        >>> bool(abs(lik.log_tilted(params, 1.0, mean, var, 1e-9) / 1e-9
        ...          - lik.expected_log_prob(params, 1.0, mean, var)) < 1e-6)
        True
    """

    quadrature: GaussHermite = GaussHermite()
    tilted_quadrature: TiltedQuadrature = TiltedQuadrature(newton_steps=NEWTON_STEPS)
    name: str = field(default="heteroscedastic-gaussian", init=False)

    @staticmethod
    def init_params(noise_variance=1.0):
        """``σ₀²``, the noise variance where ``g = 0``."""
        return Gaussian.init_params(noise_variance)

    @staticmethod
    def noise_variance(params):
        """``σ₀²``."""
        return Gaussian.noise_variance(params)

    def log_tilted(self, params, y, mean, var, alpha):
        """``log Z̃`` of ``p(y | f, g)^α`` under ``N(f; m_f, v_f) N(g; m_g, v_g)``, ``α ∈ (0, 1]`` (module
        docstring), ``[...]`` from ``mean``, ``var`` ``[..., 2]``."""
        y = jnp.asarray(y, dtype=jnp.result_type(mean, var))
        f_mean, f_var, g_mean, g_var = mean[..., 0], var[..., 0], mean[..., 1], var[..., 1]
        noise0 = self.noise_variance(params)
        centre = jnp.log(((y - f_mean) ** 2 + alpha * f_var) / noise0 + jnp.finfo(f_mean.dtype).tiny)

        def log_terms(g):  # ℓ_α(g)/α at the rule's nodes [..., K], in log s (module docstring)
            log_noise = jnp.log(noise0) + g
            log_spread = jnp.logaddexp(jnp.log(alpha * f_var)[..., None], log_noise)  # log(αv_f + s)
            return (-0.5 * alpha * (LOG_2PI + log_noise) - 0.5 * (log_spread - log_noise)
                    - 0.5 * alpha * (y - f_mean)[..., None] ** 2 * jnp.exp(-log_spread)) / alpha

        return tilted_moments_by_quadrature(log_terms, g_mean, g_var, alpha, centre, jnp.ones_like(centre),
                                            self.tilted_quadrature)[0]

    def expected_log_prob(self, params, y, mean, var):
        """``E[log p(y | f, g)]`` under ``N(f; m_f, v_f) N(g; m_g, v_g)``, in closed form (module docstring)."""
        noise0 = self.noise_variance(params)
        f_mean, f_var, g_mean, g_var = mean[..., 0], var[..., 0], mean[..., 1], var[..., 1]
        return (-0.5 * (LOG_2PI + jnp.log(noise0) + g_mean)
                - 0.5 * ((y - f_mean) ** 2 + f_var) * jnp.exp(-g_mean + 0.5 * g_var) / noise0)

    def noise_moments(self, params, mean, var):
        """``E[σ₀² e^g] = σ₀² e^{m_g + v_g/2}``: the expected noise variance, ``[...]``."""
        return self.noise_variance(params) * jnp.exp(mean[..., 1] + 0.5 * var[..., 1])

    def predict(self, params, mean, var):
        """Predictive mean ``m_f`` and variance ``v_f + σ₀² e^{m_g + v_g/2}`` of ``y``."""
        return mean[..., 0], var[..., 0] + self.noise_moments(params, mean, var)

    def _mixture(self, params, mean, var):
        """The predictive as a Gaussian mixture over Gauss–Hermite nodes ``g_k`` of ``N(m_g, v_g)``: the
        components' means and deviations ``[K, B]``, ``√(v_f + σ₀² e^{g_k})``, and their weights ``[K]``."""
        nodes, log_w = self.quadrature.nodes(mean[:, 1], var[:, 1])  # [B, K], [K]
        stds = jnp.sqrt(var[:, 0, None] + self.noise_variance(params) * jnp.exp(nodes)).T
        return jnp.broadcast_to(mean[:, 0], stds.shape), stds, jnp.exp(log_w)

    def quantiles(self, params, mean, var, levels):
        """Quantiles ``[B, Q]`` of ``y``'s predictive at the levels ``[B, Q]`` (latent ``mean``, ``var``
        ``[B, 2]``): of the Gauss–Hermite mixture, by Newton's method
        (:func:`~pep_gp.core.gaussian.mixture_quantiles`)."""
        means, stds, weights = self._mixture(params, mean, var)
        return mixture_quantiles(means, stds, levels, weights)

    def predictive_cdf(self, params, y, mean, var):
        """``(P(Y < y), P(Y ≤ y))`` ``[B]`` each (equal: ``y`` is continuous) of the Gauss–Hermite mixture at
        ``y`` ``[B]``."""
        means, stds, weights = self._mixture(params, mean, var)
        cdf = weights @ ndtr((y[None] - means) / stds)
        return cdf, cdf
