"""The distributed engine (DESIGN §4): sums of a per-block function over blocks, in a fixed order.

``Engine.map_sum(fn, params, blocks)`` evaluates ``fn(params, x, y, mask)`` on each listed block of a
:class:`~pep_gp.pipeline.data.blocks.BlockSource` and returns the sum of the results. It knows nothing about
models: ``fn`` is any hashable, picklable function returning a pytree (the coordinator passes
``value_and_grad`` of a model's data term, or a held-out metric function).

Backends:

* :class:`InProcess` — no Dask; blocks are computed in this process (notebooks, estimators, tests).
* :class:`DaskBackend` — a ``LocalCluster`` of worker *processes* (``local:N``; ``local:N:pinned``
  gives worker ``i`` core ``i mod cores`` alone: no oversubscription, but results then match other
  pinned clusters, not the in-process backend, see below) or an existing
  scheduler (``tcp://HOST:PORT``). Each step the params are scattered to every worker (one copy
  each); each worker gets one task with the blocks assigned to it (block ``b`` goes to
  worker ``b mod W``, so a worker keeps seeing the same blocks); tasks may move to another worker if
  theirs dies, and a failed step is re-run.

Memory: every process that computes blocks keeps the blocks it read in a :class:`BlockCache` of at most
``PEP_BLOCK_CACHE_MB`` megabytes (default 16; 0 turns it off), least recently used first out, plus the
blocks of its latest call when they total at most :data:`LATEST_CALL_MB` (one step's share of the
minibatch; not an evaluation pass over a large test split), which a step's second pass over the same
blocks (the data term after the site statistics) finds whatever the budget. Cached blocks live on JAX's
default device (a GPU's memory where there is one), so a block is copied there once, not per call. A
block evicted from it is read from Zarr again when next needed, which the operating system's page cache
and the ≤ 1 MiB chunks of ``pep ingest`` make cheap (0.75 ms per 1,000-row airline block, measured). A
worker's memory is therefore bounded by the budget plus :data:`LATEST_CALL_MB` whatever the number of
rows N: a store that fits in the budget is read once, a larger one costs a re-read per block per epoch.

Determinism: every block's result is computed by the same compiled function on the same inputs,
whatever process computes it, and the per-block results are summed on the coordinator in a fixed
binary tree over the block order (:func:`tree_sum`). The result is therefore bit-for-bit the same for
any number of workers, for any task timing and after a worker is lost — provided every process
computes with the same thread settings. Three settings change the last bits (all measured here):

* JAX's CPU Cholesky and triangular solves call the OpenBLAS/LAPACK that scipy loads, whose blocking
  follows its thread count: every backend computes under :func:`compute_threads` (one BLAS thread,
  applied per call with threadpoolctl, so it also holds in a notebook or test process);
* ``--xla_cpu_multi_thread_eigen`` changes some small dot products. XLA reads its flags once, when a
  process's backend starts, so a process that already ran JAX (a notebook, the test runner) cannot be
  pinned afterwards: pep therefore leaves XLA's flags at their defaults in every backend;
* XLA:CPU partitions some reductions by its thread-pool size, which follows the process's CPU
  affinity (a column sum of a (100, 2000) array differs between 1 and 2 visible cores), so every
  process must see the same number of cores: true on one machine; for remote workers use machines
  of the same type, or accept last-bit differences.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, Protocol

import jax
import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from threadpoolctl import threadpool_limits

from ...core import float64
from ..data.blocks import Block, BlockSource
from ..errors import InputError

log = logging.getLogger(__name__)

COMPUTE_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Environment of the worker processes pep starts: one BLAS/OpenMP thread (with ``threads_per_worker=1``
this keeps W workers from oversubscribing the cores). XLA keeps its defaults, see the module docstring."""

STEP_ATTEMPTS = 3  # a step whose tasks fail (lost workers, closed connections) is re-run this often


def pin_compute_threads() -> None:
    """Apply :data:`COMPUTE_ENV` to this whole process (a worker) and limit loaded BLAS pools."""
    os.environ.update(COMPUTE_ENV)
    threadpool_limits(1)


_THREADS_LIMITED: ContextVar[bool] = ContextVar("pep_threads_limited", default=False)


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


# --------------------------------------------------------------------------------------------------
# What runs wherever blocks are computed (a worker process or this one). Both caches live per process.

BLOCK_CACHE_ENV = "PEP_BLOCK_CACHE_MB"
DEFAULT_BLOCK_CACHE_MB = 16.0


