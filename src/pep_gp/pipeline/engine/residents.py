"""Objects resident where blocks are computed, kept between calls: a backend's ``place(objects)`` (a
:class:`~pep_gp.pipeline.engine.in_process.Placement`). On Dask workers (:class:`Residents`) there is one per
worker, whose methods the coordinator calls directly — one call per worker, all in flight at once, over the
cluster's own connections (TLS where the cluster uses it; no task, no scheduler in the way), as
:class:`~pep_gp.pipeline.engine.backends.WorkerEngine` answers the engine's passes; in this process
(:class:`~pep_gp.pipeline.engine.in_process.InThreads`) each object's calls run on a thread of its own. The
class groups of the class-parallel step (:mod:`pep_gp.pipeline.training.class_groups`) live this way: each
worker holds its classes' parameters and optimiser moments, and a step sends only the per-row numbers that
couple the classes."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import jax
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from ...core import float64
from .compilation import use_compilation_cache
from .summation import payload_bytes
from .threads import hold_compute_threads, pin_compute_threads


class OnComputeThread(WorkerPlugin):
    """A Dask worker plugin that answers the coordinator's direct calls of its ``handler`` (no task, no
    scheduler) with :meth:`answer`, run on one compute thread of its own: it pins the compute threads and
    turns on the persistent compilation cache (:mod:`pep_gp.pipeline.engine.compilation`, from the worker's
    own environment)."""

    handler: str

    def setup(self, worker: Any) -> None:
        pin_compute_threads()
        use_compilation_cache()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="pep-compute", initializer=hold_compute_threads)
        worker.handlers[self.handler] = self.handle

    def teardown(self, worker: Any) -> None:
        worker.handlers.pop(self.handler, None)
        self.thread.shutdown(wait=False)

    async def handle(self, **message: Any) -> Any:
        return to_serialize(await asyncio.get_running_loop().run_in_executor(self.thread, partial(self.answer,
                                                                                                  **message)))

    def answer(self, **message: Any) -> Any:
        """The reply to a call with the keyword arguments ``message``."""
        raise NotImplementedError


class ResidentHost(OnComputeThread):
    """Dask worker plugin: holds the objects placed on its worker (by :class:`Residents`, each under its own
    key) and answers ``pep_resident`` calls — a method of one of them, run on its compute thread in float64
    (:class:`~pep_gp.pipeline.engine.backends.OnComputeThread`), its result sent back as host arrays."""

    name, handler = "pep-resident-host", "pep_resident"

    def setup(self, worker: Any) -> None:
        self.residents: dict[str, Any] = {}
        super().setup(worker)

    def answer(self, key: str, method: str | None, args: tuple) -> Any:
        """``residents[key].method(*args)``; with ``method`` None, ``args[0]`` becomes ``residents[key]``
        (None: it is released)."""
        if method is None:
            if args[0] is None:
                self.residents.pop(key, None)
            else:
                self.residents[key] = args[0]
            return ()
        with float64():
            return jax.device_get(getattr(self.residents[key], method)(*args))


class Residents:
    """One object resident on each of the first ``len(objects)`` workers of ``client`` (in the sorted order
    of their addresses): the :class:`~pep_gp.pipeline.engine.in_process.Placement` of a Dask backend.

    Args:
        client: a connected ``distributed.Client`` with at least ``len(objects)`` workers.
        objects: what the workers hold (picklable), in order.
    """

    def __init__(self, client: Any, objects: list[Any]):
        workers = sorted(client.nthreads())
        if len(workers) < len(objects):
            raise ValueError(f"{len(objects)} resident objects need as many workers; the cluster has {len(workers)}")
        if not all(client.run(_hosting).values()):  # registered again, a plugin starts empty: only once
            client.register_plugin(ResidentHost())
        self.client, self.workers, self.key = client, workers[:len(objects)], uuid.uuid4().hex
        self.sent = self.received = 0  # array bytes of the method calls' arguments and results (payloads)
        self._calls(None, [(thing,) for thing in objects])

    def each(self, method: str, args: list[tuple]) -> list:
        """``objects[i].method(*args[i])`` on each worker at once; the results in order. The arguments travel
        as host arrays (a device array unpickled on a worker outside its float64 context would be float32)."""
        host = jax.device_get(args)
        results = self._calls(method, host)
        self.sent += payload_bytes(host)
        self.received += payload_bytes(results)
        return results

    def release(self) -> None:
        """Release the objects on the workers."""
        self._calls(None, [(None,)] * len(self.workers))

    def _calls(self, method: str | None, args: list[tuple]) -> list:
        async def call(worker: str, arguments: tuple) -> Any:
            try:
                return await self.client.rpc(worker).pep_resident(key=self.key, method=method,
                                                                  args=to_serialize(arguments))
            except OSError as error:  # connection refused, timed out or closed: the worker is gone
                raise ResidentLost(f"{worker}: a worker holding part of the run's state was lost ({error}); "
                                   "what it held is gone with it: resume the run from its newest checkpoint "
                                   "(pep train … --resume)") from error

        async def all_calls() -> list[Any]:
            return await asyncio.gather(*(call(worker, a) for worker, a in zip(self.workers, args)))

        return self.client.sync(all_calls)


class ResidentLost(OSError):
    """A worker that held resident objects was lost, and their state with it (an ``OSError``: a retried
    Prefect segment resumes from the newest checkpoint)."""


def _hosting(dask_worker: Any) -> bool:
    """True on a worker that runs :class:`ResidentHost`."""
    return ResidentHost.handler in dask_worker.handlers
