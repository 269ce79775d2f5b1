"""The error type for problems with what a user supplied (files, options, stores)."""

from __future__ import annotations


class InputError(ValueError):
    """A user-input problem, reported without a traceback.

    The message names the file (or option), the row, column or field, what was expected and what was
    found, e.g. ``flights.csv: line 17, column 'Distance': expected a number, found 'abc'``.
    Flows never retry an ``InputError``: running again on the same input fails the same way.
    """
