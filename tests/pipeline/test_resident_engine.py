"""The resident engine (one direct call per worker and pass, issue 36 item 2) on real TLS LocalClusters:
two pinned workers give the in-process bits for the sparse GP and multi-class SEP, because XLA on a
pinned worker partitions reductions as this process does; a worker lost between a step's two passes
changes nothing; a pass makes no Dask task."""

from __future__ import annotations

import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pep_gp.core import float64
from pep_gp.pipeline.engine import Engine, InProcess, connect
from pep_gp.pipeline.engine.cache import Derived
from pep_gp.pipeline.training.step import Prepare, RowDataTerm, RowSiteTerm, WithShared
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from tests.trainstores import config_for, leaves_equal


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_pinned_workers_give_the_in_process_bits(binary_store, three_class_store, tmp_path):
    def column_sum() -> bytes:  # XLA:CPU splits this reduction by its thread pool's size
        with float64():
            x = np.random.default_rng(0).normal(size=(100, 2000))
            return np.asarray(jax.jit(lambda a: a.sum(0))(x)).tobytes()

    backend = connect("local:2:pinned")
    try:
        assert set(backend.client.run(lambda: len(os.sched_getaffinity(0))).values()) == {1}
        assert set(backend.client.run(column_sum).values()) == {column_sum()}
        for model, store in (("sparse-gp-classifier", binary_store), ("multiclass-sep", three_class_store)):
            reference = train(TrainJob(model, store, config_for(model), tmp_path / f"{model}-in-process"), until_step=4)
            pinned = train(TrainJob(model, store, config_for(model), tmp_path / f"{model}-pinned"), backend, until_step=4)
            assert leaves_equal(pinned.params, reference.params), model
    finally:
        backend.close()


@pytest.mark.heavy
def test_a_worker_lost_between_a_steps_two_passes_changes_nothing(three_class_store, cluster):
    """The second pass finds one worker gone: the other computes the lost blocks' kept rows again from
    the first pass's inputs it holds, and the sums have the in-process bits."""
    trainer = Trainer(TrainJob("multiclass-sep", three_class_store, config_for("multiclass-sep"), None), InProcess())
    params, model = trainer.fresh_state().params, trainer.model
    with float64():
        n_total = jnp.asarray(trainer.data_size, jnp.float64)
        shared = jax.jit(model.step_shared)(params, n_total)
    blocks = list(range(trainer.train.source.n_blocks))
    site_term = Derived(RowSiteTerm(model), WithShared(Prepare(model), pullback=True))  # the trainer's

    def two_passes(engine: Engine, between=lambda: None):
        first = engine.submit(site_term, (params, n_total), blocks, keep=True)
        between()
        return first.sum(), engine.submit(RowDataTerm(model), model.held(shared), first).sum()

    reference = two_passes(trainer.train)
    pids = cluster.client.run(os.getpid)
    distributed = two_passes(Engine(cluster, trainer.train.source),
                             lambda: os.kill(pids[sorted(pids)[0]], signal.SIGKILL))
    assert leaves_equal(distributed, reference)


@pytest.mark.heavy  # a default-tier test of several seconds (the README's tests stay within 5 minutes)
def test_a_pass_is_one_direct_call_per_worker_and_no_task(three_class_store, cluster):
    from distributed import get_task_stream

    trainer = Trainer(TrainJob("multiclass-sep", three_class_store, config_for("multiclass-sep"), None), cluster)
    state = trainer.fresh_state()
    trainer.step(state)
    passes = cluster.traffic.passes
    with get_task_stream(cluster.client) as stream:
        trainer.step(state)
    assert cluster.traffic.passes == passes + 2 and stream.data == []
