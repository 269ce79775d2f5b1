"""Tied-factor Power-EP sparse GP with a general likelihood: the energy ``F = G + Σ_chunks L``.

Every likelihood term is approximated by one shared (tied) Gaussian factor in the inducing outputs
``u`` — stochastic / approximate EP (Li et al. 2015; Bui et al. 2016) with power α (Bui, Yan & Turner 2017, §3.4). With
``t_tot(u) = exp(ηᵀu − ½uᵀΛu)`` the product of the N tied factors (``η``, ``Λ = LLᵀ`` are the stored
state), the posterior and the cavity are

    q(u)   ∝ p(u) t_tot(u),            cav(u) ∝ p(u) t_tot(u)^(1 − α/N),

and the Power-EP energy (Bui, Yan & Turner 2017 eq. 110 with tied sites) splits into a global part and data parts

    G = φ(q) − φ(p) + (N/α)(φ(cav) − φ(q)),      L = Σ_n (1/α) log Z̃_n,
    Z̃_n = ∫ N(f_n; μ_n, v_n) p(y_n|f_n)^α df_n,  μ_n = k_nᵀK_uu⁻¹m_cav,
    v_n = k_nn − k_nᵀK_uu⁻¹k_n + k_nᵀK_uu⁻¹V_cav K_uu⁻¹k_n.

As α → 0 the cavity becomes q and ``F`` the uncollapsed VFE bound ``−KL(q‖p) + Σ E_q[log p]``
(Bui, Yan & Turner 2017 eqs. 144–146); ``alpha=0`` is that branch exactly. α = 1 is the (tied) EP energy.

A Gaussian likelihood's sites are exact and known row by row, so with its site updates (α > 0) each row's
cavity removes the row's own site instead of ``t_tot^(α/N)`` (:meth:`PowerEPSparseGP._own_site_terms`): the
energy is then Power EP's own, at the sites' fixed point the collapsed PEP-α bound, and its gradient with the
factor held that bound's gradient. The tied cavity had scored each row with part of its own information kept,
and its gradient at the fixed point was not its energy's, which stopped L-BFGS early: on concrete's benchmark
split (824 rows, ARD, M = 200, docs/results/everyday.md) the fit's test NLL was 3.096 per row, the collapsed
regressor's 2.992; with the rows' own sites 3.002.

The GP, its tied factor (a Cholesky factor moved by the optimiser), ``q`` and the cavity are a bank of
one sparse GP (:mod:`pep_gp.core.bank`, G = 1); this module adds the likelihood's per-row term. A mean
function ``m`` (``params.mean``) makes the prior ``f ~ GP(m, k)``: the GP above is ``g = f − m``, each row's
likelihood sees ``μ_n + m(x_n)`` (a Gaussian's exact sites the targets ``y_n − m(x_n)``), and the predictive
mean is shifted by ``m(x*)`` (Rasmussen & Williams 2006, §2.7).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank, sep
from ..initialisation import initial_kernel_and_inducing
from ..kernels import Kernel, SquaredExponential
from ..likelihoods import Gaussian, scaled_log_tilted
from ..log_prior import with_log_prior
from ..linalg import DEFAULT_JITTER, cholesky
from ..means import MeanFunction, Zero
from ..parameters import on_device
from .collapsed_regression import CollapsedRegression, RegressionParams


class SparseGPParams(NamedTuple):
    """The trainable state: the kernel (its hyper-parameters stored as logarithms, :mod:`pep_gp.core.kernels`),
    inducing inputs, the tied factor and the prior's mean function (:mod:`pep_gp.core.means`;
    :class:`~pep_gp.core.means.Zero`, no leaves, by default).

    Logarithms, as every model's kernel: an Adam step is then a relative change. With softplus it is an
    absolute one, and the amplitude of a nearly separable problem (σ_f² ≈ 50 on breast cancer, from 1)
    took thousands of steps; the stopping rule ended fits on the way (docs/results/multiclass.md).
    """

    kernel: Kernel  # one GP's kernel (hyper-parameters [1, ·])
    inducing: jnp.ndarray  # Z, [M, D]
    likelihood: dict  # the likelihood's unconstrained parameters
    factor_shift: jnp.ndarray  # η = N θ₁, [M]
    factor_chol: jnp.ndarray  # lower-triangular L with Λ = N θ₂ = LLᵀ, [M, M]
    mean: MeanFunction = Zero()  # m of the prior f ~ GP(m, k)


class GaussianSites(NamedTuple):
    """Sums over rows of the exact Power-EP sites of a Gaussian likelihood in ``u`` (they reduce over blocks
    like gradients): ``Σ y_n υ_n/g_n``, ``Σ υ_nυ_nᵀ/g_n`` and the row count, ``g_n = σ² + αd_n``."""

    shift: jnp.ndarray  # [1, M]
    precision: jnp.ndarray  # [1, M, M]
    count: jnp.ndarray  # [1]


class StepShared(NamedTuple):
    """What every block of a step needs, O(M³) once per step: ``chol(K_uu)`` and the cavity."""

    prior: bank.PriorFactors
    cavity: bank.Gaussians  # p·t_tot^(1 − α/N) (q itself at α = 0)


def tied_factor(params: SparseGPParams) -> bank.CholeskyFactor:
    """The tied factor as a bank's (G = 1)."""
    return bank.CholeskyFactor(params.factor_shift[None], params.factor_chol[None])


