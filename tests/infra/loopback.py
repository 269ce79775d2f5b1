"""Real processes on 127.0.0.1 for the infra tests: start them in their own process group, wait for
them within a time bound, stop them by process-group id, and find any that escaped.

Every process started here carries ``PEP_LOOPBACK_TOKEN=<token>`` in its environment, which its
children inherit (a Prefect worker's flow-run subprocess, a Dask nanny's worker): :func:`leftovers`
finds them through ``/proc`` even when they left the process group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TOKEN_VARIABLE = "PEP_LOOPBACK_TOKEN"

# The worker settings of infra/README.md: one thread per worker process, one BLAS thread, and glibc's
# adaptive trim threshold instead of the nanny's 65536.
DASK_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                   "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON__MALLOC_TRIM_THRESHOLD_": "1000000000"}


def cluster_certs(directory: Path) -> dict[str, str]:
    """``pep cluster certs DIR --json``, run as a user would: the CA's and each role's certificate and key."""
    result = subprocess.run([str(BIN / "pep"), "cluster", "certs", str(directory), "--json"],
                            capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def tls_options(certs: dict[str, str], role: str) -> tuple[str, ...]:
    """A ``dask scheduler`` / ``dask worker`` / ``pep`` command's TLS options for ``role``."""
    return ("--tls-ca-file", certs["ca"], "--tls-cert", certs[f"{role}_cert"], "--tls-key", certs[f"{role}_key"])


def client_tls_env(certs: dict[str, str]) -> dict[str, str]:
    """Dask's client TLS configuration in the environment (how a Prefect worker hands it to its flow runs),
    with encryption required."""
    return {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": certs["ca"],
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": certs["client_cert"],
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": certs["client_key"],
            "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}


def dask_scheduler(port: int, *options: str) -> tuple[str, ...]:
    """``dask scheduler`` on 127.0.0.1:``port``, its dashboard on a free loopback port."""
    return ("dask", "scheduler", "--host", "127.0.0.1", "--port", str(port), "--dashboard-address",
            "127.0.0.1:0", *options)


def dask_worker(scheduler: str, name: str, *options: str) -> tuple[str, ...]:
    """``dask worker`` with infra/README.md's settings (run it with :data:`DASK_WORKER_ENV`), listening
    on 127.0.0.1 (its health/metrics server too: ``--dashboard-address``, whose default is all
    interfaces even with ``--no-dashboard``)."""
    return ("dask", "worker", scheduler, "--nthreads", "1", "--host", "127.0.0.1", "--dashboard-address",
            "127.0.0.1:0", "--name", name, *options)


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(interval)


class Processes:
    """The processes one test module starts; :meth:`stop_all` ends them (process groups, by id)."""

    def __init__(self, log_dir: Path, env: dict[str, str]):
        self.log_dir, self.token = log_dir, uuid.uuid4().hex
        self.env = {**os.environ, **env, TOKEN_VARIABLE: self.token}
        self.started: dict[str, subprocess.Popen] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, *command: str, env: dict[str, str] | None = None,
              cwd: Path = ROOT) -> subprocess.Popen:
        """Start ``command`` (its first word from the venv's bin/ unless it is an absolute path) as the
        leader of a new process group, its output in ``log_dir/<name>.log``."""
        log = open(self.log_dir / f"{name}.log", "ab")
        process = subprocess.Popen([str(BIN / command[0]), *command[1:]], cwd=cwd, stdout=log,
                                   stderr=subprocess.STDOUT, env={**self.env, **(env or {})},
                                   start_new_session=True)
        log.close()
        self.started[name] = process
        return process

    def run(self, *command: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
        """Run a command to completion (bounded in time); its output, or an error with it."""
        result = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True,
                                text=True, timeout=timeout, env={**self.env, **(env or {})})
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 30) -> None:
        """Send ``sig`` to the process group of ``name`` and wait for its leader to exit."""
        process = self.started.pop(name)
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout)

    def stop_all(self) -> None:
        """SIGTERM every group (newest first), SIGKILL what is still there after 15 s, then every
        process that still carries this module's token, and wait up to 10 s for those to be gone (a killed
        process takes a moment to exit on a loaded machine)."""
        for name in reversed(list(self.started)):
            self.kill(name, signal.SIGTERM, timeout=15)
        deadline = time.monotonic() + 10
        while (remaining := leftovers(self.token)) and time.monotonic() < deadline:
            for pid in remaining:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)


def leftovers(token: str) -> list[int]:
    """Ids of live processes whose environment holds ``PEP_LOOPBACK_TOKEN=token``."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def listening_addresses(pids: list[int]) -> dict[str, str]:
    """``{host:port: command line}`` of every TCP socket in LISTEN state owned by one of ``pids``."""
    owners: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    owners[target[8:-1]] = pid
        except OSError:
            continue
    found = {}
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in owners:  # 0A: LISTEN
                host, port = fields[1].split(":")
                pid = owners[fields[9]]
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found[f"{_host(host, width)}:{int(port, 16)}"] = f"{pid}: {command[:160]}"
    return found


def listening_sockets(token: str) -> tuple[dict[str, str], dict[str, str]]:
    """The listening sockets of the processes carrying ``token``: (all of them, those not on loopback)."""
    listening = listening_addresses(leftovers(token))
    outside = {address: owner for address, owner in listening.items()
               if address.rsplit(":", 1)[0] not in ("127.0.0.1", "::1")}
    return listening, outside


def _host(hexadecimal: str, width: int) -> str:
    raw = bytes.fromhex(hexadecimal)
    if width == 8:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)
