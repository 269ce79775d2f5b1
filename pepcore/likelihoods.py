"""Likelihoods as Power-EP sites: tilted normalisers ``log Z̃ = log ∫ N(f; m, v) p(y|f)^α df``.

A likelihood is math only (STYLE principle 2): it holds no data, and the quadrature rule is an
argument. Each provides

* ``log_tilted(params, y, mean, var, alpha)`` — ``log Z̃`` for ``α ∈ (0, 1]`` (seed000 eq. 118),
* ``expected_log_prob(params, y, mean, var)`` — ``E_{N(f;m,v)}[log p(y|f)]``, the ``α → 0`` limit of
  ``log Z̃ / α`` (seed000 eqs. 136–143),
* ``predict(params, mean, var)`` — the predictive distribution of ``y``.

``params`` is the likelihood's own dict of unconstrained parameters (empty for the probit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr

from pepcore.gaussian import LOG_2PI
from pepcore.parameters import positive, unconstrain_positive
from pepcore.quadrature import GaussHermite, ProbitPowerQuadrature, log_probit_power


def scaled_log_tilted(likelihood, params, y, mean, var, alpha: float):
    """``(1/α) log Z̃``, continuous at ``α = 0`` where it equals ``E_q[log p(y|f)]`` (seed000 eq. 143)."""
    if alpha == 0.0:
        return likelihood.expected_log_prob(params, y, mean, var)
    return likelihood.log_tilted(params, y, mean, var, alpha) / alpha


@dataclass(frozen=True)
class Gaussian:
    """``p(y|f) = N(y; f, σ_y²)``; closed-form tilted normaliser (seed000 eq. 127)."""

    name: str = field(default="gaussian", init=False)

    @staticmethod
    def init_params(noise_variance=1.0):
        return {"raw_noise_variance": unconstrain_positive(jnp.asarray(noise_variance, dtype=float))}

    @staticmethod
    def noise_variance(params):
        return positive(params["raw_noise_variance"])

    def log_tilted(self, params, y, mean, var, alpha):
        """``−(α/2)log(2πσ²) − ½log(1 + αv/σ²) − ½α(y−m)²/(αv + σ²)`` (seed000 eq. 127)."""
        s2 = self.noise_variance(params)
        return (
            -0.5 * alpha * (LOG_2PI + jnp.log(s2))
            - 0.5 * jnp.log1p(alpha * var / s2)
            - 0.5 * alpha * (y - mean) ** 2 / (alpha * var + s2)
        )

    def expected_log_prob(self, params, y, mean, var):
        s2 = self.noise_variance(params)
        return -0.5 * (LOG_2PI + jnp.log(s2)) - 0.5 * ((y - mean) ** 2 + var) / s2

    def predict(self, params, mean, var):
        """Predictive mean and variance of ``y``."""
        return mean, var + self.noise_variance(params)


@dataclass(frozen=True)
class Probit:
    """``p(y|f) = Φ(s f)`` with ``s = 2y − 1`` for labels ``y ∈ {0, 1}`` (seed000 §3.8).

    ``α = 1`` uses the closed form ``log Φ(s m/√(1+v))``; ``0 < α < 1`` uses the composite rule of
    :class:`~pepcore.quadrature.ProbitPowerQuadrature` on ``log E[Φ(s f)^α]`` (accurate and with a finite
    gradient for any cavity variance, 0 included); ``α = 0`` (:meth:`expected_log_prob`) uses
    Gauss–Hermite in log-sum-exp form with ``log Φ`` from ``log_ndtr`` (seed000 §4.1).
    """

    quadrature: GaussHermite = GaussHermite()
    tilted_quadrature: ProbitPowerQuadrature = ProbitPowerQuadrature()
    name: str = field(default="probit", init=False)

    @staticmethod
    def init_params():
        return {}

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
