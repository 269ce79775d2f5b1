"""Streaming ingest of a source into a pep store (docs/how-to/own-data.md), in three coarse steps.

1. :func:`stage` — one pass over the source (a table's features already less their offsets, in float64:
   :mod:`pep_gp.pipeline.data.transforms`): every block is checked (finite values within float32's
   range, labels), then the rows pass through a seeded, memory-bounded shuffle
   (:mod:`pep_gp.pipeline.data.shuffle`) and are appended, as float32, to a staging array inside a temporary sibling of the store. Memory holds one block, the
   shuffle buffer (≤ 64 MB) and one chunk, whatever the input size.
2. :func:`write` — the test rows are drawn by seed (or taken from the source's own split), then every
   chunk of ``train/`` and ``test/`` is copied from the staging array in parallel with Dask; each chunk
   task returns its digest, the chunk's moments and class counts, which are merged in chunk order, so
   the training-split statistics come out of this one pass and do not depend on task timing.
3. :func:`publish` — the staging array is removed, the attributes are written last, and the temporary
   directory is made durable and swapped in atomically (replacing an old one only with ``overwrite``;
   :mod:`pep_gp.pipeline.data.staging`).

On any error the temporary directory is removed, and one left by a killed ingest is removed by the next:
nothing half-written is left. The same input, seed and chunk size give byte-identical arrays (and the same
``checksum``).
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import reduce
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import dask
import dask.threaded
import numpy as np
import zarr
from dask.callbacks import Callback

from ..errors import InputError
from .moments import Moments, target_statistics
from .shuffle import ShuffleBuffer, capacity_for
from .sources import RowBlock, Source
from .split import choose_test_rows, parse_test_size
from .staging import staging_directory, swap_into_place
from .stores import SCHEMA_VERSION, SPLITS, check_chunk_rows, create_split_arrays, data_checksum, default_chunk_rows
from .stores import finish_store, target_shape
from .stores import write_chunk as store_chunk

FLOAT32_MAX = float(np.finfo(np.float32).max)  # the store is float32: larger magnitudes are refused

STAGING = "_staging"

Progress = Callable[[str, int, int | None], None]
"""``progress(phase, done, total)``: phase ``"read"`` counts rows, ``"write"`` counts chunks."""


def no_progress(phase: str, done: int, total: int | None) -> None:
    """A :data:`Progress` that shows nothing."""


@dataclass(frozen=True)
class Staged:
    """The outcome of :func:`stage`: what was read into ``work``'s staging array."""

    work: Path
    description: str               # the source's, for messages
    n_rows: int
    n_features: int
    feature_names: tuple[str, ...]
    transforms: dict[str, Any] | None  # a table's transformation (JSON), None for other sources
    chunk_rows: int
    task: str
    n_classes: int | None
    n_targets: int                 # targets per row (P ≥ 2: y is (rows, P))
    own_split: np.ndarray | None   # (n_rows,) bool, True for test rows, for sources with a split
    dropped: dict[str, int]
    source_checksum: str


@dataclass(frozen=True)
class Written:
    """The outcome of :func:`write`: the split arrays in ``work`` and what their chunks reported."""

    work: Path
    n_rows: dict[str, int]
    digests: dict[str, list[str]]
    x_moments: Moments             # training split
    y_moments: Moments | None      # training split, regression only
    class_counts: dict[str, list[int]] | None
    split: str                     # "seeded" or "source"
    seed: int | None
    test_size: int | float | None


@dataclass(frozen=True)
class IngestSummary:
    """What an ingest produced, as printed by ``pep ingest --json``."""

    store: str
    source: str
    task: str
    rows_train: int
    rows_test: int
    n_features: int
    n_classes: int | None
    class_counts: dict[str, list[int]] | None
    rows_dropped: dict[str, int]
    rows_dropped_total: int
    checksum: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The summary as a JSON-serialisable dict."""
        return asdict(self)


class Steps(NamedTuple):
    """The three steps :func:`ingest` runs; a flow passes them wrapped as Prefect tasks."""

    stage: Callable[..., Staged]
    write: Callable[..., Written]
    publish: Callable[..., dict[str, Any]]


def resolve_test_size(source: Source, test_size: str | None) -> int | float | None:
    """The test size to use: ``--test-size``, else the source's default; None for a source's own split.

    Raises:
        InputError: malformed or out of range, or given for a source that carries its own split.
    """
    if source.default_test_size is None:
        if test_size is not None:
            raise InputError(f"--test-size: source '{source.name}' has its own train/test split; "
                             "leave --test-size out")
        return None
    return parse_test_size(test_size or source.default_test_size)


def check_destination(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out`` without ``overwrite``, and anything at ``out`` that is not a store."""
    if not out.exists():
        if not out.parent.is_dir():
            raise InputError(f"--out {out}: directory {out.parent} does not exist")
        return
    if not overwrite:
        raise InputError(f"--out {out}: already exists; pass --overwrite to replace it")
    if not (out / "zarr.json").is_file():
        raise InputError(f"--out {out}: exists and is not a Zarr store; refusing to replace it")


