"""What every source reader produces: blocks of rows, and the description of the data they form.

A reader never holds its whole input: it yields :class:`RowBlock` s of at most a few tens of thousands
of rows, each carrying where its rows came from (file and row numbers), so that any later check can
name the offending row. Rows a source's own missing-value rules remove are counted per reason in
``RowBlock.dropped``, never silently discarded.
"""

from __future__ import annotations

import csv
import io
import zipfile
import zlib
from collections import Counter
from itertools import chain
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import pandas as pd
from pandas.io.common import get_handle

from ...errors import InputError, brief, did_you_mean

BLOCK_ROWS = 65_536


@dataclass(frozen=True)
class RowBlock:
    """Consecutive rows of a source.

    Attributes:
        X: (n, D) float64 features.
        y: (n,) float64 labels or targets; ``(n, P)`` for a table's ``P ≥ 2`` regression targets.
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
        target_name: name of the target (column or definition); a table's ``P ≥ 2`` regression target
            columns as a tuple of names.
        task: ``"classification"``, ``"regression"``, or None for a table whose task its values decide
            (known once fitted).
        n_classes: the number of classes C (labels are 0..C-1) of a classification source (a table's once
            fitted), else None.
        default_test_size: the test size used when none is given (``"0.2"``, ``"10000"``), or None
            when the source carries its own split (blocks then set ``is_test``).
        read: returns a fresh iterator over the source's blocks.
        fit: tables: ``fit(progress)`` reads the rows once to learn their transformation (feature
            kinds, categories, labels, fill values) and returns the :class:`Source` whose blocks are
            transformed; None for sources whose rows are model features as read.
        transforms: the :class:`~pep_gp.pipeline.data.transforms.Transforms` of a fitted table.
    """

    name: str
    description: str
    feature_names: tuple[str, ...]
    target_name: str | tuple[str, ...]
    task: str | None
    n_classes: int | None
    default_test_size: str | None
    read: Callable[[], Iterator[RowBlock]]
    fit: Callable[..., "Source"] | None = None
    transforms: Any = None

    @property
    def target_names(self) -> tuple[str, ...]:
        """The target's name, or the ``P`` target columns' names."""
        return self.target_name if isinstance(self.target_name, tuple) else (self.target_name,)

    def fitted(self, progress: Callable[[int], None] = lambda rows: None) -> "Source":
        """The source to read blocks from: itself, or for a table what :attr:`fit` learns (reporting
        the rows read so far to ``progress``)."""
        return self if self.fit is None else self.fit(progress)


TASK_CHOICES = ("auto", "classification", "regression")
NA_POLICIES = ("drop", "fail", "mean")
DEFAULT_MAX_CATEGORIES = 50


@dataclass(frozen=True)
class SourceRequest:
    """The user's options for opening a source (``pep ingest SOURCE --input … --target … --task …``).

    Attributes:
        inputs: ``--input`` files or directory.
        target: ``--target``: the target column of a table (a tuple of ``P ≥ 2`` regression target columns,
            ``--target a --target b``), or a source's target kind.
        task: ``--task``: ``auto``, ``classification`` or ``regression``.
        features: ``--features``: the table's feature columns, in model order (default: every column
            but the target, the id columns and ``drop``).
        drop: ``--drop``: columns to leave out.
        ids: ``--id``: columns passed through to predictions, never features.
        categorical: ``--categorical``: columns one-hot encoded even if their values are numbers.
        na: ``--na``: a row with a missing value is dropped (``drop``), refused (``fail``), or its
            missing feature values are replaced by the column's mean (``mean``).
        sep: ``--sep``: the CSV field separator (default ``,``).
        max_categories: ``--max-categories``: most distinct values a text column may have.
    """

    inputs: tuple[Path, ...] = ()
    target: str | tuple[str, ...] | None = None
    task: str = "auto"
    features: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    na: str = "drop"
    sep: str | None = None
    max_categories: int = DEFAULT_MAX_CATEGORIES
    synthetic_rows: int | None = None  # airline only: that many records drawn from the bundled flights

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(Path(p) for p in self.inputs))
        if self.task not in TASK_CHOICES:
            raise InputError(f"--task: expected one of {', '.join(TASK_CHOICES)}, found {self.task!r}"
                             f"{did_you_mean(self.task, TASK_CHOICES)}")
        if self.na not in NA_POLICIES:
            raise InputError(f"--na: expected one of {', '.join(NA_POLICIES)}, found {self.na!r}")
        if self.max_categories < 2:
            raise InputError(f"--max-categories: expected at least 2, found {self.max_categories}")
        if self.sep is not None and len(self.sep) != 1:
            raise InputError(f"--sep: expected one character, found {self.sep!r}")

    def refuse(self, source: str, *, inputs: bool = False, target: bool = False,
               task: bool = False, table: bool = False, ids: bool = False, sep: bool = False) -> None:
        """Raise InputError if an option the source does not take was given (``table``: the column
        options ``--features``, ``--drop``, ``--categorical``, ``--na``, ``--max-categories``)."""
        given = {"--input": inputs and self.inputs, "--target": target and self.target,
                 "--task": task and self.task != "auto",
                 "--features": table and self.features, "--drop": table and self.drop,
                 "--categorical": table and self.categorical, "--na": table and self.na != "drop",
                 "--max-categories": table and self.max_categories != DEFAULT_MAX_CATEGORIES,
                 "--id": (table or ids) and self.ids, "--sep": (table or sep) and self.sep is not None}
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


