"""Users' own tables: CSV and Parquet with a named target column, and ``.npz`` files with ``X``/``y``.

Every column but the target is a feature and must be numeric. A missing value (an empty CSV cell or
one of pandas' NA markers such as ``NA``; a Parquet null) drops its row, counted per column; a value
that is present but not finite (``inf``, or NaN in a Parquet or ``.npz`` array) is an error. The task
(classification or regression) is given with ``--task`` or decided by ingest from the target values.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import InputError
from .base import (
    BLOCK_ROWS,
    RowBlock,
    Source,
    SourceRequest,
    csv_blocks,
    csv_columns,
    drop_missing,
    numeric_matrix,
    reading,
    require_file,
)


def open_csv(request: SourceRequest) -> Source:
    """CSV files (same header; any compression pandas infers) with the target column ``--target``."""
    paths = _inputs(request, "csv")
    target = _target(request, "csv")
    header = csv_columns(paths[0])
    features = _features(paths[0], header, target)
    for path in paths[1:]:
        if csv_columns(path) != header:
            raise InputError(f"{path}: header differs from {paths[0]}'s; expected columns {header}")

    def read() -> Iterator[RowBlock]:
        for path in paths:
            for frame, lines in csv_blocks(path):
                values = numeric_matrix(frame, [*features, target], str(path), lines, "line")
                yield _block(values, np.isnan(values), [*features, target], str(path), lines, "line")

    return _table_source("csv", paths, features, target, request.task, read)


def open_parquet(request: SourceRequest) -> Source:
    """Parquet files (same schema) with the target column ``--target``; read by row batches."""
    paths = _inputs(request, "parquet")
    target = _target(request, "parquet")
    names = _parquet_file(paths[0]).schema_arrow.names
    features = _features(paths[0], names, target)
    columns = [*features, target]
    for path in paths[1:]:
        if _parquet_file(path).schema_arrow.names != names:
            raise InputError(f"{path}: columns differ from {paths[0]}'s; expected {names}")

    def read() -> Iterator[RowBlock]:
        for path in paths:
            start = 0
            with reading(path):
                for batch in _parquet_file(path).iter_batches(batch_size=BLOCK_ROWS, columns=columns):
                    rows = np.arange(start, start + batch.num_rows)
                    start += batch.num_rows
                    missing = np.column_stack([batch.column(c).is_null().to_numpy(zero_copy_only=False)
                                               for c in columns])
                    values = numeric_matrix(batch.to_pandas(), columns, str(path), rows, "row")
                    yield _block(values, missing, columns, str(path), rows, "row")

    return _table_source("parquet", paths, features, target, request.task, read)


def open_npz(request: SourceRequest) -> Source:
    """``.npz`` files holding ``X`` (N, D) and ``y`` (N,), streamed from the archive block by block."""
    paths = _inputs(request, "npz")
    request.refuse("npz", target=True)
    shapes = [_npz_shapes(path) for path in paths]
    n_features = shapes[0][1]
    for path, (_, d) in zip(paths[1:], shapes[1:]):
        if d != n_features:
            raise InputError(f"{path}: array 'X': expected {n_features} columns like {paths[0]}, found {d}")
    features = tuple(f"x{j}" for j in range(n_features))

    def read() -> Iterator[RowBlock]:
        for path, (n_rows, _) in zip(paths, shapes):
            with (reading(path), zipfile.ZipFile(path) as archive,
                  archive.open("X.npy") as X_file, archive.open("y.npy") as y_file):
                X_dtype, y_dtype = _npy_header(path, X_file, "X")[1], _npy_header(path, y_file, "y")[1]
                for start in range(0, n_rows, BLOCK_ROWS):
                    stop = min(start + BLOCK_ROWS, n_rows)
                    X = _read_rows(path, "X", X_file, X_dtype, (stop - start, n_features))
                    y = _read_rows(path, "y", y_file, y_dtype, (stop - start,))
                    yield RowBlock(X, y, str(path), np.arange(start, stop))

    return Source("npz", f"npz {', '.join(map(str, paths))} (X, y)", features, "y",
                  None if request.task == "auto" else request.task, None, "0.2", read)


def _inputs(request: SourceRequest, source: str) -> tuple[Path, ...]:
    """The ``--input`` files, checked to exist; at least one is required."""
    if not request.inputs:
        raise InputError(f"--input: source '{source}' needs at least one input file")
    return tuple(require_file(path) for path in request.inputs)


def _target(request: SourceRequest, source: str) -> str:
    """The ``--target`` column name; required for tables."""
    if not request.target:
        raise InputError(f"--target: source '{source}' needs the name of the target column")
    return request.target


def _features(path: Path, columns: Sequence[str], target: str) -> tuple[str, ...]:
    """All columns but the target; raise InputError if the target is absent or nothing is left."""
    if target not in columns:
        raise InputError(f"{path}: no column '{target}' (the --target column); "
                         f"columns are {', '.join(map(str, columns))}")
    features = tuple(str(c) for c in columns if c != target)
    if not features:
        raise InputError(f"{path}: expected feature columns besides '{target}', found none")
    return features


def _block(values: np.ndarray, missing: np.ndarray, columns: Sequence[str], origin: str,
           rows: np.ndarray, row_label: str) -> RowBlock:
    """A block from a table's (n, D + 1) values (target last) without the rows with missing values."""
    keep, dropped = drop_missing(missing, columns, [f"missing value in column '{c}'" for c in columns])
    return RowBlock(values[keep, :-1], values[keep, -1], origin, rows[keep], row_label, None, dropped)


