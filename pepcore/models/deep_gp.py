"""Deep Gaussian processes with approximate EP (seed004, Bui et al. 2016): the energy ``F = G + Σ_blocks L``.

Layer ``l`` maps its ``D_{l−1}``-dimensional input through ``G_l`` independent FITC sparse GPs (one per
output dimension, each with its own inducing inputs ``Z``, ARD RBF kernel and tied factor) plus Gaussian
noise ``σ_l²``; the last layer has one GP and the model's likelihood (Gaussian: the observation noise
``σ_L²``; probit: none, spec §3.6). Each layer is a bank of :mod:`pep_gp.core.bank` with ``G = G_l``; all N
tied factors of a GP are one Gaussian ``t(u)`` (the stored total ``Nθ₁``), so ``q ∝ p·t`` and the
cavity ``∝ p·t^{1−α/N}`` (spec §2.2, §2.4, with a Power-EP power α; 1 is the paper). The energy is

    F = Σ_{l,g} [φ(q) − φ(p) + (N/α)(φ(cav) − φ(q))] + (1/α) Σ_n log Z̃_n         (seed004 §4.2, boxed F)

(at α = 1: ``(1 − N)φ(q) + Nφ(cav) − φ(p)``), and ``log Z̃_n = log ∫ N(f; m_n, v_n) p(y_n|f)^α df`` with
``(m_n, v_n)`` the moments of the output GP at row ``n`` obtained by propagating moments through the
layers under the cavities (probabilistic-backprop style, seed004 §5 and App. D): layer 1 sees the fixed
row (:func:`pep_gp.core.bank.latent_marginals`), every later layer the diagonal Gaussian of the previous
layer's outputs plus its noise (:func:`pep_gp.core.psi_statistics.uncertain_input_marginals`). The minibatch
estimate scales the ``log Z̃`` sum by ``N/|B|`` (§2.3; the trainer's step does that). Prediction is the
same forward pass under ``q`` (§7). With one layer this is exactly :class:`pep_gp.core.models.power_ep.PowerEPSparseGP`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank
from ..initialisation import kmeans_inducing, median_lengthscale
from ..kernels import BatchedARDSquaredExponential
from ..likelihoods import Gaussian, scaled_log_tilted
from ..parameters import LOG, constrained, unconstrained
from ..psi_statistics import uncertain_input_marginals

KMEANS_ROWS = 20_000  # above this many rows layer 1's inducing inputs are random rows, not k-means (spec §5.3)
UPPER_LOG_LENGTHSCALE = 1.0  # layers ≥ 2 start with log ℓ = 1 and Z on the diagonal of [−1, 1]^D (spec §5.3)
UPPER_FACTOR_SCALE = 0.1  # their random tied factors are 10× smaller than layer 1's (spec §5.3)


class LayerParams(NamedTuple):
    """One layer: ``G`` sparse GPs (hyper-parameters ``[G, ·]``, or ``[1, ·]`` shared by the layer) and
    the noise of its outputs (a hidden layer's Gaussian noise, or the model's likelihood for the last)."""

    raw_lengthscales: jnp.ndarray  # log ℓ, [G or 1, D_in]
    raw_variance: jnp.ndarray  # log σ_f², [G or 1]
    inducing: jnp.ndarray  # Z, [G, M, D_in]
    factor_shift: jnp.ndarray  # η = Nθ₁'s linear part, [G, M]
    factor_chol: jnp.ndarray  # L with Λ = LLᵀ: strictly lower part as is, diagonal as log (spec §2.4), [G, M, M]
    likelihood: dict  # the outputs' noise: Gaussian params (hidden layers), the model's likelihood (last)

    BIJECTIONS = {"raw_lengthscales": ("lengthscales", LOG), "raw_variance": ("variance", LOG)}


class DeepGPParams(NamedTuple):
    """The trainable state: the layers, input to output."""

    layers: tuple  # of LayerParams


class StepShared(NamedTuple):
    """Per layer, what every block of a step needs (O(Σ_l G_l·M³)): ``chol(K)`` and the cavities."""

    priors: tuple  # of bank.PriorFactors
    cavities: tuple  # of bank.Gaussians


def tied_factor(layer: LayerParams) -> bank.CholeskyFactor:
    """The layer's tied factors as a bank's, ``L = tril(raw, −1) + diag(exp(diag raw))``: the reference
    code's log-diagonal (spec §2.4), so that Adam grows the factor's precision geometrically."""
    raw = layer.factor_chol
    diagonal = jnp.exp(jnp.diagonal(raw, axis1=-2, axis2=-1))
    return bank.CholeskyFactor(layer.factor_shift, jnp.tril(raw, -1) + diagonal[..., None] * jnp.eye(raw.shape[-1]))


def _random_factor(rng: np.random.Generator, width: int, num_inducing: int, scale: float) -> tuple:
    """The reference code's random tied factor (spec §5.3): ``η`` and the stored ``L`` (log-diagonal)
    with ``N(0, scale²)`` entries."""
    raw = np.tril(scale * rng.normal(size=(width, num_inducing, num_inducing)))
    return jnp.asarray(scale * rng.normal(size=(width, num_inducing))), jnp.asarray(raw)


ALPHA_FLOOR = 1e-4
"""The smallest Power-EP power :class:`DeepGP` accepts. The energy's ``(N/α)(φ(cav) − φ(q))`` and ``(1/α) log Z̃``
cancel catastrophically as ``α → 0`` (its rounding error grows like ``1/α``; 1.7e-2 at ``α = 1e-12``). Measured
as the residual of a local fit in ``α`` (tests/pepcore/test_deep_gp.py, an energy of −41.7): below 1e-9 at the
floor as at ``α = 1e-2``, more than ten times that at a hundredth of the floor."""


@dataclass(frozen=True)
class DeepGP:
    """Deep GP trained with approximate EP (static configuration; the state is :class:`DeepGPParams`).

    Args:
        likelihood: the output's likelihood (:class:`~pep_gp.core.likelihoods.Gaussian` or ``Probit``).
        alpha: the Power-EP power, in [:data:`ALPHA_FLOOR`, 1]; 1 is seed004's approximate EP.
        jitter: relative jitter on every ``K_uu`` (the reference code adds 1e-6, spec §8.4).

    Example:
        >>> model = DeepGP(Gaussian(), alpha=1.0)
        >>> x = jax.random.normal(jax.random.key(0), (30, 2)); y = jnp.sin(x[:, 0])
        >>> params = model.init(x, hidden_dims=(2,), num_inducing=5)
        >>> bool(jnp.isfinite(model.energy(params, x, y)))
        True
    """

    likelihood: Any
    alpha: float = 1.0
    jitter: float = 1e-6

    def __post_init__(self):
        if not ALPHA_FLOOR <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [{ALPHA_FLOOR:g}, 1] (below {ALPHA_FLOOR:g} the energy cancels "
                             f"catastrophically); got {self.alpha}")

    def layer_bank(self, layer: LayerParams) -> bank.Bank:
        """The constrained GPs of one layer, shared hyper-parameters broadcast to every GP."""
        values = constrained(layer)
        width, _, dims = layer.inducing.shape
        variance = jnp.broadcast_to(values["variance"], (width,))
        kernel = BatchedARDSquaredExponential(jnp.broadcast_to(values["lengthscales"], (width, dims)), variance)
        return bank.Bank(kernel, layer.inducing, self.jitter * variance)

    # ----------------------------------------------------------------------------------------------
    def init(self, x, hidden_dims: tuple = (), num_inducing: int = 100, *, likelihood_params: dict | None = None,
             noise_variance: float = 0.01, share_hypers: bool = False, seed: int = 0) -> DeepGPParams:
        """The reference code's starting state (spec §5.3) for standardised ``x`` ``[N, D]``.

        Layer 1: k-means inducing inputs (random rows above 20,000 rows), lengthscales the median
        pairwise distance, ``σ_f² = 1`` (= var(y) for standardised targets). Later layers: ``ℓ = e``,
        ``σ_f² = 1`` and the inducing inputs on the diagonal ``linspace(−1, 1, M)``. Every GP of a
        layer starts from the same ``Z``; hidden noise ``noise_variance`` (0.01 = (0.1·std y)²); random
        tied factors, 10× smaller above layer 1.
        """
        x = np.asarray(x, dtype=float)
        rng = np.random.default_rng(seed)
        if x.shape[0] > KMEANS_ROWS:
            first_z = x[rng.choice(x.shape[0], num_inducing, replace=False)]
        else:
            first_z = kmeans_inducing(x, num_inducing, seed)
        widths, inputs = (*hidden_dims, 1), (x.shape[1], *hidden_dims)
        layers = []
        for index, (width, dims) in enumerate(zip(widths, inputs)):
            first = index == 0
            z = first_z if first else np.repeat(np.linspace(-1.0, 1.0, num_inducing)[:, None], dims, axis=1)
            log_ell = np.log(2.0 * median_lengthscale(x, seed)) if first else UPPER_LOG_LENGTHSCALE
            shift, chol = _random_factor(rng, width, num_inducing, 1.0 if first else UPPER_FACTOR_SCALE)
            hypers = 1 if share_hypers else width
            last = index == len(widths) - 1
            noise = (self.likelihood.init_params() if likelihood_params is None else likelihood_params) if last \
                else Gaussian.init_params(noise_variance)
            layers.append(LayerParams(
                **unconstrained(LayerParams, lengthscales=jnp.exp(jnp.full((hypers, dims), log_ell)),
                                variance=jnp.ones(hypers)),
                inducing=jnp.asarray(np.broadcast_to(z, (width, *z.shape)).copy()),
                factor_shift=shift, factor_chol=chol, likelihood=noise,
            ))
        return DeepGPParams(tuple(layers))

    # ----------------------------------------------------------------------------------------------
    def step_shared(self, params: DeepGPParams, n_total) -> StepShared:
        """Every layer's ``chol(K)`` and cavity ``p·t^{1−α/N}`` (spec §2.2; §8.1: the cavity, not q)."""
        priors = tuple(bank.prior_factors(self.layer_bank(layer)) for layer in params.layers)
        scale = 1.0 - self.alpha / n_total
        cavities = tuple(bank.gaussians(prior, tied_factor(layer), scale)
                         for prior, layer in zip(priors, params.layers))
        return StepShared(priors, cavities)

    def global_energy(self, params: DeepGPParams, shared: StepShared, n_total):
        """``Σ_{l,g} φ(q) − φ(p) + (N/α)(φ(cav) − φ(q))``, the log-normaliser part of the boxed ``F``."""
        return sum(bank.power_ep_global_term(bank.gaussians(prior, tied_factor(layer), 1.0), cavity, n_total,
                                             self.alpha)
                   for prior, cavity, layer in zip(shared.priors, shared.cavities, params.layers))

    def data_energy(self, params: DeepGPParams, shared: StepShared, x, y, mask):
        """``Σ_n mask_n (1/α) log Z̃_n`` of one block, moments propagated under the cavities; rows with
        ``mask = 0`` add exactly zero to the value and the gradient."""
        mean, var = self.propagate(params, shared.priors, shared.cavities, x)
        terms = scaled_log_tilted(self.likelihood, params.layers[-1].likelihood, y, mean, var, self.alpha)
        return jnp.sum(jnp.where(mask, terms, 0.0))

    def energy(self, params: DeepGPParams, x, y):
        """The whole energy ``F = G + L`` on in-memory data (all rows, no minibatching)."""
        n = x.shape[0]
        shared = self.step_shared(params, n)
        return self.global_energy(params, shared, n) + self.data_energy(params, shared, x, y, jnp.ones(n, bool))

    # ----------------------------------------------------------------------------------------------
    def propagate(self, params: DeepGPParams, priors, gaussians, x):
        """Mean and variance ``[B]`` of the output GP's latent ``f_L`` at rows ``x``, each layer's ``u``
        distributed as ``gaussians`` (cavities in training, ``q`` in prediction): one moment-matching
        pass (seed004 App. D eqs. 1–7); hidden outputs are diagonal Gaussians with their noise added."""
        first = params.layers[0]
        marginals = bank.latent_marginals(self.layer_bank(first), priors[0], gaussians[0], x)
        for previous, layer, prior, gaussian in zip(params.layers[:-1], params.layers[1:], priors[1:], gaussians[1:]):
            var = marginals.var + Gaussian.noise_variance(previous.likelihood)
            marginals = uncertain_input_marginals(self.layer_bank(layer), prior, gaussian, marginals.mean, var)
        return marginals.mean[:, 0], marginals.var[:, 0]

    def posteriors(self, params: DeepGPParams) -> tuple[tuple, tuple]:
        """Every layer's prior factors and ``q``."""
        priors = tuple(bank.prior_factors(self.layer_bank(layer)) for layer in params.layers)
        return priors, tuple(bank.gaussians(p, tied_factor(layer), 1.0) for p, layer in zip(priors, params.layers))

    def predict_f(self, params: DeepGPParams, x):
        """Mean and variance of ``f_L`` at ``x`` from one forward pass under ``q`` (seed004 §7)."""
        return self.propagate(params, *self.posteriors(params), x)

    def predict_y(self, params: DeepGPParams, x):
        """The likelihood's predictive distribution at ``x`` (mean/variance, or class-1 probability)."""
        mean, var = self.predict_f(params, x)
        return self.likelihood.predict(params.layers[-1].likelihood, mean, var)


jax.tree_util.register_static(DeepGP)
