"""The rows ``pep predict`` reads and the file it writes.

Input (:func:`open_input`): a CSV or Parquet table whose columns are matched by name to a run's feature
and id columns (other columns are ignored; no target is needed), read a block at a time; or a pep store
(its rows are model features already: matched to the run's features by name and moved to the run's offsets).
Output (:func:`open_output`): CSV, Parquet or a Zarr group, one column per prediction, appended block by block
to a temporary sibling that is published as the output only when every row is written, and never over
another run's output unless ``--overwrite``: a failed or terminated run leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import zarr

from ..errors import InputError
from ..files import publish_new, sigterm_as_exit
from .frames import TableChunk
from .sources.base import BLOCK_ROWS, require_file
from .sources.tables import check_columns, csv_chunks, csv_header, parquet_chunks, parquet_header, text_labels
from .staging import locked_sibling
from .stores import SPLITS, feature_order, open_store
from .transforms import Transforms

TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
COMPRESSIONS = (".gz", ".bz2", ".zip", ".xz", ".zst")
OUTPUT_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".zarr": "zarr"}
SPLIT_CHOICES = ("all", *SPLITS)


@dataclass(frozen=True)
class StoreRows:
    """A chunk of a store split, read where it is predicted (a Dask worker reads it itself); ``shift``
    moves its rows from the store's offsets to the run's (:meth:`Transforms.shift_from`)."""

    path: str
    split: str
    index: int
    columns: tuple[int, ...] | None  # the run's features among the store's (feature_order)
    shift: tuple[float, ...]  # from the store's offsets to the run's (Transforms.shift_from)
    first_row: int = 0  # the position of its first row among the rows predicted (train, then test)

    def read(self) -> np.ndarray:
        """The chunk's rows of model features as the run's record makes them (its order, its offsets), float64."""
        x = open_store(self.path).read_chunk(self.split, self.index)[0].astype(np.float64)
        return (x if self.columns is None else x[:, list(self.columns)]) + self.shift


@dataclass(frozen=True)
class PredictInput:
    """What ``pep predict`` reads: a description and a re-iterable sequence of row chunks
    (:class:`TableChunk` s of a table, :class:`StoreRows` of a store)."""

    description: str
    kind: str
    chunks: Any  # () -> Iterator[TableChunk | StoreRows]
    n_rows: int | None  # known for a store
    chunk_rows: int = BLOCK_ROWS  # the most rows of one chunk


def table_kind(path: Path) -> str | None:
    """``csv`` or ``parquet`` from a file name (``.csv``, ``.csv.gz``, ``.parquet``, ``.pq``), else None."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return TABLE_SUFFIXES.get(suffixes[-1]) if suffixes else None


def open_input(path: Path, transforms: Transforms, sep: str | None = None, split: str = "all",
               target: str | tuple[str, ...] | None = None) -> PredictInput:
    """The rows to predict (or, with ``target``, to score), their columns checked against the run's.

    Args:
        path: a CSV or Parquet file, or a pep store (a directory).
        transforms: the run's transformation (feature and id columns).
        sep: the CSV field separator (default ``,``).
        split: a store's split to predict: ``all`` (train then test), ``train`` or ``test``.
        target: a table's column of labels or targets (or the columns of a run's several targets), read too
            (``pep evaluate --input``); None for none.

    Raises:
        InputError: no such file, an unknown kind, a missing feature or id column (with the closest
            name), a store of other features (a store's features are matched by name, as a table's
            columns are), or an option the input does not take.
    """
    path = Path(path)
    if split not in SPLIT_CHOICES:
        raise InputError(f"--split: expected one of {', '.join(SPLIT_CHOICES)}, found {split!r}")
    if path.is_dir():
        if sep is not None:
            raise InputError(f"--sep: {path} is a store, not a CSV file")
        if target is not None:
            raise InputError(f"--input {path}: a store holds its own labels; evaluate on it with --data")
        return _store_input(path, transforms, split)
    if split != "all":
        raise InputError(f"--split: {path} is a table, not a store")
    kind = table_kind(require_file(path))
    if kind is None:
        raise InputError(f"--input {path}: expected a .csv (or compressed .csv.gz, …), .parquet or a pep store "
                         "directory")
    labels = [] if target is None else list(target) if isinstance(target, tuple) else [target]
    columns = [*transforms.id_columns, *transforms.input_columns, *labels]
    text = frozenset([*transforms.text_columns, *(labels if text_labels(transforms) else [])])
    ids = frozenset(transforms.id_columns)
    if kind == "csv":  # ids as written: text ("007" stays "007")
        header = csv_header(path, sep or ",")
        chunks = partial(csv_chunks, [path], columns, text | ids, sep or ",")
    else:  # ids in their own type (integers stay integers)
        if sep is not None:
            raise InputError(f"--sep: {path} is a Parquet file, not a CSV file")
        header = parquet_header(path)
        chunks = partial(parquet_chunks, [path], columns, text, ids)
    check_columns(path, header, {"an --id column of the run's data": transforms.id_columns,
                                 "a feature of the run": transforms.input_columns, "the --target column": labels})
    return PredictInput(str(path), kind, chunks, None)


