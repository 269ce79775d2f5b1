"""The chunked Zarr store every pep dataset lives in, and the validated reader for it.

Layout (Zarr v3, one group per dataset)::

    <name>.zarr/
      train/X  (N, D) float32, chunks (chunk_rows, D)    train/y  (N,) int32 labels 0..C-1
      test/X   (M, D) float32, chunks (chunk_rows, D)             or float32 regression targets
      test/y   (M,)                                                or (N, P), (M, P): P ≥ 2 regression targets
      attrs    schema_version, task, n_classes, feature_names, target_name, source {name,
               description, checksum}, checksum, chunk_digests, x_mean, x_std, y_mean, y_std, split,
               split_seed, test_size, n_train, n_test, class_counts, rows_dropped, chunk_rows, created_at, and for a
               table transforms (:mod:`pep_gp.pipeline.data.transforms`)

The arrays hold the source's own values (MNIST pixels scaled to [0, 1], airline features in their
units; a table's columns less their float64 offsets, recorded in ``transforms``, so that float32 keeps
their spread); ``x_mean``/``x_std`` (and ``y_mean``/``y_std`` for regression) are statistics of the training
split only, for a trainer that standardises (``x_std`` is 1.0 for a constant feature). A store of ``P ≥ 2``
regression targets (``pep ingest --target a --target b``) holds ``y`` ``(rows, P)`` and lists, one entry per
target, in ``target_name``, ``y_mean`` and ``y_std``; a store of one target holds ``y`` ``(rows,)`` and single
values there. The root
attributes are written last: a store without them is unfinished and :func:`open_store` refuses it.
``checksum`` identifies the stored arrays (see :func:`~pep_gp.pipeline.data.chunks.data_checksum`), so a
training run can refuse to resume on different data, and ``chunk_digests`` lets every read check the
chunk it reads (:mod:`pep_gp.pipeline.data.chunks`). Nothing in a store is used before it is checked:
:func:`open_store` reads a local store only if it holds nothing but regular files inside it, Zarr format 3 only, validates the attributes (:class:`StoreAttrs`: types, finite
statistics, ``x_std > 0``, sizes within :data:`MAX_CHUNK_BYTES` and :data:`MAX_CLASSES`) and compares the
arrays' shapes, dtypes and chunks with them before any data is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import InputError
from ..files import absolute, check_received_tree
from .chunks import SCHEMA_VERSION, SPLITS, StoreChunks, chunk_digest, data_checksum, open_root

from .transforms import Transforms, transforms_of

if TYPE_CHECKING:  # imported where a store is written or checked: a fit from arrays in memory never loads Zarr
    import zarr

__all__ = ["MAX_CHUNK_BYTES", "MAX_CLASSES", "REQUIRED_ATTRS", "SCHEMA_VERSION", "SPLITS", "Store", "StoreAttrs",
           "check_chunk_rows", "chunk_digest", "create_split_arrays", "data_checksum", "feature_order",
           "finish_store", "label_dtype", "open_store", "target_names", "target_shape", "write_chunk"]

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
MAX_CHUNK_BYTES = 64 * 2**20
"""The largest chunk of ``X`` a store may have (``chunk_rows × D × 4`` bytes): a read decodes whole chunks,
so this bounds what reading one row can allocate (``pep ingest`` writes ≤ 1 MiB chunks by default)."""
MAX_CLASSES = 10_000
"""The most classes a store may have: class counts and per-class models are allocated per class."""


def label_dtype(task: str) -> np.dtype:
    """The dtype of ``y`` for a task: int32 class labels or float32 targets."""
    return np.dtype(np.int32) if task == "classification" else np.dtype(np.float32)


def check_chunk_rows(chunk_rows: int, n_features: int, where: str = "--chunk-rows") -> None:
    """InputError unless ``chunk_rows`` is a positive row count whose chunks of ``n_features`` float32
    columns fit :data:`MAX_CHUNK_BYTES`."""
    most = max(1, MAX_CHUNK_BYTES // (4 * max(n_features, 1)))
    if not 1 <= chunk_rows <= most:
        raise InputError(f"{where}: expected a row count from 1 to {most:,} (chunks of {n_features} float32 "
                         f"features up to {MAX_CHUNK_BYTES // 2**20} MiB), found {chunk_rows:,}")


DEFAULT_CHUNK_ROWS = 10_000
CHUNK_BYTES = 2**20  # wide rows get fewer rows per chunk: reading one training block stays cheap


def default_chunk_rows(n_features: int) -> int:
    """Rows per chunk when none is given: :data:`DEFAULT_CHUNK_ROWS`, fewer when a chunk of float32 rows
    would exceed :data:`CHUNK_BYTES` (Fashion-MNIST's 784 features: 334 rows). Training reads blocks of
    a few hundred rows in random order, and a read decompresses whole chunks (10,000 such rows: 28 ms
    per 200-row block, measured)."""
    return max(1, min(DEFAULT_CHUNK_ROWS, CHUNK_BYTES // (4 * max(n_features, 1))))


def create_split_arrays(
    path: Path, split: str, n_rows: int, n_features: int, chunk_rows: int, task: str, n_targets: int = 1
) -> None:
    """Create (or re-create) the empty ``<split>/X`` and ``<split>/y`` arrays of a store being written.

    Args:
        path: the store's (temporary) local directory; the root group is created if missing.
        split: ``"train"`` or ``"test"``.
        n_rows: number of rows of the split.
        n_features: number of columns of ``X``.
        chunk_rows: rows per chunk.
        task: ``"classification"`` or ``"regression"`` (sets the dtype of ``y``).
        n_targets: regression targets per row: ``y`` is ``(n_rows,)`` for one, ``(n_rows, n_targets)`` for more.
    """
    import zarr

    root = zarr.open_group(str(path), mode="a", zarr_format=3)
    group = root.require_group(split)
    group.create_array("X", shape=(n_rows, n_features), chunks=(chunk_rows, n_features),
                       dtype="float32", fill_value=0.0, overwrite=True)
    group.create_array("y", shape=target_shape(n_rows, n_targets), chunks=target_shape(chunk_rows, n_targets),
                       dtype=label_dtype(task), fill_value=0, overwrite=True)


def target_shape(n_rows: int, n_targets: int) -> tuple[int, ...]:
    """The shape of ``n_rows`` rows of ``y``: ``(n_rows,)`` for one target, ``(n_rows, n_targets)`` for more."""
    return (n_rows,) if n_targets == 1 else (n_rows, n_targets)


def write_chunk(path: Path, split: str, index: int, X: np.ndarray, y: np.ndarray) -> str:
    """Write chunk ``index`` of a split and return its digest (see :func:`chunk_digest`).

    Args:
        path: the store's local directory.
        split: ``"train"`` or ``"test"``.
        index: chunk number; the chunk covers rows ``index * chunk_rows`` onwards.
        X: (rows, D) values, cast to float32.
        y: (rows,) labels or targets (``(rows, P)`` for ``P`` targets), cast to the store's ``y`` dtype.

    Returns:
        The hex digest of the chunk as stored.
    """
    import zarr

    group = zarr.open_group(str(path), mode="r+")[split]
    X_arr, y_arr = group["X"], group["y"]
    start = index * X_arr.chunks[0]
    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=y_arr.dtype)
    X_arr[start:start + len(X)] = X
    y_arr[start:start + len(y)] = y
    return chunk_digest(X, y)


def finish_store(path: Path, attrs: Mapping[str, Any]) -> None:
    """Write the root attributes, the last step that makes a store complete.

    Args:
        path: the store's local directory, with all arrays written.
        attrs: every key of :data:`REQUIRED_ATTRS` (JSON-serialisable values).
    """
    missing = [key for key in REQUIRED_ATTRS if key not in attrs]
    if missing:
        raise ValueError(f"store attributes lack {missing}")
    import zarr

    zarr.open_group(str(path), mode="r+").attrs.update(dict(attrs))


FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]


class StoreAttrs(BaseModel):
    """The root attributes of a store, as :func:`open_store` accepts them (newer, unknown keys pass)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    schema_version: Literal[1]
    task: Literal["classification", "regression"]
    n_classes: int | None = Field(ge=2, le=MAX_CLASSES)
    feature_names: list[str] = Field(min_length=1)
    target_name: str | list[str]
    source: dict[str, Any]
    checksum: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    chunk_digests: dict[str, list[str]] | None = None
    x_mean: list[FiniteFloat]
    x_std: list[PositiveFloat]
    y_mean: FiniteFloat | list[FiniteFloat] | None
    y_std: PositiveFloat | list[PositiveFloat] | None
    split: str
    split_seed: int | None
    test_size: int | float | None
    n_train: int = Field(ge=1)
    n_test: int = Field(ge=0)
    class_counts: dict[str, list[int]] | None
    rows_dropped: dict[str, int]
    chunk_rows: int = Field(ge=1)
    created_at: str

    @model_validator(mode="after")
    def _consistent(self) -> "StoreAttrs":
        n_features = len(self.feature_names)
        for name in ("x_mean", "x_std"):
            if len(getattr(self, name)) != n_features:
                raise ValueError(f"attribute '{name}': expected {n_features} values (one per feature), "
                                 f"found {len(getattr(self, name))}")
        if (self.task == "classification") != (self.n_classes is not None):
            raise ValueError(f"attribute 'n_classes': expected a class count for classification and null for "
                             f"regression, found {self.n_classes!r} for {self.task}")
        if self.task == "regression" and (self.y_mean is None or self.y_std is None):
            raise ValueError("attributes 'y_mean', 'y_std': expected the training targets' mean and "
                             "deviation for regression, found null")
        check_chunk_rows(self.chunk_rows, n_features, "attribute 'chunk_rows'")
        self._check_targets()
        return self

    def _check_targets(self) -> None:
        """One target (a name, single statistics) or ``P ≥ 2`` regression targets (distinct names, ``P``
        statistics each)."""
        several = isinstance(self.target_name, list)
        if several and (self.task != "regression" or len(self.target_name) < 2
                        or len(set(self.target_name)) < len(self.target_name)):
            raise ValueError(f"attribute 'target_name': expected one name, or a list of at least 2 distinct "
                             f"regression targets, found {self.target_name!r} for {self.task}")
        for name in ("y_mean", "y_std"):
            value = getattr(self, name)
            if value is None:
                continue
            if several != isinstance(value, list) or (several and len(value) != len(self.target_name)):
                expected = f"{len(self.target_name)} values (one per target)" if several else "one value"
                raise ValueError(f"attribute '{name}': expected {expected} as 'target_name' names, found {value!r}")


def validated_attrs(path: str, attrs: Mapping[str, Any]) -> StoreAttrs:
    """``attrs`` as :class:`StoreAttrs`; InputError naming the first bad attribute otherwise."""
    try:
        return StoreAttrs(**attrs)
    except InputError as error:
        raise InputError(f"{path}: {error}") from None
    except ValidationError as error:
        first = error.errors()[0]
        if not first["loc"]:  # a whole-model check: its message names the attribute
            raise InputError(f"{path}: {first['msg'].removeprefix('Value error, ')}") from None
        name = first["loc"][0]
        where = "".join(f"[{part}]" for part in first["loc"][1:])
        if name in ("schema_version", "task"):
            expected = SCHEMA_VERSION if name == "schema_version" else f"one of {TASKS}"
            raise InputError(f"{path}: attribute '{name}': expected {expected}, found {attrs.get(name)!r}") from None
        raise InputError(f"{path}: attribute '{name}'{where}: {first['msg']} (found {first['input']!r})") from None


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
    def target_names(self) -> tuple[str, ...]:
        """Names of the targets: one, or the ``P`` columns of a multi-target ``y`` ``(rows, P)``."""
        return target_names(self._attrs)

    @property
    def n_targets(self) -> int:
        """Targets per row, ``P`` (1 for a classification store)."""
        return len(self.target_names)

    @property
    def transforms(self) -> Transforms:
        """How the rows were made from the source's (:mod:`pep_gp.pipeline.data.transforms`): the
        ``transforms`` attribute of a table's store, else the identity over :attr:`feature_names`."""
        return transforms_of(self)

    @property
    def chunk_rows(self) -> int:
        """Rows per chunk (the last chunk of a split may be shorter)."""
        return self._attrs["chunk_rows"]

    @property
    def chunks(self) -> StoreChunks:
        """Verified chunk reads, bound to this store's checksum (:mod:`pep_gp.pipeline.data.chunks`)."""
        return StoreChunks(self.path, self.checksum, self.chunk_rows, len(self.feature_names))

    def arrays(self, split: str) -> tuple[zarr.Array, zarr.Array]:
        """The lazy, read-only ``(X, y)`` Zarr arrays of ``split`` (``"train"`` or ``"test"``), unverified."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
        group = open_root(self.path)[split]
        return group["X"], group["y"]

    def n_rows(self, split: str) -> int:
        """Number of rows of ``split``."""
        return self._attrs["n_train" if split == "train" else "n_test"]

    def blocks(self, split: str, block_rows: int, targets: Any, standardize: bool = True, statistics: Any = None) -> Any:
        """The fixed-size training blocks of ``split`` (:class:`~pep_gp.pipeline.data.blocks.BlockSource`),
        standardised with ``statistics``' ``x_mean``/``x_std`` when given (a run's own), else the store's."""
        from .blocks import BlockSource  # JAX: not for ingest or --help

        return BlockSource.of(self, split, block_rows, targets, standardize, statistics)

    def n_chunks(self, split: str) -> int:
        """Number of chunks of ``split``."""
        return math.ceil(self.n_rows(split) / self.chunk_rows)

    def read_chunk(self, split: str, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Read chunk ``index`` of ``split`` into memory, checked against its digest.

        Returns:
            ``(X, y)``: (rows, D) float32 and (rows,) int32 or float32, ``rows <= chunk_rows``.

        Raises:
            InputError: the chunk does not match its digest (the store was modified).
        """
        if not 0 <= index < self.n_chunks(split):
            raise IndexError(f"{split} has {self.n_chunks(split)} chunks, no chunk {index}")
        return self.chunks.chunk(split, index)

    def verify(self) -> None:
        """Re-read every chunk and check it against its digest and ``checksum``; raise InputError on a mismatch."""
        for split in SPLITS:
            for index in range(self.n_chunks(split)):
                self.read_chunk(split, index)


def target_names(attrs: Mapping[str, Any]) -> tuple[str, ...]:
    """The target names of a store's attributes (``target_name``: one name or a list of them)."""
    name = attrs["target_name"]
    return tuple(name) if isinstance(name, list) else (name,)


def feature_order(store: Store, features: Sequence[str]) -> tuple[int, ...] | None:
    """Where each of a run's ``features`` is among ``store``'s columns, matched by name: a store ingested
    from a table whose columns came in another order holds the same features in another order, and its rows
    are read in the run's order through these positions (None: already in that order). What
    ``pep predict`` and ``pep evaluate`` both use on a store, so that neither scores a feature as another.

    Raises:
        InputError: the store lacks a feature of the run or holds one the run was not trained on, naming
            each of them.
    """
    found = store.feature_names
    if found == tuple(features):
        return None
    missing = [name for name in features if name not in found]
    extra = [name for name in found if name not in features]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing the run's feature{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"has {', '.join(map(repr, extra))}, which the run was not trained on")
        raise InputError(f"{store.path}: {'; '.join(parts)} (features are matched by name)")
    return tuple(found.index(name) for name in features)


def open_store(path: str | Path) -> Store:
    """Open and validate a pep store.

    Args:
        path: local directory or fsspec URL of the store.

    Returns:
        The validated :class:`Store`, a local path made absolute here: the store's path travels to Dask
        workers, which would resolve a relative one in their own working directories.

    Raises:
        InputError: the path is missing or not a Zarr format 3 group (Zarr v2 is refused), holds anything but
            regular files inside it (a symlink out, a FIFO, a device: :func:`check_received_tree`), the store is
            unfinished (attributes never written), of another schema version, its attributes are invalid
            (:class:`StoreAttrs`), its arrays do not match its attributes, or its ``transforms`` attribute
            is invalid or describes other features.
    """
    path = str(path)
    if "://" not in path and not Path(path).exists():
        raise InputError(f"{path}: no such store (run `pep ingest` to create it)")
    if "://" not in path and (Path(path) / ".zgroup").exists():
        raise InputError(f"{path}: a Zarr v2 store; pep reads only Zarr format 3 stores (`pep ingest` again)")
    if "://" not in path:
        check_received_tree(path)
    attrs = open_root(path).attrs.asdict()
    if "schema_version" not in attrs:
        raise InputError(f"{path}: unfinished store (its attributes were never written, so the "
                         "ingest did not complete); re-run `pep ingest ... --overwrite`")
    if attrs["schema_version"] != SCHEMA_VERSION:
        raise InputError(f"{path}: attribute 'schema_version': expected {SCHEMA_VERSION}, "
                         f"found {attrs['schema_version']!r}")
    missing = [key for key in REQUIRED_ATTRS if key not in attrs]
    if missing:
        raise InputError(f"{path}: unfinished store, attributes {missing} are missing")
    validated_attrs(path, attrs)
    root = open_root(path)
    for split in SPLITS:
        _check_split(root, path, split, attrs)
    store = Store(absolute(path), attrs)
    if store.transforms.feature_names != store.feature_names:
        raise InputError(f"{path}: attribute 'transforms' describes features {list(store.transforms.feature_names)}, "
                         f"not the store's {list(store.feature_names)}")
    return store


def _check_split(root: zarr.Group, path: str, split: str, attrs: Mapping[str, Any]) -> None:
    """Check that ``split``'s arrays exist and agree with the attributes; raise InputError if not."""
    import zarr

    n_rows = attrs["n_train" if split == "train" else "n_test"]
    n_features, n_targets = len(attrs["feature_names"]), len(target_names(attrs))
    expected = {
        "X": ((n_rows, n_features), np.dtype(np.float32), (attrs["chunk_rows"], n_features)),
        "y": (target_shape(n_rows, n_targets), label_dtype(attrs["task"]), target_shape(attrs["chunk_rows"], n_targets)),
    }
    for name, (shape, dtype, chunks) in expected.items():
        try:
            array = root[f"{split}/{name}"]
        except KeyError:
            raise InputError(f"{path}: array '{split}/{name}' is missing") from None
        if not isinstance(array, zarr.Array):
            raise InputError(f"{path}: '{split}/{name}': expected an array, found a group")
        found = (array.shape, array.dtype, array.chunks)
        if found != (shape, dtype, chunks):
            raise InputError(f"{path}: array '{split}/{name}': expected shape {shape}, dtype {dtype}, "
                             f"chunks {chunks}; found shape {array.shape}, dtype {array.dtype}, "
                             f"chunks {array.chunks}")
