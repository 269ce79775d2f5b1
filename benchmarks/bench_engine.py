"""Engine benchmark: per-step overhead, 2-worker vs 1-worker throughput, coordinator memory vs N.

Usage::

    .venv/bin/python benchmarks/bench_engine.py [--store pep-demo/airline-delayed.zarr] [--steps 20]

Writes ``benchmarks/results/bench_engine.json`` and prints it. Measured on the airline store (binary
``delayed`` target; ingested into a temporary directory when ``--store`` is not given) with the default
config (M = 200, 10,000-row steps in 1,000-row blocks):

* ``direct``: the same jitted per-block function (``value_and_grad`` of the data term) called in this
  process on the step's blocks, already in memory — the floor;
* ``engine[in-process | local:1 | local:2]``: :meth:`pep_gp.pipeline.engine.Engine.map_sum` per step;
  overhead = engine / direct − 1;
* the same two clusters with each worker pinned to its own core (``local:N:pinned``), which
  separates the engine's scaling from XLA's own intra-op threads;
* coordinator memory: peak RSS growth of this process while training 3 steps on synthetic stores of
  growing N on ``local:2`` (the data stays on the workers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import psutil

import pep_gp.core
from pep_gp.pipeline.training.config import TrainConfig
from pep_gp.pipeline.training.trainer import TrainJob, Trainer
from pep_gp.pipeline.engine import Engine, InProcess, connect
from pep_gp.pipeline.engine.cache import evaluate_blocks
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store

RESULTS = Path(__file__).parent / "results" / "bench_engine.json"
MODEL = "sparse-gp-classifier"


def per_step(run, steps: int) -> float:
    """Median seconds of ``run(step)`` over ``steps`` steps, after two warm-up steps."""
    run(0), run(1)
    times = []
    for step in range(steps):
        started = time.perf_counter()
        run(step)
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def step_times(store, config: TrainConfig, steps: int) -> dict[str, Any]:
    trainer = Trainer(TrainJob(MODEL, store, config, Path(tempfile.mkdtemp())), InProcess())
    params = trainer.fresh_state().params
    with pep_gp.core.float64():
        params = jax.device_get((params, trainer.model.step_shared(params, trainer.n_total)))
    source, fn, schedule = trainer.train.source, trainer.step_fn.parts.data_term, trainer.schedule
    results = {"direct": per_step(lambda s: evaluate_blocks(fn, params, source, schedule.blocks(s)), steps)}
    results["engine[in-process]"] = per_step(lambda s: Engine(InProcess(), source).map_sum(fn, params, schedule.blocks(s)), steps)
    for workers in (1, 2):
        for pinned in (False, True):
            backend = connect(f"local:{workers}{':pinned' if pinned else ''}")
            engine = Engine(backend, source)
            results[f"engine[local:{workers}{', pinned' if pinned else ''}]"] = per_step(
                lambda s: engine.map_sum(fn, params, schedule.blocks(s)), steps)
            backend.close()
    return results


def synthetic_store(directory: Path, n_rows: int) -> Any:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_rows, 8)).astype(np.float32)
    np.savez(directory / f"s{n_rows}.npz", X=x, y=(x[:, 0] + x[:, 1] ** 2 > 0.5).astype(np.int64))
    ingest(open_source("npz", SourceRequest((directory / f"s{n_rows}.npz",), None, "classification")),
           directory / f"s{n_rows}.zarr", chunk_rows=10_000, test_size="1000")
    return open_store(directory / f"s{n_rows}.zarr")


def coordinator_memory(sizes: list[int], config: TrainConfig) -> list[dict[str, Any]]:
    process, rows = psutil.Process(), []
    backend = connect("local:2")
    with tempfile.TemporaryDirectory() as directory:
        for n_rows in sizes:
            store = synthetic_store(Path(directory), n_rows)
            trainer = Trainer(TrainJob(MODEL, store, config.model_copy(update={"epochs": 1}),
                                       Path(directory) / f"run{n_rows}"), backend)
            before, peak, done = process.memory_info().rss, [0], threading.Event()

            def sample() -> None:
                while not done.is_set():
                    peak[0] = max(peak[0], process.memory_info().rss)
                    time.sleep(0.005)

            sampler = threading.Thread(target=sample)
            sampler.start()
            trainer.run(until_step=3)
            done.set(), sampler.join()
            worker_rss = sum(backend.client.run(lambda: psutil.Process().memory_info().rss).values())
            rows.append({"n_rows": n_rows, "coordinator_rss_growth_mb": round((peak[0] - before) / 2**20, 1),
                         "workers_rss_mb": round(worker_rss / 2**20, 1)})
    backend.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path, help="airline store (binary 'delayed'); ingested if absent")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000, 800_000])
    args = parser.parse_args()
    config = TrainConfig()
    with tempfile.TemporaryDirectory() as scratch, pep_gp.core.float64():
        path = args.store
        if path is None:
            path = Path(scratch) / "airline.zarr"
            ingest(open_source("airline", SourceRequest((), "delayed")), path)
        store = open_store(path)
        times = step_times(store, config, args.steps)
        memory = coordinator_memory(args.sizes, config)
    direct = times["direct"]
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_avg": os.getloadavg()},
        "store": str(path), "n_train": store.n_rows("train"),
        "config": {"num_inducing": 200, "batch_size": config.batch_size,
                   "block_rows": config.block_rows},
        "seconds_per_step": {name: round(value, 4) for name, value in times.items()},
        "overhead_vs_direct": {name: round(value / direct - 1, 3) for name, value in times.items() if name != "direct"},
        "throughput_2_vs_1_workers": round(times["engine[local:1]"] / times["engine[local:2]"], 2),
        "throughput_2_vs_1_workers_pinned": round(times["engine[local:1, pinned]"] / times["engine[local:2, pinned]"], 2),
        "coordinator_memory": memory,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
