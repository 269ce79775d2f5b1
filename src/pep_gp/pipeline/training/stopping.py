"""When a run has converged: the one stopping rule of ``pep train`` and the estimators.

The energy estimate of a step is noisy (Adam's oscillations, and minibatch sampling), so the rule compares
window means: a run has converged once the mean of its last ``window`` step energies differs from the mean
of the ``window`` before by less than ``tol`` nats per training row — a rise or a fall (an energy that falls
by more is unsettled, not converged). Rejected (non-finite) steps are left out of the means; a window of
rejected steps only is not converged. ``tol = 0`` never converges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_WINDOW = 25  # steps per window: Adam needs a few dozen steps to show a trend


@dataclass(frozen=True)
class StoppingRule:
    """The rule (module docstring) for a split of ``n_rows`` rows and windows of ``window`` steps."""

    tol: float
    n_rows: int
    window: int

    @classmethod
    def for_run(cls, tol: float, n_rows: int, steps_per_epoch: int) -> "StoppingRule":
        """Windows of :data:`MIN_WINDOW` steps or one epoch, whichever is longer (an epoch's minibatches
        together see every row once, so their mean is free of the sampling's drift)."""
        return cls(float(tol), int(n_rows), max(MIN_WINDOW, int(steps_per_epoch)))

    @property
    def history(self) -> int:
        """Step energies the rule reads (kept in checkpoints, so a resumed run stops where an
        uninterrupted one would)."""
        return 2 * self.window

    def gain_per_row(self, energies) -> float:
        """The rise of the window mean per row (``inf`` until two windows have been seen)."""
        energies = np.asarray(energies, dtype=float)
        if len(energies) < 2 * self.window:
            return float("inf")
        last = _finite(energies[-self.window:])
        before = _finite(energies[-2 * self.window:-self.window])
        if not (last.size and before.size):
            return float("inf")
        return float((last.mean() - before.mean()) / self.n_rows)

    def converged(self, energies) -> bool:
        return self.tol > 0 and abs(self.gain_per_row(energies)) < self.tol


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]
