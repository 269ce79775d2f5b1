"""The emulated hosts' parts that need no namespace (issue 66): the delaying relay on loopback adds its
delay once each way and passes every byte in order, a link's text parses, and the scaling model with the
network's terms gives the one-host run's own step back and grows by ``b / β`` per host where the work is
nil."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks.emulated_hosts import model
from tests.infra.loopback import ROOT, free_port, wait_until
from tests.infra.namespaces import Link

DELAY = 0.05


def reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@pytest.fixture
def relayed_echo():
    """An echo server behind a relay delaying each direction by :data:`DELAY`: the relay's port."""
    echo_port, relay_port = free_port(), free_port()
    started = [subprocess.Popen([sys.executable, "-m", "tests.infra.relay", *arguments], cwd=ROOT)
               for arguments in (("--echo", "127.0.0.1", str(echo_port)),
                                 ("127.0.0.1", str(relay_port), "127.0.0.1", str(echo_port), str(DELAY)))]
    try:
        wait_until(lambda: reachable(echo_port) and reachable(relay_port), 30, "the relay and echo server")
        yield relay_port
    finally:
        for process in started:
            process.kill()
            process.wait(10)


def test_the_relay_delays_each_direction_and_keeps_every_byte_in_order(relayed_echo):
    payload = np.random.default_rng(0).bytes(3 << 20)
    with socket.create_connection(("127.0.0.1", relayed_echo), timeout=30) as connection:
        started = time.perf_counter()
        connection.sendall(b"x")
        assert connection.recv(1) == b"x"
        round_trip = time.perf_counter() - started
        connection.sendall(payload)
        echoed = bytearray()
        while len(echoed) < len(payload):
            echoed += connection.recv(1 << 20)
    assert 2 * DELAY <= round_trip < 2 * DELAY + 0.5
    assert bytes(echoed) == payload


def test_a_link_parses_its_rate_and_one_way_latency():
    assert Link.parse("1gbit/0.5ms") == Link(1e9, 0.5e-3)
    assert Link.parse("100mbit/2ms").label == "100 Mbit/s, 2 ms"
    with pytest.raises(ValueError, match="RATE/LATENCY"):
        Link.parse("fast")


def test_the_scaling_model_with_network_terms_gives_the_one_host_step_back():
    one = {"coordinator_seconds": 0.01, "worker_seconds": 2.0, "pass_overhead_seconds": 0.02,
           "wire_bytes_per_worker": 3e6, "payload_bytes_per_worker": 2.9e6}
    probed = {"round_trip_seconds": 1e-3, "rate_bytes_per_second": 1.25e8}
    terms, seconds = model(one, probed, blocks=16)
    assert seconds(1) == pytest.approx(0.01 + 2 * 0.02 + 2.0)  # c + 2L + p: the measured step's parts
    assert seconds(2) == pytest.approx(seconds(1) - 1.0 + 3e6 / 1.25e8)  # half the work, one more host's bytes
    idle = model({**one, "worker_seconds": 0.0}, probed, blocks=16)[1]
    assert idle(128) - idle(32) == pytest.approx(96 * 3e6 / 1.25e8)
    assert terms["local_pass_overhead_seconds"] == pytest.approx(0.02 - 1e-3 - 3e6 / 2.5e8, abs=1e-5)