def _store_input(path: Path, transforms: Transforms, split: str) -> PredictInput:
    store = open_store(path)
    columns = feature_order(store, transforms.feature_names)
    splits = SPLITS if split == "all" else (split,)
    shift = tuple(transforms.shift_from(store.transforms).tolist())

    def chunks() -> Iterator[StoreRows]:
        first = 0
        for name in splits:
            for index in range(store.n_chunks(name)):
                yield StoreRows(store.path, name, index, columns, shift, first + index * store.chunk_rows)
            first += store.n_rows(name)

    n_rows = sum(store.n_rows(name) for name in splits)
    return PredictInput(f"{path} ({split})", "store", chunks, n_rows, max(1, min(store.chunk_rows, n_rows)))


# --------------------------------------------------------------------------------------------------
def output_kind(out: Path, overwrite: bool) -> str:
    """``csv``, ``parquet`` or ``zarr`` from the output's name, after refusing an output that exists
    (unless ``overwrite``) or whose directory does not.

    Raises:
        InputError: any of these, naming ``--out``.
    """
    kind = OUTPUT_SUFFIXES.get(out.suffix.lower())
    if kind is None:
        raise InputError(f"--out {out}: expected a name ending in .csv, .parquet or .zarr")
    if not out.parent.is_dir():
        raise InputError(f"--out {out}: directory {out.parent} does not exist")
    if out.exists() and not overwrite:
        raise InputError(f"--out {out}: already exists; pass --overwrite to replace it")
    if out.exists() and out.is_dir() != (kind == "zarr"):
        found = "a directory" if out.is_dir() else "a file"
        raise InputError(f"--out {out}: exists and is {found}; refusing to replace it")
    return kind


@contextmanager
def open_output(out: Path, overwrite: bool) -> Iterator["_Writer"]:
    """A writer of prediction frames into a temporary sibling of ``out``, published as ``out`` when the
    block exits normally, and removed on any error and on SIGTERM (:func:`~pep_gp.pipeline.files.sigterm_as_exit`).
    The sibling is held by a lock (:func:`~pep_gp.pipeline.data.staging.locked_sibling`): one left by a
    predict killed with SIGKILL is removed by the next predict to ``out``.

    Without ``overwrite`` the output is published only under a name still free
    (:func:`~pep_gp.pipeline.files.publish_new`): of two runs writing one ``--out`` the second fails, and
    the first's result is kept. With it the output replaces any that exists, atomically.

    Raises:
        InputError: ``out`` exists (before or, written by another run, after the predictions) without
            ``overwrite``, or is of the other kind (file or directory).
    """
    kind = output_kind(out, overwrite)
    with sigterm_as_exit(), locked_sibling(out, f".{out.stem}.predict-", out.suffix) as temporary:
        writer = {"csv": _CsvWriter, "parquet": _ParquetWriter, "zarr": _ZarrWriter}[kind](temporary)
        try:
            yield writer
            writer.close()
        except BaseException:
            with suppress(Exception):  # a full disk fails the close too: the first error is the one to report
                writer.abort()
            raise
        if overwrite:
            _replace(temporary, out)
        else:
            try:
                publish_new(temporary, out)
            except FileExistsError:
                raise InputError(f"--out {out}: already exists (another run wrote it while this one predicted); "
                                 "pass --overwrite to replace it") from None


