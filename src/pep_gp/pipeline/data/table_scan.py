"""One pass over a user's table that learns its :class:`~pep_gp.pipeline.data.transforms.Transforms`:
which feature columns are numbers, which are dates and times and which are text (one-hot encoded), the
values of each text column, the class labels, and each numeric or time column's mean (in float64: its
offset, and its fill value under ``--na mean``).

A column is *numeric* when its present values are numbers (booleans count as 0 and 1) and *text* when
most of them are not; a column mostly of numbers with a few text values is refused at its first text
value (a typo is likelier than a category; ``--categorical`` one-hot encodes it anyway). A column
whose present values are all ISO 8601 dates and times (or a Parquet timestamp column) is a *time*
column, read as seconds since 1970-01-01 UTC. A text column with more than ``--max-categories``
distinct values is refused with their count. The target gives
class labels of any values (text, booleans, integers such as −1/+1 or 1..C), mapped to ``0..C−1`` in
sorted order; with ``--task auto`` a numeric target with fractional values is a regression target and
one of integers a classification target when it looks like class labels: two values, or at most
:data:`AUTO_CLASSES_MAX` consecutive integers each in at least :data:`MIN_LABEL_ROWS` rows (so that every
class likely has training rows). Other integers (counts 0–89 with gaps) are refused with both readings
named (``--task classification``, or ``--task regression`` with a count likelihood): guessing either
would be silent.

Memory is bounded whatever the number of rows: a block of rows at a time, and at most
:data:`DISTINCT_LIMIT` distinct values per column. A CSV block whose column pandas parsed as numbers
keeps no text, so if such a column turns out to be text the pass is run again reading it as text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ..errors import InputError
from .frames import TableChunk, drop_missing
from .transforms import (Feature, NumericFeature, OneHotFeature, TimeFeature, Transforms, epoch_seconds, label_kind,
                         label_value, text_values)

DISTINCT_LIMIT = 100_000  # distinct values tracked per column; beyond it the count is "more than"
AUTO_CLASSES_MAX = 100    # --task auto: an integer target with more distinct values is refused
MIN_LABEL_ROWS = 3        # --task auto: rows of each value of 3+ integers read as labels (all in a 20 % test split: p < 1 %)

Chunks = Callable[[frozenset[str]], Iterator[TableChunk]]
"""``chunks(text_columns)``: a fresh pass over the table, the named columns read as text."""


@dataclass(frozen=True)
class TableOptions:
    """What the user chose about a table's columns (``pep ingest`` options).

    Attributes:
        description: the table's files, for messages about a whole column.
        features: the feature columns in model order.
        target: the target column, or a tuple of ``P ≥ 2`` regression target columns.
        task: ``auto``, ``classification`` or ``regression``.
        na: ``drop``, ``fail`` or ``mean``.
        ids: id columns (recorded, never read at ingest).
        categorical: columns one-hot encoded whatever their values.
        max_categories: most distinct values of a one-hot encoded column.
    """

    description: str
    features: tuple[str, ...]
    target: str | tuple[str, ...]
    task: str
    na: str
    ids: tuple[str, ...]
    categorical: frozenset[str]
    max_categories: int

    @property
    def target_columns(self) -> tuple[str, ...]:
        """The target column, or the ``P`` target columns."""
        return self.target if isinstance(self.target, tuple) else (self.target,)


@dataclass
class ColumnScan:
    """What a pass saw of one column: kinds of its present values (``times``: the text values that are
    dates and times), and on the rows kept for training its distinct text values (or labels) and the sum
    and count of its numbers, or of its times in seconds (a numeric feature has no text, a time feature
    no numbers: one sum serves both), and whether float32 holds each of those values exactly."""

    numbers: int = 0
    texts: int = 0
    times: int = 0
    missing: int = 0
    first_text: tuple[str, str] | None = None         # (where, value)
    first_not_finite: tuple[str, float] | None = None  # (where, value)
    distinct: Counter = field(default_factory=Counter)
    overflow: bool = False
    total: float = 0.0
    exact: bool = True
    count: int = 0
    text_lost: bool = False  # a block was parsed as numbers: its values' text is not known

    def add_distinct(self, values: Sequence) -> None:
        """Count distinct values (at most :data:`DISTINCT_LIMIT` of them)."""
        if not self.overflow:
            self.distinct.update(values)
            self.overflow = len(self.distinct) > DISTINCT_LIMIT

    def add_labels(self, values: pd.Series) -> None:
        """Count distinct labels, typed as JSON reads them (:func:`label_value`)."""
        if not self.overflow:
            for value, count in values.value_counts(dropna=True).items():
                self.distinct[label_value(value)] += int(count)
            self.overflow = len(self.distinct) > DISTINCT_LIMIT

    def add_values(self, values: np.ndarray) -> None:
        """Fold finite numbers (or seconds) into the sum, the count and :attr:`exact`."""
        self.total += float(values.sum())
        self.count += len(values)
        with np.errstate(over="ignore"):  # beyond float32's range: inf, so not exact
            self.exact = self.exact and bool((values.astype(np.float32) == values).all())

    def offset(self) -> float:
        """The column's offset (:mod:`~pep_gp.pipeline.data.transforms`): 0 when float32 holds each value
        exactly (the store keeps them as the table wrote them), else their mean, so that float32 keeps
        their spread whatever their distance from zero."""
        return 0.0 if self.exact else self.total / self.count

    def distinct_count(self) -> str:
        return f"more than {DISTINCT_LIMIT:,}" if self.overflow else f"{len(self.distinct):,}"


def scan_table(chunks: Chunks, options: TableOptions, progress: Callable[[int], None] = lambda rows: None
               ) -> Transforms:
    """Learn the transformation of a table in one pass over ``chunks`` (two if a column parsed as
    numbers in some block turns out to be text).

    Raises:
        InputError: a missing value under ``--na fail``, a numeric column with a text value, a value
            that is not finite, a text column with too many distinct values, a column with every value
            missing under ``--na mean``, or a target with a single class or unsuited to ``--task``.
    """
    as_text = frozenset(options.categorical)
    while True:
        columns = _scan(chunks(as_text), options, as_text, progress)
        rescan = {name for name, column in columns.items() if column.text_lost and _is_text(name, column, options)}
        if not rescan:
            break
        as_text = as_text | rescan
    features = [feature for name in options.features for feature in _features(name, columns[name], options)]
    if isinstance(options.target, tuple):  # several targets: each a regression target
        labels, task = None, "regression"
        for name in options.target:
            _labels(columns[name], replace(options, target=name, task="regression"))
    else:
        labels, task = _labels(columns[options.target], options)
    return Transforms(features=tuple(features), labels=labels, na=options.na, id_columns=options.ids,
                      target=options.target, task=task)


def _scan(chunks: Iterator[TableChunk], options: TableOptions, as_text: frozenset[str],
          progress: Callable[[int], None]) -> dict[str, ColumnScan]:
    """One pass: every column's :class:`ColumnScan`.

    Raises:
        InputError: a missing value under ``--na fail``, or no row is left to train on.
    """
    targets = options.target_columns
    used = [*options.features, *targets]
    columns = {name: ColumnScan() for name in used}
    rows, kept, dropped = 0, 0, Counter()
    for chunk in chunks:
        missing = chunk.missing[used].to_numpy()
        if options.na == "fail" and missing.any():
            i, j = np.argwhere(missing)[0]
            raise InputError(f"{chunk.where(i)}, column {used[j]!r}: missing value (--na fail)")
        keep, chunk_dropped = rows_to_keep(chunk, used, options.na, len(targets))
        for name in used:
            _scan_column(chunk, name, keep, name in as_text, name in targets, columns[name])
        rows, kept = rows + len(chunk.frame), kept + int(keep.sum())
        dropped.update(chunk_dropped)
        progress(rows)
    if not kept:
        reasons = "; ".join(f"{count} for {reason}" for reason, count in dropped.items())
        raise InputError(f"{options.description}, target column{'s' * (len(targets) > 1)} "
                         f"{', '.join(map(repr, targets))}: no data rows"
                         + (f" ({sum(dropped.values())} dropped: {reasons})" if dropped else ""))
    return columns


def rows_to_keep(chunk: TableChunk, used: Sequence[str], na: str, n_targets: int = 1
                 ) -> tuple[np.ndarray, Counter]:
    """The rows of a chunk kept for training, and the rows dropped per reason: a row missing any value
    of ``used`` (features, then the ``n_targets`` target columns last), or under ``--na mean`` one missing a
    target."""
    missing = chunk.missing[list(used)].to_numpy()
    if na == "mean":
        missing = np.column_stack([np.zeros_like(missing[:, :-n_targets]), missing[:, -n_targets:]])
    return drop_missing(missing, used, [f"missing value in column '{c}'" for c in used])


def _scan_column(chunk: TableChunk, name: str, keep: np.ndarray, read_as_text: bool, is_target: bool,
                 column: ColumnScan) -> None:
    """Fold one block's values of a column into ``column`` (``keep``: the rows kept for training)."""
    series = chunk.frame[name]
    present = ~chunk.missing[name].to_numpy()
    kept = keep & present
    column.missing += int((~present).sum())
    if pd.api.types.is_numeric_dtype(series) and not read_as_text:
        numbers = series.to_numpy(dtype=np.float64, na_value=np.nan)
        is_number = present
        column.text_lost |= bool(present.any())
    else:
        if pd.api.types.is_datetime64_any_dtype(series):  # to_numeric would give nanoseconds
            numbers = np.full(len(series), np.nan)
        else:
            numbers = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        is_number = present & ~np.isnan(numbers)
        is_text = present & ~is_number
        if is_text.any() and column.first_text is None:
            i = int(np.argmax(is_text))
            column.first_text = (chunk.where(i), str(series.iloc[i]))
        column.texts += int(is_text.sum())
        if not is_target:
            column.add_distinct(text_values(series[kept]))
        if is_text.any() and not (is_target or read_as_text) and column.times == column.texts - int(is_text.sum()):
            seconds = epoch_seconds(series.where(is_text))
            is_time = is_text & ~np.isnan(seconds)
            column.times += int(is_time.sum())
            column.add_values(seconds[kept & is_time])
    if is_target:
        column.add_labels(series[kept])
    column.numbers += int(is_number.sum())
    not_finite = is_number & ~np.isfinite(numbers)
    if not_finite.any() and column.first_not_finite is None:
        i = int(np.argmax(not_finite))
        column.first_not_finite = (chunk.where(i), float(numbers[i]))
    finite = kept & is_number & np.isfinite(numbers)
    column.add_values(numbers[finite])