SETTLE_SWEEPS = 20  # site sweeps of :meth:`PowerEPSparseGP.settled` (a 1-D sine's sites settle in five)


def tilted_sites(likelihood, params, y, mean, along_var, fitc_var, alpha: float):
    """Each row's Power-EP site along its direction ``g = υᵀu`` from the likelihood's tilted moments, ``[B]``
    each: the precision ``a`` and shift ``b`` of ``t(g) = exp(bg − ½ag²)``.

    The cavity of ``g`` is ``N(μ, c)`` (``c = υᵀV_cav υ``, ``along_var``) and that of ``f = g + ε``,
    ``ε ~ N(0, d)`` (the FITC variance), ``N(μ, v)``, ``v = c + d``. The tilted moments ``(m̃, ṽ)`` of
    ``∝ N(f; μ, v) p(y|f)^α`` give ``∂log Z̃/∂μ = (m̃ − μ)/v`` and ``∂²log Z̃/∂μ² = (ṽ − v)/v²``
    (Rasmussen & Williams 2006 eq. 3.58; Seeger 2005), and the site whose α-th power moves ``N(μ, c)`` to
    the tilted moments of ``g`` is (Minka 2004, Power EP; Bui, Yan & Turner 2017 eq. 118)

        a = −∂²/(α(1 + c∂²)),    b = (∂ − μ∂²)/(α(1 + c∂²)),

    which for a Gaussian likelihood is its exact site ``N(y; g, σ² + αd)`` (:meth:`PowerEPSparseGP.site_stats`).
    A likelihood that is not log-concave in ``f`` (the Student-t's, for an outlier between the cavity
    and ``y``) can widen the tilted distribution, ``ṽ > v``: a negative site precision (Jylänki, Vanhatalo &
    Vehtari 2011, §3.3), and a sum of sites that need not be positive definite, which the tied factor
    (kept as ``LLᵀ``) cannot hold. Such a site keeps the mean's information only: ``∂²`` is clipped at 0,
    the site ``exp(∂g/α)`` that moves the cavity's mean to the tilted one, so ``a ≥ 0``, and
    ``1 + c∂² ≥ d/v > 0`` (``ṽ ≥ 0`` bounds ``∂² ≥ −1/v``).
    """
    var = along_var + fitc_var
    _, tilted_mean, tilted_var = likelihood.tilted_moments(y, mean, var, alpha, params)
    slope = (tilted_mean - mean) / var
    curvature = jnp.minimum((tilted_var - var) / var**2, 0.0)
    denominator = alpha * (1.0 + along_var * curvature)
    return -curvature / denominator, (slope - mean * curvature) / denominator


