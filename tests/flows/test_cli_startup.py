"""No waiting: ``pep --help`` and ``--version`` import no command, a command imports Prefect only when asked
to run under it (``--prefect`` or a configured Prefect API), and the command list stays in step with the
commands (timings are measured by benchmarks/bench_cli.py, never asserted here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from typer.main import get_command
from typer.testing import CliRunner

from pep_gp import __version__
from pep_gp.flows.cli import COMMANDS, app
from pep_gp.flows.ingest import artifact_key
from pep_gp.flows.runtime import prefect_api_configured
from pep_gp.pipeline.data.stores import open_store
from tests import datafiles
from tests.messy_runs import pep

HEAVY = ("prefect", "jax", "pandas", "zarr", "dask")


def loaded_after(*argv: str) -> tuple[int, dict]:
    """Run ``pep ARGV`` in a fresh interpreter without a Prefect API; its exit code and which of
    :data:`HEAVY` it imported."""
    script = ("import sys, json\nfrom pep_gp.flows.cli import main\nsys.argv = ['pep', *json.loads(sys.argv[1])]\n"
              "try:\n    main()\n    code = 0\nexcept SystemExit as exit:\n    code = exit.code or 0\n"
              f"print(json.dumps([code, {{m: m in sys.modules for m in {list(HEAVY)!r}}}]), file=sys.stderr)\n")
    environment = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    done = subprocess.run([sys.executable, "-c", script, json.dumps(argv)], capture_output=True, text=True,
                          env=environment, timeout=300)
    code, loaded = json.loads(done.stderr.strip().splitlines()[-1])
    return code, loaded


@pytest.mark.parametrize("argv", [("--help",), ("--version",), ()])
def test_help_and_version_import_no_command(argv):
    code, loaded = loaded_after(*argv)
    assert code in (0, 2) and not any(loaded.values()), loaded


def test_version_prints_the_package_version():
    assert pep("--version").stdout == f"pep {__version__}\n"


def test_ingest_runs_without_prefect_unless_asked(tmp_path):
    datafiles.write_messy_csv(tmp_path / "t.csv", n_rows=40)
    code, loaded = loaded_after("ingest", "csv", "--input", str(tmp_path / "t.csv"), "--target", "bought", "--sep",
                                ";", "--out", str(tmp_path / "s.zarr"), "--quiet")
    assert code == 0 and not loaded["prefect"] and not loaded["jax"] and open_store(tmp_path / "s.zarr").n_classes == 2


@pytest.mark.usefixtures("prefect_harness")
def test_ingest_with_prefect_runs_the_flow_and_publishes_its_artifact(tmp_path):
    """In this process the test harness's Prefect server is the configured API."""
    datafiles.write_messy_csv(tmp_path / "t.csv", n_rows=40)
    out = tmp_path / "Prefect Run.zarr"
    result = CliRunner().invoke(app, ["ingest", "csv", "--input", str(tmp_path / "t.csv"), "--target", "bought",
                                      "--sep", ";", "--out", str(out), "--json", "--prefect"])
    assert result.exit_code == 0, result.output
    with get_client(sync_client=True) as client:
        key = ArtifactFilterKey(any_=[artifact_key(str(out))])
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(key=key))
    assert artifacts and json.loads(result.stdout)["checksum"] in artifacts[0].data


def test_a_prefect_api_is_configured_by_the_environment_or_the_active_profile(tmp_path):
    assert prefect_api_configured({"PREFECT_API_URL": "http://127.0.0.1:4200/api"})
    assert not prefect_api_configured({"PREFECT_HOME": str(tmp_path)})
    (tmp_path / "profiles.toml").write_text('active = "server"\n[profiles.server]\n'
                                            'PREFECT_API_URL = "http://127.0.0.1:4200/api"\n[profiles.local]\n')
    assert prefect_api_configured({"PREFECT_HOME": str(tmp_path)})
    assert not prefect_api_configured({"PREFECT_HOME": str(tmp_path), "PREFECT_PROFILE": "local"})


def test_the_command_list_shows_each_commands_own_summary():
    commands = get_command(app).commands
    assert set(commands) == set(COMMANDS)
    for name, (_, _, summary) in COMMANDS.items():
        assert commands[name].help.strip().splitlines()[0] == summary


def test_an_unknown_command_suggests_the_closest():
    done = pep("trian", check=False)
    assert done.returncode == 2 and done.stderr == ("pep: error: unknown command 'trian'; expected one of ingest, "
                                                    "train, evaluate, predict, demo, cluster (did you mean 'train'?)\n")
