"""scikit-learn-style sparse GP estimators, trained by the trainer in-process (the same step as
``pep train``): ``SparseGPRegressor`` maximises the collapsed PEP-α objective (seed000 §3.2),
``SparseGPClassifier`` the tied-factor Power-EP energy with the probit likelihood (seed000 §3.8, §4).

Inputs are standardised with the training rows' mean and deviation by default (``standardize``), as
``pep train`` does; regression targets are centred and scaled with ``normalize_y`` (as scikit-learn's
``GaussianProcessRegressor``; off by default, so the model is the zero-mean GP of the paper). Starting values (``inducing_points``,
``lengthscales``, ``variance``, ``noise_variance``), predictions and ``log_marginal_likelihood()`` are in
the user's units; ``params_`` holds the model's parameters in the standardised units it trains in.

Example:
    >>> import numpy as np
    >>> from pipeline import SparseGPRegressor
    >>> x = np.linspace(0, 5, 40)[:, None]; y = np.sin(x[:, 0])
    >>> model = SparseGPRegressor(num_inducing=10, max_iter=200).fit(x, y)
    >>> float(np.abs(model.predict(x) - y).max()) < 0.2
    True
"""

from __future__ import annotations

import warnings

import numpy as np
import jax.numpy as jnp
from scipy.special import log_ndtr
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ...core import float64
from ...core.initialisation import median_lengthscale
from ...core.likelihoods import Probit
from ...core.linalg import DEFAULT_JITTER
from ...core.models.ep import EP, site_data
from ...core.projections import projection as named_projection
from . import untied_ep
from ..data.datasets import ArrayData
from .base import InputScaling, fit_in_process, stopping_rule, training_config
from ..models.collapsed import COLLAPSED
from ..models.sparse_gp import CLASSIFIER
from ..data.validation import check_class_labels, check_features, check_num_inducing, check_targets


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
        max_iter: int = 3000,
        tol: float = 1e-4,
        learning_rate: float = 0.01,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
        standardize: bool = True,
    ):
        self.num_inducing = num_inducing
        self.alpha = alpha
        self.inducing_points = inducing_points
        self.train_inducing = train_inducing
        self.lengthscales = lengthscales
        self.variance = variance
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate = learning_rate
        self.seed = seed
        self.jitter = jitter
        self.standardize = standardize

    def _check_settings(self, x: np.ndarray) -> None:
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1]; got {self.alpha}")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer; got {self.max_iter!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}")
        check_num_inducing(self.num_inducing, self.inducing_points, x.shape[0], x.shape[1])

    def _fit(self, spec, data: ArrayData, initial_params):
        """Train ``spec`` from ``initial_params`` (a function of the input scaling) by full-batch steps
        until the energy stops rising (``tol``) or ``max_iter`` steps."""
        self.scaling_ = InputScaling.of(data, self.standardize)
        config = training_config(self._settings(data), rows_per_step=data.n_rows("train"),
                                 epochs=int(self.max_iter), learning_rate=self.learning_rate,
                                 standardize=self.standardize, seed=self.seed)
        with float64():
            self.model_ = spec.build(spec.Settings(**config.model), spec.binding(data))
            start = initial_params(self.scaling_)
        stopping = stopping_rule(self.tol, data.n_rows("train"), None, None)
        for name, value in fit_in_process(spec, data, config, int(self.max_iter), start, stopping).items():
            setattr(self, name, value)
        stopping.warn_unless_converged(self, int(self.max_iter))
        self.n_features_in_ = data.x.shape[1]

    def _settings(self, data: ArrayData) -> dict:
        num_inducing = self.num_inducing if self.inducing_points is None else len(self.inducing_points)
        return {"num_inducing": int(num_inducing),
                "alpha": float(self.alpha), "jitter": float(self.jitter),
                "train_inducing": bool(self.train_inducing)}

    def _starting_kernel(self, scaling: InputScaling):
        """User-unit starting inducing inputs and lengthscales in the model's units (None: from the data)."""
        inducing = None if self.inducing_points is None else scaling(self.inducing_points)
        lengthscales = (None if self.lengthscales is None
                        else np.broadcast_to(np.asarray(self.lengthscales, float), scaling.std.shape) / scaling.std)
        return inducing, lengthscales

    def _inputs(self, X) -> jnp.ndarray:
        check_is_fitted(self, "params_")
        return jnp.asarray(self.scaling_(check_features(X, n_features=self.n_features_in_)))


