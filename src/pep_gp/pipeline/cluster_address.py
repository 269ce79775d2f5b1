"""The ``--cluster`` values a command accepts, checked without importing Dask or JAX (a command refuses a
bad value before starting anything): in-process, a ``LocalCluster`` pep starts, an existing scheduler
(``tcp://``/``tls://``) or dask-jobqueue batch jobs. :func:`pep_gp.pipeline.engine.connect` connects them."""

from __future__ import annotations

import ipaddress
import re

from .errors import InputError

CLUSTER_HELP = ("local:N (N worker processes on this machine; local:N:pinned gives each its own core), "
                "tcp://127.0.0.1:PORT (a running scheduler on loopback) or tls://HOST:PORT (a running scheduler "
                "anywhere, with the client "
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
        InputError: the value has none of the forms of :data:`CLUSTER_HELP`, or is a ``tcp://`` address
            beyond loopback.
    """
    if cluster == "none":
        return "none", ""
    local = re.fullmatch(r"local:(\d+)(:pinned)?", cluster)
    if local and int(local.group(1)) >= 1:
        return "local-pinned" if local.group(2) else "local", int(local.group(1))
    scheduler = re.fullmatch(r"(tcp|tls)://([^\s/]+):\d+", cluster)
    if scheduler and scheduler.group(1) == "tcp" and not is_loopback(scheduler.group(2)):
        raise InputError(f"--cluster {cluster}: plain tcp:// is unencrypted and unauthenticated (anyone who reaches "
                         "the scheduler runs code on its workers), so pep uses it on loopback only; use "
                         f"tls://{cluster.removeprefix('tcp://')} with certificates from `pep cluster certs DIR`")
    if scheduler:
        return "scheduler", cluster
    jobs = re.fullmatch(r"(slurm|pbs):(\d+)", cluster)
    if jobs and int(jobs.group(2)) >= 1:
        return jobs.group(1), int(jobs.group(2))
    raise InputError(f"--cluster: expected {CLUSTER_HELP}; found {cluster!r}")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address, IPv6 in brackets) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # another name: it may resolve anywhere
