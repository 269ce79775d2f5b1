"""When a run has converged: the one stopping rule of ``pep train`` and the estimators.

The energy estimate of a step is noisy (Adam's oscillations, and minibatch sampling), so the rule compares
window means: a run has converged once the mean of its last ``window`` step energies differs from the mean
of the ``window`` before by less than ``tol`` nats per training row — a rise or a fall (an energy that falls
by more is unsettled, not converged). Rejected (non-finite) steps are left out of the means; a window of
rejected steps only is not converged. ``tol = 0`` never converges.

The same window means say when a run has *collapsed*: its last window mean lies more than
:data:`COLLAPSE_FALL` nats per row below the best window mean of the run. Full-batch Adam on the sparse GP
classifier climbs to a good optimum and then falls to a plateau where every probability is ~0.5 (issue 37:
the tied factor ``Λ = LLᵀ`` starts at ``K_uu⁻¹``, whose largest eigenvalues, ~10⁶ at the default jitter, Adam's
steps of about the learning rate per entry of ``L`` never shrink; when the kernel's lengthscale moves, the
whitened precision ``LᵀΛL`` of that stale factor grows a hundredfold in a few steps and pins ``q(u)`` at the
prior mean). A plateau is flat, so the rule above calls it converged; a collapsed run is reported as not
converged (:class:`~pep_gp.pipeline.training.trainer.TrainResult`) and returns its best parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_WINDOW = 25  # steps per window: Adam needs a few dozen steps to show a trend
COLLAPSE_FALL = 0.15  # nats per row: healthy fits of the 2-D case of issue 37 fall up to ~0.09 after their peak (Adam's
# oscillation), collapsed ones 0.2–0.3 (to every probability ~0.5; benchmarks/results/bench_collapse.json)


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
        change = self.window_mean(energies) - self.window_mean(energies[:-self.window])
        return float(change / self.n_rows) if np.isfinite(change) else float("inf")

    def converged(self, energies) -> bool:
        return self.tol > 0 and abs(self.gain_per_row(energies)) < self.tol

    def window_mean(self, energies) -> float:
        """The mean of the finite energies among the last ``window`` (NaN before a whole window, or
        when all of them were rejected)."""
        last = _finite(np.asarray(energies, dtype=float)[-self.window:])
        return float(last.mean()) if len(energies) >= self.window and last.size else float("nan")

    def fall_per_row(self, best_mean: float, energies) -> float:
        """How far the last window mean lies below ``best_mean`` (the best window mean so far), per row
        (0 before a whole window)."""
        fall = (best_mean - self.window_mean(energies)) / self.n_rows
        return float(fall) if np.isfinite(fall) else 0.0

    def collapsed(self, best_mean: float, energies) -> bool:
        """The run fell more than :data:`COLLAPSE_FALL` nats per row below its best window mean."""
        return self.fall_per_row(best_mean, energies) > COLLAPSE_FALL


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]
