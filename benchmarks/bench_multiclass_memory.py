"""Memory of ``multiclass-sep`` training when the training store grows tenfold (issue 5: "peak memory
stays flat when the training store grows tenfold (replicated rows)").

Usage::

    .venv/bin/python -m benchmarks.bench_multiclass_memory [--store A.zarr] [--copies 10] [--steps N]
        [--cluster local:2:pinned]

The airline 3-class store (``pep ingest airline``, ingested into a temporary directory without
``--store``) is copied into a second store whose training split is its training rows ``--copies`` times
(same test split; written by :func:`pep_gp.pipeline.data.ingest.ingest`, so its attributes are those of any store).
``multiclass-sep`` (M = 100, 10,000-row steps in 1,000-row blocks) then trains the same number of
steps on each, every run in a new coordinator process with a new ``local:2:pinned`` cluster: by
default one epoch of the large store, so its workers
visit more distinct blocks than their block caches hold (``$PEP_BLOCK_CACHE_MB``, see
:mod:`pep_gp.pipeline.engine`) while the small store goes through several epochs. The large store is trained
a second time with an unbounded block cache (every block a worker read is kept, the engine's behaviour
before the cache was bounded) for comparison.

Recorded per run: the peak resident memory (``VmHWM``) of the coordinator process and of each worker,
the blocks each worker's cache holds, training rows, store size on disk, steps, seconds and the
coordinator's state size. Also the cost of
the bounded cache: one in-process pass over all blocks of the airline store, warm vs with the cache off
(every block re-read from Zarr). Writes ``benchmarks/results/bench_multiclass_memory.json``.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import psutil

from benchmarks._common import Stopwatch, arguments, best_time, temporary_directory, write_results
from benchmarks._multiclass_run import MODEL, EpochClock, airline_classes, tree_bytes
from pep_gp.pipeline.engine import cache as engine_cache
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.training.trainer import Trainer, TrainJob
from pep_gp.pipeline.engine.cache import BLOCK_CACHE_ENV, block_bytes, block_cache_budget
from pep_gp.pipeline.engine import InProcess, connect
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import RowBlock, Source
from pep_gp.pipeline.data.stores import Store, open_store

CONFIG = TrainConfig(model={"num_inducing": 100}, batch_size=10_000, block_rows=1_000, checkpoint_every=1_000_000)
UNBOUNDED_MB = "1000000"  # a block cache no run fills: every block read is kept
MB = 2**20


def replicated_source(store: Store, copies: int) -> Source:
    """A source with its own split: the training rows of ``store`` ``copies`` times, its test rows once.

    Ingesting it gives a store whose training statistics (``x_mean``, ``x_std``) are those of ``store``
    and whose ``class_counts["train"]`` are ``copies`` times its own.
    """

    def read() -> Iterator[RowBlock]:
        for split, repeats in (("train", copies), ("test", 1)):
            for _ in range(repeats):
                for index in range(store.n_chunks(split)):
                    X, y = store.read_chunk(split, index)
                    start = index * store.chunk_rows
                    yield RowBlock(X.astype(np.float64), y.astype(np.float64), f"{store.path} {split}",
                                   np.arange(start, start + len(y)), is_test=np.full(len(y), split == "test"))

    return Source(f"{store.attrs['source']['name']}×{copies}",
                  f"{store.path} with its training rows {copies} times", store.feature_names,
                  store.attrs["target_name"], store.task, store.n_classes, None, read)


def check_replica(store: Store, replica: Store, copies: int) -> None:
    """Refuse a replica whose training split is not ``copies`` times that of ``store`` (class counts,
    standardisation statistics) or whose test split differs."""
    counts, again = store.attrs["class_counts"], replica.attrs["class_counts"]
    same = (again["train"] == [copies * n for n in counts["train"]] and again["test"] == counts["test"]
            and all(np.allclose(replica.attrs[key], store.attrs[key], rtol=1e-6) for key in ("x_mean", "x_std")))
    if not same:
        raise AssertionError(f"{replica.path}: expected the training rows of {store.path} {copies} times "
                             f"and its test rows; found class counts {again} (original {counts})")


def disk_mb(path: str | Path) -> float:
    """Size of the files under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file()) / MB


def resident_peak_mb() -> float:
    """This process's peak resident memory, ``VmHWM`` of ``/proc/self/status`` (Linux). Unlike
    ``ru_maxrss``, which a spawned process inherits from the one that forked it (a worker from the
    coordinator, whose nanny threads start it), it counts this program image only."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def process_memory() -> dict[str, float]:
    """This process's peak and current resident memory."""
    return {"peak_rss_mb": round(resident_peak_mb(), 1),
            "rss_mb": round(psutil.Process().memory_info().rss / MB, 1)}


def worker_memory() -> dict[str, float]:
    """Run on a worker: its memory (:func:`process_memory`) and what its block cache holds."""
    return {**process_memory(), "cache_budget_mb": round(block_cache_budget() / MB, 1),
            "cached_blocks": len(engine_cache.BLOCKS), "cached_mb": round(engine_cache.BLOCKS.nbytes / MB, 1)}


