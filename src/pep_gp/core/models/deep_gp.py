"""Deep Gaussian processes with approximate EP (Bui et al. 2016): the energy ``F = G + Σ_blocks L``.

Layer ``l`` maps its ``D_{l−1}``-dimensional input through ``G_l`` independent FITC sparse GPs (one per
output dimension, each with its own inducing inputs ``Z``, kernel and tied factor) plus Gaussian
noise ``σ_l²``; the last layer has one GP and the model's likelihood (Gaussian: the observation noise
``σ_L²``; probit: none, as the authors' code). Each layer is a bank of :mod:`pep_gp.core.bank` with
``G = G_l``; all N tied factors of a GP are one Gaussian ``t(u)`` (the stored total ``Nθ₁``, as the
authors' code), so ``q ∝ p·t`` and the cavity ``∝ p·t^{1−α/N}`` (Bui et al. 2016, §4.2, with a Power-EP
power α; 1 is the paper). The energy is

    F = Σ_{l,g} [φ(q) − φ(p) + (N/α)(φ(cav) − φ(q))] + (1/α) Σ_n log Z̃_n       (Bui et al. 2016, §4.2, boxed)

(at α = 1: ``(1 − N)φ(q) + Nφ(cav) − φ(p)``), and ``log Z̃_n = log ∫ N(f; m_n, v_n) p(y_n|f)^α df`` with
``(m_n, v_n)`` the moments of the output GP at row ``n`` obtained by propagating moments through the
layers under the cavities (probabilistic-backprop style, Bui et al. 2016, §5 and App. D): layer 1 sees
the fixed row (:func:`pep_gp.core.psi_statistics.fixed_input_marginals`), every later layer the diagonal
Gaussian of the previous layer's outputs plus its noise: in closed form for the ARD squared exponential, the
paper's kernel (:func:`pep_gp.core.psi_statistics.uncertain_input_marginals`), by quadrature over the input
for any other kernel of :mod:`pep_gp.core.kernels` (:func:`pep_gp.core.input_quadrature.quadrature_input_marginals`,
the same ``points`` per dimension in every layer). What a layer's rows need from its
``u``-distribution is computed once per step (:class:`LayerInputs`). The minibatch estimate scales the
``log Z̃`` sum by ``N/|B|`` (§6; the trainer's step does that). Prediction is the same forward pass under
``q`` (§7), or the Monte Carlo mixture of :meth:`DeepGP.predict_mixture`. With one layer this is exactly
:class:`pep_gp.core.models.power_ep.PowerEPSparseGP`.

The output GP may have a prior mean ``m`` (``params.mean``, in the model's units, a function of the last layer's
input): ``f_L = m(h) + g(h)`` with ``g`` the GP above, whose moments the pass gives. The output may also have a mean
of the model's own input ``x`` past the hidden layers (``params.input_mean``, a skip connection of the mean only, as
the input-connected deep GPs of Duvenaud et al. 2014 feed ``x`` forward): ``f_L = m_x(x) + m(h) + g(h)``; ``x`` is
fixed, so ``m_x(x)`` shifts the output's mean and nothing else, for any mean function (:func:`with_input_mean`).
With a fixed input (one layer) ``m(x)`` is added to the mean; with a Gaussian input ``h ~ N(μ, S)`` (``S``
diagonal) the moments of ``m(h)`` and its covariance with ``g`` are added in closed form for a constant or a linear
mean (:func:`with_output_mean`). The hidden layers keep the zero mean (Bui et al. 2016; Salimbeni & Deisenroth 2017
use the identity there). A multi-class deep GP's ``C`` output GPs each have a mean of their own
(:meth:`~pep_gp.core.means.MeanFunction.stacked`), the same closed forms per class. Each layer may have a kernel of
its own (:meth:`DeepGP.init`); a kernel's priors add ``log p(θ)`` over its layer's values to ``G``, and the model's
``priors`` (the Gaussian noise of every layer that has one) theirs (a MAP fit, :mod:`pep_gp.core.log_prior`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import bank
from ..initialisation import kmeans_inducing, median_lengthscale
from ..input_quadrature import DEFAULT_POINTS, input_rule, quadrature_input_marginals
from ..kernels import Kernel, SquaredExponential
from ..likelihoods import Gaussian, scaled_log_tilted
from ..linalg import cholesky_and_inverse
from ..log_prior import with_log_prior
from ..means import Constant, Linear, MeanFunction, Zero
from ..parameters import Positive, on_device
from ..rowsum import row_chunked_sum
from ..psi_statistics import (Projected, cavities_and_posteriors, fixed_input_marginals, pair_terms,
                              projected_gaussians, trace_weights, uncertain_input_marginals)

KMEANS_ROWS = 20_000  # above this many rows layer 1's inducing inputs are random rows, not k-means (authors' code)
UPPER_LOG_LENGTHSCALE = 1.0  # layers ≥ 2 start with log ℓ = 1 and Z on the diagonal of [−1, 1]^D (authors' code)
UPPER_FACTOR_SCALE = 0.1  # their random tied factors are 10× smaller than layer 1's (authors' code)
DATA_CHUNK_ROWS = 32  # rows per chunk of the data term: [G, 32, M(M+1)/2] ψ₂ exponentials at a time


class LayerParams(NamedTuple):
    """One layer: ``G`` sparse GPs (hyper-parameters ``[G, ·]``, or ``[1, ·]`` shared by the layer) and
    the noise of its outputs (a hidden layer's Gaussian noise, or the model's likelihood for the last)."""

    kernel: Kernel  # hyper-parameters [G or 1, ·] (SE: ℓ [G or 1, D_in], σ_f² [G or 1])
    inducing: jnp.ndarray  # Z, [G, M, D_in]
    factor_shift: jnp.ndarray  # η = Nθ₁'s linear part, [G, M]
    factor_chol: jnp.ndarray  # L with Λ = LLᵀ: strict lower part as is, diagonal as log (authors' code), [G, M, M]
    likelihood: dict  # the outputs' noise: Gaussian params (hidden layers), the model's likelihood (last)


class DeepGPParams(NamedTuple):
    """The trainable state: the layers, input to output, and the output GP's prior mean (a function of the last
    layer's input; :class:`~pep_gp.core.means.Zero`, no leaves, by default)."""

    layers: tuple  # of LayerParams
    mean: MeanFunction = Zero()  # m of f_L = m_x(x) + m(h) + g(h)
    input_mean: MeanFunction = Zero()  # m_x of f_L = m_x(x) + m(h) + g(h): a function of the model's input rows


