"""``deep-gp``, ``deep-gp-classifier`` and ``deep-gp-multiclass``: deep GPs trained with approximate EP (Bui et
al. 2016, :class:`pep_gp.core.models.deep_gp.DeepGP`) with a Gaussian or probit output, or one output GP per
class with the multi-class factors of Villacampa-Calvo & Hernández-Lobato (2017)
(:class:`pep_gp.core.models.multiclass_deep_gp.MultiClassDeepGP`; the binding holds the training class
counts, as ``multiclass-sep``'s).

``kernel=`` is every layer's kernel, or a list of one per layer (input layer first: ``[k_hidden, k_output]``, as
GPflux and GPyTorch build each layer with its own; a TOML ``kernel = ["matern52", "se"]`` or ``[[model.kernel]]``
tables); a kernel's ``prior=`` is a prior on the values of the layers it is in. ``prior=`` and ``fixed=`` name
``noise_variance``: the Gaussian noise of every layer that has one (the hidden layers' and the regressor's
output's, which ``noise_variance`` starts); the multi-class deep GP's also name ``class_noise``, its output GPs' latent
noises ``σ_{0,c}`` (which ``class_noise`` starts), as the multi-class GP's do. ``mean_function=`` is the output GP's prior mean, a function of the last
layer's input (the data's standardised columns with no hidden layers, else the last hidden layer's outputs), in the
model's units: a constant or linear one with hidden layers (:func:`~pep_gp.core.models.deep_gp.check_output_mean`);
the multi-class deep GP gives each class's output GP its own copy. The multi-class deep GP's ``mixture_samples=S``
predicts its class probabilities from the deep GP's Monte Carlo mixture of ``S`` paths (eq. 68 on each, averaged)
instead of eq. (68) on one forward pass's moments. ``input_mean_function=`` is the output's mean of the data's
standardised columns past the hidden layers (:func:`~pep_gp.core.models.deep_gp.with_input_mean`; none by default,
``DeepGPRegressor``'s a line), a regressor's line started at the least-squares line of the rows
(:meth:`DeepGPSpec.settle`)."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from ...core.input_quadrature import DEFAULT_POINTS
from ...core.likelihoods import Gaussian, Probit
from ...core.kernels import from_dict
from ...core.means import MeanFunction
from ...core.models.deep_gp import (ALPHA_FLOOR, DeepGP, DeepGPParams, check_output_mean, layer_kernels,
                                    least_squares_mean)
from ...core.models.multiclass_deep_gp import CLASS_NOISE, ClassPairs, MultiClassDeepGP
from ..data.blocks import TargetScaling
from .multiclass import CLASS_NOISE_DESCRIPTION, CLASS_NOISE_FORWARD, MultiClassSpec
from .predictive import MixtureClassPredictive, MixturePredictive, MultiClassPredictive
from .likelihood_parameters import FixedNames, LikelihoodParameterSettings, PriorTable
from .protocol import MeanSetting, SpecBase, described_mean, kernel_description, settings_mean
from .registry import register
from .sparse_gp import INITIAL_NOISE_VARIANCE, SparseGPSpec, check_inducing


def layer_kernels_description(value: Any) -> dict[str, Any] | list[dict[str, Any] | None] | None:
    """A deep GP's ``kernel`` setting as JSON: one kernel's description (:func:`~.protocol.kernel_description`), or
    a list of one per layer (None in it: that layer's default)."""
    if isinstance(value, (list, tuple)):
        return [kernel_description(kernel) for kernel in value]
    return kernel_description(value)


LayerKernels = Annotated[dict | list[dict | None] | None, BeforeValidator(layer_kernels_description)]
"""The ``kernel`` field of the deep GPs' settings (:func:`layer_kernels_description`)."""


class DeepGPSettings(LikelihoodParameterSettings):
    """Settings of the deep GPs (the ``[model]`` table): ``fixed`` and ``prior`` name ``noise_variance``, every
    layer's Gaussian noise (:mod:`pep_gp.pipeline.models.likelihood_parameters`)."""

    hidden_dims: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        (2,), description="widths of the hidden layers; () is one GP layer")
    num_inducing: int = Field(100, ge=1, description="inducing points M per GP (Bui et al. 2016: 50 or 100)")
    alpha: float = Field(1.0, ge=ALPHA_FLOOR, le=1.0, description="Power-EP power: 1 is the paper's approximate EP "
                                                                  f"(at least {ALPHA_FLOOR:g}, see DeepGP)")
    share_hypers: bool = Field(False, description="one kernel per layer (the authors' code) instead of per GP "
                                                  "(the paper)")
    noise_variance: float = Field(INITIAL_NOISE_VARIANCE, gt=0.0,
                                  description="starting noise variance of every layer, in standardised units (the "
                                  "hidden layers' and the regressor's output's; fixed/prior name it noise_variance)")
    kernel: LayerKernels = Field(None, description="the covariance function of every layer (a spelling such as "
                                 "'matern52', a [model.kernel] table or a pep_gp.kernels object), or a list of one "
                                 "per layer, input layer first; none: the squared exponential")
    fixed: FixedNames = Field((), description="noise_variance: every layer's Gaussian noise kept at its start, to the "
                              "bit; a kernel's go in the kernel (its fixed=)")
    prior: PriorTable = Field(None, description="a prior on every layer's Gaussian noise: {noise_variance = {name = "
                              "'log-normal' | 'gamma' | 'half-normal', …}}; a MAP fit. A kernel's go in the kernel "
                              "(its prior=)")
    jitter: float = Field(1e-6, ge=0.0, description="relative jitter on every K_uu (the authors' code: 1e-6)")
    input_mean_function: MeanSetting = Field(
        None, description="the output's mean of the data's standardised columns, added past the hidden layers (f = "
        "m_x(x) + m(h) + g(h), a skip connection of the mean): 'linear' (a regressor's weights left out start at the "
        "least-squares fit of the training rows), 'constant', a [model.input_mean_function] table or a pep_gp.means "
        "object; none: zero, Bui et al.'s model (DeepGPRegressor's default is 'linear')")
    quadrature_points: int = Field(DEFAULT_POINTS, ge=2, description="Gauss–Hermite points per input dimension of "
                                   "the hidden layers' ψ-statistics for a kernel other than the squared exponential "
                                   "(whose are closed forms)")

    takes_priors = True  # a kernel's prior= on its layers' values and the noise's are added to the energy (MAP)
    takes_mean = True  # the output GP's mean_function= is carried through the moment propagation and the mixture

    @model_validator(mode="after")
    def _output_mean_propagates(self) -> "DeepGPSettings":
        try:
            check_output_mean(settings_mean(self), self.hidden_dims)
        except ValueError as error:
            raise ValueError(f"mean_function: {error}") from None
        self.layer_kernels()  # ValueError naming the kernel setting: a list of another length than the layers
        return self

    def input_mean(self) -> MeanFunction:
        """The mean-function object of ``input_mean_function`` (:class:`~pep_gp.core.means.Zero` when None)."""
        return described_mean(self.input_mean_function)

    def layer_kernels(self):
        """The kernel object of every layer, input layer first (None: the default, the squared exponential)."""
        if isinstance(self.kernel, list):
            kernel = [None if description is None else from_dict(description) for description in self.kernel]
        else:
            kernel = None if self.kernel is None else from_dict(self.kernel)
        return layer_kernels(kernel, len(self.hidden_dims) + 1)


