"""Multi-class GP classification with stochastic EP (SEP): C latent sparse GPs, tied factors per class.

Model (Villacampa-Calvo & Hernández-Lobato 2017, eqs. 1–8): class ``c`` has its own inducing inputs ``Z_c`` ``[M, D]`` and hyper-parameters
(a kernel ``k_c``, by default the paper's ARD squared exponential ``σ_c exp(−½Σ_d Δ_d²/ℓ_{c,d}²)``, and an
additive noise ``σ_{0,c}``); the prior on the inducing values is ``N(f̄^c; 0, K_c)`` with ``K_c = k_c(Z_c, Z_c) + σ_{0,c}I``
(the noise is on the inducing diagonal too, Villacampa-Calvo & Hernández-Lobato 2017 and the authors' code) and
``κ_c(x) = k_c(x, x) + σ_{0,c}``. The likelihood is approximated by
``Π_{k≠y_i} Φ(α_i^k)`` (eq. 6), whose EP factors are rank one per class (eq. 8,
:mod:`pep_gp.core.models.multiclass_sites`); with ``label_noise = ε`` by ``Π_{k≠y_i} (ε + (1 − ε)Φ(α_i^k))``, a
normalised label-noise likelihood (:func:`~pep_gp.core.models.multiclass_sites.robust_log_factor`).
With ``likelihood="exact"`` a row's likelihood is not split into pairs: its one factor is the probability of
the maximum (eq. 1), rank one in each class too (:func:`~pep_gp.core.models.multiclass_sites.exact_log_partition`);
with ``likelihood="softmax"`` it is the multinomial logit ``exp(f_y)/Σ_k exp(f_k)``, the maximum under Gumbel
noise (:mod:`pep_gp.core.models.multiclass_softmax`).

SEP ties all factors touching class ``c`` into one Gaussian factor ``t_c(f̄^c) = exp(η̃_cᵀf̄ − ½f̄ᵀΛ̃_cf̄)``,
stored in ``f̄`` coordinates (so it stays fixed while hyper-parameters move, Villacampa-Calvo & Hernández-Lobato 2017 and the authors' code). With the
per-class factor count ``n_c = N + (C − 2)N_c`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1, with the per-class counts of the authors' code, not the text's single n = N(C − 1)) and a
Power-EP power α (issue 5 item 5; α = 1 is the paper's method, as in Bui, Yan & Turner 2017 for one GP)

    q_c ∝ p(f̄^c) t_c,      cav_c ∝ p(f̄^c) t_c^(1 − α/n_c),

and the energy / log-evidence estimate (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1: eq. 9 with tied factors) splits as the energy contract of pep_gp.pipeline.models.protocol:

    G = Σ_c [g(q_c) − g(p_c) + (n_c/α)(g(cav_c) − g(q_c))],      L = (1/α) Σ_i Σ_{k≠y_i} log Z_{i,k}(cav),

with ``Z_{i,k} = ∫ φ_i^k(f̄)^α cav(f̄) df̄``. As α → 0, ``G + L`` tends to ``−KL(q‖p) + Σ E_q[log φ_i^k]``.

Two ways to train, chosen by the type of ``params.factor``:

* :class:`NaturalFactor` — the paper's method (§2.3): the factor moves only by EP updates
  (:meth:`MultiClassGP.site_stats` summed over blocks, then :meth:`MultiClassGP.site_update`),
  and the gradient of ``G + L`` w.r.t. the hyper-parameters and inducing inputs is eq. (10)/(12): the
  cavity and ``q`` are held fixed in ``f̄`` coordinates (``stop_gradient`` surrogate of Villacampa-Calvo & Hernández-Lobato 2017, eq. 10, App. G, whose
  prior part is eqs. 63–64), and the factor receives no gradient. Values are the true ``G`` and ``L``.
* :class:`CholeskyFactor` — the direct mode: ``Λ̃_c = L_cL_cᵀ`` and ``η̃_c`` are ordinary parameters,
  and ``G + L`` is differentiated exactly, so Adam can act on everything (as Bui et al. 2016 does).

The C latent GPs, their tied factors, ``q`` and the cavities are a bank of sparse GPs
(:mod:`pep_gp.core.bank`, G = C); this module adds the per-row factors of eq. (6).

A mean function (``params.mean``, :meth:`~pep_gp.core.means.MeanFunction.stacked`: one per class, each with its
own parameters) makes class ``c``'s prior ``f_c ~ GP(m_c, k_c)``: the bank above holds ``g_c = f_c − m_c``, every
row's factors see the cavity's ``a_c + m_c(x)`` (:meth:`MultiClassGP.class_marginals`), a site computed in ``f_c``,
``exp(μ̃ f − ½Δ f²)``, is ``exp((μ̃ − Δm_c) g − ½Δ g²)`` in ``g_c`` (:meth:`MultiClassGP.site_sums`), and the
predictive mean is shifted by ``m_c(x*)`` (Rasmussen & Williams 2006, §2.7). Priors on the kernels'
hyper-parameters, and the model's ``priors`` on the classes' noises ``σ_{0,c}``, add ``log p(θ)`` to the global term
once per step (a MAP fit, :mod:`pep_gp.core.log_prior`).

Reference: Villacampa-Calvo & Hernández-Lobato, "Scalable Multi-Class Gaussian Process Classification
using Expectation Propagation", ICML 2017 (arXiv 1706.07258); errata as noted in this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank, sep
from ..bank import CholeskyFactor, NaturalFactor
from ..initialisation import squared_median_lengthscale
from ..kernels import Kernel, ProductDtype, SquaredExponential, check_product_dtype
from ..linalg import DEFAULT_JITTER
from ..log_prior import with_log_prior
from ..means import MeanFunction, Zero
from . import multiclass_sites as sites
from .multiclass_likelihoods import MultiClassLikelihood, Pairwise, check_likelihood
from . import multiclass_softmax as softmax
from ..parameters import LOG, constrained, on_device, unconstrained


class MultiClassParams(NamedTuple):
    """The trainable state: per-class unconstrained hyper-parameters, inducing inputs, tied factor and the
    classes' prior means (:class:`~pep_gp.core.means.Zero`, no leaves, by default)."""

    kernel: Kernel  # C kernels (hyper-parameters [C, ·], logarithms as in the reference code, pep_gp.core.parameters)
    raw_noise: jnp.ndarray  # log σ_{0,c}, [C]
    inducing: jnp.ndarray  # Z_c, [C, M, D]
    factor: Union[NaturalFactor, CholeskyFactor]
    mean: MeanFunction = Zero()  # m_c of the priors f_c ~ GP(m_c, k_c), parameters [C, ·] (MeanFunction.stacked)

    BIJECTIONS = {"raw_noise": ("noise", LOG)}