def _is_text(name: str, column: ColumnScan, options: TableOptions) -> bool:
    """Whether a feature column is one-hot encoded (or the target holds text labels)."""
    if name in options.target_columns:
        return column.texts > 0
    return name in options.categorical or (column.texts > column.numbers and not _is_time(column))


def _is_time(column: ColumnScan) -> bool:
    """Whether a feature column not named by ``--categorical`` is a time column: every present value
    a date and time."""
    return column.times > 0 and column.times == column.texts and column.numbers == 0


def _features(name: str, column: ColumnScan, options: TableOptions) -> list[Feature]:
    """The model feature(s) of a source column, after refusing what cannot be encoded."""
    mean = options.na == "mean"
    if mean and column.count + sum(column.distinct.values()) == 0:
        raise InputError(f"{options.description}, column {name!r}: every value is missing; "
                         f"leave it out with --drop {name}")
    average = column.total / max(column.count, 1)  # float64, before any cast to the store's float32
    if not np.isfinite(average):
        raise InputError(f"{options.description}, column {name!r}: values too large to average in float64 "
                         f"(their sum is {column.total}); rescale the column")
    if not _is_text(name, column, options) and _is_time(column):
        return [TimeFeature(column=name, fill=average if mean else None, offset=column.offset())]
    if not _is_text(name, column, options):
        if column.texts:
            where, value = column.first_text
            raise InputError(f"{where}, column {name!r}: expected a number, found {value!r} (the column's other "
                             f"values are numbers; pass --categorical {name} to one-hot encode it)")
        if column.first_not_finite is not None:
            where, value = column.first_not_finite
            raise InputError(f"{where}, column {name!r}: expected a finite number, found {value}")
        return [NumericFeature(column=name, fill=average if mean else None, offset=column.offset())]
    if column.overflow or len(column.distinct) > options.max_categories:
        raise InputError(f"{options.description}, column {name!r}: {column.distinct_count()} distinct text values, "
                         f"more than --max-categories {options.max_categories}; leave it out with --drop {name} "
                         "or raise --max-categories")
    present = sum(column.distinct.values())
    return [OneHotFeature(column=name, value=str(value), fill=count / present if mean else None)
            for value, count in sorted(column.distinct.items(), key=lambda item: str(item[0]))]


