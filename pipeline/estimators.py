"""scikit-learn-style estimators running pep's Power-EP energies in-process.

``SparseGPRegressor`` maximises the collapsed PEP-α objective (seed000 §3.2); ``SparseGPClassifier``
maximises the tied-factor Power-EP energy with the probit likelihood (seed000 §3.8, §4). Both use optax
Adam through :func:`pipeline.optimize.maximise` and compute in float64 (scoped, see ``pepcore.float64``).

Example:
    >>> import numpy as np
    >>> from pipeline import SparseGPRegressor
    >>> x = np.linspace(0, 5, 40)[:, None]; y = np.sin(x[:, 0])
    >>> model = SparseGPRegressor(num_inducing=10, max_iter=200).fit(x, y)
    >>> float(np.abs(model.predict(x) - y).max()) < 0.2
    True
"""

from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from scipy.special import log_ndtr
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.validation import check_is_fitted

import pepcore
from pepcore.initialisation import initial_kernel_and_inducing
from pepcore.likelihoods import Probit
from pepcore.linalg import DEFAULT_JITTER
from pepcore.models import collapsed_regression
from pepcore.models.power_ep import PowerEPSparseGP
from pepcore.parameters import unconstrain_positive
from pipeline.optimize import adam, maximise
from pipeline.validation import (
    check_class_labels,
    check_features,
    check_num_inducing,
    check_targets,
)


class _SparseGPBase(BaseEstimator):
    """Shared constructor arguments, input checks and the fit scaffold."""

    def __init__(
        self,
        num_inducing: int = 50,
        alpha: float = 0.5,
        inducing_points=None,
        train_inducing: bool = True,
        lengthscales=None,
        variance: float | None = None,
        max_iter: int = 1000,
        learning_rate: float = 0.01,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
    ):
        self.num_inducing = num_inducing
        self.alpha = alpha
        self.inducing_points = inducing_points
        self.train_inducing = train_inducing
        self.lengthscales = lengthscales
        self.variance = variance
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.seed = seed
        self.jitter = jitter

    def _check_settings(self, x: np.ndarray) -> None:
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {self.alpha}")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer; got {self.max_iter!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}")
        check_num_inducing(self.num_inducing, self.inducing_points, x.shape[0], x.shape[1])

    def _initial_kernel(self, x: np.ndarray, default_variance: float):
        variance = default_variance if self.variance is None else self.variance
        return initial_kernel_and_inducing(
            x,
            self.num_inducing,
            inducing=self.inducing_points,
            lengthscales=self.lengthscales,
            variance=variance,
            seed=self.seed,
        )

    def _optimise(self, energy, params, frozen):
        optimizer = adam(self.learning_rate, None if self.train_inducing else frozen)
        result = maximise(energy, params, optimizer, int(self.max_iter))
        self.energy_trace_ = np.asarray(result.values)
        self.n_rejected_steps_ = int(result.rejected)
        return result.params

    def log_marginal_likelihood(self) -> float:
        """The approximate log marginal likelihood (the Power-EP energy) at the fitted parameters."""
        check_is_fitted(self, "params_")
        with pepcore.float64():
            return float(self._energy(self.params_))


