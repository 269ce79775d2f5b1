"""The training progress display on stderr. ``pep train`` and the estimators (``verbose=True``) show the
same display.

* In a terminal: one line (rich), updated in place: the steps done of the total, the latest step's energy,
  the last epoch's energy per row and held-out metrics, and the time; it is removed when training ends.
* Without one (a log file, a notebook's captured stderr, CI): a compact line every :func:`summary_every`
  steps (about :data:`SUMMARY_LINES` lines whatever the number of epochs) and one at the last step, never a
  line per epoch.

Both say ``compiling the training step …`` from the start until the first step is done: the first step of a
process compiles the step (seconds to minutes on a large model), and nothing else moves meanwhile. A run in
segments (a flow's training tasks) starts again at each segment; the later starts find the step compiled,
and the display says nothing new. A program still compiling after
:data:`~pep_gp.pipeline.engine.compilation.SLOW_COMPILE_SECONDS` is told in one line, by name, with whether a
later process will load it from the compilation cache (:func:`slow_compile_text`). XLA's own alarm for a slow
compilation ("Very slow compile? If you want to file a bug …") is silenced while any display, on or off, is
open (:func:`~pep_gp.pipeline.engine.compilation.slow_compiles_told`): with the display off (``--quiet``,
``--json``, an estimator's ``verbose=False``) a fit says nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..engine.compilation import COMPILATION_CACHE_ENV, slow_compiles_told
from .callbacks import StopTraining
from .trainer import Progress as ProgressCallback
from .trainer import no_progress

if TYPE_CHECKING:  # imported where a display is drawn: a quiet fit (an estimator's default) never loads rich
    from rich.console import Console

METRIC_NAMES = ("test_error", "rmse", "test_nll")
COMPILING = "compiling the training step …"
SUMMARY_LINES = 10
"""About how many summary lines a run without a terminal writes (one every :func:`summary_every` steps)."""


def summary_every(total_steps: int) -> int:
    """Steps between two summary lines without a terminal: a tenth of the run, at least 1."""
    return max(1, math.ceil(total_steps / SUMMARY_LINES))


def epoch_text(record: dict[str, Any]) -> str:
    """An epoch record in brief: ``epoch 12  energy/row -0.51234  test_error 0.1234, test_nll 0.3456``."""
    held_out = ", ".join(f"{k} {record[k]:.4f}" for k in METRIC_NAMES if k in record)
    return f"epoch {record['epoch']}  energy/row {record['energy_per_row']:.5f}  {held_out}".rstrip()


@contextmanager
def progress_display(enabled: bool, title: str = "training", console: Console | None = None
                     ) -> Iterator[ProgressCallback]:
    """Yields the trainer's ``progress`` callback that draws the display (:func:`no_progress` when not
    ``enabled``) on ``console`` (default: stderr); the terminal's line is removed when the block ends."""
    if not enabled:
        with slow_compiles_told(None):
            yield no_progress
        return
    from rich.console import Console

    console = console or Console(stderr=True)
    told = lambda program, seconds: console.print(slow_compile_text(title, program, seconds), soft_wrap=True)
    with slow_compiles_told(told):
        if console.is_terminal:
            with _terminal_line(console, title) as report:
                yield report
        else:
            yield _summary_lines(console, title)


def slow_compile_text(title: str, program: str, seconds: float) -> str:
    """The line told of a program still compiling after ``seconds``
    (:func:`~pep_gp.pipeline.engine.compilation.slow_compiles_told`)."""
    import jax

    cache = jax.config.jax_compilation_cache_dir
    where = (f"this machine compiles it once: later fits load it from the cache in {cache}" if cache else
             f"the compilation cache is off ({COMPILATION_CACHE_ENV}=off): every process compiles it again")
    return f"{title}: compiling {program}, {seconds:.0f} s so far ({where})"


@contextmanager
def _terminal_line(console: Console, title: str) -> Iterator[ProgressCallback]:
    """One line updated in place."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
               TextColumn("{task.fields[energy]}"), TextColumn("{task.fields[epoch]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as display:
        bar = display.add_task("train", total=None, energy=COMPILING, epoch="")

        def report(event: str, **info: Any) -> None:
            if event == "start":
                for line in _start_lines(info):
                    console.print(line)
                display.update(bar, total=info["total_steps"], completed=info["step"])
                display.refresh()  # drawn now: the first step blocks while it compiles
            elif event == "step":
                display.update(bar, completed=info["step"], energy=f"energy {info['energy']:.6g}")
            elif event == "epoch":
                display.update(bar, epoch=epoch_text(info["record"]))

        yield report


def _summary_lines(console: Console, title: str) -> ProgressCallback:
    """A line at the start (compiling), then one every :func:`summary_every` steps, and one at the last."""
    state: dict[str, Any] = {"every": 1, "total": 0, "epoch": "", "started": False}

    def report(event: str, **info: Any) -> None:
        if event == "start":
            state.update(every=summary_every(info["total_steps"]), total=info["total_steps"])
            for line in _start_lines(info):
                console.print(line, soft_wrap=True)
            if info["step"] < info["total_steps"] and not state["started"]:
                console.print(f"{title}: {COMPILING}", soft_wrap=True)
            state["started"] = True
        elif event == "epoch":
            state["epoch"] = epoch_text(info["record"])
            if info["record"]["step"] == state["total"]:  # the last step's line, with its epoch's metrics
                console.print(f"{title}: step {state['total']}/{state['total']}  {state['epoch']}", soft_wrap=True)
        elif event == "step" and info["step"] % state["every"] == 0 and info["step"] < state["total"]:
            console.print(f"{title}: step {info['step']}/{state['total']}  energy {info['energy']:.6g}  "
                          f"{state['epoch']}".rstrip(), soft_wrap=True)

    return report


def _start_lines(info: dict[str, Any]) -> list[str]:
    """The lines a start prints: where it resumed from, and the trainer's notes."""
    return ([f"resumed from {info['resumed_from']}"] if info.get("resumed_from") else []) + list(info.get("notes", ()))


def both(first: Callable[..., None], second: Callable[..., None]) -> Callable[..., None]:
    """A progress callback that calls ``first`` then ``second``; ``second`` sees the event also when ``first``
    asked to stop (:class:`~pep_gp.pipeline.training.callbacks.StopTraining`, raised after it)."""
    def report(event: str, **info: Any) -> None:
        try:
            first(event, **info)
        except StopTraining:
            second(event, **info)
            raise
        second(event, **info)
    return report
