"""Users' own tables: CSV and Parquet files with a named target column (or several regression target columns,
``--target a --target b``), and ``.npz`` files with ``X``/``y`` (``y`` ``(N, P)``: ``P`` regression targets).

A table is read twice, a block at a time: once to learn its transformation
(:func:`~pep_gp.pipeline.data.table_scan.scan_table`: numeric and text columns, categories, labels, fill
values) and once to transform its rows (:meth:`~pep_gp.pipeline.data.transforms.Transforms.apply`). The
feature columns are every column but the target and the ``--id`` columns, or those of ``--features``,
less those of ``--drop``. A missing value (an empty CSV cell or one of pandas' NA markers such as
``NA``; a Parquet null) drops its row, counted per column, under ``--na drop``; a value that is present
but not finite (``inf``, or NaN in a Parquet or ``.npz`` array) is an error. The task (classification
or regression) is given with ``--task`` or decided from the target values.

The readers of this module (:func:`csv_chunks`, :func:`parquet_chunks`) also read ``pep predict``'s input.
"""

from __future__ import annotations

import math
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import InputError, did_you_mean
from ..frames import TableChunk
from ..table_scan import TableOptions, rows_to_keep, scan_table
from ..transforms import Transforms, label_kind, label_value
from .base import (
    BLOCK_ROWS,
    RowBlock,
    Source,
    check_header,
    SourceRequest,
    csv_blocks,
    csv_columns,
    reading,
    require_file,
)

SEPARATORS = (",", ";", "\t", "|")  # looked for in a header read as a single column


def open_csv(request: SourceRequest) -> Source:
    """CSV files (same header; any compression pandas infers) with the target column ``--target``."""
    paths = _inputs(request, "csv")
    target = _target(request, "csv")
    sep = request.sep or ","
    header = csv_header(paths[0], sep)
    for path in paths[1:]:
        if csv_header(path, sep) != header:
            raise InputError(f"{path}: header differs from {paths[0]}'s; expected columns {header}")

    def chunks(text_columns: frozenset[str], columns: Sequence[str]) -> Iterator[TableChunk]:
        return csv_chunks(paths, columns, text_columns, sep)

    return _table_source("csv", paths, header, request, target, chunks)


def open_parquet(request: SourceRequest) -> Source:
    """Parquet files (same schema) with the target column ``--target``; read by row batches."""
    paths = _inputs(request, "parquet")
    target = _target(request, "parquet")
    request.refuse("parquet", sep=True)
    header = parquet_header(paths[0])
    for path in paths[1:]:
        if parquet_header(path) != header:
            raise InputError(f"{path}: columns differ from {paths[0]}'s; expected {header}")

    def chunks(text_columns: frozenset[str], columns: Sequence[str]) -> Iterator[TableChunk]:
        return parquet_chunks(paths, columns, text_columns)

    return _table_source("parquet", paths, header, request, target, chunks)


def open_npz(request: SourceRequest) -> Source:
    """``.npz`` files holding ``X`` (N, D) numbers and ``y`` (N,) labels or targets (numbers, booleans or
    text), or ``y`` (N, P) numbers, ``P ≥ 2`` regression targets named ``y0``, ``y1``, …, streamed from the
    archive block by block; the features are named ``x0``, ``x1``, …"""
    paths = _inputs(request, "npz")
    request.refuse("npz", target=True, ids=True, sep=True)
    shapes = [_npz_shapes(path) for path in paths]
    n_features, n_targets = shapes[0][1:]
    for path, (_, d, p) in zip(paths[1:], shapes[1:]):
        if (d, p) != (n_features, n_targets):
            raise InputError(f"{path}: arrays 'X', 'y': expected {n_features} features and {n_targets} target(s) "
                             f"like {paths[0]}, found {d} and {p}")
    targets = ("y",) if n_targets == 1 else tuple(f"y{p}" for p in range(n_targets))
    header = [*(f"x{j}" for j in range(n_features)), *targets]

    def chunks(text_columns: frozenset[str], columns: Sequence[str]) -> Iterator[TableChunk]:
        for path, (n_rows, _, _) in zip(paths, shapes):
            with (reading(path), zipfile.ZipFile(path) as archive,
                  archive.open("X.npy") as X_file, archive.open("y.npy") as y_file):
                X_dtype, y_dtype = _npy_header(path, X_file, "X")[1], _npy_header(path, y_file, "y", "biufU")[1]
                for start in range(0, n_rows, BLOCK_ROWS):
                    stop = min(start + BLOCK_ROWS, n_rows)
                    frame = pd.DataFrame(_read_rows(path, "X", X_file, X_dtype, (stop - start, n_features)),
                                         columns=header[:n_features])
                    if n_targets == 1:
                        frame["y"] = _read_rows(path, "y", y_file, y_dtype, (stop - start,))
                    else:
                        frame[list(targets)] = _read_rows(path, "y", y_file, y_dtype, (stop - start, n_targets))
                    frame = frame[list(columns)]
                    yield TableChunk(frame, pd.DataFrame(False, index=frame.index, columns=frame.columns),
                                     str(path), np.arange(start, stop))

    return _table_source("npz", paths, header, request, targets[0] if n_targets == 1 else targets, chunks,
                         description=f"npz {', '.join(map(str, paths))} (X, y)")


