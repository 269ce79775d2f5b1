"""``CollapsedGPRegressor``: the collapsed Power-EP regression objective (Bui, Yan & Turner 2017, §3.2, eq.
128), from the Titsias VFE bound (``alpha=0``) to FITC (``alpha=1``).

Its sites are integrated out in closed form, so the model owns its training rows: it trains full batch
(the whole training split as one block of the trainer) and predicts from them. It is therefore an
estimator only, not a ``pep train --model`` (use ``sparse-gp-regressor``, the tied Power-EP model, for data
that does not fit one block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from sklearn.base import RegressorMixin

from ..data.blocks import TargetScaling
from ..models.collapsed import COLLAPSED
from ..training.config import TrainConfig
from ..training.sizes import bucket
from .base import GPEstimator, GPRegressorMixin


@dataclass(frozen=True)
class CollapsedPredictive:
    """The collapsed model's predictive at standardised rows, from ``params = (params, x_train, y_train)``."""

    model: Any
    targets: TargetScaling

    def __call__(self, params, x) -> dict:
        params, x_train, y_train = params
        mean, var = self.model.predict_y(params, x_train, y_train, x)
        return {"mean": mean * self.targets.scale + self.targets.shift, "var": var * self.targets.scale**2}


jax.tree_util.register_dataclass(CollapsedPredictive, data_fields=["targets"], meta_fields=["model"])


class CollapsedGPRegressor(GPRegressorMixin, RegressorMixin, GPEstimator):
    """Sparse GP regression with the collapsed PEP-α objective (α = 1: FITC, α = 0: VFE); with inducing
    inputs at the training inputs it is the exact GP evidence for every α. Full batch: ``batch_size`` is
    ignored (every step uses all rows)."""

    spec = COLLAPSED

    def _config(self, n_rows: int) -> TrainConfig:
        rows = bucket(n_rows)
        config = super()._config(n_rows)
        return config.model_copy(update={"batch_size": rows, "block_rows": rows})

    def _fitted_on(self, data) -> None:
        """Keep the rows the predictions condition on, in model units."""
        self.x_train_ = (data.x - self.x_mean_) / self.x_std_
        self.y_train_ = self.targets_(data.y)

    def save(self, directory):
        """Not available: the model owns its training rows (use joblib, which keeps them)."""
        raise TypeError("CollapsedGPRegressor keeps its training rows, so save it with joblib instead")

    def _predictive(self):
        return CollapsedPredictive(self.model_, self.targets_)

    def _predict_params(self):
        return self.params_, self.x_train_, self.y_train_
