"""Durable writes: what is fsynced is on disk (its data, and its name in its directory) before anything is
published that points at it (a checkpoint's manifest, a store swapped into place); a finished file
published under a name nobody else has taken (:func:`publish_new`); SIGTERM turned into an exception for
a block that must clean up (:func:`sigterm_as_exit`); and a received directory (a store, a run's
checkpoints) checked to hold only regular files inside it before anything in it is read
(:func:`check_received_tree`)."""

from __future__ import annotations

import errno
import os
import signal
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import InputError

MAX_METADATA_BYTES = 256 * 2**20
"""The largest JSON file (a Zarr ``zarr.json``, a checkpoint's ``manifest.json``) read from a received
directory: each is read whole, so this bounds what reading one can allocate."""


def absolute(path: str | Path) -> str:
    """A local path made absolute from this process's working directory; a URL (``scheme://…``) as it is.
    For paths that travel: a Dask worker, or a flow run's sub-flow in another directory, would resolve a
    relative one against its own working directory, and an error naming it would not say where it looked."""
    path = str(path)
    return path if "://" in path else str(Path(path).absolute())


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


def publish_new(source: Path, target: Path) -> None:
    """Give the finished ``source`` the name ``target`` only while no file or directory has it, so that
    nothing another process published there meanwhile is replaced (``os.replace`` would, silently).

    A file is hard-linked as ``target`` (``link`` fails with ``EEXIST`` on any existing name), then its
    temporary name removed (on a file system without hard links: renamed after checking the name is free,
    which a writer between the two steps could still lose); a directory is renamed, which the kernel
    refuses onto a file or a non-empty directory (an empty one, which holds nothing to lose, is replaced).

    Raises:
        FileExistsError: ``target`` exists; ``source`` is left for the caller to remove.
    """
    try:
        if source.is_dir():
            os.rename(source, target)
            return
        try:
            os.link(source, target)
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            if os.path.lexists(target):
                raise FileExistsError(errno.EEXIST, "already exists", str(target)) from None
            os.rename(source, target)
        else:
            source.unlink()
    except OSError as error:
        if isinstance(error, FileExistsError) or error.errno in (errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise FileExistsError(errno.EEXIST, "already exists", str(target)) from None
        raise


@contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit(143)``, so that its ``finally`` clauses remove what it
    half-wrote: Python's default for SIGTERM ends the process at once, running none of them.

    Only where the handler is Python's default and this is the main thread (the only one that may set a
    handler); a handler someone else set (Prefect's, Dask's) is theirs to keep. SIGKILL cannot be caught.
    """
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def check_received_tree(root: str | Path) -> None:
    """InputError unless everything under ``root`` (a store or a run's checkpoints, which may come from
    anywhere) is a directory or a regular file inside ``root``, and no JSON file is over
    :data:`MAX_METADATA_BYTES`: a symlink to ``/dev/zero`` or to another user's file, a FIFO (whose read
    never ends) or a device would otherwise be read as one of its files. A symlink is followed only to
    check it stays inside ``root`` (``root`` itself may be one: the user named it).

    Raises:
        InputError: naming the entry and what it is.
    """
    inside = os.path.realpath(root)
    for directory, subdirectories, files in os.walk(root):  # a symlinked directory is listed, not entered
        for name in (*subdirectories, *files):
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                target = os.path.realpath(path)
                if os.path.commonpath([inside, target]) != inside:
                    raise InputError(f"{path}: a symlink to {target}, outside {root}; pep reads only the regular "
                                     "files inside a store or run directory")
                try:
                    info = os.stat(path)
                except OSError:
                    raise InputError(f"{path}: a symlink to {target}, which does not exist") from None
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode):
                kind = ("a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode)
                        else "a device")
                raise InputError(f"{path}: {kind}, not a regular file; pep reads only the regular files inside "
                                 "a store or run directory")
            if name.endswith(".json") and info.st_size > MAX_METADATA_BYTES:
                raise InputError(f"{path}: {info.st_size:,} bytes, more than the {MAX_METADATA_BYTES // 2**20} MiB "
                                 "a metadata file of pep may have")
