"""The error types pep reports without a traceback (bad input, training that failed), and the "did you
mean" hint their messages give for a misspelt name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices`` to a misspelt ``name`` (difflib's
    ratio ≥ 0.6, case ignored), or ``""`` when none is close.

    Example:
        >>> did_you_mean("lable", ["age", "label", "city"])
        " (did you mean 'label'?)"
    """
    choices = [str(choice) for choice in choices]
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def brief(value: object, width: int = 60) -> str:
    """``repr(value)`` on one line, cut to about ``width`` characters (an array given as a setting)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[:width - 1] + "…"
