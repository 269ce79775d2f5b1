"""Backends: where blocks are computed — this process, or the workers of a Dask cluster."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import jax
from distributed.diagnostics.plugin import WorkerPlugin

from ..data.blocks import BlockSource
from .cache import sum_blocks, sum_kept_blocks
from .compilation import use_compilation_cache
from .summation import inflate, join_subtrees, payload_bytes, subtrees
from .threads import pin_compute_threads

log = logging.getLogger(__name__)

STEP_ATTEMPTS = 3  # a step whose tasks fail (lost workers or scheduler, closed connections) is re-run this often


class Backend(Protocol):
    """Where blocks are computed. Sums follow the fixed tree of :mod:`pep_gp.pipeline.engine.summation`."""

    description: str

    @property
    def n_workers(self) -> int:
        """Processes that compute (1 in-process)."""

    def sum(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], keep: str | None = None) -> Any:
        """``Σ_b fn(inputs, *block_b)`` (:func:`~pep_gp.pipeline.engine.cache.sum_blocks`; with ``keep``,
        each block's kept part stays where the block was computed)."""

    def sum_kept(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], token: str,
                 first: Callable, first_inputs: Any) -> Any:
        """``Σ_b fn(inputs, kept_b, y_b, mask_b)`` over the blocks of the keeping call ``token``
        (:func:`~pep_gp.pipeline.engine.cache.sum_kept_blocks`)."""

    def map_ordered(self, fn: Callable, items: Iterable, window: int) -> Iterator:
        """``fn(item)`` for each item, yielded in the items' order, with at most ``window`` items taken
        from ``items`` and not yet yielded (memory stays bounded whatever their number)."""

    def close(self) -> None:
        """Release what the backend started."""


class InProcess:
    """Computes every block in this process."""

    description = "in-process"
    n_workers = 1

    def sum(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], keep: str | None = None) -> Any:
        return sum_blocks(fn, inputs, source, blocks, keep, to_host=False)

    def sum_kept(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], token: str,
                 first: Callable, first_inputs: Any) -> Any:
        return sum_kept_blocks(fn, inputs, source, blocks, token, first, first_inputs, to_host=False)

    def map_ordered(self, fn: Callable, items: Iterable, window: int = 1) -> Iterator:
        return map(fn, items)

    def close(self) -> None:
        pass


@dataclass
class Traffic:
    """Array bytes a backend sent to its workers and received from them (the payloads, not the messages
    around them): what :mod:`benchmarks.bench_engine` compares with the bytes on the wire."""

    sent: int = 0
    received: int = 0


class ComputeSetup(WorkerPlugin):
    """Dask worker plugin: pins the compute threads and turns on the persistent compilation cache
    (:mod:`pep_gp.pipeline.engine.compilation`, from the worker's own environment) on every worker, also
    ones that join later or are restarted by their nanny (workers started outside pep, e.g.
    ``dask worker``, included)."""

    name = "pep-compute-setup"

    def setup(self, worker: Any) -> None:
        pin_compute_threads()
        use_compilation_cache()


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
        # Data goes straight between this process and the workers of a cluster it started (not through the
        # scheduler); a remote cluster's workers may be reachable from the scheduler only.
        self.direct = True if cluster is not None else None
        self._kept: dict[str, dict[str, Any]] = {}
        self.traffic = Traffic()
        self._address, self._security = client.scheduler.address, client.security
        client.register_plugin(ComputeSetup())

    def sum(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], keep: str | None = None) -> Any:
        """Each worker sums a whole subtree of the step's tree over its blocks and sends one partial sum
        (results zero by construction stay behind); the inputs go once to each worker."""
        def once() -> Any:
            plan = self._plan(blocks)
            scattered = self._scatter(inputs, plan)
            futures = {span: self.client.submit(sum_blocks, fn, scattered[worker], source, [blocks[i] for i in span],
                                                keep, workers=[worker], allow_other_workers=True, pure=False)
                       for span, worker in plan.items()}
            if keep is not None:
                self._kept = {keep: scattered}  # the second pass finds the first's inputs on the workers
            return self._join(len(blocks), futures)

        return self._with_retries(once)

    def sum_kept(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], token: str,
                 first: Callable, first_inputs: Any) -> Any:
        """As :meth:`sum`, where the keeping call ran: only ``inputs`` travel (the first pass's inputs are
        already on each worker). After a lost worker the step's first-pass inputs are sent again and the
        kept parts computed again (the same bits)."""
        def once(resend: bool) -> Any:
            plan = self._plan(blocks)
            held = self._kept.get(token) if not resend else None
            held = held if held is not None and set(plan.values()) <= set(held) else self._scatter(first_inputs, plan)
            scattered = self._scatter(inputs, plan)
            futures = {span: self.client.submit(sum_kept_blocks, fn, scattered[worker], source,
                                                [blocks[i] for i in span], token, first, held[worker],
                                                workers=[worker], allow_other_workers=True, pure=False)
                       for span, worker in plan.items()}
            return self._join(len(blocks), futures)

        attempts = iter(range(STEP_ATTEMPTS))
        return self._with_retries(lambda: once(resend=next(attempts) > 0))

    def _with_retries(self, call: Callable[[], Any]) -> Any:
        """``call()``, re-run when its tasks fail (a lost worker, or a lost scheduler: the client reconnects,
        or a new one connects once it answers again) up to :data:`STEP_ATTEMPTS` times, then OSError in one
        line (a flow retries it from the newest checkpoint)."""
        from distributed import KilledWorker
        from distributed.comm import CommClosedError
        from distributed.utils import CancelledError

        for attempt in range(1, STEP_ATTEMPTS + 1):
            try:
                self._reconnect_if_closed()
                return call()
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

    def _workers(self) -> list[str]:
        workers = sorted(self.client.nthreads())
        if not workers:
            self.client.wait_for_workers(1, timeout=120)
            workers = sorted(self.client.nthreads())
        return workers

    def _plan(self, blocks: list[int]) -> dict[range, str]:
        """Subtrees of the step's summation tree (positions in ``blocks``), one per worker."""
        workers = self._workers()
        return dict(zip(subtrees(len(blocks), len(workers)), workers))

    def _scatter(self, inputs: Any, plan: dict[range, str]) -> dict[str, Any]:
        """One copy of ``inputs`` sent to each planned worker (a future per worker). Not one scatter with
        broadcast=True: the scheduler's replication kept retrying a worker killed while it ran and the
        step hung (measured: a SIGKILLed worker, tests/infra/test_prefect_server.py)."""
        host = jax.device_get(inputs)
        workers = set(plan.values())
        self.traffic.sent += len(workers) * payload_bytes(host)
        return {worker: self.client.scatter(host, workers=[worker], hash=False, direct=self.direct) for worker in workers}

    def _join(self, count: int, futures: dict[range, Any]) -> Any:
        sums = self.client.gather(list(futures.values()), direct=self.direct)
        self.traffic.received += sum(payload_bytes(part) for part in sums)
        return inflate(join_subtrees(count, dict(zip(futures, sums))))

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
