"""What every source reader produces: blocks of rows, and the description of the data they form.

A reader never holds its whole input: it yields :class:`RowBlock` s of at most a few tens of thousands
of rows, each carrying where its rows came from (file and row numbers), so that any later check can
name the offending row. Rows a source's own missing-value rules remove are counted per reason in
``RowBlock.dropped``, never silently discarded.
"""

from __future__ import annotations

import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import InputError

BLOCK_ROWS = 65_536


@dataclass(frozen=True)
class RowBlock:
    """Consecutive rows of a source.

    Attributes:
        X: (n, D) float64 features.
        y: (n,) float64 labels or targets.
        origin: the file (or data set) the rows come from, as shown in messages.
        rows: (n,) row numbers within ``origin``, in the unit named by ``row_label``.
        row_label: ``"line"`` for text files (header is line 1), ``"row"`` or ``"item"`` otherwise.
        is_test: (n,) bool, for sources that carry their own train/test split; None otherwise.
        dropped: rows of this stretch of input removed by the source's missing-value rules, by reason.
    """

    X: np.ndarray
    y: np.ndarray
    origin: str
    rows: np.ndarray
    row_label: str = "row"
    is_test: np.ndarray | None = None
    dropped: Mapping[str, int] = field(default_factory=dict)

    def where(self, i: int) -> str:
        """``"<origin>: <row_label> <number>"`` for row ``i`` of the block."""
        return f"{self.origin}: {self.row_label} {int(self.rows[i])}"


@dataclass(frozen=True)
class Source:
    """A readable data set: its description and a re-iterable reader of row blocks.

    Attributes:
        name: the SOURCE name it was opened by (``airline``, ``csv``, ``sklearn:wine``, …).
        description: human-readable provenance (files, target definition).
        feature_names: names of the D feature columns.
        target_name: name of the target (column or definition).
        task: ``"classification"``, ``"regression"``, or None to decide from the values (tables).
        n_classes: the fixed number of classes where the source defines it, else None.
        default_test_size: the test size used when none is given (``"0.2"``, ``"10000"``), or None
            when the source carries its own split (blocks then set ``is_test``).
        read: returns a fresh iterator over the source's blocks.
    """

    name: str
    description: str
    feature_names: tuple[str, ...]
    target_name: str
    task: str | None
    n_classes: int | None
    default_test_size: str | None
    read: Callable[[], Iterator[RowBlock]]


@dataclass(frozen=True)
class SourceRequest:
    """The user's options for opening a source (``pep ingest SOURCE --input … --target … --task …``)."""

    inputs: tuple[Path, ...] = ()
    target: str | None = None
    task: str = "auto"
    synthetic_rows: int | None = None  # airline only: that many records drawn from the bundled flights

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(Path(p) for p in self.inputs))

    def refuse(self, source: str, *, inputs: bool = False, target: bool = False,
               task: bool = False) -> None:
        """Raise InputError if an option the source does not take was given."""
        given = {"--input": inputs and self.inputs, "--target": target and self.target,
                 "--task": task and self.task != "auto"}
        for option, present in given.items():
            if present:
                raise InputError(f"{option}: source '{source}' does not take this option")


def require_file(path: Path) -> Path:
    """Return ``path`` if it is a readable file, else raise InputError naming it."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: expected a file, found a directory or special file")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from exc
    return path


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


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn the errors of reading a damaged or malformed file into an InputError naming it."""
    try:
        yield
    except pd.errors.EmptyDataError as exc:
        raise InputError(f"{path}: empty file (expected a header line)") from exc
    except pd.errors.ParserError as exc:
        raise InputError(f"{path}: malformed CSV ({str(exc).strip()})") from exc
    except (EOFError, OSError, zlib.error, zipfile.BadZipFile, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable or truncated file ({type(exc).__name__}: {exc})") from exc


def csv_columns(path: Path) -> list[str]:
    """The header of a CSV file (any compression pandas infers from the name)."""
    with reading(path):
        return list(pd.read_csv(path, nrows=0).columns)


def csv_blocks(path: Path, columns: Sequence[str] | None = None, block_rows: int = BLOCK_ROWS,
               **options: object) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """Stream a CSV file in blocks of parsed rows.

    Args:
        path: the file (plain, .gz, .bz2, .zip, .xz, .zst).
        columns: the columns to parse (checked to exist beforehand with :func:`csv_columns`), or
            None for all; with None a row with too many fields is an error, else it is not seen.
        block_rows: rows per block.
        **options: further ``pandas.read_csv`` options (``dtype``, ``na_values``).

    Yields:
        ``(frame, lines)``: a block and the line number of each of its rows (the header is line 1).
    """
    with reading(path):
        with pd.read_csv(path, usecols=columns and list(columns), chunksize=block_rows, **options) as chunks:
            for frame in chunks:
                yield frame, frame.index.to_numpy(dtype=np.int64) + 2
