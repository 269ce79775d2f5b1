"""The bytes a training step moves on a real 2-worker LocalCluster: the payloads are those of the model —
each worker receives the params and ``N`` (it computes the step-shared quantities itself) and then only
the new cavity, and sends one partial sum per pass without the gradients that are zero by construction
and, in the second, the gradient w.r.t. the params only —
and the bytes on the
wire (the kernel's TCP counters of this process) are those payloads plus a few percent of messages."""

from __future__ import annotations

import os

import jax
import numpy as np
import pytest

from benchmarks._common import socket_bytes
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from tests.trainstores import FAST, config_for, make_store


def nbytes(tree) -> int:
    return sum(np.asarray(leaf).nbytes for leaf in jax.tree_util.tree_leaves(tree))


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_bytes_per_step_are_the_models(cluster, tmp_path):
    store = make_store(tmp_path / "wide.zarr", n_rows=600, n_features=300, n_classes=3)
    config = FAST.model_copy(update={"model": {"num_inducing": 40}, "batch_size": 192, "block_rows": 48})
    trainer = Trainer(TrainJob("multiclass-sep", store, config_for("multiclass-sep", config), None), cluster)
    state = trainer.fresh_state()
    trainer.step(state)  # compiles on the workers, fills their block caches
    model, workers = trainer.model, len(cluster.client.nthreads())
    params = state.params
    shared = jax.jit(model.step_shared)(params, trainer.data_size)
    classes, inducing = params.inducing.shape[:2]
    stats_bytes = 8 * (classes * inducing + classes * inducing**2 + classes + 1)  # shift, precision, counts, rows
    cavity_bytes = nbytes(model.held(shared))
    live_gradient = 8 + nbytes((params.kernel, params.raw_noise, params.inducing))
    # the value and ∂/∂θ: not the factor's (zero by construction), nor ∂/∂K⁻¹ (each block pulls it back)
    model_bytes = workers * (nbytes(params) + nbytes(trainer.data_size) + stats_bytes + cavity_bytes + live_gradient)

    steps, traffic = 3, cluster.traffic
    sent, received, wire = traffic.sent, traffic.received, socket_bytes(os.getpid())
    for _ in range(steps):
        trainer.step(state)
    payload = (traffic.sent - sent + traffic.received - received) / steps
    on_wire = (socket_bytes(os.getpid()) - wire) / steps
    assert payload == model_bytes
    assert payload <= on_wire <= 1.1 * payload, (payload, on_wire)
