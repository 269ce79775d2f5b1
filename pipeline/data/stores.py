"""The chunked Zarr store every pep dataset lives in (DESIGN §3), and the validated reader for it.

Layout (Zarr v3, one group per dataset)::

    <name>.zarr/
      train/X  (N, D) float32, chunks (chunk_rows, D)    train/y  (N,) int32 labels 0..C-1
      test/X   (M, D) float32, chunks (chunk_rows, D)             or float32 regression targets
      test/y   (M,)
      attrs    schema_version, task, n_classes, feature_names, target_name, source {name,
               description, checksum}, checksum, x_mean, x_std, y_mean, y_std, split, split_seed,
               test_size, n_train, n_test, class_counts, rows_dropped, chunk_rows, created_at, and for a
               table transforms (:mod:`pep_gp.pipeline.data.transforms`)

The arrays hold the source's own values (MNIST pixels scaled to [0, 1], airline features in their
units); ``x_mean``/``x_std`` (and ``y_mean``/``y_std`` for regression) are statistics of the training
split only, for a trainer that standardises (``x_std`` is 1.0 for a constant feature). The root
attributes are written last: a store without them is unfinished and :func:`open_store` refuses it.
``checksum`` identifies the stored arrays (see :func:`data_checksum`), so a training run can refuse to
resume on different data.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import zarr

from ..errors import InputError
from .blocks import BlockSource
from .transforms import Transforms, transforms_of

SCHEMA_VERSION = 1
SPLITS = ("train", "test")
TASKS = ("classification", "regression")
REQUIRED_ATTRS = (
    "schema_version",
    "task",
    "n_classes",
    "feature_names",
    "target_name",
    "source",
    "checksum",
    "x_mean",
    "x_std",
    "y_mean",
    "y_std",
    "split",
    "split_seed",
    "test_size",
    "n_train",
    "n_test",
    "class_counts",
    "rows_dropped",
    "chunk_rows",
    "created_at",
)


def label_dtype(task: str) -> np.dtype:
    """The dtype of ``y`` for a task: int32 class labels or float32 targets."""
    return np.dtype(np.int32) if task == "classification" else np.dtype(np.float32)


def create_split_arrays(
    path: Path, split: str, n_rows: int, n_features: int, chunk_rows: int, task: str
) -> None:
    """Create (or re-create) the empty ``<split>/X`` and ``<split>/y`` arrays of a store being written.

    Args:
        path: the store's (temporary) local directory; the root group is created if missing.
        split: ``"train"`` or ``"test"``.
        n_rows: number of rows of the split.
        n_features: number of columns of ``X``.
        chunk_rows: rows per chunk.
        task: ``"classification"`` or ``"regression"`` (sets the dtype of ``y``).
    """
    root = zarr.open_group(str(path), mode="a", zarr_format=3)
    group = root.require_group(split)
    group.create_array("X", shape=(n_rows, n_features), chunks=(chunk_rows, n_features),
                       dtype="float32", fill_value=0.0, overwrite=True)
    group.create_array("y", shape=(n_rows,), chunks=(chunk_rows,), dtype=label_dtype(task),
                       fill_value=0, overwrite=True)


def write_chunk(path: Path, split: str, index: int, X: np.ndarray, y: np.ndarray) -> str:
    """Write chunk ``index`` of a split and return its digest (see :func:`chunk_digest`).

    Args:
        path: the store's local directory.
        split: ``"train"`` or ``"test"``.
        index: chunk number; the chunk covers rows ``index * chunk_rows`` onwards.
        X: (rows, D) values, cast to float32.
        y: (rows,) labels or targets, cast to the store's ``y`` dtype.

    Returns:
        The hex digest of the chunk as stored.
    """
    group = zarr.open_group(str(path), mode="r+")[split]
    X_arr, y_arr = group["X"], group["y"]
    start = index * X_arr.chunks[0]
    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=y_arr.dtype)
    X_arr[start:start + len(X)] = X
    y_arr[start:start + len(y)] = y
    return chunk_digest(X, y)


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


def finish_store(path: Path, attrs: Mapping[str, Any]) -> None:
    """Write the root attributes, the last step that makes a store complete.

    Args:
        path: the store's local directory, with all arrays written.
        attrs: every key of :data:`REQUIRED_ATTRS` (JSON-serialisable values).
    """
    missing = [key for key in REQUIRED_ATTRS if key not in attrs]
    if missing:
        raise ValueError(f"store attributes lack {missing}")
    zarr.open_group(str(path), mode="r+").attrs.update(dict(attrs))


@dataclass(frozen=True)
class Store:
    """A validated, read-only pep store. Cheap to pickle: it holds the path and the attributes.

    Arrays are opened lazily; a distributed trainer can ship a ``Store`` to workers and call
    :meth:`read_chunk` there.
    """

    path: str
    _attrs: dict[str, Any] = field(repr=False)

    @property
    def attrs(self) -> Mapping[str, Any]:
        """The store's root attributes (read-only view)."""
        return MappingProxyType(self._attrs)

    @property
    def checksum(self) -> str:
        """``"sha256:…"`` of the stored arrays; equal for byte-identical data."""
        return self._attrs["checksum"]

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return self._attrs["task"]

    @property
    def n_classes(self) -> int | None:
        """Number of classes C (labels are 0..C-1), or None for regression."""
        return self._attrs["n_classes"]

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Names of the D columns of ``X``."""
        return tuple(self._attrs["feature_names"])

    @property
    def transforms(self) -> Transforms:
        """How the rows were made from the source's (:mod:`pep_gp.pipeline.data.transforms`): the
        ``transforms`` attribute of a table's store, else the identity over :attr:`feature_names`."""
        return transforms_of(self)

    @property
    def chunk_rows(self) -> int:
        """Rows per chunk (the last chunk of a split may be shorter)."""
        return self._attrs["chunk_rows"]

    def arrays(self, split: str) -> tuple[zarr.Array, zarr.Array]:
        """The lazy, read-only ``(X, y)`` Zarr arrays of ``split`` (``"train"`` or ``"test"``)."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        group = zarr.open_group(self.path, mode="r")[split]
        return group["X"], group["y"]

    def n_rows(self, split: str) -> int:
        """Number of rows of ``split``."""
        return self._attrs["n_train" if split == "train" else "n_test"]

    def blocks(self, split: str, block_rows: int, targets: Any, standardize: bool = True) -> Any:
        """The fixed-size training blocks of ``split`` (:class:`~pep_gp.pipeline.data.blocks.BlockSource`)."""
        return BlockSource.of(self, split, block_rows, targets, standardize)

    def n_chunks(self, split: str) -> int:
        """Number of chunks of ``split``."""
        return math.ceil(self.n_rows(split) / self.chunk_rows)

    def read_chunk(self, split: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Read chunk ``index`` of ``split`` into memory.

        Returns:
            ``(X, y)``: (rows, D) float32 and (rows,) int32 or float32, ``rows <= chunk_rows``.
        """
        if not 0 <= index < self.n_chunks(split):
            raise IndexError(f"{split} has {self.n_chunks(split)} chunks, no chunk {index}")
        X, y = self.arrays(split)
        rows = slice(index * self.chunk_rows, (index + 1) * self.chunk_rows)
        return X[rows], y[rows]

    def verify(self) -> None:
        """Re-read every chunk and check it against ``checksum``; raise InputError on a mismatch."""
        digests = {split: [chunk_digest(*self.read_chunk(split, i)) for i in range(self.n_chunks(split))]
                   for split in SPLITS}
        found = data_checksum(digests, len(self.feature_names))
        if found != self.checksum:
            raise InputError(f"{self.path}: data does not match the store's checksum "
                             f"(expected {self.checksum}, found {found}); the store was modified")