def block_cache_budget() -> int:
    """The block cache's budget in bytes: ``$PEP_BLOCK_CACHE_MB`` megabytes (2**20 bytes, fractions
    allowed), :data:`DEFAULT_BLOCK_CACHE_MB` when unset.

    Raises:
        InputError: the variable is not a finite number ≥ 0.
    """
    text = os.environ.get(BLOCK_CACHE_ENV, str(DEFAULT_BLOCK_CACHE_MB))
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = math.nan
    if not (math.isfinite(megabytes) and megabytes >= 0):
        raise InputError(f"{BLOCK_CACHE_ENV}: expected a finite number of megabytes >= 0, found {text!r}")
    return int(megabytes * 2**20)


LATEST_CALL_MB = 256
"""The blocks of a :meth:`BlockCache.get_all` call are held for the next call up to this many megabytes
(a 10,000-row Fashion-MNIST minibatch is 63 MB in float64)."""


def block_bytes(block: Block) -> int:
    """Memory held by a block's arrays."""
    return block.x.nbytes + block.y.nbytes + block.mask.nbytes


class BlockCache:
    """The blocks this process read, as float64 arrays on JAX's default device, least recently used
    first out, at most ``budget()`` bytes; and, beyond the budget, the blocks of the latest
    :meth:`get_all` call if they total at most ``latest_call_bytes``.

    A block larger than the budget is returned but not kept; a budget of 0 keeps nothing. The budget is
    read at every call, so a changed ``$PEP_BLOCK_CACHE_MB`` applies from the next block on.

    Args:
        budget: returns the budget in bytes (default :func:`block_cache_budget`).

    Example:
        >>> cache = BlockCache(lambda: 2**20)  # 1 MB, whatever $PEP_BLOCK_CACHE_MB says
        >>> first = cache.get(source, 0)  # read from Zarr and kept
        >>> cache.get(source, 0) is first  # until 1 MB of more recently used blocks push it out
        True
    """

    def __init__(self, budget: Callable[[], int] = block_cache_budget, latest_call_bytes: int = LATEST_CALL_MB * 2**20):
        self.budget, self.latest_call_bytes = budget, latest_call_bytes
        self.nbytes = 0
        self._blocks: OrderedDict[tuple[BlockSource, int], Block] = OrderedDict()
        self._latest: tuple[tuple[BlockSource, tuple[int, ...]], list[Block]] | None = None

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, key: tuple[BlockSource, int]) -> bool:
        return key in self._blocks

    def get(self, source: BlockSource, index: int) -> Block:
        """Block ``index`` of ``source``: from the cache if held (it becomes the most recent), else
        read from Zarr and kept if it fits the budget."""
        budget = self.budget()
        self._trim(budget)
        key = (source, index)
        if key in self._blocks:
            self._blocks.move_to_end(key)
            return self._blocks[key]
        with float64():
            block = Block(*jax.device_put(tuple(source.read(index))))
        size = block_bytes(block)
        if size <= budget:
            self._trim(budget - size)
            self._blocks[key] = block
            self.nbytes += size
        return block

    def get_all(self, source: BlockSource, indices: Sequence[int]) -> Iterator[Block]:
        """Blocks ``indices`` of ``source``, one at a time (as :meth:`get`); asked for the same blocks as
        the latest call, it yields them without a read, whatever the budget, when that call's blocks
        totalled at most ``latest_call_bytes``."""
        key, latest = (source, tuple(indices)), self._latest
        if latest is not None and latest[0] == key:
            yield from latest[1]
            return
        self._latest = None  # released before the next blocks are read
        held: list[Block] | None = []  # None once the call outgrows latest_call_bytes
        size = 0
        for index in indices:
            block = self.get(source, index)
            size += block_bytes(block)
            if held is not None and size <= self.latest_call_bytes:
                held.append(block)
            else:
                held = None
            yield block
        if held is not None:
            self._latest = (key, held)

    def _trim(self, limit: int) -> None:
        """Drop least recently used blocks until at most ``limit`` bytes are held."""
        while self.nbytes > limit:
            _, block = self._blocks.popitem(last=False)
            self.nbytes -= block_bytes(block)


BLOCKS = BlockCache()
"""This process's block cache (on a worker: the blocks of the tasks it ran)."""


@lru_cache(maxsize=32)
def _compiled(fn: Callable) -> Callable:
    """``jax.jit(fn)``, kept per process so that equal functions compile once (static block shape)."""
    return jax.jit(fn)


