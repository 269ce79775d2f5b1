"""``CollapsedGPRegressor``: the collapsed Power-EP regression objective (Bui, Yan & Turner 2017, §3.2, eq.
128), from the Titsias VFE bound (``alpha=0``) to FITC (``alpha=1``).

Its sites are integrated out in closed form, so the model owns its training rows: it trains full batch
(the whole training split as one block of the trainer) and predicts from them. It is therefore an
estimator only, not a ``pep train --model`` (use ``sparse-gp-regressor``, the tied Power-EP model, for data
that does not fit one block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import RegressorMixin

from ...core.models.collapsed_regression import CollapsedRegression
from ..data.datasets import ArrayData
from ..models.collapsed import COLLAPSED
from ..models.predictive import GaussianPredictive, Latent
from ..runs.config import TrainConfig
from .base import GPEstimator
from .fitted import GPRegressorMixin


@dataclass(frozen=True)
class ConditionedOnRows:
    """The collapsed model with ``params = (params, x_train, y_train)``: its ``predict_f``/``predict_y`` at
    standardised rows take the model interface of the predictives (:mod:`pep_gp.pipeline.models.predictive`)."""

    model: CollapsedRegression

    def predict_f(self, params, x, full_cov: bool = False):
        params, x_train, y_train = params
        return self.model.predict_f(params, x_train, y_train, x, full_cov)

    def predict_y(self, params, x):
        params, x_train, y_train = params
        return self.model.predict_y(params, x_train, y_train, x)


class ConditionsOnItsRows:
    """What an estimator of a collapsed model shares (:class:`CollapsedGPRegressor`,
    :class:`~pep_gp.MultiOutputGPRegressor`): the model conditions its predictions on every training row, so it
    trains full batch (one block of every row) and keeps its rows, in model units, to predict."""

    _streams = False  # conditions on all its training rows: no partial_fit

    def _config(self, n_rows: int) -> TrainConfig:
        return super()._config(n_rows).in_one_block(n_rows)

    def _fitted_on(self, data) -> None:
        """Keep the rows the predictions condition on, in model units (a store's training split read whole,
        from its verified chunks, as the trainer read it)."""
        x, y = (data.x, data.y) if isinstance(data, ArrayData) else data.chunks.rows("train", 0, data.n_rows("train"))
        self.x_train_ = (np.asarray(x, dtype=np.float64) - self.x_mean_) / self.x_std_
        self.y_train_ = self.targets_(y)

    def save(self, directory):
        """Not available: the model owns its training rows (use joblib, which keeps them)."""
        raise TypeError(f"{type(self).__name__} keeps its training rows, so save it with joblib instead")

    def _predict_params(self):
        return self.params_, self.x_train_, self.y_train_


class CollapsedGPRegressor(ConditionsOnItsRows, GPRegressorMixin, RegressorMixin, GPEstimator):
    """Sparse GP regression with the collapsed PEP-α objective (α = 1: FITC, α = 0: VFE); with inducing
    inputs at the training inputs and ``jitter=0`` it is the exact GP for every α, evidence and ``predict_f``.
    The relative jitter on ``K_uu`` (default 1.5e-8, needed where ``K_uu`` is singular in float64) makes the
    model's prior covariance of the latent values differ from the kernel's by about ``jitter`` times the
    kernel's variance off the diagonal, so the posterior mean moves by at most about that over the noise
    variance, in proportion to the jitter (measured in standardised units: 6e-8 at noise 0.02, 2e-6 at noise
    1.6e-6; tests/pipeline/test_collapsed_exact.py). Full
    batch: ``batch_size`` is ignored (every step uses all rows). At its defaults it places 200 inducing inputs
    (up to 200 training rows, the rows themselves: the exact GP), gives every input its own lengthscale and
    starts the noise at a tenth of the targets' variance
    (:data:`~pep_gp.pipeline.models.collapsed.COLLAPSED_INDUCING`,
    :data:`~pep_gp.pipeline.models.collapsed.COLLAPSED_NOISE_VARIANCE`: measured on the everyday tables of
    issue 63)."""

    spec = COLLAPSED
    _rows_in_memory = ("conditions its predictions on all its training rows at once; SparseGPRegressor fits a store "
                       "in minibatches")

    def _predictive(self):
        return GaussianPredictive(ConditionedOnRows(self.model_), self.targets_)

    def _latent(self, full_cov: bool):
        return Latent(ConditionedOnRows(self.model_), full_cov)