def stage(source: Source, work: Path, chunk_rows: int | None, seed: int,
          progress: Progress = no_progress) -> Staged:
    """Read the source into ``work/_staging`` (float32, shuffled by ``seed``), checking every block; a
    table is read once before to learn its transformation (:meth:`Source.fitted`).

    Args:
        source: the opened source.
        work: the temporary store directory (created if missing).
        chunk_rows: rows per staging chunk (the store's chunk size); None for
            :func:`default_chunk_rows` of the source's (transformed) features.
        seed: seed of the row shuffle (see :mod:`pep_gp.pipeline.data.shuffle`).
        progress: called with ``("scan", rows so far, None)`` while a table's transformation is learnt
            and ``("read", rows so far, None)`` after each block.

    Raises:
        InputError: a non-finite value or one beyond float32's range, a label outside 0..C-1 (or not
            an integer), or no rows; for a table, what its transformation refuses
            (:func:`~pep_gp.pipeline.data.table_scan.scan_table`).
    """
    source = source.fitted(lambda rows: progress("scan", rows, None))
    n_features, n_targets = len(source.feature_names), len(source.target_names)
    chunk_rows = chunk_rows or default_chunk_rows(n_features)
    check_chunk_rows(chunk_rows, n_features)
    group = zarr.open_group(str(work / STAGING), mode="w", zarr_format=3)
    X_stage = group.create_array("X", shape=(0, n_features), chunks=(chunk_rows, n_features),
                                 dtype="float32", compressors=None)
    y_stage = group.create_array("y", shape=target_shape(0, n_targets), chunks=target_shape(chunk_rows, n_targets),
                                 dtype="float32", compressors=None)
    appender = _Appender(X_stage, y_stage)
    shuffle = ShuffleBuffer(capacity_for(4 * (n_features + n_targets + 1)), seed)
    labels, dropped, digest, splits = _LabelScan(), Counter(), hashlib.sha256(), []
    y_columns = n_features if n_targets == 1 else slice(n_features, n_features + n_targets)

    def keep(rows: np.ndarray) -> None:  # rows: [X | y (P columns) | is_test], float32
        appender.append(rows[:, :n_features], rows[:, y_columns])
        if rows.shape[1] > n_features + n_targets:
            splits.append(rows[:, n_features + n_targets] > 0.5)

    for block in source.read():
        _check_finite(block, source)
        labels.update(block)
        dropped.update(block.dropped)
        digest.update(np.ascontiguousarray(block.X))
        digest.update(np.ascontiguousarray(block.y))
        own_split = [] if block.is_test is None else [block.is_test]
        for rows in shuffle.push(np.column_stack([block.X, block.y, *own_split]).astype(np.float32)):
            keep(rows)
        progress("read", appender.n_rows + shuffle.size, None)
    for rows in shuffle.drain():
        keep(rows)
    n_rows = appender.close()
    if n_rows == 0:
        reasons = "; ".join(f"{count} for {reason}" for reason, count in dropped.items())
        raise InputError(f"{source.description}: no data rows"
                         + (f" ({sum(dropped.values())} dropped: {reasons})" if dropped else ""))
    task, n_classes = labels.resolve(source)
    own_split = np.concatenate(splits) if splits else None
    transforms = None if source.transforms is None else source.transforms.to_json()
    return Staged(work, source.description, n_rows, n_features, source.feature_names, transforms, chunk_rows,
                  task, n_classes, n_targets, own_split, dict(dropped),
                  "sha256:" + digest.hexdigest())