@dataclass(frozen=True)
class DeepGPSpec(SparseGPSpec):
    """A deep GP bound to a task; the targets and predictive are the sparse GP's, the data checks the task's
    only (its settings place no inducing inputs)."""

    Settings = DeepGPSettings
    parameterisation = "3"  # 3: each layer's kernel a pytree (pep_gp.core.kernels); 1: raw log ℓ and log σ_f²
    train_defaults = MappingProxyType({"learning_rate": 0.01, "max_steps": 1_000, "tol": 0.0})
    """A fixed number of Adam steps, as Bui et al. (2016, §8.1) and the authors' code train (no early
    stopping): on Boston and concrete the energy still rises by about 0.01–0.03 nats per row per 100 steps at
    step 1,000, so pep's stopping rule would either never stop or, at 0.05, stop early on a worse optimum;
    1,000 steps at 0.01 reach the paper's test log-likelihoods (docs/results/deep-gp.md)."""

    check = SpecBase.check

    def build(self, settings: DeepGPSettings, binding: dict) -> DeepGP:
        likelihood = Gaussian() if self.task == "regression" else Probit()
        return DeepGP(likelihood, alpha=settings.alpha, jitter=settings.jitter,
                      quadrature_points=settings.quadrature_points, priors=settings.leaf_priors())

    def init(self, model: DeepGP, x, settings: DeepGPSettings, seed: int) -> DeepGPParams:
        """The authors' starting values (:meth:`pep_gp.core.models.deep_gp.DeepGP.init`) with the settings'
        kernels (default the squared exponential) and the output's mean function (default zero); ValueError when
        ``fixed`` or ``prior`` names a noise the model does not have (a classifier without hidden layers)."""
        check_inducing(settings, x.shape[0])
        named = {*settings.fixed, *(settings.prior or {})}
        if "noise_variance" in named and not settings.hidden_dims and self.task != "regression":
            raise ValueError("fixed/prior: noise_variance is the hidden layers' Gaussian noise (and a regressor's "
                             "output's); a classifier with hidden_dims=() has none")
        return model.init(x, settings.hidden_dims, settings.num_inducing,
                          likelihood_params=self.output_params(model, settings),
                          noise_variance=settings.noise_variance, share_hypers=settings.share_hypers, seed=seed,
                          kernel=settings.layer_kernels(), mean=settings_mean(settings),
                          input_mean=settings.input_mean())

    def settle(self, model: DeepGP, params: DeepGPParams, x, y, settings: DeepGPSettings, n_total) -> DeepGPParams:
        """The starting params given a sample of the training rows ``x, y`` (model units): a regressor's linear mean
        of the input rows whose weights were left out at the least-squares fit of the rows
        (:func:`~pep_gp.core.models.deep_gp.least_squares_mean`); everything else as :meth:`init` left it."""
        start = settings.input_mean_function
        if self.task != "regression" or start is None or start["name"] != "linear" or "weights" in start:
            return params
        return params._replace(input_mean=least_squares_mean(x, y))

    def output_params(self, model: DeepGP, settings: DeepGPSettings) -> dict:
        """The starting parameters of the last layer's likelihood: the Gaussian's noise, the probit's none."""
        return Gaussian.init_params(settings.noise_variance) if self.task == "regression" else Probit.init_params()

    def predictive(self, model: DeepGP, targets: TargetScaling):
        """The sparse GP's, but a regressor's quantiles are those of the mixture predictive
        (:class:`~pep_gp.pipeline.models.predictive.MixturePredictive`), not Gaussian."""
        return MixturePredictive(model, targets) if self.task == "regression" else super().predictive(model, targets)


