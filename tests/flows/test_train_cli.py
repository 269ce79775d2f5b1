"""``pep train`` / ``pep evaluate``: bad input in this process; JSON output, SIGKILL then --resume as subprocesses,
and training on a real ``dask scheduler`` with two ``dask worker`` processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from prefect.settings import PREFECT_API_URL
from typer.testing import CliRunner

from pep_gp.flows.cli import build_app
from pep_gp.pipeline.runs.run import load_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from tests.trainstores import FAST, PAIRWISE, config_toml, leaves_equal, make_store

pytestmark = pytest.mark.usefixtures("prefect_harness")  # runs flows: one Prefect server

BIN = Path(sys.executable).parent
MODEL = "sparse-gp-classifier"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("cli-stores") / "binary.zarr")


@pytest.fixture(scope="module")
def regression_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("cli-stores") / "regression.zarr", task="regression")


@pytest.fixture(scope="module")
def three_class_store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("cli-stores") / "three-class.zarr", n_classes=3)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli-config") / "fast.toml"
    path.write_text(config_toml(FAST))
    return path


def environment() -> dict[str, str]:
    """The test's environment, pointing subprocesses at the harness's Prefect server where the test asked for it
    (``prefect_harness``), else without a Prefect API, as ``pep`` runs by default."""
    url = PREFECT_API_URL.value()
    plain = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}
    return {**plain, "PREFECT_API_URL": url} if url else plain


def pep(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([str(BIN / "pep"), *args], capture_output=True, text=True, env=environment(), timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.mark.exhaustive
@pytest.mark.slow
def test_train_and_evaluate_json(store, config_file, tmp_path):
    run_dir = tmp_path / "run"
    summary = json.loads(pep("train", "--model", MODEL, "--data", store.path, "--run-dir", str(run_dir),
                             "--config", str(config_file), "--epochs", "2", "--json").stdout)
    assert {"test_error", "test_nll", "n_test", "steps", "epochs", "seconds", "checkpoint"} <= set(summary)
    assert (summary["steps"], summary["epochs"], summary["n_test"]) == (10, 2, 100)
    metrics = json.loads(pep("evaluate", "--run-dir", str(run_dir), "--json").stdout)
    assert (metrics["test_error"], metrics["test_nll"], metrics["n_test"]) == (
        summary["test_error"], summary["test_nll"], 100)
    assert {p.name for p in run_dir.iterdir()} == {"checkpoints", "learning_curve.png", "metrics.json", ".pep.lock",
                                                   "reliability.png"}
    more = json.loads(pep("train", "--model", MODEL, "--data", store.path, "--run-dir", str(run_dir),
                          "--resume", "--epochs", "3", "--json").stdout)
    assert (more["steps"], more["epochs"]) == (15, 3)  # resumed with the run's own config


def train_in_process(*args: str):
    """``pep train ARGS`` in this process (stdout and stderr apart); exit code 0 asserted."""
    done = CliRunner().invoke(build_app(("train",)), ["train", *args])
    assert done.exit_code == 0, done.output
    return done


@pytest.mark.parametrize("args, message", [
    (["--data", "missing.zarr"], "missing.zarr: no such store"),
    (["--cluster", "local"], "--cluster: expected local:N"),
    (["--model", "gp"], "--model: unknown model 'gp'"),
    (["--batch-size", "0"], "batch_size: Input should be greater than or equal to 1"),
    (["--set", "model.alpha=2"], "model.alpha: Input should be less than or equal to 1 (found 2)"),
    (["--set", "alpha"], "--set 'alpha': expected KEY=VALUE"),
    (["--learning-rate", "-1"], "learning_rate: Input should be greater than 0"),
    (["--cluster", "tcp://10.1.2.3:8786"], "plain tcp:// is unencrypted and unauthenticated"),  # issue 27
    (["--cluster", "tls://127.0.0.1:8786"], "a TLS scheduler needs a CA and a client certificate"),
    (["--cluster", "tls://127.0.0.1:8786", "--tls-ca-file", "no-ca.pem", "--tls-cert", "no-cert.pem"],
     "TLS ca file no-ca.pem: no such file"),
    (["--tls-cert", "client.pem"], "--tls-ca-file/--tls-cert/--tls-key: only for a tls:// --cluster"),
    (["--cluster", "slurm:0"], "--cluster: expected local:N"),
    (["--log-to", "wandb"], "--log-to: expected mlflow, mlflow:URI or tensorboard:DIR, found 'wandb'"),
    (["--log-to", "tensorboard"], "--log-to: expected mlflow, mlflow:URI or tensorboard:DIR, found 'tensorboard'"),
])
def test_bad_input_fails_cleanly(store, tmp_path, args, message):
    """Each is found before anything heavy starts, so it runs in this process (the console script's own exit
    path is covered by test_evaluate_without_a_run and the subprocess tests below)."""
    options = {"--model": MODEL, "--data": store.path, "--run-dir": str(tmp_path / "run"), "--cluster": "none",
               "--batch-size": "96"}
    options.update(dict(zip(args[::2], args[1::2])))
    done = CliRunner().invoke(build_app(("train",)), ["train", *sum(options.items(), ())])
    assert done.exit_code == 2 and message in done.stderr and "Traceback" not in done.stderr, done.output
    assert not (tmp_path / "run").exists()


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_evaluate_without_a_run(tmp_path):
    done = pep("evaluate", "--run-dir", str(tmp_path / "run"), check=False)
    assert done.returncode == 2 and "run: no such run directory (train first with `pep train`)" in done.stderr


# One model of each kind of training state (a tied factor; QP's sites; the deep GP's layers; C tied factors, with a
# kernel setting, which the resumed run rebuilds from the run's config). Every registered model's resume from a
# cut run is bit-identical in-process (tests/test_models.py); what a SIGKILL adds is the checkpoint writer's and
# the CLI's part, the same code for every model: .ci/run kills one (-m exhaustive, all four).
@pytest.mark.slow
@pytest.mark.long
@pytest.mark.parametrize("model, store_name, settings", [
    (MODEL, "store", {}),
    pytest.param("tied-ep-classifier", "store", {"projection": "wasserstein"}, id="tied-ep-classifier-qp",
                 marks=pytest.mark.exhaustive),
    pytest.param("deep-gp-multiclass", "three_class_store", {}, id="deep-gp-multiclass", marks=pytest.mark.exhaustive),
    pytest.param("multiclass-sep", "store", {"kernel": "matern52", **PAIRWISE}, id="multiclass-sep-matern52",
                 marks=pytest.mark.exhaustive)])
def test_sigkill_then_resume_ends_bit_identical(model, store_name, settings, tmp_path, request):
    store = request.getfixturevalue(store_name)
    epochs = 10  # 50 steps, a checkpoint every 4: killed after the one at step 20-29
    config = FAST.model_copy(update={"model": {**FAST.model, **settings}})
    config_file = tmp_path / "config.toml"
    config_file.write_text(config_toml(config))
    reference = train(TrainJob(model, store, config.model_copy(update={"epochs": epochs}), tmp_path / "reference"))
    run_dir = tmp_path / "killed"
    args = ["train", "--model", model, "--data", store.path, "--run-dir", str(run_dir), "--config",
            str(config_file), "--epochs", str(epochs), "--quiet"]
    process = subprocess.Popen([str(BIN / "pep"), *args], env=environment(), start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((run_dir / "checkpoints").glob("step-0000002*")) and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the training process and everything it started
    process.wait()
    assert not (run_dir / "checkpoints" / f"step-{5 * epochs:08d}").exists(), "killed too late"
    resumed = json.loads(pep(*args[:-1], "--resume", "--json").stdout)
    assert resumed["steps"] == 5 * epochs
    assert leaves_equal(load_run(run_dir).trees["params"], reference.params)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.exhaustive
@pytest.mark.slow
def test_training_on_a_real_scheduler_and_two_workers(store, config_file, tmp_path):
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment())
    processes = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                   "--no-dashboard"], **quiet)]
    try:
        processes += [subprocess.Popen([str(BIN / "dask"), "worker", address, "--nthreads", "1", "--no-dashboard",
                                        "--name", f"w{i}"], **quiet) for i in range(2)]
        summary = json.loads(pep("train", "--model", MODEL, "--data", store.path, "--run-dir",
                                 str(tmp_path / "run"), "--config", str(config_file), "--cluster", address,
                                 "--json").stdout)
        assert summary["cluster"] == address and summary["steps"] == 15
        reference = train(TrainJob(MODEL, store, FAST, tmp_path / "reference"))
        assert leaves_equal(load_run(tmp_path / "run").trees["params"], reference.params)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_settings_from_the_command_line_are_validated_like_the_config_file(store, tmp_path):
    """``--set``, ``--seed``, ``--learning-rate`` and ``--max-steps`` reach the run's config; a run cut short
    by ``--max-steps`` says it did not converge (``converged: false``, a warning on stderr)."""
    done = train_in_process("--model", MODEL, "--data", store.path, "--run-dir", str(tmp_path / "run"), "--cluster",
                            "none", "--batch-size", "96", "--max-steps", "3", "--learning-rate", "0.03", "--seed", "5",
                            "--set", "model.num_inducing=4", "--set=model.alpha=0.25", "--json")
    summary = json.loads(done.stdout)
    assert summary["steps"] == 3 and summary["converged"] is False
    assert "not converged after 3 steps" in done.stderr
    config = load_run(tmp_path / "run").meta["config"]
    assert (config["learning_rate"], config["seed"], config["max_steps"]) == (0.03, 5, 3)


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_log_to_writes_the_run_to_mlflow_and_tensorboard(store, tmp_path):
    """``--log-to`` repeated and comma-separated: the run's settings, its 3 steps' energies, its epochs' metrics
    and the summary's numbers, the same in both."""
    pytest.importorskip("mlflow")
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = train_in_process("--model", MODEL, "--data", store.path, "--run-dir", str(tmp_path / "run"), "--cluster",
                            "none", "--batch-size", "96", "--max-steps", "3", "--learning-rate", "0.03", "--seed", "5",
                            "--set", "model.num_inducing=4", "--set=model.alpha=0.25", "--json",
                            "--log-to", f"mlflow:{uri}", "--log-to", f"tensorboard:{tmp_path / 'tb'},")
    summary = json.loads(done.stdout)
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("pep").experiment_id])
    assert run.info.status == "FINISHED"
    assert (run.data.params["model"], run.data.params["model_settings.alpha"], run.data.params["config.seed"]) == (
        MODEL, "0.25", "5")
    energies = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "energy")]
    assert [step for step, _ in energies] == [1, 2, 3]
    assert run.data.metrics["final/test_nll"] == summary["test_nll"] and run.data.metrics["final/steps"] == 3
    assert run.data.metrics["epoch/test_nll"] == summary["test_nll"]  # the last epoch's record is the summary's
    events = accumulator.EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("energy")] == [(s, np.float32(v)) for s, v in energies]
    assert events.Scalars("final/test_nll")[0].value == np.float32(summary["test_nll"])


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_deep_gp_run_takes_the_model_s_own_defaults_where_nothing_was_given(regression_store, tmp_path):
    """``pep train --model deep-gp``: Adam at 0.01 without early stopping (the model's ``train_defaults``)
    where the command line says nothing, the given ``--max-steps`` over the model's 1,000; a run of fixed
    steps is not called unconverged."""
    done = train_in_process("--model", "deep-gp", "--data", regression_store.path, "--run-dir", str(tmp_path / "run"),
                            "--max-steps", "2", "--set", "model.num_inducing=4", "--json")
    assert json.loads(done.stdout)["steps"] == 2
    assert "not converged" not in done.stderr
    config = load_run(tmp_path / "run").meta["config"]
    assert (config["learning_rate"], config["tol"], config["max_steps"]) == (0.01, 0.0, 2)
    assert config["model"] == {"num_inducing": 4}