def _labels(column: ColumnScan, options: TableOptions) -> tuple[tuple | None, str]:
    """The class labels in sorted order (None for regression) and the task."""
    target, task = options.target, options.task
    where = f"{options.description}, column {target!r}"
    if column.texts and task == "regression":
        text_at, value = column.first_text
        raise InputError(f"{text_at}, column {target!r}: expected a number (--task regression), found {value!r}")
    if not column.texts and column.first_not_finite is not None:
        at, value = column.first_not_finite
        raise InputError(f"{at}, column {target!r}: expected a finite number, found {value}")
    numeric = {label_kind(v) for v in column.distinct} == {"number"}
    if task == "auto":
        fractional = numeric and any(isinstance(v, float) for v in column.distinct)
        task = "regression" if fractional or (numeric and column.overflow) else "classification"
        if task == "classification" and (column.overflow or len(column.distinct) > AUTO_CLASSES_MAX):
            hint = "--task regression for a numeric target, or " if numeric else ""
            raise InputError(f"{where}: {column.distinct_count()} distinct labels, more than {AUTO_CLASSES_MAX} "
                             f"for --task auto; pass {hint}--task classification to keep them all as classes"
                             + (COUNT_HINT if numeric else ""))
        unlike = _unlike_labels(column.distinct) if task == "classification" and numeric else None
        if unlike is not None:
            raise InputError(f"{where}: {unlike}: counts or class labels? pass --task regression for a numeric "
                             f"target, or --task classification to keep them all as classes{COUNT_HINT}")
    if task == "regression":
        return None, task
    if column.overflow:
        raise InputError(f"{where}: {column.distinct_count()} distinct labels; expected a class column")
    if len(column.distinct) < 2:
        found = ", ".join(f"{v!r}: {n:,} rows" for v, n in column.distinct.items()) or "no rows"
        raise InputError(f"{where}: expected at least 2 classes, found {len(column.distinct)} ({found})")
    return tuple(sorted(column.distinct, key=_sort_key)), task


COUNT_HINT = "; counts train with --set model.likelihood=poisson (or negative-binomial)"


def _unlike_labels(counts: Counter) -> str | None:
    """Why the integers of a target (value → rows) do not look like class labels, or None when they do: two
    values always do; three or more must be consecutive, each in at least :data:`MIN_LABEL_ROWS` rows."""
    if len(counts) <= 2:
        return None
    low, high = min(counts), max(counts)
    absent = high - low + 1 - len(counts)
    if absent:
        return f"{len(counts)} distinct integers from {low} to {high}, {absent} of the values between them absent"
    rare, rows = min(counts.items(), key=lambda item: (item[1], item[0]))
    if rows < MIN_LABEL_ROWS:
        return f"{len(counts)} distinct integers, {rare} in only {rows} row{'s' if rows > 1 else ''}"
    return None


def _sort_key(value) -> tuple:
    """Labels in sorted order: numbers by value, text by its characters (booleans False first)."""
    return (0, float(value), "") if label_kind(value) != "text" else (1, 0.0, value)