@dataclass(frozen=True)
class PowerEPSparseGP:
    """Sparse GP with tied Power-EP factors (static configuration; the state is :class:`SparseGPParams`).

    Args:
        likelihood: a likelihood of :mod:`pep_gp.core.likelihoods`.
        alpha: the power, in [0, 1]; 0 is the variational (VFE) limit, 1 is EP.
        jitter: relative jitter on ``K_uu`` (see :mod:`pep_gp.core.linalg`).
        site_updates: the tied factor moves by :meth:`site_update` (a Gaussian likelihood's exact sites) and
            the energy's gradient is the one at an EP fixed point (the cavity held, the prior term of
            Villacampa-Calvo & Hernández-Lobato 2017, eq. 10); False: everything moves by the gradient.
        priors: priors on the likelihood's parameters, ``(leaf name, prior)`` pairs; with them and the
            kernel's own priors the global term adds ``log p(θ)`` (a MAP fit, :mod:`pep_gp.core.log_prior`).

    Example:
        >>> from pep_gp.core.likelihoods import Probit
        >>> model = PowerEPSparseGP(Probit(), alpha=0.5)
        >>> x = jax.random.normal(jax.random.key(0), (20, 2)); y = (x[:, 0] > 0).astype(float)
        >>> params = model.init(x, num_inducing=5)
        >>> float(model.energy(params, x, y)) < 0
        True
    """

    likelihood: Any
    alpha: float = 0.5
    jitter: float = DEFAULT_JITTER
    site_updates: bool = False  # the factor moves by :meth:`site_update` (Gaussian likelihood), not by gradient
    priors: tuple = ()  # ((likelihood leaf, prior), ...): pep_gp.core.priors

    def __post_init__(self):
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {self.alpha}")

    def sparse_gp(self, params: SparseGPParams) -> bank.Bank:
        """The constrained GP as a bank of one: kernel, inducing inputs and the jitter ``jitter·σ_f``."""
        return bank.one_gp_bank(params, self.jitter)

    # ----------------------------------------------------------------------------------------------
    def init(
        self,
        x,
        num_inducing: int,
        *,
        inducing=None,
        kernel: Kernel | None = None,
        likelihood_params: dict | None = None,
        seed: int = 0,
        ard: bool = True,
        mean: MeanFunction | None = None,
    ) -> SparseGPParams:
        """Starting state: ``kernel`` (default a squared exponential of variance 1), its lengthscales left
        unset the median distance, k-means inducing inputs unless ``inducing``, and a tied factor with
        ``Λ = K_uu⁻¹`` and ``η = 0`` (q(u) = N(0, K_uu/2): a non-zero start avoids the saddle at Λ = 0).
        ``ard=False``: an unset lengthscale is one shared by the inputs. ``mean``: the prior's mean function
        at its starting values (default :class:`~pep_gp.core.means.Zero`)."""
        lengthscales, _, z = initial_kernel_and_inducing(x, num_inducing, inducing=inducing, seed=seed)
        if not ard:
            lengthscales = np.exp(np.mean(np.log(lengthscales), keepdims=True))
        lik = self.likelihood.init_params() if likelihood_params is None else likelihood_params
        kernel = SquaredExponential() if kernel is None else kernel
        params = SparseGPParams(
            kernel=kernel.bank(1, z.shape[1], lengthscales),
            inducing=on_device(z),
            likelihood=lik,
            factor_shift=on_device(np.zeros(z.shape[0])),
            factor_chol=on_device(np.zeros((z.shape[0], z.shape[0]))),
            mean=Zero() if mean is None else mean.build(z.shape[1]),
        )
        return params._replace(factor_chol=self._prior_precision_chol(params))

    @partial(jax.jit, static_argnums=0)
    def _prior_precision_chol(self, params: SparseGPParams):
        """``chol(K_uu⁻¹)``, the starting factor's, in one compiled program (op by op, each of its array operations
        was a program of its own to compile in every new process)."""
        return bank.prior_precision_cholesky(bank.prior_factors(self.sparse_gp(params)))[0]

    # ----------------------------------------------------------------------------------------------
    @property
    def collapsed(self) -> CollapsedRegression | None:
        """The collapsed PEP-α bound (Bui, Yan & Turner 2017, §3.2, eq. 128) that this model's energy equals at its
        exact sites' fixed point, with the same α, jitter and priors, its gradient in the hyper-parameters the
        energy's with the factor held there (module docstring): with a Gaussian likelihood's site updates; None
        otherwise. Its params are :meth:`collapsed_params`."""
        return CollapsedRegression(self.alpha, self.jitter, self.priors) if self.site_updates else None

    @staticmethod
    def collapsed_params(params: SparseGPParams) -> RegressionParams:
        """The :attr:`collapsed` bound's params of ``params`` (or of any pytree of their structure, such as a
        mask of the frozen leaves): the kernel, the Gaussian's noise, the inducing inputs and the mean."""
        return RegressionParams(params.kernel, params.likelihood["raw_noise_variance"], params.inducing, params.mean)

    @staticmethod
    def with_collapsed(params: SparseGPParams, collapsed: RegressionParams) -> SparseGPParams:
        """``params`` with the hyper-parameters of the :attr:`collapsed` bound's ``collapsed`` (the factor kept)."""
        return params._replace(kernel=collapsed.kernel, inducing=collapsed.inducing, mean=collapsed.mean,
                               likelihood={**params.likelihood, "raw_noise_variance": collapsed.raw_noise_variance})

    @property
    def own_sites(self) -> bool:
        """Whether each row's cavity removes the row's own site (:meth:`data_energy`): with a Gaussian
        likelihood's exact site updates at α > 0."""
        return self.site_updates and self.alpha > 0.0

    def step_shared(self, params: SparseGPParams, n_total) -> StepShared:
        """``chol(K_uu)`` and the cavity ``p·t_tot^(1 − α/N)``; ``q`` itself at α = 0 and with
        :attr:`own_sites` (each row's cavity is then formed from ``q`` by :meth:`data_energy`)."""
        prior = bank.prior_factors(self.sparse_gp(params))
        scale = 1.0 if self.alpha == 0.0 or self.own_sites else 1.0 - self.alpha / n_total
        cavity = bank.gaussians(prior, tied_factor(params), scale)
        return StepShared(prior, jax.lax.stop_gradient(cavity) if self.site_updates and not self.own_sites else cavity)

    def global_energy(self, params: SparseGPParams, shared: StepShared, n_total):
        """``G = φ(q) − φ(p) + (N/α)(φ(cav) − φ(q))``; for α = 0, ``φ(q) − φ(p) − E_q[log t_tot(u)]`` with
        ``E_q[log t_tot] = ηᵀm − ½tr(Λ(V + mmᵀ))`` (Bui, Yan & Turner 2017, eqs. 144–146). With
        ``site_updates`` its gradient is the prior term of the gradient at an EP fixed point (``q`` held;
        Villacampa-Calvo & Hernández-Lobato 2017, eq. 10). Plus ``log p(θ)`` with priors, once per step."""
        if self.own_sites:  # the rows' cavities are theirs (data_energy): only φ(q) − φ(p) is global
            return with_log_prior(jnp.sum(shared.cavity.log_normaliser), params, self.priors)
        q = bank.gaussians(shared.prior, tied_factor(params), 1.0)
        if self.alpha == 0.0:
            value = bank.variational_global_term(q, tied_factor(params))
        else:
            value = bank.power_ep_global_term(q, shared.cavity, n_total, self.alpha)
        value = sep.hold_gradient(value, sep.prior_surrogate(shared.prior, q)) if self.site_updates else value
        return with_log_prior(value, params, self.priors)

    def data_energy(self, params: SparseGPParams, shared: StepShared, x, y, mask):
        """Data term of one block: ``Σ_n mask_n (1/α) log Z̃_n`` under the cavity ``shared``
        (``Σ mask_n E_q[log p]`` at α = 0). Rows with ``mask = 0`` (padding) contribute exactly zero to
        the value and the gradient. The cavity's latent mean is shifted by the prior's mean ``m(x_n)``."""
        if self.own_sites:
            return jnp.sum(jnp.where(mask, self._own_site_terms(params, shared, x, y), 0.0))
        marginals = bank.latent_marginals(self.sparse_gp(params), shared.prior, shared.cavity, x)
        terms = scaled_log_tilted(self.likelihood, params.likelihood, y, params.mean.plus(x, marginals.mean[:, 0]),
                                  marginals.var[:, 0], self.alpha)
        return jnp.sum(jnp.where(mask, terms, 0.0))

    def _own_site_terms(self, params: SparseGPParams, shared: StepShared, x, y):
        """Each row's ``(1/α)(log Z̃_n + φ(cav_n) − φ(q))`` with the cavity ``cav_n = q/t_n^α`` of its own exact
        site ``t_n(u) ∝ N(y_n; υ_nᵀu, σ² + αd_n)`` (Bui, Yan & Turner 2017, eq. 110 with untied sites), ``[B]``.

        The site lives along ``υ_n`` only, so removing it changes ``q``'s marginal along ``υ_n`` alone:
        ``N(m, c)`` becomes ``N(m', c')`` with ``1/c' = 1/c − αa``, ``m'/c' = m/c − αb`` (``a = 1/(σ² + αd_n)``,
        ``b = a(y_n − m(x_n))``), and ``φ(cav_n) − φ(q) = ½(m'²/c' − m²/c + log c'/c)``. Where the tied factor
        is the sum of the sites (a full-batch site update) ``F`` is then the collapsed PEP-α bound (Bui, Yan &
        Turner 2017, §3.6), and the tied cavity's ``(N/α)(φ(cav) − φ(q))`` with ``t_tot^(α/N)`` in place of each
        row's own site scores each row with part of its own information kept (``SparseGPSettings.at_the_rows``).

        Gradient: EP's energy is stationary in every site at the fixed point, so its total derivative in the
        hyper-parameters is the one with the sites held (Minka 2001, §3.4; Rasmussen & Williams 2006, §3.6):
        the tied factor is held (it moves by site updates) and so is each row's site, ``(a, b)`` along
        ``υ_n``, in ``u`` — the cavity along the live ``υ_n`` then uses ``υ_nᵀVυ_n⁰ ≈ ½(υ_nᵀVυ_n + υ_n⁰ᵀVυ_n⁰)``
        (equal in value and first derivative at ``υ_n = υ_n⁰``, the held copy). Away from the fixed point
        (damped minibatch updates) ``q`` may hold less than a row's site along ``υ_n``: the site removed is then
        cut to ``q``'s own precision there (``αa ≤ (1 − 10⁻⁶)/c``), so every cavity is proper."""
        rows = bank.row_projections(self.sparse_gp(params), shared.prior, x)
        fitc = rows.fitc_var[0]
        held = jax.lax.stop_gradient(rows.directions)
        live, fixed = bank.project(shared.cavity, rows.directions), bank.project(shared.cavity, held)
        mean, var, mean_0, var_0 = live.mean[:, 0], live.var[:, 0], fixed.mean[:, 0], fixed.var[:, 0]
        precision, residual = jax.lax.stop_gradient(self._exact_sites(params, fitc, x, y))
        removed = jnp.minimum(self.alpha * precision, (1.0 - 1e-6) / var_0)  # α·a, cut to q's own precision
        cavity_var_0 = 1.0 / (1.0 / var_0 - removed)
        cavity_mean_0 = cavity_var_0 * (mean_0 / var_0 - removed * residual)  # α·b = α·a(y − m), cut alike
        along = 0.5 * (var + var_0) / var_0  # υᵀVυ⁰/υ⁰ᵀVυ⁰
        cavity_mean = mean + along * (cavity_mean_0 - mean_0)
        cavity_var = var + along**2 * (cavity_var_0 - var_0)
        tilted = scaled_log_tilted(self.likelihood, params.likelihood, y, params.mean.plus(x, cavity_mean),
                                   cavity_var + fitc, self.alpha)
        normalisers = 0.5 * (cavity_mean_0**2 / cavity_var_0 - mean_0**2 / var_0 + jnp.log(cavity_var_0 / var_0))
        return tilted + normalisers / self.alpha

    def _exact_sites(self, params: SparseGPParams, fitc_var, x, y):
        """A Gaussian likelihood's exact Power-EP sites along the rows' directions, ``[B]`` each: the precision
        ``a = 1/(σ² + αd_n)`` and the targets about the prior's mean, ``y_n − m(x_n)`` (the shift is their
        product; Bui, Yan & Turner 2017, §3.1)."""
        return (1.0 / (self.likelihood.noise_variance(params.likelihood) + self.alpha * fitc_var),
                params.mean.minus(x, y))

    def site_stats(self, params: SparseGPParams, shared: StepShared, x, y, mask) -> GaussianSites:
        """Row ``n``'s Power-EP site in ``u``, ``t_n(u) = exp(b_n υ_nᵀu − ½a_n(υ_nᵀu)²)`` along
        ``υ_n = K_uu⁻¹k_n``, summed over the block's rows as ``Σ b_n υ_n`` and ``Σ a_n υ_nυ_nᵀ``.

        A Gaussian likelihood's sites are exact whatever the cavity: ``t_n(u) ∝ N(y_n; υ_nᵀu, σ² + αd_n)``
        with the FITC variance ``d_n = k_nn − k_nᵀK_uu⁻¹k_n`` (Bui, Yan & Turner 2017, §3.1), so the tied
        factor's SEP update (Li et al. 2015) is exact and a full-batch step gives the collapsed PEP-α
        posterior. Another likelihood's come from its tilted moments under the cavity
        (:func:`tilted_sites`). With a mean function ``m`` the likelihood sees ``f = m(x) + g``: a Gaussian's sites
        are those of ``y_n − m(x_n)``, another's tilted moments are taken at the cavity's mean plus ``m(x_n)`` and
        its site in ``f``, ``exp(b f − ½a f²)``, is ``exp((b − a m(x_n)) g − ½a g²)`` in ``g``."""
        rows = bank.row_projections(self.sparse_gp(params), shared.prior, x)
        directions = rows.directions[0]
        if isinstance(self.likelihood, Gaussian):
            precision, residual = self._exact_sites(params, rows.fitc_var[0], x, y)
            shift = precision * residual
        else:
            along = bank.project(shared.cavity, rows.directions)
            precision, shift = tilted_sites(self.likelihood, params.likelihood, y, params.mean.plus(x, along.mean[:, 0]),
                                            along.var[:, 0], rows.fitc_var[0], self.alpha)
            shift = shift - precision * params.mean(x)
        precision, shift = jnp.where(mask, precision, 0.0), jnp.where(mask, shift, 0.0)
        return GaussianSites((shift @ directions)[None],
                             jnp.einsum("b,bm,bn->mn", precision, directions, directions)[None],
                             jnp.sum(mask.astype(directions.dtype))[None])

    def site_update(self, params: SparseGPParams, shared: StepShared, stats: GaussianSites, n_total, damping=1.0):
        """``(params, shared, accepted)``: the tied factor moved to ``(1 − ρn_B/N)·t + ρ·Σ_B t_n`` (the damped
        SEP update, :func:`pep_gp.core.sep.damped_site_update`), stored as ``η`` and ``chol(Λ)`` (a relative
        jitter of 1e-12 keeps a rank-deficient ``Λ`` factorisable); a non-finite result is rejected."""
        precision = params.factor_chol @ params.factor_chol.T
        old = bank.NaturalFactor(params.factor_shift[None], precision[None])
        factor, ok = sep.damped_site_update(old, stats.shift, stats.precision, stats.count,
                                            jnp.asarray(n_total, stats.count.dtype)[None], damping)
        new = factor.precision[0]
        chol = cholesky(new, 1e-12 * jnp.trace(new) / new.shape[0])
        ok = ok & jnp.all(jnp.isfinite(chol))
        params = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b),
                                        params._replace(factor_shift=factor.shift[0], factor_chol=chol), params)
        return params, self.step_shared(params, n_total), ok

    @partial(jax.jit, static_argnames="sweeps")
    def settled(self, params: SparseGPParams, x, y, n_total, sweeps: int = SETTLE_SWEEPS) -> SparseGPParams:
        """``params`` with the tied factor moved to the EP fixed point of the rows ``x, y`` ``[n, D], [n]`` at
        the given hyper-parameters: ``sweeps`` full-batch site updates (:meth:`site_stats`, undamped; one that
        is not finite is not taken), the result scaled by ``n_total/n`` to stand for ``n_total`` rows.

        The start of a likelihood whose factor moves by the gradient (the Student-t's). From :meth:`init`'s
        ``q(u) = N(0, K_uu/2)``, which explains every target as noise, the Student-t's energy rises by the
        gradient for thousands of L-BFGS iterations (1-D sine with 7 % gross outliers: −245 nats after 300,
        RMSE 0.58 from the function; docs/results/likelihoods.md); from the sites' fixed point it reaches
        +84 in ten (RMSE 0.03). EP's own recipe runs the sites to their fixed point before each evidence
        evaluation (Rasmussen & Williams 2006, §3.6; Jylänki, Vanhatalo & Vehtari 2011, §4)."""
        n = x.shape[0]
        mask = jnp.ones(n, bool)

        def sweep(_, params):
            shared = self.step_shared(params, n)
            return self.site_update(params, shared, self.site_stats(params, shared, x, y, mask), n)[0]

        params = jax.lax.fori_loop(0, sweeps, sweep, params)
        ratio = jnp.asarray(n_total, params.factor_shift.dtype) / n
        return params._replace(factor_shift=ratio * params.factor_shift, factor_chol=jnp.sqrt(ratio) * params.factor_chol)

    def energy(self, params: SparseGPParams, x, y):
        """The whole energy ``F = G + L`` on in-memory data (all rows, no minibatching)."""
        n = x.shape[0]
        shared = self.step_shared(params, n)
        return self.global_energy(params, shared, n) + self.data_energy(params, shared, x, y, jnp.ones(n, bool))

    def evidence_ceiling(self, params: SparseGPParams, n_total):
        """``N·sup log p(y|f) + log p(θ)``: no log marginal likelihood of ``N`` rows exceeds it, as ``p(y) =
        ∫p(y|f)p(f)df ≤ Π_n sup p(y_n|f)``. The energy approximates ``log p(y)`` (a bound only at α = 0): far
        above the ceiling it has diverged (a full-batch fit fails then,
        :func:`~pep_gp.pipeline.training.endings.refuse_impossible_energy`), as it can for a likelihood that is
        not log-concave when the factor moves by gradient at α > 0 (the Student-t at α ≤ 0.2: the term
        ``(N/α)(φ(cav) − φ(q))`` grows with the variance of ``log t`` under ``q``, while the tilted terms fall
        only as its logarithm). Infinite for a likelihood without ``largest_log_prob``."""
        largest = getattr(self.likelihood, "largest_log_prob", None)
        if largest is None:
            return jnp.inf
        return with_log_prior(n_total * largest(params.likelihood), params, self.priors)

    # ----------------------------------------------------------------------------------------------
    def _posterior(self, params: SparseGPParams) -> tuple[bank.PriorFactors, bank.Gaussians]:
        prior = bank.prior_factors(self.sparse_gp(params))
        return prior, bank.gaussians(prior, tied_factor(params), 1.0)

    def predict_f(self, params: SparseGPParams, x, full_cov: bool = False):
        """Posterior mean ``[B]`` and variance ``[B]`` (``full_cov``: covariance ``[B, B]``) of the latent
        function at ``x`` (:func:`pep_gp.core.bank.latent_moments`, the mean plus the prior's ``m(x)``)."""
        mean, spread = bank.latent_moments(self.sparse_gp(params), *self._posterior(params), x, full_cov)
        return params.mean.plus(x, mean[:, 0]), spread[0] if full_cov else spread[:, 0]

    def predict_y(self, params: SparseGPParams, x):
        """The likelihood's predictive distribution at ``x`` (mean/variance, or class-1 probability)."""
        mean, var = self.predict_f(params, x)
        return self.likelihood.predict(params.likelihood, mean, var)

    def posterior_moments(self, params: SparseGPParams):
        """``(m, V)`` of ``q(u)``."""
        q = self._posterior(params)[1]
        return q.mean[0], q.sqrt_cov[0] @ q.sqrt_cov[0].T


jax.tree_util.register_static(PowerEPSparseGP)
