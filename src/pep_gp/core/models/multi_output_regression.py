"""Collapsed Power-EP regression of ``P`` outputs observed at the same inputs, ``y`` ``[N, P]``, with one set of
inducing inputs ``Z`` ``[M, D]`` shared by the latent GPs (Bui, Yan & Turner 2017, §3.6, eq. 128, per
observation).

Two priors (as GPflow's ``SharedIndependent``/``SeparateIndependent`` and ``LinearCoregionalization``, and
GPyTorch's ``IndependentMultitaskVariationalStrategy``/``LMCVariationalStrategy``, write them):

* **independent outputs**: ``f_p ~ GP(0, k_p)`` independent, ``k_p`` one kernel per output (``G = P``) or one
  kernel shared by all (``G = 1``). Each observation ``y_np = f_p(x_n) + ε_np``, ``ε_np ~ N(0, σ_p²)``, is one
  Power-EP factor; the factors of output ``p`` touch only ``u_p = f_p(Z)``, whose prior is independent of the
  others', so the fixed point factorises over outputs and the collapsed bound is the sum of the outputs'
  single-output bounds (:func:`~pep_gp.core.models.collapsed_regression.log_marginal_likelihood` of each).
* **the linear model of coregionalisation** (LMC; Journel & Huijbregts 1978; Álvarez, Rosasco & Lawrence 2012,
  §4.2): ``f(x) = W g(x)`` with ``Q`` independent latent GPs ``g_q ~ GP(0, k_q)`` and mixing weights
  ``W`` ``[P, Q]``, so that ``cov(f_p(x), f_p'(x')) = Σ_q W_pq W_p'q k_q(x, x')``. The inducing variables are
  ``u = (g_1(Z), …, g_Q(Z))`` (``QM`` values, ``K_uu = blockdiag(K_q,ZZ)``), and the stacked observations
  ``vec(y)`` (output-major, ``NP`` values) have ``K_fu`` with blocks ``W_pq K_q,XZ``. Each observation is one
  Power-EP factor with its own noise, so eq. 128 holds for the stacked vector with the per-observation
  quantities

      Q_ff = Σ_q (w_q w_qᵀ) ⊗ K_q,XZ K_q,ZZ⁻¹ K_q,ZX,   D_(p,n) = Σ_q W_pq² (k_q(x_n, x_n) − [Q_q]_nn),

      log Z_PEP(α) = log N(vec y; 0, Q_ff + α diag(D) + Σ ⊗ I) − (1−α)/(2α) Σ_(p,n) log(1 + α D_(p,n)/σ_p²)

  (the derivation of Bui, Yan & Turner 2017, App. G.1, takes each factor's own noise ``σ_p²`` into its site,
  ``G_(p,n) = αD_(p,n) + σ_p²``). ``α = 1`` is the LMC's FITC evidence, ``α → 0`` its Titsias VFE bound, and
  inducing inputs at the training inputs give the exact log marginal likelihood of the stacked GP,
  ``log N(vec y; 0, Σ_q (w_q w_qᵀ) ⊗ K_q + Σ ⊗ I)``, for every α. It is evaluated in the stable ``O(NP (QM)²)``
  form of :func:`~pep_gp.core.models.collapsed_regression.evidence` with ``A₀ = L⁻¹K_uf`` ``[QM, NP]``.
  ``W = I`` (``Q = P``) is the independent model with separate kernels.

The predictive at a row ``x*`` is that of the same sites (Bui, Yan & Turner 2017, eq. 7 at test points) for
every output at once, with its ``P × P`` covariance across the outputs (diagonal for independent outputs).

Each output may have a prior mean ``m_p`` (``f_p = m_p(x) + …``; a :meth:`~pep_gp.core.means.MeanFunction.stacked`
mean of ``P`` functions, ``[N, P]`` at the rows, :meth:`~pep_gp.core.means.MeanFunction.each`): the bound is that of
``y − m(x)`` under the zero-mean model and the predictive means are shifted by ``m(x*)`` (Rasmussen & Williams
2006, §2.7). The default :class:`~pep_gp.core.means.Zero` adds nothing, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from ..kernels import Kernel
from ..linalg import DEFAULT_JITTER, cholesky, per_matrix, solve_lower
from ..log_prior import with_log_prior
from ..means import MeanFunction, Zero
from ..parameters import SOFTPLUS, constrained
from .collapsed_regression import condition, evidence, posterior

Outputs = Literal["independent", "lmc"]


class MultiOutputParams(NamedTuple):
    """Trainable state: the kernels of the ``G`` latent GPs (hyper-parameters ``[G, ·]``: ``G = P`` separate or
    ``1`` shared independent outputs, ``Q`` for the LMC), the outputs' unconstrained noise variances ``[P]``
    (softplus), the shared inducing inputs ``Z`` ``[M, D]``, the LMC's mixing weights ``W`` ``[P, Q]`` (None
    for independent outputs) and the outputs' prior means (a mean :meth:`~pep_gp.core.means.MeanFunction.stacked`
    for ``P`` functions; :class:`~pep_gp.core.means.Zero`, no leaves, by default)."""

    kernel: Kernel
    raw_noise_variance: jnp.ndarray  # [P]
    inducing: jnp.ndarray  # Z, [M, D]
    mixing: jnp.ndarray | None = None  # W, [P, Q]
    mean: MeanFunction = Zero()

    BIJECTIONS = {"raw_noise_variance": ("noise_variance", SOFTPLUS)}

    @property
    def noise_variance(self):
        return constrained(self)["noise_variance"]


class _Latents(NamedTuple):
    chol_uu: jnp.ndarray  # L_g = chol(K_g,ZZ), [G, M, M]
    projected: jnp.ndarray  # L_g⁻¹ K_g,ZX, [G, M, N]
    prior_diag: jnp.ndarray  # k_g(x_n, x_n), [G, N]


def _latents(kernel: Kernel, inducing, x, jitter) -> _Latents:
    """Each latent GP's whitened cross-covariances at the rows ``x`` (one factorisation per matrix:
    :func:`~pep_gp.core.linalg.per_matrix`)."""
    groups = kernel.amplitude().shape[0]
    z = jnp.broadcast_to(inducing, (groups, *inducing.shape))
    grams = kernel.gram(z)
    chol_uu = per_matrix(lambda gram, jit: cholesky(gram, jit), grams, jitter * kernel.amplitude())
    projected = per_matrix(solve_lower, chol_uu, kernel.cross(z, x))
    return _Latents(chol_uu, projected, kernel.diag(x))


def _stacked(latents: _Latents, mixing):
    """The LMC's whitened ``A₀ = L⁻¹K_uf`` ``[QM, NP]`` and residual variances ``D`` ``[NP]`` of the stacked
    observations (output-major; module docstring)."""
    q, m, _ = latents.projected.shape
    projected = jnp.einsum("pq,qmn->qmpn", mixing, latents.projected).reshape(q * m, -1)
    residual = (mixing**2 @ jnp.maximum(latents.prior_diag - jnp.sum(latents.projected**2, axis=1), 0.0)).reshape(-1)
    return projected, residual


def _about_the_mean(mean: MeanFunction, x, y):
    """The targets ``y`` ``[N, P]`` less each output's prior mean at the rows ``x`` (``y`` itself for the zero mean)."""
    values = mean.each(x)
    return y if values is None else y - values


