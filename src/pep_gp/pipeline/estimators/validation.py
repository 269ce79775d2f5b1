"""Validation-based early stopping of the estimators, spelt as scikit-learn's ``MLPClassifier``/``SGDClassifier``:
``early_stopping=True`` holds out ``validation_fraction`` of the training rows (split with the estimator's
``seed``, stratified by class for a classifier), the trainer scores them at the end of every epoch (pep's
evaluations: with the default ``batch_size`` and up to 10,000 rows, every step) by their mean negative log
predictive density, the held-out ``test_nll`` of :mod:`pep_gp.pipeline.metrics`, and the fit stops when
``n_iter_no_change`` evaluations in a row have not lowered the best score by more than ``tol`` (nats per
row); it ends at the parameters of the best score, as scikit-learn's MLP keeps its best coefficients.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..training.callbacks import StopTraining
from ..training.trainer import TrainResult


def validation_split(name: str, x: np.ndarray, y: np.ndarray, fraction: Any, seed: int, stratify: bool
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_fit, y_fit, x_validation, y_validation)``: ``fraction`` of the rows held out by scikit-learn's
    ``train_test_split`` with ``random_state=seed`` (stratified by ``y`` when ``stratify``), as its MLP splits.

    Raises:
        ValueError: ``fraction`` outside (0, 1), or a split that leaves no row (or, stratified, not every
            class) on one side; the message starts with the estimator's ``name``.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (float, int, np.floating)) or not 0 < fraction < 1:
        raise ValueError(f"{name}: validation_fraction must lie in (0, 1); got {fraction!r}")
    from sklearn.model_selection import train_test_split  # with early stopping only: 0.15 s of CPU a fit skips

    try:
        x_fit, x_validation, y_fit, y_validation = train_test_split(
            x, y, test_size=float(fraction), random_state=seed, stratify=y if stratify else None)
    except ValueError as error:
        raise ValueError(f"{name}: early_stopping cannot hold out validation_fraction={fraction:g} of "
                         f"{len(y)} rows: {error}") from None
    return x_fit, y_fit, x_validation, y_validation


@dataclass
class ValidationStopping:
    """A progress callback that records each evaluation's held-out NLL (``test_nll``) and the parameters of
    the best, and stops the run (:class:`~pep_gp.pipeline.training.callbacks.StopTraining`) once more than
    ``n_iter_no_change`` evaluations in a row have not lowered the best by more than ``tol`` (scikit-learn's
    ``_update_no_improvement_count``, the score a loss). A non-finite score counts as no improvement."""

    n_iter_no_change: int
    tol: float
    scores: list[float] = field(default_factory=list)
    best_score: float = math.inf
    best_params: Any = None
    best_step: int = 0
    no_improvement: int = 0
    stopped: bool = False  # this monitor ended the run

    @classmethod
    def of(cls, name: str, n_iter_no_change: Any, tol: float) -> "ValidationStopping":
        """The monitor of an estimator's settings (ValueError naming a bad ``n_iter_no_change``)."""
        if isinstance(n_iter_no_change, bool) or not isinstance(n_iter_no_change, (int, np.integer)) \
                or n_iter_no_change < 1:
            raise ValueError(f"{name}: n_iter_no_change must be a positive integer; got {n_iter_no_change!r}")
        return cls(int(n_iter_no_change), float(tol))

    def __call__(self, event: str, **info: Any) -> None:
        if event != "epoch":
            return
        record = info["record"]
        score = float(record["test_nll"])
        self.scores.append(score)
        self.no_improvement = 0 if score < self.best_score - self.tol else self.no_improvement + 1
        if score < self.best_score:
            self.best_score, self.best_params, self.best_step = score, info["params"], record["step"]
        if self.no_improvement > self.n_iter_no_change:
            self.stopped = True
            raise StopTraining(f"the validation NLL has not improved by more than tol={self.tol:g} for "
                               f"{self.no_improvement} evaluations (best {self.best_score:.6g} at step {self.best_step})")

    def ended(self, result: TrainResult) -> TrainResult:
        """``result`` at the best score's parameters; converged when this monitor stopped it (the validation
        score is then the fit's stopping rule, as in scikit-learn)."""
        if self.best_params is None:  # no finite score: the run's own end
            return result
        return dataclasses.replace(result, params=self.best_params, converged=result.converged or self.stopped,
                                   stopped=None if self.stopped else result.stopped)
