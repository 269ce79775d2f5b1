"""The backends the ``--cluster`` values (:mod:`pep_gp.pipeline.cluster_address`) connect: in-process, a
``LocalCluster`` pep starts, an existing scheduler (``tcp://``/``tls://``) or dask-jobqueue batch jobs.

A Dask scheduler runs whatever code its clients send on every worker, so every control plane pep uses is
authenticated: ``local:N`` starts its cluster with temporary TLS credentials (``security=True``: a fresh
CA and certificate in memory, held by this process and its workers only), so another local process
cannot connect to the scheduler or a worker; a ``tcp://`` scheduler (plain TCP, no authentication) is
accepted on loopback only, anything beyond it must be ``tls://`` with the certificates of
``pep cluster certs``; ``slurm:N``/``pbs:N`` are TLS only.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..cluster_address import CLUSTER_HELP, TLS_CONFIG, parse_cluster
from ..errors import InputError
from .in_process import Backend, InProcess
from .cluster_process import ClusterProcess
from .threads import COMPUTE_ENV

if TYPE_CHECKING:
    from .backends import DaskBackend


def connect(cluster: str) -> Backend:
    """The backend for a ``--cluster`` value (see :func:`parse_cluster`).

    Raises:
        InputError: a malformed value.
        OSError: the scheduler cannot be reached or no worker joined within two minutes.
    """
    kind, argument = parse_cluster(cluster)
    if kind.startswith("local"):
        return local_cluster(int(argument), cluster, pinned=kind == "local-pinned")
    if kind == "scheduler":
        return _existing_cluster(str(argument))
    if kind in JOB_QUEUES:
        cluster_object = jobqueue_cluster(kind)
        cluster_object.scale(jobs=int(argument))
        from distributed import Client

        from .backends import DaskBackend

        return DaskBackend(Client(cluster_object), cluster, cluster_object)
    return InProcess()


def local_cluster(n_workers: int, description: str, pinned: bool = False, security: bool = True) -> DaskBackend:
    """A ``LocalCluster`` of ``n_workers`` single-threaded worker processes on 127.0.0.1 and its backend; the
    cluster (scheduler and nannies) runs in a process of its own (:class:`ClusterProcess`).

    Args:
        n_workers: worker processes.
        description: the ``--cluster`` value, for reports.
        pinned: worker ``i`` runs on core ``i mod cores`` only.
        security: temporary TLS credentials (the default, what ``local:N`` uses); False only to measure
            what they cost (``benchmarks/bench_trust.py``).
    """
    import dask
    from distributed import Client
    from distributed.security import Security

    from .backends import DaskBackend, OneCorePerWorker

    method = dask.config.get("distributed.worker.multiprocessing-method")
    settings = {
        # Forked workers deadlock once JAX is loaded (JAX warns and the worker hangs): always spawn.
        "distributed.worker.multiprocessing-method": method if method in ("spawn", "forkserver") else "spawn",
        # Dask's default MALLOC_TRIM_THRESHOLD_=65536 makes glibc return every freed XLA buffer to
        # the OS: measured 1.7x slower block evaluations (56 vs 33 ms for 4 x 2500 rows, M = 100).
        "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
        # The scheduler's 20 ms health tick only notices a blocked event loop; it cost 24 ms of CPU per
        # second idle (11 at 1 s), now in the cluster's own process rather than the coordinator's.
        "distributed.admin.tick.interval": "1s",
    }
    # security: temporary TLS credentials, so only this process and its workers can connect
    options = {"n_workers": n_workers, "threads_per_worker": 1, "processes": True,
               "security": Security.temporary() if security else None, "dashboard_address": "127.0.0.1:0",
               "env": COMPUTE_ENV, "silence_logs": logging.ERROR}
    with dask.config.set(settings):
        # The scheduler and the nannies in a process of their own: none of their event loop's work is the
        # coordinator's (pep_gp.pipeline.engine.cluster_process).
        cluster = ClusterProcess(options, dask.config.config)
    client = Client(cluster.scheduler_address, security=cluster.security)
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

    from .backends import DaskBackend

    security = client_security(address)
    try:
        client = Client(address, security=security)  # waits Dask's connect timeout (30 s by default), as it reconnects
        client.wait_for_workers(1, timeout=120)
    except (OSError, TimeoutError) as error:
        raise OSError(f"--cluster {address}: cannot use the scheduler ({error})") from None
    return DaskBackend(client, address)


@contextmanager
def connected(cluster: Any) -> Iterator[Backend]:
    """The backend of ``cluster`` — a ``--cluster`` value (:func:`connect`) or a ``distributed.Client`` the
    caller owns — closed at the end of the block if it was started here. A value needs no Dask to be checked
    (an in-process fit never imports it)."""
    if isinstance(cluster, str):
        backend = connect(cluster)
        try:
            yield backend
        finally:
            backend.close()
        return
    from distributed import Client

    from .backends import DaskBackend

    if not isinstance(cluster, Client):
        raise InputError(f"cluster: expected {CLUSTER_HELP}, or a distributed.Client; found {cluster!r}")
    yield DaskBackend(cluster, f"client {cluster.scheduler.address}")
