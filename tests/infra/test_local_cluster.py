"""``--cluster local:N`` binds nothing beyond 127.0.0.1 (its scheduler, dashboard and workers, issue 12)
and lets no other process in: its scheduler and workers speak TLS with temporary credentials that only
pep's process and its workers hold (issue 27); ``tcp://`` is accepted on loopback only."""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed.core import rpc
from distributed.security import Security

from pep_gp.pipeline.engine import connect, parse_cluster
from pep_gp.pipeline.errors import InputError
from tests.infra.loopback import listening_addresses

pytestmark = pytest.mark.infra  # real processes or the cluster tools' validators: the infra tier


def descendants(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children + [grandchild for child in children for grandchild in descendants(child)]


def test_a_local_cluster_listens_on_loopback_only():
    backend = connect("local:1")
    try:
        pids = [os.getpid(), *descendants(os.getpid())]
        listening = listening_addresses(pids)
        assert len(listening) >= 3  # scheduler, its dashboard, the worker (and its nanny)
        assert all(address.rsplit(":", 1)[0] in ("127.0.0.1", "::1") for address in listening), listening
    finally:
        backend.close()


def reaches(address: str, security: Security | None) -> bool:
    """Whether a client with ``security`` gets an answer from the Dask server at ``address`` (scheduler or
    worker): what running code there would need first."""

    async def identity():
        arguments = security.get_connection_args("client") if security else {}
        async with rpc(address, connection_args=arguments, timeout=5) as remote:
            return await asyncio.wait_for(remote.identity(), 10)

    try:
        asyncio.run(identity())
    except (OSError, TimeoutError):  # CommClosedError is an OSError
        return False
    return True


def test_a_foreign_process_cannot_use_a_local_cluster():
    """Audit (issue 27): during a `local:2` run an unrelated local process connected to the scheduler and ran
    code in both workers."""
    backend = connect("local:2")
    try:
        scheduler, workers = backend.client.scheduler.address, sorted(backend.client.nthreads())
        assert scheduler.startswith("tls://") and len(workers) == 2 and all(w.startswith("tls://") for w in workers)
        for address in (scheduler, *workers):
            assert not reaches(address, Security.temporary())  # TLS, but its own CA
            assert not reaches(address.replace("tls://", "tcp://"), None)  # no TLS
        assert reaches(scheduler, backend.cluster.security)  # pep's own credentials
        assert backend.client.submit(operator.add, 1, 2).result() == 3  # and its tasks still run
    finally:
        backend.close()


def ended(pid: int, within_s: float) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (OSError, IndexError):
            return True
        time.sleep(0.2)
    return False


def test_the_scheduler_and_the_nannies_run_outside_the_coordinator_and_end_with_it():
    """The scheduler's and the nannies' event loop costs the coordinator's process nothing (issue 66): they run
    in a process of their own, which closing the backend ends, workers included."""
    backend = connect("local:1")
    try:
        scheduler = backend.client.run_on_scheduler(os.getpid)
        nannies, workers = backend.client.run(os.getpid, nanny=True), backend.client.run(os.getpid)
        assert scheduler != os.getpid() and os.getpid() not in nannies.values()
        assert backend.client.submit(operator.add, 1, 2).result() == 3
    finally:
        backend.close()
    assert all(ended(pid, 30) for pid in (scheduler, *nannies.values(), *workers.values()))


def test_a_killed_coordinator_leaves_no_cluster_behind():
    """The cluster's process closes the cluster when its coordinator ends, even by SIGKILL."""
    code = ("import os, time; from pep_gp.pipeline.engine import connect; backend = connect('local:1'); "
            "print(backend.client.run_on_scheduler(os.getpid), *backend.client.run(os.getpid).values(), "
            "flush=True); time.sleep(600)")
    coordinator = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in coordinator.stdout.readline().split()]
    finally:
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
    assert len(pids) == 2 and all(ended(pid, 60) for pid in pids)


@pytest.mark.parametrize("cluster", ["tcp://10.1.2.3:8786", "tcp://node1.example.org:8786", "tcp://0.0.0.0:8786"])
def test_plain_tcp_beyond_loopback_is_refused(cluster):
    with pytest.raises(InputError, match=r"plain tcp:// is unencrypted and unauthenticated .* loopback only; use "
                                         r"tls://.* with certificates from `pep cluster certs DIR`"):
        parse_cluster(cluster)
    for loopback in ("tcp://127.0.0.1:8786", "tcp://localhost:8786", "tcp://[::1]:8786"):
        assert parse_cluster(loopback) == ("scheduler", loopback)
    assert parse_cluster("tls://10.1.2.3:8786") == ("scheduler", "tls://10.1.2.3:8786")
