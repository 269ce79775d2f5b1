"""infra/docker-compose.yml checked by a real Compose parser (``docker-compose`` from Debian, or the
``docker compose`` plugin): it must validate, publish ports on the host's 127.0.0.1 only and run the
Dask cluster with TLS. No Docker engine is needed (``config`` only parses and resolves)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "infra/docker-compose.yml"


def compose_command() -> list[str] | None:
    """``docker-compose`` (Debian's package) or ``docker compose`` (the plugin), whichever works."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return None


@pytest.fixture(scope="module")
def compose() -> list[str]:
    command = compose_command()
    if command is None:
        pytest.skip("no Compose parser: neither `docker-compose` (apt-get install docker-compose) nor the "
                    "`docker compose` plugin is installed")
    return command


def config(compose: list[str], path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*compose, "-f", str(path), "config"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "PEP_CERTS": "/srv/pep-certs"})


def test_the_compose_file_validates_with_loopback_ports_and_a_tls_cluster(compose):
    result = config(compose, COMPOSE_FILE)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker"}
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(str(port).startswith("127.0.0.1:") or (isinstance(port, dict) and port.get("host_ip") == "127.0.0.1")
                             for port in published), published
    for name in ("dask-scheduler", "dask-worker"):
        command = services[name]["command"]
        assert {"--tls-ca-file", "--tls-cert", "--tls-key"} <= set(command), command
        assert "/srv/pep-certs:/etc/pep-tls:ro" in services[name]["volumes"]
    assert "tls://dask-scheduler:8786" in services["dask-worker"]["command"]
    worker = services["prefect-worker"]
    assert worker["network_mode"] == "service:prefect-server"
    assert worker["environment"]["PEP_DASK_SCHEDULER"] == "tls://dask-scheduler:8786"
    assert worker["environment"]["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"


def test_the_parser_rejects_a_broken_file(compose, tmp_path):
    broken = yaml.safe_load(COMPOSE_FILE.read_text())
    broken["services"]["dask-worker"]["depends_on"] = "dask-scheduler"  # must be a list or mapping
    broken["services"]["dask-worker"]["build"]["context"] = str(ROOT)
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    result = config(compose, path)
    assert result.returncode != 0 and "depends_on" in result.stderr + result.stdout