MAX_COLUMNS = 100_000
"""The most columns a table may have: a header is read before anything else, and one of 10⁷ columns
would take pandas minutes and then more memory than the machine has."""
MAX_HEADER_CHARS = 64 * MAX_COLUMNS  # a CSV header line longer than this is refused unparsed
MAX_LINE_CHARS = MAX_HEADER_CHARS
"""The most characters of one line of a CSV file (its line ending aside), and of one record whose quoted
fields span lines: a longer one is refused after reading this many characters of it, never read whole (one
field of 1 GB took pandas to 6.6 GB of memory before it gave up). Lines are as long as a header may be."""
BLOCK_CHARS = 2**28
"""The most characters of one block of CSV records parsed by pandas at once: a block holds
:data:`BLOCK_ROWS` records or fewer when they are long (a block of lines of 4 KiB or more)."""


def check_header(path: Path, names: Sequence[str]) -> None:
    """InputError unless a table's header has at most :data:`MAX_COLUMNS` columns, each named (pandas would
    invent ``Unnamed: 1`` for an empty name) and each name once (pandas would rename a second ``a`` to
    ``a.1`` silently, and Arrow reads either for ``a``)."""
    if len(names) > MAX_COLUMNS:
        raise InputError(f"{path}: {len(names):,} columns, more than the {MAX_COLUMNS:,} pep reads")
    unnamed = [position for position, name in enumerate(names, 1) if not str(name).strip()]
    if unnamed:
        raise InputError(f"{path}: column {unnamed[0]} of the header has no name; name it in the header (or leave "
                         "the column out of the file)" + " (a table written with its index?)" * (unnamed[0] == 1))
    repeated = [name for name, count in Counter(names).items() if count > 1]
    if repeated:
        raise InputError(f"{path}: column name{'s' * (len(repeated) > 1)} {', '.join(map(repr, repeated))} "
                         "repeated in the header; each column needs its own name")


def csv_columns(path: Path, sep: str = ",") -> list[str]:
    """The header of a CSV file (any compression pandas infers from the name) with field separator ``sep``.

    Its first line is read, at most :data:`MAX_HEADER_CHARS` characters of it, and its fields counted and
    checked (:func:`check_header`) before pandas parses that line (pandas given the file would read the
    next line too, however long).
    """
    with reading(path):
        with get_handle(path, "r", compression="infer", encoding="utf-8-sig") as handles:
            line = handles.handle.readline(MAX_HEADER_CHARS + 1)
        if len(line) > MAX_HEADER_CHARS:
            raise InputError(f"{path}: header line longer than {MAX_HEADER_CHARS:,} characters; pep reads tables "
                             f"of at most {MAX_COLUMNS:,} columns")
        names = next(csv.reader([line], delimiter=sep), [])
        if "\0" in line:
            refuse_nul(path, names, 1)
        check_header(path, names)
        return list(pd.read_csv(io.StringIO(line), nrows=0, sep=sep).columns)


