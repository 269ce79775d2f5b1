"""One writer per run directory: an exclusive ``flock`` held while a process trains or evaluates into it.

Two ``pep train`` runs into one directory would prune each other's checkpoints and interleave their
steps; :func:`hold_run_dir` refuses the second one at once, naming the process that holds the directory.
The lock is the kernel's (``flock(2)`` on ``RUN_DIR/.pep.lock``), so it is released when its holder
exits, however it exits (SIGKILL included): a run killed mid-step can be resumed straight away. It is
re-entrant within a process (the flow holds it across its training segments, each segment takes it
again). The lock file is never removed: removing it would let two processes lock two different files.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ..errors import InputError

LOCK_FILE = ".pep.lock"

_guard = threading.Lock()
_held: dict[Path, list[int]] = {}  # resolved run directory -> [file descriptor, depth]


@contextlib.contextmanager
def hold_run_dir(run_dir: Path, what: str = "pep train", create: bool = True) -> Iterator[None]:
    """Hold ``run_dir``'s lock for the block.

    Args:
        run_dir: the run directory.
        what: what this process does there, recorded in the lock file for a refused second writer.
        create: create the directory if it does not exist (a training run), else refuse (an evaluation).

    Raises:
        InputError: another process holds the lock, or the directory is missing and not to be created.
    """
    key = Path(run_dir).resolve()
    with _guard:
        if key in _held:
            _held[key][1] += 1
        else:
            _held[key] = [_acquire(key, what, create), 1]
    try:
        yield
    finally:
        with _guard:
            _held[key][1] -= 1
            if _held[key][1] == 0:
                os.close(_held.pop(key)[0])  # closing the descriptor releases the flock


def _acquire(run_dir: Path, what: str, create: bool) -> int:
    if not create and not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory (train first with `pep train`)")
    run_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 200, 0).decode(errors="replace").strip() or "another process"
        os.close(descriptor)
        raise InputError(f"{run_dir}: in use by {holder}; wait for it to finish (or stop it), or use "
                         "another --run-dir") from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{what} (pid {os.getpid()})".encode(), 0)
    return descriptor
