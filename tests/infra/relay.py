"""A delaying TCP relay, the latency of an emulated link where the kernel has no ``netem``: it accepts
connections on one address and forwards each to a target, holding every chunk it reads for ``delay``
seconds before writing it on, in each direction, so a request and its answer cross it in two delays.
Chunks are forwarded in order and as they come (the delay does not limit the rate: that is the link's
``tc`` rate's job). Each direction is a reader thread and a writer thread: ``time.sleep`` keeps a delay
of 0.1 ms to within tens of microseconds, where an event loop's timers round up to whole milliseconds.

Run where the target is reachable (inside its host's network namespace)::

    python -m tests.infra.relay LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_SECONDS
    python -m tests.infra.relay --echo LISTEN_HOST LISTEN_PORT    # answers every byte with itself

The echo server is what :func:`tests.infra.namespaces.probe` measures a link's round trip and rate with.
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time

CHUNK = 1 << 18
QUEUED_CHUNKS = 64  # at most 16 MiB held per direction: a slow reader holds the writer back


def _read(source: socket.socket, held: queue.Queue, delay: float) -> None:
    try:
        while chunk := source.recv(CHUNK):
            held.put((time.monotonic() + delay, chunk))
    except OSError:
        pass
    held.put(None)


def _write(held: queue.Queue, sink: socket.socket, both: tuple[socket.socket, socket.socket]) -> None:
    try:
        while (item := held.get()) is not None:
            due, chunk = item
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            sink.sendall(chunk)
    except OSError:
        pass
    for end in both:  # one direction ended: so does the connection (Dask's comms close whole)
        try:
            end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _forward(client: socket.socket, target: tuple[str, int], delay: float) -> None:
    try:
        server = socket.create_connection(target, timeout=30)
    except OSError:
        client.close()
        return
    server.settimeout(None)
    for end in (client, server):
        end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    both = (client, server)
    for source, sink in ((client, server), (server, client)):
        held: queue.Queue = queue.Queue(QUEUED_CHUNKS)
        threading.Thread(target=_read, args=(source, held, delay), daemon=True).start()
        threading.Thread(target=_write, args=(held, sink, both), daemon=True).start()


def _echo(client: socket.socket) -> None:
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while chunk := client.recv(CHUNK):
            client.sendall(chunk)
    except OSError:
        pass
    client.close()


def serve(host: str, port: int, handle, *args) -> None:
    """Accept connections on ``host:port`` for ever, each handled by ``handle(connection, *args)`` on a
    thread of its own."""
    with socket.create_server((host, port), backlog=128) as listener:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=handle, args=(client, *args), daemon=True).start()


def main(argv: list[str]) -> None:
    if argv[0] == "--echo":
        serve(argv[1], int(argv[2]), _echo)
    else:
        host, port, target_host, target_port, delay = argv
        serve(host, int(port), _forward, (target_host, int(target_port)), float(delay))


if __name__ == "__main__":
    main(sys.argv[1:])
