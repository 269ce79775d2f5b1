"""Binary GP classification with tied sites moved by stochastic EP or Quantile Propagation (SEP/SQP).

One sparse GP (a bank of one, :mod:`pep_gp.core.bank`) with a probit likelihood whose N factors are tied into
one Gaussian ``t(u) = exp(ηᵀu − ½uᵀΛu)`` in natural parameters, the multi-class SEP of Villacampa-Calvo & Hernández-Lobato 2017, §2.3 with
G = 1 and the binary factor ``Φ(s f)``, ``s = 2y − 1``:

    q ∝ p(u) t,      cav ∝ p(u) t^(1 − 1/N).

A row with direction ``υ = K⁻¹k(x)`` and FITC variance ``v_f`` sees ``u`` only through ``τ = υᵀu``, whose
factor is ``∫ N(f; τ, v_f) Φ(s f) df = Φ(s τ/c)``, ``c = √(1 + v_f)``. Its refined site is the
projection of the tilted ``q̃(τ) ∝ N(τ; a, w) Φ(s τ/c)`` (``a = υᵀm_cav``, ``w = υᵀV_cavυ``) divided by
the cavity (Zhang et al. 2020 eq. 6). The projection is a setting (:mod:`pep_gp.core.projections`): ``"kl"`` is EP's
moment matching, ``"wasserstein"`` Quantile Propagation's same mean and variance ``σ*² ≤ Var q̃``. By
QP's locality (Zhang et al. 2020 Theorems 3–4) the W₂ projection of the tilted distribution over ``u`` changes only
the marginal of ``τ``, so both projections give a rank-one site in ``u``:

    site(u) = exp(ν τ − ½ ρ τ²),   ρ = 1/σ*² − 1/w,   ν = μ*/σ*² − a/w.

Both projections are affine-equivariant, so ``q̃(τ)`` is projected as the standard probit tilted of
``τ/c`` and scaled back. The tied factor moves by the damped SEP update (:func:`pep_gp.core.sep.damped_site_update`);
hyper-parameters and inducing inputs ascend EP's energy with cavity and ``q`` held fixed in ``u``
coordinates (Villacampa-Calvo & Hernández-Lobato 2017 eq. 10, as :class:`~pep_gp.core.models.multiclass.MultiClassGP`) — also for QP, which
has no energy of its own (Zhang et al. 2020, Algorithm 1: the paper optimises EP's evidence at QP's sites).

A mean function ``m`` (``params.mean``) makes the prior ``f ~ GP(m, k)``: the GP above is ``g = f − m``, each row's
factor sees the cavity's ``a + m(x)``, the projected site on ``τ`` is moved back to ``g`` (``ν − ρm``), and the
predictive mean is shifted by ``m(x*)`` (Rasmussen & Williams 2006, §2.7); EP's site updates do not change with a
prior on the hyper-parameters, whose ``log p(θ)`` the global term adds once per step (a MAP fit,
:mod:`pep_gp.core.log_prior`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank, sep
from ..bank import NaturalFactor
from ..initialisation import initial_kernel_and_inducing
from ..likelihoods import Probit
from ..kernels import Kernel, SquaredExponential
from ..linalg import DEFAULT_JITTER
from ..log_prior import with_log_prior
from ..means import MeanFunction, Zero
from ..parameters import on_device
from ..projections import projection as named_projection


class TiedEPParams(NamedTuple):
    """The state: the kernel (hyper-parameters ``[1, ·]``), inducing inputs, the tied factor (``[1, M]``,
    ``[1, M, M]``) and the prior's mean function (:class:`~pep_gp.core.means.Zero`, no leaves, by default)."""

    kernel: Kernel
    inducing: jnp.ndarray  # Z, [M, D]
    factor: NaturalFactor
    mean: MeanFunction = Zero()  # m of the prior f ~ GP(m, k)


class SiteStats(NamedTuple):
    """Sums over rows of refined sites in ``u`` (they reduce over blocks like gradients)."""

    shift: jnp.ndarray  # Σ ν υ, [1, M]
    precision: jnp.ndarray  # Σ ρ υυᵀ, [1, M, M]
    count: jnp.ndarray  # unmasked rows, [1]


