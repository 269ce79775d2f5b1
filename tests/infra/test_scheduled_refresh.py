"""The ``refresh`` deployment on its schedule (issue 42, item 3): deployed from prefect.yaml to the loopback
stack's real Prefect server, its runs created by the server's scheduler and run by the process worker on the
Dask workers. The first scheduled run ingests the file waiting in ``data/incoming`` and publishes version 1;
a file that arrives meanwhile is appended by the second, which continues training and publishes version 2.

prefect.yaml's schedule is a daily cron; the test deploys a copy of prefect.yaml in which the ``refresh`` entry's
schedule is a 10 s interval and its parameters name a small data set and config (everything else as it stands),
so that two runs fire within the test. (``prefect deploy --interval`` would add the interval to the cron.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pep_gp.flows.reports import artifact_key
from pep_gp.pipeline.data.append import versions
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.runs.versions import becomes_live, live_version, published
from tests.infra.conftest import FINAL
from tests.infra.loopback import ROOT, wait_until

pytestmark = [pytest.mark.infra, pytest.mark.xdist_group("loopback-stack")]  # the stack's group (test_prefect_server)

INTERVAL = 10
CONFIG = {"model": {"num_inducing": 6}, "epochs": 3, "batch_size": 96, "block_rows": 48, "learning_rate": 0.05,
          "checkpoint_every": 4, "keep_checkpoints": 2}


def arrive(incoming: Path, name: str, seed: int, rows: int = 300) -> None:
    """A labelled .npz file placed in ``incoming`` as the docs say: written under a dot-name, then renamed."""
    x = np.random.default_rng(seed).normal(size=(rows, 3))
    np.savez(incoming / f".{name}", X=x, y=(x[:, 0] + x[:, 1] ** 2 > 0.5).astype(int))
    os.rename(incoming / f".{name}", incoming / name)


def scheduled_copy(directory: Path, parameters: dict) -> Path:
    """prefect.yaml with only the ``refresh`` deployment, its schedule a :data:`INTERVAL` s interval and
    ``parameters`` over its own."""
    config = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    (refresh,) = [d for d in config["deployments"] if d["name"] == "refresh"]
    config["deployments"] = [{**refresh, "schedules": [{"interval": INTERVAL}],
                              "parameters": {**refresh["parameters"], **parameters}}]
    path = directory / "prefect.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def scheduler_working(stack) -> bool:
    """True, or the test fails naming the known cause of a server whose scheduler creates no run."""
    import prefect
    import sqlalchemy

    assert "Can't evaluate bulk DML statement" not in stack.processes.log("prefect-server"), (
        f"the Prefect server's scheduler cannot insert scheduled runs (Prefect {prefect.__version__} with SQLAlchemy "
        f"{sqlalchemy.__version__}; Prefect 3.8's scheduler did this with SQLAlchemy 2.1, pep requires Prefect >= 3.9.1)")
    return True


def deployment_runs(stack, deployment_id: str) -> list[dict]:
    return stack.http.post(f"{stack.api_url}/flow_runs/filter", json={
        "flow_runs": {"deployment_id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"}).json()


def finished(stack, deployment_id: str, n: int) -> list[dict] | None:
    """The first ``n`` flow runs of the deployment once they have ended (an error if one did not complete)."""
    ended = [run for run in deployment_runs(stack, deployment_id) if run["state_type"] in FINAL]
    failed = [run for run in ended if run["state_type"] != "COMPLETED"]
    assert not failed, f"{failed[0]['state']}\n{stack.processes.log('prefect-worker')[-3000:]}"
    return ended[:n] if len(ended) >= n else None


def logs_through(stack, run: dict, prefix: str, timeout: float = 60.0) -> list[str]:
    """The run's log lines once one of them starts with ``prefix``, or those there are after ``timeout`` s: a
    run's state can be final before the last of its logs reach the server (Prefect ships them in batches, every
    ``PREFECT_LOGGING_TO_API_BATCH_INTERVAL``)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = stack.logs(run["id"])
        if any(line.startswith(prefix) for line in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(1)


def test_the_scheduled_refresh_runs_twice_and_the_second_run_appends_and_publishes_version_2(stack, tmp_path):
    incoming, model_dir, store = stack.home / "data" / "incoming", stack.home / "models" / "refresh", \
        stack.home / "data" / "refresh.zarr"
    incoming.mkdir(parents=True)
    (stack.home / "predictions").mkdir()
    arrive(incoming, "a.npz", seed=0)
    params = {"source": "npz", "target": None, "cluster": stack.scheduler, "config": CONFIG,
              "predict_input": "data/refresh.zarr"}  # and prefect.yaml's paths, relative to PEP_HOME
    stack.processes.run("prefect", "--no-prompt", "deploy", "--prefect-file", str(scheduled_copy(tmp_path, params)),
                        "--name", "refresh", timeout=300)
    deployment = stack.http.get(f"{stack.api_url}/deployments/name/pep-refresh/refresh").json()
    try:
        assert [s["schedule"]["interval"] for s in deployment["schedules"]] == [INTERVAL]
        assert deployment["global_concurrency_limit"]["limit"] == 1
        wait_until(lambda: scheduler_working(stack) and store.exists(), 300, "the first scheduled run's store")
        arrive(incoming, "b.npz", seed=1)  # after the first run listed its files: the second run's
        first, second = wait_until(lambda: finished(stack, deployment["id"], 2), 420, "two scheduled runs", interval=1)
    finally:
        stop_schedule(stack, deployment["id"])
    assert first["auto_scheduled"] and second["auto_scheduled"]
    first_logs = logs_through(stack, first, "published version 1 ")
    second_logs = logs_through(stack, second, "published version 2 ")
    assert any("ingesting 1 new files" in line and line.endswith("a.npz") for line in first_logs), first_logs
    assert any(line.startswith("published version 1 ") for line in first_logs), first_logs
    assert any("appending 1 new files" in line and line.endswith("b.npz") for line in second_logs), second_logs
    assert any(line.startswith("published version 2 ") for line in second_logs), second_logs

    grown = open_store(store)
    assert [v["version"] for v in versions(grown)] == [1, 2] and grown.n_rows("train") + grown.n_rows("test") == 600
    one, two = published(model_dir)
    assert two["data"]["checksum"] == grown.checksum != one["data"]["checksum"]
    assert two["metrics"]["step"] > one["metrics"]["step"]  # continued from version 1's training, not restarted
    assert two["metrics"]["n_test"] == grown.n_rows("test") == two["previous_live_metrics"]["n_test"]  # same rows
    assert two["live"] == becomes_live(two["metrics"], two["previous_live_metrics"], two["tolerance"])
    assert live_version(model_dir).name == ("2" if two["live"] else "1")
    assert len(pd.read_parquet(stack.home / "predictions" / "refresh.parquet")) == 600
    artifact = stack.artifact(artifact_key("refresh", model_dir))
    assert artifact is not None and "| version | 2 |" in artifact["data"]


def stop_schedule(stack, deployment_id: str) -> None:
    """Pause the deployment (no more runs scheduled), cancel its runs still waiting, wait for a running one to
    end (a run with nothing new ends in seconds) and delete it: the later tests share the stack."""
    stack.http.patch(f"{stack.api_url}/deployments/{deployment_id}", json={"paused": True}).raise_for_status()
    for run in deployment_runs(stack, deployment_id):
        if run["state_type"] in ("SCHEDULED", "PENDING"):
            stack.http.post(f"{stack.api_url}/flow_runs/{run['id']}/set_state", json={
                "state": {"type": "CANCELLED", "name": "Cancelled"}, "force": True}).raise_for_status()
    wait_until(lambda: all(run["state_type"] in FINAL for run in deployment_runs(stack, deployment_id)), 180,
               "the deployment's last runs")
    stack.http.delete(f"{stack.api_url}/deployments/{deployment_id}").raise_for_status()