# --------------------------------------------------------------------------------------------------
def csv_header(path: Path, sep: str) -> list[str]:
    """The columns of a CSV file's header.

    Raises:
        InputError: unreadable, or read as a single column whose name holds another separator (the
            wrong ``--sep``).
    """
    header = [str(column) for column in csv_columns(path, sep=sep)]
    if len(header) == 1:
        for other in SEPARATORS:
            if other != sep and other in header[0]:
                raise InputError(f"{path}: read as a single column {header[0]!r} with --sep {sep!r}; the "
                                 f"header holds {other!r}: pass --sep {other!r}")
    return header


def csv_chunks(paths: Sequence[Path], columns: Sequence[str], text_columns: frozenset[str], sep: str
               ) -> Iterator[TableChunk]:
    """Blocks of CSV rows: ``columns`` of them, ``text_columns`` as text, others as pandas parses them.
    Every field is parsed, so a row with too many fields is an error (not silently cut)."""
    text = {column: str for column in text_columns if column in columns}
    for path in paths:
        for frame, lines in csv_blocks(path, sep=sep, dtype=text):
            frame = frame[list(columns)]
            yield TableChunk(frame, frame.isna(), str(path), lines, "line")


def parquet_header(path: Path) -> list[str]:
    """The columns of a Parquet file (checked: :func:`~pep_gp.pipeline.data.sources.base.check_header`)."""
    names = list(_parquet_file(path).schema_arrow.names)
    check_header(path, names)
    return names


def parquet_chunks(paths: Sequence[Path], columns: Sequence[str], text_columns: frozenset[str],
                   typed_columns: frozenset[str] = frozenset()) -> Iterator[TableChunk]:
    """Row batches of Parquet files: ``columns`` only, ``text_columns`` cast to text, ``typed_columns`` (a
    run's ids, written back by ``pep predict``) in their own Parquet type, nulls included (pandas'
    ``ArrowDtype``: integers stay integers); a null is missing.

    Raises:
        InputError: one of ``columns`` is nested (a struct, list or map), which has no value per row.
    """
    for path in paths:
        start = 0
        schema = _parquet_file(path).schema_arrow
        for name in columns:
            kind = schema.field(name).type
            if pa.types.is_nested(kind):
                raise InputError(f"{path}: column {name!r} is nested ({kind}); pep reads columns of numbers, text, "
                                 f"booleans or times: leave it out with --drop {name}")
        with reading(path):
            for batch in _parquet_file(path).iter_batches(batch_size=BLOCK_ROWS, columns=list(columns)):
                arrays = [batch.column(c) for c in columns]
                missing = pd.DataFrame({c: a.is_null().to_numpy(zero_copy_only=False) for c, a in zip(columns, arrays)})
                arrays = [pc.cast(a, pa.string()) if c in text_columns else a for c, a in zip(columns, arrays)]
                frame = pa.RecordBatch.from_arrays(arrays, names=list(columns)).to_pandas()
                for name in typed_columns:
                    frame[name] = batch.column(name).to_pandas(types_mapper=pd.ArrowDtype)
                yield TableChunk(frame, missing, str(path), np.arange(start, start + batch.num_rows))
                start += batch.num_rows


