"""scikit-learn-style multi-class GP classifier: EP or stochastic EP (seed001), trained in-process.

Training follows seed001 §2.3 (spec §2.7, §2.9): for every (mini)batch, first the EP update of the
factors of its rows, then one guarded Adam ascent step on the hyper-parameters and inducing inputs with
the gradient of eq. (10)/(12) (the cavity held fixed; the data term scaled by ``N/|B|``, the prior term
not). ``method="sep"`` (tied per-class factors) trains through the trainer — the same step as
``pep train --model multiclass-sep`` — over the in-memory rows; ``method="ep"`` (untied factors, per-row
state O(N·C·M)) runs its own compiled loop (:func:`pep_gp.core.models.multiclass_ep.update`). A full batch
damps the factor update with ``ρ_t = max(damping·0.99^t, min(damping, 0.05))`` (for EP halved for the rest of the run whenever a
row had to be skipped); minibatches are undamped, as the reference code. Inputs are standardised with
the training rows' statistics unless ``standardize=False``.

Example:
    >>> from sklearn.datasets import load_iris
    >>> x, y = load_iris(return_X_y=True)
    >>> clf = MultiClassGPClassifier(num_inducing=10, max_iter=50).fit(x, y)
    >>> clf.predict_proba(x[:2]).shape
    (2, 3)
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from ...core import float64
from ...core.kernels import ProductDtype, check_product_dtype
from ...core.linalg import DEFAULT_JITTER
from ...core.models import multiclass_ep as ep
from ...core.models.multiclass import MultiClassGP, NaturalFactor
from ..data.datasets import ArrayData
from .base import InputScaling, fit_in_process, stopping_rule, training_config, training_steps
from ..models.multiclass import SEP
from ..training.optimiser import adam
from ..training.step import ascent_update
from ..data.validation import check_class_labels, check_features, check_num_inducing, check_targets

METHODS = ("sep", "ep")
DAMPING_DECAY = 0.99  # per full-batch iteration (spec §2.4)
PREDICT_CHUNK_ROWS = 1024  # bounds prediction memory: ~1024·(16C·5)·C doubles per intermediate


def _optimizer(learning_rate):
    """Adam on hyper-parameters and inducing inputs; the tied factor moves only by EP updates."""
    return adam(learning_rate, frozen=lambda p: p._replace(
        raw_amplitude=False, raw_noise=False, raw_lengthscales=False, inducing=False, factor=NaturalFactor(True, True)
    ))


def _ascent(energy, params, opt_state, learning_rate):
    value, grad = jax.value_and_grad(energy)(params)
    return ascent_update(_optimizer(learning_rate), params, opt_state, value, grad) + (value,)


def _ep_step(model: MultiClassGP, params, opt_state, state: ep.EPSites, index, x, y, mask, n_total, damping, learning_rate):
    # Padding rows carry the out-of-range index N: gathered as zeros, dropped when scattered back.
    rows_state = jax.tree_util.tree_map(lambda a: a.at[index].get(mode="fill", fill_value=0.0), state)
    params, rows_state, skipped = ep.update(model, params, rows_state, x, y, mask, damping)
    state = jax.tree_util.tree_map(lambda a, r: a.at[index].set(r, mode="drop"), state, rows_state)
    rows = jnp.sum(mask)
    energy = lambda p: ep.global_energy(model, p) + n_total / rows * ep.local_energy(model, p, rows_state, x, y, mask)
    params, opt_state, ok, value = _ascent(energy, params, opt_state, learning_rate)
    return params, opt_state, ok, value, skipped, state


@partial(jax.jit, static_argnames="model")
def _train_ep(model: MultiClassGP, carry, x, y, index, mask, damping, learning_rate):
    """Untied-EP training steps as one ``lax.scan`` over the per-step row indices ``[T, S]``, masks and
    base damping ``[T]``, from and to ``carry = (params, opt_state, sites, halvings)``; a step that skips
    rows halves the damping of all later steps."""
    n_total = x.shape[0]

    def step(carry, inputs):
        params, opt_state, state, halvings = carry
        rows, rows_mask, rho = inputs
        safe = jnp.minimum(rows, n_total - 1)
        params, opt_state, ok, value, skipped, state = _ep_step(
            model, params, opt_state, state, rows, x[safe], y[safe], rows_mask, float(n_total),
            rho * 0.5**halvings, learning_rate,
        )
        return (params, opt_state, state, halvings + (skipped > 0)), (value, ok, skipped)

    return jax.lax.scan(step, carry, (index, mask, damping))


_predict = jax.jit(lambda model, params, x: model.predict(params, x))
_sep_evidence = jax.jit(lambda model, params, x, y: model.energy(params, x, y))
_ep_evidence = jax.jit(ep.log_evidence)


def _padded_rows(x: np.ndarray) -> np.ndarray:
    """``x`` padded (with its first row) to a power of two ≥ 8 rows, so few shapes get compiled."""
    size = max(8, 1 << (x.shape[0] - 1).bit_length())
    return np.concatenate([x, np.repeat(x[:1], size - x.shape[0], axis=0)])


def _batches(n_rows: int, batch_size: int | None, num_steps: int, seed: int):
    """Row indices ``[T, S]`` (padded with ``n_rows``) and masks ``[T, S]``; epochs reshuffle (spec §2.9)."""
    if batch_size is None:
        return np.tile(np.arange(n_rows), (num_steps, 1)), np.ones((num_steps, n_rows), bool)
    rng = np.random.default_rng(seed)
    per_epoch = -(-n_rows // batch_size)
    orders = [rng.permutation(n_rows) for _ in range(max(1, -(-num_steps // per_epoch)))]
    padded = np.stack([np.concatenate([o, np.full(per_epoch * batch_size - n_rows, n_rows)]) for o in orders])
    index = padded.reshape(-1, batch_size)[:num_steps]
    return index, index < n_rows


class MultiClassGPClassifier(ClassifierMixin, BaseEstimator):
    """Multi-class GP classification with EP / stochastic EP and per-class sparse GPs (seed001).

    Args:
        num_inducing: inducing inputs per class, ``M`` (a random sample of training rows per class).
        method: ``"sep"`` (tied factors, memory O(C·M²)) or ``"ep"`` (one factor per (row, class),
            memory O(N·C·M); for N up to ~10⁴).
        alpha: Power-EP power of the factors in (0, 1]: 1 is the paper's EP/SEP, small α approaches the
            variational bound with the likelihood of eq. (6).
        batch_size: rows per minibatch, or None for full-batch training (the paper's UCI setting).
        max_iter: the most training steps (full-batch iterations or minibatches) when ``epochs`` is None.
        tol: stop once the energy's mean over a window of steps (25, or one epoch if longer) rose by
            less than ``tol`` nats per training row over the window before (a ``ConvergenceWarning``
            if ``max_iter`` comes first); 0 runs all ``max_iter`` steps.
        epochs: passes over the data, all run (minibatch training); overrides ``max_iter`` and ``tol``.
        learning_rate: Adam step size on the (unconstrained) hyper-parameters and inducing inputs.
        damping: initial full-batch damping ``ρ_0`` (decays by 0.99 per iteration down to 0.05,
            :meth:`~pep_gp.pipeline.models.SiteSettings.damping_schedule`).
        seed: inducing-input sample and minibatch order.
        jitter: relative jitter on each ``K_c``.
        kernel_products: ``"float32"`` runs the kernels' matrix products over the inputs in single
            precision (faster for many inputs, e.g. images; the EP algebra stays float64), see
            :class:`pep_gp.core.kernels.BatchedARDSquaredExponential`.
        standardize: train on inputs standardised with the training rows' mean and deviation.

    Attributes (after fit): ``classes_``, ``params_``, ``energy_trace_`` (the ``log Z_q`` estimate per
    full-batch step or per epoch), ``n_rejected_steps_`` (non-finite Adam steps skipped),
    ``n_rejected_site_updates_`` (SEP: non-finite tied-factor updates skipped), ``n_skipped_rows_``
    (EP: row updates skipped for an improper cavity), ``ep_sites_`` (``method="ep"``).
    """

    def __init__(
        self,
        num_inducing: int = 50,
        method: str = "sep",
        alpha: float = 0.5,
        batch_size: int | None = None,
        max_iter: int = 2000,
        tol: float = 1e-4,
        epochs: int | None = None,
        learning_rate: float = 0.05,
        damping: float = 0.5,
        seed: int = 0,
        jitter: float = DEFAULT_JITTER,
        kernel_products: ProductDtype = "float64",
        standardize: bool = True,
    ):
        self.num_inducing = num_inducing
        self.method = method
        self.alpha = alpha
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.tol = tol
        self.epochs = epochs
        self.learning_rate = learning_rate
        self.damping = damping
        self.seed = seed
        self.jitter = jitter
        self.kernel_products = kernel_products
        self.standardize = standardize

    # ----------------------------------------------------------------------------------------------
    def _num_steps(self, n_rows: int) -> int:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"alpha must lie in (0, 1]; got {self.alpha!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive; got {self.learning_rate!r}")
        if not 0.0 < self.damping <= 1.0:
            raise ValueError(f"damping must lie in (0, 1]; got {self.damping!r}")
        check_product_dtype(self.kernel_products, "kernel_products")
        return training_steps(n_rows, self.batch_size, self.max_iter, self.epochs)

    def fit(self, X, y):
        """Fit the factors, hyper-parameters and inducing inputs (seed001 §2.3)."""
        x = check_features(X)
        self.classes_, labels = check_class_labels(check_targets(y, x.shape[0]))
        num_steps = self._num_steps(x.shape[0])
        check_num_inducing(self.num_inducing, None, x.shape[0], x.shape[1])
        data = ArrayData(x, labels, "classification", self.classes_.size)
        self.scaling_ = InputScaling.of(data, self.standardize)
        with float64():
            self.x_train_, self.y_train_ = jnp.asarray(self.scaling_(x)), jnp.asarray(labels)
        settings = {"num_inducing": int(self.num_inducing), "alpha": float(self.alpha), "jitter": float(self.jitter),
                    "kernel_products": self.kernel_products}
        if self.batch_size is None:
            settings.update(damping=float(self.damping), damping_decay=DAMPING_DECAY)
        if self.method == "sep":
            self._fit_sep(data, settings, num_steps)
        else:
            self._fit_ep(settings, num_steps)
        self.n_features_in_ = x.shape[1]
        return self

    def _fit_sep(self, data: ArrayData, settings: dict, num_steps: int) -> None:
        """Tied factors through the trainer: one block per step; minibatches are blocks of the rows in
        a seeded random order, so that a batch is not a run of one class."""
        n = data.n_rows("train")
        full_batch = self.batch_size is None
        if full_batch:
            epochs = num_steps
        else:
            order = np.random.default_rng(self.seed).permutation(n)
            data = ArrayData(data.x[order], data.y[order], "classification", self.classes_.size)
            epochs = -(-num_steps // -(-n // self.batch_size))
        config = training_config(settings, rows_per_step=n if full_batch else int(self.batch_size), epochs=epochs,
                                 learning_rate=self.learning_rate, standardize=self.standardize, seed=self.seed)
        with float64():
            self.model_ = SEP.build(SEP.Settings(**settings), SEP.binding(data))
        stopping = stopping_rule(self.tol, n, self.batch_size, self.epochs)
        for name, value in fit_in_process(SEP, data, config, num_steps, None, stopping).items():
            setattr(self, name, value)
        stopping.warn_unless_converged(self, num_steps)
        self.ep_sites_, self.n_skipped_rows_ = None, 0

    def _fit_ep(self, settings: dict, num_steps: int) -> None:
        """Untied factors (per-row state) in their own compiled loop (:func:`_train_ep`), a window of
        steps per call, until the stopping rule or ``num_steps``; full-batch damping as SEP's."""
        n = self.x_train_.shape[0]
        stopping = stopping_rule(self.tol, n, self.batch_size, self.epochs)
        index, mask = _batches(n, self.batch_size, num_steps, self.seed)
        damping = np.asarray(SEP.Settings(**settings).damping_schedule()(np.arange(num_steps)), np.float64)
        values, ok, skipped = np.zeros(0), np.zeros(0, bool), np.zeros(0, int)
        with float64():
            self.model_ = MultiClassGP.from_labels(self.y_train_, self.classes_.size, alpha=settings["alpha"],
                                                   jitter=settings["jitter"],
                                                   kernel_products=settings["kernel_products"])
            params = self.model_.init(self.x_train_, int(self.num_inducing), seed=self.seed)
            carry = (params, _optimizer(self.learning_rate).init(params), ep.init_sites(n, params), jnp.asarray(0))
            while values.size < num_steps and not stopping.converged(values):
                window = slice(values.size, min(num_steps, values.size + stopping.window))
                carry, out = _train_ep(self.model_, carry, self.x_train_, self.y_train_, jnp.asarray(index[window]),
                                       jnp.asarray(mask[window]), jnp.asarray(damping[window]),
                                       float(self.learning_rate))
                values, ok, skipped = (np.concatenate([a, np.asarray(b)]) for a, b in zip((values, ok, skipped), out))
        self.params_, _, self.ep_sites_, _ = carry
        self.energy_trace_, self.n_iter_, self.converged_ = values, values.size, stopping.converged(values)
        stopping.warn_unless_converged(self, num_steps)
        self.n_rejected_steps_, self.n_rejected_site_updates_ = int(np.sum(~ok)), 0
        self.n_skipped_rows_ = int(np.sum(skipped))

    # ----------------------------------------------------------------------------------------------
    def log_marginal_likelihood(self) -> float:
        """The estimate ``log Z_q`` (eq. 9) on the training data at the fitted state."""
        check_is_fitted(self, "params_")
        with float64():
            if self.method == "ep":
                return float(_ep_evidence(self.model_, self.params_, self.ep_sites_, self.x_train_, self.y_train_))
            return float(_sep_evidence(self.model_, self.params_, self.x_train_, self.y_train_))

    def predict_log_proba(self, X) -> np.ndarray:
        """``log p(y* = classes_[c] | x*)`` per row (eq. 68 by quadrature), computed in row chunks."""
        check_is_fitted(self, "params_")
        x = check_features(X, n_features=self.n_features_in_)
        chunks = []
        with float64():
            for start in range(0, x.shape[0], PREDICT_CHUNK_ROWS):
                rows = self.scaling_(x[start : start + PREDICT_CHUNK_ROWS])
                log_proba = _predict(self.model_, self.params_, jnp.asarray(_padded_rows(rows)))
                chunks.append(np.asarray(log_proba)[: rows.shape[0]])
        return np.concatenate(chunks)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities per row, columns in the order of ``classes_``."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X) -> np.ndarray:
        """The most probable class per row."""
        return self.classes_[np.argmax(self.predict_log_proba(X), axis=1)]
