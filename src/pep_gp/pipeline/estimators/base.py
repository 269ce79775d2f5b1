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
pickle and joblib round trips predict bit-identically. What a fitted estimator does (predictions,
latent moments, draws, pickling) is :mod:`pep_gp.pipeline.estimators.fitted`; this module trains.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from functools import reduce
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import jax
import numpy as np
from pydantic import ValidationError
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from ..data.datasets import ArrayData
from ..data.stores import Store
from ..data.transforms import NumericFeature, Transforms, label_value
from ..data.validation import check_class_labels
from ..errors import InputError
from ..models import ModelSettings, ModelSpec
from ..engine import connected
from ..engine.compilation import every_program_cached
from ..runs import checkpoint
from ..runs.config import DEFAULT_MAX_STEPS, TrainConfig
from ..runs.growth import Frame
from ..runs.manifest import RunManifest
from ..training.callbacks import callback_progress
from ..training.display import both, progress_display
from ..training.full_batch import FULL_BATCH_ROWS, FullBatchFit
from ..training.trainer import Trainer, TrainJob, TrainResult
from .fitted import FittedGP, GPClassifierMixin, GPRegressorMixin
from .stores import is_store, opened_store, table_reading
from .validation import ValidationStopping

FIT_FIELDS: dict[str, Any] = {
    "max_iter": DEFAULT_MAX_STEPS,
    "tol": TrainConfig.model_fields["tol"].default,
    "learning_rate": TrainConfig.model_fields["learning_rate"].default,
    "optimizer": TrainConfig.model_fields["optimizer"].default,
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
all ``max_iter`` steps), ``learning_rate`` (the optimiser's), ``optimizer`` (the optax optimiser of the minibatch
steps by name, or a dict of its ``name`` and settings, :mod:`pep_gp.pipeline.optimizers`), ``solver`` (``"lbfgs"``: full batch, L-BFGS,
:mod:`pep_gp.pipeline.training.full_batch`; ``"adam"``: the trainer's minibatch Adam steps; ``"auto"``: L-BFGS
where the training rows fit one batch of at most :data:`~pep_gp.pipeline.training.full_batch.FULL_BATCH_ROWS`
rows and ``tol > 0``, without ``early_stopping``, except for the deep GPs and the multi-class SEP and
direct classifiers and for a fit from a store, which takes ``pep train``'s Adam steps, docs/how-to/training.md), ``batch_size`` (rows per step; None: all rows),
``seed`` (initialisation and minibatch order), ``verbose`` (a progress display on stderr), ``cluster``
(``"none"``, ``"local:N"``, a scheduler address, or a ``distributed.Client``), ``warm_start`` (scikit-learn's:
``fit`` starts from the previous fit's parameters, in its frame, :meth:`GPEstimator.fit`), ``callbacks`` (a list
of :class:`~pep_gp.pipeline.training.callbacks.Callback`, e.g. the MLflow and TensorBoard loggers of
:mod:`pep_gp.pipeline.training.tracking`) and scikit-learn's MLP early stopping, ``early_stopping``,
``validation_fraction`` and ``n_iter_no_change`` (evaluations, one per epoch; improvements by more than ``tol``
nats per row: :mod:`pep_gp.pipeline.estimators.validation`; ``early_stopping="auto"``, ``DeepGPRegressor``'s default:
:data:`AUTO_EARLY_STOPPING_ROWS`), and ``num_data`` (as GPflow's SVGP spells it: the
rows the energy's data term stands for, when a stream's size is known in advance; None: the rows trained on,
for ``partial_fit`` every row seen so far). A model's own training defaults replace these (:func:`fit_fields`)."""

AUTO_EARLY_STOPPING_ROWS = 200
"""The fewest rows ``early_stopping="auto"`` holds out ``validation_fraction`` of (20 at the default 0.1): it
stops early where the estimator's model asks for it (``DeepGPRegressor``, whose 1,000 Adam steps overfit a
noisy table: docs/results/deep-gp.md) on arrays of at least this many rows fitted by Adam, and not on a store
(whose test split ``pep train`` scores), on fewer rows (a validation NLL of under 20 rows is too noisy to stop
on) or with ``solver="lbfgs"``."""

ESTIMATORS: dict[str, type["GPEstimator"]] = {}
"""The estimator of each model, by ``--model`` name: every :class:`GPEstimator` subclass that sets ``spec``
adds itself when it is defined (the built-in ones in :mod:`pep_gp.pipeline.estimators.models`, a plugin
model's wherever it is written); :func:`estimator_for` makes one for a registered model without."""

CONFIG_NAMES = {"max_iter": "max_steps"}
"""The fit fields whose :class:`~pep_gp.pipeline.runs.config.TrainConfig` field has another name."""


def _rows_of(X) -> int:
    """The rows of an array-like ``X`` (a sparse matrix's, and an object's that has only ``__array__``), or 0 where it
    has none to count: the fit's validation then refuses it with its own message."""
    try:
        if hasattr(X, "shape"):
            return int(X.shape[0])
        return len(X) if hasattr(X, "__len__") else int(np.asarray(X).shape[0])
    except (TypeError, IndexError, ValueError):
        return 0


def fit_fields(spec: ModelSpec) -> dict[str, Any]:
    """:data:`FIT_FIELDS` with the defaults the spec sets for itself (``spec.train_defaults``), as ``pep train
    --model NAME`` takes them."""
    own = spec.train_defaults
    return {name: own.get(CONFIG_NAMES.get(name, name), default) for name, default in FIT_FIELDS.items()}


def generated_init(settings: type[ModelSettings], fit_fields: dict[str, Any], model: str,
                   own: Mapping[str, Any] = MappingProxyType({})) -> Callable[..., None]:
    """An ``__init__`` whose keyword arguments are the fields of ``settings`` and ``fit_fields`` with their
    defaults (those named in ``own`` with its values instead), each stored as an attribute of the same name
    (scikit-learn's convention)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    signature = inspect.Signature([
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *(inspect.Parameter(name, keyword, default=own.get(name, field.get_default()))
          for name, field in settings.model_fields.items()),
        *(inspect.Parameter(name, keyword, default=own.get(name, default)) for name, default in fit_fields.items())])

    def __init__(self, **params: Any) -> None:
        bound = signature.bind(self, **params)
        bound.apply_defaults()
        for name, value in list(bound.arguments.items())[1:]:
            setattr(self, name, value)

    __init__.__signature__ = signature
    __init__.__doc__ = f"The settings of {model} and the fit fields (see the class docstring)."
    return __init__


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
            cls.__init__ = generated_init(cls.spec.Settings, fit_fields(cls.spec), f"--model {cls.spec.name}",
                                          cls._own_defaults)
            ESTIMATORS[cls.spec.name] = cls


    def _config(self, n_rows: int) -> TrainConfig:
        if self.batch_size is not None and not (isinstance(self.batch_size, (int, np.integer)) and self.batch_size >= 1):
            raise ValueError(f"batch_size must be None or a positive integer; got {self.batch_size!r}")
        try:
            return TrainConfig(model=self._settings(), learning_rate=self.learning_rate, optimizer=self.optimizer,
                               batch_size=np.iinfo(np.int32).max if self.batch_size is None else int(self.batch_size),
                               seed=self.seed, max_steps=self.max_iter, tol=self.tol)
        except ValidationError as error:
            fields = {config: mine for mine, config in CONFIG_NAMES.items()}
            problems = "; ".join(f"{fields.get(e['loc'][0], e['loc'][0])}: {e['msg']} (got {e['input']!r})"
                                 for e in error.errors())
            raise ValueError(f"{type(self).__name__}: {problems}") from None

    _streams: ClassVar[bool] = True  # trained in minibatches over its rows: partial_fit is offered
    _full_batch: ClassVar[bool] = True  # solver="auto" fits it by L-BFGS where the rows fit one batch (else Adam)
    _own_defaults: ClassVar[dict[str, Any]] = {}  # settings and fit fields whose default differs from pep train's

    def _early_stopping(self, X) -> bool:
        """Whether this fit of ``X`` stops on held-out rows: ``early_stopping`` True, or ``"auto"`` for an
        estimator whose own default it is (:data:`AUTO_EARLY_STOPPING_ROWS`); ValueError for another value."""
        if self.early_stopping not in (True, False, "auto"):
            raise ValueError(f"{type(self).__name__}: early_stopping must be True, False or 'auto'; got "
                             f"{self.early_stopping!r}")
        if self.early_stopping != "auto":
            return bool(self.early_stopping)
        asks = self._own_defaults.get("early_stopping") == "auto"
        return asks and self.solver != "lbfgs" and not is_store(X) and _rows_of(X) >= AUTO_EARLY_STOPPING_ROWS

    def _solver(self, config: TrainConfig, n_rows: int, from_store: bool, early_stopping: bool) -> str:
        """The solver of a ``fit`` on ``n_rows`` training rows, of a store when ``from_store``, stopping on
        held-out rows when ``early_stopping`` (see ``solver`` in :data:`FIT_FIELDS`): ``"lbfgs"`` or ``"adam"``
        (ValueError for another value, or ``"lbfgs"`` with early stopping, whose evaluations are the epochs of
        minibatch training)."""
        if self.solver not in ("auto", "lbfgs", "adam"):
            raise ValueError(f"{type(self).__name__}: solver must be 'auto', 'lbfgs' or 'adam'; got {self.solver!r}")
        if self.solver == "lbfgs" and early_stopping:
            raise ValueError(f"{type(self).__name__}: early_stopping evaluates the epochs of minibatch training: "
                             "use solver='adam' (or 'auto') with it")
        if self.solver != "auto":
            return self.solver
        fits = not from_store and n_rows <= FULL_BATCH_ROWS and config.batch_size >= n_rows
        return "lbfgs" if fits and self._full_batch and self.tol > 0 and not early_stopping else "adam"

    def _full_batch_config(self, config: TrainConfig, n_rows: int) -> TrainConfig:
        """The config of a full-batch fit of ``n_rows`` training rows (arrays, ``solver`` ``"lbfgs"``): ``config``."""
        return config

    def fit(self, X, y=None):
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
        parameters keep their meaning; a label outside ``classes_`` is refused).

        ``X`` may instead be a pep store (its path, or an opened
        :class:`~pep_gp.pipeline.data.stores.Store`; ``y`` None): the fit then trains on the store's training
        split and targets block by block, never holding more than a batch of its rows (the minibatch Adam steps
        of ``pep train --model NAME --data STORE``, whose parameters it ends with, bit for bit, at the same
        settings; its test split is scored every epoch as there), and the fitted estimator reads new rows as a
        run of that store does (:func:`~pep_gp.pipeline.estimators.stores.table_reading`): the store's
        ``feature_names_in_``, or for a table's store ``transforms_``, so that ``predict`` takes a DataFrame of
        the table's own columns; ``classes_`` are the store's labels. ``early_stopping``, which holds out rows of
        ``X``, is refused with a store.

        Raises:
            ValueError: a bad setting, ``y`` given with a store, a path that is not a pep store, a store of the
                other task, or (``warm_start``) a store of other features or classes than the fitted ones."""
        warm = bool(self.warm_start) and hasattr(self, "params_")
        name = type(self).__name__
        early_stopping = self._early_stopping(X)
        monitor = ValidationStopping.of(name, self.n_iter_no_change, self.tol) if early_stopping else None
        data = self._data(X, y, classes=self.classes_ if warm and self._is_classifier else None, reset=not warm,
                          validation=monitor is not None)
        config = self._config(data.n_rows("train"))
        solver = self._solver(config, data.n_rows("train"), isinstance(data, Store), early_stopping)
        config = self._full_batch_config(config, data.n_rows("train")) if solver == "lbfgs" else config
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

    def _data(self, X, y, classes: np.ndarray | None = None, reset: bool = True,
              validation: bool = False) -> ArrayData | Store:
        """The training data of a fit: the store ``X`` names (:meth:`_store_data`), or the validated arrays
        ``X, y`` (:meth:`_training_data`)."""
        if is_store(X):
            return self._store_data(X, y, classes, reset, validation)
        if getattr(self, "inducing_points", None) is not None:  # len(X) only then: X may be any array-like
            self._refuse_inducing_beyond(len(X))
        return self._training_data(X, y, classes=classes, reset=reset, validation=validation)

    def _store_data(self, X, y, classes: np.ndarray | None, reset: bool, validation: bool) -> Store:
        """The store ``X`` names, opened and checked (:func:`~pep_gp.pipeline.estimators.stores.opened_store`).
        With ``reset`` the estimator takes the store's features, how it reads new rows and its classes;
        otherwise (``warm_start``, ``partial_fit`` after the first call) they must be those it was fitted on.
        ``classes`` (``partial_fit``'s) must be the store's labels."""
        name = type(self).__name__
        self._refuse_store(X)
        if validation:
            raise ValueError(f"{name}: early_stopping holds out validation_fraction of the rows of X, which a store "
                             "keeps on disk; fit a store without early_stopping (pep train's held-out scores of its "
                             "test split are the store's own validation)")
        store = opened_store(name, X, y, self.spec.task, several_targets=self._several_targets)
        self._refuse_inducing_beyond(store.n_rows("train"))
        transforms = store.transforms
        if reset:
            for attribute in ("transforms_", "feature_names_in_"):
                vars(self).pop(attribute, None)
            self.n_features_in_ = len(store.feature_names)
            for attribute, value in table_reading(transforms, list(store.feature_names)).items():
                setattr(self, attribute, value)
        else:
            fitted = self._transforms()
            if (fitted.feature_names, fitted.offsets.tolist()) != (transforms.feature_names, transforms.offsets.tolist()):
                raise ValueError(f"{name}: {store.path} holds the features {list(transforms.feature_names)} (offsets "
                                 f"{transforms.offsets.tolist()}), not those the estimator was fitted on "
                                 f"({list(fitted.feature_names)}, offsets {fitted.offsets.tolist()})")
        if self._is_classifier:
            labels = list(transforms.labels)
            if classes is not None and {label_value(c) for c in classes} != set(labels):
                raise ValueError(f"{name}: classes={list(classes)} are not the classes of {store.path} ({labels})")
            if not reset and [label_value(c) for c in self.classes_] != labels:
                raise ValueError(f"{name}: {store.path} holds the classes {labels} (by class index), not the "
                                 f"{self.classes_.tolist()} the estimator was fitted on")
            self.classes_ = np.asarray(labels)
        return store

    def _refuse_inducing_beyond(self, n_rows: int) -> None:
        """ValueError when ``inducing_points`` has more rows than the ``n_rows`` training rows, before anything
        is sized by them (the settings hold them as lists: ten million points for a 120-row fit took minutes to
        be refused)."""
        points = getattr(self, "inducing_points", None)
        if points is not None and len(points) > n_rows:
            raise ValueError(f"inducing_points has {len(points):,} rows, more than the {n_rows:,} training rows")

    @available_if(lambda self: self._streams)
    def partial_fit(self, X, y=None, classes=None):
        """One pass (epoch) of training steps over the rows ``X, y``, continuing from the previous
        ``partial_fit``: stochastic EP over a stream (Li, Hernández-Lobato & Turner 2015), as ``pep train
        --resume --new-rows-only`` takes on a grown store.

        The first call fixes the frame (the inputs' standardisation and the targets' scaling of its rows, the
        model's settings, and for a classifier ``classes``, required on the first call as in scikit-learn's
        ``SGDClassifier``); each call's steps (``ceil(rows / batch_size)``) continue the step count and the
        Adam state, its minibatch order drawn as a grown run's (:mod:`pep_gp.pipeline.training.sampling`), and
        its energy's data term is scaled to every row seen so far (the tied factor stands for them all), or to
        ``num_data`` rows when the stream's size is known: then ``partial_fit`` over its parts, in the order
        ``fit`` draws its minibatches, takes exactly ``fit``'s steps on the whole. ``X`` may be a pep store
        (``y`` None, ``classes`` not needed): the epoch is then over its training split's blocks, read as ``fit``
        reads a store.
        One call on fresh data takes exactly the steps of ``fit`` with ``max_iter`` one epoch and ``tol=0``; a
        call after ``fit`` continues from its parameters, in its frame, counting the rows it was fitted on.

        Args:
            X: inputs [n, D], or a store.
            y: labels (within ``classes``) or targets [n]; None with a store.
            classes: classifiers: every label the stream may hold, on the first call (later: None or the same);
                with a store, None or the store's labels.

        Raises:
            ValueError: no ``classes`` on a classifier's first call on arrays, other ``classes`` later, a label
                outside them, inputs of another width than the first call's, or a store of other features or
                classes than the estimator's (and :meth:`fit`'s reasons to refuse a store).
        """
        first = not hasattr(self, "n_rows_seen_")
        if self._is_classifier and not is_store(X):
            classes = self._stream_classes(classes, first)
        data = self._data(X, y, classes=classes, reset=first)
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
        with (connected(self.cluster) as backend, every_program_cached(),
              progress_display(bool(self.verbose), type(self).__name__) as show):
            try:
                trainer = Trainer(TrainJob(self.spec, data, config, None), backend,
                                  None if warm_from is None else warm_from._run_params(),
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
        return manifest.write(directory, int(self.n_iter_), {"params": self._run_params()}, keep=1)

    def _run_params(self) -> Any:
        """The params as the trainer starts from them and a run stores them: ``params_``."""
        return self.params_

    def _keep_params(self, params: Any) -> None:
        """Keep the params of a fit or of a run (numpy arrays) as ``params_`` (a model that keeps more among
        them, :meth:`_run_params`, splits them)."""
        self.params_ = params

    def _loaded(self, run: Any) -> None:
        """What the estimator reads of its run (:func:`pep_gp.load`) besides every estimator's attributes:
        nothing here."""

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
        self._keep_params(jax.tree_util.tree_map(np.asarray, jax.device_get(result.params)))
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
            else result.history[-1]["energy"] - trainer.n_total * trainer.targets.log_scale())  # no more compiling
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


__all__ = ["ESTIMATORS", "estimator_for", "FIT_FIELDS", "fit_fields", "GPEstimator"]