@dataclass(frozen=True)
class MultiOutputRegression:
    """The collapsed PEP-α objective and predictive of ``P`` outputs (module docstring).

    Args:
        outputs: ``"independent"`` or ``"lmc"``.
        alpha: Power-EP power in [0, 1]; 0 selects the VFE (Titsias) bound.
        jitter: relative jitter on each ``K_g,ZZ``.
        priors: priors on the outputs' noises (``(("raw_noise_variance", prior),)``, a density of each of the
            ``P`` variances, or none); with them and the kernels' own priors the global term is ``log p(θ)``
            (a MAP fit, :mod:`pep_gp.core.log_prior`).
    """

    outputs: Outputs = "independent"
    alpha: float = 0.5
    jitter: float = DEFAULT_JITTER
    priors: tuple = ()  # ((leaf, prior), ...): pep_gp.core.priors

    def __post_init__(self):
        if self.outputs not in ("independent", "lmc"):
            raise ValueError(f"outputs must be 'independent' or 'lmc'; got {self.outputs!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {self.alpha}")

    def log_marginal_likelihood(self, params: MultiOutputParams, x, y, mask=None):
        """``log Z_PEP(α)`` of the targets ``y`` ``[N, P]`` at the rows ``x`` ``[N, D]`` with ``mask`` ``[N]``
        (None: every row; the others are left out of every sum, each row's ``P`` observations together): the
        sum of the outputs' collapsed bounds (independent) or the stacked LMC bound (Bui, Yan & Turner 2017,
        §3.6, eq. 128); with a kernel that carries priors, plus their log density over every latent GP's values,
        and with :attr:`priors` that of the noises (a MAP objective, :mod:`pep_gp.core.log_prior`; the same bits
        without)."""
        return with_log_prior(self._log_evidence(params, x, y, mask), params, self.priors)

    def step_shared(self, params: MultiOutputParams, n_total):
        return ()

    def global_energy(self, params: MultiOutputParams, shared, n_total):
        """The log density of the kernels' and the noises' priors (zero without): the trainer's global term."""
        return with_log_prior(jnp.zeros((), params.inducing.dtype), params, self.priors)

    def data_energy(self, params: MultiOutputParams, shared, x, y, mask):
        """``log Z_PEP(α)`` of the block's rows with ``mask``: the model trains with the whole training split
        as one block (its sites are integrated out), so this is the whole objective but the priors."""
        return self._log_evidence(params, x, y, mask)

    def _log_evidence(self, params: MultiOutputParams, x, y, mask=None):
        y = _about_the_mean(params.mean, x, y)
        latents = _latents(params.kernel, params.inducing, x, self.jitter)
        noise = params.noise_variance
        mask = jnp.ones(x.shape[0], bool) if mask is None else mask
        if self.outputs == "lmc":
            projected, residual = _stacked(latents, params.mixing)
            targets, noise = y.T.reshape(-1), jnp.repeat(noise, x.shape[0])
            stacked_mask = jnp.tile(mask, y.shape[1])  # output-major, as vec(y)
            return evidence(condition(projected, residual, noise, targets, self.alpha, stacked_mask), residual,
                            noise, targets, self.alpha, stacked_mask)

        def output(projected, prior_diag, noise_p, y_p):
            residual = jnp.maximum(prior_diag - jnp.sum(projected**2, axis=0), 0.0)
            return evidence(condition(projected, residual, noise_p, y_p, self.alpha, mask), residual, noise_p,
                            y_p, self.alpha, mask)

        group = self._group(latents, y.shape[1])
        return jnp.sum(per_matrix(output, latents.projected[group], latents.prior_diag[group], noise, y.T))

    def predict_f(self, params: MultiOutputParams, x_train, y_train, x_new, output_cov: bool = False):
        """The latent ``f`` at the rows ``x_new`` ``[B, D]`` given the training rows: mean ``[B, P]`` and variance
        ``[B, P]`` or, with ``output_cov``, the covariance across the outputs at each row ``[B, P, P]``
        (``k** − C*ᵀC* + (J⁻¹C*)ᵀ(J⁻¹C*)`` per row, Bui, Yan & Turner 2017, eq. 7 at test points), the means
        those of the targets about each output's prior mean plus ``m(x*)``."""
        mean, spread = self._zero_mean_f(params, x_train, _about_the_mean(params.mean, x_train, y_train), x_new,
                                         output_cov)
        return params.mean.plus_each(x_new, mean), spread

    def _zero_mean_f(self, params: MultiOutputParams, x_train, y_train, x_new, output_cov: bool):
        """:meth:`predict_f` of the zero-mean prior, given the training targets about the prior mean."""
        train = _latents(params.kernel, params.inducing, x_train, self.jitter)
        cross = per_matrix(solve_lower, train.chol_uu,
                           params.kernel.cross(jnp.broadcast_to(params.inducing, (train.chol_uu.shape[0],
                                                                                  *params.inducing.shape)), x_new))
        prior_diag = params.kernel.diag(x_new)  # [G, B]
        noise = params.noise_variance
        if self.outputs == "lmc":
            projected, residual = _stacked(train, params.mixing)
            targets, stacked_noise = y_train.T.reshape(-1), jnp.repeat(noise, x_train.shape[0])
            sites = condition(projected, residual, stacked_noise, targets, self.alpha,
                              jnp.ones(targets.shape[0], bool))
            new = jnp.einsum("pq,qmb->qmbp", params.mixing, cross).reshape(projected.shape[0], -1)  # [QM, B·P]
            mean, reduced = posterior(sites, new)
            new, reduced = (a.reshape(a.shape[0], x_new.shape[0], -1) for a in (new, reduced))  # [QM, B, P]
            mean = mean.reshape(x_new.shape[0], -1)
            prior = jnp.einsum("pq,qb,rq->bpr", params.mixing, prior_diag, params.mixing)
            cov = prior - jnp.einsum("kbp,kbr->bpr", new, new) + jnp.einsum("kbp,kbr->bpr", reduced, reduced)
            if output_cov:
                return mean, cov
            return mean, jnp.maximum(jnp.diagonal(cov, axis1=1, axis2=2), 0.0)
        mask = jnp.ones(x_train.shape[0], bool)

        def output(projected, train_diag, new, new_diag, noise_p, y_p):
            residual = jnp.maximum(train_diag - jnp.sum(projected**2, axis=0), 0.0)
            mean, reduced = posterior(condition(projected, residual, noise_p, y_p, self.alpha, mask), new)
            return mean, jnp.maximum(new_diag - jnp.sum(new**2, axis=0) + jnp.sum(reduced**2, axis=0), 0.0)

        group = self._group(train, y_train.shape[1])
        mean, var = per_matrix(output, train.projected[group], train.prior_diag[group], cross[group],
                               prior_diag[group], noise, y_train.T)
        if output_cov:
            return mean.T, jax.vmap(jnp.diag)(var.T)
        return mean.T, var.T

    def predict_y(self, params: MultiOutputParams, x_train, y_train, x_new, output_cov: bool = False):
        """As :meth:`predict_f`, with each output's noise variance added."""
        mean, spread = self.predict_f(params, x_train, y_train, x_new, output_cov)
        noise = params.noise_variance
        return mean, spread + (jnp.diag(noise) if output_cov else noise)

    @staticmethod
    def _group(latents: _Latents, n_outputs: int):
        """The latent GP of each output: its own (separate kernels) or the one shared."""
        return jnp.arange(n_outputs) if latents.chol_uu.shape[0] == n_outputs else jnp.zeros(n_outputs, int)


jax.tree_util.register_static(MultiOutputRegression)
