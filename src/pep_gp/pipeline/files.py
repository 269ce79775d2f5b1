"""Durable writes: what is fsynced is on disk (its data, and its name in its directory) before anything is
published that points at it (a checkpoint's manifest, a store swapped into place); a finished file
published under a name nobody else has taken (:func:`publish_new`); and SIGTERM turned into an exception for
a block that must clean up (:func:`sigterm_as_exit`)."""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
