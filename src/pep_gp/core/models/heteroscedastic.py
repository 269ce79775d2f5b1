"""Heteroscedastic sparse GP regression: two latent sparse GPs of the same inputs, the mean ``f`` and the log
noise variance ``g``, through ``y ~ N(f, σ₀² e^g)`` (:class:`~pep_gp.core.heteroscedastic.HeteroscedasticGaussian`;
Lázaro-Gredilla & Titsias 2011; Saul et al. 2016), with tied Power-EP factors moved by the gradient of the energy.

The two GPs are a bank of two (:mod:`pep_gp.core.bank`, G = 2: kernels ``[2, ·]``, inducing inputs ``Z_f``,
``Z_g`` ``[2, M, D]``), each with its own tied factor ``t_g(u_g)`` (held through ``q_g`` whitened, :class:`~pep_gp.core.bank.WhitenedPosterior`), as the multi-class model
ties one factor per class (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1): ``q(u_f, u_g) = q(u_f)q(u_g)``,
as GPflow's SVGP with two independent latent GPs holds it. With ``N`` rows and power ``α`` the energy is that
of the one-GP model (:mod:`pep_gp.core.models.power_ep`, Bui, Yan & Turner 2017 eq. 110 with tied factors)
summed over the bank, with a row's term over both latent values:

    G = Σ_{h ∈ {f, g}} φ(q_h) − φ(p_h) + (N/α)(φ(cav_h) − φ(q_h)),
    L = Σ_n (1/α) log ∫∫ N(f_n; μ_n^f, v_n^f) N(g_n; μ_n^g, v_n^g) p(y_n | f_n, g_n)^α df_n dg_n,

each cavity ``p_h·t_h^(1 − α/N)``; ``α = 0`` is the variational bound ``−KL(q‖p) + Σ_n E_q[log p(y_n | f_n, g_n)]``
(Bui, Yan & Turner 2017 eqs. 144–146), the chained GP's (Saul et al. 2016, §3).

A mean function ``m`` (``params.mean``) makes ``f``'s prior ``GP(m, k_f)`` as in the one-GP model: the bank's
first GP is ``f − m``, each row's likelihood sees ``μ_n^f + m(x_n)`` and the predictive mean of ``f`` is shifted
by ``m(x*)`` (Rasmussen & Williams 2006, §2.7); ``g`` keeps its zero mean, ``σ₀²`` being its level. Priors on
the kernels' values (both GPs') and on ``σ₀²`` add ``log p(θ)`` to ``G`` once per step (a MAP fit,
:mod:`pep_gp.core.log_prior`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank
from ..heteroscedastic import HeteroscedasticGaussian
from ..initialisation import initial_kernel_and_inducing
from ..kernels import Kernel, SquaredExponential
from ..likelihoods import scaled_log_tilted
from ..linalg import DEFAULT_JITTER
from ..log_prior import with_log_prior
from ..means import MeanFunction, Zero
from .power_ep import StepShared

LATENTS = 2  # f and g


class HeteroscedasticParams(NamedTuple):
    """The trainable state: the two GPs' kernels (hyper-parameters ``[2, ·]``, ``f``'s then ``g``'s), their
    inducing inputs, the likelihood's unconstrained ``σ₀²``, their tied factors and the mean function of ``f``'s
    prior (:class:`~pep_gp.core.means.Zero`, no leaves, by default)."""

    kernel: Kernel  # [2, ·]
    inducing: jnp.ndarray  # Z_f, Z_g, [2, M, D]
    likelihood: dict  # {"raw_noise_variance"}: σ₀²
    factor: bank.WhitenedPosterior  # q_h = p_h·t_h whitened by chol(K_h): m̂_h [2, M], Ŝ_h [2, M, M]
    mean: MeanFunction = Zero()  # m of f's prior f ~ GP(m, k_f)


@dataclass(frozen=True)
class HeteroscedasticSparseGP:
    """Sparse GP regression with an input-dependent noise (module docstring); the state is
    :class:`HeteroscedasticParams`.

    Args:
        alpha: the power, in [0, 1]; 0 is the variational (chained GP) bound, 1 is EP.
        jitter: relative jitter on each ``K_uu``.
        likelihood: the heteroscedastic Gaussian (its quadrature rules).
        priors: priors on ``σ₀²``, ``(leaf name, prior)`` pairs; with them and the kernel's own priors the global
            term adds ``log p(θ)`` (:mod:`pep_gp.core.log_prior`).

    Example:
        >>> x = jnp.linspace(-2.0, 2.0, 30)[:, None]; y = jnp.sin(2.0 * x[:, 0])
        >>> model = HeteroscedasticSparseGP()
        >>> params = model.init(x, num_inducing=6)
        >>> [a.shape for a in model.predict_f(params, x)]
        [(30,), (30,)]
    """

    alpha: float = 0.5
    jitter: float = DEFAULT_JITTER
    likelihood: HeteroscedasticGaussian = HeteroscedasticGaussian()
    priors: tuple = ()  # ((likelihood leaf, prior), ...): pep_gp.core.priors

    def __post_init__(self):
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {self.alpha}")

    def sparse_gps(self, params: HeteroscedasticParams) -> bank.Bank:
        """The two GPs as a bank, the jitter ``jitter·σ_h`` on each ``K_uu``."""
        return bank.Bank(params.kernel, params.inducing, self.jitter * params.kernel.amplitude())

    def init(self, x, num_inducing: int, *, inducing=None, kernel: Kernel | None = None,
             noise_variance: float = 1.0, seed: int = 0, ard: bool = True,
             mean: MeanFunction | None = None) -> HeteroscedasticParams:
        """Starting state: ``kernel`` (default a squared exponential of variance 1) for both GPs, its lengthscales
        left unset the median distance (one shared by the inputs unless ``ard``), both GPs' inducing inputs at the
        k-means centres unless ``inducing``, ``σ₀² = noise_variance`` and each tied factor at 1, ``q = p``
        (:class:`~pep_gp.core.bank.WhitenedPosterior`: ``Ŝ = I``, ``m̂ = 0``, GPflow's SVGP start); ``mean``:
        ``f``'s prior mean at its starting values (default :class:`~pep_gp.core.means.Zero`)."""
        lengthscales, _, z = initial_kernel_and_inducing(x, num_inducing, inducing=inducing, seed=seed)
        if not ard:
            lengthscales = np.exp(np.mean(np.log(lengthscales), keepdims=True))
        kernel = SquaredExponential() if kernel is None else kernel
        size = z.shape[0]
        return HeteroscedasticParams(
            kernel=kernel.bank(LATENTS, z.shape[1], lengthscales),
            inducing=jnp.asarray(np.stack([z] * LATENTS)),
            likelihood=self.likelihood.init_params(noise_variance),
            factor=bank.WhitenedPosterior(jnp.zeros((LATENTS, size)), jnp.broadcast_to(jnp.eye(size), (LATENTS, size, size))),
            mean=Zero() if mean is None else mean.build(z.shape[1]))

    # ----------------------------------------------------------------------------------------------
    def step_shared(self, params: HeteroscedasticParams, n_total) -> StepShared:
        """Both ``chol(K_uu)`` and the cavities ``p_h·t_h^(1 − α/N)`` (``q`` itself at α = 0)."""
        prior = bank.prior_factors(self.sparse_gps(params))
        scale = 1.0 if self.alpha == 0.0 else 1.0 - self.alpha / n_total
        return StepShared(prior, bank.gaussians(prior, params.factor, scale))

    def global_energy(self, params: HeteroscedasticParams, shared: StepShared, n_total):
        """``G`` summed over the two GPs (:func:`~pep_gp.core.bank.power_ep_global_term`; at α = 0
        :func:`~pep_gp.core.bank.variational_global_term`), plus ``log p(θ)`` with priors."""
        q = bank.gaussians(shared.prior, params.factor, 1.0)
        if self.alpha == 0.0:
            value = bank.variational_global_term(q, params.factor)
        else:
            value = bank.power_ep_global_term(q, shared.cavity, n_total, self.alpha)
        return with_log_prior(value, params, self.priors)

    def data_energy(self, params: HeteroscedasticParams, shared: StepShared, x, y, mask):
        """``Σ_n mask_n (1/α) log Z̃_n`` of one block under the cavities (``Σ mask_n E_q[log p]`` at α = 0);
        masked (padding) rows contribute exactly zero. ``f``'s cavity mean is shifted by its prior's ``m(x_n)``."""
        marginals = bank.latent_marginals(self.sparse_gps(params), shared.prior, shared.cavity, x)  # [B, 2]
        terms = scaled_log_tilted(self.likelihood, params.likelihood, y, with_mean(params, x, marginals.mean),
                                  marginals.var, self.alpha)
        return jnp.sum(jnp.where(mask, terms, 0.0))

    def energy(self, params: HeteroscedasticParams, x, y):
        """The whole energy ``G + L`` on in-memory rows."""
        n = x.shape[0]
        shared = self.step_shared(params, n)
        return self.global_energy(params, shared, n) + self.data_energy(params, shared, x, y, jnp.ones(n, bool))

    # ----------------------------------------------------------------------------------------------
    def predict_latents(self, params: HeteroscedasticParams, x):
        """Posterior means and variances of ``f`` and ``g`` at the rows ``x``, ``[B, 2]`` each (``f``'s mean with its
        prior's ``m(x)``)."""
        gps = self.sparse_gps(params)
        prior = bank.prior_factors(gps)
        mean, var = bank.latent_marginals(gps, prior, bank.gaussians(prior, params.factor, 1.0), x)
        return with_mean(params, x, mean), var

    def predict_f(self, params: HeteroscedasticParams, x, full_cov: bool = False):
        """Posterior mean ``[B]`` and variance ``[B]`` (``full_cov``: covariance ``[B, B]``) of ``f``
        (:func:`~pep_gp.core.bank.latent_moments`, the mean plus the prior's ``m(x)``)."""
        gps = self.sparse_gps(params)
        prior = bank.prior_factors(gps)
        mean, spread = bank.latent_moments(gps, prior, bank.gaussians(prior, params.factor, 1.0), x, full_cov)
        return params.mean.plus(x, mean[:, 0]), spread[0] if full_cov else spread[:, 0]

    def predict_y(self, params: HeteroscedasticParams, x):
        """Predictive mean and variance of ``y``, the noise ``E[σ₀² e^g]`` of each row included."""
        return self.likelihood.predict(params.likelihood, *self.predict_latents(params, x))


def with_mean(params: HeteroscedasticParams, x, means):
    """The latent means ``[B, 2]`` of ``f − m`` and ``g`` as those of ``f`` and ``g``: ``f``'s column plus ``m(x)``
    (the same array with the zero mean)."""
    if isinstance(params.mean, Zero):
        return means
    return jnp.stack([params.mean.plus(x, means[:, 0]), means[:, 1]], axis=1)


jax.tree_util.register_static(HeteroscedasticSparseGP)