def _replace(temporary: Path, out: Path) -> None:
    """Publish ``temporary`` as ``out``, replacing an existing output (a Zarr directory is set aside first,
    then removed: a directory cannot be renamed onto a non-empty one)."""
    old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
    if out.is_dir():
        out.rename(old)
    os.replace(temporary, out)
    _remove(old)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class _Writer:
    """Appends frames of predictions (the same columns each time) to ``path``."""

    def __init__(self, path: Path):
        self.path, self.rows = path, 0

    def write(self, frame: pd.DataFrame) -> None:
        self._write(frame)
        self.rows += len(frame)

    def _write(self, frame: pd.DataFrame) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish the file (a writer that was given no frame writes its empty form)."""

    def abort(self) -> None:
        """Release what an unfinished file holds open."""


class _CsvWriter(_Writer):
    def __init__(self, path: Path):
        super().__init__(path)
        self.handle = path.open("w", newline="")

    def _write(self, frame: pd.DataFrame) -> None:
        frame.to_csv(self.handle, header=self.rows == 0, index=False)

    def close(self) -> None:
        self.handle.close()

    def abort(self) -> None:
        self.handle.close()


class _ParquetWriter(_Writer):
    def __init__(self, path: Path):
        super().__init__(path)
        self.writer: pq.ParquetWriter | None = None

    def _write(self, frame: pd.DataFrame) -> None:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema)
        self.writer.write_table(table.cast(self.writer.schema))

    def close(self) -> None:
        if self.writer is None:
            pq.write_table(pa.table({}), self.path)
        else:
            self.writer.close()

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.close()


class _ZarrWriter(_Writer):
    """One 1-D array per column in a Zarr v3 group (text as variable-length strings)."""

    CHUNK_ROWS = 65_536

    def __init__(self, path: Path):
        super().__init__(path)
        self.group = zarr.open_group(str(path), mode="w", zarr_format=3)
        self.columns: list[str] = []

    def _write(self, frame: pd.DataFrame) -> None:
        self.columns = self.columns or [str(name) for name in frame.columns]
        for name in frame.columns:
            values = _column_values(frame[name])
            if name not in self.group:
                self.group.create_array(name, shape=(0,), chunks=(self.CHUNK_ROWS,),
                                        dtype=str if values.dtype == object else values.dtype)
            array = self.group[name]
            array.resize((self.rows + len(values),))
            array[self.rows:] = values

    def close(self) -> None:
        self.group.attrs.update({"columns": self.columns, "rows": self.rows})


def _column_values(series: pd.Series) -> np.ndarray:
    """A frame column as a numpy array: numbers and booleans as they are, anything else as text (and a
    Parquet input's id column of integers holding a null, which numpy has no integers for)."""
    arrow = isinstance(series.dtype, pd.ArrowDtype)
    if (pd.api.types.is_bool_dtype(series) or pd.api.types.is_numeric_dtype(series)) and not (arrow and series.hasnans):
        return series.to_numpy(dtype=series.dtype.numpy_dtype if arrow else None)
    return np.array(["" if pd.isna(v) else str(v) for v in series], dtype=object)


def chunk_ids(chunk: TableChunk, id_columns: Sequence[str]) -> pd.DataFrame:
    """The id columns of a chunk as read, with a fresh index (they lead each prediction frame)."""
    return chunk.frame[list(id_columns)].reset_index(drop=True)
