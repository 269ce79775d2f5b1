"""The training display: one line updated in place in a terminal, a compact summary without one, and
"compiling …" until the first step is done (issue 42, item 7)."""

from __future__ import annotations

import io

from rich.console import Console

from pep_gp.pipeline.training.display import COMPILING, progress_display


def feed(report, steps: int) -> None:
    """The events of a run of ``steps`` one-step epochs (a small data set: every step is an epoch)."""
    report("start", step=0, total_steps=steps, steps_per_epoch=1, resumed_from=None, notes=())
    for step in range(1, steps + 1):
        report("step", step=step, energy=-100.0 + step, accepted=True)
        report("epoch", record={"epoch": step, "step": step, "energy_per_row": -0.5, "test_error": 0.125,
                                "test_nll": 0.25, "seconds": 0.01 * step})


def test_without_a_terminal_a_run_of_760_epochs_writes_a_dozen_lines():
    out = io.StringIO()
    with progress_display(True, "SparseGPClassifier", Console(file=out, force_terminal=False, width=80)) as report:
        feed(report, 760)
    lines = out.getvalue().splitlines()
    assert lines[0] == f"SparseGPClassifier: {COMPILING}" and len(lines) == 11
    assert lines[1] == "SparseGPClassifier: step 76/760  energy -24  epoch 75  energy/row -0.50000  test_error 0.1250, test_nll 0.2500"
    assert lines[-1].startswith("SparseGPClassifier: step 760/760  epoch 760")


def test_in_a_terminal_the_run_is_one_line_updated_in_place():
    out = io.StringIO()
    with progress_display(True, "training", Console(file=out, force_terminal=True, width=200)) as report:
        feed(report, 760)
    text = out.getvalue()
    assert COMPILING in text and text.count("\n") <= 3 and text.count("energy/row") <= 10  # no line per epoch


def test_a_run_in_segments_says_compiling_once():
    """A flow trains in segments, each a new start of the same process's compiled step: "compiling" once."""
    out = io.StringIO()
    with progress_display(True, "training", Console(file=out, force_terminal=False, width=200)) as report:
        for start in range(0, 30, 10):
            report("start", step=start, total_steps=30, steps_per_epoch=10, resumed_from=None, notes=())
            for step in range(start + 1, start + 11):
                report("step", step=step, energy=-1.0, accepted=True)
    assert out.getvalue().count(COMPILING) == 1