class SiteStats(NamedTuple):
    """Sums over rows of refined site natural parameters (they reduce over chunks like gradients)."""

    shift: jnp.ndarray  # Σ_i μ̃_i^c υ_i^c, [C, M]
    precision: jnp.ndarray  # Σ_i Δ_i^c υ_i^c υ_i^cᵀ, [C, M, M]
    count: jnp.ndarray  # n_{B,c}: factors touching class c in these rows, [C]
    rows: jnp.ndarray  # |B|: unmasked rows, []


class StepShared(NamedTuple):
    """The O(C·M³) quantities every block of a step needs (:meth:`MultiClassGP.step_shared`), computed
    once per step by the trainer and by each worker from the params (the same compiled program)."""

    prior: bank.PriorFactors
    cavity: bank.Gaussians  # p(f̄^c)·t_c^(1 − α/n_c)
    q: bank.Gaussians | None = None  # p(f̄^c)·t_c, computed with the cavity (direct mode, or after a site update)


def rows_per_class(y, num_classes: int):
    """``N_c``, the rows of each class among the integer labels ``y`` ``[N]``, float64 ``[C]``."""
    return jnp.bincount(jnp.asarray(y, jnp.int32), length=num_classes).astype(jnp.float64)


def class_factor_counts(rows):
    """``n_c = N + (C − 2)N_c`` pair factors touch class ``c`` (Villacampa-Calvo & Hernández-Lobato 2017,
    §2.3.1), ``[C]``, from the rows of each class ``N_c`` (``rows`` ``[C]``, ``N = Σ_c N_c``):
    :meth:`~pep_gp.core.models.multiclass_likelihoods.Pairwise.factor_counts`."""
    return Pairwise().factor_counts(rows)


