"""A Dask scheduler killed under a running ``pep train --cluster tcp://…`` (issue 27): the audit saw a
traceback (``ConnectionPool is closed``). Now a scheduler that comes back at its address (restarted by a
supervisor) is reconnected to and the step re-run, like a lost worker's; one that does not ends the run
with one line (exit 1) pointing at ``--resume``, which on a new scheduler ends bit-identical to an
undisturbed run. Dask's connect timeout is 10 s here (30 s by default) to keep the test short: a step waits
it three times before a scheduler lost for good ends the run, and a restarted one has that long to come
back."""

from __future__ import annotations

import json
import subprocess

import pytest

from pep_gp.pipeline.runs.run import load_run
from tests.infra.loopback import (BIN, DASK_WORKER_ENV, Processes, dask_scheduler, dask_worker, free_port, leftovers,
                                  wait_until)
from tests.infra.training_faults import CONFIG, FAULT_AT, MODEL, STEPS, newest_step, wait_for_the_fault_point
from tests.trainstores import config_toml, leaves_equal

# The emulated hosts' group (tests/infra/test_emulated_hosts.py): one pytest-xdist worker trains the reference.
pytestmark = [pytest.mark.infra, pytest.mark.xdist_group("training-faults")]

QUICK_TIMEOUTS = {"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "10s"}


@pytest.fixture
def processes(tmp_path):
    started = Processes(tmp_path / "logs", {"DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                                            "PREFECT_HOME": str(tmp_path / "prefect"), **QUICK_TIMEOUTS,
                                            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"})
    yield started
    started.stop_all()
    assert not leftovers(started.token)


def start_cluster(processes: Processes, port: int, generation: int) -> str:
    address = f"tcp://127.0.0.1:{port}"
    processes.start(f"scheduler-{generation}", *dask_scheduler(port))
    processes.start(f"worker-{generation}", *dask_worker(address, f"worker-{generation}"), env=DASK_WORKER_ENV)
    wait_until(lambda: "Register worker" in processes.log(f"scheduler-{generation}"), 120, "a worker to register")
    return address


def train_command(store, run_dir, config_file, address, *extra) -> tuple[str, ...]:
    return ("pep", "train", "--model", MODEL, "--data", store.path, "--run-dir", str(run_dir), "--config",
            str(config_file), "--cluster", address, "--json", *extra)


def kill_cluster(processes: Processes, generation: int) -> None:
    processes.kill(f"worker-{generation}")
    processes.kill(f"scheduler-{generation}")


@pytest.mark.exhaustive  # the reconnecting path; .ci/run's infra stage runs the lost-for-good one and its --resume
def test_a_scheduler_restarted_at_its_address_is_reconnected_to(processes, fault_store, fault_reference, tmp_path):
    port = free_port()
    address = start_cluster(processes, port, 1)
    (tmp_path / "config.toml").write_text(config_toml(CONFIG))
    run_dir = tmp_path / "run"
    training = processes.start("train", *train_command(fault_store, run_dir, tmp_path / "config.toml", address))
    wait_for_the_fault_point(training, run_dir)
    kill_cluster(processes, 1)
    start_cluster(processes, port, 2)
    assert training.wait(timeout=600) == 0, processes.log("train")[-3000:]
    summary = [line for line in processes.log("train").splitlines() if line.startswith("{")][-1]  # stdout's JSON
    assert json.loads(summary)["steps"] == STEPS  # (stderr, in the same log, may add the not-converged warning)
    assert leaves_equal(load_run(run_dir).trees["params"], fault_reference)


def test_a_scheduler_lost_for_good_ends_the_run_in_one_line_and_resume_continues(processes, fault_store,
                                                                                  fault_reference, tmp_path):
    address = start_cluster(processes, free_port(), 1)
    (tmp_path / "config.toml").write_text(config_toml(CONFIG))
    run_dir = tmp_path / "run"
    training = processes.start("train", *train_command(fault_store, run_dir, tmp_path / "config.toml", address))
    wait_for_the_fault_point(training, run_dir)
    kill_cluster(processes, 1)
    assert training.wait(timeout=600) == 1
    errors = [line for line in processes.log("train").splitlines() if line.startswith("pep train: error:")]
    assert len(errors) == 1 and "Traceback" not in processes.log("train"), processes.log("train")[-3000:]
    assert f"--cluster {address}: a step failed 3 times" in errors[0] and "--resume" in errors[0]
    stopped_at = newest_step(run_dir)
    assert FAULT_AT <= stopped_at < STEPS
    new_address = start_cluster(processes, free_port(), 2)
    resumed = subprocess.run([str(BIN / "pep"), *train_command(fault_store, run_dir, tmp_path / "config.toml",
                                                                new_address, "--resume")[1:]],
                             capture_output=True, text=True, timeout=600, env=processes.env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(resumed.stdout)["steps"] == STEPS
    assert leaves_equal(load_run(run_dir).trees["params"], fault_reference)
