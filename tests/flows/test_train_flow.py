"""The Prefect flows train / evaluate / pipeline under the shared test harness: artifacts, run-dir
files, and a transient failure that the retried segment resumes from the newest checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

from pep_gp.flows.evaluate import evaluate_flow
from pep_gp.flows.end_to_end import pipeline_flow
from pep_gp.flows.train import progress_reporter, train_flow, train_run
from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.runs.run import load_run
from tests.trainstores import FAST, leaves_equal, make_store

pytestmark = pytest.mark.usefixtures("prefect_harness")  # runs flows: one Prefect server

MODEL = "sparse-gp-classifier"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("flow-stores") / "binary.zarr")


def artifacts(*keys):
    async def read():
        async with get_client() as client:
            return await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys))))
    return {artifact.key: artifact for artifact in asyncio.run(read())}


@pytest.mark.exhaustive
@pytest.mark.slow
def test_train_flow_publishes_artifacts_and_files(store, tmp_path):
    run_dir = tmp_path / "Flow Run"
    summary = train_flow(MODEL, store.path, str(run_dir), FAST.model_dump())
    assert summary["steps"] == 15 and summary["epochs"] == 3 and summary["n_test"] == 100
    assert {"test_error", "test_nll", "seconds", "checkpoint"} <= set(summary)
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert (run_dir / "metrics.json").exists()
    found = artifacts("train-flow-run", "train-flow-run-epochs")
    assert found["train-flow-run"].type == "markdown" and "data:image/png;base64" in found["train-flow-run"].data
    assert found["train-flow-run-epochs"].type == "table"
    metrics = evaluate_flow(str(run_dir))
    assert metrics["test_error"] == summary["test_error"] and artifacts("evaluate-flow-run")


@pytest.mark.heavy
def test_a_full_batch_run_checkpoints_every_checkpoint_every_steps_not_every_epoch(store, tmp_path):
    """On a store smaller than a batch every step is an epoch; segments still span ``checkpoint_every``
    steps, so the run does not write a checkpoint per step (it did: 100 full-batch steps on digits took
    79 s by `pep train`, 51 s without, measured once)."""
    config = FAST.model_copy(update={"batch_size": 10_000, "epochs": None, "max_steps": 12, "tol": 0.0,
                                     "checkpoint_every": 5, "keep_checkpoints": 12})
    summary = train_run(MODEL, store.path, str(tmp_path / "run"), config.model_dump())
    assert summary["steps"] == 12 and summary["epochs"] == 12
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")) == [
        "step-00000005", "step-00000010", "step-00000012"]


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_a_retried_segment_resumes_from_the_newest_checkpoint(store, tmp_path):
    reference = train(TrainJob(MODEL, store, FAST, tmp_path / "reference"))
    failed = []

    def fail_once(event, **info):
        if event == "step" and info["step"] == 7 and not failed:
            failed.append(info["step"])
            raise OSError("disk briefly unavailable")  # transient: the task is retried

    token = progress_reporter.set(fail_once)
    try:
        summary = train_flow(MODEL, store.path, str(tmp_path / "retried"), FAST.model_dump())
    finally:
        progress_reporter.reset(token)
    assert failed and summary["steps"] == 15
    assert leaves_equal(load_run(tmp_path / "retried").trees["params"], reference.params)


@pytest.mark.heavy
def test_pipeline_flow_ingests_trains_and_evaluates(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 2))
    np.savez(tmp_path / "t.npz", X=x, y=(x[:, 0] > 0).astype(int))
    result = pipeline_flow("npz", str(tmp_path / "t.zarr"), MODEL, str(tmp_path / "run"),
                           inputs=[str(tmp_path / "t.npz")], config=FAST.model_dump())
    assert result["ingest"]["rows_train"] == 240
    assert result["train"]["steps"] == 9 and result["evaluate"]["n_test"] == 60
    assert Path(result["train"]["checkpoint"]).exists()