@dataclass(frozen=True)
class MultiClassGP:
    """Multi-class sparse GP classifier with tied (SEP) factors; the state is :class:`MultiClassParams`.

    The per-class factor counts ``n_c = N + (C − 2)N_c`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1)
    depend on the rows of each class, ``N_c``: the methods that need them take them as data, ``class_rows``
    ``[C]`` (:meth:`data_size`; the trainer's :meth:`~pep_gp.pipeline.models.multiclass.MultiClassSpec.data_size`),
    not as a constant of the model, so that data of one shape and another class balance (the folds of a
    cross-validation) share the compiled programs.

    Args:
        num_classes: C, at least 2.
        alpha: Power-EP power of the factors in (0, 1]; 1 is the paper's EP/SEP, α → 0 approaches the
            variational bound ``−KL(q‖p) + Σ E_q[log Φ]`` with the likelihood of eq. (6).
        jitter: relative jitter on ``K_c`` (``jitter·σ_c`` is added to ``K_c`` and ``κ_c``).
        label_noise: ``ε`` in [0, 1): each factor is ``ε + (1 − ε)Φ(α_i^k)`` instead of ``Φ(α_i^k)``, the
            label-noise likelihood ``p(y | f) = ε^{r_y(f)}/Z_C(ε)`` (``r_y`` the classes ranked above ``y``,
            :func:`~pep_gp.core.models.multiclass_sites.robust_log_factor`), in training and in the predictive;
            0 is the paper's likelihood. ``ε > 0`` needs ``alpha = 1``.
        quadrature: the rule of the predictive integral (eq. 68).
        likelihood: a :class:`~pep_gp.core.models.multiclass_likelihoods.MultiClassLikelihood`, or its name
            (kept as the object): ``"pairwise"`` trains on the product of each row's ``C − 1`` pairwise probits (eq. 6, the
            paper's method: ``C − 1`` rank-one sites a row, ``n_c = N + (C − 2)N_c``); ``"exact"`` on the
            probability of the maximum itself, the integral of eq. (68) at the cavity
            (:func:`~pep_gp.core.models.multiclass_sites.exact_log_partition`: one site a row and class,
            ``n_c = N``), the likelihood the predictive already uses; ``"softmax"`` on the multinomial logit
            ``exp(f_y)/Σ_k exp(f_k)`` (:func:`~pep_gp.core.models.multiclass_softmax.softmax_log_probs` of the label,
            one site a row and class), whose predictive is ``E[softmax(f)]``. Both need ``alpha = 1``, and
            ``"softmax"`` ``label_noise = 0``.
        softmax_quadrature: the rules of the softmax likelihood's integrals.
        kernel_products: dtype of the stationary kernels' matrix products over the input dimension
            (:class:`~pep_gp.core.kernels.Stationary`); ``"float32"`` halves the time of
            the O(C·M·D·(M + B)) part of a step at large D (images), the EP algebra stays float64.
        priors: priors on the classes' noises, ``(("raw_noise", prior, LOG.forward),)`` (a density of each
            ``σ_{0,c}``, :data:`~pep_gp.core.parameters.LOG` the stored logarithm's map), added to the global term
            with the kernels' own priors (:func:`~pep_gp.core.log_prior.with_log_prior`); none by default.

    Example:
        >>> x = jax.random.normal(jax.random.key(0), (30, 2)); y = jnp.argmax(x @ jnp.ones((2, 3)), 1)
        >>> model = MultiClassGP(3)
        >>> params = model.init(x, num_inducing=4)
        >>> model.predict(params, x).shape
        (30, 3)
    """

    num_classes: int
    alpha: float = 1.0
    jitter: float = DEFAULT_JITTER
    label_noise: float = 0.0
    quadrature: sites.PredictiveQuadrature = sites.PredictiveQuadrature()
    likelihood: str | MultiClassLikelihood = "pairwise"
    softmax_quadrature: softmax.SoftmaxQuadrature = softmax.SoftmaxQuadrature()
    kernel_products: ProductDtype = "float64"
    priors: tuple = ()  # ((leaf name, prior, forward), ...): pep_gp.core.priors

    def __post_init__(self):
        if not isinstance(self.num_classes, (int, np.integer)) or self.num_classes < 2:
            raise ValueError(f"num_classes must be an integer of at least 2; got {self.num_classes!r}")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1]; got {self.alpha}")
        if not 0.0 <= self.label_noise < 1.0:
            raise ValueError(f"label_noise must lie in [0, 1); got {self.label_noise}")
        sites.check_label_noise(self.alpha, self.label_noise)
        object.__setattr__(self, "likelihood", check_likelihood(self.likelihood, self.alpha, self.label_noise))
        check_product_dtype(self.kernel_products, "kernel_products")

    def data_size(self, y):
        """:func:`rows_per_class` of the labels ``y``: the data's size as the methods below take it."""
        return rows_per_class(y, self.num_classes)

    def factor_counts(self, class_rows):
        """The factors touching each class, ``[C]``: :func:`class_factor_counts`, ``n_c = N + (C − 2)N_c``,
        for the pairwise likelihood; ``n_c = N`` for the whole-row ones (a factor a row): the likelihood's."""
        return self.likelihood.factor_counts(class_rows)

    def site_counts(self, y, mask):
        """:meth:`factor_counts` of the rows ``y`` ``[B]`` not masked out (``mask`` ``[B]``): the ``n_{B,c}`` of a
        block's site statistics, ``[C]``."""
        return self.likelihood.site_counts(y, mask, self.num_classes)

    # ----------------------------------------------------------------------------------------------
    def init(
        self,
        x,
        num_inducing: int,
        *,
        inducing=None,
        kernel: Kernel | None = None,
        noise: float = 1.0,
        factor: str = "natural",
        seed: int = 0,
        mean: MeanFunction | None = None,
    ) -> MultiClassParams:
        """Starting state (the defaults of Villacampa-Calvo & Hernández-Lobato's (2017) code).

        Inducing inputs are an independent random sample of ``num_inducing`` rows per class unless
        ``inducing``; ``kernel`` (default the ARD squared exponential of amplitude 1) for every class, a
        lengthscale left unset ``ℓ² =`` the median distance of 1,000 random rows, one per input
        (:func:`pep_gp.core.initialisation.squared_median_lengthscale`, the reference code's start); noise 1.
        ``factor="natural"`` starts the tied factor at zero (q = prior, Villacampa-Calvo & Hernández-Lobato 2017, App. B); ``"cholesky"`` (direct
        mode) at ``Λ̃_c = K_c⁻¹``, ``η̃ = 0``, away from the saddle at ``L = 0``. ``mean``: every class's prior
        mean at its starting values (:meth:`~pep_gp.core.means.MeanFunction.stacked`; default zero).
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
        kernel = SquaredExponential() if kernel is None else kernel
        params = MultiClassParams(
            kernel=kernel.bank(num_classes, dim, np.full(dim, squared_median_lengthscale(x, seed))),
            **unconstrained(MultiClassParams, noise=np.full(num_classes, noise, float)),
            inducing=on_device(inducing),
            factor=NaturalFactor(on_device(np.zeros((num_classes, num_inducing))),
                                 on_device(np.zeros((num_classes, num_inducing, num_inducing)))),
            mean=Zero() if mean is None else mean.stacked(num_classes, dim),
        )
        if factor == "natural":
            return params
        if factor != "cholesky":
            raise ValueError(f"factor must be 'natural' or 'cholesky'; got {factor!r}")
        return params._replace(factor=CholeskyFactor(params.factor.shift, self._prior_precision_cholesky(params)))

    @partial(jax.jit, static_argnums=0)
    def _prior_precision_cholesky(self, params: MultiClassParams):
        """``chol(K_c⁻¹)`` of every class, the starting Cholesky factor's, in one compiled program (op by op, its
        array operations were 34 programs more to compile in every new process: 1.2 s on glass)."""
        return bank.prior_precision_cholesky(self.prior_factors(params))

    # ----------------------------------------------------------------------------------------------
    def sparse_gps(self, params: MultiClassParams) -> bank.Bank:
        """The C sparse GPs: the kernels (products in ``kernel_products``) and the diagonal ``σ_{0,c} + jitter·σ_c``
        (on ``K_c`` and ``κ_c``, Villacampa-Calvo & Hernández-Lobato 2017 and the authors' code; ``σ_c`` the
        kernel's amplitude)."""
        kernel = params.kernel.with_products(self.kernel_products)
        return bank.Bank(kernel, params.inducing, constrained(params)["noise"] + self.jitter * kernel.amplitude())

    def prior_factors(self, params: MultiClassParams) -> bank.PriorFactors:
        """``chol(K_c)`` and its inverse, with the noise (and jitter) on the diagonal of ``K_c``."""
        return bank.prior_factors(self.sparse_gps(params))

    def _holds_cavity(self, params: MultiClassParams) -> bool:
        return isinstance(params.factor, NaturalFactor)

    def _cavity_scale(self, counts):
        """``1 − α/n_c``: the cavity removes the power α of one of the ``n_c`` tied factors."""
        return 1.0 - self.alpha / counts

    def step_shared(self, params: MultiClassParams, class_rows) -> StepShared:
        """``chol(K_c)`` and its inverse, and the cavities ``p·t^(1 − α/n_c)``: what every block of a step
        needs, O(C·M³).

        The energy is ``G(params, S) + Σ_blocks L(params, S; block)`` with ``S = step_shared(params)``;
        the trainer computes ``S`` once per step and back-propagates into it once (the model protocol,
        :mod:`pep_gp.pipeline.models.protocol`). With a :class:`NaturalFactor` the cavity is held fixed
        (eq. 10), so only ``L⁻¹`` carries gradient (``chol(K_c)`` is held too: nothing differentiates
        through it, see :func:`pep_gp.core.sep.prior_surrogate`). With a :class:`CholeskyFactor` the
        cavity and ``q`` are computed together and differentiated.
        """
        return self.step_shared_at(params, self.factor_counts(class_rows))

    def step_shared_at(self, params: MultiClassParams, counts) -> StepShared:
        """:meth:`step_shared` from the factor counts ``n_c`` ``[C]`` (:meth:`factor_counts`): each class's
        part from its own parameters and count only, so it holds for any subset of the classes (a
        ``params`` of fewer classes, the class-parallel step, :mod:`pep_gp.pipeline.training.class_groups`)."""
        prior = self.prior_factors(params)
        if self._holds_cavity(params):
            prior = prior._replace(chol=jax.lax.stop_gradient(prior.chol))
            cavity = bank.gaussians(prior, params.factor, self._cavity_scale(counts))
            return StepShared(prior, jax.lax.stop_gradient(cavity))
        cavity, q = bank.gaussians_at(prior, params.factor, (self._cavity_scale(counts), 1.0))
        return StepShared(prior, cavity, q)

    # ----------------------------------------------------------------------------------------------
    def global_energy(self, params: MultiClassParams, shared: StepShared, class_rows):
        """``G = Σ_c [g(q_c) − g(p_c) + (n_c/α)(g(cav_c) − g(q_c))]`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1, eq. 9); O(C·M³), independent of N.

        With a :class:`NaturalFactor` the gradient is the prior term of eq. (10) only (see the module
        docstring); with a :class:`CholeskyFactor` it is the exact gradient of ``G``. ``q`` is the
        shared one when :meth:`step_shared` or :meth:`site_update` computed it.
        """
        return self.global_energy_at(params, shared, self.factor_counts(class_rows))

    def global_energy_at(self, params: MultiClassParams, shared: StepShared, counts):
        """:meth:`global_energy` from the factor counts ``n_c`` (as :meth:`step_shared_at`: any subset of
        the classes; the sum of the classes' values is the whole). Plus ``log p(θ)`` of the classes' kernels'
        priors and the model's ``priors`` (:func:`~pep_gp.core.log_prior.with_log_prior`; a sum over the classes
        too)."""
        if self._holds_cavity(params):
            value = sep.held_global_energy(shared.prior, params.factor, shared.cavity, counts, self.alpha, shared.q)
        else:
            q = bank.gaussians(shared.prior, params.factor, 1.0) if shared.q is None else shared.q
            value = bank.power_ep_global_term(q, shared.cavity, counts, self.alpha)
        return with_log_prior(value, params, self.priors)

    # The block term in two parts: the rows' projections, differentiable and unchanged by a site update
    # (so a step computes them once per block for the site statistics and the data term), and what the
    # cavity makes of them.
    def block_rows(self, params: MultiClassParams, shared: StepShared, x) -> bank.RowProjections:
        """``υ = K_c⁻¹k_c(x)``, the FITC variances and the classes' prior means ``m_c(x)`` (None for the zero
        mean) of the rows ``x`` ``[B, D]``."""
        rows = bank.row_projections(self.sparse_gps(params), shared.prior, x)
        return rows._replace(prior_mean=params.mean.each(x))

    def held(self, shared: StepShared) -> bank.Gaussians:
        """What a site update changes in ``shared`` and the data term holds fixed (eq. 10): the cavities."""
        return shared.cavity

    def class_marginals(self, rows: bank.RowProjections, cavity: bank.Gaussians):
        """Each class's cavity seen along its rows' directions, and the FITC variances: ``[B, C]`` each —
        the only per-class numbers the per-row factors of eq. (6) need (any subset of the classes gives its
        columns). The latent ``f_c`` the factors see is ``g_c + m_c(x)``: its mean the projection plus the prior
        mean (the projection itself for the zero mean)."""
        marginals = bank.project(cavity, rows.directions)
        if rows.prior_mean is not None:
            marginals = marginals._replace(mean=marginals.mean + rows.prior_mean)
        return marginals, rows.fitc_var.T

    def _pair_cavities(self, rows: bank.RowProjections, cavity: bank.Gaussians, y):
        """Cavity projections of every pair ``(i, k)``: label side ``[B, 1]``, other side ``[B, C]``."""
        return self._pairs(*self.class_marginals(rows, cavity), y)

    def _pairs(self, marginals: bank.Marginals, fitc, y):
        """:meth:`_pair_cavities` from :meth:`class_marginals`."""
        return Pairwise.pairs(marginals, fitc, y)

    def row_energy(self, marginals: bank.Marginals, fitc, y, mask):
        """:meth:`data_energy` from :meth:`class_marginals` of all C classes (eq. 34 for the pairs): the
        likelihood's."""
        return self.likelihood.row_energy(self, marginals, fitc, y.astype(jnp.int32), mask)

    def row_log_partition(self, mean, var, fitc, y):
        """``log Z_i`` of each row's whole-row factor at its cavity projections ``a``, ``w`` and FITC variances
        ``s`` ``[B, C]``, ``[B]``: the likelihood's
        (:meth:`~pep_gp.core.models.multiclass_likelihoods.WholeRow.row_log_partition`)."""
        return self.likelihood.row_log_partition(self, mean, var, fitc, y)

    def data_energy_at(self, rows: bank.RowProjections, cavity: bank.Gaussians, y, mask):
        """:meth:`data_energy` from the rows' projections and the cavities."""
        return self.row_energy(*self.class_marginals(rows, cavity), y, mask)

    def data_energy(self, params: MultiClassParams, shared: StepShared, x, y, mask):
        """``L = (1/α) Σ_i mask_i Σ_{k≠y_i} log Z_{i,k}`` over the rows of one block (eq. 34).

        ``x`` ``[B, D]``, labels ``y`` ``[B]`` (integers, or floats holding integers as the trainer's
        blocks do), boolean ``mask`` ``[B]``; masked (padding) rows contribute exactly zero to the value
        and the gradient. ``shared`` (from :meth:`step_shared`) carries the cavities and with them ``n_c``.
        """
        cavity = jax.lax.stop_gradient(shared.cavity) if self._holds_cavity(params) else shared.cavity
        return self.data_energy_at(self.block_rows(params, shared, x), cavity, y, mask)

    def energy(self, params: MultiClassParams, x, y):
        """The whole ``log Z_q`` estimate ``G + L`` on in-memory data (all rows)."""
        class_rows = self.data_size(y)
        shared = self.step_shared(params, class_rows)
        return (self.global_energy(params, shared, class_rows)
                + self.data_energy(params, shared, x, y, jnp.ones(x.shape[0], bool)))

    # ----------------------------------------------------------------------------------------------
    def site_stats_at(self, rows: bank.RowProjections, cavity: bank.Gaussians, y, mask) -> SiteStats:
        """:meth:`site_stats` from the rows' projections and the cavities."""
        y = y.astype(jnp.int32)
        delta, mu = self.row_site_coefficients(*self.class_marginals(rows, cavity), y, mask)
        shift, precision = self.site_sums(rows, delta, mu)
        count = self.site_counts(y, mask)
        return SiteStats(shift, precision, count, jnp.sum(mask.astype(shift.dtype)))

    def site_sums(self, rows: bank.RowProjections, delta, mu):
        """Each class's sums of its sites in ``g_c`` (:func:`~pep_gp.core.models.multiclass_sites.class_sums`) from
        the coefficients ``Δ``, ``μ̃`` ``[B, C]`` of sites computed in ``f_c = g_c + m_c(x)``: the shift less
        ``Δ·m_c(x)`` (module docstring), as it is for the zero mean."""
        if rows.prior_mean is not None:
            mu = mu - delta * rows.prior_mean
        return sites.class_sums(jnp.swapaxes(rows.directions, 0, 1), delta, mu)

    def row_site_coefficients(self, marginals: bank.Marginals, fitc, y, mask):
        """The refined sites' per-(row, class) coefficients ``Δ_i^c``, ``μ̃_i^c`` ``[B, C]`` (eqs. 26–27,
        :func:`~pep_gp.core.models.multiclass_sites.per_class_coefficients`) from :meth:`class_marginals` of
        all C classes; each class's sums then need its own column only
        (:func:`~pep_gp.core.models.multiclass_sites.class_sums`): the likelihood's."""
        return self.likelihood.row_site_coefficients(self, marginals, fitc, y.astype(jnp.int32), mask)

    def site_stats(self, params: MultiClassParams, shared: StepShared, x, y, mask) -> SiteStats:
        """Refine every factor of the block against the SEP cavity and sum the new sites per class.

        The sums ``Σ_i Δ_i^c υ_i^cυ_i^cᵀ``, ``Σ_i μ̃_i^c υ_i^c`` (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1, eqs. 26–27) and the counts
        ``n_{B,c}`` add over blocks exactly like gradients; masked rows contribute zero. ``shared`` is
        :meth:`step_shared` of ``params``.
        """
        return self.site_stats_at(self.block_rows(params, shared, x), jax.lax.stop_gradient(shared.cavity), y, mask)

    def site_update(self, params: MultiClassParams, shared: StepShared, stats: SiteStats, class_rows, damping=1.0):
        """Damped SEP update of the tied factors from summed site statistics (Villacampa-Calvo & Hernández-Lobato 2017, §2.3.1):

            Λ̃_c ← (1 − ρ_c n_{B,c}/n_c) Λ̃_c + ρ_c Σ_{B} Δ_i^c υ_i^cυ_i^cᵀ,   and likewise for η̃_c,

        with ``n_c`` for the rows of each class ``class_rows`` (a full batch has ``n_{B,c} = n_c``). ``ρ = 1`` is undamped (the stochastic code). The step of a class is shrunk to
        ``ρ_c = min(ρ, n_c/n_{B,c})`` so the kept fraction of the old factor never goes negative (a
        minibatch that holds more of a class's factors than ``n_c/ρ``, e.g. one class only at small
        ``N/|B|``): the new precision is then a non-negative combination of positive semi-definite terms
        (:func:`pep_gp.core.sep.damped_site_update`).

        Returns:
            ``(params, shared, accepted)``: the updated params, ``shared`` with the new cavities and the
            new ``q`` (both from one ``LᵀΛL`` per class; the prior factors kept: the hyper-parameters did
            not move, so a pullback of :meth:`step_shared` taken before the update still holds), and
            whether the update was taken — a result that is not finite is rejected and ``params`` come
            back unchanged.
        """
        if not self._holds_cavity(params):
            raise TypeError("site_update needs a NaturalFactor; a CholeskyFactor is trained by gradient")
        counts = self.factor_counts(class_rows)
        factor, ok = sep.damped_site_update(params.factor, stats.shift, stats.precision, stats.count, counts,
                                             damping)
        return (*self.with_factor(params, shared, factor, counts), ok)

    def with_factor(self, params: MultiClassParams, shared: StepShared, factor: NaturalFactor, counts):
        """``params`` with the tied factor ``factor``, and ``shared`` with its cavities and ``q`` (from one
        ``LᵀΛL`` per class; any subset of the classes, as :meth:`step_shared_at`)."""
        cavity, q = bank.gaussians_at(shared.prior, factor, (self._cavity_scale(counts), 1.0))
        refreshed = shared._replace(cavity=jax.lax.stop_gradient(cavity), q=jax.lax.stop_gradient(q))
        return params._replace(factor=factor), refreshed

    # ----------------------------------------------------------------------------------------------
    def predict_latent(self, params: MultiClassParams, x, full_cov: bool = False):
        """``m*_c``, ``v*_c`` of eqs. (66)–(67) (noise included in ``κ``), ``[B, C]`` each; with ``full_cov``
        the mean ``[B, C]`` and the covariance ``[C, B, B]`` per class (:func:`pep_gp.core.bank.latent_moments`);
        the mean plus the classes' prior means ``m_c(x*)``."""
        prior = self.prior_factors(params)
        mean, spread = bank.latent_moments(self.sparse_gps(params), prior, bank.gaussians(prior, params.factor, 1.0),
                                           x, full_cov)
        return params.mean.plus_each(x, mean), spread

    predict_f = predict_latent  # the name every model's latent moments go by

    def predict(self, params: MultiClassParams, x):
        """Predictive log-probabilities ``log p(y* = c | x*)``, ``[B, C]`` (eq. 11/68; the softmax's
        ``log E[softmax(f*)]``)."""
        mean, var = self.predict_latent(params, x)
        return self.likelihood.predict(self, mean, var)


jax.tree_util.register_static(MultiClassGP)
