"""Shared by the multi-class benchmarks: train ``multiclass-sep`` with per-epoch held-out metrics and the
training time without the evaluations, beside the in-memory baselines, and the coordinator's state size."""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from benchmarks._common import Stopwatch, temporary_directory
from pep_gp.pipeline.training.baselines import classification_baselines
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from pep_gp.pipeline.engine import connect
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import Store

MODEL = "multiclass-sep"


def airline_classes(work: Path) -> Path:
    """The bundled airline flights ingested with 3 classes (``pep ingest airline``) into ``work``."""
    path = work / "airline-classes.zarr"
    ingest(open_source("airline", SourceRequest((), "classes")), path)
    return path


def tree_bytes(tree: Any) -> int:
    """Bytes of the arrays of a pytree."""
    return int(sum(np.asarray(leaf).nbytes for leaf in jax.tree_util.tree_leaves(tree)))


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class EpochClock:
    """A progress callback that sums the time spent in training steps only: the per-epoch evaluation
    and the checkpoint writes are excluded (Villacampa-Calvo & Hernández-Lobato 2017, §4.4: logging time is excluded from the timing)."""

    def __init__(self, echo: bool = True):
        self.training_seconds, self.records, self.echo = 0.0, [], echo
        self._last = time.perf_counter()

    def __call__(self, event: str, **info: Any) -> None:
        now = time.perf_counter()
        if event == "step":
            self.training_seconds += now - self._last
        elif event == "epoch":
            record = {key: info["record"][key] for key in ("epoch", "step", "test_error", "test_nll",
                                                          "energy_per_row", "rejected_steps")}
            record["training_seconds"] = round(self.training_seconds, 2)
            record["peak_rss_mb"] = round(peak_rss_mb(), 1)
            self.records.append(record)
            if self.echo:
                print(record, flush=True)
        self._last = time.perf_counter()


def run_sep(store: Store, config: TrainConfig, cluster: str, model: str = MODEL) -> dict[str, Any]:
    """Train ``model`` (a SEP model: ``multiclass-sep`` by default) on ``store`` (in a temporary run
    directory) on ``cluster``; per-epoch metrics, seconds per epoch (training steps only) and the
    coordinator's state size."""
    backend = connect(cluster)
    clock = EpochClock()
    try:
        with temporary_directory("pep-bench-run-") as run_dir:
            trainer = Trainer(TrainJob(model, store, config, run_dir), backend)
            with Stopwatch() as timer:
                result = trainer.run(progress=clock)
            wall = timer.seconds
            state = trainer.fresh_state()
    finally:
        backend.close()
    epochs = len(clock.records)
    factor = result.params.factor
    return {
        "model": model, "cluster": cluster, "config": config.model_dump(),
        "steps_per_epoch": trainer.schedule.steps_per_epoch, "per_epoch": clock.records,
        "seconds_per_epoch": round(clock.training_seconds / epochs, 2),
        "wall_seconds_with_evaluation": round(wall, 1), "rejected_steps": result.rejected_steps,
        "coordinator_state_bytes": {
            "tied_factors (C·M + C·M²)": tree_bytes(factor),
            "params": tree_bytes(state.params),
            "params + adam state": tree_bytes(state.params) + tree_bytes(state.opt_state),
        },
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def baselines(store: Store) -> list[dict[str, Any]]:
    """Logistic regression (to convergence) and class frequencies, with the process's peak memory."""
    rows = classification_baselines(store)
    print(rows, flush=True)
    return rows