def _table_source(name: str, paths: Sequence[Path], features: Sequence[str], target: str, task: str,
                  read: Callable[[], Iterator[RowBlock]]) -> Source:
    """The :class:`Source` of a CSV or Parquet table."""
    return Source(name, f"{name} {', '.join(map(str, paths))}, target column '{target}'",
                  tuple(features), target, None if task == "auto" else task, None, "0.2", read)


def _parquet_file(path: Path) -> pq.ParquetFile:
    """Open a Parquet file; raise InputError naming it if it is not one."""
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc


def _npz_shapes(path: Path) -> tuple[int, int]:
    """Check an ``.npz`` file's ``X`` and ``y`` headers; return ``(rows, features)``."""
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
                y_shape, y_dtype = _npy_header(path, y_file, "y")
            for name, shape, dtype in (("X", X_shape, X_dtype), ("y", y_shape, y_dtype)):
                _check_claimed_size(path, archive.getinfo(f"{name}.npy"), name, shape, dtype)
    if len(X_shape) != 2 or len(y_shape) != 1:
        raise InputError(f"{path}: expected 'X' of shape (N, D) and 'y' of shape (N,), "
                         f"found {X_shape} and {y_shape}")
    if X_shape[0] != y_shape[0]:
        raise InputError(f"{path}: 'X' has {X_shape[0]} rows but 'y' has {y_shape[0]}")
    return X_shape


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


def _npy_header(path: Path, handle: IO[bytes], name: str) -> tuple[tuple[int, ...], np.dtype]:
    """Read a ``.npy`` header from an open archive member; return its shape and numeric dtype."""
    try:
        version = np.lib.format.read_magic(handle)
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran_order, dtype = read_header(handle)
    except ValueError as exc:
        raise InputError(f"{path}: array '{name}' is not a valid .npy array ({exc})") from exc
    if dtype.kind not in "biuf":
        raise InputError(f"{path}: array '{name}': expected numbers, found dtype {dtype}")
    if fortran_order and len(shape) > 1:
        raise InputError(f"{path}: array '{name}': expected C order, found Fortran order "
                         "(save np.ascontiguousarray(X))")
    return shape, dtype


def _read_rows(path: Path, name: str, handle: IO[bytes], dtype: np.dtype, shape: tuple[int, ...]
               ) -> np.ndarray:
    """Read the next ``shape`` values of a ``.npy`` member as float64; InputError if it ends early."""
    expected = int(np.prod(shape)) * dtype.itemsize
    data = handle.read(expected)
    if len(data) != expected:
        raise InputError(f"{path}: array '{name}' is truncated (expected {expected} more bytes, "
                         f"found {len(data)})")
    return np.frombuffer(data, dtype=dtype).reshape(shape).astype(np.float64)