def write(staged: Staged, chunk_rows: int, test_size: int | float | None, seed: int,
          progress: Progress = no_progress) -> Written:
    """Split the staged rows and write every chunk of ``train/`` and ``test/`` in parallel with Dask.

    Args:
        staged: the result of :func:`stage`.
        chunk_rows: rows per chunk.
        test_size: test rows (count or fraction) for a seeded split; None to use the source's split.
        seed: seed of the split.
        progress: called with ``("write", chunks done, chunks)``.

    Raises:
        InputError: the split is empty, or the training split has a single class.
    """
    is_test = staged.own_split if test_size is None else choose_test_rows(staged.n_rows, test_size, seed)
    tasks, task_splits, n_rows = [], [], {}
    for split in SPLITS:
        rows = np.flatnonzero(is_test if split == "test" else ~is_test)
        if len(rows) == 0:
            raise InputError(f"{staged.description}: the {split} split has no rows")
        n_rows[split] = len(rows)
        create_split_arrays(staged.work, split, len(rows), staged.n_features, chunk_rows, staged.task,
                            staged.n_targets)
        for index, start in enumerate(range(0, len(rows), chunk_rows)):
            chunk = rows[start:start + chunk_rows]
            select = np.zeros(chunk[-1] + 1 - chunk[0], dtype=bool)
            select[chunk - chunk[0]] = True
            tasks.append(dask.delayed(_copy_chunk, pure=True)(
                staged.work, split, index, int(chunk[0]), select, staged.n_classes))
            task_splits.append(split)
    # An explicit local scheduler: dask.compute would otherwise use whatever distributed Client is the
    # process default (e.g. a training cluster) and ship the staged rows to its workers. Given as the
    # function, not the name "threads", so that Dask does not import distributed to look for a client.
    with _TaskCounter(progress, len(tasks)):
        results = dask.compute(*tasks, scheduler=dask.threaded.get)
    per_split = {split: [r for r, s in zip(results, task_splits) if s == split] for split in SPLITS}
    return _summarise_chunks(staged, per_split, n_rows, test_size, seed)


def publish(staged: Staged, written: Written, source: Source, out: Path, overwrite: bool,
            chunk_rows: int) -> dict[str, Any]:
    """Write the attributes last and swap the finished store into ``out``; return the attributes.

    The new store is fsynced and exchanged with the old one (with ``overwrite``) in one atomic rename
    (:func:`~pep_gp.pipeline.data.staging.swap_into_place`): a reader or a crash sees the old store or the
    new one, never none and never a mix. The old store ends at the staging path, which :func:`ingest`
    removes.
    """
    shutil.rmtree(staged.work / STAGING)
    attrs = {
        "schema_version": SCHEMA_VERSION,
        "task": staged.task,
        "n_classes": staged.n_classes,
        "feature_names": list(staged.feature_names),
        "target_name": source.target_name if staged.n_targets == 1 else list(source.target_names),
        "source": {"name": source.name, "description": source.description,
                   "checksum": staged.source_checksum},
        "checksum": data_checksum(written.digests, staged.n_features),
        "chunk_digests": written.digests,
        "x_mean": written.x_moments.mean.tolist(),
        "x_std": written.x_moments.std().tolist(),
        **target_statistics(written.y_moments, staged.n_targets),
        "split": written.split,
        "split_seed": written.seed,
        "test_size": written.test_size,
        "n_train": written.n_rows["train"],
        "n_test": written.n_rows["test"],
        "class_counts": written.class_counts,
        "rows_dropped": staged.dropped,
        "chunk_rows": chunk_rows,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **({} if staged.transforms is None else {"transforms": staged.transforms}),
    }
    attrs["versions"] = [first_version(attrs)]
    finish_store(staged.work, attrs)
    check_destination(out, overwrite)
    swap_into_place(staged.work, out)
    return attrs


