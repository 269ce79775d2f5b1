"""The engine on real LocalClusters of worker processes: bit-identical results for any number of
workers, and training that survives the loss of a worker."""

from __future__ import annotations

import os
import signal

import pytest

from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.engine import connect
from tests.trainstores import FAST, leaves_equal


def without_seconds(history):
    return [{k: v for k, v in record.items() if k != "seconds"} for record in history]


@pytest.mark.parametrize("model, store, settings", [
    ("sparse-gp-classifier", "binary_store", {}),
    pytest.param("tied-ep-classifier", "binary_store", {"projection": "wasserstein"},  # QP's site updates
                 marks=pytest.mark.slow),
    pytest.param("deep-gp", "regression_store", {}, marks=pytest.mark.slow),
    pytest.param("deep-gp-multiclass", "three_class_store", {}, marks=pytest.mark.slow, id="deep-gp-multiclass"),
    pytest.param("sparse-gp-classifier", "binary_store", {"kernel": "matern52"},  # the first's path, another kernel
                 marks=[pytest.mark.slow, pytest.mark.exhaustive], id="sparse-gp-classifier-matern52"),
    pytest.param("multiclass-sep", "three_class_store", {"kernel": "matern52"}, marks=pytest.mark.slow,
                 id="multiclass-sep-matern52")])
@pytest.mark.heavy
def test_in_process_one_and_two_workers_are_bit_identical(model, store, settings, cluster, tmp_path, request):
    config = FAST.model_copy(update={"model": {**FAST.model, **settings}})
    job = lambda name: TrainJob(model, request.getfixturevalue(store), config, tmp_path / name)
    reference = train(job("in-process"))
    one = connect("local:1")
    try:
        single = train(job("one-worker"), one)
    finally:
        one.close()
    double = train(job("two-workers"), cluster)
    assert len(cluster.client.nthreads()) == 2
    for result in (single, double):
        assert leaves_equal(result.params, reference.params)
        assert without_seconds(result.history) == without_seconds(reference.history)


def test_killing_a_worker_mid_run_changes_nothing(binary_store, cluster, tmp_path):
    reference = train(TrainJob("sparse-gp-classifier", binary_store, FAST, tmp_path / "reference"))
    pids = cluster.client.run(os.getpid)
    killed = []

    def kill_one_worker(event, **info):
        if event == "step" and info["step"] == 6:
            victim = sorted(pids)[0]
            os.kill(pids[victim], signal.SIGKILL)
            killed.append(victim)

    result = train(TrainJob("sparse-gp-classifier", binary_store, FAST, tmp_path / "killed"), cluster,
                   progress=kill_one_worker)
    assert killed and result.steps == result.total_steps
    assert leaves_equal(result.params, reference.params)
    assert without_seconds(result.history) == without_seconds(reference.history)


@pytest.mark.slow
def test_pinned_clusters_agree_with_each_other(binary_store, tmp_path):
    """``local:N:pinned`` workers see one core each: 1 and 2 pinned workers give identical results."""
    results = []
    for cluster in ("local:1:pinned", "local:2:pinned"):
        backend = connect(cluster)
        try:
            assert set(backend.client.run(lambda: len(os.sched_getaffinity(0))).values()) == {1}
            results.append(train(TrainJob("sparse-gp-classifier", binary_store, FAST, tmp_path / cluster), backend))
        finally:
            backend.close()
    assert leaves_equal(results[0].params, results[1].params)