class LayerInputs(NamedTuple):
    """What the rows of one layer need from its ``u``-distribution (``q`` or the cavities), O(G·M³) and the
    same for every row: computed once per step."""

    prior: bank.PriorFactors  # chol(K) and its inverse
    gaussian: Projected  # a = K⁻¹m̂, P with K⁻¹V̂K⁻¹ = PᵀP, log-normaliser
    pairs: Any  # PairTerms of a squared-exponential layer with Gaussian inputs (not the first); else None


class StepShared(NamedTuple):
    """Every layer's :class:`LayerInputs` under the cavities, and ``φ(q) − φ(p)`` of every GP."""

    layers: tuple  # of LayerInputs
    posterior_log_normaliser: jnp.ndarray  # [Σ_l G_l], the GPs of all layers in order


def tied_factor(layer: LayerParams) -> bank.CholeskyFactor:
    """The layer's tied factors as a bank's, ``L = tril(raw, −1) + diag(exp(diag raw))``: the authors'
    code's log-diagonal, so that Adam grows the factor's precision geometrically."""
    raw = layer.factor_chol
    diagonal = jnp.exp(jnp.diagonal(raw, axis1=-2, axis2=-1))
    return bank.CholeskyFactor(layer.factor_shift, jnp.tril(raw, -1) + diagonal[..., None] * jnp.eye(raw.shape[-1]))


def _random_factor(rng: np.random.Generator, width: int, num_inducing: int, scale: float) -> tuple[np.ndarray, ...]:
    """The authors' code's random tied factor: ``η`` and the stored ``L`` (log-diagonal) with
    ``N(0, scale²)`` entries."""
    raw = np.tril(scale * rng.normal(size=(width, num_inducing, num_inducing)))
    return scale * rng.normal(size=(width, num_inducing)), raw


def _layer_kernel(kernel: Kernel | None, index: int, hypers: int, dims: int, log_ell: float) -> Kernel:
    """Layer ``index``'s starting kernel for ``hypers`` sets of hyper-parameters on ``dims`` inputs: ``kernel``
    (:meth:`~pep_gp.core.kernels.Kernel.bank`, an unset lengthscale ``exp(log_ell)``), default the ARD
    squared exponential of unit variance; ValueError naming the layer when ``kernel`` does not fit."""
    if kernel is None:
        return SquaredExponential(lengthscales=np.exp(np.full((hypers, dims), log_ell)), variance=np.ones(hypers))
    try:
        return kernel.bank(hypers, dims, np.exp(np.full(dims, log_ell)))
    except ValueError as error:
        raise ValueError(f"kernel of layer {index + 1} ({dims} inputs: "
                         f"{'the data' if index == 0 else 'the previous layer'}'s): {error}") from None


