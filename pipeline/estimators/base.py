"""What every estimator shares: the fit through the trainer — the same step and loop as ``pep train``,
in-process over in-memory arrays — its stopping rule, and the standardisation of user-unit inputs."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..training.config import TrainConfig
from ..training.trainer import Trainer, TrainJob
from ..data.blocks import input_statistics
from ..data.datasets import ArrayData
from ..engine import InProcess
from ..models import ModelSpec


@dataclass(frozen=True)
class InputScaling:
    """``x ↦ (x − mean)/std``: user units to the model's (the training rows' statistics, as the trainer)."""

    mean: np.ndarray  # [D]
    std: np.ndarray  # [D]

    @classmethod
    def of(cls, data: ArrayData, standardize: bool) -> "InputScaling":
        return cls(*map(np.asarray, input_statistics(data.attrs, standardize)))

    def __call__(self, x) -> np.ndarray:
        return (np.asarray(x, dtype=np.float64) - self.mean) / self.std


STOPPING_WINDOW = 25  # steps per window of the stopping rule (at least one epoch with minibatches)


@dataclass(frozen=True)
class StoppingRule:
    """Stop once the energy has stopped rising: the mean of its last ``window`` step values exceeds the
    mean of the ``window`` before by less than ``tol`` nats per training row (window means smooth Adam's
    oscillations and minibatch noise; non-finite, rejected steps are left out). ``tol = 0`` never stops.
    """

    tol: float
    n_rows: int
    window: int

    def gain_per_row(self, energies: np.ndarray) -> float:
        """The rise of the window mean per row (``inf`` until two windows have been seen)."""
        if len(energies) < 2 * self.window:
            return float("inf")
        last, before = (_finite(energies[-self.window:]), _finite(energies[-2 * self.window:-self.window]))
        if not (last.size and before.size):  # a window of rejected steps only: not converged
            return float("inf")
        return float((last.mean() - before.mean()) / self.n_rows)

    def converged(self, energies: np.ndarray) -> bool:
        return self.tol > 0 and self.gain_per_row(energies) < self.tol

    def warn_unless_converged(self, estimator: Any, max_iter: int) -> None:
        """A :class:`~sklearn.exceptions.ConvergenceWarning`, pointing at the user's ``fit`` call, when the
        cap stopped a fit of ``estimator`` (fitted: ``energy_trace_``, ``converged_``) that was still
        improving. Called by the estimator's ``_fit…`` method."""
        if self.tol > 0 and max_iter > 0 and not estimator.converged_:
            gain = self.gain_per_row(estimator.energy_trace_)
            warnings.warn(f"{type(estimator).__name__}: the energy still rose by {gain:.2g} nats per row over the "
                          f"last {self.window} steps when max_iter={max_iter} was reached (tol={self.tol:g}); "
                          "increase max_iter (or the learning rate)", ConvergenceWarning, stacklevel=4)


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def stopping_rule(tol: float, n_rows: int, batch_size: int | None, epochs: int | None) -> StoppingRule:
    """The estimators' rule: windows of 25 steps or one epoch of ``batch_size`` rows, whichever is longer;
    none (``tol = 0``) when the user asked for a number of ``epochs``. ValueError for a negative ``tol``."""
    if not tol >= 0:
        raise ValueError(f"tol must be non-negative; got {tol!r}")
    steps_per_epoch = 1 if batch_size is None else -(-n_rows // batch_size)
    return StoppingRule(0.0 if epochs is not None else float(tol), n_rows, max(STOPPING_WINDOW, steps_per_epoch))


def training_config(model_settings: dict[str, Any], *, rows_per_step: int, epochs: int, learning_rate: float,
                    standardize: bool, seed: int) -> TrainConfig:
    """A config for an in-memory fit: ``rows_per_step`` rows per step, each step one block."""
    return TrainConfig(model=model_settings, learning_rate=learning_rate, epochs=max(epochs, 1),
                       batch_size=rows_per_step, block_rows=rows_per_step, standardize=standardize, seed=seed,
                       checkpoint_every=max(epochs, 1))


def training_steps(n_rows: int, batch_size: int | None, max_iter: int, epochs: int | None) -> int:
    """The number of steps of a fit: ``max_iter``, or ``epochs`` passes of ``⌈n_rows/batch_size⌉``
    minibatches (a full batch when ``batch_size`` is None). ValueError naming a bad argument."""
    if batch_size is not None and (not isinstance(batch_size, (int, np.integer)) or not 1 <= batch_size <= n_rows):
        raise ValueError(f"batch_size must be None or an integer in 1..{n_rows}; got {batch_size!r}")
    if not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
        raise ValueError(f"max_iter must be a non-negative integer; got {max_iter!r}")
    if epochs is None:
        return int(max_iter)
    if not isinstance(epochs, (int, np.integer)) or epochs < 1:
        raise ValueError(f"epochs must be None or a positive integer; got {epochs!r}")
    return int(epochs) * -(-n_rows // (n_rows if batch_size is None else batch_size))


def fit_in_process(spec: ModelSpec, data: ArrayData, config: TrainConfig, steps: int,
                   initial_params: Any = None, stopping: StoppingRule | None = None) -> dict[str, Any]:
    """Train ``spec`` on ``data`` with the trainer (no run directory) for at most ``steps`` steps, checking
    ``stopping`` after every window of steps, and return the fitted attributes every estimator sets:
    ``params_``, ``energy_trace_`` (the energy estimate of every step), ``n_iter_`` (steps taken),
    ``converged_``, ``n_rejected_steps_`` (non-finite ascent steps skipped) and ``n_rejected_site_updates_``."""
    trainer = Trainer(TrainJob(spec, data, config, None), InProcess(), initial_params)
    stopping = stopping or StoppingRule(0.0, 1, max(steps, 1))
    energies: list[float] = []

    def record(event: str, **info: Any) -> None:
        if event == "step":
            energies.append(info["energy"])

    result = trainer.run(until_step=0)
    while result.steps < steps and not stopping.converged(np.asarray(energies)):
        result = trainer.run(until_step=min(steps, result.steps + stopping.window), progress=record)
    trace = np.asarray(energies)
    return {"params_": result.params, "energy_trace_": trace, "n_iter_": result.steps,
            "converged_": stopping.converged(trace),
            "n_rejected_steps_": result.rejected_steps, "n_rejected_site_updates_": result.rejected_site_updates}
