"""scikit-learn-style deep GP estimators (seed004: approximate EP), trained by the trainer in-process — the
same step as ``pep train --model deep-gp`` / ``deep-gp-classifier``.

Inputs are standardised with the training rows' mean and deviation by default (``standardize``), as
``pep train`` does; regression targets are always standardised (the reference code, spec §5.4) and
predictions mapped back to the user's units. Minibatches are consecutive blocks of the rows in one
seeded random order, visited in a new random order every epoch.

Example:
    >>> import numpy as np
    >>> from pipeline import DeepGPRegressor
    >>> x = np.linspace(-1, 1, 60)[:, None]; y = (x[:, 0] > 0).astype(float)
    >>> model = DeepGPRegressor(hidden_dims=(2,), num_inducing=10, max_iter=100).fit(x, y)
    >>> mean, std = model.predict(x, return_std=True)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import log_ndtr
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ...core import float64
from ..data.datasets import ArrayData
from ..data.validation import check_class_labels, check_features, check_num_inducing, check_targets
from .base import InputScaling, fit_in_process, stopping_rule, training_config, training_steps
from ..models.deep_gp import CLASSIFIER, REGRESSOR

PREDICT_CHUNK_ROWS = 512  # bounds prediction memory: ψ₂ holds rows·G·M² doubles per layer

_predict_f = jax.jit(lambda model, params, x: model.predict_f(params, x))
_energy = jax.jit(lambda model, params, x, y: model.energy(params, x, y))


class _DeepGPBase(BaseEstimator):
    """Shared arguments, checks, the fit through the trainer and chunked forward passes."""

    def __init__(
        self,
        hidden_dims: tuple = (2,),
        num_inducing: int = 100,
        alpha: float = 1.0,
        max_iter: int = 1000,
        tol: float = 1e-4,
        epochs: int | None = None,
        batch_size: int | None = None,
        learning_rate: float = 0.01,
        seed: int = 0,
        share_hypers: bool = False,
        jitter: float = 1e-6,
        standardize: bool = True,
    ):
        self.hidden_dims = hidden_dims
        self.num_inducing = num_inducing
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.seed = seed
        self.share_hypers = share_hypers
        self.jitter = jitter
        self.standardize = standardize

    def _fit(self, spec, data: ArrayData) -> None:
        """Check the arguments, then train ``spec`` on ``data`` (rows shuffled once by ``seed`` so that
        a minibatch is not a run of neighbouring rows)."""
        n = data.n_rows("train")
        hidden = tuple(self.hidden_dims) if isinstance(self.hidden_dims, (tuple, list)) else None
        if hidden is None or not all(isinstance(w, (int, np.integer)) and w >= 1 for w in hidden):
            raise ValueError(f"hidden_dims must be a tuple of positive integers (() for one layer); "
                             f"got {self.hidden_dims!r}")
        if not 0.0 < float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1]; got {self.alpha!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}")
        check_num_inducing(self.num_inducing, None, n, data.x.shape[1])
        steps = training_steps(n, self.batch_size, self.max_iter, self.epochs)
        stopping = stopping_rule(self.tol, n, self.batch_size, self.epochs)
        rows = n if self.batch_size is None else int(self.batch_size)
        settings = {"hidden_dims": [int(w) for w in hidden], "num_inducing": int(self.num_inducing),
                    "alpha": float(self.alpha), "share_hypers": bool(self.share_hypers), "jitter": float(self.jitter)}
        order = np.random.default_rng(self.seed).permutation(n)
        shuffled = ArrayData(data.x[order], data.y[order], data.task, data.n_classes)
        config = training_config(settings, rows_per_step=rows, epochs=-(-steps // -(-n // rows)),
                                 learning_rate=self.learning_rate, standardize=self.standardize, seed=self.seed)
        self.scaling_ = InputScaling.of(data, self.standardize)
        with float64():
            self.model_ = spec.build(spec.Settings(**settings), spec.binding(data))
        for name, value in fit_in_process(spec, shuffled, config, steps, None, stopping).items():
            setattr(self, name, value)
        stopping.warn_unless_converged(self, steps)
        self.n_features_in_ = data.x.shape[1]

    def _latent(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the output GP at ``X`` under ``q``, in row chunks."""
        check_is_fitted(self, "params_")
        x = self.scaling_(check_features(X, n_features=self.n_features_in_))
        with float64():
            parts = [_predict_f(self.model_, self.params_, jnp.asarray(x[start:start + PREDICT_CHUNK_ROWS]))
                     for start in range(0, x.shape[0], PREDICT_CHUNK_ROWS)]
        return tuple(np.concatenate([np.asarray(p[i]) for p in parts]) for i in range(2))

    def _energy(self, y_model: np.ndarray) -> float:
        with float64():
            return float(_energy(self.model_, self.params_, jnp.asarray(self.x_train_), jnp.asarray(y_model)))