class MultiClassDeepGPSettings(DeepGPSettings):
    """Settings of the multi-class deep GP: the deep GPs', at α = 1, and the classes' starting latent noise;
    ``fixed`` and ``prior`` name ``noise_variance`` (the hidden layers') and ``class_noise`` (the output GPs')."""

    alpha: float = Field(1.0, ge=1.0, le=1.0, description="Power-EP power: 1 only (the output factors are steps, "
                                                          "Θ^α = Θ; see MultiClassDeepGP)")
    class_noise: float = Field(1.0, gt=0.0, description="starting latent noise variance σ_0,c of every class's output "
                               "GP (Villacampa-Calvo & Hernández-Lobato 2017: 1); fixed/prior name it class_noise")
    mixture_samples: int = Field(0, ge=0, description="0: class probabilities by eq. (68) on the moments of one "
                                 "forward pass; S > 0: by eq. (68) on each of S Monte Carlo paths through the hidden "
                                 "layers, averaged (the deep GP's mixture predictive; e.g. 256, about S times the "
                                 "moments' cost), in predict_proba, pep predict and the held-out metrics")
    fixed: FixedNames = Field((), description="noise_variance: the hidden layers' Gaussian noise; class_noise: "
                              + CLASS_NOISE_DESCRIPTION + "; each kept at its start to the bit; a kernel's go in the "
                              "kernel (its fixed=)")
    prior: PriorTable = Field(None, description="priors on noise_variance (every hidden layer's Gaussian noise) and "
                              "class_noise (each class's σ_0,c): a table of name → {name = 'log-normal' | 'gamma' | "
                              "'half-normal', …}; a MAP fit. A kernel's go in the kernel (its prior=)")

    takes_mean = True  # each class's output GP has its own copy of mean_function= (MeanFunction.stacked)
    leaf_forwards = MappingProxyType({CLASS_NOISE: CLASS_NOISE_FORWARD})

    def likelihood_parameters(self) -> dict[str, str]:
        """The hidden layers' ``noise_variance`` and the output GPs' ``class_noise``."""
        return {**super().likelihood_parameters(), "class_noise": CLASS_NOISE}


