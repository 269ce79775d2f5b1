"""The ``pipeline`` deployment run for real (issue 12): a Prefect server, ``prefect deploy --all`` from
prefect.yaml, a process-pool worker and a Dask scheduler with two workers, all on 127.0.0.1 — run
undisturbed, with a Dask worker killed mid-run, and with the Prefect worker killed mid-run."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from pep_gp.flows.reports import artifact_key
from pep_gp.pipeline.data.chunks import open_root
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.runs.checkpoint import checkpoint_dir
from pep_gp.pipeline.runs.run import load_run
from tests.infra.loopback import leftovers, listening_sockets, wait_until
from tests.test_docs_commands import blocks
from tests.trainstores import leaves_equal

# One loopback stack (the package-scoped fixture) for every test that uses it: pytest-xdist's ``loadgroup``
# (pyproject.toml) runs the group on one worker, so the stack starts once, not once per worker.
pytestmark = [pytest.mark.infra, pytest.mark.xdist_group("loopback-stack")]

PAGES = ("infra/README.md", "docs/how-to/clusters.md")
RUN_COMMAND = re.compile(r"^\.venv/bin/prefect deployment run pep-pipeline/pipeline --watch --params '(.*)'$", re.M)


def documented_recipe(page: str = PAGES[0]) -> str:
    """The page's block that runs the ``pipeline`` deployment (made data, then ``prefect deployment run``)."""
    (recipe,) = [text for language, text in blocks(page)
                 if language == "bash" and "prefect deployment run pep-pipeline/pipeline" in text]
    return recipe


def documented_parameters() -> dict:
    """The parameters of the documented ``prefect deployment run pep-pipeline/pipeline`` command. Its
    config: 400 training rows in blocks of 48, 2 blocks per step: 5 steps per epoch, 12 epochs, 60 steps,
    a checkpoint every 4."""
    return json.loads(RUN_COMMAND.search(documented_recipe()).group(1))


def test_both_cluster_pages_show_the_recipe_the_test_runs():
    assert documented_recipe(PAGES[0]) == documented_recipe(PAGES[1])


@pytest.fixture(scope="module")
def undisturbed(stack):
    """The docs' recipe, run as it stands by bash in the deployments' working directory (a fresh clone):
    (flow run, run directory). Its paths are relative and the Dask workers run elsewhere."""
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", documented_recipe()], cwd=stack.home,
                          env=stack.processes.env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    flow_run_id = re.search(r"UUID:\s*([0-9a-f-]{36})", done.stdout).group(1)
    return stack.flow_run(flow_run_id), stack.home / "runs" / "t"


@pytest.fixture(scope="module")
def npz_input(stack, undisturbed) -> Path:
    """data/t.npz, made by the recipe."""
    return stack.home / "data" / "t.npz"


@pytest.fixture(scope="module")
def store(stack, undisturbed) -> Path:
    """data/t.zarr, ingested by the recipe's flow run."""
    return stack.home / "data" / "t.zarr"


