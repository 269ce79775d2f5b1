"""infra/docker-compose.yml checked by a real Compose parser (``docker-compose`` from Debian, or the
``docker compose`` plugin): it must validate, publish ports on the host's 127.0.0.1 only, run the Dask
cluster with TLS (each container holding only its own role's key, never the CA's) and the Prefect API
with an auth string and CSRF protection, which it refuses to start without. No Docker engine is needed
(``config`` only parses and resolves)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.infra  # real processes or the cluster tools' validators: the infra tier

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


AUTH = "pep:0123456789abcdef"


def config(compose: list[str], path: Path, auth: str | None = AUTH) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PEP_CERTS": "/srv/pep-certs", **({"PEP_PREFECT_AUTH": auth} if auth else {})}
    return subprocess.run([*compose, "-f", str(path), "config"], capture_output=True, text=True, timeout=60, env=env)


def mounts(service: dict) -> set[str]:
    """A service's volumes as ``SOURCE:TARGET[:MODE]`` strings, in either of Compose's two forms."""
    return {v if isinstance(v, str) else f"{v['source']}:{v['target']}" + (":ro" if v.get("read_only") else "")
            for v in service.get("volumes", [])}


def test_the_compose_file_validates_with_loopback_ports_and_a_tls_cluster(compose):
    result = config(compose, COMPOSE_FILE)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"prefect-server", "dask-scheduler", "dask-worker", "prefect-worker", "pep"}
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published and all(str(port).startswith("127.0.0.1:") or (isinstance(port, dict) and port.get("host_ip") == "127.0.0.1")
                             for port in published), published
    roles = {"dask-scheduler": "scheduler", "dask-worker": "worker", "prefect-worker": "client", "pep": "client"}
    for name, role in roles.items():
        certificates = {m for m in mounts(services[name]) if "pep-certs" in m}
        assert certificates == {f"/srv/pep-certs/{file}:/etc/pep-tls/{file}:ro"
                                for file in ("ca.pem", f"{role}.pem", f"{role}-key.pem")}, certificates
    assert not any("pep-certs" in m for m in mounts(services["prefect-server"]))
    for name in ("dask-scheduler", "dask-worker"):
        command = services[name]["command"]
        assert {"--tls-ca-file", "--tls-cert", "--tls-key"} <= set(command), command
        assert command[command.index("--tls-key") + 1] == f"/etc/pep-tls/{roles[name]}-key.pem"
    assert "tls://dask-scheduler:8786" in services["dask-worker"]["command"]
    server = services["prefect-server"]["environment"]
    assert server["PREFECT_SERVER_API_AUTH_STRING"] == AUTH
    assert server["PREFECT_SERVER_API_CSRF_PROTECTION_ENABLED"] == "true"
    assert server["PREFECT_SERVER_API_CORS_ALLOWED_ORIGINS"] == "http://127.0.0.1:4200"
    worker = services["prefect-worker"]
    assert worker["network_mode"] == "service:prefect-server"
    assert worker["environment"]["PEP_DASK_SCHEDULER"] == "tls://dask-scheduler:8786"
    assert worker["environment"]["PREFECT_API_URL"] == "http://127.0.0.1:4200/api"
    assert worker["environment"]["PREFECT_API_AUTH_STRING"] == AUTH


def test_the_stack_does_not_start_without_an_auth_string(compose):
    result = config(compose, COMPOSE_FILE, auth=None)
    assert result.returncode != 0 and "set PEP_PREFECT_AUTH=user:password" in result.stderr + result.stdout


def test_the_parser_rejects_a_broken_file(compose, tmp_path):
    broken = yaml.safe_load(COMPOSE_FILE.read_text())
    broken["services"]["dask-worker"]["depends_on"] = "dask-scheduler"  # must be a list or mapping
    broken["services"]["dask-worker"]["build"]["context"] = str(ROOT)
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    result = config(compose, path)
    assert result.returncode != 0 and "depends_on" in result.stderr + result.stdout


def test_runs_start_inside_the_network_and_the_prefect_database_persists(compose):
    """The header's commands run ``pep`` in the ``pep`` service (which sees the pep-data volume and the
    scheduler by its service name), never on the host; the server's database lives in a named volume."""
    services = yaml.safe_load(config(compose, COMPOSE_FILE).stdout)["services"]
    cli = services["pep"]
    assert cli["profiles"] == ["cli"]  # `up` does not start it; `run --rm pep …` does
    assert {"pep-data:/work", "pep-data:/work:rw"} & mounts(cli) and cli["working_dir"] == "/work"
    assert cli["environment"]["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"] == "/etc/pep-tls/client-key.pem"
    header = "\n".join(line for line in COMPOSE_FILE.read_text().splitlines() if line.startswith("#"))
    assert "--cluster tls://127.0.0.1" not in header  # the host cannot see the containers' volume
    commands = [line.lstrip("# ") for line in header.splitlines() if "run --rm" in line]
    assert commands and all(line.startswith("docker compose -f infra/docker-compose.yml run --rm") for line in commands)
    assert "--cluster tls://dask-scheduler:8786" in header and "dask-scheduler" in services
    server = services["prefect-server"]
    database = f"prefect-db:{server['environment']['PREFECT_HOME']}"
    assert {database, f"{database}:rw"} & mounts(server)
