"""Training callbacks: objects told of a fit's start, each step's energy, each evaluation and its end, through
the trainer's one progress channel (:data:`~pep_gp.pipeline.training.trainer.Progress`): the estimators'
``callbacks=`` and ``pep train --log-to`` (:mod:`pep_gp.pipeline.training.tracking`) both become one more
progress callback beside the display.

A callback subclasses :class:`Callback` and overrides the hooks it needs, as in Keras and Lightning:

* ``on_start(info)``, once before the first step: ``model`` (its name), ``model_settings`` (the model's
  settings as trained, e.g. ``num_inducing`` capped by the rows), ``config`` (the training config's other
  fields), ``step`` (0, or the step a resumed run starts from), ``total_steps`` and ``steps_per_epoch``;
* ``on_step(step, energy)``, after every step: the steps done so far and that step's energy estimate (the
  value an estimator records in ``energy_trace_[step - 1]``);
* ``on_evaluation(record)``, at the end of every epoch (and of the run): the epoch's record as in a run's
  history, ``epoch``, ``step``, ``energy`` (the epoch's mean), ``energy_per_row`` and the held-out metrics
  (``test_nll``, ``test_error`` or ``rmse``, ``n_test``) when there are held-out rows;
* ``on_end(summary)``, once after the last step: the fit's final metrics (an estimator's ``energy``,
  ``log_marginal_likelihood``, ``n_iter``, ``converged``; ``pep train``'s JSON summary), or None when the fit
  raised (the error then propagates).

A hook asks the fit to stop by raising :class:`StopTraining` (from ``on_start``, ``on_step`` or
``on_evaluation``): the fit ends cleanly after the current step, its last epoch recorded and, with a run
directory, its final checkpoint written; the estimator's ``converged_`` is then False and ``stop_reason_``
holds the message. Any other exception a hook raises stops the fit with that same exception.

Example:
    >>> class StopAt(Callback):
    ...     def __init__(self, step):
    ...         self.step = step
    ...     def on_step(self, step, energy):
    ...         if step == self.step:
    ...             raise StopTraining(f"asked to stop at step {step}")
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class StopTraining(Exception):
    """Raised by a callback (or any progress callback, for its ``start``, ``step`` and ``epoch`` events) to end
    the fit cleanly after the current step; its message says why (the fit's ``stop_reason_``)."""


class Callback:
    """A training callback: every hook does nothing until overridden (see the module docstring)."""

    def on_start(self, info: dict[str, Any]) -> None:
        """Before the first step: the model, its settings and the training config."""

    def on_step(self, step: int, energy: float) -> None:
        """After each step: the steps done and the step's energy estimate."""

    def on_evaluation(self, record: dict[str, Any]) -> None:
        """At the end of each epoch: its record (mean energy, held-out metrics)."""

    def on_end(self, summary: dict[str, Any] | None) -> None:
        """After the last step: the final metrics, or None when the fit raised."""


def callback_progress(callbacks: Sequence[Callback] | None) -> Callable[..., None]:
    """The progress callback that tells ``callbacks`` of a fit: ``start`` (its first only: ``pep train`` starts
    the trainer once per segment), ``step``, ``epoch`` and ``end`` (which the estimators' ``fit`` and ``pep
    train`` send once the run is over). Every callback sees each event even when an earlier one asked to
    stop; the first :class:`StopTraining` is raised after them.

    Raises:
        ValueError: an entry of ``callbacks`` is not a :class:`Callback`.
    """
    callbacks = list(callbacks or ())
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise ValueError(f"callbacks: expected pep_gp.Callback instances (with on_step, on_evaluation, …), "
                             f"got {type(callback).__name__}")
    started = False

    def report(event: str, **info: Any) -> None:
        nonlocal started
        if event == "start" and started:
            return
        started = started or event == "start"
        hook: Callable[[Callback], None] | None = {
            "start": lambda callback: callback.on_start(info),
            "step": lambda callback: callback.on_step(info["step"], info["energy"]),
            "epoch": lambda callback: callback.on_evaluation(info["record"]),
            "end": lambda callback: callback.on_end(info["summary"]),
        }.get(event)
        if hook is None:
            return
        stop: StopTraining | None = None
        for callback in callbacks:
            try:
                hook(callback)
            except StopTraining as asked:
                stop = stop or asked
        if stop is not None and event != "end":  # after the end there is nothing left to stop
            raise stop

    return report
