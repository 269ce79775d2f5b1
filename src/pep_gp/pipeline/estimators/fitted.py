"""The fitted-model surface every pep estimator shares: :class:`FittedGP` (validated, standardised inputs;
predictions from the spec's predictive in padded row chunks; latent moments and joint draws, ``predict_f`` and
``sample_f``; pickling) and scikit-learn's classifier and regressor faces (:class:`GPClassifierMixin`,
:class:`GPRegressorMixin`: probabilities, labels, predictive quantiles, calibration reports, ``sample_y``).
Training lives in :mod:`pep_gp.pipeline.estimators.base`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

import jax
import numpy as np
from pydantic import ValidationError
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from ...core import float64
from ...core.likelihoods import Probit
from ...core.means import InDataUnits, MeanFunction, Zero
from ...core.parameters import on_device
from ...core.models.deep_gp import DeepGPParams
from ...core.models.multiclass import MultiClassParams
from ...core.models.multiclass_likelihoods import MultiClassLikelihood, Pairwise
from ..data.datasets import ArrayData
from ..data.frames import TableChunk
from ..data.validation import check_class_labels
from ..errors import InputError, brief
from ..metrics import calibration, regression_calibration
from ..models import ModelSettings
from ..models.predictive import (Latent, Quantiles, Scored, apply, check_quantiles, class_probabilities,
                                 predict_in_blocks)
from ..runs.config import DEFAULT_BLOCK_ROWS
from .stores import is_store
from .validation import validation_split

PREDICT_BLOCK_ROWS = DEFAULT_BLOCK_ROWS
"""Rows per predictive call, as ``pep predict`` on a run of the default config: one compiled shape, and the
same bits as ``pep predict`` (the multi-class quadrature holds ~80·C² floats per row)."""

MAX_FULL_COV_ROWS = 5_000
"""The most rows ``predict_f(X, full_cov=True)``, ``sample_f`` and ``sample_y`` take: the covariance holds n²
floats per output (5,000 rows: 200 MB, and an O(n³) eigendecomposition to draw from it)."""


class FittedGP(BaseEstimator):
    """What every pep estimator shares once fitted: validated inputs standardised with the training rows'
    statistics, predictions from a predictive in padded row chunks, and scikit-learn's tags. A subclass
    fits and sets ``x_mean_``, ``x_std_`` and what its ``_predictive()``/``_predict_params()`` need."""

    _is_classifier: ClassVar[bool]
    _binary: ClassVar[bool] = False  # a classifier of exactly two classes
    Settings: ClassVar[type[ModelSettings]]
    _rows_in_memory: ClassVar[str] = ""  # why the model fits arrays only, when it keeps its training rows
    _several_targets: ClassVar[bool] = False  # fits y [N, P] and stores of several targets (multi-output)

    def _refuse_store(self, X) -> None:
        """ValueError when ``X`` names a store and the model keeps its training rows in memory."""
        if self._rows_in_memory and is_store(X):
            raise ValueError(f"{type(self).__name__} fits arrays X, y only, not a store "
                             f"({os.fspath(getattr(X, 'path', X))}): it {self._rows_in_memory}")

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
        (:func:`~pep_gp.pipeline.estimators.validation.validation_split`). An estimator fitted on a table's
        store (``transforms_``) is continued on its store only: arrays of its raw values are not its features."""
        if reset:
            vars(self).pop("transforms_", None)
        elif getattr(self, "transforms_", None) is not None:
            raise ValueError(f"{type(self).__name__}: fitted on a table's store, whose features are its columns "
                             "encoded and less their offsets; continue it on a store of that table")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=not self._is_classifier, reset=reset,
                             multi_output=self._several_targets)
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
            params = jax.tree_util.tree_map(on_device, self._predict_params())
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
                params = jax.tree_util.tree_map(on_device, self._predict_params())
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
        printed readably. A deep GP's is a tuple of each layer's kernel, input layer first (its
        ``params_.layers[l].kernel``: GPflux's ``f_layers[l].kernel``, a GPyTorch deep GP layer's
        ``covar_module``)."""
        check_is_fitted(self)
        if isinstance(self.params_, DeepGPParams):
            return tuple(layer.kernel for layer in self.params_.layers)
        return self.params_.kernel

    @property
    def mean_function_(self):
        """The fitted prior mean in the data's own units: a function of the inputs as given to ``fit``, in the
        latent function's units (a regressor's targets; a classifier's or a count model's ``f``),
        ``shift + scale·m((x − x_mean_)/x_std_)`` of the mean ``m`` the model trained in standardised units
        (``params_.mean``; :meth:`~pep_gp.core.means.MeanFunction.in_data_units`: a ``Constant`` or ``Linear``
        in closed form). A regressor's zero mean is the training targets' mean, ``Constant(shift)``. A deep GP's
        with hidden layers is a function of the last hidden layer's outputs, not of the inputs: its values are in
        the targets' units, its argument as the model sees it. A multi-class model's (the deep one's included) holds
        one mean per class and gives ``[n, C]`` (``Constant`` of ``[C]``, ``Linear`` of ``[C, D]`` weights).
        docs/how-to/mean-functions.md."""
        check_is_fitted(self)
        mean = self._fitted_mean("mean")
        if isinstance(self.params_, DeepGPParams) and len(self.params_.layers) > 1:
            width = self.params_.layers[-1].inducing.shape[-1]
            return mean.in_data_units(np.zeros(width), np.ones(width), *self._latent_units())
        return self._per_class(mean.in_data_units(self.x_mean_, self.x_std_, *self._latent_units()))

    @property
    def input_mean_function_(self):
        """A deep GP's fitted mean of its inputs past the hidden layers (``input_mean_function``; zero for every other
        model) in the data's own units: a function of the inputs as given to ``fit``, in the latent function's units
        without the targets' mean, which :attr:`mean_function_` holds (``scale·m_x((x − x_mean_)/x_std_)``; a
        ``Linear`` one's weights are then per input column, as a linear model's coefficients). A multi-class deep
        GP's holds one per class."""
        check_is_fitted(self)
        return self._per_class(self._fitted_mean("input_mean").in_data_units(self.x_mean_, self.x_std_, 0.0,
                                                                              self._latent_units()[1]))

    def _fitted_mean(self, field: str) -> MeanFunction:
        """The mean function ``params_.<field>`` (``mean`` or a deep GP's ``input_mean``), zero for a model without."""
        mean = getattr(self.params_, field, None)
        return mean if isinstance(mean, MeanFunction) else Zero()

    def _per_class(self, fitted):
        """A mean read in the data's units (:meth:`~pep_gp.core.means.MeanFunction.in_data_units`) of a multi-class
        model, one per class (``[n, C]``), where it has no closed form; any other as it is."""
        deep = isinstance(self.params_, DeepGPParams)
        classes = isinstance(self.params_, MultiClassParams) or (deep and self.params_.layers[-1].inducing.shape[0] > 1)
        return fitted.for_each_latent() if classes and isinstance(fitted, InDataUnits) else fitted

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


__all__ = ["FittedGP", "GPClassifierMixin", "GPRegressorMixin", "MAX_FULL_COV_ROWS", "PREDICT_BLOCK_ROWS"]
