"""Emulated hosts on one machine (issue 66): each host a Linux network namespace with one veth link to a
bridge in a switch namespace, the link rate-limited in both directions by ``tc``'s token bucket filter
and delayed by a TCP relay (:mod:`tests.infra.relay`: this kernel has no ``netem``) in front of every
server a host offers across it; a TLS Dask scheduler on the ``head`` host (where pep's coordinator runs,
as on a cluster's login node) and one ``dask worker`` per worker host, each reading the training store at
the same path (as from a shared file system).

The link's latency is one way: a request and its answer between two hosts take ``2 × latency`` more
than on one machine (the relay delays each direction once); TCP's own acknowledgements are not delayed
(the relay ends the connection), so the window's growth does not see it. Everything the harness makes —
namespaces (and with them their veths and bridge) and the processes in them (relays, scheduler, workers)
— it removes when its ``with`` block ends, on an error or a KeyboardInterrupt too. It needs root and
``ip``/``tc`` (iproute2): :func:`namespaces_unavailable` says why not where they are missing, and the
tests that use it skip with that line.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.infra.loopback import BIN, DASK_WORKER_ENV, ROOT, Processes, client_tls_env, tls_options, wait_until

IP = shutil.which("ip") or "ip"
SCHEDULER_PORT, SCHEDULER_LISTENS = 8786, 8787  # the relay's port on the head's link, the scheduler's on its loopback
WORKER_PORT, WORKER_LISTENS = 9000, 9001
ECHO_PORT, ECHO_LISTENS = 7000, 7001
TCP_TIMEOUT = "12s"
"""Dask's ``distributed.comm.timeouts.tcp`` in every process (30 s by default; 11 s is its least): a
connection over a link that went down is given up after this long (TCP keepalive and user timeout)."""


@functools.cache
def namespaces_unavailable() -> str | None:
    """Why this machine cannot make network namespaces (one line), or None when it can."""
    if os.geteuid() != 0:
        return "emulated hosts need root (ip netns add): not root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"emulated hosts need iproute2's {' and '.join(missing)}: not installed"
    probe = f"pep-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"emulated hosts: ip netns add failed ({made.stderr.strip()})"
    subprocess.run([IP, "netns", "delete", probe], capture_output=True)
    return None


@dataclass(frozen=True)
class Link:
    """A host's link: ``rate`` bits per second each way, ``latency`` seconds one way."""

    rate: float
    latency: float

    @classmethod
    def parse(cls, text: str) -> "Link":
        """``"1gbit/0.5ms"`` (rates in bit, kbit, mbit or gbit; latency in ms or us)."""
        rate, _, latency = text.lower().partition("/")
        units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
        unit = next((u for u in units if rate.endswith(u)), None)
        scale = {"ms": 1e-3, "us": 1e-6}.get(latency[-2:])
        if unit is None or scale is None:
            raise ValueError(f"link {text!r}: expected RATE/LATENCY such as 1gbit/0.5ms")
        return cls(float(rate.removesuffix(unit)) * units[unit], float(latency[:-2]) * scale)

    @property
    def label(self) -> str:
        rate = next(f"{self.rate / s:g} {u}" for s, u in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1.0, "bit/s"))
                    if self.rate >= s)
        return f"{rate}, {self.latency * 1e3:g} ms"


def run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=60)


