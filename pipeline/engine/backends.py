"""Backends: where blocks are computed — this process, or the workers of a Dask cluster."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, Callable, Protocol

import jax
from distributed.diagnostics.plugin import WorkerPlugin

from ..data.blocks import BlockSource
from .cache import evaluate_blocks
from .threads import pin_compute_threads

log = logging.getLogger(__name__)

STEP_ATTEMPTS = 3  # a step whose tasks fail (lost workers or scheduler, closed connections) is re-run this often


class Backend(Protocol):
    """Where blocks are computed."""

    description: str

    @property
    def n_workers(self) -> int:
        """Processes that compute (1 in-process)."""

    def evaluate(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        """Per-block results of ``fn``, in the order of ``blocks``."""

    def map_ordered(self, fn: Callable, items: Iterable, window: int) -> Iterator:
        """``fn(item)`` for each item, yielded in the items' order, with at most ``window`` items taken
        from ``items`` and not yet yielded (memory stays bounded whatever their number)."""

    def close(self) -> None:
        """Release what the backend started."""


class InProcess:
    """Computes every block in this process."""

    description = "in-process"
    n_workers = 1

    def evaluate(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        return evaluate_blocks(fn, params, source, blocks, to_host=False)

    def map_ordered(self, fn: Callable, items: Iterable, window: int = 1) -> Iterator:
        return map(fn, items)

    def close(self) -> None:
        pass


class ComputeSetup(WorkerPlugin):
    """Dask worker plugin: pins the compute threads on every worker, also ones that join later or
    are restarted by their nanny (workers started outside pep, e.g. ``dask worker``, included)."""

    name = "pep-compute-setup"

    def setup(self, worker: Any) -> None:
        pin_compute_threads()


class OneCorePerWorker(WorkerPlugin):
    """Dask worker plugin for ``local:N:pinned``: worker ``i`` of a LocalCluster runs on core
    ``i mod cores`` only. Set before the worker's first task, so XLA sizes its pool to one thread."""

    name = "pep-one-core-per-worker"

    def setup(self, worker: Any) -> None:
        os.sched_setaffinity(0, {int(worker.name) % os.cpu_count()})


class DaskBackend:
    """Computes blocks on the workers of a Dask cluster (see the module docstring).

    Args:
        client: a connected ``distributed.Client``.
        description: how the cluster was given (``local:2``, ``tcp://…``), for reports.
        cluster: a cluster this backend started and closes, or None.
    """

    def __init__(self, client: Any, description: str, cluster: Any = None):
        self.client, self.description, self.cluster = client, description, cluster
        self._address, self._security = client.scheduler.address, client.security
        client.register_plugin(ComputeSetup())

    def evaluate(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        """Per-block results of ``fn``; a step whose tasks fail (a lost worker, or a lost scheduler: the
        client reconnects, or a new one connects once it answers again) is re-run up to
        :data:`STEP_ATTEMPTS` times, then OSError in one line (a flow retries it from the newest checkpoint)."""
        from distributed import KilledWorker
        from distributed.comm import CommClosedError
        from distributed.utils import CancelledError

        for attempt in range(1, STEP_ATTEMPTS + 1):
            try:
                self._reconnect_if_closed()
                return self._evaluate_once(fn, params, source, blocks)
            except (KilledWorker, CommClosedError, OSError, CancelledError, TimeoutError) as error:
                if attempt == STEP_ATTEMPTS:
                    raise OSError(f"--cluster {self.description}: a step failed {STEP_ATTEMPTS} times, the last with "
                                  f"{type(error).__name__}: {error} (the scheduler or every worker lost); start them "
                                  "again and continue with `pep train ... --resume` (from the newest checkpoint)") from None
                log.warning("blocks lost with a worker or the scheduler (%s); re-running the step (attempt %d of %d)",
                            error, attempt + 1, STEP_ATTEMPTS)
        raise AssertionError("unreachable")

    def _reconnect_if_closed(self) -> None:
        """Replace a client that gave up on a lost scheduler (after Dask's reconnection window) by a new
        one to the same address, once a scheduler answers there again (OSError until then)."""
        if self.client.status not in ("closing", "closed"):
            return
        from distributed import Client

        try:
            client = Client(self._address, security=self._security, timeout=30)
            client.wait_for_workers(1, timeout=120)
        except (OSError, TimeoutError) as error:
            raise OSError(f"no scheduler at {self._address} ({error})") from None
        client.register_plugin(ComputeSetup())
        self.client = client

    def _evaluate_once(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        workers = sorted(self.client.nthreads())
        if not workers:
            self.client.wait_for_workers(1, timeout=120)
            workers = sorted(self.client.nthreads())
        plan: dict[str, list[int]] = {}
        for b in blocks:
            plan.setdefault(workers[b % len(workers)], []).append(b)
        # One copy of the params sent to each worker, not one scatter with broadcast=True: the scheduler's
        # replication kept retrying a worker killed while it ran and the step hung (measured: a SIGKILLed
        # worker, tests/infra/test_prefect_server.py). A lost copy fails the step, which is re-run.
        host = jax.device_get(params)
        futures = {worker: self.client.submit(evaluate_blocks, fn, self.client.scatter(host, workers=[worker], hash=False),
                                              source, assigned, workers=[worker], allow_other_workers=True, pure=False)
                   for worker, assigned in plan.items()}
        results: dict[int, Any] = {}
        for worker, future in futures.items():
            results.update(zip(plan[worker], future.result()))
        return [results[b] for b in blocks]

    @property
    def n_workers(self) -> int:
        return max(1, len(self.client.nthreads()))

    def map_ordered(self, fn: Callable, items: Iterable, window: int) -> Iterator:
        """See :meth:`Backend.map_ordered`: ``fn`` is sent once to every worker, each item in its own
        task (a lost worker's tasks run again elsewhere)."""
        shared = self.client.scatter(fn, broadcast=True, hash=False)
        pending: deque = deque()
        for item in items:
            pending.append(self.client.submit(_call, shared, item, pure=False))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _call(fn: Callable, item: Any) -> Any:
    """``fn(item)`` (a task of :meth:`DaskBackend.map_ordered`)."""
    return fn(item)
