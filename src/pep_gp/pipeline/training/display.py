"""The training progress display on stderr (rich): a line saying that the step compiles (5–9 s the first time,
silent before), a step bar with the latest energy, and one line per epoch with the held-out metrics. ``pep train`` and the estimators (``verbose=True``) show the same display."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .trainer import Progress as ProgressCallback
from .trainer import no_progress

METRIC_NAMES = ("test_error", "rmse", "test_nll")


@contextmanager
def progress_display(enabled: bool, title: str = "training") -> Iterator[ProgressCallback]:
    """Yields the trainer's ``progress`` callback that draws the display (:func:`no_progress` when not
    ``enabled``); the bar is removed when the block ends."""
    if not enabled:
        yield no_progress
        return
    console = Console(stderr=True)
    columns = (TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
               TextColumn("{task.fields[energy]}"), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as display:
        bar = display.add_task("train", total=None, energy="")

        def report(event: str, **info: Any) -> None:
            if event == "start":
                display.update(bar, total=info["total_steps"], completed=info["step"], energy="compiling …")
                console.print("compiling the training step (seconds for a new model or shape, cached after) …")
                for line in ([f"resumed from {info['resumed_from']}"] if info.get("resumed_from") else []) + list(info.get("notes", ())):
                    console.print(line)
            elif event == "step":
                display.update(bar, completed=info["step"], energy=f"energy {info['energy']:.6g}")
            elif event == "epoch":
                record = info["record"]
                held_out = ", ".join(f"{k} {record[k]:.4f}" for k in METRIC_NAMES if k in record)
                console.print(f"epoch {record['epoch']:>3}  step {record['step']:>6}  energy/row "
                              f"{record['energy_per_row']:.5f}  {held_out}  ({record['seconds']:.1f} s)")

        yield report


def both(first: Callable[..., None], second: Callable[..., None]) -> Callable[..., None]:
    """A progress callback that calls ``first`` then ``second``."""
    def report(event: str, **info: Any) -> None:
        first(event, **info)
        second(event, **info)
    return report
