"""Rows appended to an existing store: ``pep ingest SOURCE … --append STORE`` (docs/how-to/growing-data.md).

An append reads the new rows as the store's own: a table with the store's transformation (its offsets,
categories and class labels, never learnt again from the new rows), any other source only if it gives the
store's features, task and classes. A category or class label the store has never seen is refused,
naming it (:func:`~pep_gp.pipeline.data.sources.tables._transformed`): the store's one-hot columns and
classes are what a run trained on it knows, and growing them would change the model's shape.

The rules, so that the same appends give the same store:

* the new rows are shuffled with ``--seed`` (:mod:`~pep_gp.pipeline.data.shuffle`) and their test rows are
  drawn by the store's own rule: a store split by seed gives the same fraction of the new rows to its test
  split (``--test-size`` as a fraction; a count is taken as the fraction it made of the store), drawn with
  ``--seed``; a source that carries its own split (MNIST) keeps it;
* the new rows of each split follow its old rows, filling the last (short) chunk first, so every old
  chunk but that one keeps its bytes and its digest; ``checksum`` and ``chunk_digests`` cover the grown
  arrays, and the training statistics (``x_mean``, ``x_std``, ``y_mean``, ``y_std``) are computed again chunk
  by chunk in chunk order, bit for bit as ``pep ingest`` computes them for a store of the same chunks (this
  reads, and checks against its digest, every old training chunk);
* attribute ``versions`` lists every version of the store: its number, time, source, rows added per split
  and checksum. A run trained on an earlier version may resume on the grown store
  (:mod:`pep_gp.pipeline.training.trainer`).

Nothing half-written: the append builds the grown store in a staging sibling (:mod:`.staging`) whose
files are hard links to the old store's (Zarr replaces a file it writes with a new one, so the old store's
files are never modified), and swaps it in atomically; an error at any point leaves the old store as it
was. Two appends to one store are refused by an exclusive ``flock`` on ``DIR/.NAME.append.lock``, naming
the process that holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from ..errors import InputError
from .ingest import STAGING, IngestSummary, Progress, Staged, first_version, no_progress, stage, summarise
from .moments import Moments, target_statistics
from .sources import Source
from .staging import staging_directory, swap_into_place
from .stores import SPLITS, Store, data_checksum, finish_store, open_store, target_shape, write_chunk


def lock_path(out: Path) -> Path:
    """The append lock of the store ``out``: ``DIR/.NAME.append.lock`` (never removed, as in
    :mod:`pep_gp.pipeline.runs.lock`: removing it would let two processes lock two different files)."""
    return out.with_name(f".{out.name}.append.lock")


@contextlib.contextmanager
def hold_store(out: Path, what: str = "pep ingest --append") -> Iterator[None]:
    """Hold the append lock of ``out`` for the block.

    Raises:
        InputError: another process holds it (an append running), naming that process.
    """
    descriptor = os.open(lock_path(out), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 200, 0).decode(errors="replace").strip() or "another process"
            raise InputError(f"--append {out}: in use by {holder}; wait for that append to finish, "
                             "then append again") from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{what} (pid {os.getpid()})".encode(), 0)
        yield
    finally:
        os.close(descriptor)  # releases the flock


def versions(store: Store) -> list[dict[str, Any]]:
    """The store's versions, oldest first (a store ingested before versions were recorded: its one)."""
    recorded = store.attrs.get("versions")
    if recorded:
        return [dict(v) for v in recorded]
    return [first_version(store.attrs)]