def layer_kernels(kernel: Kernel | Sequence[Kernel | None] | None, layers: int) -> tuple[Kernel | None, ...]:
    """The kernel of each of ``layers`` layers, input layer first: one kernel (or None, the default) for every
    layer, or a sequence of one per layer (GPflux's and GPyTorch's deep GPs build each layer with its own kernel);
    ValueError when a sequence has another length."""
    if kernel is None or isinstance(kernel, Kernel):
        return (kernel,) * layers
    kernels = tuple(kernel)
    if len(kernels) != layers:
        raise ValueError(f"kernel: one kernel for every layer, or a list of one per layer ({layers}: the "
                         f"{layers - 1} hidden layers' then the output's); got a list of {len(kernels)}")
    return kernels


def _concatenate(trees: list):
    """The layers' pytrees of per-GP arrays joined along the GP axis."""
    return jax.tree_util.tree_map(lambda *leaves: jnp.concatenate(leaves), *trees)


GAUSSIAN_INPUT_MEANS = (Zero, Constant, Linear)
"""The output means whose moments under a Gaussian input are closed forms (:func:`with_output_mean`): those a
deep GP with hidden layers takes."""


def check_output_mean(mean: MeanFunction, hidden_dims: tuple) -> None:
    """ValueError unless ``mean`` can be the output GP's of a deep GP with hidden layers ``hidden_dims``: any mean
    without them (the input is the fixed row), else one of :data:`GAUSSIAN_INPUT_MEANS`."""
    if hidden_dims and not isinstance(mean, GAUSSIAN_INPUT_MEANS):
        raise ValueError(f"mean function {mean.name!r}: a deep GP with hidden layers takes a constant or linear output "
                         "mean (its moments under the hidden layer's Gaussian are closed forms); a mean of one's own "
                         "needs hidden_dims=()")


def plus_output_mean(mean: MeanFunction, inputs, values, each: bool = False):
    """``values + m(inputs)`` for the output GPs' means ``values`` ``[B, G]`` at fixed rows ``inputs`` ``[B, D]``:
    one output's mean ``m`` (``G = 1``) or, with ``each``, a :meth:`~pep_gp.core.means.MeanFunction.stacked` mean
    of one ``m_g`` per output."""
    return mean.plus_each(inputs, values) if each else mean.plus(inputs, values[:, 0])[:, None]


def with_output_mean(mean: MeanFunction, layer: Callable, inputs, input_var=None, each: bool = False) -> bank.Marginals:
    """The moments ``[B, G]`` of ``f_g = m_g(h) + g_g(h)``, the ``g``'s being ``layer(inputs)`` (a function of the
    input's mean), at fixed rows ``h = inputs`` (``input_var`` None) or for ``h ~ N(inputs, diag input_var)``; one
    output (``G = 1``) with its mean ``m``, or, with ``each``, a :meth:`~pep_gp.core.means.MeanFunction.stacked` mean
    of one ``m_g`` per output (a multi-class deep GP's, one per class).

    Fixed rows, or a constant: ``m(h)`` is added to the mean. A linear ``m(h) = wᵀh + b`` of a Gaussian input adds
    ``wᵀμ + b`` to the mean and ``wᵀSw + 2 Cov(wᵀh, g)`` to the variance, where
    ``Cov(wᵀh, g) = Cov(wᵀh, E[g|h]) = (Sw)ᵀ E[∇_h E[g|h]] = (Sw)ᵀ ∇_μ E[g]`` (Stein's lemma; the derivative of
    the propagated mean along ``Sw``, one forward-mode pass through the layer; with ``each``, one pass per input
    dimension gives ``∇_μ E[g_g]`` of every output). The zero mean returns ``layer(inputs)`` itself, the same bits."""
    if isinstance(mean, Zero):
        return layer(inputs)
    shifted = lambda values: plus_output_mean(mean, inputs, values, each)
    if input_var is None or isinstance(mean, Constant):
        marginals = layer(inputs)
        return marginals._replace(mean=shifted(marginals.mean))
    if each:
        marginals = layer(inputs)
        along = lambda axis: jax.jvp(layer, (inputs,), (jnp.broadcast_to(axis, inputs.shape),))[1].mean
        gradients = jax.vmap(along)(jnp.eye(inputs.shape[-1], dtype=inputs.dtype))  # ∂E[g_g]/∂μ_d, [D, B, G]
        slope = jnp.einsum("bd,gd,dbg->bg", input_var, mean.weights, gradients)  # (S w_g)ᵀ ∇_μ E[g_g]
        spread = jnp.einsum("bd,gd->bg", input_var, mean.weights**2)  # w_gᵀ S w_g
        return bank.Marginals(shifted(marginals.mean), marginals.var + spread + 2.0 * slope)
    direction = input_var * mean.weights  # S w, [B, D]
    marginals, slope = jax.jvp(layer, (inputs,), (direction,))
    spread = jnp.sum(direction * mean.weights, axis=-1)  # wᵀSw
    return bank.Marginals(shifted(marginals.mean), marginals.var + (spread + 2.0 * slope.mean[:, 0])[:, None])


