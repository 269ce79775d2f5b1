"""``MultiOutputGPRegressor``: collapsed Power-EP regression of several targets observed at the same inputs,
``y`` ``[N, P]`` (:mod:`pep_gp.core.models.multi_output_regression`): independent outputs sharing the inducing
inputs (one kernel per output, or one shared), or the linear model of coregionalisation. Like
:class:`~pep_gp.CollapsedGPRegressor` it integrates its sites out, so it trains full batch (the whole training
split as one block of the trainer, :mod:`pep_gp.pipeline.models.multi_output`) by the estimators' L-BFGS
(:mod:`pep_gp.pipeline.training.full_batch`) and predicts from its training rows. It fits arrays, or the
training split of a store of several targets (``pep ingest --target a --target b``) read whole. It is also
``pep train --model multi-output-regressor``, whose runs keep their training rows
(:class:`~pep_gp.pipeline.models.multi_output.WithRows`): ``save`` writes one, and :func:`pep_gp.load` of one
predicts as ``pep predict`` does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ...core import float64
from ...core.means import InDataUnits
from ..data.stores import Store
from ..data.transforms import Transforms
from ..models.multi_output import MULTI_OUTPUT, MultiOutputPredictive, WithRows
from ..models.predictive import predict_in_blocks
from ..runs.config import TrainConfig
from .base import GPEstimator
from .collapsed import ConditionsOnItsRows
from .fitted import PREDICT_BLOCK_ROWS


class MultiOutputGPRegressor(ConditionsOnItsRows, RegressorMixin, GPEstimator):
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
    principal directions of the standardised targets' correlation. Each output has its own Gaussian noise
    (``fixed="noise_variance"`` keeps every output's at ``noise_variance``, to the bit; ``prior={"noise_variance":
    …}`` is a prior on each output's, a MAP fit). ``mean_function=`` (a name, a table or a :mod:`pep_gp.means`
    object, in standardised units) is each output's prior mean, with parameters of its own, trained with the
    kernels (``mean_function_``, in the data's units).

    Inputs are standardised as every pep estimator's, and each target column by its own mean and deviation.
    ``y`` of one dimension, or of one column, is one output (predictions then ``[n]``, as scikit-learn's
    ``GaussianProcessRegressor``'s). Full batch, by the fit
    of every estimator and of ``pep train`` (the trainer's energy of one block of every row, L-BFGS-B: at most
    ``max_iter`` iterations, stopped when two in a row each raise the objective by less than ``tol`` nats per
    training row, :mod:`pep_gp.pipeline.training.full_batch`; ``solver="adam"`` takes Adam steps instead), on a
    Dask cluster with ``cluster=``. ``num_inducing`` is capped by the training rows.

    Attributes (after ``fit``): those of every estimator (``params_``:
    :class:`~pep_gp.core.models.multi_output_regression.MultiOutputParams`, standardised units), ``n_outputs_``, ``x_mean_``/``x_std_``, ``y_mean_``/``y_std_`` ``[P]``,
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

    spec = MULTI_OUTPUT
    _several_targets = True

    def fit(self, X, y=None):
        """Maximise the collapsed bound over the kernels, noises, mixing weights and (``train_inducing``) the
        inducing inputs (see the class docstring and :meth:`GPEstimator.fit`).

        ``X`` may instead be a pep store (its path, or an opened :class:`~pep_gp.pipeline.data.stores.Store`;
        ``y`` None) of one or several regression targets: the fit is then that of its training split's rows
        and targets (one block: the model conditions on every training row), and the fitted estimator reads
        new rows as a run of that store does (:func:`~pep_gp.pipeline.estimators.stores.table_reading`);
        ``target_names_`` are the store's."""
        shape = None if y is None else np.asarray(y).shape  # None: a store, or validate_data's own message
        if shape is not None and (len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] == 0)):
            raise ValueError(f"MultiOutputGPRegressor: y must hold one row of targets per row of X, [N] or [N, P] "
                             f"with P ≥ 1; got shape {shape}")
        return super().fit(X, y)

    def _solver(self, config: TrainConfig, n_rows: int, from_store: bool, early_stopping: bool) -> str:
        """As every estimator's for arrays (a store is read whole, as its arrays)."""
        return super()._solver(config, n_rows, False, early_stopping)

    def _fitted_on(self, data) -> None:
        """The training rows (their number in ``binding_``: a warm start's may differ from the first fit's, and a
        saved run is read by it), the number of outputs, and a store's target names."""
        super()._fitted_on(data)
        self.binding_ = {**self.binding_, "n_rows": self.x_train_.shape[0]}
        self._one_output = self.y_train_.ndim == 1 or self.y_train_.shape[1] == 1  # [N, 1]: scikit-learn's GPR's
        self.y_train_ = self.y_train_.reshape(self.y_train_.shape[0], -1)
        self.n_outputs_ = self.y_train_.shape[1]
        vars(self).pop("target_names_", None)
        if isinstance(data, Store):
            self.target_names_ = np.asarray(data.target_names, dtype=object)

    def _run_params(self) -> WithRows:
        """The params with the training rows: what the trainer starts from and a run stores."""
        return WithRows(self.params_, self.x_train_, self.y_train_)

    def _keep_params(self, params: WithRows) -> None:
        """``params_``, and the rows among a run's params (a fit's are then those of :meth:`_fitted_on`)."""
        self.params_, self.x_train_, self.y_train_ = params

    def _loaded(self, run) -> None:
        """The outputs of a run: one for a run of one target (predictions ``[n]``), else the run's targets'
        names (``target_names_``)."""
        self.n_outputs_ = self.y_train_.shape[1]
        targets = run.transforms.target if run.transforms is not None else "y"
        self._one_output = isinstance(targets, str)
        if not self._one_output:
            self.target_names_ = np.asarray(targets, dtype=object)

    def _transforms(self) -> Transforms:
        """As every estimator's, with the targets' names (``target_names_``, else ``y0, y1, …``) for several
        outputs: ``pep predict`` of a saved fit writes ``mean_<target>`` and ``std_<target>`` for each."""
        transforms = super()._transforms()
        if self._one_output or isinstance(transforms.target, tuple):
            return transforms
        names = getattr(self, "target_names_", [f"y{p}" for p in range(self.n_outputs_)])
        return transforms.model_copy(update={"target": tuple(map(str, names))})

    save = GPEstimator.save  # the run keeps the rows (_run_params)

    @property
    def y_mean_(self) -> np.ndarray:
        """Each output's training mean ``[P]``: the targets' shift to model units."""
        check_is_fitted(self)
        return np.atleast_1d(np.asarray(self.targets_.shift, dtype=np.float64))

    @property
    def y_std_(self) -> np.ndarray:
        """Each output's training deviation ``[P]``: the targets' scale to model units."""
        check_is_fitted(self)
        return np.atleast_1d(np.asarray(self.targets_.scale, dtype=np.float64))

    # ------------------------------------------------------------------------------------------------ predict
    def _outputs(self, X, output_cov: bool, latent: bool) -> dict[str, np.ndarray]:
        check_is_fitted(self)
        predictive = MultiOutputPredictive.of(self.model_, self.y_mean_, self.y_std_, output_cov, latent)
        x = (self._model_rows(X) - self.x_mean_) / self.x_std_
        with float64():
            params = jax.tree_util.tree_map(jnp.asarray, self._run_params())
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
            raise ValueError("MultiOutputGPRegressor: full_cov across rows is not available (nor, so, the joint "
                             "draws of sample_f and sample_y); predict(X, return_cov=True) gives the covariance "
                             "across the outputs at each row")
        out = self._outputs(X, False, latent=True)
        return out["mean"], out["var"]

    def _latent_units(self) -> tuple[np.ndarray, np.ndarray]:
        """Each output's ``(shift, scale)``, ``y_mean_`` and ``y_std_`` ``[P]`` (numbers for one output)."""
        return (self.y_mean_[0], self.y_std_[0]) if self._one_output else (self.y_mean_, self.y_std_)

    @property
    def mean_function_(self):
        """Each output's fitted prior mean in the data's own units, ``[n, P]`` on rows as ``predict``'s means
        (``[n]`` for one output): ``y_mean_ + y_std_·m_p((x − x_mean_)/x_std_)`` of the mean each output
        trained in standardised units (``params_.mean``, one per output). Without ``mean_function`` it is
        ``Constant(y_mean_)``; with ``"linear"`` a ``Linear`` of ``weights`` ``[P, D]`` and ``bias`` ``[P]``
        (GPflow's ``Linear`` of a matrix). docs/how-to/mean-functions.md."""
        check_is_fitted(self)
        mean = self.params_.mean
        if self._one_output:  # the only output's own parameters
            mean = jax.tree_util.tree_map(lambda values: values[0], mean)
        fitted = mean.in_data_units(self.x_mean_, self.x_std_, *self._latent_units())
        return fitted.for_each_latent() if isinstance(fitted, InDataUnits) and not self._one_output else fitted

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
