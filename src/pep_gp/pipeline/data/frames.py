"""Rows of a user's table as parsed (:class:`TableChunk`), and their conversion to numbers with messages
that name the file, the row and the column of a bad value."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError


@dataclass(frozen=True)
class TableChunk:
    """Consecutive rows of a user's table as parsed, before any transformation.

    Attributes:
        frame: the rows, one column per selected input column; missing values are NA.
        missing: (n, columns) bool frame, True where a value is missing (a Parquet null, an empty CSV
            cell or one of pandas' NA markers); a Parquet NaN is present, not missing.
        origin: the file, as shown in messages.
        rows: (n,) row numbers within ``origin``, in the unit named by ``row_label``.
        row_label: ``"line"`` for text files (header is line 1), ``"row"`` otherwise.
    """

    frame: pd.DataFrame
    missing: pd.DataFrame
    origin: str
    rows: np.ndarray
    row_label: str = "row"

    def where(self, i: int) -> str:
        """``"<origin>: <row_label> <number>"`` for row ``i`` of the chunk."""
        return f"{self.origin}: {self.row_label} {int(self.rows[i])}"

    def subset(self, keep: np.ndarray) -> "TableChunk":
        """The chunk's rows where ``keep`` (a bool mask) is True."""
        return TableChunk(self.frame[keep], self.missing[keep], self.origin, self.rows[keep], self.row_label)


def numeric_matrix(frame: pd.DataFrame, columns: Sequence[str], origin: str, rows: np.ndarray,
                   row_label: str) -> np.ndarray:
    """Columns of a parsed frame as an (n, len(columns)) float64 matrix; missing values become NaN.

    Args:
        frame: one block of a parsed table, missing values already NA.
        columns: the columns to take, in order.
        origin: the file, for messages.
        rows: (n,) row numbers of the frame's rows, for messages.
        row_label: unit of ``rows`` (``"line"``, ``"row"``).

    Raises:
        InputError: a value is not a number; names the file, row, column and the value.
    """
    out = np.empty((len(frame), len(columns)), dtype=np.float64)
    for j, column in enumerate(columns):
        values = frame[column]
        if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
            converted = pd.to_numeric(values, errors="coerce")
            bad = np.flatnonzero(converted.isna().to_numpy() & values.notna().to_numpy())
            if len(bad):
                i = bad[0]
                raise InputError(f"{origin}: {row_label} {int(rows[i])}, column '{column}': "
                                 f"expected a number, found {values.iloc[i]!r}")
            values = converted
        out[:, j] = values.to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def drop_missing(missing: np.ndarray, names: Sequence[str], reasons: Sequence[str] | None = None
                 ) -> tuple[np.ndarray, Counter[str]]:
    """Rows to keep, and the rows dropped per reason (the first missing column of each row).

    Args:
        missing: (n, k) bool, True where a value is missing.
        names: the k column names.
        reasons: the k reasons to count under; ``"missing <name>"`` by default.

    Returns:
        ``(keep, dropped)``: (n,) bool mask of complete rows, and counts of dropped rows by reason.
    """
    reasons = reasons or [f"missing {name}" for name in names]
    any_missing = missing.any(axis=1)
    first = missing[any_missing].argmax(axis=1)
    dropped: Counter[str] = Counter()
    for j, count in enumerate(np.bincount(first, minlength=len(names))):
        if count:
            dropped[reasons[j]] += int(count)
    return ~any_missing, dropped