@pytest.mark.exhaustive
@pytest.mark.slow
def test_pep_train_at_its_defaults_converges_like_the_estimator(tmp_path):
    """A 480-row store (384 training rows): ``pep train`` at its defaults trains until the stopping rule
    says converged, with the estimator's defaults, so both reach the same test NLL (the issue: 10 Adam steps
    and NLL 0.657 against the estimator's 0.052)."""
    from pep_gp import SparseGPClassifier

    store = make_store(tmp_path / "small.zarr", n_rows=480, chunk_rows=10_000)
    summary = json.loads(pep("train", "--model", MODEL, "--data", store.path, "--run-dir", str(tmp_path / "run"),
                             "--json").stdout)
    assert summary["converged"] is True and summary["steps"] > 25
    x, y = (a[:] for a in store.arrays("train"))
    x_test, y_test = (a[:] for a in store.arrays("test"))
    estimator = SparseGPClassifier(solver="adam").fit(x.astype(float), y)  # pep train's loop (the default: L-BFGS)
    proba = estimator.predict_proba(x_test.astype(float))
    nll = -np.mean(np.log(proba[np.arange(len(y_test)), y_test]))
    assert summary["test_nll"] == pytest.approx(nll, rel=0.1)
    assert estimator.n_iter_ == summary["steps"]