def check_columns(path: Path, header: Sequence[str], named: dict[str, Sequence[str]]) -> None:
    """Raise InputError for the first named column the header lacks, with the closest header name.

    Args:
        path: the file, for the message.
        header: its columns.
        named: what names them (``the --target column``, ``a feature of the run``, …) → the columns.
    """
    for role, names in named.items():
        for name in names:
            if name not in header:
                raise InputError(f"{path}: no column {name!r} ({role}); columns are "
                                 f"{', '.join(map(str, header))}{did_you_mean(name, header)}")


# --------------------------------------------------------------------------------------------------
TableReader = Callable[[frozenset[str], Sequence[str]], Iterator[TableChunk]]
"""``chunks(text_columns, columns)``: a fresh pass over a table's ``columns``, some read as text."""


def _table_source(name: str, paths: Sequence[Path], header: Sequence[str], request: SourceRequest,
                  target: str | tuple[str, ...], chunks: TableReader, description: str | None = None) -> Source:
    """The :class:`Source` of a table: its columns checked, its transformation learnt by ``fit``."""
    features = _feature_columns(paths[0], header, request, target)
    options = TableOptions(", ".join(map(str, paths)), features, target, request.task, request.na, request.ids,
                           frozenset(request.categorical), request.max_categories)
    targets = options.target_columns
    if len(targets) > 1 and request.task == "classification":
        raise InputError(f"--task classification: the {len(targets)} target columns "
                         f"({', '.join(map(repr, targets))}) are regression targets; a classification takes one")
    quoted = ", ".join(f"'{column}'" for column in targets)
    description = description or (f"{name} {', '.join(map(str, paths))}, target column{'s' * (len(targets) > 1)} "
                                  f"{quoted}")
    used = [*features, *targets]

    def fit(progress: Callable[[int], None] = lambda rows: None, transforms: Transforms | None = None) -> Source:
        """Learn the table's transformation, or with ``transforms`` (an append: the store's) apply that one,
        refusing values it has never seen (:func:`_transformed`)."""
        strict = transforms is not None
        if strict:
            check_columns(paths[0], header, {"a column of the store": [*transforms.input_columns,
                                                                       *transforms.target_columns]})
        else:
            transforms = scan_table(lambda text: chunks(text, used), options, progress)
        columns = [*transforms.input_columns, *transforms.target_columns]
        text = frozenset(transforms.text_columns) | ({transforms.target} if text_labels(transforms) else frozenset())
        return Source(name, description, transforms.feature_names, transforms.target, transforms.task,
                      transforms.n_classes, "0.2", lambda: _transformed(chunks(text, columns), transforms, strict),
                      transforms=transforms)

    return Source(name, description, tuple(features), target, None if request.task == "auto" else request.task,
                  None, "0.2", lambda: fit().read(), fit=fit)


def _transformed(chunks: Iterator[TableChunk], transforms: Transforms, strict: bool = False) -> Iterator[RowBlock]:
    """The row blocks of a table's chunks: rows with a missing value dropped (under ``--na mean`` only
    those with a missing target), then features and labels transformed.

    With ``strict`` (rows appended to a store, whose features and classes are fixed), a text value or a
    class label the transformation has never seen is refused, naming every such value of the block.
    """
    used = [*transforms.input_columns, *transforms.target_columns]
    for chunk in chunks:
        keep, dropped = rows_to_keep(chunk, used, transforms.na, len(transforms.target_columns))
        kept = chunk.subset(keep)
        unseen: dict[str, Counter] | None = {} if strict else None
        X = transforms.apply(kept, unseen)
        if strict:
            _refuse_unseen(kept, transforms, unseen)
        yield RowBlock(X, transforms.encode_labels(kept), chunk.origin, kept.rows, chunk.row_label, None, dropped)