def in_fresh_process(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a new (spawned) Python process, whose memory is then this call's alone."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def train(store: Store, steps: int, cluster: str, cache_mb: str | None = None) -> dict[str, Any]:
    """Train ``multiclass-sep`` for ``steps`` steps on ``store`` on a new ``cluster`` (in a temporary
    run directory); the memory of this process and of every worker, and what the steps read.

    Meant to run in a fresh process (:func:`in_fresh_process`): it sets ``$PEP_BLOCK_CACHE_MB`` to
    ``cache_mb`` (unless None) for itself and the workers it starts, and its peak memory is the run's.
    """
    if cache_mb is not None:
        os.environ[BLOCK_CACHE_ENV] = cache_mb
    # `steps` epochs hold at least `steps` steps; the constant learning rate makes `epochs` no part
    # of the updates, so both stores take the same kind of steps.
    config = CONFIG.model_copy(update={"epochs": steps})
    backend = connect(cluster)
    try:
        with temporary_directory(prefix="pep-bench-run-") as run_dir:
            trainer = Trainer(TrainJob(MODEL, store, config, run_dir), backend)
            clock = EpochClock(echo=False)
            rss_before = psutil.Process().memory_info().rss / MB
            with Stopwatch() as timer:
                result = trainer.run(until_step=steps, progress=clock)
            seconds = timer.seconds
        workers = backend.client.run(worker_memory)
    finally:
        backend.close()
    source, state = trainer.train.source, trainer.fresh_state()
    distinct = {b for step in range(steps) for b in trainer.schedule.blocks(step)}
    return {
        "n_train": store.n_rows("train"), "store_disk_mb": round(disk_mb(store.path), 1),
        "steps": result.steps, "epochs": round(steps / trainer.schedule.steps_per_epoch, 2),
        "seconds": round(seconds, 1), "training_seconds": round(clock.training_seconds, 1),
        "distinct_blocks_read": len(distinct),
        "distinct_blocks_mb": round(len(distinct) * block_bytes(source.read(0)) / MB, 1),
        "coordinator": {"rss_before_training_mb": round(rss_before, 1), **process_memory(),
                        "state_bytes": {"tied_factors": tree_bytes(result.params.factor),
                                        "params + adam state": tree_bytes((state.params, state.opt_state))}},
        "workers": [workers[address] for address in sorted(workers)],
    }


def cache_cost(store: Store, run_dir: Path, repeats: int = 3) -> dict[str, Any]:
    """Seconds of one in-process pass of the held-out function over every training block, with the
    blocks in the cache vs re-read from Zarr each time (cache off), and of the reads alone. The two
    kinds of pass alternate, and each keeps its best time, so that load from elsewhere hits both."""
    trainer = Trainer(TrainJob(MODEL, store, CONFIG, run_dir), InProcess())
    source, params = trainer.train.source, trainer.fresh_state().params
    blocks = range(source.n_blocks)
    passes: dict[str, float] = {}
    for _ in range(repeats):
        for name, megabytes in (("cached", UNBOUNDED_MB), ("cache off", "0")):
            with mock.patch.dict(os.environ, {BLOCK_CACHE_ENV: megabytes}):
                seconds = best_time(lambda: trainer.train.map_sum(trainer.held_out, params, blocks), 1)
            passes[name] = min(seconds, passes.get(name, math.inf))
    reads = best_time(lambda: [source.read(b) for b in blocks], repeats)
    return {"blocks": source.n_blocks, "block_rows": source.block_rows,
            "seconds_per_pass": {name: round(value, 3) for name, value in passes.items()},
            "seconds_reading_all_blocks": round(reads, 3),
            "cache_off_slowdown": round(passes["cache off"] / passes["cached"] - 1, 3)}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_multiclass_memory``."""
    parser = arguments(__doc__, cluster="local:2:pinned")
    parser.add_argument("--store", type=Path, default=None, help="airline 3-class store; ingested if absent")
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--steps", type=int, default=None, help="default: one epoch of the replicated store")
    return parser


def main() -> None:
    args = cli().parse_args()
    with temporary_directory(prefix="pep-bench-memory-") as work:
        store = open_store(args.store or airline_classes(work))
        replicated_path = work / f"airline-classes-x{args.copies}.zarr"
        ingest(replicated_source(store, args.copies), replicated_path)
        replicated = open_store(replicated_path)
        check_replica(store, replicated, args.copies)
        steps = args.steps or math.ceil(replicated.n_rows("train") / CONFIG.batch_size)
        runs = {"1x": in_fresh_process(train, store, steps, args.cluster),
                f"{args.copies}x": in_fresh_process(train, replicated, steps, args.cluster),
                f"{args.copies}x, unbounded block cache": in_fresh_process(train, replicated, steps, args.cluster,
                                                                            UNBOUNDED_MB)}
        cost = cache_cost(store, work / "in-process-run")
    write_results("bench_multiclass_memory", {
        "data": f"airline 2013 (bundled), 3 classes; training rows x1 and x{args.copies}", "model": MODEL,
        "config": CONFIG.model_dump(exclude={"epochs"}), "cluster": args.cluster, "steps": steps,
        "block_cache_mb": block_cache_budget() / MB, "runs": runs, "block_cache_cost": cost})


if __name__ == "__main__":
    main()