def like_store(source: Source, store: Store) -> Source:
    """``source`` read as ``store``'s rows: a table with the store's transformation, another source checked
    to give the store's features, task, classes and kind of split.

    Raises:
        InputError: a table for a store that was not ingested from one (or the reverse), or a source whose
            features, target, task, number of classes or split differ from the store's, naming both.
    """
    where = f"--append {store.path}"
    if source.fit is not None:
        if "transforms" not in store.attrs:
            raise InputError(f"{where}: the store was ingested from {store.attrs['source']['name']!r}, not a "
                             f"table; append rows of that source")
        return source.fit(transforms=store.transforms)
    if "transforms" in store.attrs:
        raise InputError(f"{where}: the store was ingested from a table; append rows of a table "
                         f"({source.name!r} is not one)")
    mine = (tuple(source.feature_names), source.target_name, source.task, source.n_classes)
    theirs = (store.feature_names, store.attrs["target_name"], store.task, store.n_classes)
    for name, found, expected in zip(("features", "target", "task", "number of classes"), mine, theirs):
        if found != expected:
            raise InputError(f"{where}: {source.description} has {name} {found!r}; the store has {expected!r}")
    if (source.default_test_size is None) != (store.attrs["split"] == "source"):
        raise InputError(f"{where}: the store's split is {store.attrs['split']!r}; {source.description} "
                         f"{'carries' if source.default_test_size is None else 'has no'} split of its own")
    return source


def append(source: Source, out: str | Path, *, seed: int = 0, progress: Progress = no_progress) -> IngestSummary:
    """Append the rows of ``source`` to the store ``out`` (see the module docstring).

    Args:
        source: an opened source (:func:`pep_gp.pipeline.data.sources.open_source`).
        out: local directory of an existing store.
        seed: seed of the new rows' shuffle and of their test rows.
        progress: progress callback (``"read"`` rows, ``"write"`` chunks).

    Returns:
        The :class:`~pep_gp.pipeline.data.ingest.IngestSummary` of the grown store.

    Raises:
        InputError: no store at ``out`` (or not a local one), another append holds it, or the new rows do not
            fit it (:func:`like_store`, a new category or class label, a value :func:`stage` refuses); the
            store is left as it was.
    """
    began = time.perf_counter()
    if "://" in str(out):
        raise InputError(f"--append {out}: expected a local store; an append rewrites files in place of the store")
    out = Path(out)
    open_store(out)  # refuses a missing or damaged store before anything is locked or read
    with hold_store(out):
        store = open_store(out)  # read again under the lock: an append that held it has swapped in its store
        if store.attrs.get("chunk_digests") is None:
            raise InputError(f"--append {out}: the store was written before pep kept per-chunk digests; ingest it "
                             "again (--overwrite) to append to it")
        fitted = like_store(source, store)
        history = versions(store)
        with staging_directory(out) as work:
            shutil.copytree(out, work, copy_function=os.link, dirs_exist_ok=True)
            staged = stage(fitted, work, store.chunk_rows, seed, progress)
            is_test = _new_test_rows(store, staged, seed)
            attrs = _grown_attrs(store, staged, is_test, work, progress)
            history.append({"version": len(history) + 1, "created_at": _now(),
                            "source": {"name": source.name, "description": staged.description,
                                       "checksum": staged.source_checksum},
                            "seed": seed, "rows_added": {split: int((is_test == (split == "test")).sum())
                                                         for split in SPLITS},
                            "rows_dropped": staged.dropped, "checksum": attrs["checksum"]})
            attrs["versions"] = history
            shutil.rmtree(work / STAGING)
            finish_store(work, attrs)
            swap_into_place(work, out)
    return summarise(attrs, out, time.perf_counter() - began)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _new_test_rows(store: Store, staged: Staged, seed: int) -> np.ndarray:
    """(n_new,) bool: which new rows go to the test split (the module docstring's rule)."""
    if store.attrs["split"] == "source":
        return staged.own_split
    test_size = store.attrs["test_size"]
    fraction = (test_size if isinstance(test_size, float)
                else store.n_rows("test") / (store.n_rows("train") + store.n_rows("test")))
    mask = np.zeros(staged.n_rows, dtype=bool)
    mask[np.random.default_rng(seed).choice(staged.n_rows, size=round(fraction * staged.n_rows), replace=False)] = True
    return mask


