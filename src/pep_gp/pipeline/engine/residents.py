"""Objects resident on Dask workers: one per worker, kept between calls, whose methods the coordinator calls
directly — one call per worker, all in flight at once, over the cluster's own connections (TLS where the
cluster uses it; no task, no scheduler in the way), as
:class:`~pep_gp.pipeline.engine.backends.WorkerEngine` answers the engine's passes. The class groups of the
class-parallel step (:mod:`pep_gp.pipeline.training.class_groups`) live this way: each worker holds its
classes' parameters and optimiser moments, and a step sends only the per-row numbers that couple the
classes."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import jax
from distributed.protocol import to_serialize

from ...core import float64
from .backends import OnComputeThread
from .summation import payload_bytes


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
    of their addresses).

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

    def close(self) -> None:
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