def evaluate_blocks(fn: Callable, params: Any, source: BlockSource, blocks: Sequence[int],
                    to_host: bool = True) -> list:
    """``[fn(params, *block) for block in blocks]``, computed in float64; numpy pytrees when ``to_host``
    (results that travel), else JAX arrays (in-process: no copies to and from the device buffers)."""
    with float64(), compute_threads():
        compiled = _compiled(fn)
        results = [compiled(params, *block) for block in BLOCKS.get_all(source, blocks)]
        return jax.device_get(results) if to_host else results


def tree_sum(parts: Sequence[Any]) -> Any:
    """Sum of pytrees in a fixed, balanced binary tree over their order (deterministic rounding)."""
    if not parts:
        raise ValueError("tree_sum of no parts")
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return jax.tree_util.tree_map(np.add, tree_sum(parts[:middle]), tree_sum(parts[middle:]))


# --------------------------------------------------------------------------------------------------
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


CLUSTER_HELP = ("local:N (N worker processes on this machine; local:N:pinned gives each its own core), "
                "tcp://HOST:PORT or tls://HOST:PORT (a running scheduler; tls:// with the client "
                "certificate of --tls-ca-file/--tls-cert/--tls-key or Dask's distributed.comm.tls "
                "config), slurm:N or pbs:N (N batch jobs of one worker each, through dask-jobqueue and "
                "Dask's jobqueue config, e.g. infra/jobqueue.yaml; TLS only) or none")

TLS_CONFIG = {"ca": "distributed.comm.tls.ca-file", "cert": "distributed.comm.tls.client.cert",
              "key": "distributed.comm.tls.client.key"}
"""Where a client of a ``tls://`` scheduler finds its CA, certificate and key: Dask's configuration
(YAML files, or ``DASK_DISTRIBUTED__COMM__TLS__CA_FILE``, ``…__TLS__CLIENT__CERT``,
``…__TLS__CLIENT__KEY`` in the environment; ``pep train --tls-*`` sets them for its process)."""


def parse_cluster(cluster: str) -> tuple[str, str | int]:
    """Check a ``--cluster`` value: ``("none", "")``, ``("local", N)`` or ``("scheduler", address)``.

    Raises:
        InputError: the value has none of the forms of :data:`CLUSTER_HELP`.
    """
    if cluster == "none":
        return "none", ""
    local = re.fullmatch(r"local:(\d+)(:pinned)?", cluster)
    if local and int(local.group(1)) >= 1:
        return "local-pinned" if local.group(2) else "local", int(local.group(1))
    if re.fullmatch(r"(tcp|tls)://[^\s:/]+:\d+", cluster):
        return "scheduler", cluster
    jobs = re.fullmatch(r"(slurm|pbs):(\d+)", cluster)
    if jobs and int(jobs.group(2)) >= 1:
        return jobs.group(1), int(jobs.group(2))
    raise InputError(f"--cluster: expected {CLUSTER_HELP}; found {cluster!r}")


def connect(cluster: str) -> Backend:
    """The backend for a ``--cluster`` value (see :func:`parse_cluster`).

    Raises:
        InputError: a malformed value.
        OSError: the scheduler cannot be reached or no worker joined within two minutes.
    """
    kind, argument = parse_cluster(cluster)
    if kind.startswith("local"):
        return _local_cluster(int(argument), cluster, pinned=kind == "local-pinned")
    if kind == "scheduler":
        return _existing_cluster(str(argument))
    if kind in JOB_QUEUES:
        cluster_object = jobqueue_cluster(kind)
        cluster_object.scale(jobs=int(argument))
        from distributed import Client

        return DaskBackend(Client(cluster_object), cluster, cluster_object)
    return InProcess()


def _local_cluster(n_workers: int, description: str, pinned: bool) -> DaskBackend:
    import dask
    from distributed import Client, LocalCluster

    method = dask.config.get("distributed.worker.multiprocessing-method")
    settings = {
        # Forked workers deadlock once JAX is loaded (shared/ENVIRONMENT.md): always spawn.
        "distributed.worker.multiprocessing-method": method if method in ("spawn", "forkserver") else "spawn",
        # Dask's default MALLOC_TRIM_THRESHOLD_=65536 makes glibc return every freed XLA buffer to
        # the OS: measured 1.7x slower block evaluations (56 vs 33 ms for 4 x 2500 rows, M = 100).
        "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    }
    with dask.config.set(settings):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                               dashboard_address="127.0.0.1:0", env=COMPUTE_ENV, silence_logs=logging.ERROR)
    client = Client(cluster)
    client.run(_quiet_worker_logs)
    if pinned:
        client.register_plugin(OneCorePerWorker())
    return DaskBackend(client, description, cluster)


