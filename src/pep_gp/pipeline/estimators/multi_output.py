"""``MultiOutputGPRegressor``: collapsed Power-EP regression of several targets observed at the same inputs,
``y`` ``[N, P]`` (:mod:`pep_gp.core.models.multi_output_regression`): independent outputs sharing the inducing
inputs (one kernel per output, or one shared), or the linear model of coregionalisation. Like
:class:`~pep_gp.CollapsedGPRegressor` it integrates its sites out, so it trains full batch by L-BFGS-B (the
stopping rule of :mod:`pep_gp.pipeline.training.full_batch`) and predicts from its training rows; it has its
own fit, not a ``pep train --model``. It fits arrays, or the training split of a store of several targets
(``pep ingest --target a --target b``) read whole into memory.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sklearn.base import RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from ...core import float64
from ...core.initialisation import initial_kernel_and_inducing
from ...core.kernels import SquaredExponential, from_dict
from ...core.linalg import DEFAULT_JITTER
from ...core.models.multi_output_regression import MultiOutputParams, MultiOutputRegression
from ...core.parameters import unconstrained
from ..data.stores import default_chunk_rows
from ..data.moments import Moments
from ..data.validation import check_num_inducing
from ..models.predictive import predict_in_blocks
from ..models.protocol import InducingPoints, KernelSetting, leaves_named
from ..models.sparse_gp import INITIAL_NOISE_VARIANCE
from ..training.full_batch import GRADIENT_TOL, MEMORY, QUIET_ITERATIONS, FlatParams
from .base import FIT_FIELDS, generated_init
from .fitted import PREDICT_BLOCK_ROWS, FittedGP
from .stores import is_store, opened_store, table_reading


class MultiOutputSettings(BaseModel):
    """The settings of :class:`MultiOutputGPRegressor` (unknown keys and out-of-range values refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    outputs: Literal["independent", "lmc"] = Field("independent", description="independent outputs sharing the "
                                                   "inducing inputs, or the linear model of coregionalisation")
    latents: int | None = Field(None, ge=1, description="the LMC's latent GPs Q (None: one per output)")
    shared_kernel: bool = Field(False, description="independent outputs: one kernel for every output (GPflow's "
                                "SharedIndependent) instead of one each (SeparateIndependent)")
    kernel: KernelSetting = Field(None, description="each latent GP's kernel (default a squared exponential with "
                                  "one lengthscale per input; the LMC's variance held at 1)")
    alpha: float = Field(0.5, ge=0.0, le=1.0, description="0: the VFE bound, 1: FITC")
    num_inducing: int = Field(50, ge=1, description="inducing points M shared by the latent GPs; capped by the "
                              "training rows")
    inducing_points: InducingPoints = Field(None, description="starting inducing inputs [M, D] in the inputs' own "
                                            "units; none: k-means")
    train_inducing: bool = Field(True, description="optimise the inducing inputs")
    noise_variance: float = Field(INITIAL_NOISE_VARIANCE, gt=0.0, description="every output's starting noise "
                                  "variance, in standardised target units")
    jitter: float = Field(DEFAULT_JITTER, ge=0.0, description="relative jitter on each K_uu")

    @model_validator(mode="after")
    def _of_the_chosen_outputs(self) -> "MultiOutputSettings":
        if self.latents is not None and self.outputs != "lmc":
            raise ValueError("latents is the LMC's number of latent GPs: set outputs='lmc' with it")
        if self.shared_kernel and self.outputs != "independent":
            raise ValueError("shared_kernel applies to outputs='independent' (the LMC's latent GPs each have "
                             "their own kernel)")
        return self


@dataclass(frozen=True)
class MultiOutputPredictive:
    """The predictive of ``params = (params, x_train, y_train)`` at standardised rows in the targets' units
    (``shift``, ``scale`` ``[P]``): ``{"mean", "var"}`` ``[B, P]`` or, with ``output_cov``, ``{"mean", "cov"}``
    with ``cov`` ``[B, P, P]`` across the outputs; ``latent``: of ``f`` (else of ``y``, noise included)."""

    model: MultiOutputRegression
    shift: Any
    scale: Any
    output_cov: bool = False
    latent: bool = False

    def __call__(self, params, x) -> dict:
        params, x_train, y_train = params
        moments = self.model.predict_f if self.latent else self.model.predict_y
        mean, spread = moments(params, x_train, y_train, x, self.output_cov)
        spread = spread * (jnp.outer(self.scale, self.scale) if self.output_cov else self.scale**2)
        return {"mean": mean * self.scale + self.shift, "cov" if self.output_cov else "var": spread}


jax.tree_util.register_dataclass(MultiOutputPredictive, data_fields=["shift", "scale"],
                                 meta_fields=["model", "output_cov", "latent"])


@jax.jit
def _value_and_grad(model: MultiOutputRegression, params: MultiOutputParams, x, y):
    """``log Z_PEP(α)`` and its gradient, compiled once per model and shape (not once per fit)."""
    return jax.value_and_grad(model.log_marginal_likelihood)(params, x, y)


class MultiOutputGPRegressor(RegressorMixin, FittedGP):
    """Sparse GP regression of ``P`` targets per row with the collapsed PEP-α objective (α = 1: FITC, α = 0:
    VFE; Bui, Yan & Turner 2017, §3.6, eq. 128, one Power-EP factor per observation), the ``P`` latent
    functions sharing ``num_inducing`` inducing inputs (:mod:`pep_gp.core.models.multi_output_regression`).

    ``outputs="independent"``: ``f_p ~ GP(0, k_p)`` independent, one kernel per output (GPflow's
    ``SeparateIndependent``) or, with ``shared_kernel=True``, one kernel for all (``SharedIndependent``); with
    the inducing inputs held (``train_inducing=False``) the fit is that of ``P`` separate
    :class:`~pep_gp.CollapsedGPRegressor` fits. ``outputs="lmc"``: the linear model of coregionalisation
    ``f = W g`` with ``latents`` (``Q``, default ``P``) independent GPs ``g_q`` and mixing weights ``W`` ``[P, Q]``
    (GPflow's ``LinearCoregionalization``, GPyTorch's ``LMCVariationalStrategy``), each ``g_q`` its own kernel;
    the default kernel's variance is held at 1 (the scale is ``W``'s) and ``W`` starts at the top ``Q``
    principal directions of the standardised targets' correlation. Each output has its own Gaussian noise.

    Inputs are standardised as every pep estimator's, and each target column by its own mean and deviation.
    ``y`` of one dimension is one output (predictions then ``[n]``, as scikit-learn's). Full batch, L-BFGS-B:
    at most ``max_iter`` iterations, stopped when two in a row each raise the objective by less than ``tol``
    nats per training row (:mod:`pep_gp.pipeline.training.full_batch`). ``num_inducing`` is capped by the
    training rows.

    Attributes (after ``fit``): ``params_`` (:class:`~pep_gp.core.models.multi_output_regression.MultiOutputParams`,
    standardised units), ``model_``, ``n_outputs_``, ``x_mean_``/``x_std_``, ``y_mean_``/``y_std_`` ``[P]``,
    ``mixing_`` (the LMC's ``W`` in the targets' units, ``y_std_[:, None]·W``; None for independent outputs),
    ``target_names_`` (fitted on a store: its targets' names, in the order of the outputs),
    ``noise_variance_`` ``[P]`` (targets' units), ``n_iter_``, ``converged_``, ``log_marginal_likelihood_value_``
    (the targets' own units).

    Example:
        >>> import numpy as np
        >>> x = np.linspace(0, 5, 40)[:, None]; y = np.column_stack([np.sin(x[:, 0]), np.cos(x[:, 0])])
        >>> model = MultiOutputGPRegressor(outputs="lmc", num_inducing=10).fit(x, y)
        >>> model.predict(x).shape, float(np.abs(model.predict(x) - y).max()) < 0.1
        ((40, 2), True)
    """

    _is_classifier = False
    Settings = MultiOutputSettings
    __init__ = generated_init(MultiOutputSettings, {name: FIT_FIELDS[name] for name in ("max_iter", "tol", "seed")},
                              "the multi-output regressor")

    # ------------------------------------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Maximise the collapsed bound over the kernels, noises, mixing weights and (``train_inducing``) the
        inducing inputs (see the class docstring).

        ``X`` may instead be a pep store (its path, or an opened :class:`~pep_gp.pipeline.data.stores.Store`;
        ``y`` None) of one or several regression targets: the fit is then that of its training split's rows
        and targets (read whole, as verified chunks: the model conditions on every training row), and the
        fitted estimator reads new rows as a run of that store does
        (:func:`~pep_gp.pipeline.estimators.stores.table_reading`); ``target_names_`` are the store's."""
        reading: dict[str, Any] = {}
        if is_store(X):
            X, y, reading = self._store_rows(X, y)
        shape = None if y is None else np.asarray(y).shape  # None: validate_data's own message
        if shape is not None and (len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] == 0)):
            raise ValueError(f"MultiOutputGPRegressor: y must hold one row of targets per row of X, [N] or [N, P] "
                             f"with P ≥ 1; got shape {shape}")
        settings = MultiOutputSettings(**self._settings())
        self._check_fit_fields()
        X, y = validate_data(self, X, y, dtype=np.float64, multi_output=True, y_numeric=True)
        for attribute in ("transforms_", "target_names_"):
            vars(self).pop(attribute, None)
        for attribute, value in reading.items():
            setattr(self, attribute, value)
        y = self._targets(y)
        if settings.inducing_points is not None:
            try:
                check_num_inducing(settings.num_inducing, settings.inducing_points, X.shape[0], X.shape[1])
            except ValueError as error:
                raise ValueError(f"MultiOutputGPRegressor: {error}") from None
        self.model_ = MultiOutputRegression(settings.outputs, settings.alpha, settings.jitter)
        chunk_rows = default_chunk_rows(X.shape[1])  # the statistics pep ingest and every estimator compute
        x_moments, y_moments = Moments.of_chunks(X, chunk_rows), Moments.of_chunks(y, chunk_rows)
        self.x_mean_, self.x_std_ = x_moments.mean, x_moments.std()
        self.y_mean_, self.y_std_ = y_moments.mean, y_moments.std()
        self.x_train_ = (X - self.x_mean_) / self.x_std_
        self.y_train_ = (y - self.y_mean_) / self.y_std_
        with float64():
            start = self._initial_params(settings, self.x_train_, self.y_train_)
            params, self.n_iter_, self.converged_, energy = self._lbfgs(start, settings.train_inducing)
        self.params_ = jax.tree_util.tree_map(np.asarray, jax.device_get(params))
        self.log_marginal_likelihood_value_ = energy - X.shape[0] * float(np.sum(np.log(self.y_std_)))
        if not self.converged_ and self.tol > 0 and self.max_iter > 0:
            warnings.warn(f"MultiOutputGPRegressor: L-BFGS had not converged when max_iter={self.max_iter} "
                          f"iterations were reached (tol={self.tol:g}); increase max_iter", ConvergenceWarning,
                          stacklevel=2)
        return self

    @staticmethod
    def _store_rows(X, y) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """``(x, y, reading)``: the training rows and targets of the store ``X`` names (checked against their
        chunk digests), and the attributes by which the fitted estimator reads new rows and names its outputs."""
        store = opened_store("MultiOutputGPRegressor", X, y, "regression", several_targets=True)
        x, targets = store.chunks.rows("train", 0, store.n_rows("train"))
        reading = table_reading(store.transforms, list(store.feature_names))
        reading["target_names_"] = np.asarray(store.target_names, dtype=object)
        return x, targets, reading

    def _targets(self, y: np.ndarray) -> np.ndarray:
        """``y`` as ``[N, P]`` (one column for ``[N]``; ``n_outputs_`` and whether predictions drop the axis)."""
        self._one_output = y.ndim == 1
        y = y.reshape(y.shape[0], -1)
        self.n_outputs_ = y.shape[1]
        return y

    def _check_fit_fields(self) -> None:
        for field in ("max_iter", "seed"):
            value = getattr(self, field)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"MultiOutputGPRegressor: {field} must be a non-negative integer; got {value!r}")
        if not float(self.tol) >= 0:
            raise ValueError(f"MultiOutputGPRegressor: tol must be non-negative; got {self.tol!r}")

    def _initial_params(self, settings: MultiOutputSettings, x: np.ndarray, y: np.ndarray) -> MultiOutputParams:
        """k-means inducing inputs (or ``inducing_points``, standardised), the median distance for each
        lengthscale left unset, the settings' noise for every output, and the LMC's ``W`` from the targets'
        correlation (its top ``Q`` eigenvectors times the roots of their eigenvalues; beyond ``P`` columns
        small draws of ``seed``)."""
        points = settings.inducing_points
        given = None if points is None else (np.asarray(points, float) - self.x_mean_) / self.x_std_
        lengthscales, _, z = initial_kernel_and_inducing(x, min(settings.num_inducing, x.shape[0]), inducing=given,
                                                         seed=int(self.seed))
        n_outputs = y.shape[1]
        lmc = settings.outputs == "lmc"
        latents = (settings.latents or n_outputs) if lmc else 1 if settings.shared_kernel else n_outputs
        try:
            kernel = (from_dict(settings.kernel) if settings.kernel is not None
                      else SquaredExponential(variance=1.0, fixed=("variance",) if lmc else ()))
            kernel = kernel.bank(latents, x.shape[1], lengthscales)
        except ValueError as error:
            raise ValueError(f"MultiOutputGPRegressor: kernel: {error}") from None
        noise = unconstrained(MultiOutputParams, noise_variance=jnp.full(n_outputs, settings.noise_variance))
        mixing = None
        if lmc:
            values, vectors = np.linalg.eigh(y.T @ y / y.shape[0])  # ascending
            top = min(latents, n_outputs)
            mixing = np.zeros((n_outputs, latents))
            mixing[:, :top] = vectors[:, ::-1][:, :top] * np.sqrt(np.maximum(values[::-1][:top], 1e-2))
            mixing[:, top:] = 0.1 * np.random.default_rng(int(self.seed)).normal(size=(n_outputs, latents - top))
            mixing = jnp.asarray(mixing)
        return MultiOutputParams(kernel, **noise, inducing=jnp.asarray(z), mixing=mixing)

    def _lbfgs(self, start: MultiOutputParams, train_inducing: bool) -> tuple[MultiOutputParams, int, bool, float]:
        """L-BFGS-B on ``−log Z_PEP`` over the free leaves: ``(params, iterations, converged, log Z)`` (the
        stopping rule of :class:`~pep_gp.pipeline.training.full_batch.FullBatchFit`)."""
        flat = FlatParams(start, leaves_named(start, set() if train_inducing else {"inducing"}))
        x, y = jnp.asarray(self.x_train_), jnp.asarray(self.y_train_)
        state = {"energy": math.nan, "quiet": 0, "iterations": 0}

        def objective(vector):
            with float64():
                energy, grad = _value_and_grad(self.model_, flat.params(vector, start), x, y)
            energy, gradient = float(energy), flat.vector(grad)
            if not (math.isfinite(energy) and np.all(np.isfinite(gradient))):
                return math.inf, np.zeros_like(vector)  # the line search steps back from it
            return -energy, -gradient

        def iterated(intermediate_result):
            energy = -float(intermediate_result.fun)
            rise, state["energy"] = energy - state["energy"], energy
            state["iterations"] += 1
            quiet = math.isfinite(rise) and rise < self.tol * x.shape[0]
            state["quiet"] = state["quiet"] + 1 if quiet else 0
            if self.tol > 0 and state["quiet"] >= QUIET_ITERATIONS:
                raise StopIteration

        state["energy"] = -objective(flat.vector(start))[0]
        result = scipy.optimize.minimize(objective, flat.vector(start), jac=True, method="L-BFGS-B", callback=iterated,
                                         options={"maxiter": int(self.max_iter), "maxcor": MEMORY,
                                                  "gtol": GRADIENT_TOL, "ftol": 0.0})
        converged = (state["quiet"] >= QUIET_ITERATIONS or (result.status == 0 and result.nit < self.max_iter)
                     or result.status == 2)  # 2: no higher objective along the line (the optimum to rounding)
        return flat.params(result.x, start), state["iterations"], bool(converged), -float(result.fun)

    # ------------------------------------------------------------------------------------------------ predict
    def _outputs(self, X, output_cov: bool, latent: bool) -> dict[str, np.ndarray]:
        check_is_fitted(self)
        predictive = MultiOutputPredictive(self.model_, self.y_mean_, self.y_std_, output_cov, latent)
        x = (self._model_rows(X) - self.x_mean_) / self.x_std_
        with float64():
            params = jax.tree_util.tree_map(jnp.asarray, (self.params_, self.x_train_, self.y_train_))
            out = predict_in_blocks(predictive, params, x, PREDICT_BLOCK_ROWS)
        if self._one_output:
            return {key: value.reshape(value.shape[0]) for key, value in out.items()}
        return out

    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """The predictive mean of ``y`` ``[n, P]`` (``[n]`` for one output), and with ``return_std`` its standard
        deviations (noise included), or with ``return_cov`` its covariance across the outputs at each row,
        ``[n, P, P]`` (diagonal for independent outputs)."""
        if return_std and return_cov:
            raise ValueError("return_std and return_cov cannot both be True (the standard deviations are the "
                             "roots of the covariance's diagonal)")
        out = self._outputs(X, return_cov, latent=False)
        if return_cov:
            return out["mean"], out["cov"]
        return (out["mean"], np.sqrt(out["var"])) if return_std else out["mean"]

    def predict_f(self, X, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean and variance of each latent output ``f_p`` at the rows of ``X`` (targets' units),
        ``[n, P]`` each (``[n]`` for one output). ``full_cov`` (the covariance across rows) is not available:
        ``predict(X, return_cov=True)`` gives the covariance across the outputs at each row."""
        if full_cov:
            raise ValueError("MultiOutputGPRegressor: full_cov across rows is not available; "
                             "predict(X, return_cov=True) gives the covariance across the outputs at each row")
        out = self._outputs(X, False, latent=True)
        return out["mean"], out["var"]

    def _latent_units(self) -> tuple[np.ndarray, np.ndarray]:
        """Each output's ``(shift, scale)``, ``y_mean_`` and ``y_std_`` ``[P]`` (numbers for one output): so
        ``mean_function_`` is ``Constant(y_mean_)``, each output's zero mean of standardised units in its
        targets' units, ``[n, P]`` on rows as ``predict``'s means."""
        return (self.y_mean_[0], self.y_std_[0]) if self._one_output else (self.y_mean_, self.y_std_)

    @property
    def noise_variance_(self) -> np.ndarray:
        """Each output's fitted noise variance, in the targets' units ``[P]``."""
        check_is_fitted(self)
        return np.asarray(self.params_.noise_variance) * self.y_std_**2

    @property
    def mixing_(self) -> np.ndarray | None:
        """The LMC's mixing weights ``W`` ``[P, Q]`` in the targets' units (each row times its output's
        deviation); None for independent outputs."""
        check_is_fitted(self)
        mixing = self.params_.mixing
        return None if mixing is None else self.y_std_[:, None] * np.asarray(mixing)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


__all__ = ["MultiOutputGPRegressor"]