def parameters(stack, npz_input, store, run_dir) -> dict:
    return {**documented_parameters(), "inputs": [str(npz_input)], "store": str(store), "run_dir": str(run_dir),
            "cluster": stack.scheduler}


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the complete checkpoints (those with a manifest) of a run directory."""
    directory = checkpoint_dir(run_dir)
    if not directory.exists():
        return []
    return sorted(int(path.parent.name.removeprefix("step-")) for path in directory.glob("step-*/manifest.json"))


def test_the_pipeline_deployment_completes_on_the_loopback_stack(stack, undisturbed, store):
    flow_run, run_dir = undisturbed
    assert flow_run["state_type"] == "COMPLETED", stack.processes.log("prefect-worker")[-3000:]
    assert store.exists() and checkpoint_steps(run_dir)[-1] == 60
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["n_test"] == 100 and 0 <= metrics["test_error"] < 0.5
    artifact = stack.artifact(artifact_key("evaluate", run_dir))
    assert artifact is not None and artifact["type"] == "table"
    (row,) = json.loads(artifact["data"])
    assert row["test_error"] == metrics["test_error"] and row["test_nll"] == metrics["test_nll"]
    assert stack.artifact(artifact_key("train", run_dir))["type"] == "markdown"


def test_a_dask_worker_that_cannot_see_a_store_says_which_worker_and_which_path(stack):
    """The recipe's store is at data/t.zarr of the deployments' directory, not of the workers' own (their
    working directory has no data/): its flow run sends the workers the absolute path (above); a worker
    given a path it cannot see names itself and the path."""
    with stack.client() as client:
        with pytest.raises(InputError, match=r"data/t\.zarr: no such store on Dask worker 'dask-worker-\d+' "
                                             r"\(tls://127\.0\.0\.1:\d+, host .*\); every worker must see"):
            client.submit(open_root, "data/t.zarr", pure=False).result()


def test_a_failed_flow_run_says_why_in_its_state(stack):
    """``prefect deployment run --watch`` exits 1; the flow run's state message (``prefect flow-run inspect
    ID``) names the missing file with the directory it was looked for in (relative paths are the flow
    run's: the deployments' ``PEP_HOME``)."""
    params = {**documented_parameters(), "inputs": ["data/none.npz"], "store": "data/none.zarr", "run_dir": "runs/none"}
    done = subprocess.run([".venv/bin/prefect", "deployment", "run", "pep-pipeline/pipeline", "--watch", "--params",
                           json.dumps(params)], cwd=stack.home, env=stack.processes.env, capture_output=True,
                          text=True, timeout=300)
    reason = f"{stack.home / 'data' / 'none.npz'}: no such file"
    assert done.returncode == 1 and "Flow run finished in state 'Failed'" in done.stdout, done.stdout[-3000:]
    flow_run = stack.flow_run(re.search(r"UUID:\s*([0-9a-f-]{36})", done.stdout).group(1))
    assert flow_run["state_type"] == "FAILED" and reason in flow_run["state"]["message"], flow_run["state"]


def test_every_server_scheduler_and_worker_listens_on_loopback_only(stack, undisturbed):
    listening, outside = listening_sockets(stack.processes.token)
    assert len(listening) >= 5 and not outside, outside  # API, scheduler, dashboard, workers, nannies


def test_the_prefect_api_needs_the_auth_string_and_a_csrf_token(stack, undisturbed):
    """Audit (issue 27): the server ran with no auth string and CSRF protection off. Everything above ran
    through an authenticated API; without the auth string nothing is read, without a CSRF token nothing
    is written."""
    flow_run, _ = undisturbed
    assert httpx.get(f"{stack.api_url}/flow_runs/{flow_run['id']}", timeout=30).status_code == 401
    wrong = httpx.get(f"{stack.api_url}/flow_runs/{flow_run['id']}", auth=("pep", "guess"), timeout=30)
    assert wrong.status_code == 401
    without_token = httpx.post(f"{stack.api_url}/flow_runs/filter", json={}, auth=stack.http.auth, timeout=30)
    assert without_token.status_code == 403 and "CSRF" in without_token.text
    assert stack.http.get(f"{stack.api_url}/flow_runs/{flow_run['id']}").json()["id"] == flow_run["id"]


def run_and_interrupt(stack, params: dict, run_dir: Path, at_step: int = 8) -> tuple[str, int]:
    """Start a pipeline flow run and wait until it has written a checkpoint at ``at_step`` or later:
    (flow run id, newest checkpoint step then)."""
    flow_run_id = stack.run_deployment(params)
    newest = wait_until(lambda: (steps := checkpoint_steps(run_dir)) and steps[-1] >= at_step and steps[-1],
                        300, f"a checkpoint at step {at_step} in {run_dir}", interval=0.05)
    return flow_run_id, newest


def same_result(run_dir: Path, reference: Path) -> bool:
    """Bit-identical final params and identical held-out metrics."""
    ours, theirs = (json.loads((d / "metrics.json").read_text()) for d in (run_dir, reference))
    return (ours["step"] == theirs["step"] == 60 and ours["test_error"] == theirs["test_error"]
            and ours["test_nll"] == theirs["test_nll"]
            and leaves_equal(load_run(run_dir).trees["params"], load_run(reference).trees["params"]))


def resumed_from(logs: list[str]) -> list[int]:
    """Steps the flow run's training segments resumed from (``resumed from …/step-N at step N``)."""
    return [int(m.group(1)) for m in map(re.compile(r"resumed from .*step-\d+ at step (\d+)").search, logs) if m]


