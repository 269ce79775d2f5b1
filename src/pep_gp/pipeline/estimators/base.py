"""One estimator class for every model: :class:`GPEstimator` takes a spec and becomes a scikit-learn
estimator whose constructor arguments are exactly the spec's settings plus the fit fields, trained by the
same trainer, step and stopping rule as ``pep train --model NAME`` (in this process, or on a Dask cluster
with ``cluster=``).

A public estimator is a few lines naming its spec::

    class SparseGPClassifier(ClassifierMixin, GPEstimator):
        spec = sparse_gp.CLASSIFIER

Inputs are validated with scikit-learn's own helpers (``validate_data``: ``n_features_in_``,
``feature_names_in_`` from DataFrames), standardised with the training rows' statistics as ``pep ingest``
computes them, and predictions come from the spec's predictive (:mod:`pep_gp.pipeline.models.predictive`),
computed in row chunks padded to a few sizes so that they compile once. Fitted arrays are numpy float64, so
pickle and joblib round trips predict bit-identically.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from functools import reduce
from pathlib import Path
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from pydantic import ValidationError
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from ...core import float64
from ...core.likelihoods import Probit
from ...core.models.multiclass_likelihoods import MultiClassLikelihood, Pairwise
from ..data.datasets import ArrayData
from ..data.frames import TableChunk
from ..data.transforms import NumericFeature, Transforms, label_value
from ..data.validation import check_class_labels
from ..errors import InputError, brief
from ..metrics import calibration, regression_calibration
from ..models import ModelSettings, ModelSpec
from ..models.predictive import (Latent, Quantiles, Scored, apply, check_quantiles, class_probabilities,
                                 predict_in_blocks)
from ..engine import connected
from ..runs import checkpoint
from ..runs.config import DEFAULT_BLOCK_ROWS, DEFAULT_MAX_STEPS, TrainConfig
from ..runs.growth import Frame
from ..runs.manifest import RunManifest
from ..training.callbacks import callback_progress
from ..training.display import both, progress_display
from ..training.full_batch import FULL_BATCH_ROWS, FullBatchFit
from ..training.trainer import Trainer, TrainJob, TrainResult
from .validation import ValidationStopping, validation_split

FIT_FIELDS: dict[str, Any] = {
    "max_iter": DEFAULT_MAX_STEPS,
    "tol": TrainConfig.model_fields["tol"].default,
    "learning_rate": TrainConfig.model_fields["learning_rate"].default,
    "solver": "auto",
    "batch_size": TrainConfig.model_fields["batch_size"].default,
    "seed": 0,
    "verbose": False,
    "cluster": "none",
    "warm_start": False,
    "callbacks": None,
    "early_stopping": False,
    "validation_fraction": 0.1,
    "n_iter_no_change": 10,
    "num_data": None,
}
"""The fit fields every estimator has besides its spec's settings, with the defaults of ``pep train``:
``max_iter`` (the most steps), ``tol`` (the stopping rule, :mod:`pep_gp.pipeline.training.stopping`; 0 runs
all ``max_iter`` steps), ``learning_rate`` (Adam), ``solver`` (``"lbfgs"``: full batch, L-BFGS,
:mod:`pep_gp.pipeline.training.full_batch`; ``"adam"``: the trainer's minibatch Adam steps; ``"auto"``: L-BFGS
where the training rows fit one batch of at most :data:`~pep_gp.pipeline.training.full_batch.FULL_BATCH_ROWS`
rows and ``tol > 0``, without ``early_stopping``, except for the deep GPs and the multi-class SEP and tied-EP
classifiers, docs/how-to/training.md), ``batch_size`` (rows per step; None: all rows),
``seed`` (initialisation and minibatch order), ``verbose`` (a progress display on stderr), ``cluster``
(``"none"``, ``"local:N"``, a scheduler address, or a ``distributed.Client``), ``warm_start`` (scikit-learn's:
``fit`` starts from the previous fit's parameters, in its frame, :meth:`GPEstimator.fit`), ``callbacks`` (a list
of :class:`~pep_gp.pipeline.training.callbacks.Callback`, e.g. the MLflow and TensorBoard loggers of
:mod:`pep_gp.pipeline.training.tracking`) and scikit-learn's MLP early stopping, ``early_stopping``,
``validation_fraction`` and ``n_iter_no_change`` (evaluations, one per epoch; improvements by more than ``tol``
nats per row: :mod:`pep_gp.pipeline.estimators.validation`), and ``num_data`` (as GPflow's SVGP spells it: the
rows the energy's data term stands for, when a stream's size is known in advance; None: the rows trained on,
for ``partial_fit`` every row seen so far). A model's own training defaults replace these (:func:`fit_fields`)."""

ESTIMATORS: dict[str, type["GPEstimator"]] = {}
"""The estimator of each model, by ``--model`` name: every :class:`GPEstimator` subclass that sets ``spec``
adds itself when it is defined (the built-in ones in :mod:`pep_gp.pipeline.estimators.models`, a plugin
model's wherever it is written); :func:`estimator_for` makes one for a registered model without."""

CONFIG_NAMES = {"max_iter": "max_steps"}
"""The fit fields whose :class:`~pep_gp.pipeline.runs.config.TrainConfig` field has another name."""

PREDICT_BLOCK_ROWS = DEFAULT_BLOCK_ROWS
"""Rows per predictive call, as ``pep predict`` on a run of the default config: one compiled shape, and the
same bits as ``pep predict`` (the multi-class quadrature holds ~80·C² floats per row)."""

