"""The engine on real LocalClusters of worker processes: bit-identical results for any number of
workers, and training that survives the loss of a worker."""

from __future__ import annotations

import os
import signal

import pytest

from pep_gp.pipeline.training.trainer import TrainJob, train
from pep_gp.pipeline.engine import connect
from tests.trainstores import FAST, PAIRWISE, leaves_equal


@pytest.fixture(scope="module")
def one_worker():
    """A LocalCluster of one worker process, shared by this module's comparisons of worker counts."""
    backend = connect("local:1")
    yield backend
    backend.close()


def without_seconds(history):
    return [{k: v for k, v in record.items() if k != "seconds"} for record in history]


@pytest.mark.parametrize("model, store, settings", [
    ("sparse-gp-classifier", "binary_store", {}),
    pytest.param("tied-ep-classifier", "binary_store", {"projection": "wasserstein"},  # QP's site updates: sums
                 marks=[pytest.mark.slow, pytest.mark.exhaustive]),  # of the same block statistics as EP's
    pytest.param("deep-gp", "regression_store", {}, marks=[pytest.mark.slow, pytest.mark.exhaustive]),
    pytest.param("deep-gp-multiclass", "three_class_store", {}, id="deep-gp-multiclass",  # deep-gp's, C outputs
                 marks=[pytest.mark.slow, pytest.mark.exhaustive]),
    pytest.param("deep-gp-multiclass", "three_class_store",  # a mean per class, a kernel per layer, a fixed noise
                 {"mean_function": "linear", "kernel": ["matern52", "se"], "fixed": "noise_variance"},
                 marks=[pytest.mark.slow, pytest.mark.exhaustive], id="deep-gp-multiclass-specified"),
    pytest.param("sparse-gp-classifier", "binary_store", {"kernel": "matern52"},  # the first's path, another kernel
                 marks=[pytest.mark.slow, pytest.mark.exhaustive], id="sparse-gp-classifier-matern52"),
    pytest.param("multiclass-sep", "three_class_store", {"kernel": "matern52", **PAIRWISE},
                 marks=[pytest.mark.slow, pytest.mark.exhaustive],
                 id="multiclass-sep-matern52"),
    pytest.param("sparse-gp-regressor", "regression_store", {"mean_function": "linear"},  # a mean's leaves too
                 marks=[pytest.mark.slow, pytest.mark.exhaustive], id="sparse-gp-regressor-linear-mean"),
    pytest.param("sparse-gp-ordinal", "three_class_store", {},  # the first's path, the cut points' leaves
                 marks=[pytest.mark.slow, pytest.mark.exhaustive], id="sparse-gp-ordinal"),
    pytest.param("sparse-gp-heteroscedastic", "regression_store", {},  # a bank of two GPs' energy, a row's term
                 marks=[pytest.mark.slow, pytest.mark.exhaustive], id="sparse-gp-heteroscedastic")])  # over both
@pytest.mark.heavy
def test_in_process_one_and_two_workers_are_bit_identical(model, store, settings, one_worker, cluster, tmp_path,
                                                          request):
    config = FAST.model_copy(update={"model": {**FAST.model, **settings}})
    job = lambda name: TrainJob(model, request.getfixturevalue(store), config, tmp_path / name)
    reference = train(job("in-process"))
    single = train(job("one-worker"), one_worker)
    double = train(job("two-workers"), cluster)
    assert len(cluster.client.nthreads()) == 2
    for result in (single, double):
        assert leaves_equal(result.params, reference.params)
        assert without_seconds(result.history) == without_seconds(reference.history)


@pytest.mark.heavy
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


@pytest.mark.exhaustive
@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_a_client_that_gave_up_on_its_scheduler_mid_step_reconnects_and_changes_nothing(binary_store, tmp_path):
    """Dask's client closes itself when its scheduler stays away past the reconnection window, at any moment,
    also between the engine's check for a closed client and the step's calls: those calls fail in ways of
    their own (no scheduler handle, a closed connection pool). The step is re-run on a new client, as after a
    scheduler restarted at its address (tests/infra/test_scheduler_loss.py). Here the scheduler stays up
    and the client is closed right after that check, at the sixth pass."""
    reference = train(TrainJob("sparse-gp-classifier", binary_store, FAST, tmp_path / "reference"))
    backend = connect("local:1")
    checked, passes = backend._reconnect_if_closed, []

    def then_closed() -> None:
        checked()
        passes.append(backend.client)
        if len(passes) == 6:
            backend.client.close()

    backend._reconnect_if_closed = then_closed
    try:
        result = train(TrainJob("sparse-gp-classifier", binary_store, FAST, tmp_path / "closed"), backend)
    finally:
        backend.close()
    assert passes[5].status == "closed" and backend.client is not passes[5]  # a new client took over
    assert result.steps == result.total_steps and leaves_equal(result.params, reference.params)


@pytest.mark.exhaustive
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
