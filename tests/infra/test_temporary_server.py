"""The temporary Prefect server that ``--prefect`` gets without a configured API (issue 37 item 5): it
had no auth string and CORS ``*``, so any local process (or a web page) could read and change the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.infra

# What `pep … --prefect` does before its flow starts (prefect_quietly), then one call through Prefect's
# client (which starts the temporary server, as the flow would) and two without it.
PROBE = """
import json, httpx
from pep_gp.flows.runtime import prefect_quietly
prefect_quietly()
from prefect.client.orchestration import get_client
from prefect.server.api.server import SubprocessASGIServer
with get_client(sync_client=True) as client:
    client.read_flow_runs(limit=1)
api = SubprocessASGIServer().api_url
preflight = {"Origin": "https://example.org", "Access-Control-Request-Method": "POST"}
print(json.dumps({"api": api, "anonymous": httpx.post(f"{api}/flow_runs/filter", json={}).status_code,
                  "foreign_origin": httpx.options(f"{api}/flow_runs/filter", headers=preflight).headers.get(
                      "access-control-allow-origin")}))
"""


def test_the_temporary_server_of_prefect_refuses_requests_without_its_auth_string(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PREFECT_API_", "PREFECT_SERVER_API_", "PREFECT_PROFILE"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), DO_NOT_TRACK="1")
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["api"].startswith("http://127.0.0.1:")  # pep's own client got through: it sends the string
    assert found["anonymous"] == 401 and found["foreign_origin"] is None, found
