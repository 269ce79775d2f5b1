"""Training over TLS (issue 12): ``pep cluster certs`` makes a CA and certificates, a ``dask scheduler``
and two ``dask worker`` processes on 127.0.0.1 use them, ``pep train --cluster tls://…`` trains with
the client certificate — and a client without one, or with one of another CA, is refused."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess

import pytest

from pep_gp.flows.cluster import make_certificates
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.runs.run import load_run
from tests.infra.loopback import (BIN, DASK_WORKER_ENV, Processes, cluster_certs, dask_scheduler, dask_worker,
                                  free_port, leftovers, listening_sockets, tls_options, wait_until)
from tests.trainstores import FAST, config_toml, leaves_equal, make_store

pytestmark = pytest.mark.infra

MODEL = "sparse-gp-classifier"
ENCRYPTED = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict:
    """``pep cluster certs DIR --json``, run as a user would."""
    return cluster_certs(tmp_path_factory.mktemp("tls") / "certs")


@pytest.fixture(scope="module")
def tls_cluster(certs, tmp_path_factory):
    """A TLS scheduler and two TLS workers on 127.0.0.1: (address, processes)."""
    home = tmp_path_factory.mktemp("tls-cluster")
    processes = Processes(home / "logs", {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                                          "PREFECT_HOME": str(home / "prefect"),
                                          "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"})
    port = free_port()
    address = f"tls://127.0.0.1:{port}"
    try:
        processes.start("dask-scheduler", *dask_scheduler(port, "--protocol", "tls", *tls_options(certs, "scheduler")),
                        env=ENCRYPTED)
        for i in (1, 2):
            processes.start(f"dask-worker-{i}", *dask_worker(address, f"tls-worker-{i}", *tls_options(certs, "worker")),
                            env={**DASK_WORKER_ENV, **ENCRYPTED})
        wait_until(lambda: processes.log("dask-scheduler").count("Register worker") >= 2, 120,
                   "two TLS workers to register")
        yield address, processes
    finally:
        processes.stop_all()
    assert not leftovers(processes.token), "processes of the TLS cluster outlived their teardown"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("tls-store") / "binary.zarr")


def pep(processes: Processes, *arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pep"), *arguments], capture_output=True, text=True, timeout=300,
                          env={**processes.env, **(env or {})})


def test_pep_train_over_tls_matches_in_process_training(tls_cluster, certs, store, tmp_path):
    address, processes = tls_cluster
    config = tmp_path / "fast.toml"
    config.write_text(config_toml(FAST))
    run_dir = tmp_path / "tls-run"
    result = pep(processes, "train", "--model", MODEL, "--data", store.path, "--run-dir", str(run_dir),
                 "--config", str(config), "--cluster", address, *tls_options(certs, "client"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["cluster"] == address and summary["steps"] == 15
    reference = train(TrainJob(MODEL, store, FAST, tmp_path / "in-process"))
    assert leaves_equal(load_run(run_dir).trees["params"], reference.params)
    # The other documented way: Dask's configuration through the environment.
    env = {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": certs["ca"],
           "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": certs["client_cert"],
           "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": certs["client_key"]}
    evaluated = pep(processes, "evaluate", "--run-dir", str(run_dir), "--cluster", address, "--json", env=env)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["test_error"] == summary["test_error"]


def connects(address: str, **security) -> bool:
    """Whether a Dask client with these TLS settings gets a connection to the scheduler."""
    from distributed import Client
    from distributed.security import Security

    try:
        with Client(address, security=Security(**security) if security else None, timeout=5):
            return True
    except (OSError, TimeoutError):
        return False


def server_verdict(address: str, ca: str, cert: str | None = None, key: str | None = None) -> str:
    """What the scheduler answers a raw TLS client: "accepted" (it speaks Dask or waits for the client
    to) or the alert with which it refused the client's certificate (or the lack of one)."""
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    context.check_hostname = False
    if cert:
        context.load_cert_chain(cert, key)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                tls.settimeout(2)
                spoken = tls.recv(1)  # TLS 1.3: the verdict on the client's certificate follows the handshake
        except TimeoutError:
            return "accepted"
        except (ssl.SSLError, ConnectionError) as error:
            return str(error)
    return "accepted" if spoken else "closed"


def test_a_client_without_the_clusters_certificate_is_refused(tls_cluster, certs, store, tmp_path):
    address, processes = tls_cluster
    stranger = make_certificates(tmp_path / "other-ca")
    assert connects(address, tls_ca_file=certs["ca"], tls_client_cert=certs["client_cert"],
                    tls_client_key=certs["client_key"], require_encryption=True)
    assert not connects(address.replace("tls://", "tcp://"))  # no TLS at all
    assert server_verdict(address, certs["ca"], certs["client_cert"], certs["client_key"]) == "accepted"
    assert "CERTIFICATE_REQUIRED" in server_verdict(address, certs["ca"])  # no certificate
    assert "UNKNOWN_CA" in server_verdict(address, certs["ca"], stranger["client_cert"], stranger["client_key"])
    refused = pep(processes, "train", "--model", MODEL, "--data", store.path, "--run-dir", str(tmp_path / "r"),
                  "--cluster", address)
    assert refused.returncode == 2 and "needs a CA and a client certificate" in refused.stderr


def test_the_tls_cluster_listens_on_loopback_only(tls_cluster):
    listening, outside = listening_sockets(tls_cluster[1].token)
    assert len(listening) >= 5 and not outside, outside  # scheduler, dashboard, 2 workers, 2 nannies