MAX_FULL_COV_ROWS = 5_000
"""The most rows ``predict_f(X, full_cov=True)``, ``sample_f`` and ``sample_y`` take: the covariance holds n²
floats per output (5,000 rows: 200 MB, and an O(n³) eigendecomposition to draw from it)."""


def fit_fields(spec: ModelSpec) -> dict[str, Any]:
    """:data:`FIT_FIELDS` with the defaults the spec sets for itself (``spec.train_defaults``), as ``pep train
    --model NAME`` takes them."""
    own = spec.train_defaults
    return {name: own.get(CONFIG_NAMES.get(name, name), default) for name, default in FIT_FIELDS.items()}


def generated_init(settings: type[ModelSettings], fit_fields: dict[str, Any], model: str) -> Callable[..., None]:
    """An ``__init__`` whose keyword arguments are the fields of ``settings`` (with their defaults) and
    ``fit_fields``, each stored as an attribute of the same name (scikit-learn's convention)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    signature = inspect.Signature([
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *(inspect.Parameter(name, keyword, default=field.get_default()) for name, field in settings.model_fields.items()),
        *(inspect.Parameter(name, keyword, default=default) for name, default in fit_fields.items())])

    def __init__(self, **params: Any) -> None:
        bound = signature.bind(self, **params)
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)

    __init__.__signature__ = signature
    __init__.__doc__ = f"The settings of {model} and the fit fields (see the class docstring)."
    return __init__


class FittedGP(BaseEstimator):
    """What every pep estimator shares once fitted: validated inputs standardised with the training rows'
    statistics, predictions from a predictive in padded row chunks, and scikit-learn's tags. A subclass
    fits and sets ``x_mean_``, ``x_std_`` and what its ``_predictive()``/``_predict_params()`` need."""

    _is_classifier: ClassVar[bool]
    _binary: ClassVar[bool] = False  # a classifier of exactly two classes
    Settings: ClassVar[type[ModelSettings]]

    def _settings(self) -> dict[str, Any]:
        """The spec's settings from the constructor arguments (ValueError naming a bad one)."""
        values = {name: getattr(self, name) for name in self.Settings.model_fields}
        try:
            return self.Settings(**values).model_dump()
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {brief(e['input'])})"
                                 for e in error.errors())
            raise ValueError(f"{type(self).__name__}: {problems}") from None

    def _training_data(self, X, y, classes: np.ndarray | None = None, reset: bool = True,
                       validation: bool = False) -> ArrayData:
        """Validated training data (sets ``n_features_in_``, ``feature_names_in_`` when ``reset``, else checks
        them; sets ``classes_``: ``y``'s labels, or ``classes`` when given, which every label must be among);
        with ``validation``, ``validation_fraction`` of the rows held out as its test split
        (:func:`~pep_gp.pipeline.estimators.validation.validation_split`)."""
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=not self._is_classifier, reset=reset)
        if not self._is_classifier:
            return self._array_data(X, np.asarray(y, dtype=np.float64), "regression", validation)
        if classes is None:
            self.classes_, labels = check_class_labels(y, binary=self._binary)
            return self._array_data(X, labels, "classification", validation)
        labels = np.searchsorted(classes, y)
        unknown = np.unique(y[(labels >= classes.size) | (classes[np.minimum(labels, classes.size - 1)] != y)])
        if unknown.size:
            raise ValueError(f"{type(self).__name__}: y has labels {unknown.tolist()} not among classes "
                             f"{classes.tolist()}")
        self.classes_ = classes
        return self._array_data(X, labels.astype(np.int64), "classification", validation)

    def _array_data(self, X: np.ndarray, y: np.ndarray, task: str, validation: bool) -> ArrayData:
        n_classes = int(self.classes_.size) if task == "classification" else None
        if not validation:
            return ArrayData(X, y, task, n_classes)
        x_fit, y_fit, x_validation, y_validation = validation_split(
            type(self).__name__, X, y, self.validation_fraction, self.seed, stratify=task == "classification")
        return ArrayData(x_fit, y_fit, task, n_classes, held_out=(x_validation, y_validation))

    def _predictive(self):
        raise NotImplementedError

    def _predict_params(self):
        return self.params_

    def _model_rows(self, X) -> np.ndarray:
        """The model features of ``X``, float64. A run loaded from a table's store (``transforms_``: one-hot,
        time or centred columns) takes a DataFrame of the table's columns, transformed as at ingest, or an
        array of its features' values before their offsets (0/1 indicators, numbers, seconds), which are
        then subtracted; otherwise ``X`` holds the features as the model was fitted on them."""
        transforms = getattr(self, "transforms_", None)
        if transforms is None:
            return validate_data(self, X, dtype=np.float64, reset=False)
        if hasattr(X, "columns"):
            return validate_data(self, transforms.apply(TableChunk(X, X.isna(), "X", np.arange(len(X)))),
                                 dtype=np.float64, reset=False)
        return validate_data(self, X, dtype=np.float64, reset=False) - transforms.offsets

    def _predict_outputs(self, X, predictive: Callable | None = None, every_row: tuple[np.ndarray, ...] = (),
                         per_row: tuple[np.ndarray, ...] = ()) -> dict[str, np.ndarray]:
        """The outputs of ``predictive`` (the model's predictive by default) for the rows of ``X``, in blocks
        of one size (``pep predict``'s); ``every_row``: inputs the predictive takes per row, the same for
        every row; ``per_row``: inputs of one value per row of ``X``, after those."""
        check_is_fitted(self)
        x = (self._model_rows(X) - self.x_mean_) / self.x_std_
        row_inputs = [np.broadcast_to(a, (x.shape[0], *np.shape(a))) for a in every_row]
        for a in per_row:
            if len(a) != x.shape[0]:
                raise ValueError(f"expected one value per row of X ({x.shape[0]}), got {len(a)}")
            row_inputs.append(a)
        with float64():
            params = jax.tree_util.tree_map(jnp.asarray, self._predict_params())
            return predict_in_blocks(predictive or self._predictive(), params, x,
                                     getattr(self, "block_rows_", PREDICT_BLOCK_ROWS), *row_inputs)

    def _latent(self, full_cov: bool) -> Callable:
        """The latent moments as a predictive: :class:`~pep_gp.pipeline.models.predictive.Latent` of ``model_``."""
        return Latent(self.model_, full_cov)

    def _latent_units(self) -> tuple[float, float]:
        """``(shift, scale)`` from the model's latent units to the user's: none for a classifier."""
        return 0.0, 1.0

    def predict_f(self, X, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """The posterior of the latent function at the rows of ``X``: its mean and variance per output or,
        with ``full_cov``, the mean and the covariance across the rows.

        For a sparse GP with ``q(u) = N(m, S)`` this is ``∫ p(f|u) q(u) du``, mean ``K_xz K_zz⁻¹m`` and
        covariance ``K_xx − K_xz K_zz⁻¹K_zx + K_xz K_zz⁻¹ S K_zz⁻¹K_zx`` (Titsias 2009, eq. 6; Bui, Yan & Turner
        2017, §3.1); for the exact-GP classifier the EP posterior (Rasmussen & Williams 2006, eqs.
        3.60–3.61). A regressor's latent values are in the targets' units (``f·scale + shift`` of
        ``targets_``, the variance times ``scale²``): ``predict`` adds the noise variance to them. A binary
        classifier's ``f`` is that of ``classes_[1]`` (``p = Φ(f)``, probit); a multi-class one has one
        ``f`` per class, in the order of ``classes_``. A deep GP gives the moments of its moment-matched
        forward pass (Bui et al. 2016, §7), not those of its non-Gaussian output, and refuses ``full_cov``.

        Args:
            X: rows, as for ``predict``.
            full_cov: the covariance across rows instead of the variances; at most
                :data:`MAX_FULL_COV_ROWS` rows.

        Returns:
            ``(mean, var)``: ``[n]`` each, ``[n, C]`` for a multi-class model; with ``full_cov``
            ``(mean, cov)`` with ``cov`` ``[n, n]`` (``[C, n, n]``).

        Raises:
            ValueError: ``full_cov`` for more than :data:`MAX_FULL_COV_ROWS` rows, or for a deep GP.
        """
        if not full_cov:
            out = self._predict_outputs(X, self._latent(False))
        else:
            check_is_fitted(self)
            x = (self._model_rows(X) - self.x_mean_) / self.x_std_
            if x.shape[0] > MAX_FULL_COV_ROWS:
                raise ValueError(f"full_cov is limited to {MAX_FULL_COV_ROWS:,} rows (n² floats per output); "
                                 f"got {x.shape[0]:,}: pass fewer rows")
            with float64():
                params = jax.tree_util.tree_map(jnp.asarray, self._predict_params())
                out = jax.device_get(apply(self._latent(True), params, x))
        shift, scale = self._latent_units()
        return (np.asarray(out["mean"]) * scale + shift,
                np.asarray(out["cov" if full_cov else "var"]) * scale**2)

    def _draw_f(self, X, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        """Joint draws of the latent function at the rows of ``X`` from :meth:`predict_f`'s covariance:
        ``mean + Q Λ^½ z`` with ``cov = QΛQᵀ`` (``eigh``; rounding's tiny negative eigenvalues of a
        singular covariance, e.g. at repeated rows, set to 0) and ``z ~ N(0, I)``. ``[n_samples, n]`` or
        ``[n_samples, n, C]``."""
        if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
            raise ValueError(f"n_samples must be a positive integer; got {n_samples!r}")
        mean, cov = self.predict_f(X, full_cov=True)
        means, covs = (mean.T, cov) if mean.ndim == 2 else (mean[None], cov[None])  # [G, n], [G, n, n]
        values, vectors = np.linalg.eigh(covs)
        roots = vectors * np.sqrt(np.maximum(values, 0.0))[:, None, :]
        draws = means + np.einsum("gij,sgj->sgi", roots, rng.standard_normal((n_samples, *means.shape)))
        return draws.transpose(0, 2, 1) if mean.ndim == 2 else draws[:, 0]

    def sample_f(self, X, n_samples: int = 1, seed: int = 0) -> np.ndarray:
        """Joint draws of the latent function at the rows of ``X`` from ``N(mean, cov)`` of
        ``predict_f(X, full_cov=True)`` (so at most :data:`MAX_FULL_COV_ROWS` rows; not for a deep GP), in
        the same units. The same ``seed`` gives the same draws.

        Returns:
            ``[n_samples, n]``, or ``[n_samples, n, C]`` for a multi-class model.
        """
        return self._draw_f(X, n_samples, np.random.default_rng(seed))

    @property
    def kernel_(self):
        """The fitted kernel with its learned values (one per latent GP, in the standardised inputs' units),
        printed readably; a deep GP's are each layer's ``params_.layers[l].kernel``."""
        check_is_fitted(self)
        return self.params_.kernel

    def log_marginal_likelihood(self) -> float:
        """The approximate log marginal likelihood of the training targets (in their own units) at the
        fitted parameters."""
        check_is_fitted(self)
        return float(self.log_marginal_likelihood_value_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        tags.input_tags.allow_nan = False
        return tags

    def __getstate__(self):
        """The state with every JAX array as a numpy array (float64 kept): a pickle or joblib file loads and
        predicts bit-identically in a process that never enabled JAX's float64."""
        state = super().__getstate__()
        return jax.tree_util.tree_map(lambda leaf: np.asarray(leaf) if isinstance(leaf, jax.Array) else leaf, state)


class GPEstimator(FittedGP):
    """The scikit-learn face of a spec (see the module docstring). Subclasses set ``spec``; their
    ``__init__`` is generated from the spec's settings and :data:`FIT_FIELDS`.

    Attributes (after ``fit``): ``params_`` (numpy pytree, the model's parameters in standardised units),
    ``model_`` (the pep_gp.core model), ``x_mean_``/``x_std_``, ``targets_`` (regression units),
    ``classes_`` (classifiers), ``n_features_in_``, ``feature_names_in_`` (DataFrames), ``n_iter_``,
    ``converged_``, ``energy_trace_`` (the energy estimate of every step), ``solver_`` (``"lbfgs"`` or
    ``"adam"``: what ``solver`` chose), ``n_rejected_steps_``,
    ``n_rejected_site_updates_``, ``log_marginal_likelihood_value_``, ``notes_`` (settings the trainer
    changed or chose, e.g. M capped by the rows), ``model_settings_`` (the settings the model trained with:
    what ``likelihood="auto"`` chose, M capped; the parameters stay as given), ``stop_reason_`` (why a callback stopped the fit, else None),
    ``validation_scores_`` (with ``early_stopping``, the validation NLL of every evaluation, nats per row: lower
    is better, unlike scikit-learn's MLP scores; else None) and ``best_validation_score_`` (the lowest, whose
    parameters ``params_`` are; else None).
    """

    spec: ClassVar[ModelSpec]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "spec" in cls.__dict__:
            cls._is_classifier = cls.spec.task == "classification"
            cls._binary = cls.spec.n_classes == 2
            cls.Settings = cls.spec.Settings
            cls.__init__ = generated_init(cls.spec.Settings, fit_fields(cls.spec), f"--model {cls.spec.name}")
            ESTIMATORS[cls.spec.name] = cls


    def _config(self, n_rows: int) -> TrainConfig:
        if self.batch_size is not None and not (isinstance(self.batch_size, (int, np.integer)) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be None or a positive integer; got {self.batch_size!r}")
        try:
            return TrainConfig(model=self._settings(), learning_rate=self.learning_rate,
                               batch_size=np.iinfo(np.int32).max if self.batch_size is None else int(self.batch_size),
                               seed=self.seed, max_steps=self.max_iter, tol=self.tol)
        except ValidationError as error:
            fields = {config: mine for mine, config in CONFIG_NAMES.items()}
            problems = "; ".join(f"{fields.get(e['loc'][0], e['loc'][0])}: {e['msg']} (got {e['input']!r})"
                                 for e in error.errors())
            raise ValueError(f"{type(self).__name__}: {problems}") from None

    _streams: ClassVar[bool] = True  # trained in minibatches over its rows: partial_fit is offered
    _full_batch: ClassVar[bool] = True  # solver="auto" fits it by L-BFGS where the rows fit one batch (else Adam)

    def _solver(self, config: TrainConfig, n_rows: int) -> str:
        """The solver of a ``fit`` on ``n_rows`` training rows (see ``solver`` in :data:`FIT_FIELDS`): ``"lbfgs"``
        or ``"adam"`` (ValueError for another value, or ``"lbfgs"`` with ``early_stopping``, whose evaluations
        are the epochs of minibatch training)."""
        if self.solver not in ("auto", "lbfgs", "adam"):
            raise ValueError(f"{type(self).__name__}: solver must be 'auto', 'lbfgs' or 'adam'; got {self.solver!r}")
        if self.solver == "lbfgs" and self.early_stopping:
            raise ValueError(f"{type(self).__name__}: early_stopping evaluates the epochs of minibatch training: "
                             "use solver='adam' (or 'auto') with it")
        if self.solver != "auto":
            return self.solver
        fits = n_rows <= FULL_BATCH_ROWS and config.batch_size >= n_rows
        return "lbfgs" if fits and self._full_batch and self.tol > 0 and not self.early_stopping else "adam"

    def fit(self, X, y):
        """Fit the model by maximising its energy (the approximate log marginal likelihood): full batch by
        L-BFGS where the rows fit one batch (``solver``, :mod:`pep_gp.pipeline.training.full_batch`: until its
        tolerance or ``max_iter`` iterations), else with the trainer's minibatch Adam steps, until the stopping
        rule says converged or ``max_iter`` steps (a ``ConvergenceWarning`` when either is not). ``solver_``
        says which ran. An Adam fit
        that collapsed far below its best energy keeps its best parameters, warns (``ConvergenceWarning``)
        and has ``converged_`` False (:mod:`pep_gp.pipeline.training.stopping`).

        ``callbacks`` are told of every step and evaluation (:mod:`pep_gp.pipeline.training.callbacks`); one
        that raises ``StopTraining`` ends the fit after that step (``converged_`` False, ``stop_reason_`` its
        message), any other error it raises propagates. With ``early_stopping=True`` the fit trains on all but
        ``validation_fraction`` of the rows, stops when the held-out NLL has not improved by more than ``tol``
        for more than ``n_iter_no_change`` evaluations (``converged_`` True), and ends at the parameters of the
        best (:mod:`pep_gp.pipeline.estimators.validation`).

        With ``warm_start=True`` on a fitted estimator, the fit starts from its parameters (a new Adam state,
        steps counted from 0) and keeps its frame: the inputs' standardisation, the targets' scaling, the
        model's settings and classes of the first fit (new data is standardised as the old was, so the
        parameters keep their meaning; a label outside ``classes_`` is refused)."""
        self._refuse_inducing_beyond(X)
        warm = bool(self.warm_start) and hasattr(self, "params_")
        name = type(self).__name__
        monitor = ValidationStopping.of(name, self.n_iter_no_change, self.tol) if self.early_stopping else None
        data = self._training_data(X, y, classes=self.classes_ if warm and self._is_classifier else None,
                                   reset=not warm, validation=monitor is not None)
        config = self._config(data.n_rows("train"))
        solver = self._solver(config, data.n_rows("train"))
        with self._trainer(data, config, warm_from=self if warm else None, monitor=monitor,
                           rows_represented=self._rows_represented(data.n_rows("train"))) as (
                trainer, progress, energies):
            if monitor is not None and trainer.test is None:
                raise ValueError(f"{name}: early_stopping scores the validation rows by the model's predictive "
                                 f"density, which {self.spec.name} does not have")
            if solver == "lbfgs":
                full_batch = FullBatchFit(trainer, self.max_iter, self.tol)
                result, opt_state = full_batch.run(progress), full_batch.opt_state
            else:
                result, opt_state = trainer.run(progress=progress), None
            self._set_fitted(trainer, result if monitor is None else monitor.ended(result), np.asarray(energies),
                             opt_state=opt_state)
            self.solver_ = solver
            self.validation_scores_, self.best_validation_score_ = (  # None without early stopping, as scikit-learn's
                (None, None) if monitor is None else (list(monitor.scores), monitor.best_score))
            progress("end", summary=self._final_metrics())
        self.n_rows_seen_, self._stream_epochs = data.n_rows("train"), 0
        self._fitted_on(data)
        return self

    def _refuse_inducing_beyond(self, X) -> None:
        """ValueError when ``inducing_points`` has more rows than ``X``, before anything is sized by them (the
        settings hold them as lists: ten million points for a 120-row fit took minutes to be refused)."""
        points = getattr(self, "inducing_points", None)
        if points is not None and len(points) > len(X):
            raise ValueError(f"inducing_points has {len(points):,} rows, more than the {len(X):,} training rows")

    @available_if(lambda self: self._streams)
    def partial_fit(self, X, y, classes=None):
        """One pass (epoch) of training steps over the rows ``X, y``, continuing from the previous
        ``partial_fit``: stochastic EP over a stream (Li, Hernández-Lobato & Turner 2015), as ``pep train
        --resume --new-rows-only`` takes on a grown store.

        The first call fixes the frame (the inputs' standardisation and the targets' scaling of its rows, the
        model's settings, and for a classifier ``classes``, required on the first call as in scikit-learn's
        ``SGDClassifier``); each call's steps (``ceil(rows / batch_size)``) continue the step count and the
        Adam state, its minibatch order drawn as a grown run's (:mod:`pep_gp.pipeline.training.sampling`), and
        its energy's data term is scaled to every row seen so far (the tied factor stands for them all), or to
        ``num_data`` rows when the stream's size is known: then ``partial_fit`` over its parts, in the order
        ``fit`` draws its minibatches, takes exactly ``fit``'s steps on the whole.
        One call on fresh data takes exactly the steps of ``fit`` with ``max_iter`` one epoch and ``tol=0``; a
        call after ``fit`` continues from its parameters, in its frame, counting the rows it was fitted on.

        Args:
            X: inputs [n, D].
            y: labels (within ``classes``) or targets [n].
            classes: classifiers: every label the stream may hold, on the first call (later: None or the same).

        Raises:
            ValueError: no ``classes`` on a classifier's first call, other ``classes`` later, a label outside
                them, or inputs of another width than the first call's.
        """
        first = not hasattr(self, "n_rows_seen_")
        if self._is_classifier:
            classes = self._stream_classes(classes, first)
        data = self._training_data(X, y, classes=classes, reset=first)
        config = self._config(data.n_rows("train")).model_copy(update={"epochs": 1, "max_steps": None})
        seen = data.n_rows("train") + (0 if first else self.n_rows_seen_)
        with self._trainer(data, config, stream_from=None if first else self,
                           rows_represented=self._rows_represented(seen)) as (
                trainer, progress, energies):
            result = trainer.run(progress=progress)
            before = np.zeros(0) if first else self.energy_trace_
            self._set_fitted(trainer, result, np.concatenate([before, energies]), warn=False)
            self.solver_ = "adam"
            progress("end", summary=self._final_metrics())
        self.n_rows_seen_ = seen
        self._stream_epochs = 1 if first else self._stream_epochs + 1
        self._fitted_on(data)
        return self

    def _rows_represented(self, seen: int) -> int:
        """The rows the energy's data term stands for: ``num_data``, or the ``seen`` rows when None."""
        if self.num_data is None:
            return seen
        if not (isinstance(self.num_data, (int, np.integer)) and not isinstance(self.num_data, bool)
                and self.num_data >= seen):
            raise ValueError(f"{type(self).__name__}: num_data must be None or an integer of at least the rows "
                             f"trained on so far ({seen}); got {self.num_data!r}")
        return int(self.num_data)

    def _stream_classes(self, classes, first: bool) -> np.ndarray:
        """``partial_fit``'s classes: required (and checked) on the first call, the same ones later."""
        if first and classes is None:
            raise ValueError(f"{type(self).__name__}: classes must be passed on the first call to partial_fit "
                             "(every label the stream may hold)")
        if first:
            return check_class_labels(np.asarray(classes), binary=self._binary)[0]
        if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError(f"{type(self).__name__}: classes={np.unique(classes).tolist()} is not the same as on the "
                             f"first call to partial_fit ({self.classes_.tolist()})")
        return self.classes_

    @contextmanager
    def _trainer(self, data: ArrayData, config: TrainConfig, *, warm_from: "GPEstimator | None" = None,
                 stream_from: "GPEstimator | None" = None, rows_represented: int | None = None,
                 monitor: Callable[..., None] | None = None):
        """The trainer of a fit (``warm_from``: starting at a fitted estimator's parameters, in its frame;
        ``stream_from``: continuing its ``partial_fit``), its progress callback (the step energies' record, the
        display, the ``callbacks`` and the early-stopping ``monitor``) and the step energies. A fit that raises
        tells the callbacks so (``end`` with no summary)."""
        energies: list[float] = []

        def record(event: str, **info: Any) -> None:
            if event == "step":
                energies.append(info["energy"])

        try:
            told = callback_progress(self.callbacks)
        except ValueError as error:
            raise ValueError(f"{type(self).__name__}: {error}") from None
        previous = warm_from or stream_from
        with connected(self.cluster) as backend, progress_display(bool(self.verbose), type(self).__name__) as show:
            try:
                trainer = Trainer(TrainJob(self.spec, data, config, None), backend,
                                  None if warm_from is None else warm_from.params_,
                                  frame=None if previous is None else previous._frame, rows_represented=rows_represented)
            except InputError as error:
                raise ValueError(f"{type(self).__name__}: {error}") from None
            if stream_from is not None:
                trainer.continue_from(stream_from.params_, stream_from._opt_state, int(stream_from.n_iter_),
                                      stream_from._stream_epochs)
            progress = reduce(both, [record, show, told, *([monitor] if monitor is not None else [])])
            try:
                yield trainer, progress, energies
            except BaseException:
                told("end", summary=None)
                raise

    @property
    def model_settings_(self) -> dict[str, Any]:
        """The settings the fitted model trained with (``likelihood="auto"`` decided, ``num_inducing`` capped by
        the rows), as its run records them; ``get_params()`` keeps the parameters as given."""
        check_is_fitted(self)
        return dict(self._frame.model_settings)

    def _fitted_on(self, data: ArrayData) -> None:
        """What a subclass keeps of its training data (nothing: the model's state is in ``params_``)."""

    def save(self, directory: str | Path) -> Path:
        """Write the fitted estimator as a run directory that ``pep predict``, ``pep evaluate --data STORE`` and
        :func:`pep_gp.load` read (:mod:`pep_gp.pipeline.estimators.runs`: the trainer's checkpoint format,
        arrays and a JSON manifest, never a pickle); returns the checkpoint's path.

        Raises:
            InputError: ``directory`` already holds a run (choose a new directory).
        """
        check_is_fitted(self)
        directory = Path(directory)
        if checkpoint.has_checkpoints(directory):
            raise InputError(f"{directory}: already holds a run; save into a new directory")
        manifest = RunManifest(
            model=self.spec.name, model_settings=self._frame.model_settings,  # as trained: M capped, auto decided
            parameterisation=self.spec.parameterisation, model_binding=self.binding_,
            data="the estimator's in-memory training data", dataset_checksum=self.data_checksum_,
            config=self._config(1), x_mean=self.x_mean_.tolist(), x_std=self.x_std_.tolist(),
            targets={"shift": self.targets_.shift, "scale": self.targets_.scale},
            classes=self.classes_.tolist() if self._is_classifier else None,
            feature_names=None if not hasattr(self, "feature_names_in_") else [str(n) for n in self.feature_names_in_],
            transforms=self._transforms().to_json(), converged=bool(self.converged_),
            log_marginal_likelihood=float(self.log_marginal_likelihood_value_), total_steps=int(self.n_iter_),
            rejected_steps=int(self.n_rejected_steps_), rejected_site_updates=int(self.n_rejected_site_updates_))
        return manifest.write(directory, int(self.n_iter_), {"params": self.params_}, keep=1)

    def _transforms(self) -> Transforms:
        """How ``pep predict`` reads a table for this estimator: its columns (``feature_names_in_``, else
        ``x0, x1, …``) as numeric features, and its classes as the labels."""
        transforms = getattr(self, "transforms_", None)
        if transforms is not None:  # loaded from a run of a table with text columns
            return transforms
        names = ([str(name) for name in self.feature_names_in_] if hasattr(self, "feature_names_in_")
                 else [f"x{j}" for j in range(self.n_features_in_)])
        labels = tuple(label_value(label) for label in self.classes_) if self._is_classifier else None
        return Transforms(features=tuple(NumericFeature(column=name) for name in names), labels=labels, na="fail",
                          target="y", task="classification" if self._is_classifier else "regression")

    def _set_fitted(self, trainer: Trainer, result: TrainResult, energies: np.ndarray, warn: bool = True,
                    opt_state: Any = None) -> None:
        """Keep what the fit of ``trainer`` gave (``opt_state``: the Adam state that ``partial_fit`` continues
        from and ``save`` writes, when the trainer's loop did not run: a full-batch fit's fresh one)."""
        source = trainer.train.source
        self.params_ = jax.tree_util.tree_map(np.asarray, jax.device_get(result.params))
        self._opt_state = jax.tree_util.tree_map(np.asarray, jax.device_get(
            trainer.state.opt_state if opt_state is None else opt_state))
        self._frame = Frame(list(source.x_mean), list(source.x_std), trainer.targets, trainer.binding,
                            trainer.settings.model_dump())
        self.model_ = trainer.model
        self.x_mean_, self.x_std_ = np.asarray(source.x_mean), np.asarray(source.x_std)
        self.targets_ = trainer.targets
        self.energy_trace_ = energies
        self.n_iter_, self.converged_ = result.steps, result.reported_converged
        self.n_rejected_steps_ = result.rejected_steps
        self.n_rejected_site_updates_ = result.rejected_site_updates
        self.notes_ = list(result.notes)
        self.stop_reason_ = result.stopped
        self.binding_ = trainer.binding
        self.data_checksum_ = trainer.job.store.checksum
        self.log_marginal_likelihood_value_ = (
            trainer.log_marginal_likelihood(result.params) if opt_state is None  # a full-batch fit knows its energy:
            else result.history[-1]["energy"] - trainer.n_total * math.log(trainer.targets.scale))  # no more compiling
        unfinished = (warn and self.tol > 0 and self.max_iter > 0 and not result.converged and result.collapse is None
                      and result.stopped is None)
        if unfinished and opt_state is not None:
            warnings.warn(f"{type(self).__name__}: L-BFGS had not converged when max_iter={self.max_iter} iterations "
                          f"were reached (tol={self.tol:g}); increase max_iter", ConvergenceWarning, stacklevel=3)
        elif unfinished:
            gain = (f"the energy still rose by {result.gain_per_row:.2g} nats per row over the last "
                    f"{trainer.stopping.window} steps" if np.isfinite(result.gain_per_row) else
                    f"fewer than two {trainer.stopping.window}-step windows to compare")
            warnings.warn(f"{type(self).__name__}: {gain} when max_iter={self.max_iter} was reached "
                          f"(tol={self.tol:g}); increase max_iter (or the learning rate)", ConvergenceWarning,
                          stacklevel=3)
        if result.collapse is not None:
            warnings.warn(f"{type(self).__name__}: the fit collapsed: {result.collapse}; its predictions may be "
                          "poor: try another seed or a lower learning_rate", ConvergenceWarning, stacklevel=3)

    def _final_metrics(self) -> dict[str, Any]:
        """What the callbacks' ``on_end`` receives: the fit's final energy, evidence, steps and verdict (and
        the best validation NLL with ``early_stopping``)."""
        summary = {"n_iter": int(self.n_iter_), "converged": bool(self.converged_),
                   "log_marginal_likelihood": float(self.log_marginal_likelihood_value_)}
        if self.energy_trace_.size:
            summary["energy"] = float(self.energy_trace_[-1])
        if getattr(self, "best_validation_score_", None) is not None:
            summary["best_validation_score"] = float(self.best_validation_score_)
        return summary

    def _predictive(self):
        return self.spec.predictive(self.model_, self.targets_)


class GPClassifierMixin:
    """``predict_log_proba``, ``predict_proba`` and ``predict`` from a predictive's ``log_proba``."""

    def predict_log_proba(self, X) -> np.ndarray:
        """``log p(y = classes_[c] | x)`` per row."""
        return self._predict_outputs(X)["log_proba"]

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities per row, columns in the order of ``classes_``, each row summing to 1 (as
        ``pep predict`` writes them)."""
        return class_probabilities(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        """The most probable class per row (the first on a tie)."""
        most_probable = np.argmax(self.predict_proba(X), axis=1)  # NotFittedError before classes_ is read
        return self.classes_[most_probable]

    def calibration_report(self, X, y) -> dict[str, Any]:
        """``pep evaluate``'s report on ``(X, y)``: NLL, error, Brier score, ECE (15 equal-width bins of the
        top-class probability) and the reliability bins (:func:`pep_gp.pipeline.metrics.calibration`)."""
        proba = self.predict_proba(X)
        y = np.asarray(y)
        unknown = sorted(set(np.unique(y).tolist()) - set(self.classes_.tolist()))
        if unknown:
            raise ValueError(f"expected labels among the fitted classes {self.classes_.tolist()}, got {unknown}")
        return calibration(np.searchsorted(self.classes_, y), proba)  # classes_ is sorted (np.unique)

    def sample_y(self, X, n_samples: int = 1, seed: int = 0) -> np.ndarray:
        """Draws of the labels at the rows of ``X``, values of ``classes_``: from each joint draw of
        :meth:`sample_f`, a label is drawn by the model's likelihood (its ``sample_labels``): a binary one is
        ``classes_[1]`` when ``f + ε > 0``, ``ε ~ N(0, 1)`` (the probit likelihood, ``p = Φ(f)``, also of a model
        that holds none; standard logistic ``ε`` for the logistic, ``p = σ(f)``), and a multi-class one
        (:meth:`~pep_gp.core.models.multiclass_likelihoods.MultiClassLikelihood.sample_labels`: ``classes_[argmax_c f_c]``,
        the step likelihood of Villacampa-Calvo & Hernández-Lobato 2017, its noise in ``f``'s variance, as the
        deep GP's pairs; ``argmax_c (f_c + g_c)``, ``g_c`` standard Gumbel, for the softmax). The same ``seed``
        gives the same draws; limits as :meth:`sample_f`.

        Returns:
            ``[n_samples, n]``.
        """
        rng = np.random.default_rng(seed)
        f = self._draw_f(X, n_samples, rng)
        # the fitted model's likelihood (a setting may say "auto": the multi-class model records its choice)
        likelihood = getattr(getattr(self, "model_", None), "likelihood", None)
        if f.ndim == 3:  # the multi-class deep GP's pairs draw as the pairwise likelihood's
            likelihood = likelihood if isinstance(likelihood, MultiClassLikelihood) else Pairwise()
        return self.classes_[(Probit() if likelihood is None else likelihood).sample_labels(f, rng)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = not self._binary
        return tags


class GPRegressorMixin:
    """``predict(X, return_std=False)`` from a predictive's ``mean`` and ``var`` (target units, noise included)."""

    def predict(self, X, return_std: bool = False):
        """Predictive mean of ``y`` (and its standard deviation, observation noise included)."""
        out = self._predict_outputs(X)
        return (out["mean"], np.sqrt(out["var"])) if return_std else out["mean"]

    def calibration_report(self, X, y) -> dict[str, Any]:
        """``pep evaluate``'s report on ``(X, y)``: NLL (of the model's own predictive density, as in training's
        held-out metrics: :func:`~pep_gp.pipeline.models.predictive.log_density`), RMSE, CRPS and the coverage
        of the central 50/90/95 % intervals of the model's own predictive (``predict_quantiles``'s, by
        :func:`~pep_gp.pipeline.models.predictive.interval_cdf`) (:func:`pep_gp.pipeline.metrics.regression_calibration`)."""
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1:
            raise ValueError(f"expected y of one target per row, got shape {y.shape}")
        out = self._predict_outputs(X, Scored(self._predictive()), per_row=(y,))
        cdf = (out["cdf_below"], out["cdf"]) if "cdf" in out else None
        return regression_calibration(y, out["mean"], np.sqrt(out["var"]), out["log_density"], cdf)

    def _latent_units(self) -> tuple[float, float]:
        return self.targets_.shift, self.targets_.scale

    def predict_quantiles(self, X, quantiles=(0.025, 0.975)) -> np.ndarray:
        """Quantiles of the predictive distribution of ``y`` (observation noise included) at the rows of
        ``X``: ``mean + std·Φ⁻¹(p)`` for a Gaussian predictive; for a deep GP those of its non-Gaussian
        mixture predictive (:class:`~pep_gp.pipeline.models.predictive.MixturePredictive`, by Newton's method
        on the mixture's CDF), so its intervals may be skewed; for a Student-t or count likelihood those of
        ``∫ p(y|f) q(f) df``. ``pep predict --quantiles`` writes the same values.

        Args:
            X: rows, as for ``predict``.
            quantiles: levels in (0, 1), e.g. ``(0.05, 0.5, 0.95)``.

        Returns:
            ``[n, Q]``, one column per level.

        Raises:
            ValueError: a level outside (0, 1), or none.
        """
        try:
            levels = np.asarray(check_quantiles(np.atleast_1d(quantiles).tolist()), dtype=np.float64)
        except InputError as error:
            raise ValueError(str(error).replace("--quantiles: ", "quantiles: ")) from None
        return self._predict_outputs(X, Quantiles(self._predictive()), (levels,))["quantiles"]

    def sample_y(self, X, n_samples: int = 1, seed: int = 0) -> np.ndarray:
        """Draws of the targets at the rows of ``X`` (their units): each joint draw of :meth:`sample_f` plus
        Gaussian noise of the fitted variance (``predict``'s variance less ``predict_f``'s). The same
        ``seed`` gives the same draws; limits as :meth:`sample_f`.

        Returns:
            ``[n_samples, n]``.
        """
        rng = np.random.default_rng(seed)
        f = self._draw_f(X, n_samples, rng)
        noise_var = np.maximum(self.predict(X, return_std=True)[1] ** 2 - self.predict_f(X)[1], 0.0)
        return f + np.sqrt(noise_var) * rng.standard_normal(f.shape)


def estimator_for(spec: ModelSpec) -> type[GPEstimator]:
    """The estimator class of ``spec``: the one defined for its name (:data:`ESTIMATORS`), else a new
    :class:`GPEstimator` with scikit-learn's mixins of its task, e.g. for a plugin model that defines none
    (``pep_gp.load`` of its runs; such a generated class is not importable, so its instances do not pickle)."""
    if spec.name not in ESTIMATORS:
        mixins = ((GPClassifierMixin, ClassifierMixin) if spec.task == "classification"
                  else (GPRegressorMixin, RegressorMixin))
        name = "".join(part.title() for part in spec.name.replace("_", "-").split("-")) + "Estimator"
        type(name, (*mixins, GPEstimator), {"spec": spec, "__module__": __name__,
                                            "__doc__": f"The estimator of ``--model {spec.name}``: {spec.description}"})
    return ESTIMATORS[spec.name]


__all__ = ["ESTIMATORS", "estimator_for", "FIT_FIELDS", "MAX_FULL_COV_ROWS", "fit_fields", "GPClassifierMixin", "GPEstimator", "GPRegressorMixin"]