def _refuse_unseen(chunk: TableChunk, transforms: Transforms, unseen: dict[str, Counter]) -> None:
    """InputError naming the categories and class labels of ``chunk`` that ``transforms`` lacks."""
    for column, counts in unseen.items():
        if counts:
            known = [f.value for f in transforms.features if f.column == column]
            values = ", ".join(f"{value!r} ({count} row{'s' * (count > 1)})" for value, count in sorted(counts.items()))
            raise InputError(f"{chunk.origin}, column {column!r}: new categor{'ies' if len(counts) > 1 else 'y'} "
                             f"{values}, not among the store's {known}; an append keeps the store's features "
                             "(ingest every row into a new store to add a category)")
    if transforms.labels is not None:
        labels = set(transforms.labels)
        new = Counter(v for v in map(label_value, chunk.frame[transforms.target]) if v not in labels)
        if new:
            values = ", ".join(f"{value!r} ({count} row{'s' * (count > 1)})"
                               for value, count in sorted(new.items(), key=lambda item: str(item[0])))
            raise InputError(f"{chunk.origin}, column {transforms.target!r}: new class label"
                             f"{'s' * (len(new) > 1)} {values}, not among the store's {list(transforms.labels)}; "
                             "an append keeps the store's classes (ingest every row into a new store to add a class)")


def text_labels(transforms: Transforms) -> bool:
    """Whether the class labels are text (the target column is then read as text)."""
    return transforms.labels is not None and label_kind(transforms.labels[0]) == "text"


def _feature_columns(path: Path, header: Sequence[str], request: SourceRequest, target: str | tuple[str, ...]
                     ) -> tuple[str, ...]:
    """The feature columns: ``--features`` (default: all but the target and ids) less ``--drop``.

    Raises:
        InputError: a named column is not in the header, the target or an id is a feature, a
            ``--categorical`` column is not a feature, or no feature is left.
    """
    targets = target if isinstance(target, tuple) else (target,)
    check_columns(path, header, {f"the {option} column": names for option, names in (
        ("--target", targets), ("--id", request.ids), ("--features", request.features), ("--drop", request.drop),
        ("--categorical", request.categorical))})
    for option, names in (("--id", request.ids), ("--features", request.features)):
        repeated = [name for name, count in Counter(names).items() if count > 1]
        if repeated:
            raise InputError(f"{option}: {repeated[0]!r} given twice; name each column once")
        for name in set(targets) & set(names):
            raise InputError(f"{option}: {name!r} is {'the' if len(targets) == 1 else 'a'} --target column")
    both = set(request.ids) & set(request.features)
    if both:
        raise InputError(f"--features: {sorted(both)[0]!r} is an --id column")
    chosen = request.features or [c for c in header if c not in targets and c not in request.ids]
    features = tuple(str(c) for c in chosen if c not in request.drop)
    for name in request.categorical:
        if name not in features:
            raise InputError(f"--categorical: {name!r} is not a feature column; features are {', '.join(features)}")
    if not features:
        raise InputError(f"{path}: expected feature columns besides {', '.join(map(repr, targets))}, found none")
    return features


def _inputs(request: SourceRequest, source: str) -> tuple[Path, ...]:
    """The ``--input`` files, checked to exist; at least one is required."""
    if not request.inputs:
        raise InputError(f"--input: source '{source}' needs at least one input file")
    return tuple(require_file(path) for path in request.inputs)


def _target(request: SourceRequest, source: str) -> str | tuple[str, ...]:
    """The ``--target`` column name (required for tables), or the ``P ≥ 2`` regression target columns of
    ``--target a --target b``.

    Raises:
        InputError: no ``--target``, or a column named twice.
    """
    if not request.target:
        raise InputError(f"--target: source '{source}' needs the name of the target column")
    if isinstance(request.target, tuple):
        repeated = [name for name, count in Counter(request.target).items() if count > 1]
        if repeated:
            raise InputError(f"--target: {repeated[0]!r} given twice; name each target column once")
    return request.target


def _parquet_file(path: Path) -> pq.ParquetFile:
    """Open a Parquet file; raise InputError naming it if it is not one."""
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc


def _npz_shapes(path: Path) -> tuple[int, int, int]:
    """Check an ``.npz`` file's ``X`` and ``y`` headers; return ``(rows, features, targets)``."""
    with reading(path):
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as exc:
            raise InputError(f"{path}: not an .npz archive ({exc})") from exc
        with archive:
            members = [name.removesuffix(".npy") for name in archive.namelist()]
            for name in ("X", "y"):
                if name not in members:
                    raise InputError(f"{path}: no array '{name}' (expected 'X' (N, D) and 'y' (N,)); "
                                     f"found {', '.join(members) or 'nothing'}")
            with archive.open("X.npy") as X_file, archive.open("y.npy") as y_file:
                X_shape, X_dtype = _npy_header(path, X_file, "X")
                y_shape, y_dtype = _npy_header(path, y_file, "y", "biufU")
            for name, shape, dtype in (("X", X_shape, X_dtype), ("y", y_shape, y_dtype)):
                _check_claimed_size(path, archive.getinfo(f"{name}.npy"), name, shape, dtype)
    several = len(y_shape) == 2 and y_shape[1] >= 2 and y_dtype.kind in "biuf"
    if len(X_shape) != 2 or not (len(y_shape) == 1 or several):
        raise InputError(f"{path}: expected 'X' of shape (N, D) and 'y' of shape (N,), or (N, P) numbers for P ≥ 2 "
                         f"regression targets; found {X_shape} and {y_shape} ({y_dtype})")
    if X_shape[0] != y_shape[0]:
        raise InputError(f"{path}: 'X' has {X_shape[0]} rows but 'y' has {y_shape[0]}")
    return X_shape[0], X_shape[1], y_shape[1] if several else 1


DEFLATE_MAX_RATIO = 1032  # the most DEFLATE can expand (RFC 1951: a 258-byte match per 2 bits, roughly)


def _check_claimed_size(path: Path, member: zipfile.ZipInfo, name: str, shape: tuple[int, ...],
                        dtype: np.dtype) -> None:
    """InputError unless the bytes a ``.npy`` header claims fit its archive member, whose size is itself
    bounded by the file's: a header is never trusted to size an allocation."""
    claimed = math.prod(shape) * dtype.itemsize
    holds = min(member.file_size, DEFLATE_MAX_RATIO * min(member.compress_size, path.stat().st_size))
    if claimed > holds:
        raise InputError(f"{path}: array '{name}': its header claims shape {tuple(shape)} ({claimed:,} bytes), "
                         f"more than the archive holds ({holds:,} bytes at most); the file is damaged")


def _npy_header(path: Path, handle: IO[bytes], name: str, kinds: str = "biuf"
                ) -> tuple[tuple[int, ...], np.dtype]:
    """Read a ``.npy`` header from an open archive member; return its shape and dtype (of ``kinds``:
    numbers for ``X``; also booleans and text for ``y``, never Python objects)."""
    try:
        version = np.lib.format.read_magic(handle)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran_order, dtype = read_header(handle)
    except ValueError as exc:
        raise InputError(f"{path}: array '{name}' is not a valid .npy array ({exc})") from exc
    if dtype.kind not in kinds:
        expected = "numbers" if kinds == "biuf" else "numbers, booleans or text"
        raise InputError(f"{path}: array '{name}': expected {expected}, found dtype {dtype}")
    if fortran_order and len(shape) > 1:
        raise InputError(f"{path}: array '{name}': expected C order, found Fortran order "
                         "(save np.ascontiguousarray(X))")
    return shape, dtype


def _read_rows(path: Path, name: str, handle: IO[bytes], dtype: np.dtype, shape: tuple[int, ...]
               ) -> np.ndarray:
    """Read the next ``shape`` values of a ``.npy`` member (numbers as float64, labels as stored);
    InputError if it ends early."""
    expected = int(np.prod(shape)) * dtype.itemsize
    data = handle.read(expected)
    if len(data) != expected:
        raise InputError(f"{path}: array '{name}' is truncated (expected {expected} more bytes, "
                         f"found {len(data)})")
    values = np.frombuffer(data, dtype=dtype).reshape(shape)
    return values.astype(np.float64) if dtype.kind in "iuf" else values
