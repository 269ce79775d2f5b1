"""A loopback stack of real processes, as infra/README.md starts it: a Prefect server (an auth string
required, CSRF protection on), the ``pep`` process work pool with ``prefect.yaml``'s deployments, a
Prefect worker, a Dask scheduler and two Dask workers speaking TLS with ``pep cluster certs``'
certificates — each bound to 127.0.0.1, each stopped by its process-group id at the end."""

from __future__ import annotations

import json
import re
import secrets
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.infra import training_faults
from tests.infra.loopback import (DASK_WORKER_ENV, Processes, client_tls_env, cluster_certs, dask_scheduler,
                                  dask_worker, free_port, leftovers, tls_options, wait_until)
from tests.trainstores import make_store

FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
AUTH = f"pep:{secrets.token_hex(16)}"  # PREFECT_API_AUTH_STRING, user:password
QUICK_POLLS = {"PREFECT_WORKER_QUERY_SECONDS": "2"}
"""The Prefect worker asks the server for scheduled runs every 2 s (10 s by default: each flow run the tests start
waited up to that long to be picked up); what the runs do is the same. Not the deployment concurrency limit's
wait (``PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS``, 30 s): each try of a run kept waiting logs
the worker's refused submission to that run, and at 5 s, on a 2-core machine at load 30, runs of the scheduled
``refresh`` logged up to 74 refusals each, past which the test's first 200 lines of a run
(:meth:`Stack.logs`) missed the run's own."""


def server_settings(auth: str) -> dict[str, str]:
    """What infra/README.md gives ``prefect server start``: the auth string, CSRF protection, CORS for the UI."""
    return {"PREFECT_SERVER_API_AUTH_STRING": auth, "PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED": "true",
            "PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS": "http://127.0.0.1:4200"}


class BusyServerRetries(httpx.HTTPTransport):
    """Sends a request again when the server answers 503, as Prefect's own client does (429, 502 and 503,
    with backoff, ``prefect.client.base``): Prefect's server says 503 while its database is busy, which a
    loaded 2-core machine sees (a run's pause request was refused so once, after both runs had passed)."""

    ATTEMPTS = 5

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for attempt in range(self.ATTEMPTS - 1):
            response = super().handle_request(request)
            if response.status_code != 503:
                return response
            response.close()
            time.sleep(2**attempt)
        return super().handle_request(request)


