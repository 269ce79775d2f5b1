"""Backends: where blocks are computed — this process, or the workers of a Dask cluster."""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Protocol

import jax
from distributed.diagnostics.plugin import WorkerPlugin

from ..data.blocks import BlockSource
from .cache import evaluate_blocks
from .compilation import use_compilation_cache
from .threads import pin_compute_threads

log = logging.getLogger(__name__)

STEP_ATTEMPTS = 3  # a step whose tasks fail (lost workers, closed connections) is re-run this often


class Backend(Protocol):
    """Where blocks are computed."""

    description: str

    def evaluate(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        """Per-block results of ``fn``, in the order of ``blocks``."""

    def close(self) -> None:
        """Release what the backend started."""


class InProcess:
    """Computes every block in this process."""

    description = "in-process"

    def evaluate(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        return evaluate_blocks(fn, params, source, blocks, to_host=False)

    def close(self) -> None:
        pass


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
        client.register_plugin(ComputeSetup())

    def evaluate(self, fn: Callable, params: Any, source: BlockSource, blocks: list[int]) -> list:
        from distributed import KilledWorker
        from distributed.comm import CommClosedError
        from distributed.utils import CancelledError

        for attempt in range(1, STEP_ATTEMPTS + 1):
            try:
                return self._evaluate_once(fn, params, source, blocks)
            except (KilledWorker, CommClosedError, OSError, CancelledError) as error:
                if attempt == STEP_ATTEMPTS:
                    raise
                log.warning("blocks lost with a worker (%s); re-running the step (attempt %d of %d)",
                            error, attempt + 1, STEP_ATTEMPTS)
        raise AssertionError("unreachable")

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

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
