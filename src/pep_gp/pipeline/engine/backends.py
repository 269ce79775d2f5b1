"""Backends: where blocks are computed — this process, or the workers of a Dask cluster."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Callable

import jax
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol import to_serialize

from ..data.blocks import BlockSource
from .cache import Keeping, Kept, NotHeld, sum_blocks
from .in_process import Placement
from .residents import OnComputeThread, Residents
from .summation import inflate, join_subtrees, payload_bytes, subtrees

log = logging.getLogger(__name__)

STEP_ATTEMPTS = 3  # a pass whose calls fail (lost workers or scheduler, closed connections) is re-run this often
HELD_OBJECTS = 64  # block functions and sources a worker holds (and the coordinator numbers), least recently used out


@dataclass
class Traffic:
    """Array bytes a backend sent to its workers and received from them (the payloads, not the messages
    around them: what :mod:`benchmarks.bench_engine` compares with the bytes on the wire), and the time
    its passes took: in all, and on the slowest worker of each (what the engine adds is the difference)."""

    sent: int = 0
    received: int = 0
    passes: int = 0
    pass_seconds: float = 0.0
    task_seconds: float = 0.0


@dataclass
class Call:
    """One worker's share of a pass: its blocks (a whole subtree of the pass's summation tree) and what
    it has not been sent before. Functions and sources travel once per worker, named by a number (never
    reused: a worker or coordinator that forgot one has it sent again)."""

    fn: int
    source: int
    blocks: list[int]
    inputs: Any
    objects: dict[int, Any]  # functions and sources this worker has not been sent
    keep: str | None = None  # first pass: keep each block's part under this token
    of: str | None = None  # second pass: from the parts of this keeping pass
    first: tuple[int, Any] | None = None  # second pass: the first pass's function and inputs, for parts not here


class WorkerEngine(OnComputeThread):
    """Dask worker plugin, resident on every worker (also ones that join later or are restarted by their
    nanny, and workers started outside pep, e.g. ``dask worker``), that answers the coordinator's direct
    calls (``pep_sum``, a :class:`Call`) with the partial sum of the call's blocks and its seconds
    (:class:`OnComputeThread`), and ``pep_sum`` calls with ``release`` (a keeping pass's token) by dropping
    what that pass kept. It holds the functions and sources it was sent and what its latest keeping pass kept
    (a :class:`Kept`)."""

    name, handler = "pep-worker-engine", "pep_sum"

    def setup(self, worker: Any) -> None:
        self.objects: OrderedDict[int, Any] = OrderedDict()
        self.kept = Kept()
        super().setup(worker)

    def answer(self, call: Call | None = None, release: str | None = None) -> tuple[Any, float] | None:
        """:meth:`compute`'s partial sum of ``call`` and its seconds; or, given ``release``, nothing, after
        dropping what the keeping pass ``release`` kept here."""
        if call is None:
            return self.kept.release(release)
        started = time.perf_counter()
        return self.compute(call), time.perf_counter() - started

    def compute(self, call: Call) -> Any:
        self.objects.update(call.objects)
        refs = (call.fn, call.source) + (() if call.first is None else (call.first[0],))
        if not all(ref in self.objects for ref in refs):
            raise NotHeld("a function or source this worker was not sent, or forgot")
        for ref in refs:
            self.objects.move_to_end(ref)
        while len(self.objects) > HELD_OBJECTS:
            self.objects.popitem(last=False)
        fn, source = self.objects[call.fn], self.objects[call.source]
        first = None if call.first is None else (self.objects[call.first[0]], call.first[1])
        return sum_blocks(fn, call.inputs, source, call.blocks, self.kept, call.keep, call.of, first)


class OneCorePerWorker(WorkerPlugin):
    """Dask worker plugin for ``local:N:pinned``: worker ``i`` of a LocalCluster runs on core
    ``i mod cores`` only. JAX's backend starts first, while the worker sees every core, so XLA sizes its
    thread pool — and partitions reductions — as an unpinned process on the same machine does: pinned
    workers give the bits of the in-process backend (its threads then share the one core)."""

    name = "pep-one-core-per-worker"

    def setup(self, worker: Any) -> None:
        jax.devices()
        core = {int(worker.name) % os.cpu_count()}
        unpinned = True
        while unpinned:  # every thread of the process, not only this one, until none started meanwhile
            unpinned = False
            for thread in map(int, os.listdir("/proc/self/task")):
                try:
                    if os.sched_getaffinity(thread) != core:
                        os.sched_setaffinity(thread, core)
                        unpinned = True
                except ProcessLookupError:  # the thread ended meanwhile
                    pass


class EngineMissing(OSError):
    """A worker answered without the pep engine: it joined a scheduler restarted at its address."""


class DaskBackend:
    """Computes blocks on the workers of a Dask cluster (see the module docstring): each pass is one
    direct call per worker (:class:`WorkerEngine`), made in parallel, over TLS where the cluster uses it.

    Args:
        client: a connected ``distributed.Client``.
        description: how the cluster was given (``local:2``, ``tcp://…``), for reports.
        cluster: a cluster this backend started and closes, or None.
    """

    WORKERS_EVERY_S = 2.0
    """The scheduler is asked for its workers at most this often (and after a failed pass)."""

    def __init__(self, client: Any, description: str, cluster: Any = None):
        self.client, self.description, self.cluster = client, description, cluster
        self.traffic = Traffic()
        self._address, self._security = client.scheduler.address, client.security
        self._names: OrderedDict[Any, int] = OrderedDict()  # function or source -> its number in Call
        self._numbered = 0
        self._sent: dict[str, set[int]] = {}  # worker -> the numbers it holds
        self._listed: tuple[float, list[str]] = (-math.inf, [])
        self._lost: set[str] = set()  # workers whose call failed (not planned on again)
        self._engine_scheduler: str | None = None  # the id of the scheduler the engine was registered with
        self._register_engine()

    def sum(self, fn: Callable, inputs: Any, source: BlockSource, blocks: list[int], keep: Keeping | None = None,
            of: Keeping | None = None) -> Any:
        """Each worker sums a whole subtree of the step's tree over its blocks and sends one partial sum
        (results zero by construction stay behind); the inputs go once to each worker. A pass ``of`` a keeping
        pass runs where that one ran, and only ``inputs`` travel: a worker that did not take part in it (after
        a lost worker, or a call that failed) is sent the keeping pass's inputs too, and computes the parts
        again (the same bits)."""
        host, first_host = jax.device_get(inputs), None

        def once(plan: dict[range, str]) -> Any:
            took_part = set() if of is None else set(of.workers)
            if keep is not None:
                keep.workers = set(plan.values())

            def call(worker: str, span: range) -> Call:
                nonlocal first_host
                fn_ref, source_ref, objects = self._refs(worker, fn, source)
                first = None
                if of is not None and worker not in took_part:
                    first_ref, _, more = self._refs(worker, of.fn, source)
                    first_host = jax.device_get(of.inputs) if first_host is None else first_host
                    first, objects = (first_ref, first_host), {**objects, **more}
                return Call(fn_ref, source_ref, [blocks[i] for i in span], host, objects,
                            keep=None if keep is None else keep.token, of=None if of is None else of.token,
                            first=first)

            return self._call(plan, call, keep or of)

        return self._with_retries(len(blocks), once)

    def release(self, keeping: Keeping) -> None:
        """Each worker that holds parts of ``keeping`` is told to drop them, without waiting for its answer (as
        Dask's ``Future.release``): a worker lost meanwhile held nothing, and a later keeping pass replaces them
        anyway."""
        workers, keeping.workers = sorted(keeping.workers), set()
        if not workers or self.client.status != "running":
            return

        async def release_all() -> None:
            await asyncio.gather(*(self.client.rpc(worker).pep_sum(release=keeping.token) for worker in workers),
                                 return_exceptions=True)

        self.client.loop.add_callback(release_all)

    def _refs(self, worker: str, fn: Callable, source: BlockSource) -> tuple[int, int, dict[int, Any]]:
        """The numbers of ``fn`` and ``source`` in a :class:`Call` to ``worker``, and those of the two it
        has not been sent."""
        for thing in (fn, source):
            if thing not in self._names:
                self._names[thing], self._numbered = self._numbered, self._numbered + 1
            self._names.move_to_end(thing)
        while len(self._names) > HELD_OBJECTS:
            self._names.popitem(last=False)
        refs = [self._names[fn], self._names[source]]
        sent = self._sent.setdefault(worker, set())
        objects = {ref: thing for ref, thing in zip(refs, (fn, source)) if ref not in sent}
        return refs[0], refs[1], objects

    def _call(self, plan: dict[range, str], make: Callable[[str, range], Call],
              keeping: Keeping | None = None) -> dict[range, Any]:
        """One :class:`Call` to each planned worker, all in flight at once; their partial sums by span. A
        worker whose call failed holds no kept parts of ``keeping`` (the pass's keeping handle, if any)."""
        calls = {span: (worker, make(worker, span)) for span, worker in plan.items()}

        async def all_calls() -> list[Any]:
            return await asyncio.gather(*(self.client.rpc(worker).pep_sum(call=to_serialize(call))
                                          for worker, call in calls.values()), return_exceptions=True)

        for worker, call in calls.values():
            self.traffic.sent += payload_bytes(call.inputs) + (0 if call.first is None else payload_bytes(call.first[1]))
        started = time.perf_counter()
        replies = self.client.sync(all_calls)
        failed = [(worker, reply) for (worker, _), reply in zip(calls.values(), replies)
                  if isinstance(reply, BaseException)]
        for worker, error in failed:
            self._forget(worker, lost=not isinstance(error, NotHeld), keeping=keeping)
        # A worker without the engine answers None (Dask's "no handler"): one that joined a scheduler restarted
        # at its address, which lost the plugins registered with it. Register the engine again and re-run.
        unanswered = [worker for (worker, _), reply in zip(calls.values(), replies)
                      if not isinstance(reply, (BaseException, tuple, list))]
        for worker in unanswered:
            self._forget(worker, lost=False, keeping=keeping)
        if unanswered and not failed:
            self._register_engine()
            raise EngineMissing(f"worker {unanswered[0]} had no pep engine (it joined a restarted scheduler); "
                                "registered again")
        if failed:
            raise failed[0][1]
        for worker, call in calls.values():
            self._sent[worker].update(call.objects)
        sums, seconds = zip(*replies)
        self.traffic.passes += 1
        self.traffic.pass_seconds += time.perf_counter() - started
        self.traffic.task_seconds += max(seconds)
        self.traffic.received += sum(payload_bytes(part) for part in sums)
        return dict(zip(calls, sums))

    def _forget(self, worker: str, lost: bool, keeping: Keeping | None) -> None:
        """After a failed call: ``worker`` holds nothing pep sent it, nor parts of ``keeping``; ``lost``, it is
        not planned on again."""
        self._sent.pop(worker, None)
        if keeping is not None:
            keeping.workers.discard(worker)
        if lost:
            self._lost.add(worker)

    def _with_retries(self, count: int, once: Callable[[dict[range, str]], dict[range, Any]]) -> Any:
        """The sum of ``count`` parts from ``once(plan)``'s partial sums, re-run on the workers left when
        a call fails (a lost worker, or a lost scheduler: the client reconnects, or a new one connects once
        it answers again) up to :data:`STEP_ATTEMPTS` times, then OSError in one line (a flow retries it
        from the newest checkpoint). A worker that joined a scheduler restarted at its address has no engine:
        it is registered again and the step re-run without counting an attempt."""
        from distributed.comm import CommClosedError

        attempt, registered = 1, False
        while True:
            try:
                self._reconnect_if_closed()
                return inflate(join_subtrees(count, once(self._plan(count, fresh=attempt > 1 or registered))))
            except EngineMissing as error:  # registered again: re-run once without counting an attempt
                if not registered:
                    registered = True
                    log.warning("%s; re-running the step", error)
                    continue
                failure = error
            except (CommClosedError, OSError, TimeoutError, NotHeld) as error:
                failure = error
            except Exception as error:  # a client that gave up on its scheduler (at any moment) fails its calls in
                # ways of its own: Dask's "ConnectionPool is closed", its scheduler handle already None
                if self.client.status not in ("closing", "closed"):
                    raise
                failure = error
            if attempt == STEP_ATTEMPTS:
                raise OSError(f"--cluster {self.description}: a step failed {STEP_ATTEMPTS} times, the last with "
                              f"{type(failure).__name__}: {failure} (the scheduler or every worker lost); start them "
                              "again and continue with `pep train ... --resume` (from the newest checkpoint)") from None
            log.warning("blocks lost with a worker or the scheduler (%s); re-running the step (attempt %d of %d)",
                        failure, attempt + 1, STEP_ATTEMPTS)
            attempt, registered = attempt + 1, False

    def _reconnect_if_closed(self) -> None:
        """Replace a client that gave up on a lost scheduler (after Dask's reconnection window) by a new
        one to the same address, once a scheduler answers there again (OSError until then)."""
        if self.client.status not in ("closing", "closed"):
            return
        from distributed import Client

        try:
            client = Client(self._address, security=self._security)  # Dask's connect timeout (30 s by default)
            client.wait_for_workers(1, timeout=120)
        except (OSError, TimeoutError) as error:
            raise OSError(f"no scheduler at {self._address} ({error})") from None
        # The old client's calls failed because it had closed, not because its workers were lost: the new one
        # plans on the workers the scheduler lists now, and sends each what it needs again.
        self.client, self._lost, self._sent, self._listed = client, set(), {}, (-math.inf, [])
        self._register_engine()

    def _register_engine(self) -> None:
        """Register :class:`WorkerEngine` with the scheduler, which installs it on its workers, present and
        future; a scheduler restarted at its address has lost it."""
        self.client.register_plugin(WorkerEngine())
        self._engine_scheduler = self._scheduler_id()

    def _scheduler_id(self) -> str | None:
        """The scheduler's id, None while the client is not connected to one."""
        return self.client.scheduler_info(n_workers=0).get("id")

    def _workers(self, fresh: bool) -> list[str]:
        """The workers to plan on: the scheduler's (asked at most every :data:`WORKERS_EVERY_S` seconds,
        or now when ``fresh``) less the lost ones; waits up to two minutes for one."""
        listed_at, workers = self._listed
        deadline = time.monotonic() + 120
        while fresh or not workers or time.monotonic() - listed_at > self.WORKERS_EVERY_S:
            listed = sorted(self.client.nthreads())
            self._lost &= set(listed)
            listed_at, workers, fresh = time.monotonic(), [w for w in listed if w not in self._lost], False
            if not workers:
                if time.monotonic() > deadline:
                    raise OSError(f"--cluster {self.description}: no worker joined within two minutes")
                time.sleep(0.5)
        self._listed = (listed_at, workers)
        return workers

    def _plan(self, count: int, fresh: bool = False) -> dict[range, str]:
        """Subtrees of the pass's summation tree over its ``count`` blocks, one per worker (after a failed
        pass, the engine is first registered again if the scheduler is a new one)."""
        if fresh and (current := self._scheduler_id()) is not None and current != self._engine_scheduler:
            self._register_engine()
        return dict(zip(subtrees(count, len(self._workers(fresh))), self._workers(False)))

    @property
    def n_workers(self) -> int:
        return max(1, len(self.client.nthreads()))

    @property
    def slots(self) -> int:
        return self.n_workers

    def place(self, objects: list[Any]) -> Placement:
        """One of ``objects`` on each of the first workers (:class:`~pep_gp.pipeline.engine.residents.Residents`)."""
        return Residents(self.client, objects)

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