def open_store(path: str | Path) -> Store:
    """Open and validate a pep store.

    Args:
        path: local directory or fsspec URL of the store.

    Returns:
        The validated :class:`Store`.

    Raises:
        InputError: the path is missing or not a Zarr v3 group, the store is unfinished (attributes
            never written), of another schema version, its arrays do not match its attributes, or its
            ``transforms`` attribute is invalid or describes other features.
    """
    path = str(path)
    if "://" not in path and not Path(path).exists():
        raise InputError(f"{path}: no such store (run `pep ingest` to create it)")
    try:
        root = zarr.open_group(path, mode="r")
    except (FileNotFoundError, ValueError, TypeError) as exc:
        raise InputError(f"{path}: not a Zarr v3 group ({exc})") from exc
    attrs = dict(root.attrs)
    if "schema_version" not in attrs:
        raise InputError(f"{path}: unfinished store (its attributes were never written, so the "
                         "ingest did not complete); re-run `pep ingest ... --overwrite`")
    if attrs["schema_version"] != SCHEMA_VERSION:
        raise InputError(f"{path}: attribute 'schema_version': expected {SCHEMA_VERSION}, "
                         f"found {attrs['schema_version']!r}")
    missing = [key for key in REQUIRED_ATTRS if key not in attrs]
    if missing:
        raise InputError(f"{path}: unfinished store, attributes {missing} are missing")
    if attrs["task"] not in TASKS:
        raise InputError(f"{path}: attribute 'task': expected one of {TASKS}, found {attrs['task']!r}")
    for split in SPLITS:
        _check_split(root, path, split, attrs)
    store = Store(path, attrs)
    if store.transforms.feature_names != store.feature_names:
        raise InputError(f"{path}: attribute 'transforms' describes features {list(store.transforms.feature_names)}, "
                         f"not the store's {list(store.feature_names)}")
    return store


def _check_split(root: zarr.Group, path: str, split: str, attrs: Mapping[str, Any]) -> None:
    """Check that ``split``'s arrays exist and agree with the attributes; raise InputError if not."""
    n_rows = attrs["n_train" if split == "train" else "n_test"]
    n_features = len(attrs["feature_names"])
    expected = {
        "X": ((n_rows, n_features), np.dtype(np.float32), (attrs["chunk_rows"], n_features)),
        "y": ((n_rows,), label_dtype(attrs["task"]), (attrs["chunk_rows"],)),
    }
    for name, (shape, dtype, chunks) in expected.items():
        try:
            array = root[f"{split}/{name}"]
        except KeyError:
            raise InputError(f"{path}: array '{split}/{name}' is missing") from None
        found = (array.shape, array.dtype, array.chunks)
        if found != (shape, dtype, chunks):
            raise InputError(f"{path}: array '{split}/{name}': expected shape {shape}, dtype {dtype}, "
                             f"chunks {chunks}; found shape {array.shape}, dtype {array.dtype}, "
                             f"chunks {array.chunks}")
