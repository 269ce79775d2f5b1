"""``local:N``'s ``LocalCluster`` — its scheduler and its nannies — in a process of its own, so that the
coordinator's process runs only the client and the engine's calls.

A ``LocalCluster`` started in the coordinator's process runs the scheduler and every worker's nanny on the
coordinator's event loop, the one that also encrypts, frames and sends the engine's calls (Dask's comms):
the scheduler's tick and heartbeats and the nannies' memory monitors then cost the coordinator CPU all the
time, 11 ms per second idle with the tick at 1 s (``docs/results/benchmarks.md``, *Distributed engine*).
Here a child process (this file run as a script: it imports Dask, not pep or JAX) starts the cluster with
the coordinator's TLS credentials, Dask configuration and import path (its workers unpickle what the
coordinator sends), says its scheduler's address on its standard output,
and closes the cluster and exits when its standard input ends: when :meth:`ClusterProcess.close` closes it,
or when the coordinator's process ends, killed or not.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
import sys
import threading
from typing import Any

START_TIMEOUT_S = 120.0
"""Seconds the child may take to start the cluster and say its address."""
CLOSE_TIMEOUT_S = 30.0
"""Seconds the child may take to close the cluster once told to, before it is killed."""


class ClusterProcess:
    """A ``LocalCluster(**options)`` in a child process: ``scheduler_address`` for a client, ``security``
    (the credentials the cluster was given) and :meth:`close`.

    Args:
        options: keyword arguments of ``distributed.LocalCluster`` (``security`` a ``Security`` object, not
            True: the client needs the same credentials).
        config: Dask's configuration for the child (``dask.config.config``, with the caller's settings).

    Raises:
        OSError: the child ended or stayed silent for :data:`START_TIMEOUT_S` before saying its address.
    """

    def __init__(self, options: dict[str, Any], config: dict[str, Any]):
        self.security = options.get("security")
        self._process = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._process.stdin.write(pickle.dumps(list(sys.path)) + pickle.dumps((config, options)))
        self._process.stdin.flush()
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self._process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if not line or not line[0]:
            self.close()
            raise OSError(f"the local cluster's process did not start within {START_TIMEOUT_S:g} s")
        self.scheduler_address = json.loads(line[0])["scheduler"]

    def close(self) -> None:
        """Close the cluster (its workers with it) and wait for the child to end; killed after
        :data:`CLOSE_TIMEOUT_S`."""
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(CLOSE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


def serve() -> None:
    """The child: starts the cluster from the pickled ``sys.path`` and ``(config, options)`` on standard
    input, writes ``{"scheduler": address}`` on standard output, and closes the cluster when standard input
    ends."""
    sys.path[:] = pickle.load(sys.stdin.buffer)
    import dask
    from distributed import LocalCluster

    config, options = pickle.load(sys.stdin.buffer)
    dask.config.update(dask.config.config, config, priority="new")

    async def run() -> None:
        async with LocalCluster(asynchronous=True, **options) as cluster:
            sys.stdout.write(json.dumps({"scheduler": cluster.scheduler_address}) + "\n")
            sys.stdout.flush()
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)  # until it ends

    asyncio.run(run())


if __name__ == "__main__":
    serve()