class Network:
    """The emulated hosts ``hosts`` (names of at most 8 characters), each with a :class:`Link` to the
    switch; a context manager that makes them on entry and removes them, and every process started
    through it, on exit."""

    def __init__(self, hosts: Sequence[str], link: Link, log_dir: Path, env: dict[str, str] | None = None):
        self.hosts, self.link, self.token = list(hosts), link, uuid.uuid4().hex[:8]
        self.processes = Processes(log_dir, {"DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": TCP_TIMEOUT, **(env or {})})
        self.switch = f"pep-{self.token}-switch"

    def namespace(self, host: str) -> str:
        return f"pep-{self.token}-{host}"

    def address(self, host: str) -> str:
        """The host's address on the switch's network."""
        return f"10.66.0.{self.hosts.index(host) + 1}"

    def __enter__(self) -> "Network":
        try:
            run(IP, "netns", "add", self.switch)
            run(IP, "-n", self.switch, "link", "add", "br0", "type", "bridge")
            run(IP, "-n", self.switch, "link", "set", "br0", "up")
            for i, host in enumerate(self.hosts):
                namespace, port = self.namespace(host), f"v{i}"
                run(IP, "netns", "add", namespace)
                run(IP, "link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", port,
                    "netns", self.switch)
                run(IP, "-n", self.switch, "link", "set", port, "master", "br0", "up")
                run(IP, "-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
                for device in ("lo", "eth0"):
                    run(IP, "-n", namespace, "link", "set", device, "up")
                self._shape(host, "add", self.link.rate)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop every process started here, then delete the namespaces (their veths and bridge go with them)."""
        try:
            self.processes.stop_all()
        finally:
            for namespace in [self.namespace(h) for h in self.hosts] + [self.switch]:
                subprocess.run([IP, "netns", "delete", namespace], capture_output=True, timeout=60)

    def leftovers(self) -> list[str]:
        """This network's namespaces that still exist."""
        listed = subprocess.run([IP, "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in listed.splitlines() if f"pep-{self.token}-" in line]

    # -- the links --------------------------------------------------------------------------------
    def _shape(self, host: str, verb: str, rate: float) -> None:
        """Token bucket filters of ``rate`` bit/s on both ends of ``host``'s link (its upload and download),
        with a bucket of 1 ms of traffic (at least 16 KiB) and a queue of at most 100 ms."""
        burst = str(max(int(rate / 8 * 1e-3), 16 * 1024))
        for namespace, device in ((self.namespace(host), "eth0"), (self.switch, f"v{self.hosts.index(host)}")):
            run("tc", "-n", namespace, "qdisc", verb, "dev", device, "root", "tbf", "rate", f"{int(rate)}bit",
                "burst", burst, "latency", "100ms")

    def set_rate(self, host: str, rate: float) -> None:
        """Change ``host``'s link rate (both ways) to ``rate`` bit/s."""
        self._shape(host, "change", rate)

    def set_link(self, host: str, up: bool) -> None:
        """Take ``host``'s link down at the switch (as a pulled cable: no process is signalled) or back up."""
        run(IP, "-n", self.switch, "link", "set", f"v{self.hosts.index(host)}", "up" if up else "down")

    # -- processes --------------------------------------------------------------------------------
    def start(self, host: str, name: str, *command: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``command`` (its first word from the venv's bin/ unless absolute) inside ``host``."""
        program = command[0] if os.path.isabs(command[0]) else str(BIN / command[0])
        return self.processes.start(name, IP, "netns", "exec", self.namespace(host), program, *command[1:], env=env)

    def relay(self, host: str, port: int, target_port: int) -> None:
        """A :mod:`tests.infra.relay` on ``host``'s address ``port`` to its loopback ``target_port``,
        delaying each direction by the link's latency."""
        self.start(host, f"relay-{host}-{port}", sys.executable, "-m", "tests.infra.relay", self.address(host),
                   str(port), "127.0.0.1", str(target_port), repr(self.link.latency))

    def listening(self, host: str, port: int, timeout: float = 60) -> None:
        """Wait until something in ``host`` accepts connections on ``port``."""
        def ready() -> bool:
            return subprocess.run([IP, "netns", "exec", self.namespace(host), "ss", "-Htln", f"sport = :{port}"],
                                  capture_output=True, text=True).stdout.strip() != ""
        wait_until(ready, timeout, f"a listener on {host}:{port}")


class Cluster:
    """A TLS Dask scheduler on ``head`` (listening on its loopback, reached by the workers through a relay
    on its link) and one single-threaded ``dask worker`` on each other host of ``network`` (listening on
    its loopback, advertising the relay on its link), with the certificates of ``pep cluster certs``;
    ``pinned``: the worker of the ``i``-th worker host runs on core ``i mod cores`` only, a host of one core
    (as ``local:N:pinned``, but pinned from its start: XLA then sizes its thread pool for one core, so its
    last bits may differ from an unpinned process's, and are the same for every number of workers)."""

    def __init__(self, network: Network, certs: dict[str, str], workers_dir: Path, pinned: bool = False):
        self.network, self.certs, self.workers_dir, self.pinned = network, certs, workers_dir, pinned
        self.env = {**DASK_WORKER_ENV, "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}

    @property
    def address(self) -> str:
        """The scheduler's address for a client on ``head`` (pep's coordinator)."""
        return f"tls://127.0.0.1:{SCHEDULER_LISTENS}"

    @property
    def client_env(self) -> dict[str, str]:
        """The environment a ``pep`` client on ``head`` gets the client certificate from."""
        return client_tls_env(self.certs)

    def start(self, workers: Sequence[str], timeout: float = 300) -> None:
        """Start the scheduler and a worker on each of the hosts ``workers``; wait until they registered."""
        net = self.network
        net.start("head", "scheduler", "dask", "scheduler", "--host", "127.0.0.1", "--port", str(SCHEDULER_LISTENS),
                  "--protocol", "tls", "--dashboard-address", "127.0.0.1:0",
                  *tls_options(self.certs, "scheduler"), env=self.env)
        net.relay("head", SCHEDULER_PORT, SCHEDULER_LISTENS)
        net.listening("head", SCHEDULER_LISTENS, timeout)
        for host in workers:
            self.start_worker(host)
        wait_until(lambda: net.processes.log("scheduler").count("Register worker") >= len(workers), timeout,
                   f"{len(workers)} workers to register")

    def start_worker(self, host: str) -> None:
        """A relay on ``host``'s link and a worker behind it, without a nanny: a worker that loses its
        scheduler closes (as it would with one: Dask's worker then closes its nanny too)."""
        net = self.network
        net.relay(host, WORKER_PORT, WORKER_LISTENS)
        core = (net.hosts.index(host) - 1) % os.cpu_count()
        dask = (shutil.which("taskset") or "taskset", "-c", str(core), str(BIN / "dask")) if self.pinned else ("dask",)
        net.start(host, f"worker-{host}", *dask, "worker", f"tls://{net.address('head')}:{SCHEDULER_PORT}",
                  "--nthreads", "1", "--no-nanny", "--name", host,
                  "--listen-address", f"tls://127.0.0.1:{WORKER_LISTENS}",
                  "--contact-address", f"tls://{net.address(host)}:{WORKER_PORT}",
                  "--dashboard-address", "127.0.0.1:0", "--no-dashboard", "--local-directory", str(self.workers_dir),
                  *tls_options(self.certs, "worker"), env=self.env)


def probe(network: Network, host: str, size: int) -> dict[str, float]:
    """The link's round trip and rate as measured from ``head`` to ``host`` through a relay and an echo
    server there: the median of 50 one-byte round trips, and ``size`` bytes sent while their echo is read
    (the rate is ``size`` over the time less one round trip)."""
    network.start(host, f"echo-{host}", sys.executable, "-m", "tests.infra.relay", "--echo", "127.0.0.1",
                  str(ECHO_LISTENS))
    network.relay(host, ECHO_PORT, ECHO_LISTENS)
    network.listening(host, ECHO_PORT)
    network.listening(host, ECHO_LISTENS)
    output = subprocess.run([IP, "netns", "exec", network.namespace("head"), sys.executable, "-m",
                             "tests.infra.namespaces", network.address(host), str(ECHO_PORT), str(size)],
                            capture_output=True, text=True, timeout=600, cwd=ROOT, check=True)
    return json.loads(output.stdout)


def _measure_link(host: str, port: int, size: int) -> dict[str, float]:
    """:func:`probe`'s measurement, run inside ``head``."""
    import threading

    import numpy as np

    with socket.create_connection((host, port), timeout=60) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        trips = []
        for _ in range(50):
            started = time.perf_counter()
            connection.sendall(b"x")
            connection.recv(1)
            trips.append(time.perf_counter() - started)
        rtt = float(np.median(trips))
        payload = b"\0" * (1 << 20)

        def send() -> None:
            for sent in range(0, size, len(payload)):
                connection.sendall(payload[:size - sent])

        started = time.perf_counter()
        sender = threading.Thread(target=send)
        sender.start()
        received = 0
        while received < size:
            received += len(connection.recv(1 << 20))
        seconds = time.perf_counter() - started
        sender.join()
    return {"round_trip_seconds": rtt, "rate_bytes_per_second": size / max(seconds - rtt, 1e-9), "probe_bytes": size}


if __name__ == "__main__":
    print(json.dumps(_measure_link(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
