"""``pep train`` with ``parallel_over = "classes"`` (:mod:`pep_gp.pipeline.training.class_parallel`): the
trainer's whole path — checkpoints, evaluations, the best parameters, resuming — with the classes' state held
by the groups; the row-parallel run to rounding, its own bits on any number of workers and after a resume."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.errors import InputError
from pep_gp.pipeline.training.trainer import Trainer, TrainJob, train
from tests.trainstores import FAST, config_for, leaves_equal

CLASSES = config_for("multiclass-sep", FAST.model_copy(update={"parallel_over": "classes", "epochs": 2}))


def timeless(history: list[dict]) -> list[dict]:
    """The epochs' records without their wall-clock seconds."""
    return [{key: value for key, value in record.items() if key != "seconds"} for record in history]


@pytest.fixture(scope="module")
def straight(three_class_store, tmp_path_factory):
    """The class-parallel run in this process, from start to end, and its run directory."""
    run_dir = tmp_path_factory.mktemp("classes") / "run"
    return train(TrainJob("multiclass-sep", three_class_store, CLASSES, run_dir)), run_dir


@pytest.mark.heavy  # the step itself is checked against the step of all classes in test_class_groups.py
def test_the_class_parallel_run_is_the_row_parallel_run_to_rounding(three_class_store, straight, tmp_path):
    straight, _ = straight
    rows = train(TrainJob("multiclass-sep", three_class_store, CLASSES.model_copy(update={"parallel_over": "rows"}),
                          tmp_path / "rows"))
    assert straight.steps == rows.steps == 10
    for got, want in zip(jax.tree_util.tree_leaves(straight.params), jax.tree_util.tree_leaves(rows.params),
                         strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.max(np.abs(want)))
    np.testing.assert_allclose([r["test_nll"] for r in straight.history], [r["test_nll"] for r in rows.history],
                               rtol=1e-10)


@pytest.mark.heavy  # the straight run it compares with is a whole training run
def test_its_best_parameters_are_those_the_best_step_started_from(three_class_store, straight, tmp_path):
    """The groups keep the best step's start (no gathering per step): the checkpoint's ``best_params`` are
    the bits of a run stopped at that step."""
    straight, run_dir = straight
    job = TrainJob("multiclass-sep", three_class_store, CLASSES, run_dir)
    restored, _ = Trainer(job, InProcess()).restore_or_init(resume=True)
    assert 0 < restored.best_step < straight.steps
    until = train(TrainJob("multiclass-sep", three_class_store, CLASSES, tmp_path / "until"),
                  until_step=restored.best_step)
    assert leaves_equal(restored.best_params, until.params)
    assert not leaves_equal(restored.best_params, straight.params)


@pytest.mark.heavy  # the straight run it compares with is a whole training run
def test_a_resumed_run_ends_with_the_straight_runs_bits(three_class_store, straight, tmp_path):
    straight, _ = straight
    run_dir = tmp_path / "resumed"
    train(TrainJob("multiclass-sep", three_class_store, CLASSES, run_dir), until_step=6)  # checkpoints at 4 and 6
    resumed = train(TrainJob("multiclass-sep", three_class_store, CLASSES, run_dir), resume=True)
    assert leaves_equal(resumed.params, straight.params)
    assert timeless(resumed.history) == timeless(straight.history)


@pytest.mark.exhaustive
@pytest.mark.heavy  # trains the row-parallel run it then refuses to resume by classes
def test_resuming_a_row_parallel_run_by_classes_is_refused(three_class_store, tmp_path):
    train(TrainJob("multiclass-sep", three_class_store, FAST, tmp_path / "rows"), until_step=4)
    with pytest.raises(InputError, match="parallel_over: 'rows' → 'classes'"):
        train(TrainJob("multiclass-sep", three_class_store, CLASSES, tmp_path / "rows"), resume=True)


def test_a_model_without_classes_to_spread_is_refused(binary_store, tmp_path):
    with pytest.raises(InputError, match="parallel_over = classes .* --model sparse-gp-classifier"):
        train(TrainJob("sparse-gp-classifier", binary_store, FAST.model_copy(update={"parallel_over": "classes"}),
                       tmp_path / "run"))


@pytest.mark.exhaustive
@pytest.mark.heavy
def test_on_two_then_one_worker_the_run_has_the_bits_of_this_process(three_class_store, straight, tmp_path):
    """A run cut after 6 steps on two pinned workers (the same XLA partitioning as this process; groups of 1
    and 2 classes) and resumed on one (all 3 classes), checkpointed and evaluated on the way (other groupings,
    in this process: tests/pipeline/test_class_groups.py)."""
    from pep_gp.pipeline.engine import connect

    straight, _ = straight
    backend = connect("local:2:pinned")
    try:
        run_dir = tmp_path / "two"
        train(TrainJob("multiclass-sep", three_class_store, CLASSES, run_dir), backend, until_step=6)
        backend.client.retire_workers(list(backend.client.nthreads())[:1])
        assert len(backend.client.nthreads()) == 1
        resumed = train(TrainJob("multiclass-sep", three_class_store, CLASSES, run_dir), backend, resume=True)
        assert leaves_equal(resumed.params, straight.params) and timeless(resumed.history) == timeless(straight.history)
    finally:
        backend.close()
