"""Crash-safe, verified checkpoints.

Layout of a run directory::

    run_dir/checkpoints/step-00001234/     a Zarr v3 group: one array per pytree leaf
                        step-00001234/manifest.json   written last; its presence marks completion

A checkpoint is written as: remove any leftover of an interrupted write of the same step, write the
arrays, fsync them, then write the manifest to a temporary name, fsync it, rename it atomically into
place and fsync the directory. A process killed at any instant (kill -9 included) therefore leaves
either a complete checkpoint or a directory without a manifest, which readers ignore.

The manifest holds, for every leaf, its tree path, shape, dtype and the SHA-256 of its bytes, plus the
caller's metadata (step, config, dataset checksum, history…), as strict JSON (:mod:`pep_gp.pipeline.jsonio`).
Nothing in a checkpoint is trusted before it is checked: every file under ``checkpoints/`` must be a regular
file inside it (no symlink out, FIFO or device), the manifest's own fields are validated
(:class:`CheckpointManifest`), a leaf's shape must be the one the caller's template needs and the
array's Zarr metadata must agree with the manifest *before* the array is read (so no header sizes an
allocation), and the bytes must match their digest. :func:`restore` takes the newest checkpoint that
passes; a newer one that fails (a truncated or damaged file) is skipped with a
:class:`CheckpointWarning`, and when checkpoints exist but every one fails it raises, rather than let a
resumed run silently start again from step 0. After every save only the newest ``keep`` *intact*
checkpoints are kept (a damaged one is never counted, so it never displaces a good one).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import re
import shutil
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import jax
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import InputError
from ..files import check_received_tree, fsync, fsync_tree
from ..jsonio import dumps

if TYPE_CHECKING:  # imported where a checkpoint is written or read: a fit without one never loads Zarr
    import zarr

MANIFEST = "manifest.json"
FORMAT = 1
MAX_CHECKPOINT_BYTES = 8 * 2**30
"""The most bytes the leaves of one checkpoint may hold, as its manifest describes them: a leaf is read only
when its Zarr metadata agrees with the manifest, so this bounds what restoring a received checkpoint can
allocate (a checkpoint of pep's models at their largest settings holds far less)."""
_NAME = re.compile(r"step-(\d{8})")


class CheckpointWarning(UserWarning):
    """A checkpoint was found damaged or incomplete and an older one is used instead."""


@dataclass(frozen=True)
class Restored:
    """A loaded checkpoint: its ``step``, the pytrees by name, the caller's metadata and its path."""

    step: int
    trees: dict[str, Any]
    meta: dict[str, Any]
    path: Path


class LeafEntry(BaseModel):
    """One array of a checkpoint as its manifest describes it."""

    path: str
    shape: list[Annotated[int, Field(ge=0)]] = Field(max_length=32)
    dtype: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class CheckpointManifest(BaseModel):
    """The fields of a manifest this module reads (the caller's metadata passes unchecked: see
    :mod:`pep_gp.pipeline.runs.manifest`)."""

    model_config = ConfigDict(extra="allow")

    format: int
    step: int = Field(ge=0)
    leaves: dict[str, list[LeafEntry]]

    @model_validator(mode="after")
    def _bounded(self) -> "CheckpointManifest":
        total = 0
        for name, entries in self.leaves.items():
            for entry in entries:
                try:
                    itemsize = np.dtype(entry.dtype).itemsize
                except TypeError:
                    raise ValueError(f"'{name}{entry.path}' has dtype {entry.dtype!r}, not a NumPy dtype") from None
                total += math.prod(entry.shape) * itemsize
        if total > MAX_CHECKPOINT_BYTES:
            raise ValueError(f"its leaves claim {total:,} bytes, more than the {MAX_CHECKPOINT_BYTES // 2**30} GiB "
                             "a checkpoint may hold")
        return self


def one_line(error: ValidationError, what: str) -> str:
    """A pydantic error as one line: ``<what> field 'a.b': <message>`` for its first problem (``<what>:
    <message>`` for a check of the whole model)."""
    first = error.errors()[0]
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    if not first["loc"]:  # a whole-model check: its message says what is wrong
        return f"{what}: {first['msg'].removeprefix('Value error, ')}{more}"
    return f"{what} field '{'.'.join(map(str, first['loc']))}': {first['msg'].removeprefix('Value error, ')}{more}"


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def save(run_dir: Path, step: int, trees: Mapping[str, Any], meta: Mapping[str, Any], keep: int) -> Path:
    """Write the checkpoint of ``step`` (pytrees ``trees`` and JSON-able ``meta``), then prune.

    Returns:
        The checkpoint's directory.
    """
    root = checkpoint_dir(run_dir)
    path = root / f"step-{step:08d}"
    if path.exists():
        shutil.rmtree(path)  # an interrupted write of this step (a complete one is never rewritten)
    root.mkdir(parents=True, exist_ok=True)
    leaves: dict[str, list[dict[str, Any]]] = {}
    arrays: dict[str, list[np.ndarray]] = {}
    for name, tree in trees.items():
        leaves[name], arrays[name] = [], []
        for key_path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            array = np.asarray(jax.device_get(leaf))
            arrays[name].append(array)
            leaves[name].append({"path": jax.tree_util.keystr(key_path), "shape": list(array.shape),
                                 "dtype": array.dtype.str, "sha256": _digest(array)})
    from zarr.core.sync import sync as zarr_sync  # Zarr's own event loop (also where one already runs: a notebook)

    zarr_sync(_write_arrays(path, arrays))
    fsync_tree(path)
    manifest = {"format": FORMAT, "step": step, "leaves": leaves, **meta}
    temporary = path / f".{MANIFEST}.tmp"
    with open(temporary, "w") as handle:
        handle.write(dumps(manifest))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path / MANIFEST)
    fsync(path)
    fsync(root)
    prune(run_dir, keep, path)
    return path