def first_version(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The record of a store's first version, as :func:`publish` writes it into attribute ``versions``
    (:mod:`pep_gp.pipeline.data.append` adds one per append)."""
    return {"version": 1, "created_at": attrs["created_at"], "source": dict(attrs["source"]),
            "rows_added": {"train": attrs["n_train"], "test": attrs["n_test"]}, "checksum": attrs["checksum"]}


def ingest(source: Source, out: str | Path, *, chunk_rows: int | None = None,
           test_size: str | None = None, seed: int = 0, overwrite: bool = False,
           progress: Progress = no_progress, steps: Steps | None = None) -> IngestSummary:
    """Ingest ``source`` into the store ``out``.

    Args:
        source: an opened source (:func:`pep_gp.pipeline.data.sources.open_source`).
        out: local directory of the store to create.
        chunk_rows: rows per chunk; None for :func:`default_chunk_rows` of the (transformed) features.
        test_size: ``--test-size`` text (a count or a fraction); None for the source's default.
        seed: seed of the row shuffle and of the train/test split.
        overwrite: replace an existing store at ``out``.
        progress: progress callback (see :data:`Progress`).
        steps: the step functions to run (default: :func:`stage`, :func:`write`, :func:`publish`).

    Returns:
        The :class:`IngestSummary`.

    Raises:
        InputError: bad input or options; nothing is left behind.
    """
    began = time.perf_counter()
    out = Path(out)
    steps = steps or Steps(stage, write, publish)
    if chunk_rows is not None:
        check_chunk_rows(chunk_rows, len(source.feature_names))
    test = resolve_test_size(source, test_size)
    check_destination(out, overwrite)
    with staging_directory(out) as work:
        staged = steps.stage(source, work, chunk_rows, seed, progress)
        written = steps.write(staged, staged.chunk_rows, test, seed, progress)
        attrs = steps.publish(staged, written, source, out, overwrite, staged.chunk_rows)
    return summarise(attrs, out, time.perf_counter() - began)


def summarise(attrs: Mapping[str, Any], out: Path, seconds: float) -> IngestSummary:
    """The :class:`IngestSummary` of a store from its attributes."""
    return IngestSummary(
        store=str(out), source=attrs["source"]["description"], task=attrs["task"],
        rows_train=attrs["n_train"], rows_test=attrs["n_test"],
        n_features=len(attrs["feature_names"]), n_classes=attrs["n_classes"],
        class_counts=attrs["class_counts"], rows_dropped=dict(attrs["rows_dropped"]),
        rows_dropped_total=sum(attrs["rows_dropped"].values()), checksum=attrs["checksum"],
        seconds=round(seconds, 3))


def _check_finite(block: RowBlock, source: Source) -> None:
    """Raise InputError at the first feature or target value that is not finite or outside float32's range.

    The store holds float32 (:func:`stage`), so a finite float64 beyond ``±3.4028235e38`` would become
    ``inf`` there; it is refused like a non-finite one. A table's features are checked less their
    offsets (:mod:`~pep_gp.pipeline.data.transforms`), as they are stored; the message gives the table's
    value.
    """
    offsets = np.zeros(len(source.feature_names)) if source.transforms is None else source.transforms.offsets
    targets = block.y.reshape(len(block.y), -1)
    for values, names, offset in ((block.X, source.feature_names, offsets),
                                  (targets, source.target_names, np.zeros(targets.shape[1]))):
        bad = ~np.isfinite(values) | (np.abs(values) > FLOAT32_MAX)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            expected = ("a finite number" if not np.isfinite(values[i, j])
                        else f"a number within float32's range (±{FLOAT32_MAX:.8g})"
                        + (f" of the column's mean {offset[j]:.8g}" if offset[j] else ""))
            raise InputError(f"{block.where(i)}, column '{names[j]}': expected {expected}, "
                             f"found {values[i, j] + offset[j]:.8g}")


class _LabelScan:
    """Running extremes of the target, and its first non-integer value, with where they were seen."""

    def __init__(self) -> None:
        self.low: tuple[float, str] | None = None
        self.high: tuple[float, str] | None = None
        self.fraction: tuple[float, str] | None = None

    def update(self, block: RowBlock) -> None:
        """Fold in a block's targets (several targets per row are regression targets: nothing to scan)."""
        if not len(block.y) or block.y.ndim > 1:
            return
        i, j = int(np.argmin(block.y)), int(np.argmax(block.y))
        if self.low is None or block.y[i] < self.low[0]:
            self.low = (float(block.y[i]), block.where(i))
        if self.high is None or block.y[j] > self.high[0]:
            self.high = (float(block.y[j]), block.where(j))
        fractional = np.flatnonzero(block.y != np.round(block.y))
        if self.fraction is None and len(fractional):
            k = fractional[0]
            self.fraction = (float(block.y[k]), block.where(k))

    def resolve(self, source: Source) -> tuple[str, int | None]:
        """The source's task and number of classes C; raise InputError for labels that are not 0..C-1
        (a table's labels were mapped to 0..C-1 by its transformation; other sources fix C)."""
        if source.task == "regression":
            return source.task, None
        column = f"column '{source.target_name}'"
        if self.fraction is not None:
            raise InputError(f"{self.fraction[1]}, {column}: expected an integer class label, found {self.fraction[0]}")
        for value, where in (self.low, self.high):
            if not 0 <= value < source.n_classes:
                raise InputError(f"{where}, {column}: expected a class label in 0..{source.n_classes - 1}, "
                                 f"found {value:g}")
        return source.task, source.n_classes


class _Appender:
    """Appends rows to the staging arrays in whole chunks (the last one possibly short)."""

    def __init__(self, X: zarr.Array, y: zarr.Array) -> None:
        self.X, self.y = X, y
        self.n_rows = 0          # rows appended, including those still pending
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []

    def append(self, X: np.ndarray, y: np.ndarray) -> None:
        """Queue rows; write every whole chunk that is complete."""
        self.pending.append((X.astype(np.float32), y.astype(np.float32)))
        self.n_rows += len(y)
        if sum(len(p[1]) for p in self.pending) >= self.X.chunks[0]:
            self._flush(whole_chunks=True)

    def close(self) -> int:
        """Write what is pending; return the number of rows."""
        self._flush(whole_chunks=False)
        return self.n_rows

    def _flush(self, whole_chunks: bool) -> None:
        """Write pending rows (only up to a chunk boundary when ``whole_chunks``)."""
        if not self.pending:
            return
        X = np.concatenate([p[0] for p in self.pending])
        y = np.concatenate([p[1] for p in self.pending])
        size = len(y) - len(y) % self.X.chunks[0] if whole_chunks else len(y)
        start = self.X.shape[0]
        self.X.resize((start + size, self.X.shape[1]))
        self.y.resize((start + size, *self.y.shape[1:]))
        self.X[start:], self.y[start:] = X[:size], y[:size]
        self.pending = [(X[size:], y[size:])] if size < len(y) else []


def _copy_chunk(work: Path, split: str, index: int, start: int, select: np.ndarray,
                n_classes: int | None) -> tuple[str, Moments, Moments | None, np.ndarray | None]:
    """Copy the staged rows ``start + flatnonzero(select)`` into chunk ``index`` of ``split``.

    Returns:
        The chunk's digest, the moments of its X, of its y (regression) and its class counts
        (classification).
    """
    staging = zarr.open_group(str(work / STAGING), mode="r")
    rows = slice(start, start + len(select))
    X, y = staging["X"][rows], staging["y"][rows]
    if not select.all():
        X, y = X[select], y[select]
    if n_classes is None:
        return store_chunk(work, split, index, X, y), Moments.of(X), Moments.of(y), None
    labels = y.astype(np.int32)
    counts = np.bincount(labels, minlength=n_classes)
    return store_chunk(work, split, index, X, labels), Moments.of(X), None, counts


def _summarise_chunks(staged: Staged, per_split: dict[str, list[tuple]], n_rows: dict[str, int],
                      test_size: int | float | None, seed: int) -> Written:
    """Merge the chunk results in chunk order, and check the class counts."""
    train = per_split["train"]
    x_moments = reduce(Moments.merge, [r[1] for r in train])
    y_moments = reduce(Moments.merge, [r[2] for r in train]) if staged.n_classes is None else None
    class_counts = None
    if staged.n_classes is not None:
        class_counts = {split: np.sum([r[3] for r in per_split[split]], axis=0).tolist()
                        for split in SPLITS}
        _check_classes(staged, class_counts)
    return Written(staged.work, n_rows, {split: [r[0] for r in per_split[split]] for split in SPLITS},
                   x_moments, y_moments, class_counts,
                   "seeded" if test_size is not None else "source",
                   seed if test_size is not None else None, test_size)


def _check_classes(staged: Staged, class_counts: dict[str, list[int]]) -> None:
    """Refuse a training split with a single class."""
    present = [c for c, n in enumerate(class_counts["train"]) if n]
    if len(present) < 2:
        raise InputError(f"{staged.description}: the training split has a single class "
                         f"({present[0]}, {class_counts['train'][present[0]]} rows): expected at "
                         "least 2 classes")


class _TaskCounter(Callback):
    """Reports finished Dask tasks to a :data:`Progress` (the local threaded scheduler's callbacks)."""

    def __init__(self, progress: Progress, total: int) -> None:
        super().__init__()
        self.progress, self.total, self.done = progress, total, 0

    def _posttask(self, key, result, dsk, state, worker_id) -> None:
        self.done = min(self.done + 1, self.total)
        self.progress("write", self.done, self.total)