class SparseGPRegressor(RegressorMixin, _SparseGPBase):
    """Sparse GP regression with the collapsed Power-EP objective (α = 1: FITC, α = 0: VFE).

    Args:
        num_inducing: number of inducing inputs M (k-means of the inputs) unless ``inducing_points``.
        alpha: Power-EP power in [0, 1]; seed000 recommends 0.5 for MSE, 1 for NLL.
        inducing_points: explicit [M, D] inducing inputs, or None.
        train_inducing: optimise the inducing inputs as well as the hyper-parameters.
        lengthscales, variance, noise_variance: starting values (defaults: median distance / 2,
            var(y), var(y)/100 as in the seed000 reference code).
        max_iter: Adam steps; 0 evaluates at the given parameters without optimising.
        learning_rate, seed, jitter: optimiser step, k-means seed, relative jitter on K_uu.
    """

    def __init__(
        self,
        num_inducing: int = 50,
        alpha: float = 0.5,
        inducing_points=None,
        train_inducing: bool = True,
        lengthscales=None,
        variance: float | None = None,
        noise_variance: float | None = None,
        max_iter: int = 1000,
        learning_rate: float = 0.01,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
    ):
        super().__init__(
            num_inducing, alpha, inducing_points, train_inducing, lengthscales, variance, max_iter, learning_rate, seed, jitter
        )
        self.noise_variance = noise_variance

    def _energy(self, params):
        return collapsed_regression.energy(params, self.x_train_, self.y_train_, float(self.alpha), self.jitter)

    def fit(self, X, y):
        """Fit hyper-parameters (and inducing inputs) by maximising ``log Z_PEP(α)``."""
        x = check_features(X)
        y = check_targets(y, x.shape[0]).astype(np.float64)
        self._check_settings(x)
        y_var = float(np.var(y)) if np.var(y) > 0 else 1.0
        noise = 0.01 * y_var if self.noise_variance is None else self.noise_variance
        if not noise > 0:
            raise ValueError(f"noise_variance must be positive; got {noise!r}")
        lengthscales, variance, z = self._initial_kernel(x, y_var)
        with pepcore.float64():
            self.x_train_, self.y_train_ = jnp.asarray(x), jnp.asarray(y)
            params = collapsed_regression.RegressionParams(
                raw_lengthscales=unconstrain_positive(jnp.asarray(lengthscales)),
                raw_variance=unconstrain_positive(jnp.asarray(variance)),
                raw_noise_variance=unconstrain_positive(jnp.asarray(float(noise))),
                inducing=jnp.asarray(z),
            )
            frozen = lambda p: p._replace(raw_lengthscales=False, raw_variance=False, raw_noise_variance=False, inducing=True)
            self.params_ = self._optimise(self._energy, params, frozen)
        self.n_features_in_ = x.shape[1]
        return self

    def predict(self, X, return_std: bool = False):
        """Predictive mean of ``y`` (and its standard deviation, noise included, if ``return_std``)."""
        check_is_fitted(self, "params_")
        x = check_features(X, n_features=self.n_features_in_)
        with pepcore.float64():
            p = self.params_
            mean, var = collapsed_regression.predict_f(
                p.kernel, p.inducing, p.noise_variance, self.x_train_, self.y_train_, jnp.asarray(x),
                float(self.alpha), self.jitter,
            )
            mean, std = np.asarray(mean), np.sqrt(np.asarray(var + p.noise_variance))
        return (mean, std) if return_std else mean


class SparseGPClassifier(ClassifierMixin, _SparseGPBase):
    """Binary GP classification (probit) with tied-factor Power EP (α = 1: EP, α → 0: VFE).

    Arguments as :class:`SparseGPRegressor` (without ``noise_variance``; ``variance`` defaults to 1).
    Labels may be any two values; ``classes_`` holds them sorted.
    """

    def _energy(self, params):
        return self.model_.energy(params, self.x_train_, self.y_train_)

    def fit(self, X, y):
        """Fit the tied factor, hyper-parameters (and inducing inputs) by maximising the Power-EP energy."""
        x = check_features(X)
        self.classes_, labels = check_class_labels(check_targets(y, x.shape[0]), binary=True)
        self._check_settings(x)
        lengthscales, variance, z = self._initial_kernel(x, 1.0)
        with pepcore.float64():
            self.model_ = PowerEPSparseGP(Probit(), alpha=float(self.alpha), jitter=self.jitter)
            self.x_train_, self.y_train_ = jnp.asarray(x), jnp.asarray(labels, dtype=jnp.float64)
            params = self.model_.init(x, z.shape[0], inducing=z, lengthscales=lengthscales, variance=variance)
            frozen = lambda p: p._replace(
                raw_lengthscales=False, raw_variance=False, inducing=True, likelihood={}, factor_shift=False, factor_chol=False
            )
            self.params_ = self._optimise(self._energy, params, frozen)
        self.n_features_in_ = x.shape[1]
        return self

    def predict_proba(self, X):
        """Class probabilities ``[p(y = classes_[0]), p(y = classes_[1])]`` per row, ``Φ(m/√(1+v))``."""
        check_is_fitted(self, "params_")
        x = check_features(X, n_features=self.n_features_in_)
        with pepcore.float64():
            mean, var = self.model_.predict_f(self.params_, jnp.asarray(x))
            z = np.asarray(mean) / np.sqrt(1.0 + np.asarray(var))
        return np.exp(np.stack([log_ndtr(-z), log_ndtr(z)], axis=1))

    def predict(self, X):
        """The more probable class label per row."""
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]