def test_the_display_says_that_the_step_compiles_before_the_first_step(capsys):
    """Issue 37, item 8: a first fit compiled for 5–9 s with no message; ``pep train`` (and ``verbose=True``)
    now say so when the run starts."""
    from pep_gp.pipeline.training.display import progress_display

    with progress_display(True) as report:
        report("start", step=0, total_steps=5, steps_per_epoch=1)
        assert "compiling the training step" in capsys.readouterr().err


def test_a_close_that_cancelled_dasks_own_reconnection_is_not_reported_but_its_errors_are():
    """After a scheduler lost for good, Dask's client gives up reconnecting and closes itself while ``pep train``,
    which gave up on the step, closes it too: the cancelled close logged ``asyncio.CancelledError`` with a traceback
    below the run's one-line error (tests/infra/test_scheduler_loss.py, seen once in 12-05's ``.ci/run``). The
    cluster commands' logging drops exactly that record of Dask's client; its other errors still reach the user."""
    import asyncio
    import logging

    from pep_gp.flows.options import quiet_cluster_logs

    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append
    client = logging.getLogger("distributed.client")
    client.addHandler(handler)
    try:
        quiet_cluster_logs()
        quiet_cluster_logs()  # the filter once, however often the commands ask
        for error in (asyncio.CancelledError(), OSError("Timed out trying to connect")):
            try:
                raise error
            except BaseException:
                client.exception("")
        client.error("Failed to reconnect to scheduler after 10.00 seconds, closing client")
    finally:
        client.removeHandler(handler)
    assert [type(record.exc_info[1]).__name__ if record.exc_info else record.getMessage() for record in seen] == [
        "OSError", "Failed to reconnect to scheduler after 10.00 seconds, closing client"]
    assert len(client.filters) == 1