def _grown_attrs(store: Store, staged: Staged, is_test: np.ndarray, work: Path, progress: Progress) -> dict[str, Any]:
    """Write the new rows after each split's old ones in ``work`` and return the grown store's attributes."""
    attrs = dict(store.attrs)
    root = zarr.open_group(str(work), mode="r+")
    rows_staged = zarr.open_group(str(work / STAGING), mode="r")
    cr, n_features, regression = store.chunk_rows, len(store.feature_names), store.n_classes is None
    digests = {split: list(store.attrs["chunk_digests"][split]) for split in SPLITS}
    x_parts: list[Moments] = []
    y_parts: list[Moments] = []
    counts = {split: np.asarray((store.attrs["class_counts"] or {}).get(split, [0]), dtype=np.int64)
              for split in SPLITS}
    done, total = 0, sum(-(-(store.n_rows(s) + int((is_test == (s == "test")).sum())) // cr) - store.n_rows(s) // cr
                         for s in SPLITS)
    for split in SPLITS:
        new = np.flatnonzero(is_test == (split == "test"))
        n_old, n_grown = store.n_rows(split), store.n_rows(split) + len(new)
        first = n_old // cr  # the old rows' last, short chunk (or the first new chunk) is rewritten
        if len(new):
            root[f"{split}/X"].resize((n_grown, n_features))
            root[f"{split}/y"].resize(target_shape(n_grown, store.n_targets))
        digests[split] = digests[split][:first]
        for index in range(-(-n_grown // cr)):
            start, stop = index * cr, min((index + 1) * cr, n_grown)
            if index < first:
                if split == "train":  # old chunks: read (and checked) only for the training statistics
                    X, y = store.read_chunk(split, index)
                    x_parts.append(Moments.of(X))
                    y_parts.append(Moments.of(y))
                continue
            X, y = _chunk_rows(store, rows_staged, split, new, start, stop)
            digests[split].append(write_chunk(work, split, index, X, y))
            if split == "train":
                x_parts.append(Moments.of(X))
                y_parts.append(Moments.of(y))
            done += 1
            progress("write", done, total)
        attrs["n_train" if split == "train" else "n_test"] = n_grown
        if not regression:
            labels = rows_staged["y"][:][new].astype(np.int64)
            counts[split] = counts[split] + np.bincount(labels, minlength=store.n_classes)
    x_moments = reduce(Moments.merge, x_parts)
    attrs.update(checksum=data_checksum(digests, n_features), chunk_digests=digests,
                 x_mean=x_moments.mean.tolist(), x_std=x_moments.std().tolist(),
                 rows_dropped=dict(Counter(store.attrs["rows_dropped"]) + Counter(staged.dropped)))
    if regression:
        y_moments = reduce(Moments.merge, y_parts)
        attrs.update(target_statistics(y_moments, store.n_targets))
    else:
        attrs["class_counts"] = {split: counts[split].tolist() for split in SPLITS}
    return attrs


def _chunk_rows(store: Store, rows_staged: zarr.Group, split: str, new: np.ndarray, start: int,
                stop: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``[start, stop)`` of the grown ``split``: the old rows there (verified), then new ones."""
    n_old = store.n_rows(split)
    parts_X, parts_y = [], []
    if start < n_old:
        X, y = store.read_chunk(split, start // store.chunk_rows)
        parts_X.append(X)
        parts_y.append(y)
    chosen = new[max(start, n_old) - n_old:stop - n_old]
    if len(chosen):
        rows = slice(int(chosen[0]), int(chosen[-1]) + 1)
        X, y = rows_staged["X"][rows], rows_staged["y"][rows]
        parts_X.append(X[chosen - chosen[0]])
        parts_y.append(y[chosen - chosen[0]].astype(store.arrays(split)[1].dtype))
    return np.concatenate(parts_X), np.concatenate(parts_y)
