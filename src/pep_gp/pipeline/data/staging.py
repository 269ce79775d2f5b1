"""Where a store is written before it is published: a locked hidden sibling, made durable and swapped in.

``pep ingest … --out DIR/NAME.zarr`` writes into ``DIR/.NAME.zarr.ingest-<id>`` while it holds an exclusive
``flock`` on ``DIR/.NAME.zarr.ingest-<id>.lock``. Publishing fsyncs every file and directory of the new store,
then exchanges it with the old store in one ``renameat2(RENAME_EXCHANGE)`` call (Linux ≥ 3.17; the
new store is simply renamed into place when there is no old one), and fsyncs the parent directory: a
reader, or a crash at any instant (SIGKILL, power loss), sees the whole old store or the whole new one,
never none and never a mix. The old store, now at the staging name, is removed with it. A staging
directory whose lock nobody holds belongs to an ingest that was killed: the next ingest into the same
store removes it. ``pep predict`` writes its output beside ``--out`` under the same kind of lock
(:func:`locked_sibling`), so the next predict to that output removes what a killed one left.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import glob
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from ..files import fsync, fsync_tree

_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # <fcntl.h>, <linux/fs.h>


def staging_name(out: Path) -> str:
    """The prefix of ``out``'s staging directories: ``.NAME.ingest-``."""
    return f".{out.name}.ingest-"


@contextlib.contextmanager
def locked_sibling(out: Path, prefix: str, suffix: str = "") -> Iterator[Path]:
    """A fresh name ``<prefix><id><suffix>`` beside ``out``, held by an exclusive ``flock`` on ``<name>.lock``
    while the block runs (after removing the abandoned siblings of ``prefix``, :func:`remove_abandoned`); the
    caller makes what it names (a staging directory, ``pep predict``'s unpublished output). Whatever is
    there on exit is removed, with the lock."""
    remove_abandoned(out, prefix)
    work = out.with_name(f"{prefix}{uuid.uuid4().hex[:8]}{suffix}")
    lock = _lock_path(work)
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield work
    finally:
        _remove(work)
        lock.unlink(missing_ok=True)
        os.close(descriptor)


@contextlib.contextmanager
def staging_directory(out: Path) -> Iterator[Path]:
    """A fresh, locked staging directory beside ``out`` (after removing abandoned ones); removed on exit,
    with whatever it holds then (an unpublished store, or the old store a publish swapped out)."""
    with locked_sibling(out, staging_name(out)) as work:
        work.mkdir()
        yield work


def remove_abandoned(out: Path, prefix: str | None = None) -> list[Path]:
    """Remove the siblings of ``out`` named ``<prefix>…`` (default: its staging directories) that no running
    process holds (their lock is free, or they have none: a process killed, even by SIGKILL); return them."""
    removed = []
    for path in sorted(out.parent.glob(glob.escape(staging_name(out) if prefix is None else prefix) + "*")):
        if path.name.endswith(".lock"):
            continue
        lock = _lock_path(path)
        if lock.exists():
            with _try_lock(lock) as free:
                if not free:
                    continue  # a running process is writing it
                _remove(path)
                lock.unlink(missing_ok=True)
        else:
            _remove(path)
        removed.append(path)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def swap_into_place(work: Path, out: Path) -> None:
    """Make the finished store ``work`` durable and put it at ``out`` atomically; an old store at ``out``
    moves to ``work`` (see the module docstring).

    Raises:
        OSError: the file system refused the rename (e.g. ``out`` appeared meanwhile).
    """
    fsync_tree(work)
    if out.exists():
        exchange(work, out)
    else:
        os.rename(work, out)
    fsync(out.parent)


def exchange(a: Path, b: Path) -> None:
    """Swap two paths atomically (``renameat2(RENAME_EXCHANGE)``).

    On a file system without it the swap takes three renames and is not atomic: a crash between them can
    leave nothing at ``b`` (the staging leftovers are removed by the next ingest).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "renameat2"):
        if libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), str(b))
    aside = a.with_name(a.name + ".old")
    os.rename(b, aside)
    os.rename(a, b)
    os.rename(aside, a)


def _lock_path(work: Path) -> Path:
    return work.with_name(work.name + ".lock")


@contextlib.contextmanager
def _try_lock(path: Path) -> Iterator[bool]:
    """Whether an exclusive lock on ``path`` could be taken (held for the block when it could)."""
    try:
        descriptor = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(descriptor)