async def _write_arrays(path: Path, arrays: Mapping[str, list[np.ndarray]]) -> None:
    """The Zarr group at ``path``: a group per tree, an array per leaf (``name/0000``, …), all written at
    once — one round trip to Zarr's event loop, not a few per array (the latency of a checkpoint of small leaves)."""
    import zarr.api.asynchronous

    group = await zarr.api.asynchronous.open_group(str(path), mode="w", zarr_format=3)
    trees = [await group.create_group(name) for name in arrays]
    await asyncio.gather(*(tree.create_array(f"{index:04d}", data=array)
                           for tree, leaves in zip(trees, arrays.values()) for index, array in enumerate(leaves)))


def _steps(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint directory, newest first (complete or not), once the
    checkpoints are checked to be regular files inside ``run_dir/checkpoints`` (:func:`check_received_tree`).
    """
    root = checkpoint_dir(run_dir)
    if root.is_symlink():
        raise InputError(f"{root}: a symlink to {root.resolve()}; pep reads only the checkpoints inside a run directory")
    if not root.is_dir():
        return []
    check_received_tree(root)
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.fullmatch(p.name)) and p.is_dir()]
    return sorted(found, reverse=True)


def has_checkpoints(run_dir: Path) -> bool:
    """True when any checkpoint of ``run_dir`` has a manifest."""
    return any((path / MANIFEST).exists() for _, path in _steps(run_dir))


def prune(run_dir: Path, keep: int, newest: Path) -> None:
    """Keep the newest ``keep`` intact checkpoints; remove older ones, and any damaged or incomplete one
    older than an intact one. ``newest`` is the checkpoint just written (intact by construction); the
    others are intact when their manifest and every array check out against it (same leaves, shapes and
    dtypes, digests matching), so reading one allocates no more than ``newest`` holds."""
    reference = read_manifest(newest)["leaves"]
    intact = 0
    for _, path in _steps(run_dir):
        if intact >= keep:  # older than the newest `keep` intact ones: removed, intact or not (nothing to read)
            shutil.rmtree(path)
        elif path == newest or _is_intact(path, reference):
            intact += 1
            if intact > keep:
                shutil.rmtree(path)
        elif intact:
            shutil.rmtree(path)


def _is_intact(path: Path, reference: Mapping[str, Any]) -> bool:
    """Whether the checkpoint at ``path`` has a valid manifest with the leaves of ``reference`` and every
    array matching its digest."""
    try:
        manifest = read_manifest(path)
        described = lambda leaves: {name: [(e["path"], e["shape"], e["dtype"]) for e in entries]
                                    for name, entries in leaves.items()}
        if described(manifest["leaves"]) != described(reference):
            return False
        group = _opened(path)
        for name, entries in manifest["leaves"].items():
            for index, entry in enumerate(entries):
                _read_leaf(group, name, index, entry)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError):
        return False
    return True


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the checkpoint at ``path``, its own fields validated; raises OSError/ValueError
    (one line) if missing or damaged, InputError if another format version."""
    manifest = json.loads((path / MANIFEST).read_text())
    if not isinstance(manifest, dict):
        raise ValueError(f"expected a JSON object, found {type(manifest).__name__}")
    try:
        checked = CheckpointManifest(**manifest)
    except ValidationError as error:
        raise ValueError(one_line(error, "manifest")) from None
    if checked.format != FORMAT:  # another version of pep wrote it: not damage, so not skipped
        raise InputError(f"{path}: checkpoint format {checked.format!r}; this version of pep reads format {FORMAT} "
                         "(use the pep version that wrote it, or train again)")
    if _NAME.fullmatch(path.name) and int(path.name.removeprefix("step-")) != checked.step:
        raise ValueError(f"manifest field 'step': {checked.step}, but the checkpoint is {path.name}")
    return manifest


def newest_manifest(run_dir: Path, check: Callable[[dict[str, Any]], Any] = lambda manifest: None
                    ) -> dict[str, Any] | None:
    """The manifest of the newest checkpoint that has a valid one (``check`` raises ValueError for the
    caller's own fields; arrays not verified), or None."""
    for _, path in _steps(run_dir):
        try:
            manifest = read_manifest(path)
            check(manifest)
            return manifest
        except (OSError, ValueError):
            continue
    return None


def _opened(path: Path) -> zarr.Group:
    """The checkpoint's Zarr group at ``path``, read only."""
    import zarr

    return zarr.open_group(str(path), mode="r", zarr_format=3)


def _read_leaf(group: zarr.Group, name: str, index: int, entry: Mapping[str, Any]) -> np.ndarray:
    """Leaf ``index`` of tree ``name``, after its Zarr metadata agrees with the manifest's ``entry`` (no
    allocation a damaged header sizes) and before it is returned, its bytes with the entry's digest."""
    import zarr

    array = group[f"{name}/{index:04d}"]
    if not isinstance(array, zarr.Array):
        raise ValueError(f"'{name}/{index:04d}' is not an array")
    if (list(array.shape), np.dtype(array.dtype).str) != (list(entry["shape"]), entry["dtype"]):
        raise ValueError(f"array '{name}/{index:04d}' has shape {list(array.shape)}, dtype {np.dtype(array.dtype).str}; "
                         f"its manifest says shape {entry['shape']}, dtype {entry['dtype']}")
    values = np.asarray(array[...])
    if _digest(values) != entry["sha256"]:
        raise ValueError(f"array '{name}/{index:04d}' does not match its digest (truncated?)")
    return values


def _load(path: Path, manifest: Mapping[str, Any], templates: Mapping[str, Any]) -> dict[str, Any]:
    """The pytrees of a checkpoint, shaped like ``templates``; ValueError if anything disagrees."""
    group = _opened(path)
    trees = {}
    for name, template in templates.items():
        template_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
        entries = manifest["leaves"].get(name, [])
        if len(entries) != len(template_leaves):
            raise ValueError(f"'{name}' has {len(entries)} leaves, the model needs {len(template_leaves)}")
        values = []
        for index, (entry, (key_path, leaf)) in enumerate(zip(entries, template_leaves)):
            expected = (jax.tree_util.keystr(key_path), list(np.shape(leaf)))
            if (entry["path"], entry["shape"]) != expected:
                raise ValueError(f"'{name}{entry['path']}' has shape {entry['shape']}, the model needs "
                                 f"'{name}{expected[0]}' with shape {expected[1]}")
            values.append(_read_leaf(group, name, index, entry))
        trees[name] = jax.tree_util.tree_unflatten(treedef, values)
    return trees


LISTINGS = 20
"""How many times :func:`restore` lists a run's checkpoints again when a writer removed what it was reading."""


def restore(run_dir: Path, templates: Callable[[dict[str, Any]], Mapping[str, Any]]) -> Restored | None:
    """The newest complete, intact checkpoint of ``run_dir``, or None if it has none at all.

    A reader may run beside the writer (``pep_gp.load`` or ``pep predict`` while ``pep train`` checkpoints),
    whose pruning removes a checkpoint only once a newer one is complete: when nothing listed could be
    read and the listing has changed meanwhile (a checkpoint added, removed, or its manifest written), the
    failures are the writer's doing, not damage, so the new listing is read instead (up to
    :data:`LISTINGS` times); a checkpoint read in such a listing warns of nothing it skipped.

    Args:
        run_dir: the run directory.
        templates: maps a manifest to the pytrees to restore (same structure and shapes), so that
            the caller can refuse an incompatible checkpoint by raising InputError before any array is
            read; any other ValueError it raises (e.g. a missing or mistyped field of the caller's
            metadata) marks the checkpoint as damaged.

    Warns:
        CheckpointWarning: for every newer checkpoint skipped because it is damaged or incomplete.

    Raises:
        InputError: checkpoints exist, but every one that was completed is damaged (an interrupted
            write, with no manifest, is not a checkpoint: with only those, None is returned), or they kept
            changing while read.
    """
    for _ in range(LISTINGS):
        listed = _listing(run_dir)
        if listed is None:
            continue
        restored, skipped = _newest_intact(listed, templates)
        if skipped and _listing(run_dir) != listed:  # a writer saved and pruned meanwhile
            if restored is None:
                continue  # read the new listing
            skipped = []  # what was skipped was being written or removed
        for path, reason, _ in skipped:
            warnings.warn(f"checkpoint {path} skipped: {reason}; trying the previous one",
                          CheckpointWarning, stacklevel=2)
        damaged = [f"{path.name}: {reason}" for path, reason, is_damage in skipped if is_damage]
        if restored is None and damaged:
            raise InputError(f"{run_dir}: no intact checkpoint to continue from ({'; '.join(damaged)}); move "
                             f"{checkpoint_dir(run_dir)} aside to start again from step 0, or use a new --run-dir")
        return restored
    raise InputError(f"{run_dir}: its checkpoints changed {LISTINGS} times while they were read (another process "
                     "saving into the run directory); try again")


def _listing(run_dir: Path) -> list[tuple[int, Path, bool]] | None:
    """``(step, path, has a manifest)`` of each checkpoint (:func:`_steps`), or None when an entry was
    removed while it was checked (a writer pruning)."""
    try:
        return [(step, path, (path / MANIFEST).exists()) for step, path in _steps(run_dir)]
    except FileNotFoundError:
        return None


def _newest_intact(listed: list[tuple[int, Path, bool]], templates: Callable[[dict[str, Any]], Mapping[str, Any]]
                   ) -> tuple[Restored | None, list[tuple[Path, str, bool]]]:
    """The newest intact checkpoint of those ``listed`` (None if none), and ``(path, reason, damaged)`` of
    each newer one skipped (``damaged`` False: it has no manifest yet, its write interrupted or under way)."""
    skipped = []
    for step, path, _ in listed:
        try:
            manifest = read_manifest(path)
        except FileNotFoundError:
            skipped.append((path, "it has no manifest (its write was interrupted)", False))
            continue
        except (OSError, ValueError) as error:
            skipped.append((path, f"its manifest is damaged ({error})", True))
            continue
        try:
            return Restored(step, _load(path, manifest, templates(manifest)), manifest, path), skipped
        except InputError:
            raise
        except (OSError, ValueError, KeyError, RuntimeError, TypeError) as error:
            skipped.append((path, f"it is damaged ({error})", True))
    return None, skipped
