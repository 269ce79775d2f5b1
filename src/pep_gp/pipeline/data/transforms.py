"""How a user's table becomes model features and class indices, recorded at ingest and applied again to
new rows by ``pep predict`` and by a run loaded as an estimator.

``pep ingest`` learns the transformation of a CSV, Parquet or ``.npz`` table in one pass over its rows
(:mod:`pep_gp.pipeline.data.table_scan`) and stores it as the store's JSON attribute ``transforms``;
training copies it into every checkpoint manifest, so a run directory alone can turn a new table into
the rows its model was trained on. The record (:class:`Transforms`, validated with pydantic when read):

* ``features``: the model's feature columns in order. A numeric feature is a source column, its values
  as numbers; a time feature is a column of dates and times (ISO 8601 text, or a Parquet timestamp),
  its values as seconds since 1970-01-01T00:00:00 UTC (``unit: "s"``; a time without a zone is read as
  UTC); a one-hot feature is ``1.0`` where a text column holds one value, else ``0.0``. Each has the
  ``fill`` used for a missing value under ``--na mean``: the column's mean over the rows ingested (both
  splits; for a one-hot column, the value's frequency), None under ``--na drop``/``fail``.
* ``offset`` of a numeric or time feature: subtracted from its values in float64, before the store casts
  them to float32. It is the column's mean over the rows ingested (as ``fill``), so that float32 keeps
  the column's spread: ``1e12 + N(0, 1)`` would otherwise be stored as one value, and Unix times in
  seconds to 128 s. The model never sees the offset (training standardises each feature with the
  training split's mean and deviation, ``x_mean``/``x_std``, which the offset only shifts), but every
  new row is centred by the same offset (:meth:`Transforms.apply`), and rows of another store are moved
  to this record's offsets (:meth:`Transforms.shift_from`). A record without offsets (written before
  pep stored them) reads with offset 0, which is what its store holds: the table's values as float32.
* ``labels``: class index → the user's label value (JSON-typed as read: strings, integers, floats or
  booleans), for classification; None for regression.
* ``na``: the missing-value policy; ``id_columns``; ``target``; ``task``.

Stores of the other sources (MNIST, airline, scikit-learn sets) hold no record: their rows are model
features as stored, which :meth:`Transforms.identity` describes.

New rows: a column is matched by name; a value of a text column never seen at ingest gives that row
all-zero one-hot columns for the column (counted, so that ``pep predict`` can warn), a missing value
is replaced by the fill under ``--na mean`` and refused otherwise, then the offsets are subtracted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pandas as pd
from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      ValidationError, model_validator)

from ..errors import InputError, did_you_mean
from .frames import TableChunk, numeric_matrix

TRANSFORMS_VERSION = 1
TASKS = ("classification", "regression")

LabelValue = StrictBool | StrictInt | StrictFloat | StrictStr
"""A class label as the user wrote it, typed as JSON reads it."""


FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]


class NumericFeature(BaseModel):
    """A source column whose values are numbers (booleans read as 0 and 1), less ``offset``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["numeric"] = "numeric"
    column: str
    fill: FiniteFloat | None = None
    offset: FiniteFloat = 0.0

    @property
    def name(self) -> str:
        return self.column


class TimeFeature(BaseModel):
    """A source column of dates and times, as seconds since 1970-01-01T00:00:00 UTC less ``offset``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["time"] = "time"
    column: str
    unit: Literal["s"] = "s"
    fill: FiniteFloat | None = None
    offset: FiniteFloat

    @property
    def name(self) -> str:
        return self.column


class OneHotFeature(BaseModel):
    """``1.0`` where the text column ``column`` holds ``value``, else ``0.0``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["one_hot"] = "one_hot"
    column: str
    value: str
    fill: FiniteFloat | None = None
    offset: ClassVar[float] = 0.0  # indicators are exact in float32

    @property
    def name(self) -> str:
        return f"{self.column}={self.value}"


Feature = Annotated[NumericFeature | TimeFeature | OneHotFeature, Field(discriminator="kind")]