@dataclass(frozen=True)
class MultiClassDeepGPSpec(DeepGPSpec):
    """A multi-class deep GP bound to a classification dataset: the class checks and binding of
    ``multiclass-sep``, the deep GP's starting state with one output GP per class, and the predictive
    probabilities of eq. (68) (Villacampa-Calvo & Hernández-Lobato 2017)."""

    Settings = MultiClassDeepGPSettings
    parameterisation = "1"  # 1: DeepGPParams with C GPs in the last layer, log σ_0,c in its likelihood
    n_classes = None  # any number of classes, 2 included
    check = MultiClassSpec.check
    binding = MultiClassSpec.binding
    data_size = MultiClassSpec.data_size

    def build(self, settings: MultiClassDeepGPSettings, binding: dict) -> MultiClassDeepGP:
        return MultiClassDeepGP(ClassPairs(len(binding["class_counts"])), alpha=settings.alpha,
                                jitter=settings.jitter, quadrature_points=settings.quadrature_points,
                                priors=settings.leaf_priors(), mixture_samples=settings.mixture_samples)

    def output_params(self, model: MultiClassDeepGP, settings: MultiClassDeepGPSettings) -> dict:
        """``σ_{0,c} = class_noise`` for every class."""
        return model.likelihood.init_params(settings.class_noise)

    def predictive(self, model: MultiClassDeepGP, targets: TargetScaling):
        """Eq. (68) on the propagated moments, or with ``mixture_samples`` on the mixture's paths
        (:class:`~pep_gp.pipeline.models.predictive.MixtureClassPredictive`)."""
        return MixtureClassPredictive(model) if model.mixture_samples else MultiClassPredictive(model)


REGRESSOR = register(DeepGPSpec("deep-gp", "regression",
                                "deep GP regression with approximate EP (Bui et al. 2016; Gaussian output)"))
CLASSIFIER = register(DeepGPSpec("deep-gp-classifier", "classification",
                                 "deep GP binary classification with approximate EP (Bui et al. 2016; probit output)"))
MULTICLASS = register(MultiClassDeepGPSpec("deep-gp-multiclass", "classification",
                                           "deep GP multi-class classification with approximate EP (Bui et al. "
                                           "2016; one output GP per class, Villacampa-Calvo & Hernández-Lobato "
                                           "2017's factors)"))
