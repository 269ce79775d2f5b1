"""Multi-class GP classification with stochastic EP (SEP): C latent sparse GPs, tied factors per class.

Model (seed001 §1, spec §1): class ``c`` has its own inducing inputs ``Z_c`` ``[M, D]`` and hyper-parameters
(amplitude ``σ_c``, additive noise ``σ_{0,c}``, ARD lengthscales ``ℓ_c``); the prior on the inducing
values is ``N(f̄^c; 0, K_c)`` with ``K_c = σ_c exp(−½Σ_d Δ_d²/ℓ_{c,d}²) + σ_{0,c}I`` (the noise is on the
inducing diagonal too, spec §1.5) and ``κ_c = σ_c + σ_{0,c}``. The likelihood is approximated by
``Π_{k≠y_i} Φ(α_i^k)`` (eq. 6), whose EP factors are rank one per class (eq. 8,
:mod:`pepcore.models.multiclass_sites`).

SEP ties all factors touching class ``c`` into one Gaussian factor ``t_c(f̄^c) = exp(η̃_cᵀf̄ − ½f̄ᵀΛ̃_cf̄)``,
stored in ``f̄`` coordinates (so it stays fixed while hyper-parameters move, spec §5.7). With the
per-class factor count ``n_c = N + (C − 2)N_c`` (spec §2.8 / §5.9, the errata's per-class counts) and a
Power-EP power α (issue 5 item 5; α = 1 is the paper's method, as in seed000 for one GP)

    q_c ∝ p(f̄^c) t_c,      cav_c ∝ p(f̄^c) t_c^(1 − α/n_c),

and the energy / log-evidence estimate (spec §2.8.6, eq. 9 with tied factors) splits as DESIGN §2:

    G = Σ_c [g(q_c) − g(p_c) + (n_c/α)(g(cav_c) − g(q_c))],      L = (1/α) Σ_i Σ_{k≠y_i} log Z_{i,k}(cav),

with ``Z_{i,k} = ∫ φ_i^k(f̄)^α cav(f̄) df̄``. As α → 0, ``G + L`` tends to ``−KL(q‖p) + Σ E_q[log φ_i^k]``.

Two ways to train, chosen by the type of ``params.factor``:

* :class:`NaturalFactor` — the paper's method (§2.3): the factor moves only by EP updates
  (:meth:`MultiClassGP.local_site_stats` summed over chunks, then :meth:`MultiClassGP.site_update`),
  and the gradient of ``G + L`` w.r.t. the hyper-parameters and inducing inputs is eq. (10)/(12): the
  cavity and ``q`` are held fixed in ``f̄`` coordinates (``stop_gradient`` surrogate of spec §2.6, whose
  prior part is eqs. 63–64), and the factor receives no gradient. Values are the true ``G`` and ``L``.
* :class:`CholeskyFactor` — the direct mode: ``Λ̃_c = L_cL_cᵀ`` and ``η̃_c`` are ordinary parameters,
  and ``G + L`` is differentiated exactly, so Adam can act on everything (as seed004 does).

Numerics: with ``L_c = chol(K_c)`` and ``R = chol(I + s L_cᵀΛ̃_cL_c)`` a Gaussian ``p·t^s`` has
``V = SSᵀ``, ``S = L_cR⁻ᵀ``, ``m = S c``, ``c = R⁻¹sL_cᵀη̃`` and ``g − g(p) = ½‖c‖² − log|R|``; nothing is
inverted explicitly.

Reference: Villacampa-Calvo & Hernández-Lobato, "Scalable Multi-Class Gaussian Process Classification
using Expectation Propagation", ICML 2017 (arXiv 1706.07258); spec ``shared/spec/seed001.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from pepcore.initialisation import squared_median_lengthscale
from pepcore.kernels import BatchedARDSquaredExponential
from pepcore.linalg import DEFAULT_JITTER, cholesky, cholesky_and_inverse, per_matrix, solve_lower
from pepcore.models import multiclass_sites as sites
from pepcore.parameters import log_of_positive, positive_from_log


class NaturalFactor(NamedTuple):
    """Tied factor per class in natural parameters, updated by EP (the paper's SEP)."""

    shift: jnp.ndarray  # η̃_c, [C, M]
    precision: jnp.ndarray  # Λ̃_c, [C, M, M], symmetric positive semi-definite


class CholeskyFactor(NamedTuple):
    """Tied factor per class as ``(η̃_c, L_c)`` with ``Λ̃_c = L_cL_cᵀ``, trained by gradient (direct mode)."""

    shift: jnp.ndarray  # η̃_c, [C, M]
    chol: jnp.ndarray  # lower-triangular L_c, [C, M, M]


class MultiClassParams(NamedTuple):
    """The trainable state: per-class unconstrained hyper-parameters, inducing inputs and tied factor."""

    raw_amplitude: jnp.ndarray  # log σ_c, [C] (logarithms as in the reference code, pepcore.parameters)
    raw_noise: jnp.ndarray  # log σ_{0,c}, [C]
    raw_lengthscales: jnp.ndarray  # log ℓ_c² (the reference code's log l, l the squared lengthscale), [C, D]
    inducing: jnp.ndarray  # Z_c, [C, M, D]
    factor: Union[NaturalFactor, CholeskyFactor]


class SiteStats(NamedTuple):
    """Sums over rows of refined site natural parameters (they reduce over chunks like gradients)."""

    shift: jnp.ndarray  # Σ_i μ̃_i^c υ_i^c, [C, M]
    precision: jnp.ndarray  # Σ_i Δ_i^c υ_i^c υ_i^cᵀ, [C, M, M]
    count: jnp.ndarray  # n_{B,c}: factors touching class c in these rows, [C]
    rows: jnp.ndarray  # |B|: unmasked rows, []


class ClassGaussians(NamedTuple):
    """``p(f̄^c)·t_c^s`` per class in ``f̄`` coordinates."""

    mean: jnp.ndarray  # [C, M]
    sqrt_cov: jnp.ndarray  # S with V = SSᵀ, [C, M, M]
    log_normaliser: jnp.ndarray  # g(·) − g(prior), [C]


class PriorFactors(NamedTuple):
    """``L_c = chol(K_c)`` and its inverse (the inverse turns every later solve into a matrix product,
    :func:`pepcore.linalg.cholesky_and_inverse`)."""

    chol: jnp.ndarray  # [C, M, M]
    inverse: jnp.ndarray  # [C, M, M]


class StepShared(NamedTuple):
    """The O(C·M³) quantities every block of a step needs, computed once per step by the coordinator
    (:meth:`MultiClassGP.step_shared`) and sent to the workers with the params."""

    prior: PriorFactors
    cavity: ClassGaussians  # p(f̄^c)·t_c^(1 − α/n_c)


class RowProjections(NamedTuple):
    """Per class and row: ``υ_i^c = K_c⁻¹k_c(x_i)`` and the FITC variance ``s_i^c`` (eqs. 4–5)."""

    directions: jnp.ndarray  # [C, B, M]
    fitc_var: jnp.ndarray  # [C, B]


def hold_gradient(value, surrogate):
    """``value`` whose gradient is that of ``surrogate`` (``sg(value) + surrogate − sg(surrogate)``)."""
    return jax.lax.stop_gradient(value) + surrogate - jax.lax.stop_gradient(surrogate)


def project(gaussians: ClassGaussians, directions) -> sites.Projections:
    """``a = υᵀm`` and ``w = υᵀVυ`` for ``directions [C, B, M]``; outputs ``[B, C]``."""
    mean = jnp.einsum("cbm,cm->bc", directions, gaussians.mean)
    var = jnp.sum(jnp.einsum("cbm,cmn->bcn", directions, gaussians.sqrt_cov) ** 2, axis=-1)
    return sites.Projections(mean, var)


def label_side(values, y):
    """The label-class column of ``[B, C]`` values, as ``[B, 1]`` (broadcasts over the other class k)."""
    return jnp.take_along_axis(values, y[:, None], axis=1)


def _whitened_precision(factor, chol_k):
    """``L_Kᵀ Λ̃ L_K`` for one class."""
    if isinstance(factor, CholeskyFactor):
        a = chol_k.T @ jnp.tril(factor.chol)
        return a @ a.T
    a = chol_k.T @ factor.precision @ chol_k
    return 0.5 * (a + a.T)


def _gaussian(chol_k, factor, scale):
    """``p·t^scale`` for one class (see the module docstring for the whitened form)."""
    size = chol_k.shape[0]
    chol_b = cholesky(jnp.eye(size, dtype=chol_k.dtype) + scale * _whitened_precision(factor, chol_k))
    whitened = solve_lower(chol_b, scale * (chol_k.T @ factor.shift))
    sqrt_cov = solve_lower(chol_b, chol_k.T).T  # L R⁻ᵀ
    log_normaliser = 0.5 * jnp.sum(whitened**2) - jnp.sum(jnp.log(jnp.diagonal(chol_b)))
    return sqrt_cov @ whitened, sqrt_cov, log_normaliser


@dataclass(frozen=True)
class MultiClassGP:
    """Multi-class sparse GP classifier with tied (SEP) factors; the state is :class:`MultiClassParams`.

    Args:
        class_frequencies: ``N_c/N`` per class; gives the per-class factor counts
            ``n_c = N(1 + (C − 2)N_c/N)`` of spec §2.8 for any total ``N``.
        alpha: Power-EP power of the factors in (0, 1]; 1 is the paper's EP/SEP, α → 0 approaches the
            variational bound ``−KL(q‖p) + Σ E_q[log Φ]`` with the likelihood of eq. (6).
        jitter: relative jitter on ``K_c`` (``jitter·σ_c`` is added to ``K_c`` and ``κ_c``).
        quadrature: the rule of the predictive integral (eq. 68).

    Example:
        >>> x = jax.random.normal(jax.random.key(0), (30, 2)); y = jnp.argmax(x @ jnp.ones((2, 3)), 1)
        >>> model = MultiClassGP.from_labels(y, 3)
        >>> params = model.init(x, num_inducing=4)
        >>> model.predict(params, x).shape
        (30, 3)
    """

    class_frequencies: tuple[float, ...]
    alpha: float = 1.0
    jitter: float = DEFAULT_JITTER
    quadrature: sites.PredictiveQuadrature = sites.PredictiveQuadrature()

    def __post_init__(self):
        freq = np.asarray(self.class_frequencies, dtype=float)
        if freq.ndim != 1 or freq.size < 2:
            raise ValueError(f"class_frequencies needs one entry per class (at least 2); got {self.class_frequencies}")
        if np.any(freq < 0) or abs(freq.sum() - 1.0) > 1e-6:
            raise ValueError(f"class_frequencies must be non-negative and sum to 1; got {self.class_frequencies}")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1]; got {self.alpha}")

    @classmethod
    def from_labels(cls, y, num_classes: int, **kwargs) -> "MultiClassGP":
        """The model for integer labels ``y`` in ``0..num_classes − 1`` (every class must occur)."""
        counts = np.bincount(np.asarray(y, dtype=int), minlength=num_classes)
        if counts.size != num_classes or np.any(counts == 0):
            raise ValueError(f"labels must cover 0..{num_classes - 1}; class counts are {counts.tolist()}")
        return cls(tuple(float(c) for c in counts / counts.sum()), **kwargs)

    @property
    def num_classes(self) -> int:
        return len(self.class_frequencies)

    def factor_counts(self, n_total):
        """``n_c = N + (C − 2)N_c`` factors touch class ``c`` (spec §2.8), ``[C]``."""
        freq = jnp.asarray(self.class_frequencies)
        return n_total * (1.0 + (self.num_classes - 2) * freq)

    # ----------------------------------------------------------------------------------------------
    def init(
        self,
        x,
        num_inducing: int,
        *,
        inducing=None,
        lengthscales=None,
        amplitude: float = 1.0,
        noise: float = 1.0,
        factor: str = "natural",
        seed: int = 0,
    ) -> MultiClassParams:
        """Starting state (spec §4.0, the reference code's defaults).

        Inducing inputs are an independent random sample of ``num_inducing`` rows per class; amplitude
        and noise 1; ``ℓ² =`` the median distance of 1,000 random rows
        (:func:`pepcore.initialisation.squared_median_lengthscale`, the reference code's start).
        ``factor="natural"`` starts the tied factor at zero (q = prior, spec §2.0); ``"cholesky"`` (direct
        mode) at ``Λ̃_c = K_c⁻¹``, ``η̃ = 0``, away from the saddle at ``L = 0``.
        """
        x = np.asarray(x, dtype=float)
        n, dim = x.shape
        num_classes = self.num_classes
        if inducing is None:
            if not 0 < num_inducing <= n:
                raise ValueError(f"num_inducing must lie in 1..{n}; got {num_inducing}")
            rng = np.random.default_rng(seed)
            inducing = np.stack([x[rng.choice(n, num_inducing, replace=False)] for _ in range(num_classes)])
        inducing = np.broadcast_to(np.asarray(inducing, dtype=float), (num_classes, num_inducing, dim))
        if lengthscales is None:
            lengthscales = squared_median_lengthscale(x, seed)
        lengthscales = np.broadcast_to(np.asarray(lengthscales, dtype=float), (num_classes, dim))
        params = MultiClassParams(
            raw_amplitude=log_of_positive(jnp.full(num_classes, float(amplitude))),
            raw_noise=log_of_positive(jnp.full(num_classes, float(noise))),
            raw_lengthscales=log_of_positive(jnp.asarray(lengthscales) ** 2),
            inducing=jnp.asarray(inducing),
            factor=NaturalFactor(
                jnp.zeros((num_classes, num_inducing)), jnp.zeros((num_classes, num_inducing, num_inducing))
            ),
        )
        if factor == "natural":
            return params
        if factor != "cholesky":
            raise ValueError(f"factor must be 'natural' or 'cholesky'; got {factor!r}")
        inverse = self.prior_factors(params).inverse  # chol(K⁻¹) = chol(PᵀP)
        inv_chol = per_matrix(cholesky, jnp.swapaxes(inverse, -1, -2) @ inverse)
        return params._replace(factor=CholeskyFactor(params.factor.shift, inv_chol))

    # ----------------------------------------------------------------------------------------------
    def _kernels(self, params: MultiClassParams):
        amplitude = positive_from_log(params.raw_amplitude)
        noise = positive_from_log(params.raw_noise) + self.jitter * amplitude
        return amplitude, noise, positive_from_log(0.5 * params.raw_lengthscales)

    def _cross_covariances(self, params: MultiClassParams, x=None):
        """``k_c(Z_c, x)`` for every class, ``[C, M, B]`` (``K_c`` without noise when ``x`` is None);
        batched over classes, no factorisation involved."""
        amplitude, _, lengthscales = self._kernels(params)
        kernels = BatchedARDSquaredExponential(lengthscales, amplitude)
        return kernels.gram(params.inducing) if x is None else kernels.cross(params.inducing, x)

    def prior_factors(self, params: MultiClassParams) -> PriorFactors:
        """``chol(K_c)`` and its inverse, with the noise (and jitter) on the diagonal of ``K_c``."""
        noise = self._kernels(params)[1]
        eye = jnp.eye(params.inducing.shape[1], dtype=noise.dtype)
        return PriorFactors(*cholesky_and_inverse(self._cross_covariances(params) + noise[:, None, None] * eye))

    def gaussians(self, params: MultiClassParams, chol_k, scale) -> ClassGaussians:
        """``p(f̄^c)·t_c^{scale_c}`` per class (``scale`` ``[C]``: 1 for ``q``, ``1 − α/n_c`` for the cavity)."""
        mean, sqrt_cov, log_norm = per_matrix(_gaussian, chol_k, params.factor, jnp.broadcast_to(scale, (self.num_classes,)))
        return ClassGaussians(mean, sqrt_cov, log_norm)

    def row_projections(self, params: MultiClassParams, prior: PriorFactors, x) -> RowProjections:
        """``υ_i^c = K_c⁻¹k_c(x_i)`` and ``s_i^c = κ_c − k_cᵀK_c⁻¹k_c`` (eqs. 4–5) for the rows ``x``."""
        amplitude, noise, _ = self._kernels(params)
        proj = prior.inverse @ self._cross_covariances(params, x)  # L⁻¹k, [C, M, B]
        fitc = jnp.maximum((amplitude + noise)[:, None] - jnp.sum(proj**2, axis=1), noise[:, None])  # s ≥ σ₀ exactly
        return RowProjections(jnp.einsum("cmb,cmn->cbn", proj, prior.inverse), fitc)  # υ = L⁻ᵀL⁻¹k

    def prior_surrogate(self, prior: PriorFactors, q: ClassGaussians):
        """``Σ_c −½log|K_c| − ½tr(K_c⁻¹(V_c + m_cm_cᵀ))`` with ``q`` held fixed: its gradient is the
        prior term ``(η − η_prior)ᵀ∂θ_prior/∂ξ`` of eq. (10) (eqs. 63–64)."""
        q = jax.lax.stop_gradient(q)
        whitened_cov = prior.inverse @ q.sqrt_cov
        whitened_mean = jnp.einsum("cmn,cn->cm", prior.inverse, q.mean)
        log_det = jnp.sum(jnp.log(jnp.diagonal(prior.chol, axis1=-2, axis2=-1)))
        return -log_det - 0.5 * (jnp.sum(whitened_cov**2) + jnp.sum(whitened_mean**2))

    def _holds_cavity(self, params: MultiClassParams) -> bool:
        return isinstance(params.factor, NaturalFactor)

    def _cavity_scale(self, n_total):
        """``1 − α/n_c``: the cavity removes the power α of one of the ``n_c`` tied factors."""
        return 1.0 - self.alpha / self.factor_counts(n_total)

    def step_shared(self, params: MultiClassParams, n_total) -> StepShared:
        """``chol(K_c)`` and the cavities ``p·t^(1 − α/n_c)``: what every block of a step needs, O(C·M³).

        The energy is ``G(params, S) + Σ_blocks L(params, S; block)`` with ``S = step_shared(params)``;
        the coordinator computes ``S`` once per step and back-propagates into it once (DESIGN §2 as
        extended in :mod:`pipeline.models`). With a :class:`NaturalFactor` the cavity is held fixed
        (eq. 10), so only the prior factors carry gradient.
        """
        return self.refresh_shared(params, StepShared(self.prior_factors(params), None), n_total)

    def refresh_shared(self, params: MultiClassParams, shared: StepShared, n_total) -> StepShared:
        """``shared`` with the cavities of ``params``' factor, the prior factors kept: after an EP update
        of a :class:`NaturalFactor` (the hyper-parameters did not move) only the cavities change, and
        they carry no gradient, so a pullback of :meth:`step_shared` taken before the update still holds."""
        cavity = self.gaussians(params, shared.prior.chol, self._cavity_scale(n_total))
        return shared._replace(cavity=jax.lax.stop_gradient(cavity) if self._holds_cavity(params) else cavity)

    # ----------------------------------------------------------------------------------------------
    def global_energy_shared(self, params: MultiClassParams, shared: StepShared, n_total):
        """``G = Σ_c [g(q_c) − g(p_c) + (n_c/α)(g(cav_c) − g(q_c))]`` (spec §2.8.6); O(C·M³), independent of N.

        With a :class:`NaturalFactor` the gradient is the prior term of eq. (10) only (see the module
        docstring); with a :class:`CholeskyFactor` it is the exact gradient of ``G``.
        """
        q = self.gaussians(params, shared.prior.chol, 1.0)
        weight = self.factor_counts(n_total) / self.alpha
        value = jnp.sum(q.log_normaliser + weight * (shared.cavity.log_normaliser - q.log_normaliser))
        if self._holds_cavity(params):
            return hold_gradient(value, self.prior_surrogate(shared.prior, q))
        return value

    def global_energy(self, params: MultiClassParams, n_total):
        """``G`` of :meth:`global_energy_shared` with its own :meth:`step_shared` (DESIGN §2 contract)."""
        return self.global_energy_shared(params, self.step_shared(params, n_total), n_total)

    def _pair_cavities(self, params: MultiClassParams, shared: StepShared, x, y):
        """Cavity projections of every pair ``(i, k)``: label side ``[B, 1]``, other side ``[B, C]``."""
        rows = self.row_projections(params, shared.prior, x)
        cavity = jax.lax.stop_gradient(shared.cavity) if self._holds_cavity(params) else shared.cavity
        proj = project(cavity, rows.directions)
        fitc = rows.fitc_var.T
        label = sites.Projections(label_side(proj.mean, y), label_side(proj.var, y))
        return rows, label, proj, label_side(fitc, y), fitc

    def local_energy_shared(self, params: MultiClassParams, shared: StepShared, x, y, mask):
        """``L = (1/α) Σ_i mask_i Σ_{k≠y_i} log Z_{i,k}`` over the rows of one chunk (eq. 34).

        ``x`` ``[B, D]``, integer ``y`` ``[B]``, boolean ``mask`` ``[B]``; masked (padding) rows contribute
        exactly zero to the value and the gradient. ``shared`` (from :meth:`step_shared`) carries the
        cavities and with them ``n_c``.
        """
        _, label, other, label_fitc, other_fitc = self._pair_cavities(params, shared, x, y)
        terms = sites.log_partition(label, other, label_fitc, other_fitc, self.alpha) / self.alpha
        return jnp.sum(jnp.where(sites.factor_mask(y, mask, self.num_classes), terms, 0.0))

    def local_energy(self, params: MultiClassParams, x, y, mask, n_total):
        """``L`` of :meth:`local_energy_shared` with its own :meth:`step_shared` (DESIGN §2 contract)."""
        return self.local_energy_shared(params, self.step_shared(params, n_total), x, y, mask)

    def energy(self, params: MultiClassParams, x, y):
        """The whole ``log Z_q`` estimate ``G + L`` on in-memory data (all rows)."""
        n = x.shape[0]
        return self.global_energy(params, n) + self.local_energy(params, x, y, jnp.ones(n, bool), n)

    # ----------------------------------------------------------------------------------------------
    def local_site_stats(self, params: MultiClassParams, shared: StepShared, x, y, mask) -> SiteStats:
        """Refine every factor of the chunk against the SEP cavity and sum the new sites per class.

        The sums ``Σ_i Δ_i^c υ_i^cυ_i^cᵀ``, ``Σ_i μ̃_i^c υ_i^c`` (spec §2.8.5, eqs. 26–27) and the counts
        ``n_{B,c}`` add over chunks exactly like gradients; masked rows contribute zero. ``shared`` is
        :meth:`step_shared` of ``params``.
        """
        rows, label, other, label_fitc, other_fitc = self._pair_cavities(params, shared, x, y)
        refined = sites.refine(label, other, label_fitc, other_fitc, self.alpha)
        shift, precision = sites.accumulate(jnp.swapaxes(rows.directions, 0, 1), refined, y, mask)
        count = sites.factor_counts(y, mask, self.num_classes)
        return SiteStats(shift, precision, count, jnp.sum(mask.astype(shift.dtype)))

    def site_update(self, params: MultiClassParams, stats: SiteStats, scale=1.0, damping=1.0):
        """Damped SEP update of the tied factors from summed site statistics (spec §2.8.5):

            Λ̃_c ← (1 − ρ n_{B,c}/n_c) Λ̃_c + ρ Σ_{B} Δ_i^c υ_i^cυ_i^cᵀ,   and likewise for η̃_c,

        with ``n_c`` for ``N = scale·|B|`` rows (``scale = N/|B|``; 1 for a full batch, where
        ``n_{B,c} = n_c``). ``ρ = 1`` is undamped (the stochastic code). A result that is not finite is
        rejected: ``params`` come back unchanged.
        """
        if not self._holds_cavity(params):
            raise TypeError("site_update needs a NaturalFactor; a CholeskyFactor is trained by gradient")
        keep = 1.0 - damping * stats.count / self.factor_counts(scale * stats.rows)
        factor = params.factor
        new = NaturalFactor(
            keep[:, None] * factor.shift + damping * stats.shift,
            keep[:, None, None] * factor.precision + damping * stats.precision,
        )
        ok = jnp.all(jnp.isfinite(new.shift)) & jnp.all(jnp.isfinite(new.precision))
        return params._replace(factor=jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, factor))

    # ----------------------------------------------------------------------------------------------
    def predict_latent(self, params: MultiClassParams, x):
        """``m*_c``, ``v*_c`` of eqs. (66)–(67) (noise included in ``κ``), ``[B, C]`` each."""
        prior = self.prior_factors(params)
        rows = self.row_projections(params, prior, x)
        proj = project(self.gaussians(params, prior.chol, 1.0), rows.directions)
        return proj.mean, proj.var + rows.fitc_var.T

    def predict(self, params: MultiClassParams, x):
        """Predictive log-probabilities ``log p(y* = c | x*)``, ``[B, C]`` (eq. 11/68)."""
        mean, var = self.predict_latent(params, x)
        return sites.predictive_log_probs(mean, var, self.quadrature)


jax.tree_util.register_static(MultiClassGP)
