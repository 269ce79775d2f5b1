"""Thread settings every process that computes blocks runs under (why: :mod:`pep_gp.pipeline.engine`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from threadpoolctl import threadpool_limits

COMPUTE_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Environment of the worker processes pep starts: one BLAS/OpenMP thread (with ``threads_per_worker=1``
this keeps W workers from oversubscribing the cores). XLA keeps its defaults, see the module docstring."""


def pin_compute_threads() -> None:
    """Apply :data:`COMPUTE_ENV` to this whole process (a worker) and limit loaded BLAS pools."""
    os.environ.update(COMPUTE_ENV)
    threadpool_limits(1)


_THREADS_LIMITED: ContextVar[bool] = ContextVar("pep_threads_limited", default=False)


def hold_compute_threads() -> None:
    """Start of a worker's compute thread: :func:`pin_compute_threads` for the whole process, so that
    :func:`compute_threads` in this thread costs nothing (no threadpoolctl scan per call)."""
    pin_compute_threads()
    _THREADS_LIMITED.set(True)


@contextmanager
def compute_threads() -> Iterator[None]:
    """Context manager: one BLAS/LAPACK thread for the enclosed block (scoped; see the module
    docstring for why every backend computes under it). Nested uses cost nothing (threadpoolctl scans
    the loaded libraries, ~4 ms, so the trainer limits once per run, not once per block)."""
    if _THREADS_LIMITED.get():
        yield
        return
    token = _THREADS_LIMITED.set(True)
    try:
        with threadpool_limits(1):
            yield
    finally:
        _THREADS_LIMITED.reset(token)