def test_a_dask_worker_killed_mid_run_gives_the_same_final_metrics(stack, undisturbed, npz_input, store,
                                                                    tmp_path):
    run_dir = tmp_path / "dask-worker-killed"
    flow_run_id, newest = run_and_interrupt(stack, parameters(stack, npz_input, store, run_dir), run_dir)
    victim = stack.dask_worker_names()[0]
    stack.processes.kill(victim)  # SIGKILL to its process group: the nanny and its worker process
    assert newest < 60 and stack.flow_run(flow_run_id)["state_type"] == "RUNNING"
    stack.start_dask_worker()
    flow_run = stack.wait_for_flow_run(flow_run_id)
    assert flow_run["state_type"] == "COMPLETED", stack.processes.log("prefect-worker")[-3000:]
    assert same_result(run_dir, undisturbed[1])
    stack.wait_for_dask_workers(2)  # the replacement joined: the next test has two workers again


def flow_run_processes(token: str) -> list[int]:
    """Live flow-run processes (``python -m prefect.engine``) of the stack."""
    return [pid for pid in leftovers(token)
            if b"prefect.engine" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def test_a_prefect_worker_killed_mid_run_crashes_it_and_prefect_retry_resumes(
        stack, undisturbed, npz_input, store, tmp_path):
    """SIGKILL to the Prefect worker (OOM killer, lost node): the flow-run process, in a session of its
    own, loses its worker, reports CRASHED and exits; ``prefect flow-run retry ID`` schedules the same
    flow run again, a new worker picks it up and it resumes from the newest checkpoint."""
    run_dir = tmp_path / "prefect-worker-killed"
    flow_run_id, _ = run_and_interrupt(stack, parameters(stack, npz_input, store, run_dir), run_dir)
    stack.processes.kill("prefect-worker")
    crashed = stack.wait_for_flow_run(flow_run_id, timeout=120)
    stopped_at = checkpoint_steps(run_dir)[-1]
    assert crashed["state_type"] == "CRASHED" and stopped_at < 60, crashed["state"]
    wait_until(lambda: not flow_run_processes(stack.processes.token), 60, "the orphaned flow run to exit")
    stack.start_prefect_worker()
    retried_at = datetime.now(timezone.utc)
    stack.processes.run("prefect", "flow-run", "retry", flow_run_id)
    retried = stack.wait_for_flow_run(flow_run_id, timeout=300)
    assert retried["state_type"] == "COMPLETED", stack.processes.log("prefect-worker")[-3000:]
    assert resumed_from(stack.logs(flow_run_id, since=retried_at))[0] == stopped_at
    assert same_result(run_dir, undisturbed[1])


@pytest.mark.exhaustive  # resuming under Prefect again, after a SIGTERM: .ci/run's infra stage runs the SIGKILL one
def test_a_prefect_worker_stopped_mid_run_then_a_new_run_of_the_deployment_resumes(
        stack, undisturbed, npz_input, store, tmp_path):
    """SIGTERM to the Prefect worker (``kill PID``, a stopped service): the worker stops and ends its
    flow-run process; what the server is told depends on timing (seen here: the run Completed before
    the stop reached it, or left Running for good). Running the deployment again with the same
    parameters resumes from the newest checkpoint and ends with the same result."""
    run_dir = tmp_path / "prefect-worker-stopped"
    params = parameters(stack, npz_input, store, run_dir)
    run_and_interrupt(stack, params, run_dir)
    stack.processes.kill("prefect-worker", signal.SIGTERM, timeout=120)  # returns when the worker exited
    wait_until(lambda: not flow_run_processes(stack.processes.token), 120, "the flow-run process to end")
    stopped_at = checkpoint_steps(run_dir)[-1]
    stack.start_prefect_worker()
    rerun = stack.wait_for_flow_run(stack.run_deployment(params), timeout=300)
    assert rerun["state_type"] == "COMPLETED", stack.processes.log("prefect-worker")[-3000:]
    assert resumed_from(stack.logs(rerun["id"]))[0] == stopped_at
    assert same_result(run_dir, undisturbed[1])
