"""Durable writes: what is fsynced is on disk (its data, and its name in its directory) before anything is
published that points at it (a checkpoint's manifest, a store swapped into place)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync(path: Path) -> None:
    """fsync one file or directory (a directory's fsync makes the names it holds durable)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory, deepest first (so their entries are durable)."""
    directories = [root]
    for path in sorted(root.rglob("*")):
        if path.is_dir():
            directories.append(path)
        else:
            fsync(path)
    for directory in sorted(directories, key=lambda p: len(p.parts), reverse=True):
        fsync(directory)