class Transforms(BaseModel):
    """The transformation of a table into a store's rows (see the module docstring).

    Attributes:
        version: format version of this record (:data:`TRANSFORMS_VERSION`).
        features: the model's feature columns, in order.
        labels: class index → the user's label value (classification); None for regression.
        na: ``drop``, ``fail`` or ``mean`` (``pep ingest --na``).
        id_columns: columns passed through to predictions.
        target: the target column, or a tuple of ``P ≥ 2`` regression target columns (``y`` ``(rows, P)``).
        task: ``classification`` or ``regression``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = TRANSFORMS_VERSION
    features: tuple[Feature, ...] = Field(min_length=1)
    labels: tuple[LabelValue, ...] | None
    na: Literal["drop", "fail", "mean"]
    id_columns: tuple[str, ...] = ()
    target: str | tuple[str, ...]
    task: Literal["classification", "regression"]

    @model_validator(mode="after")
    def _consistent(self) -> "Transforms":
        names = [feature.name for feature in self.features]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"features: repeated {repeated}")
        if (self.labels is None) != (self.task == "regression"):
            raise ValueError("labels: expected a list for classification and null for regression")
        if self.labels is not None:
            kinds = {label_kind(label) for label in self.labels}
            if len(self.labels) < 2 or len(kinds) > 1 or len(set(self.labels)) < len(self.labels):
                raise ValueError(f"labels: expected at least 2 distinct values of one type, found {list(self.labels)}")
        fills = {feature.fill is not None for feature in self.features}
        if fills != {self.na == "mean"}:
            raise ValueError(f"features: fill values are given exactly when na is 'mean' (na is {self.na!r})")
        if isinstance(self.target, tuple) and (self.task != "regression" or len(self.target) < 2
                                               or len(set(self.target)) < len(self.target)):
            raise ValueError(f"target: expected one column, or at least 2 distinct regression target columns, "
                             f"found {list(self.target)} for {self.task}")
        overlap = set(self.id_columns) & ({feature.column for feature in self.features} | set(self.target_columns))
        if overlap:
            raise ValueError(f"id_columns: {sorted(overlap)} are also feature or target columns")
        return self

    # ---------------------------------------------------------------------------------------------
    @classmethod
    def identity(cls, feature_names: Sequence[str], task: str, n_classes: int | None,
                 target: str = "target") -> "Transforms":
        """The record of a store whose rows are model features as stored: numeric columns named
        ``feature_names`` and labels ``0..C-1`` (MNIST, airline, scikit-learn sets, in-memory arrays)."""
        return cls(features=tuple(NumericFeature(column=str(name)) for name in feature_names),
                   labels=None if task == "regression" else tuple(range(n_classes)), na="drop",
                   target=target, task=task)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The model's feature names: a numeric column's name, ``column=value`` for a one-hot one."""
        return tuple(feature.name for feature in self.features)

    @property
    def target_columns(self) -> tuple[str, ...]:
        """The target column, or the ``P`` target columns in ``y``'s order."""
        return self.target if isinstance(self.target, tuple) else (self.target,)

    @property
    def input_columns(self) -> tuple[str, ...]:
        """The source columns the features are made of, in order of first use."""
        return tuple(dict.fromkeys(feature.column for feature in self.features))

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The source columns read as text (one-hot encoded)."""
        return tuple(dict.fromkeys(f.column for f in self.features if isinstance(f, OneHotFeature)))

    @property
    def n_classes(self) -> int | None:
        return None if self.labels is None else len(self.labels)

    @property
    def offsets(self) -> np.ndarray:
        """``(D,)`` float64: each feature's offset (0 for a one-hot feature)."""
        return np.array([feature.offset for feature in self.features], dtype=np.float64)

    @property
    def is_identity(self) -> bool:
        """Whether the model's features are the table's numeric columns as read (no one-hot or time
        feature, every offset 0), so that an array of those columns is model rows as they are."""
        return all(isinstance(f, NumericFeature) and f.offset == 0 for f in self.features)

    def shift_from(self, other: "Transforms") -> np.ndarray:
        """``(D,)`` float64 to add to rows made by ``other`` (a store's record of the same features), read in
        this record's feature order, to make them as this record makes them: ``other``'s offset of each
        feature, matched by name, less this record's.

        Raises:
            InputError: ``other`` lacks one of this record's features.
        """
        theirs = dict(zip(other.feature_names, other.offsets))
        missing = [name for name in self.feature_names if name not in theirs]
        if missing:
            raise InputError(f"rows of features {list(other.feature_names)}; missing {missing} of "
                             f"{list(self.feature_names)}")
        return np.array([theirs[name] for name in self.feature_names], dtype=np.float64) - self.offsets

    def for_new_rows(self, na: str | None, means: np.ndarray) -> "Transforms":
        """This record with the missing-value policy ``na`` for rows to predict (``pep predict --na``): None
        keeps the ingest's, ``fail`` and ``drop`` give no fills (a missing value is refused by
        :meth:`apply`; ``drop`` rows are removed before it, :meth:`complete`), ``mean`` fills a missing
        value with the ingest's fill or, for data ingested without one, the training split's mean of
        the feature (``means``, ``(D,)``: the manifest's ``x_mean``, of the stored values less their
        offsets; a one-hot feature's is its value's frequency).

        Raises:
            InputError: ``na`` is not one of ``drop``, ``fail``, ``mean``.
        """
        if na is None:
            return self
        if na not in ("drop", "fail", "mean"):
            raise InputError(f"--na: expected one of drop, fail, mean, found {na!r}")
        fills = [(f.fill if f.fill is not None else float(m) + f.offset) if na == "mean" else None
                 for f, m in zip(self.features, np.asarray(means, dtype=np.float64), strict=True)]
        return Transforms(**{**self.model_dump(), "na": na,
                             "features": [{**f.model_dump(), "fill": fill} for f, fill in zip(self.features, fills)]})

    def complete(self, chunk: TableChunk) -> np.ndarray:
        """``(n,)`` bool: the chunk's rows with a value in every :attr:`input_columns` column."""
        return ~chunk.missing[list(self.input_columns)].to_numpy().any(axis=1)

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object stored in a store's and a manifest's ``transforms``."""
        return self.model_dump(mode="json")

    # ---------------------------------------------------------------------------------------------
    def apply(self, chunk: TableChunk, unseen: dict[str, Counter] | None = None) -> np.ndarray:
        """The model features of a chunk of a table: ``(n, D)`` float64, columns as :attr:`features`, less
        their :attr:`offsets`.

        Args:
            chunk: rows holding (at least) the :attr:`input_columns`.
            unseen: if given, counts of text values never seen at ingest are added to it, per column
                (those rows get all-zero one-hot columns for that column).

        Raises:
            InputError: a column is absent, a numeric column holds text or a value that is not finite, a
                time column a value that is not a date and time, or a value is missing and :attr:`na` is
                not ``mean``; names the file, row and column.
        """
        out = np.empty((len(chunk.frame), len(self.features)))
        for column in self.input_columns:
            if column not in chunk.frame.columns:
                raise InputError(f"{chunk.origin}: no column {column!r} (a feature of the model)"
                                 f"{did_you_mean(column, chunk.frame.columns)}")
        if self.na != "mean":
            self._refuse_missing(chunk)
        for column, positions in self._positions().items():
            missing = chunk.missing[column].to_numpy()
            features = [self.features[j] for j in positions]
            if isinstance(features[0], NumericFeature):
                out[:, positions[0]] = finite_numbers(chunk, column)
            elif isinstance(features[0], TimeFeature):
                out[:, positions[0]] = time_seconds(chunk, column)
            else:
                out[:, positions] = _one_hot(chunk, column, [f.value for f in features], missing, unseen)
            if missing.any():
                out[np.ix_(missing, positions)] = [f.fill for f in features]
        return out - self.offsets

    def _refuse_missing(self, chunk: TableChunk) -> None:
        """InputError naming the first row of ``chunk`` (in the file's order) missing a value of an input
        column, and its first such column."""
        missing = chunk.missing[list(self.input_columns)].to_numpy()
        if missing.any():
            i, j = np.argwhere(missing)[0]
            raise InputError(f"{chunk.where(i)}, column {self.input_columns[j]!r}: missing value (--na {self.na}; "
                             "fill it in, or pass --na mean (the training mean) or --na drop to pep predict)")

    def decode_labels(self, indices: np.ndarray) -> np.ndarray:
        """The user's label values of class indices ``0..C-1`` (strings, integers, floats or booleans)."""
        if self.labels is None:
            raise ValueError("decode_labels: a regression record has no labels")
        return np.asarray(self.labels)[np.asarray(indices, dtype=np.int64)]

    def encode_labels(self, chunk: TableChunk) -> np.ndarray:
        """Class indices (float64, as a block's ``y``) of the target column's values; a regression
        target's values as numbers (``(rows, P)`` for ``P`` target columns).

        Raises:
            InputError: a value is not one of :attr:`labels` (or, for regression, not a finite number).
        """
        if isinstance(self.target, tuple):
            return np.column_stack([finite_numbers(chunk, column) for column in self.target])
        if self.labels is None:
            return finite_numbers(chunk, self.target)
        index = {label: k for k, label in enumerate(self.labels)}
        values = [label_value(v) for v in chunk.frame[self.target]]
        codes = np.array([index.get(v, -1) for v in values], dtype=np.float64)
        if (codes < 0).any():
            i = int(np.argmax(codes < 0))
            raise InputError(f"{chunk.where(i)}, column {self.target!r}: expected one of the labels "
                             f"{list(self.labels)}, found {values[i]!r}")
        return codes

    def _positions(self) -> dict[str, list[int]]:
        positions: dict[str, list[int]] = {}
        for j, feature in enumerate(self.features):
            positions.setdefault(feature.column, []).append(j)
        return positions


def transforms_of(data: Any) -> Transforms:
    """The transformation of a store's rows (or of in-memory data's): its ``transforms`` attribute, or
    for a source whose rows are model features as read the identity over its ``feature_names``.

    Raises:
        InputError: the attribute is not a valid record.
    """
    stored = data.attrs.get("transforms")
    if stored is not None:
        return read_transforms(stored, str(data.path))
    return Transforms.identity(data.feature_names, data.task, data.n_classes, data.attrs.get("target_name", "target"))


def read_transforms(value: Mapping[str, Any], where: str) -> Transforms:
    """A stored ``transforms`` record, validated.

    Raises:
        InputError: not a valid record of this version; names ``where`` (a store or a manifest).
    """
    try:
        return Transforms.model_validate(value)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'transforms'}: {e['msg']}" for e in error.errors())
        raise InputError(f"{where}: attribute 'transforms' is not a valid version-{TRANSFORMS_VERSION} "
                         f"record ({problems})") from None


