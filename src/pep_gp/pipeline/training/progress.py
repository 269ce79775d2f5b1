"""The trainer's one progress channel (:data:`Progress`): what the display, the estimators' callbacks
(:mod:`pep_gp.pipeline.training.callbacks`) and ``pep train`` are told while a run trains."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .callbacks import StopTraining

Progress = Callable[..., None]
"""``progress(event, **info)``; events: ``start`` (step, total_steps, steps_per_epoch, resumed_from, notes,
model, model_settings, config), ``step`` (step, energy, accepted), ``epoch`` (record, params), ``checkpoint``
(path); and ``end`` (summary), which the caller of :meth:`~pep_gp.pipeline.training.trainer.Trainer.run` sends
once the run is over (the estimators' ``fit``, ``pep train``). A progress callback that raises
:class:`~pep_gp.pipeline.training.callbacks.StopTraining` for a ``start``, ``step`` or ``epoch`` event ends the
run after that step (:attr:`~pep_gp.pipeline.training.job.TrainResult.stopped`); any other exception
propagates."""


def no_progress(event: str, **info: Any) -> None:
    """A :data:`Progress` that shows nothing."""


def told(progress: Progress, event: str, **info: Any) -> str | None:
    """Send ``event`` to ``progress``: None, or why it asked the run to stop (:class:`StopTraining`)."""
    try:
        progress(event, **info)
    except StopTraining as stop:
        return str(stop) or f"a callback stopped the run at its {event} event"
    return None
