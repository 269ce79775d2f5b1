"""The digests that bind a store's arrays to its checksum, and the reader that checks every chunk it reads.

A store's ``checksum`` combines the SHA-256 digests of its chunks in split and chunk order
(:func:`data_checksum`); ``pep ingest`` also keeps the per-chunk digests (attribute ``chunk_digests``).
:class:`StoreChunks` reads a chunk, hashes it and compares it with its digest before anything uses it, so
a chunk file deleted (Zarr would read it as zeros) or rewritten after ingest, or a store replaced by
``pep ingest --overwrite`` while a run reads it, fails with an :class:`~pep_gp.pipeline.errors.InputError`
instead of feeding other data to the run. The digests come from the store's attributes once per process
and are trusted only after they combine into the checksum the run was started with; a store written
before ``chunk_digests`` existed is hashed whole instead, once per process.
"""

from __future__ import annotations

import hashlib
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError

if TYPE_CHECKING:  # imported where a store is opened: a fit from arrays in memory never loads Zarr
    import zarr

SCHEMA_VERSION = 1
SPLITS = ("train", "test")
ZARR_FORMAT = 3  # the only format pep writes; anything else is refused, not guessed


def chunk_digest(X: np.ndarray, y: np.ndarray) -> str:
    """SHA-256 of one chunk's bytes (``X`` then ``y``, C order, as stored)."""
    digest = hashlib.sha256(np.ascontiguousarray(X).tobytes())
    digest.update(np.ascontiguousarray(y).tobytes())
    return digest.hexdigest()


def data_checksum(digests: Mapping[str, Sequence[str]], n_features: int) -> str:
    """Combine per-chunk digests, in split and chunk order, into the store's ``checksum``.

    Args:
        digests: for each split of :data:`SPLITS`, the chunk digests in chunk order.
        n_features: number of columns of ``X`` (part of the identity of the data).

    Returns:
        ``"sha256:<hex>"``.
    """
    total = hashlib.sha256(f"pep-store-v{SCHEMA_VERSION}:{n_features}\n".encode())
    for split in SPLITS:
        total.update(f"{split}:{len(digests[split])}\n".encode())
        for chunk in digests[split]:
            total.update(chunk.encode())
    return "sha256:" + total.hexdigest()


def open_root(path: str) -> zarr.Group:
    """The root group of a store, read as Zarr format 3 only.

    Raises:
        InputError: no Zarr format 3 group at ``path`` (a Zarr v2 store included); on a Dask worker, a
            local path it cannot see, naming the worker (a path the trainer sees and a worker does not
            is a missing shared file system, not a damaged store).
    """
    if "://" not in path and not Path(path).exists() and (worker := _dask_worker()) is not None:
        raise InputError(f"{path}: no such store on Dask worker {worker.name!r} ({worker.address}, host "
                         f"{socket.gethostname()}); every worker must see the store at the path the trainer "
                         "opened it at (a shared file system, or an fsspec URL)")
    import zarr

    try:
        return zarr.open_group(path, mode="r", zarr_format=ZARR_FORMAT)
    except (FileNotFoundError, ValueError, TypeError, KeyError) as exc:
        raise InputError(f"{path}: not a Zarr format {ZARR_FORMAT} group ({type(exc).__name__}: {exc}); "
                         "pep reads only the stores `pep ingest` writes") from None


def _dask_worker() -> object | None:
    """The Dask worker running this code, or None (not in a worker task, or Dask not imported: a worker
    always has it imported, so this never imports it)."""
    worker_module = sys.modules.get("distributed.worker")
    if worker_module is None:
        return None
    try:
        return worker_module.get_worker()
    except ValueError:
        return None


