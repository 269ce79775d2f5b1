"""How a run ends other than as planned: collapsed (far below its best energy: it ends at its best
parameters, :meth:`~pep_gp.pipeline.training.stopping.StoppingRule.collapsed`), idling (every step of the last
``max_rejected_in_a_row`` rejected as non-finite) or finished with non-finite held-out metrics or energy
(both :class:`~pep_gp.pipeline.errors.TrainingFailed`), or, full batch, with an energy above what any log marginal
likelihood of its rows can be (:func:`refuse_impossible_energy`)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import numpy as np

from ...core import float64
from ...core.parameters import on_device
from ..errors import TrainingFailed
from ..runs.state import LoopState
from .stopping import StoppingRule


def collapse(stopping: StoppingRule, state: LoopState) -> str | None:
    """How the run fell from its best (None unless it collapsed)."""
    if not stopping.collapsed(state.best_mean, state.energies):
        return None
    return (f"the energy fell from its best {state.best_energy:.6g} (step {state.best_step}) to a mean of "
            f"{stopping.window_mean(state.energies):.6g} over the last {stopping.window} steps "
            f"({stopping.fall_per_row(state.best_mean, state.energies):.2g} nats per row below the best "
            f"window); the fit ends at the parameters of step {state.best_step}")


def end_at_best_if_collapsed(stopping: StoppingRule, state: LoopState) -> None:
    """Move a run that ends collapsed back to its best parameters (what the last epoch's record, the
    checkpoint and the result then hold)."""
    if collapse(stopping, state) is not None:
        state.params = state.best_params


def idling(state: LoopState, total_steps: int, learning_rate: float) -> TrainingFailed:
    """The failure of a run stopped by ``max_rejected_in_a_row``: at its start when no step was ever accepted
    (the energy or its gradient is not finite at the starting parameters, which no learning rate mends)."""
    if state.rejected == state.step:
        return TrainingFailed(
            f"training stopped at step {state.step} of {total_steps}: every step was rejected (non-finite energy "
            "or gradient at the starting parameters), so nothing was fitted; check the data and the model's "
            "settings (its starting values, alpha, the likelihood) in a new --run-dir")
    return TrainingFailed(
        f"training stopped at step {state.step} of {total_steps}: the last {state.rejected_in_a_row} steps "
        f"were all rejected (non-finite energy or gradient; {state.rejected} rejected in all), so the "
        f"parameters stopped moving; the learning rate ({learning_rate:g}) is likely too large "
        "for this model and data: lower it in a new --run-dir (max_rejected_in_a_row sets how many in a row "
        "are allowed)")


def refuse_non_finite_end(state: LoopState) -> None:
    """TrainingFailed when the finished run's last epoch has non-finite held-out metrics or energy."""
    last = state.history[-1] if state.history else {}
    bad = {k: v for k, v in last.items() if k in ("energy", "test_error", "test_nll", "rmse")
           and not math.isfinite(v)}
    if bad:
        raise TrainingFailed(f"training ended at step {state.step} with non-finite {', '.join(bad)} "
                             f"({state.rejected} of {state.step} steps rejected as non-finite): the model did "
                             "not fit; lower the learning rate or check the data, in a new --run-dir")


CEILING_SLACK = 1.0
"""Nats per row above a model's evidence ceiling that a full-batch fit's energy may lie before it counts as
diverged: Power EP's energy at α > 0 approximates ``log p(y)`` without bounding it. A diverged one lies orders of
magnitude above (the Student-t at α = 0.05: 7·10¹² against 54). Minibatch runs are not checked: their energy is an
epoch's mean of estimates at the parameters of its steps, away from EP's fixed point, which passed the ceiling at
the final parameters by 1.1 nats per row after 20 steps of a Gaussian regressor on 200 rows (and by 0.12 per
row on 400 rows after 6 epochs)."""


def refuse_impossible_energy(model: Any, params: Any, energy: float, n_total: int) -> None:
    """TrainingFailed when a full-batch fit's ``energy`` (at ``params``) lies more than :data:`CEILING_SLACK`
    nats per row (and a millionth) above its model's ``evidence_ceiling`` (a model without one is not checked):
    the approximation to the log marginal likelihood diverged, and the energy, which the optimiser maximised, is
    not evidence of a fit."""
    if getattr(model, "evidence_ceiling", None) is None or not math.isfinite(energy):
        return
    with float64():
        bound = float(_ceiling(model, params, on_device(np.float64(n_total))))
    if energy > bound + CEILING_SLACK * n_total + 1e-6 * abs(bound):
        raise TrainingFailed(
            f"the fit's energy {energy:.6g} exceeds {bound:.6g}, the most any log marginal likelihood of its "
            f"{n_total} rows can be at the fitted likelihood parameters, by more than {CEILING_SLACK:g} nat per row: "
            "the approximation diverged, so nothing usable was fitted; with a likelihood that is not log-concave "
            "(student-t) use alpha >= 0.5")


@partial(jax.jit, static_argnums=0)
def _ceiling(model, params, n_total):
    return model.evidence_ceiling(params, n_total)