def csv_blocks(path: Path, columns: Sequence[str] | None = None, block_rows: int = BLOCK_ROWS, sep: str = ",",
               **options: object) -> Iterator[tuple[pd.DataFrame, np.ndarray]]:
    """Stream a CSV file in blocks of parsed rows, each row checked to have the header's number of fields.

    The file is read once: :func:`csv_records` splits it into records (counting their fields and the
    physical lines they start on, a quoted field may hold newlines), and pandas parses each block of
    records. pandas alone would pad a short row with missing values (a truncated last row would pass) and
    can only number records, not lines.

    Args:
        path: the file (plain, .gz, .bz2, .zip, .xz, .zst).
        columns: the columns to parse (checked to exist beforehand with :func:`csv_columns`), or
            None for all; with None a row with too many fields is an error, else it is not seen.
        block_rows: rows per block.
        sep: the field separator.
        **options: further ``pandas.read_csv`` options (``dtype``, ``na_values``).

    Yields:
        ``(frame, lines)``: a block and the line number of each of its rows (the header is line 1).

    Raises:
        InputError: a row with fewer fields than the header (or more, with ``columns`` None), naming
            its line.
    """
    with reading(path), get_handle(path, "r", compression="infer", encoding="utf-8-sig") as handles:
        records = csv_records(path, handles.handle, sep)
        header = next(records, None)
        if header is None:
            raise InputError(f"{path}: empty file (expected a header line)")
        expected = header.fields
        block: list[CsvRecord] = []
        chars = 0
        for record in chain(records, [None]):
            if record is not None:
                if record.fields < expected or (columns is None and record.fields > expected):
                    raise InputError(f"{path}: line {record.line} has {record.fields} field"
                                     f"{'s' * (record.fields != 1)}, expected {expected} as in the header"
                                     f"{' (a truncated row?)' * (record.fields < expected)}")
                block.append(record)
                chars += len(record.text)
            if block and (record is None or len(block) == block_rows or chars >= BLOCK_CHARS):
                text = header.text + "".join(row.text for row in block)
                frame = pd.read_csv(io.StringIO(text), usecols=columns and list(columns), sep=sep, **options)
                yield frame, np.array([row.line for row in block], dtype=np.int64)
                block, chars = [], 0


class CsvRecord(NamedTuple):
    """One CSV record: its text (with its line ending), number of fields and first physical line."""

    text: str
    fields: int
    line: int


def csv_records(path: Path, handle: IO[str], sep: str) -> Iterator[CsvRecord]:
    """The records of a CSV text stream read with universal line endings kept (``newline=""``), blank
    lines skipped as pandas skips them; quoting as pandas reads it (``"`` quotes, ``""`` inside).

    A line without a quote is one record whose fields are its separators plus one (the fast path: the
    :mod:`csv` module would cost more than pandas' whole parse); a line with one is parsed by :mod:`csv`
    with the lines that its quoted fields span. Each line is read at most :data:`MAX_LINE_CHARS`
    characters at a time, so memory is bounded whatever the file holds.

    Raises:
        InputError: a line, or a record of several, longer than :data:`MAX_LINE_CHARS` characters; a field
            the :mod:`csv` module refuses (such as one over its size limit); a NUL byte (:func:`refuse_nul`);
            each naming the line.
    """
    lines = iter(partial(handle.readline, MAX_LINE_CHARS + 2), "")  # + 2: room for the line ending
    spanned: list[str] = []
    spanned_chars = 0
    names: list[str] | None = None  # the header's, once read

    def remembered() -> Iterator[str]:
        nonlocal spanned_chars
        for more in lines:
            spanned.append(more)
            spanned_chars += len(more)
            if spanned_chars > MAX_LINE_CHARS:
                raise InputError(f"{path}: line {number}: a record longer than {MAX_LINE_CHARS:,} characters (its "
                                 "quoted fields span lines), the most pep reads in one record; is a quote unclosed?")
            yield more

    following = remembered()
    number = 0
    for line in lines:
        number += 1
        if len(line) > MAX_LINE_CHARS and len(line.rstrip("\r\n")) > MAX_LINE_CHARS:
            raise InputError(f"{path}: line {number} is longer than {MAX_LINE_CHARS:,} characters, the most pep "
                             "reads in one line; is it a CSV table?")
        if '"' not in line:
            if line.strip("\r\n"):
                if "\0" in line:
                    refuse_nul(path, line.rstrip("\r\n").split(sep), number, names)
                names = names or line.rstrip("\r\n").split(sep)
                yield CsvRecord(line, line.count(sep) + 1, number)
            continue
        spanned[:], spanned_chars = [line], len(line)
        try:
            fields = next(csv.reader(chain([line], following), delimiter=sep))
        except csv.Error as exc:
            raise InputError(f"{path}: line {number}: malformed CSV ({exc})") from exc
        text = "".join(spanned)
        if "\0" in text:
            refuse_nul(path, fields, number, names)
        names = names or fields
        yield CsvRecord(text, len(fields), number)
        number += len(spanned) - 1


def refuse_nul(path: Path, fields: Sequence[str], line: int, names: Sequence[str] | None = None) -> None:
    """InputError naming the first of a record's ``fields`` that holds a NUL byte: no text or number has one
    (pandas reads ``3.5\\0`` as text, which would make a column of numbers categories), a file that does is
    damaged or in another encoding (UTF-16 has one in every other byte).

    Args:
        path: the file, for the message.
        fields: the record's fields.
        line: the line the record starts on.
        names: the header's column names, or None for the header itself (columns are then numbered).
    """
    position = next(j for j, field in enumerate(fields) if "\0" in field)
    column = repr(names[position]) if names and position < len(names) else str(position + 1)
    raise InputError(f"{path}: line {line}, column {column}: a NUL byte in {brief(fields[position])}; the file is "
                     "damaged or not UTF-8 text")