@dataclass(frozen=True)
class StoreChunks:
    """Verified reads of one store's chunks, bound to the checksum a run was started with. Small,
    hashable and picklable: shipped to the workers inside a block source.

    Attributes:
        path: the store's path or URL.
        checksum: the store's ``checksum`` when the run opened it.
        chunk_rows: rows per chunk.
        n_features: columns of ``X``.
    """

    path: str
    checksum: str
    chunk_rows: int
    n_features: int

    def chunk(self, split: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Chunk ``index`` of ``split``, after checking it against its digest.

        Raises:
            InputError: the chunk differs from what was ingested, or the store is no longer the one the
                run was started with.
        """
        digests = _digests(self)[split]
        if not 0 <= index < len(digests):
            raise IndexError(f"{split} has {len(digests)} chunks, no chunk {index}")
        X, y = _read(self, split, index)
        if chunk_digest(X, y) != digests[index]:
            first = index * self.chunk_rows
            raise InputError(f"{self.path}: {split} chunk {index} (rows {first}..{first + len(y) - 1}) does not "
                             "match its digest: the store was modified after ingest (a chunk file deleted or "
                             "rewritten) or replaced while this run read it; ingest it again")
        return X, y

    def rows(self, split: str, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``[start, stop)`` of ``split`` (``start < stop``), read as the verified chunks that hold them."""
        first, last = start // self.chunk_rows, (stop - 1) // self.chunk_rows
        parts = [self.chunk(split, index) for index in range(first, last + 1)]
        offset = first * self.chunk_rows
        X = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        y = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
        return X[start - offset:stop - offset], y[start - offset:stop - offset]


@lru_cache(maxsize=16)
def _arrays(chunks: StoreChunks, split: str) -> tuple[zarr.Array, zarr.Array]:
    """The opened arrays of a split, per store identity: a store ingested again at the same path (another
    checksum) is opened anew, not read through the old one's shapes."""
    group = open_root(chunks.path)[split]
    return group["X"], group["y"]


def _read(chunks: StoreChunks, split: str, index: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunk ``index`` as stored (not yet verified); a chunk Zarr cannot decode is an InputError."""
    X, y = _arrays(chunks, split)
    rows = slice(index * chunks.chunk_rows, (index + 1) * chunks.chunk_rows)
    try:
        return X[rows], y[rows]
    except (ValueError, RuntimeError, TypeError) as exc:
        raise InputError(f"{chunks.path}: {split} chunk {index} cannot be decoded ({type(exc).__name__}: {exc}); "
                         "the store is damaged: ingest it again") from None


@lru_cache(maxsize=16)
def _digests(chunks: StoreChunks) -> dict[str, tuple[str, ...]]:
    """The per-chunk digests of the store, checked to combine into ``chunks.checksum`` (read once per
    process; a store without ``chunk_digests`` is hashed whole here)."""
    attrs = open_root(chunks.path).attrs.asdict()
    if attrs.get("checksum") != chunks.checksum:
        raise InputError(f"{chunks.path}: the store changed since this run opened it (checksum "
                         f"{attrs.get('checksum')!r}, the run's data has {chunks.checksum}); was it ingested "
                         "again with --overwrite? Train or evaluate again on the new store")
    stored = attrs.get("chunk_digests")
    if stored is None:
        digests = {split: tuple(chunk_digest(*_read(chunks, split, i))
                                for i in range(-(-_arrays(chunks, split)[1].shape[0] // chunks.chunk_rows)))
                   for split in SPLITS}
    elif (isinstance(stored, dict) and all(isinstance(stored.get(split), list) for split in SPLITS)
          and all(isinstance(d, str) for split in SPLITS for d in stored[split])):
        digests = {split: tuple(stored[split]) for split in SPLITS}
    else:
        raise InputError(f"{chunks.path}: attribute 'chunk_digests': expected lists of hex digests for "
                         f"{', '.join(SPLITS)}")
    if data_checksum(digests, chunks.n_features) != chunks.checksum:
        raise InputError(f"{chunks.path}: data does not match the store's checksum {chunks.checksum}; the "
                         "store was modified after ingest: ingest it again")
    return digests
