"""The error types pep reports without a traceback: bad input, and training that failed."""

from __future__ import annotations


class InputError(ValueError):
    """A user-input problem, reported without a traceback.

    The message names the file (or option), the row, column or field, what was expected and what was
    found, e.g. ``flights.csv: line 17, column 'Distance': expected a number, found 'abc'``.
    Flows never retry an ``InputError``: running again on the same input fails the same way.
    """


class TrainingFailed(RuntimeError):
    """A run that cannot give a usable model: too many steps in a row rejected as non-finite, or
    non-finite final metrics. Reported in one line with what to change; a failed run never exits 0.
    Not retried: training again with the same settings fails the same way.
    """