class DeepGPRegressor(RegressorMixin, _DeepGPBase):
    """Deep GP regression with approximate EP (seed004): hidden layers of GPs, Gaussian output.

    Args:
        hidden_dims: widths of the hidden layers; ``()`` is one GP layer (a sparse GP), ``(2,)`` the
            paper's DGP-2.
        num_inducing: inducing points M per GP (k-means of the inputs in layer 1).
        alpha: Power-EP power in (0, 1]; 1 is the paper's approximate EP.
        max_iter: the most Adam steps when ``epochs`` is None; 0 evaluates the starting state.
        tol: the stopping rule (:class:`~pep_gp.pipeline.estimators.base.StoppingRule`, windows of 25 steps or
            one epoch); 0 runs all ``max_iter`` steps; not applied with ``epochs``.
        epochs: passes over the data in minibatches of ``batch_size`` (overrides ``max_iter``).
        batch_size: rows per step (None: all rows; the reference code uses 50).
        learning_rate, seed: Adam's step size; the seed of the initialisation and of the row order.
        share_hypers: one kernel per layer (the authors' code) instead of one per GP (the paper).
        jitter: relative jitter on every ``K_uu``.
        standardize: train on standardised inputs.

    Attributes (after fit): ``params_``, ``energy_trace_`` (the energy estimate of every step),
    ``n_rejected_steps_``, ``model_`` (:class:`pep_gp.core.models.deep_gp.DeepGP`).
    """

    def fit(self, X, y):
        """Fit the tied factors, hyper-parameters, noises and inducing inputs by maximising the energy."""
        x = check_features(X)
        y = check_targets(y, x.shape[0]).astype(np.float64)
        data = ArrayData(x, y, "regression")
        self._fit(REGRESSOR, data)
        self.targets_ = REGRESSOR.targets(data)
        self.x_train_, self.y_train_ = self.scaling_(x), y
        return self

    def predict(self, X, return_std: bool = False):
        """Predictive mean of ``y`` (and its standard deviation, observation noise included)."""
        mean, var = self._latent(X)
        with float64():
            mean, var = self.model_.likelihood.predict(self.params_.layers[-1].likelihood, mean, var)
        scale = self.targets_.scale
        mean = np.asarray(mean) * scale + self.targets_.shift
        return (mean, np.sqrt(np.asarray(var)) * scale) if return_std else mean

    def log_marginal_likelihood(self) -> float:
        """The energy ``F`` (seed004's approximate ``log p(y)``) of the training targets in their units."""
        check_is_fitted(self, "params_")
        value = self._energy(self.targets_(self.y_train_))
        return value - self.y_train_.shape[0] * np.log(self.targets_.scale)  # the Jacobian of y ↦ (y − μ)/σ


class DeepGPClassifier(ClassifierMixin, _DeepGPBase):
    """Binary deep GP classification with approximate EP (probit output without noise, spec §3.6).

    Arguments as :class:`DeepGPRegressor`. Labels may be any two values; ``classes_`` holds them sorted.
    """

    def fit(self, X, y):
        """Fit by maximising the energy with the probit likelihood."""
        x = check_features(X)
        self.classes_, labels = check_class_labels(check_targets(y, x.shape[0]), binary=True)
        self._fit(CLASSIFIER, ArrayData(x, labels, "classification", 2))
        self.x_train_, self.y_train_ = self.scaling_(x), labels.astype(np.float64)
        return self

    def predict_proba(self, X):
        """``[p(y = classes_[0]), p(y = classes_[1])]`` per row, ``Φ(±m/√(1 + v))`` (spec §3.6)."""
        mean, var = self._latent(X)
        z = mean / np.sqrt(1.0 + var)
        return np.exp(np.stack([log_ndtr(-z), log_ndtr(z)], axis=1))

    def predict(self, X):
        """The more probable class label per row."""
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def log_marginal_likelihood(self) -> float:
        """The energy ``F`` at the fitted parameters."""
        check_is_fitted(self, "params_")
        return self._energy(self.y_train_)
