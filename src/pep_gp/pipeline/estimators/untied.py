"""Estimators of the training paths that keep one site per training row (for N up to a few thousand), beside
the spec estimators: ``ExactGPClassifier`` (exact-GP EP or Quantile Propagation, the evidence maximised by
L-BFGS-B; Zhang et al. 2020) and ``MultiClassEPClassifier`` (the multi-class model with untied EP factors;
Villacampa-Calvo & Hernández-Lobato 2017). They own their training rows, so they are not ``pep train``
models."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal, NamedTuple

import jax
import numpy as np
from pydantic import Field
from sklearn.base import ClassifierMixin
from sklearn.exceptions import ConvergenceWarning

from ...core import float64
from ...core.kernels import Kernel, from_dict
from ...core.means import MeanFunction
from ...core.means import from_dict as mean_from_dict
from ...core.likelihoods import Probit
from ...core.models.ep import EP, site_data
from ...core.models.multiclass import MultiClassGP
from ...core.projections import projection as named_projection
from ..models.multiclass import MultiClassSettings
from ..models.protocol import kernel_description, settings_kernel, settings_mean
from ..data.datasets import ArrayData
from ..models.predictive import BinaryPredictive, Latent, MultiClassPredictive
from ..training import exact_ep, multiclass_ep as untied_multiclass
from .base import FIT_FIELDS, generated_init
from .fitted import FittedGP, GPClassifierMixin

class UntiedMultiClassSettings(MultiClassSettings):
    """The multi-class settings with the full-batch damping schedule of the paper's UCI experiments
    (ρ_0 = 0.5, decaying by 0.99 per epoch: per step at full batch), which untied EP needs to settle."""

    damping: float = Field(0.5, gt=0.0, le=1.0, description="EP step ρ_0 of the factor updates")
    damping_decay: float = Field(0.99, gt=0.0, le=1.0, description="ρ_t = ρ_0·decay^(t/steps per epoch) down to the floor")
    likelihood: Literal["pairwise"] = Field("pairwise", description="the paper's pairwise factors (eq. 6), whose "
                                            "per-row sites untied EP stores")
    train_inducing: bool = Field(True, description="optimise the inducing inputs")


UNTIED_LEARNING_RATE = 0.01
"""Adam's step on the untied model's hyper-parameters (log-amplitude, log-lengthscales, log-noise, inducing
inputs): at 0.05, the trainer's, the damped factors fall behind and wine's evidence collapsed on 3 of 20 splits
(one to 61 % test error); at 0.01 every split rose to the end of its 250 steps (docs/results/multiclass.md)."""

UNTIED_FIT_FIELDS = {name: FIT_FIELDS[name] for name in ("max_iter", "tol", "seed")} | {
    "learning_rate": UNTIED_LEARNING_RATE, "batch_size": None}
"""The fit fields of :class:`MultiClassEPClassifier`: in this process only, full batch by default."""

class ExactParams(NamedTuple):
    """The fitted exact GP's hyper-parameters: its kernel and its prior's mean (standardised inputs)."""

    kernel: Kernel
    mean: MeanFunction


@dataclass(frozen=True)
class ExactGP:
    """The exact-GP EP/QP posterior in the model interface of the predictives, ``params = (kernel, sites,
    x_train, site data, mean)``: ``p(y = 1 | x) = Φ(m/√(1 + v))`` is :class:`BinaryPredictive` of it."""

    def predict_f(self, params, x, full_cov: bool = False):
        kernel, sites, x_train, data, mean = params
        return exact_ep.predict(kernel, sites, x_train, data, x, full_cov, mean)


class ExactGPClassifier(GPClassifierMixin, ClassifierMixin, FittedGP):
    """Binary probit classification on the exact GP with one EP (``projection="kl"``) or Quantile Propagation
    (``"wasserstein"``: same mean, the L2-Wasserstein variance; Zhang et al. 2020) site per training row, in
    parallel sweeps, undamped until a sweep moves the sites more than the one before (the step then halves, and
    no later evaluation tries a step that oscillated: :func:`~pep_gp.core.models.ep.sweep_until`); the kernel's
    hyper-parameters — by default the amplitude and one shared
    lengthscale of a squared exponential; ``kernel=`` any :mod:`pep_gp.kernels` kernel, table or spelling, its
    fixed values kept — maximise ``log Z_EP`` (Zhang et al. 2020, eq. 4) by L-BFGS-B, at most ``max_iter``
    iterations. O(N³) in every sweep: seconds up to about a thousand rows, minutes at a few thousand (waveform's
    first two classes, measured once on 2 cores: 30 s at 1,315 training rows, 138 s at 2,660, past 300 s at 5,325;
    :class:`SparseGPClassifier` fits those in seconds, docs/results/everyday.md). A kernel's ``prior=`` adds
    ``log p(θ)`` to the evidence maximised (a MAP fit); ``mean_function=`` (a name, a table or a :mod:`pep_gp.means` object, in standardised
    inputs' units) is the latent's prior mean, trained with the kernel (``mean_function_``, in the data's units).

    A training row that repeats an earlier row's input and label is left out, with a warning (``n_repeated_rows_``
    counts them): the probit likelihood ``Φ(y f(x))`` has no label noise, so ``r`` copies of a row are ``r``
    independent observations of the sign of one latent value, ``∫ Φ(f)^r N(f; 0, σ²) df → ½`` as ``σ² → ∞``,
    and the evidence of rows repeated 2–5 times is highest for a fit that memorises each input (lengthscale
    → 0, amplitude → ∞: probability ½ everywhere else). The fit is then the fit of the distinct rows; an input
    seen with both labels keeps one row of each.

    Example:
        >>> from sklearn.datasets import load_breast_cancer
        >>> x, y = load_breast_cancer(return_X_y=True)
        >>> qp = ExactGPClassifier(projection="wasserstein", max_iter=20).fit(x[:100], y[:100])
        >>> qp.score(x[100:200], y[100:200]) > 0.9
        True
    """

    _is_classifier = True
    _binary = True
    _rows_in_memory = "keeps one EP site per training row (O(N³)); SparseGPClassifier fits a store in minibatches"

    def __init__(self, *, projection: str = "kl", alpha: float = 1.0, kernel=None, mean_function=None,
                 max_iter: int = 100, seed: int = 0):
        self.projection = projection
        self.alpha = alpha
        self.kernel = kernel
        self.mean_function = mean_function
        self.max_iter = max_iter
        self.seed = seed

    def fit(self, X, y=None):
        """Fit the sites, the amplitude and the lengthscale (see the class docstring); arrays only (a store is
        refused, naming the estimator that fits one)."""
        self._refuse_store(X)
        named_projection(self.projection)
        if not 0.0 < float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1]; got {self.alpha!r}")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer; got {self.max_iter!r}")
        try:
            kernel = None if self.kernel is None else from_dict(kernel_description(self.kernel))
        except ValueError as error:
            raise ValueError(f"ExactGPClassifier: kernel: {error}") from None
        try:
            mean = mean_from_dict(self.mean_function or "zero")
        except ValueError as error:
            raise ValueError(f"ExactGPClassifier: mean_function: {error}") from None
        given = self._training_data(X, y)
        data = _distinct_rows(given)
        self.n_repeated_rows_ = given.x.shape[0] - data.x.shape[0]
        if self.n_repeated_rows_:
            warnings.warn(f"ExactGPClassifier: {self.n_repeated_rows_} of {given.x.shape[0]} training rows repeat an earlier "
                          "row's input and label and are left out (the probit likelihood would count each copy as "
                          "an independent observation, and the evidence then prefers a fit that memorises the "
                          "rows); the fit is that of the distinct rows", UserWarning, stacklevel=2)
        self.x_mean_, self.x_std_ = (np.asarray(a) for a in (data.attrs["x_mean"], data.attrs["x_std"]))
        self.x_train_ = (data.x - self.x_mean_) / self.x_std_
        with float64():
            self.site_data_ = site_data(np.arange(data.x.shape[0]), data.y)
        ep = EP(Probit(), self.projection, float(self.alpha), schedule="parallel")  # undamped until it oscillates
        try:
            fitted = exact_ep.fit(ep, self.x_train_, self.site_data_, max_iter=int(self.max_iter), seed=self.seed,
                                  kernel=kernel, mean=mean)
        except ValueError as error:  # a kernel or mean that does not fit the columns (active_dims, lengthscales)
            raise ValueError(f"ExactGPClassifier: {error}") from None
        self.params_ = jax.tree_util.tree_map(np.asarray, ExactParams(fitted.kernel, fitted.mean))
        self.sites_ = fitted.sites
        self.log_marginal_likelihood_value_ = fitted.log_evidence
        self.n_iter_, self.converged_ = fitted.iterations, fitted.converged
        if not self.converged_ and self.max_iter > 0:
            warnings.warn(f"ExactGPClassifier: L-BFGS-B stopped after {self.n_iter_} iterations "
                          f"(max_iter={self.max_iter}) before converging: {fitted.message}", ConvergenceWarning,
                          stacklevel=2)
        return self

    def _predictive(self):
        return BinaryPredictive(ExactGP())

    def _latent(self, full_cov: bool):
        return Latent(ExactGP(), full_cov)

    def _predict_params(self):
        return self.params_.kernel, self.sites_, self.x_train_, self.site_data_, self.params_.mean


def _distinct_rows(data: ArrayData) -> ArrayData:
    """``data`` without the rows whose input and label repeat an earlier row's (the first copy kept, rows in
    their order; the input statistics recomputed), or ``data`` itself when no row repeats."""
    _, first = np.unique(np.column_stack([data.x, data.y]), axis=0, return_index=True)
    if first.size == data.x.shape[0]:
        return data
    keep = np.sort(first)
    return ArrayData(data.x[keep], data.y[keep], data.task, data.n_classes)


class MultiClassEPClassifier(GPClassifierMixin, ClassifierMixin, FittedGP):
    """The multi-class GP classifier of Villacampa-Calvo & Hernández-Lobato (2017) with one EP factor per
    training row and class (memory O(N·C·M); for N up to ~10⁴): each step updates the factors of its rows
    in parallel, damped by ``ρ_t = max(damping·0.99^(t/E), min(damping, 0.05))`` at ``E`` steps per epoch
    (halved for the rest of the run whenever a row's cavity is improper), then takes an Adam step on the hyper-parameters and inducing
    inputs. Settings as :class:`~pep_gp.MultiClassGPClassifier` but for the damping schedule
    (:class:`UntiedMultiClassSettings`); ``batch_size`` None trains full batch.
    """

    _is_classifier = True
    Settings = UntiedMultiClassSettings
    _rows_in_memory = ("keeps one EP factor per training row and class; MultiClassGPClassifier fits a store in "
                       "minibatches")
    __init__ = generated_init(UntiedMultiClassSettings, UNTIED_FIT_FIELDS, "the untied multi-class model")

    def fit(self, X, y=None):
        """Fit the factors, hyper-parameters and inducing inputs (see the class docstring); arrays only (a store
        is refused, naming the estimator that fits one)."""
        self._refuse_store(X)
        settings = UntiedMultiClassSettings(**self._settings())
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}")
        data = self._training_data(X, y)
        n = data.x.shape[0]
        if self.num_inducing > n:
            raise ValueError(f"num_inducing={self.num_inducing} exceeds the number of training rows ({n})")
        self.x_mean_, self.x_std_ = (np.asarray(a) for a in (data.attrs["x_mean"], data.attrs["x_std"]))
        x = (data.x - self.x_mean_) / self.x_std_
        with float64():
            self.model_ = MultiClassGP(int(self.classes_.size), alpha=settings.alpha, jitter=settings.jitter,
                                       label_noise=settings.label_noise, kernel_products=settings.kernel_products,
                                       priors=settings.leaf_priors())
        fitted = untied_multiclass.fit(self.model_, x, data.y.astype(np.int32), int(self.num_inducing),
                                       batch_size=self.batch_size, max_steps=int(self.max_iter), tol=float(self.tol),
                                       learning_rate=float(self.learning_rate),
                                       damping=settings.damping_schedule(1 if self.batch_size is None else -(-n // self.batch_size)),
                                       seed=self.seed, kernel=settings_kernel(settings), mean=settings_mean(settings),
                                       noise=settings.class_noise, fixed_noise="class_noise" in settings.fixed)
        self.params_, self.ep_sites_ = fitted.params, fitted.sites
        self.energy_trace_, self.n_iter_, self.converged_ = fitted.energies, fitted.energies.size, fitted.converged
        self.n_rejected_steps_, self.n_skipped_rows_ = fitted.rejected_steps, fitted.skipped_rows
        self.log_marginal_likelihood_value_ = fitted.log_evidence
        if fitted.collapse is not None:
            warnings.warn(f"MultiClassEPClassifier: {fitted.collapse}", ConvergenceWarning, stacklevel=2)
        elif self.tol > 0 and self.max_iter > 0 and not self.converged_:
            warnings.warn(f"MultiClassEPClassifier: the energy still rose when max_iter={self.max_iter} was "
                          f"reached (tol={self.tol:g}); increase max_iter (or the learning rate)", ConvergenceWarning,
                          stacklevel=2)
        return self

    def _predictive(self):
        return MultiClassPredictive(self.model_)