class StepShared(NamedTuple):
    """``chol(K_uu)`` and the SEP cavity ``p·t^(1 − 1/N)`` (held fixed: it carries no gradient)."""

    prior: bank.PriorFactors
    cavity: bank.Gaussians


@dataclass(frozen=True)
class TiedEPClassifier:
    """Binary probit sparse GP with tied EP (``projection="kl"``) or QP (``"wasserstein"``) sites.

    Example:
        >>> x = jax.random.normal(jax.random.key(0), (40, 2)); y = (x[:, 0] > 0).astype(float)
        >>> model = TiedEPClassifier(projection="wasserstein")
        >>> params = model.init(x, num_inducing=5)
        >>> shared = model.step_shared(params, 40)
        >>> stats = model.site_stats(params, shared, x, y, jnp.ones(40, bool))
        >>> params, shared, ok = model.site_update(params, shared, stats, 40, 1.0)
        >>> bool(ok)
        True
    """

    projection: str = "kl"
    jitter: float = DEFAULT_JITTER

    def __post_init__(self):
        named_projection(self.projection)  # a clear error for an unknown name

    def sparse_gp(self, params: TiedEPParams) -> bank.Bank:
        """The constrained GP as a bank of one, with the jitter ``jitter·σ_f`` on ``K_uu``."""
        return bank.one_gp_bank(params, self.jitter)

    def init(self, x, num_inducing: int, *, inducing=None, kernel: Kernel | None = None,
             seed: int = 0, mean: MeanFunction | None = None) -> TiedEPParams:
        """``kernel`` (default a squared exponential of variance 1; lengthscales left unset the median
        distance, one per input), k-means inducing inputs unless ``inducing``, the tied factor 1
        (``q`` = prior) and ``mean`` at its starting values (default zero)."""
        lengthscales, _, z = initial_kernel_and_inducing(x, num_inducing, inducing=inducing, seed=seed)
        size = z.shape[0]
        kernel = SquaredExponential() if kernel is None else kernel
        return TiedEPParams(kernel=kernel.bank(1, z.shape[1], lengthscales),
                            inducing=on_device(z),
                            factor=NaturalFactor(on_device(np.zeros((1, size))), on_device(np.zeros((1, size, size)))),
                            mean=Zero() if mean is None else mean.build(z.shape[1]))

    # ----------------------------------------------------------------------------------------------
    def step_shared(self, params: TiedEPParams, n_total) -> StepShared:
        prior = bank.prior_factors(self.sparse_gp(params))
        return self._refresh_shared(params, prior, n_total)

    def _refresh_shared(self, params: TiedEPParams, prior: bank.PriorFactors, n_total) -> StepShared:
        cavity = bank.gaussians(prior, params.factor, 1.0 - 1.0 / n_total)
        return StepShared(prior, jax.lax.stop_gradient(cavity))

    def global_energy(self, params: TiedEPParams, shared: StepShared, n_total):
        """``G = φ(q) − φ(p) + N(φ(cav) − φ(q))`` (Bui, Yan & Turner 2017 eq. 110 with tied factors, α = 1), with the
        gradient of the prior term of Villacampa-Calvo & Hernández-Lobato 2017 eq. (10) only; plus ``log p(θ)`` with
        priors."""
        return with_log_prior(sep.held_global_energy(shared.prior, params.factor, shared.cavity, n_total, 1.0), params)

    def data_energy(self, params: TiedEPParams, shared: StepShared, x, y, mask):
        """``L = Σ_n mask_n log Φ(s_n m_n/√(1 + v_n))`` under the cavity, ``m_n`` its mean plus ``m(x_n)`` (masked
        rows add exactly 0)."""
        marginals = bank.latent_marginals(self.sparse_gp(params), shared.prior, shared.cavity, x)
        terms = Probit().log_tilted({}, y, params.mean.plus(x, marginals.mean[:, 0]), marginals.var[:, 0], 1.0)
        return jnp.sum(jnp.where(mask, terms, 0.0))

    # ----------------------------------------------------------------------------------------------
    def refined_sites(self, params: TiedEPParams, shared: StepShared, x, y):
        """Per row: the direction ``υ`` ``[B, M]`` and the refined site ``(ρ, ν)`` on ``τ = υᵀu`` (module
        docstring), each ``[B]``. ``ρ = (w − σ*²)/(wσ*²)`` and ``ν = (μ* − a)/σ*² + aρ`` avoid the
        difference of large ``1/σ*²`` and ``1/w`` where ``w`` is small; ``ρ ≥ 0`` (Zhang et al. 2020 Cor. 2.1).

        A row far from every inducing input (``υ = K⁻¹k(x) → 0``: ``k(x)`` underflows 30 lengthscales out)
        sees ``u`` through a cavity variance ``w`` too small for ``wσ*²`` to be represented
        (``w < √tiny``, about 1.5e-154 in float64), which would give its site 0/0 and, summed with the
        others, reject the whole minibatch's update. Such a row's site is zero: it carries no information
        about ``u`` (its contribution ``ρυυᵀ`` to the tied factor is of order ``w``), so the other rows'
        sites update as without it.

        With a mean function the factor sees ``τ + m(x)``: the projection is of the cavity ``N(a + m, w)`` and the
        site in ``τ`` is ``exp((ν − ρm)τ − ½ρτ²)``, ``ν − ρm = (μ* − a − m)/σ*² + aρ``."""
        rows = bank.row_projections(self.sparse_gp(params), shared.prior, x)
        cavity = bank.project(shared.cavity, rows.directions)
        a, w, scale = cavity.mean[:, 0], cavity.var[:, 0], jnp.sqrt(1.0 + rows.fitc_var[0])
        unseen = w < jnp.sqrt(jnp.finfo(w.dtype).tiny)
        w = jnp.where(unseen, 1.0, w)  # any cavity: the site is replaced by zero below
        latent = params.mean.plus(x, a)  # the factor's cavity mean: a + m(x)
        _, mean, var = named_projection(self.projection)(Probit(), y, latent / scale, w / scale**2)
        mean, var = scale * mean, scale**2 * var
        precision = jnp.maximum(w - var, 0.0) / (w * var)
        shift = (mean - latent) / var + a * precision
        return rows.directions[0], jnp.where(unseen, 0.0, precision), jnp.where(unseen, 0.0, shift)

    def site_stats(self, params: TiedEPParams, shared: StepShared, x, y, mask) -> SiteStats:
        """The block's refined sites summed in ``u``: ``Σ ν υ``, ``Σ ρ υυᵀ`` and the row count."""
        directions, precision, shift = self.refined_sites(params, shared, x, y)
        precision, shift = jnp.where(mask, precision, 0.0), jnp.where(mask, shift, 0.0)
        return SiteStats((shift @ directions)[None], jnp.einsum("b,bm,bn->mn", precision, directions, directions)[None],
                         jnp.sum(mask.astype(shift.dtype))[None])

    def site_update(self, params: TiedEPParams, shared: StepShared, stats: SiteStats, n_total, damping=1.0):
        """``(params, shared, accepted)``: the damped SEP update towards the summed sites; a non-finite
        result is rejected."""
        factor, ok = sep.damped_site_update(params.factor, stats.shift, stats.precision, stats.count,
                                             jnp.asarray(n_total, stats.count.dtype)[None], damping)
        params = params._replace(factor=factor)
        return params, self._refresh_shared(params, shared.prior, n_total), ok

    # ----------------------------------------------------------------------------------------------
    def predict_f(self, params: TiedEPParams, x, full_cov: bool = False):
        """Mean ``[B]`` and variance ``[B]`` (``full_cov``: covariance ``[B, B]``) of the latent function at
        ``x`` under ``q`` (:func:`pep_gp.core.bank.latent_moments`, the mean plus the prior's ``m(x)``)."""
        gp = self.sparse_gp(params)
        prior = bank.prior_factors(gp)
        mean, spread = bank.latent_moments(gp, prior, bank.gaussians(prior, params.factor, 1.0), x, full_cov)
        return params.mean.plus(x, mean[:, 0]), spread[0] if full_cov else spread[:, 0]

    def predict_y(self, params: TiedEPParams, x):
        """``p(y = 1 | x) = Φ(m/√(1 + v))``."""
        return Probit().predict({}, *self.predict_f(params, x))


jax.tree_util.register_static(TiedEPClassifier)