class SparseGPRegressor(RegressorMixin, _SparseGPBase):
    """Sparse GP regression with the collapsed Power-EP objective (α = 1: FITC, α = 0: VFE).

    Args:
        num_inducing: number of inducing inputs M (k-means of the inputs) unless ``inducing_points``.
        alpha: Power-EP power in [0, 1]; seed000 recommends 0.5 for MSE, 1 for NLL.
        inducing_points: explicit [M, D] inducing inputs, or None.
        train_inducing: optimise the inducing inputs as well as the hyper-parameters.
        lengthscales, variance, noise_variance: starting values (defaults: median distance / 2,
            var(y), var(y)/100 as in the seed000 reference code).
        max_iter: the most Adam steps; 0 evaluates at the given parameters without optimising.
        tol: stop once the energy's mean over 25 steps rose by less than ``tol`` nats per training row
            over the 25 before (a ``ConvergenceWarning`` if ``max_iter`` comes first); 0 runs all
            ``max_iter`` steps.
        learning_rate, seed, jitter: optimiser step, k-means seed, relative jitter on K_uu.
        standardize: train on standardised inputs.
        normalize_y: train on centred and scaled targets (``log_marginal_likelihood()`` is then that of
            the centred targets, in their units).
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
        max_iter: int = 3000,
        tol: float = 1e-4,
        learning_rate: float = 0.01,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
        standardize: bool = True,
        normalize_y: bool = False,
    ):
        super().__init__(num_inducing, alpha, inducing_points, train_inducing, lengthscales, variance, max_iter,
                         tol, learning_rate, seed, jitter, standardize)
        self.noise_variance = noise_variance
        self.normalize_y = normalize_y

    def fit(self, X, y):
        """Fit hyper-parameters (and inducing inputs) by maximising ``log Z_PEP(α)``."""
        x = check_features(X)
        y = check_targets(y, x.shape[0]).astype(np.float64)
        self._check_settings(x)
        if self.noise_variance is not None and not self.noise_variance > 0:
            raise ValueError(f"noise_variance must be positive; got {self.noise_variance!r}")
        data = ArrayData(x, y, "regression", target_statistics=self.normalize_y)
        self.y_scale_ = float(data.attrs["y_std"])
        y_var = float(np.var(y)) if np.var(y) > 0 else 1.0  # the seed000 reference code's starting values

        def initial(scaling: InputScaling):
            inducing, lengthscales = self._starting_kernel(scaling)
            variance = (y_var if self.variance is None else self.variance) / self.y_scale_**2
            noise = (0.01 * y_var if self.noise_variance is None else self.noise_variance) / self.y_scale_**2
            return COLLAPSED.init(self.model_, scaling(x), COLLAPSED.Settings(**self._settings(data)), self.seed,
                                  inducing=inducing, lengthscales=lengthscales, variance=variance,
                                  noise_variance=noise)

        self._fit(COLLAPSED, data, initial)
        self.targets_ = COLLAPSED.targets(data)
        with float64():
            self.x_train_, self.y_train_ = jnp.asarray(self.scaling_(x)), jnp.asarray(self.targets_(y))
        return self

    def log_marginal_likelihood(self) -> float:
        """``log Z_PEP(α)`` of the training targets in their own units at the fitted parameters."""
        check_is_fitted(self, "params_")
        with float64():
            mask = jnp.ones(self.y_train_.shape[0], bool)
            value = float(self.model_.data_energy(self.params_, (), self.x_train_, self.y_train_, mask))
        return value - self.y_train_.shape[0] * np.log(self.y_scale_)  # the Jacobian of y ↦ (y − μ)/σ

    def predict(self, X, return_std: bool = False):
        """Predictive mean of ``y`` (and its standard deviation, noise included, if ``return_std``)."""
        x = self._inputs(X)
        with float64():
            mean, var = self.model_.predict_y(self.params_, self.x_train_, self.y_train_, x)
        mean = np.asarray(mean) * self.targets_.scale + self.targets_.shift
        std = np.sqrt(np.asarray(var)) * self.targets_.scale
        return (mean, std) if return_std else mean


class SparseGPClassifier(ClassifierMixin, _SparseGPBase):
    """Binary GP classification (probit) with EP-family sites.

    ``sites="tied"`` (default): the sparse GP's tied-factor Power EP (α = 1: EP, α → 0: VFE), trained by
    the trainer (the same step as ``pep train``). ``sites="untied"``: one site per training row on the exact
    GP (O(N³); for N up to a few thousand), ``num_inducing``, ``inducing_points``, ``train_inducing``,
    ``learning_rate`` unused; the amplitude and one shared lengthscale maximise the EP evidence by
    L-BFGS-B (at most ``max_iter`` iterations; ``n_iter_``, ``converged_`` and a ``ConvergenceWarning`` when
    ``max_iter`` cuts it short, as in tied mode), as seed002's experiments (:mod:`pep_gp.pipeline.estimators.untied_ep`);
    EP's sites are updated in parallel sweeps damped by ½ (one linear solve per sweep).
    ``projection`` (untied sites only): ``"kl"`` is EP's moment matching, ``"wasserstein"`` Quantile
    Propagation (same mean, the L2-Wasserstein variance; seed002); ``alpha`` is a Power-EP power in both.

    ``ard``: one lengthscale per input; by default one is shared by the (standardised) inputs, as in the
    default kernels of scikit-learn, GPflow and GPyTorch: on breast cancer (N = 455, D = 30) the evidence
    gives a few inputs short ARD lengthscales, and rows far out along them fall back towards p = ½ —
    test NLL 0.115 with ARD against 0.088 shared, logistic regression 0.086 (5 splits, README). A
    starting ``lengthscales`` vector is then replaced by the geometric mean of its standardised values.
    ``sites="untied"`` always shares one lengthscale.

    Other arguments as :class:`SparseGPRegressor` (without ``noise_variance``; ``variance`` defaults to 1).
    Labels may be any two values; ``classes_`` holds them sorted.

    Example:
        >>> from sklearn.datasets import load_breast_cancer
        >>> x, y = load_breast_cancer(return_X_y=True)
        >>> qp = SparseGPClassifier(sites="untied", projection="wasserstein", alpha=1.0, max_iter=20).fit(x[:100], y[:100])
        >>> qp.score(x[100:200], y[100:200]) > 0.9
        True
    """

    def __init__(
        self,
        num_inducing: int = 50,
        alpha: float = 0.5,
        inducing_points=None,
        train_inducing: bool = True,
        lengthscales=None,
        variance: float | None = None,
        max_iter: int = 3000,
        tol: float = 1e-4,
        learning_rate: float = 0.01,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
        standardize: bool = True,
        sites: str = "tied",
        projection: str = "kl",
        ard: bool = False,
    ):
        super().__init__(num_inducing, alpha, inducing_points, train_inducing, lengthscales, variance, max_iter,
                         tol, learning_rate, seed, jitter, standardize)
        self.sites = sites
        self.projection = projection
        self.ard = ard

    def fit(self, X, y):
        """Fit the sites and hyper-parameters (tied: and inducing inputs) by maximising the (Power-)EP evidence."""
        x = check_features(X)
        self.classes_, labels = check_class_labels(check_targets(y, x.shape[0]), binary=True)
        if self.sites not in ("tied", "untied"):
            raise ValueError(f"sites must be 'tied' or 'untied'; got {self.sites!r}")
        named_projection(self.projection)
        if self.sites == "untied":
            if self.ard:
                raise ValueError("ard=True needs sites='tied'; sites='untied' fits one shared lengthscale")
            return self._fit_untied(x, labels)
        if self.projection != "kl":
            raise ValueError(f"projection={self.projection!r} needs sites='untied'; the tied-factor model projects "
                             "by moment matching only")
        self._check_settings(x)
        data = ArrayData(x, labels, "classification", 2)

        def initial(scaling: InputScaling):
            inducing, lengthscales = self._starting_kernel(scaling)
            num_inducing = self.num_inducing if inducing is None else inducing.shape[0]
            return self.model_.init(scaling(x), num_inducing, inducing=inducing, lengthscales=lengthscales,
                                    variance=1.0 if self.variance is None else self.variance, seed=self.seed,
                                    ard=bool(self.ard))

        self._fit(CLASSIFIER, data, initial)
        with float64():
            self.x_train_, self.y_train_ = jnp.asarray(self.scaling_(x)), jnp.asarray(labels, dtype=jnp.float64)
        return self

    def _settings(self, data: ArrayData) -> dict:
        return {**super()._settings(data), "ard": bool(self.ard)}

    def _fit_untied(self, x, labels):
        if not 0.0 < float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1] with untied sites; got {self.alpha}")
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise ValueError(f"max_iter must be a non-negative integer; got {self.max_iter!r}")
        self.scaling_ = InputScaling.of(ArrayData(x, labels, "classification", 2), self.standardize)
        self.x_train_ = self.scaling_(x)
        with float64():
            self.site_data_ = site_data(np.arange(x.shape[0]), labels)
        start = None
        if self.lengthscales is not None or self.variance is not None:
            length = (median_lengthscale(self.x_train_, self.seed) if self.lengthscales is None
                      else float(np.mean(np.asarray(self.lengthscales, float) / self.scaling_.std)))
            start = np.log([length, 1.0 if self.variance is None else float(self.variance)])
        self.untied_ = untied_ep.fit(EP(Probit(), self.projection, float(self.alpha), damping=0.5, schedule="parallel"),
                                     self.x_train_, self.site_data_, start, max_iter=int(self.max_iter), seed=self.seed)
        self.params_ = self.untied_.log_theta
        self.n_iter_, self.converged_ = self.untied_.iterations, self.untied_.converged
        if not self.converged_ and self.max_iter > 0:
            warnings.warn(f"SparseGPClassifier(sites='untied'): L-BFGS-B stopped after {self.n_iter_} iterations "
                          f"(max_iter={self.max_iter}) before converging: {self.untied_.message}",
                          ConvergenceWarning, stacklevel=3)
        self.n_features_in_ = x.shape[1]
        return self

    def log_marginal_likelihood(self) -> float:
        """The Power-EP energy (the approximate log marginal likelihood) at the fitted parameters; untied
        sites: ``log Z_EP`` (seed002 eq. 4)."""
        check_is_fitted(self, "params_")
        if self.sites == "untied":
            return self.untied_.log_evidence
        with float64():
            return float(self.model_.energy(self.params_, self.x_train_, self.y_train_))

    def predict_proba(self, X):
        """Class probabilities ``[p(y = classes_[0]), p(y = classes_[1])]`` per row, ``Φ(m/√(1+v))``."""
        if self.sites == "untied":
            check_is_fitted(self, "params_")
            x = self.scaling_(check_features(X, n_features=self.n_features_in_))
            mean, var = untied_ep.predict(self.untied_, self.x_train_, self.site_data_, x)
        else:
            x = self._inputs(X)
            with float64():
                mean, var = self.model_.predict_f(self.params_, x)
        z = np.asarray(mean) / np.sqrt(1.0 + np.asarray(var))
        return np.exp(np.stack([log_ndtr(-z), log_ndtr(z)], axis=1))

    def predict(self, X):
        """The more probable class label per row."""
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]
