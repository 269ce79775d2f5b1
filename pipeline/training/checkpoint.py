"""Crash-safe checkpoints (DESIGN §5).

Layout of a run directory::

    run_dir/checkpoints/step-00001234/     a Zarr v3 group: one array per pytree leaf
                        step-00001234/manifest.json   written last; its presence marks completion

A checkpoint is written as: remove any leftover of an interrupted write of the same step, write the
arrays, fsync them, then write the manifest to a temporary name, fsync it, rename it atomically into
place and fsync the directory. A process killed at any instant (kill -9 included) therefore leaves
either a complete checkpoint or a directory without a manifest, which readers ignore.

The manifest holds, for every leaf, its tree path, shape, dtype and the SHA-256 of its bytes, plus the
caller's metadata (step, config, dataset checksum, history…). :func:`restore` takes the newest
checkpoint whose manifest parses and whose arrays match their digests; a newer one that fails (a
truncated or damaged file) is skipped with a :class:`CheckpointWarning`. After every save only the
newest ``keep`` complete checkpoints are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import zarr

MANIFEST = "manifest.json"
FORMAT = 1
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


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    leaves: dict[str, list[dict[str, Any]]] = {}
    for name, tree in trees.items():
        entries = leaves[name] = []
        for index, (key_path, leaf) in enumerate(jax.tree_util.tree_flatten_with_path(tree)[0]):
            array = np.asarray(jax.device_get(leaf))
            group.create_array(f"{name}/{index:04d}", data=array)
            entries.append({"path": jax.tree_util.keystr(key_path), "shape": list(array.shape),
                            "dtype": array.dtype.str, "sha256": _digest(array)})
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        _fsync(file)
    manifest = {"format": FORMAT, "step": step, "leaves": leaves, **meta}
    temporary = path / f".{MANIFEST}.tmp"
    with open(temporary, "w") as handle:
        json.dump(manifest, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path / MANIFEST)
    _fsync(path)
    _fsync(root)
    prune(run_dir, keep)
    return path


def _steps(run_dir: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint directory, newest first (complete or not)."""
    root = checkpoint_dir(run_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.fullmatch(p.name)) and p.is_dir()]
    return sorted(found, reverse=True)


def has_checkpoints(run_dir: Path) -> bool:
    """True when any checkpoint of ``run_dir`` has a manifest."""
    return any((path / MANIFEST).exists() for _, path in _steps(run_dir))


def prune(run_dir: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints with a manifest; remove older ones and any manifest-less
    leftover older than the newest complete one."""
    complete = 0
    for _, path in _steps(run_dir):
        if (path / MANIFEST).exists():
            complete += 1
            if complete > keep:
                shutil.rmtree(path)
        elif complete:
            shutil.rmtree(path)


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the checkpoint at ``path``; raises OSError/ValueError if missing or damaged."""
    manifest = json.loads((path / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"checkpoint format {manifest.get('format')!r}, expected {FORMAT}")
    return manifest


def newest_manifest(run_dir: Path) -> dict[str, Any] | None:
    """The manifest of the newest checkpoint that has a readable one (arrays not verified), or None."""
    for _, path in _steps(run_dir):
        try:
            return read_manifest(path)
        except (OSError, ValueError):
            continue
    return None


def _load(path: Path, manifest: Mapping[str, Any], templates: Mapping[str, Any]) -> dict[str, Any]:
    """The pytrees of a checkpoint, shaped like ``templates``; ValueError if anything disagrees."""
    group = zarr.open_group(str(path), mode="r")
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
            array = np.asarray(group[f"{name}/{index:04d}"][...])
            if array.dtype.str != entry["dtype"] or _digest(array) != entry["sha256"]:
                raise ValueError(f"array '{name}/{index:04d}' does not match its digest (truncated?)")
            values.append(array)
        trees[name] = jax.tree_util.tree_unflatten(treedef, values)
    return trees


def restore(run_dir: Path, templates: Callable[[dict[str, Any]], Mapping[str, Any]]) -> Restored | None:
    """The newest complete, intact checkpoint of ``run_dir``, or None if there is none.

    Args:
        run_dir: the run directory.
        templates: maps a manifest to the pytrees to restore (same structure and shapes), so that
            the caller can refuse an incompatible checkpoint by raising before any array is read.

    Warns:
        CheckpointWarning: for every newer checkpoint skipped because it is damaged or incomplete.
    """
    for step, path in _steps(run_dir):
        try:
            manifest = read_manifest(path)
        except FileNotFoundError:
            reason = "it has no manifest (its write was interrupted)"
        except (OSError, ValueError) as error:
            reason = f"its manifest is damaged ({error})"
        else:
            wanted = templates(manifest)
            try:
                return Restored(step, _load(path, manifest, wanted), manifest, path)
            except (OSError, ValueError, KeyError, RuntimeError) as error:
                reason = f"it is damaged ({error})"
        warnings.warn(f"checkpoint {path} skipped: {reason}; trying the previous one",
                      CheckpointWarning, stacklevel=2)
    return None
