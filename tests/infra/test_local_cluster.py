"""``--cluster local:N`` binds nothing beyond 127.0.0.1: its scheduler, dashboard and workers (issue 12)."""

from __future__ import annotations

import os
from pathlib import Path

from pep_gp.pipeline.engine import connect
from tests.infra.loopback import listening_addresses


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