def with_input_mean(mean: MeanFunction, x, values, each: bool = False):
    """``values + m_x(x)`` for the output GPs' means ``values`` ``[..., B, G]`` (a forward pass's, or each Monte Carlo
    path's) at the model's input rows ``x`` ``[B, D]``: the mean of the input past the hidden layers (module
    docstring), one output's or, with ``each``, one per output GP (:meth:`~pep_gp.core.means.MeanFunction.stacked`).
    The zero mean returns ``values`` themselves, the same bits."""
    if isinstance(mean, Zero):
        return values
    return values + (mean.each(x) if each else mean(x)[:, None])


def least_squares_mean(x, y) -> Linear:
    """The linear mean ``wᵀx + b`` of least squares on the rows ``x`` ``[n, D]`` and targets ``y`` ``[n]`` (the
    minimum-norm solution where columns are collinear), its parameters float64 arrays (in pep's float64 scope): where
    a regressor's linear mean of the input rows starts (:func:`with_input_mean`), so that its GPs begin on what a
    line leaves unexplained."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    solution = np.linalg.lstsq(np.column_stack([x, np.ones(x.shape[0])]), y, rcond=None)[0]
    return jax.tree_util.tree_map(lambda leaf: on_device(leaf, np.float64), Linear(weights=solution[:-1], bias=solution[-1]))


class Mixture(NamedTuple):
    """``S`` equally weighted Gaussian components of ``f_L``'s predictive per row; a multi-class deep GP's
    component is ``C`` independent Gaussians, one per class's output GP (the classes' ``f_c`` given one path
    ``h_{L−1}``)."""

    mean: jnp.ndarray  # [S, B] (one output GP), [S, B, C] (one per class)
    var: jnp.ndarray  # as mean


ALPHA_FLOOR = 1e-4
"""The smallest Power-EP power :class:`DeepGP` accepts. The energy's ``(N/α)(φ(cav) − φ(q))`` and ``(1/α) log Z̃``
cancel catastrophically as ``α → 0`` (its rounding error grows like ``1/α``; 1.7e-2 at ``α = 1e-12``). Measured
as the residual of a local fit in ``α`` (tests/core/test_deep_gp.py, an energy of −41.7): below 1e-9 at the
floor as at ``α = 1e-2``, more than ten times that at a hundredth of the floor."""


@dataclass(frozen=True)
class DeepGP:
    """Deep GP trained with approximate EP (static configuration; the state is :class:`DeepGPParams`).

    Args:
        likelihood: the output's likelihood (:class:`~pep_gp.core.likelihoods.Gaussian` or ``Probit``).
        alpha: the Power-EP power, in [:data:`ALPHA_FLOOR`, 1]; 1 is Bui et al.'s approximate EP.
        jitter: relative jitter on every ``K_uu`` (the authors' code adds 1e-6).
        quadrature_points: Gauss–Hermite points per input dimension of a layer with Gaussian inputs whose
            kernel is not the squared exponential (:func:`pep_gp.core.input_quadrature.input_rule`).
        priors: priors on the layers' Gaussian noise, ``(("raw_noise_variance", prior),)`` (every layer that has
            one: the hidden layers' and a Gaussian output's), added to ``G`` with the kernels' own priors
            (:func:`pep_gp.core.log_prior.with_log_prior`); none by default.

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
    quadrature_points: int = DEFAULT_POINTS
    priors: tuple = ()  # ((leaf name, prior), ...): pep_gp.core.priors

    def __post_init__(self):
        if self.quadrature_points < 2:
            raise ValueError(f"quadrature_points must be at least 2; got {self.quadrature_points}")
        if not ALPHA_FLOOR <= self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in [{ALPHA_FLOOR:g}, 1] (below {ALPHA_FLOOR:g} the energy cancels "
                             f"catastrophically); got {self.alpha}")

    def layer_bank(self, layer: LayerParams) -> bank.Bank:
        """The constrained GPs of one layer, shared hyper-parameters broadcast to every GP."""
        width = layer.inducing.shape[0]
        kernel = jax.tree_util.tree_map(
            lambda param: Positive(jnp.broadcast_to(param.raw, (width, *param.raw.shape[1:])), param.fixed),
            layer.kernel, is_leaf=lambda node: isinstance(node, Positive))
        return bank.Bank(kernel, layer.inducing, self.jitter * kernel.amplitude())

    @property
    def output_width(self) -> int:
        """GPs in the last layer: one (its likelihood's latent ``f_L``)."""
        return 1

    def data_size(self, y):
        """The data's size as :meth:`step_shared` and :meth:`global_energy` take it: ``N``, the rows of ``y``."""
        return y.shape[0]

    def factor_counts(self, params: DeepGPParams, n_total):
        """The number of tied factors of each GP: the ``N`` rows' likelihoods, the same for every GP."""
        return n_total

    # ----------------------------------------------------------------------------------------------
    def init(self, x, hidden_dims: tuple = (), num_inducing: int = 100, *, likelihood_params: dict | None = None,
             noise_variance: float = 0.01, share_hypers: bool = False, seed: int = 0,
             kernel: Kernel | Sequence[Kernel | None] | None = None, mean: MeanFunction | None = None,
             input_mean: MeanFunction | None = None) -> DeepGPParams:
        """The authors' code's starting state (Bui et al. 2016, §8.1) for standardised ``x`` ``[N, D]``.

        Layer 1: k-means inducing inputs (random rows above 20,000 rows), lengthscales the median
        pairwise distance, ``σ_f² = 1`` (= var(y) for standardised targets). Later layers: ``ℓ = e``,
        ``σ_f² = 1`` and the inducing inputs on the diagonal ``linspace(−1, 1, M)``. Every GP of a
        layer starts from the same ``Z``; hidden noise ``noise_variance`` (0.01 = (0.1·std y)²); random
        tied factors, 10× smaller above layer 1. Every leaf is a strongly typed float64 array, so the
        programs compiled for the first step serve every later one.

        ``kernel`` (default the ARD squared exponential above) is every layer's, or a sequence of one per layer
        (input layer first; None in it the default; :func:`layer_kernels`): its values as given, a lengthscale left
        unset the layer's start above; a value per column or ``active_dims`` must fit the inputs of the layers it is
        in (the data's columns, then the widths ``hidden_dims``). ``mean``: the output GP's prior mean at its
        starting values (default :class:`~pep_gp.core.means.Zero`; :func:`check_output_mean`), one copy with
        parameters of its own per output GP when there are several (:meth:`~pep_gp.core.means.MeanFunction.stacked`).
        ``input_mean``: the output's mean of the input rows past the hidden layers (default zero, module docstring),
        any mean function, built for the data's columns as ``mean`` is for its inputs.
        """
        mean = Zero() if mean is None else mean
        input_mean = Zero() if input_mean is None else input_mean
        check_output_mean(mean, hidden_dims)
        x = np.asarray(x, dtype=np.float64)
        rng = np.random.default_rng(seed)
        if x.shape[0] > KMEANS_ROWS:
            first_z = x[rng.choice(x.shape[0], num_inducing, replace=False)]
        else:
            first_z = kmeans_inducing(x, num_inducing, seed)
        widths, inputs = (*hidden_dims, self.output_width), (x.shape[1], *hidden_dims)
        kernels = layer_kernels(kernel, len(widths))
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
                kernel=_layer_kernel(kernels[index], index, hypers, dims, log_ell),
                inducing=np.broadcast_to(z, (width, *z.shape)), factor_shift=shift, factor_chol=chol,
                likelihood=noise,
            ))
        return jax.tree_util.tree_map(lambda leaf: on_device(leaf, np.float64),
                                      DeepGPParams(tuple(layers), self._output_mean(mean, inputs[-1]),
                                                   self._output_mean(input_mean, x.shape[1])))

    def _output_mean(self, mean: MeanFunction, dims: int) -> MeanFunction:
        """``mean`` for the output GPs' ``dims`` inputs: its own for one output, one per output GP for several."""
        return mean.build(dims) if self.output_width == 1 else mean.stacked(self.output_width, dims)

    # ----------------------------------------------------------------------------------------------
    def _stacked(self, params: DeepGPParams) -> tuple[bank.PriorFactors, bank.CholeskyFactor]:
        """``chol(K)``, its inverse and the tied factors of every GP of every layer stacked along one axis
        (every layer has the same ``M``), so that each factorisation runs as one loop over all GPs."""
        covariances = jnp.concatenate([bank.prior_covariances(self.layer_bank(layer)) for layer in params.layers])
        return (bank.PriorFactors(*cholesky_and_inverse(covariances)),
                _concatenate([tied_factor(layer) for layer in params.layers]))

    def layer_inputs(self, params: DeepGPParams, scale) -> tuple[LayerInputs, ...]:
        """Every layer's :class:`LayerInputs` for the Gaussians ``p·t^scale`` (1: ``q``)."""
        prior, factor = self._stacked(params)
        return self._split(params, prior, projected_gaussians(prior, factor, scale))

    def _split(self, params: DeepGPParams, prior: bank.PriorFactors, gaussian: Projected) -> tuple[LayerInputs, ...]:
        """The stacked GPs' factors and Gaussians cut into the layers' :class:`LayerInputs`."""
        ends = np.cumsum([layer.inducing.shape[0] for layer in params.layers])
        inputs = []
        for index, (start, end) in enumerate(zip((0, *ends[:-1]), ends)):
            part = lambda tree: jax.tree_util.tree_map(lambda leaf: leaf[start:end], tree)
            layer_prior, layer_gaussian = part(prior), part(gaussian)
            closed_form = index > 0 and isinstance(params.layers[index].kernel, SquaredExponential)
            pairs = (pair_terms(self.layer_bank(params.layers[index]), trace_weights(layer_prior, layer_gaussian))
                     if closed_form else None)
            inputs.append(LayerInputs(layer_prior, layer_gaussian, pairs))
        return tuple(inputs)

    def step_shared(self, params: DeepGPParams, n_total) -> StepShared:
        """Every layer's :class:`LayerInputs` under the cavities ``p·t^{1−α/N}`` (Bui et al. 2016, §4.2: the
        cavity, not ``q``, inside ``log Z̃``), and the posteriors' log-normalisers, from one loop of
        factorisations over all GPs."""
        prior, factor = self._stacked(params)
        cavity, posterior = cavities_and_posteriors(prior, factor, 1.0 - self.alpha / self.factor_counts(params, n_total))
        return StepShared(self._split(params, prior, cavity), posterior)

    def global_energy(self, params: DeepGPParams, shared: StepShared, n_total):
        """``Σ_{l,g} φ(q) − φ(p) + (N/α)(φ(cav) − φ(q))``, the log-normaliser part of the boxed ``F`` (``N`` the
        GP's :meth:`factor_counts`), plus ``log p(θ)`` of the kernels' priors and the model's ``priors``."""
        posterior = shared.posterior_log_normaliser
        cavity = jnp.concatenate([inputs.gaussian.log_normaliser for inputs in shared.layers])
        value = jnp.sum(posterior + (self.factor_counts(params, n_total) / self.alpha) * (cavity - posterior))
        return with_log_prior(value, params, self.priors)

    def data_energy(self, params: DeepGPParams, shared: StepShared, x, y, mask):
        """``Σ_n mask_n (1/α) log Z̃_n`` of one block, moments propagated under the cavities; rows with
        ``mask = 0`` add exactly zero to the value and the gradient. Evaluated :data:`DATA_CHUNK_ROWS`
        rows at a time, each chunk's gradient with its value (:func:`pep_gp.core.rowsum.row_chunked_sum`):
        the chunk's ψ₂ exponentials are computed once and never held for all rows."""
        return row_chunked_sum(self._rows_energy, DATA_CHUNK_ROWS)((params, shared), x, y, mask)

    def _rows_energy(self, inputs: tuple[DeepGPParams, StepShared], x, y, mask):
        params, shared = inputs
        mean, var = self.propagate(params, shared.layers, x)
        terms = scaled_log_tilted(self.likelihood, params.layers[-1].likelihood, y, mean, var, self.alpha)
        return jnp.sum(jnp.where(mask, terms, 0.0))

    def energy(self, params: DeepGPParams, x, y):
        """The whole energy ``F = G + L`` on in-memory data (all rows, no minibatching)."""
        size = self.data_size(y)
        shared = self.step_shared(params, size)
        return self.global_energy(params, shared, size) + self.data_energy(params, shared, x, y,
                                                                         jnp.ones(x.shape[0], bool))

    # ----------------------------------------------------------------------------------------------
    def propagate(self, params: DeepGPParams, inputs: tuple[LayerInputs, ...], x):
        """Mean and variance ``[B]`` of the output GP's latent ``f_L`` at rows ``x`` (:meth:`output_marginals`)."""
        marginals = self.output_marginals(params, inputs, x)
        return marginals.mean[:, 0], marginals.var[:, 0]

    def output_marginals(self, params: DeepGPParams, inputs: tuple[LayerInputs, ...], x) -> bank.Marginals:
        """Mean and variance ``[B, G_L]`` of the last layer's GPs at rows ``x``, each layer's ``u``
        distributed as in ``inputs`` (cavities in training, ``q`` in prediction): one moment-matching
        pass (Bui et al. 2016, App. D eqs. 1–7); hidden outputs are diagonal Gaussians with their noise added.
        The output GPs' prior mean is added to the last layer's moments (:func:`with_output_mean`), and the mean of
        the input rows to their mean (:func:`with_input_mean`)."""
        each = self.output_width > 1  # one mean per output GP (MultiClassDeepGP)
        first = inputs[0]
        first_layer = lambda rows: fixed_input_marginals(self.layer_bank(params.layers[0]), first.prior,
                                                         first.gaussian, rows)
        skip = lambda marginals: marginals._replace(mean=with_input_mean(params.input_mean, x, marginals.mean, each))
        if len(params.layers) == 1:
            return skip(with_output_mean(params.mean, first_layer, x, each=each))
        marginals = first_layer(x)
        for previous, layer, layer_in in zip(params.layers[:-2], params.layers[1:-1], inputs[1:-1]):
            var = marginals.var + Gaussian.noise_variance(previous.likelihood)
            marginals = self._gaussian_input_marginals(layer, layer_in, marginals.mean, var)
        var = marginals.var + Gaussian.noise_variance(params.layers[-2].likelihood)
        last_layer = lambda mean: self._gaussian_input_marginals(params.layers[-1], inputs[-1], mean, var)
        return skip(with_output_mean(params.mean, last_layer, marginals.mean, var, each=each))

    def _gaussian_input_marginals(self, layer: LayerParams, layer_in: LayerInputs, mean, var) -> bank.Marginals:
        """A layer's output moments ``[B, G]`` for the inputs ``N(mean, diag var)`` ``[B, D]``: the squared
        exponential's closed forms, any other kernel's quadrature over the input."""
        gps = self.layer_bank(layer)
        if layer_in.pairs is not None:  # the squared exponential's closed forms
            return uncertain_input_marginals(gps, layer_in.gaussian, layer_in.pairs, mean, var)
        rule = input_rule(layer.kernel, var.shape[-1], self.quadrature_points)
        return quadrature_input_marginals(gps, layer_in.prior, layer_in.gaussian, rule, mean, var)

    def posteriors(self, params: DeepGPParams) -> tuple[LayerInputs, ...]:
        """Every layer's :class:`LayerInputs` under ``q``."""
        return self.layer_inputs(params, 1.0)

    def predict_f(self, params: DeepGPParams, x, full_cov: bool = False):
        """Mean and variance of ``f_L`` at ``x`` from one forward pass under ``q`` (Bui et al. 2016, §7): the
        moments of the Gaussian projection after each layer, not those of ``f_L``'s own (non-Gaussian)
        predictive, which :meth:`predict_mixture` approximates. ``full_cov`` is refused: the pass keeps
        each row's marginal only."""
        if full_cov:
            raise ValueError("a deep GP's f_L is not Gaussian and its moment-matched pass is per row: no full "
                             "covariance or joint draws (use predict_mixture for per-row draws)")
        return self.propagate(params, self.posteriors(params), x)

    def predict_y(self, params: DeepGPParams, x):
        """The likelihood's predictive distribution at ``x`` (mean/variance, or class-1 probability)."""
        mean, var = self.predict_f(params, x)
        return self.likelihood.predict(params.layers[-1].likelihood, mean, var)

    # ----------------------------------------------------------------------------------------------
    def predict_mixture(self, params: DeepGPParams, x, key, samples: int, common_draws: bool = False) -> Mixture:
        """``f_L``'s predictive at ``x`` under ``q`` as a mixture of ``samples`` Gaussians, without the
        Gaussian projection after each layer.

        Given its input, a layer's outputs are independent Gaussians once its ``u ~ q(u)`` is integrated
        out (:func:`~pep_gp.core.psi_statistics.fixed_input_marginals`), and each ``u`` enters a row's
        predictive once, so ``p(f_L|x) = ∫ Π_l N(h_l; m_l(h_{l−1}), v_l(h_{l−1}) + σ_l²) dh_{1:L−1}``
        exactly; its Monte Carlo estimate draws ``samples`` paths ``h_1 → … → h_{L−1}`` per row (one
        Gaussian draw per hidden layer) and keeps the last layer's Gaussian for each path, its mean plus the
        output's prior mean at the path's ``h_{L−1}``. As GPyTorch's deep GPs predict (Salimbeni & Deisenroth
        2017), for the approximate-EP model.

        Args:
            params: the fitted parameters.
            x: rows ``[B, D]``.
            key: a ``jax.random`` key (the same key gives the same mixture).
            samples: mixture components ``S``.
            common_draws: the same standard-normal draws for every row (common random numbers): a row's
                mixture then depends on that row and the key only, not on the other rows of ``x`` nor on
                its position among them (what streamed predictions need); False: independent draws per row.

        Returns:
            The components' means and variances, ``[S, B]`` each.
        """
        mixture = self.output_mixture(params, x, key, samples, common_draws)
        return Mixture(mixture.mean[..., 0], mixture.var[..., 0])

    def output_mixture(self, params: DeepGPParams, x, key, samples: int, common_draws: bool = False) -> Mixture:
        """The last layer's ``G_L`` GPs at ``x`` under ``q`` as :meth:`predict_mixture`'s ``samples`` paths, each
        GP's Gaussian per path with its prior mean and the mean of the input rows added: ``[S, B, G_L]`` each (same
        arguments)."""
        inputs = self.posteriors(params)
        hidden = x[None]  # [1, B, D]: the first layer's input is the same for every path
        for layer, layer_in in zip(params.layers[:-1], inputs):
            mean, var = self._layer_at_rows(layer, layer_in, hidden)  # [S or 1, B, G]
            key, draw = jax.random.split(key)
            rows = 1 if common_draws else mean.shape[1]
            noise = jax.random.normal(draw, (samples, rows, mean.shape[2]), dtype=mean.dtype)
            hidden = mean + jnp.sqrt(var + Gaussian.noise_variance(layer.likelihood)) * noise
        mean, var = self._layer_at_rows(params.layers[-1], inputs[-1], hidden)
        if not isinstance(params.mean, Zero):
            mean = plus_output_mean(params.mean, hidden.reshape(-1, hidden.shape[-1]),
                                    mean.reshape(-1, mean.shape[-1]), self.output_width > 1).reshape(mean.shape)
        mean = with_input_mean(params.input_mean, x, mean, self.output_width > 1)
        shape = (samples, x.shape[0], mean.shape[-1])
        return Mixture(jnp.broadcast_to(mean, shape), jnp.broadcast_to(var, shape))

    def _layer_at_rows(self, layer: LayerParams, layer_in: LayerInputs, rows):
        """A layer's output marginals at fixed rows ``[S, B, D]``, shaped ``[S, B, G]``."""
        flat = rows.reshape(-1, rows.shape[-1])
        marginals = fixed_input_marginals(self.layer_bank(layer), layer_in.prior, layer_in.gaussian, flat)
        return tuple(v.reshape(*rows.shape[:2], -1) for v in marginals)

    def mixture_log_density(self, params: DeepGPParams, x, y, key, samples: int):
        """``log (1/S) Σ_s ∫ N(f; m_s, v_s) p(y|f) df`` per row ``[B]``: the log predictive density of ``y``
        under :meth:`predict_mixture` (for either likelihood)."""
        mixture = self.predict_mixture(params, x, key, samples)
        log_components = self.likelihood.log_tilted(params.layers[-1].likelihood, y, mixture.mean, mixture.var, 1.0)
        return jax.scipy.special.logsumexp(log_components, axis=0) - jnp.log(samples)

    def predict_y_mixture(self, params: DeepGPParams, x, key, samples: int, common_draws: bool = False) -> Mixture:
        """``y``'s predictive under :meth:`predict_mixture` for the Gaussian likelihood: the same components
        with the observation noise ``σ_L²`` added to each, ``[S, B]``."""
        mixture = self.predict_mixture(params, x, key, samples, common_draws)
        return Mixture(*self.likelihood.predict(params.layers[-1].likelihood, mixture.mean, mixture.var))

    def mixture_moments(self, params: DeepGPParams, x, key, samples: int):
        """Mean and variance ``[B]`` of ``y`` under :meth:`predict_mixture` (Gaussian likelihood: the law of
        total variance over the components, observation noise included)."""
        means, variances = self.predict_y_mixture(params, x, key, samples)
        mean = jnp.mean(means, axis=0)
        return mean, jnp.mean(variances + (means - mean) ** 2, axis=0)


jax.tree_util.register_static(DeepGP)