class Stack:
    """The running loopback stack and what the tests do with it."""

    def __init__(self, processes: Processes, api_url: str, scheduler: str, home: Path, workers_dir: Path,
                 certs: dict[str, str]):
        self.processes, self.api_url, self.scheduler, self.certs = processes, api_url, scheduler, certs
        self.home, self.workers_dir = home, workers_dir  # PEP_HOME, and where the Dask workers start
        self.dask_workers = 0
        self.http = httpx.Client(auth=tuple(AUTH.split(":", 1)), timeout=30, transport=BusyServerRetries())

    def with_csrf_token(self) -> None:
        """Send a CSRF token with every request from now on (the server refuses writes without one)."""
        token = self.http.get(f"{self.api_url}/csrf-token", params={"client": "pep-infra-tests"}).json()["token"]
        self.http.headers.update({"Prefect-Csrf-Token": token, "Prefect-Csrf-Client": "pep-infra-tests"})

    # -- processes --------------------------------------------------------------------------------
    def start_prefect_worker(self) -> None:
        self.processes.start("prefect-worker", "prefect", "worker", "start", "--pool", "pep")
        wait_until(lambda: "started!" in self.processes.log("prefect-worker"), 120, "the Prefect worker")

    def start_dask_worker(self) -> str:
        self.dask_workers += 1
        name = f"dask-worker-{self.dask_workers}"
        self.processes.start(name, *dask_worker(self.scheduler, name, *tls_options(self.certs, "worker")),
                             env=DASK_WORKER_ENV, cwd=self.workers_dir)
        return name

    def dask_worker_names(self) -> list[str]:
        return [name for name in self.processes.started if name.startswith("dask-worker-")]

    def client(self, timeout: float = 30):
        """A Dask client of the stack's scheduler, with the client certificate."""
        from distributed import Client
        from distributed.security import Security

        security = Security(tls_ca_file=self.certs["ca"], tls_client_cert=self.certs["client_cert"],
                            tls_client_key=self.certs["client_key"], require_encryption=True)
        return Client(self.scheduler, security=security, timeout=timeout)

    def wait_for_dask_workers(self, n: int) -> None:
        with self.client(timeout=120) as client:  # the stack's start loads two cores for minutes
            client.wait_for_workers(n, timeout=120)

    # -- Prefect ----------------------------------------------------------------------------------
    def run_deployment(self, parameters: dict[str, Any]) -> str:
        """``prefect deployment run pep-pipeline/pipeline --params JSON``; the flow run's id."""
        output = self.processes.run("prefect", "deployment", "run", "pep-pipeline/pipeline", "--params",
                                    json.dumps(parameters))
        return re.search(r"UUID:\s*([0-9a-f-]{36})", output).group(1)

    def flow_run(self, flow_run_id: str) -> dict[str, Any]:
        return self.http.get(f"{self.api_url}/flow_runs/{flow_run_id}").json()

    def wait_for_flow_run(self, flow_run_id: str, timeout: float = 300) -> dict[str, Any]:
        return wait_until(lambda: (run := self.flow_run(flow_run_id))["state_type"] in FINAL and run,
                          timeout, f"flow run {flow_run_id}", interval=1)

    def logs(self, flow_run_id: str, since: datetime | None = None) -> list[str]:
        """Messages logged by the flow run and its sub-flows (tasks included) since ``since``,
        oldest first."""
        children = self.http.post(f"{self.api_url}/flow_runs/filter", json={
            "flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}}).json()
        selected = {"flow_run_id": {"any_": [flow_run_id, *(run["id"] for run in children)]}}
        if since is not None:
            selected["timestamp"] = {"after_": since.isoformat()}
        found = self.http.post(f"{self.api_url}/logs/filter", json={
            "logs": selected, "sort": "TIMESTAMP_ASC", "limit": 200}).json()
        return [entry["message"] for entry in found]

    def artifact(self, key: str) -> dict[str, Any] | None:
        found = self.http.post(f"{self.api_url}/artifacts/filter", json={
            "artifacts": {"key": {"any_": [key]}}, "sort": "CREATED_DESC", "limit": 1}).json()
        return found[0] if found else None


def fresh_clone(directory: Path) -> Path:
    """``directory`` as the docs' commands find a fresh clone after its set-up: nothing in it but the
    virtual environment ``.venv`` (this interpreter's), so that relative paths in those commands land
    here, not in the repository."""
    directory.mkdir()
    (directory / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return directory


@pytest.fixture(scope="package")
def stack(tmp_path_factory):
    """Everything infra/README.md §1–2 starts, on free ports of 127.0.0.1; the deployments' working
    directory (``PEP_HOME``) a fresh clone's, the Dask workers started in another directory (as on
    other machines: a relative path in a flow's parameters means nothing there)."""
    home = tmp_path_factory.mktemp("loopback")
    clone, workers_dir = fresh_clone(home / "clone"), home / "dask-workers"
    workers_dir.mkdir()
    api_port, scheduler_port = free_port(), free_port()
    api_url = f"http://127.0.0.1:{api_port}/api"
    scheduler = f"tls://127.0.0.1:{scheduler_port}"
    certs = cluster_certs(home / "certs")
    processes = Processes(home / "logs", {**client_tls_env(certs),
        "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_API_URL": api_url, "PREFECT_API_AUTH_STRING": AUTH,
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", "PEP_HOME": str(clone), "PEP_DASK_SCHEDULER": scheduler,
        **QUICK_POLLS})
    try:
        processes.start("prefect-server", "prefect", "server", "start", "--host", "127.0.0.1",
                        "--port", str(api_port), env=server_settings(AUTH))
        processes.start("dask-scheduler", *dask_scheduler(scheduler_port, "--protocol", "tls",
                                                          *tls_options(certs, "scheduler")))
        stack = Stack(processes, api_url, scheduler, clone, workers_dir, certs)
        for _ in range(2):
            stack.start_dask_worker()
        wait_until(lambda: _healthy(api_url), 180, "the Prefect server")
        stack.with_csrf_token()
        processes.run("prefect", "work-pool", "create", "pep", "--type", "process")
        processes.run("prefect", "--no-prompt", "deploy", "--all", timeout=300)
        stack.start_prefect_worker()
        stack.wait_for_dask_workers(2)
        yield stack
    finally:
        processes.stop_all()
    assert not leftovers(processes.token), "processes of the loopback stack outlived their teardown"


def _healthy(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="session")
def fault_store(tmp_path_factory):
    """The binary store the fault tests train on (:mod:`tests.infra.training_faults`)."""
    return make_store(tmp_path_factory.mktemp("fault-store") / "binary.zarr")


@pytest.fixture(scope="session")
def fault_reference(fault_store, tmp_path_factory):
    """The final params of the fault tests' run, undisturbed and in this process: what a disturbed run must
    end with, to the bit."""
    run_dir = tmp_path_factory.mktemp("fault-reference") / "run"
    return train(TrainJob(training_faults.MODEL, fault_store, training_faults.CONFIG, run_dir)).params
