"""Where a store is written before it is published: a locked hidden sibling, made durable and swapped in.

``pep ingest … --out DIR/NAME.zarr`` writes into ``DIR/.NAME.zarr.ingest-<id>`` while it holds an exclusive
``flock`` on ``DIR/.NAME.zarr.ingest-<id>.lock``. Publishing fsyncs every file and directory of the new store,
then exchanges it with the old store in one ``renameat2(RENAME_EXCHANGE)`` call (Linux ≥ 3.17; the
new store is simply renamed into place when there is no old one), and fsyncs the parent directory: a
reader, or a crash at any instant (SIGKILL, power loss), sees the whole old store or the whole new one,
never none and never a mix. The old store, now at the staging name, is removed with it. A staging
directory whose lock nobody holds belongs to an ingest that was killed: the next ingest into the same
store removes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
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
def staging_directory(out: Path) -> Iterator[Path]:
    """A fresh, locked staging directory beside ``out`` (after removing abandoned ones); removed on exit,
    with whatever it holds then (an unpublished store, or the old store a publish swapped out)."""
    remove_abandoned(out)
    work = out.with_name(f"{staging_name(out)}{uuid.uuid4().hex[:8]}")
    lock = _lock_path(work)
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        work.mkdir()
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock.unlink(missing_ok=True)
        os.close(descriptor)


def remove_abandoned(out: Path) -> list[Path]:
    """Remove the staging directories of ``out`` that no running ingest holds; return them."""
    removed = []
    for path in sorted(out.parent.glob(f"{staging_name(out)}*")):
        if path.suffix == ".lock" or not path.is_dir():
            continue
        lock = _lock_path(path)
        if lock.exists():
            with _try_lock(lock) as free:
                if not free:
                    continue  # an ingest is writing it
                shutil.rmtree(path, ignore_errors=True)
                lock.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


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