def label_kind(value: Any) -> str:
    """``"bool"``, ``"number"`` or ``"text"``: labels of one record are all of one kind."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    return "number" if isinstance(value, (int, float, np.integer, np.floating)) else "text"


def label_value(value: Any) -> Any:
    """A label as JSON types it: booleans, integers (also for integral floats such as ``1.0``, which a
    CSV column with a missing value is parsed as), other floats, or text."""
    kind = label_kind(value)
    if kind == "bool":
        return bool(value)
    if kind == "number":
        number = float(value)
        return int(number) if number.is_integer() else number
    return str(value)


def finite_numbers(chunk: TableChunk, column: str) -> np.ndarray:
    """The column's values as float64 (NaN where missing).

    Raises:
        InputError: a present value is not a number, or not finite; names the row and the value.
    """
    values = numeric_matrix(chunk.frame, [column], chunk.origin, chunk.rows, chunk.row_label)[:, 0]
    bad = ~np.isfinite(values) & ~chunk.missing[column].to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{chunk.where(i)}, column {column!r}: expected a finite number, found {values[i]}")
    return values


def epoch_seconds(series: pd.Series) -> np.ndarray:
    """Dates and times as float64 seconds since 1970-01-01T00:00:00 UTC; NaN where a value is missing or
    not an ISO 8601 date and time. A value without a zone is taken as UTC, one with a zone converted."""
    times = pd.to_datetime(series, errors="coerce", utc=True, format="ISO8601")
    seconds = (times - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    return seconds.to_numpy(dtype=np.float64, na_value=np.nan)


def time_seconds(chunk: TableChunk, column: str) -> np.ndarray:
    """A time column's values as :func:`epoch_seconds` (NaN where missing).

    Raises:
        InputError: a present value is not a date and time; names the row and the value.
    """
    seconds = epoch_seconds(chunk.frame[column])
    bad = np.isnan(seconds) & ~chunk.missing[column].to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{chunk.where(i)}, column {column!r}: expected a date and time (ISO 8601, such as "
                         f"2024-05-01T12:30:00Z), found {chunk.frame[column].iloc[i]!r}")
    return seconds


def text_values(series: pd.Series) -> np.ndarray:
    """A column's values as text (object array of ``str``), as one-hot encoding compares them."""
    return np.array([str(v) for v in series], dtype=object)


def _one_hot(chunk: TableChunk, column: str, values: list[str], missing: np.ndarray,
             unseen: dict[str, Counter] | None) -> np.ndarray:
    """``(n, len(values))`` indicators of a text column's values; a value not in ``values`` gives a
    row of zeros (counted in ``unseen``)."""
    text = text_values(chunk.frame[column])
    codes = pd.Index(values).get_indexer(text)
    out = np.zeros((len(text), len(values)))
    known = codes >= 0
    out[np.flatnonzero(known), codes[known]] = 1.0
    if unseen is not None:
        new = ~known & ~missing
        if new.any():
            unseen.setdefault(column, Counter()).update(text[new].tolist())
    return out