def _quiet_worker_logs() -> None:
    """Only errors from the workers pep starts (their start/stop chatter is not the user's concern)."""
    logging.getLogger("distributed").setLevel(logging.ERROR)


def client_security(cluster: str) -> Any:
    """The ``distributed.Security`` a client of a ``tls://`` scheduler connects with, from Dask's
    configuration (:data:`TLS_CONFIG`); None for any other ``--cluster`` value.

    Raises:
        InputError: a ``tls://`` address without a CA or client certificate configured, or one of the
            configured files does not exist.
    """
    if not cluster.startswith("tls://"):
        return None
    import dask
    from distributed.security import Security

    files = {name: dask.config.get(key, None) for name, key in TLS_CONFIG.items()}
    if not files["ca"] or not files["cert"]:
        raise InputError(f"--cluster {cluster}: a TLS scheduler needs a CA and a client certificate: pass "
                         "--tls-ca-file, --tls-cert and --tls-key (made by `pep cluster certs DIR`) or set "
                         "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT "
                         "and DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY")
    for name, path in files.items():
        if path and not os.path.isfile(path):
            raise InputError(f"--cluster {cluster}: TLS {name} file {path}: no such file")
    return Security(tls_ca_file=files["ca"], tls_client_cert=files["cert"], tls_client_key=files["key"],
                    require_encryption=True)


JOB_QUEUES = {"slurm": "SLURMCluster", "pbs": "PBSCluster"}


def jobqueue_cluster(system: str) -> Any:
    """A dask-jobqueue cluster for ``slurm:N``/``pbs:N``: its scheduler runs in this process, its
    workers are batch jobs (``cluster.job_script()`` is what it submits), all settings from Dask's
    ``jobqueue.<system>`` configuration (infra/jobqueue.yaml). The workers connect from other nodes,
    so the cluster is TLS only (certificates from ``distributed.comm.tls``: ``pep cluster certs`` on
    a shared file system) and the scheduler listens on the configured ``interface`` or ``host`` only.

    Raises:
        InputError: dask-jobqueue is not installed, or the configuration lacks an interface or the
            TLS certificates.
    """
    import dask
    from distributed.security import Security

    try:
        import dask_jobqueue
    except ImportError:
        raise InputError(f"--cluster {system}:N needs dask-jobqueue: pip install 'pep[infra]'") from None
    options = dask.config.get(f"jobqueue.{system}.scheduler-options", {}) or {}
    if not (dask.config.get(f"jobqueue.{system}.interface", None) or options.get("host") or options.get("interface")):
        raise InputError(f"--cluster {system}:N: set jobqueue.{system}.interface in Dask's config (the network "
                         "the compute nodes reach this host on, e.g. ib0; see infra/jobqueue.yaml)")
    roles = {"ca": "distributed.comm.tls.ca-file", **{f"{role} {part}": f"distributed.comm.tls.{role}.{part}"
                                                       for role in ("scheduler", "worker") for part in ("cert", "key")}}
    missing = [f"{name} ({dask.config.get(key, None) or 'not set'})" for name, key in roles.items()
               if not os.path.isfile(dask.config.get(key, None) or "")]
    if missing:
        raise InputError(f"--cluster {system}:N: workers on other nodes need TLS; missing in Dask's "
                         f"distributed.comm.tls config: {', '.join(missing)} (see infra/jobqueue.yaml)")
    return getattr(dask_jobqueue, JOB_QUEUES[system])(security=Security(require_encryption=True))


def _existing_cluster(address: str) -> DaskBackend:
    from distributed import Client

    security = client_security(address)
    try:
        client = Client(address, timeout=30, security=security)
        client.wait_for_workers(1, timeout=120)
    except (OSError, TimeoutError) as error:
        raise OSError(f"--cluster {address}: cannot use the scheduler ({error})") from None
    return DaskBackend(client, address)


class Engine:
    """Fixed-order sums over the blocks of one source, computed by a backend."""

    def __init__(self, backend: Backend, source: BlockSource):
        self.backend, self.source = backend, source

    def map_sum(self, fn: Callable, params: Any, blocks: Sequence[int]) -> Any:
        """``Σ_{b in blocks} fn(params, *block_b)``, summed by :func:`tree_sum` in ``blocks`` order."""
        return tree_sum(self.backend.evaluate(fn, params, self.source, list(blocks)))

    def rows(self, blocks: Sequence[int]) -> int:
        """Real rows in ``blocks`` (the minibatch size |B|)."""
        return sum(self.source.rows_in(b) for b in blocks)
