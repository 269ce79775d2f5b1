"""What trusting nothing costs (issue 27): store verification, and TLS on ``local:N``, each against its
baseline in the same run.

Usage::

    .venv/bin/python benchmarks/bench_trust.py [--fashion-mnist STORE] [--airline STORE] [--steps 10]

Stores are ingested into a temporary directory when not given (``pep ingest mnist`` / ``pep ingest
airline --target delayed``, with the digests this version writes). Writes ``benchmarks/results/bench_trust.json``.

* Verification, per store, at the settings pep trains it with in its benchmarks (Fashion-MNIST: the
  paper's MNIST settings of ``bench_fashion_mnist.py``, 200-row blocks; airline: ``bench_airline_qp.py``'s
  tied EP, 2,500-row blocks):

  - ``per_chunk``: reading every training block of one epoch as the trainer does (chunks checked against
    their digests as they are read, :mod:`pep_gp.pipeline.data.chunks`) minus the same reads straight from
    Zarr without checks (best of 5 passes each, interleaved): the seconds verification adds to every epoch
    whose blocks are not all in the block cache (Fashion-MNIST's 188 MB never are at the default 16 MB);
  - ``whole_store``: :meth:`Store.verify` (every chunk of both splits read and hashed once), the
    alternative of verifying at ``train``/``evaluate`` start (and what a store written before per-chunk
    digests costs once per process);
  - both as a fraction of an epoch: steps per epoch × the median time of ``--steps`` training steps
    (in-process, after two warm-up steps).

* TLS: the step time of the default ``sparse-gp-classifier`` config on the airline store (as
  ``bench_engine.py``) in-process, and on ``local:1`` with and without the temporary TLS credentials
  ``local:N`` now uses: the three backends take a step in turn, ``--steps`` steps each (min and median).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

import pep_gp.core
from benchmarks._common import arguments, temporary_directory, write_json
from benchmarks.bench_fashion_mnist import PAPER_MNIST
from pep_gp.pipeline.data.blocks import BlockSource
from pep_gp.pipeline.data.chunks import open_root
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import Store, open_store
from pep_gp.pipeline.engine import InProcess
from pep_gp.pipeline.engine.clusters import local_cluster
from pep_gp.pipeline.runs.config import TrainConfig
from pep_gp.pipeline.training.trainer import Trainer, TrainJob

RESULTS = Path(__file__).parent / "results" / "bench_trust.json"
REPEATS = 5
AIRLINE_QP = TrainConfig(model={"num_inducing": 100, "damping": 1.0, "projection": "kl"}, learning_rate=0.05,
                         lr_schedule="cosine", epochs=2, batch_size=10_000, block_rows=2_500, checkpoint_every=10_000)
SETTINGS = {"fashion_mnist": ("multiclass-sep", PAPER_MNIST), "airline": ("tied-ep-classifier", AIRLINE_QP)}


@dataclass(frozen=True)
class UnverifiedBlocks(BlockSource):
    """The same blocks read straight from Zarr, without digest or label checks (the baseline: the reads
    before issue 27, arrays opened once per process)."""

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        X, y = _arrays(self.chunks.path, self.split)
        return X[start:stop], y[start:stop]


@lru_cache(maxsize=4)
def _arrays(path: str, split: str) -> tuple[Any, Any]:
    group = open_root(path)[split]
    return group["X"], group["y"]


def seconds(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def median_step(trainer: Trainer, steps: int) -> float:
    """Median seconds of ``steps`` training steps after two warm-up steps (compilation)."""
    state = trainer.fresh_state()
    trainer.step(state), trainer.step(state)
    return float(np.median([seconds(lambda: trainer.step(state)) for _ in range(steps)]))


def verification(store: Store, model: str, config: TrainConfig, steps: int) -> dict[str, Any]:
    trainer = Trainer(TrainJob(model, store, config, None), InProcess())
    source = trainer.train.source
    unverified = UnverifiedBlocks(**{**{f.name: getattr(source, f.name) for f in fields(source)}, "n_classes": None})
    blocks = range(source.n_blocks)
    read = lambda blocks_of: [blocks_of.read(b) for b in blocks]
    read(source), read(unverified)  # the page cache warm for both: the difference is the checking
    passes = [(seconds(lambda: read(source)), seconds(lambda: read(unverified))) for _ in range(REPEATS)]
    verified_s, unverified_s = (min(times) for times in zip(*passes))  # interleaved; interference only adds
    whole_s = min(seconds(store.verify) for _ in range(REPEATS))
    epoch_s = trainer.schedule.steps_per_epoch * median_step(trainer, steps)
    added = verified_s - unverified_s
    return {"store": store.path, "model": model, "n_train": store.n_rows("train"), "n_test": store.n_rows("test"),
            "chunk_rows": store.chunk_rows, "block_rows": source.block_rows,
            "steps_per_epoch": trainer.schedule.steps_per_epoch, "epoch_seconds_estimate": round(epoch_s, 2),
            "per_chunk": {"epoch_block_reads_verified_s": round(verified_s, 3),
                          "epoch_block_reads_unverified_s": round(unverified_s, 3),
                          "added_per_epoch_s": round(added, 3), "fraction_of_epoch": round(added / epoch_s, 5)},
            "whole_store": {"verify_s": round(whole_s, 3), "fraction_of_epoch": round(whole_s / epoch_s, 5)}}


def tls_step_times(store: Store, steps: int) -> dict[str, Any]:
    """Step times on three backends side by side, a step on each in turn (so a change of the machine's load
    falls on all three alike): min and median of ``steps`` steps each after two warm-up steps."""
    backends = {"in-process": InProcess(), "local:1 without TLS": local_cluster(1, "local:1", security=False),
                "local:1 with TLS": local_cluster(1, "local:1")}
    try:
        trainers = {name: Trainer(TrainJob("sparse-gp-classifier", store, TrainConfig(), None), backend)
                    for name, backend in backends.items()}
        states = {name: trainer.fresh_state() for name, trainer in trainers.items()}
        times: dict[str, list[float]] = {name: [] for name in trainers}
        for step in range(steps + 2):
            for name, trainer in trainers.items():
                elapsed = seconds(lambda: trainer.step(states[name]))
                if step >= 2:
                    times[name].append(elapsed)
    finally:
        for backend in backends.values():
            backend.close()
    summary = {name: {"min": round(min(t), 4), "median": round(float(np.median(t)), 4)} for name, t in times.items()}
    ratio = lambda statistic: round(summary["local:1 with TLS"][statistic] / summary["local:1 without TLS"][statistic], 3)
    return {"model": "sparse-gp-classifier", "config": "defaults (M = 200, 10,000-row steps, 1,000-row blocks)",
            "step_s": summary, "tls_vs_plain_local_1": {"min": ratio("min"), "median": ratio("median")}}


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_trust``."""
    parser = arguments(__doc__, steps=10)
    parser.add_argument("--fashion-mnist", type=Path)
    parser.add_argument("--airline", type=Path)
    return parser


def main() -> None:
    args = cli().parse_args()
    load_before = os.getloadavg()
    with temporary_directory() as scratch, pep_gp.core.float64():
        stores = {"fashion_mnist": (args.fashion_mnist, "mnist", None), "airline": (args.airline, "airline", "delayed")}
        opened = {}
        for name, (path, source, target) in stores.items():
            if path is None:
                path = scratch / f"{name}.zarr"
                ingest(open_source(source, SourceRequest((), target)), path)
            opened[name] = open_store(path)
        result = {"machine": {"load_avg_before": load_before, "shared": "yes: other jobs ran on the 2 cores"}}
        for part, measure in (("verification", lambda: {name: verification(opened[name], *SETTINGS[name], args.steps)
                                                         for name in SETTINGS}),
                              ("tls", lambda: tls_step_times(opened["airline"], args.steps))):
            result[part] = measure()
            result["machine"]["load_avg_after"] = os.getloadavg()
            write_json(RESULTS, result)  # each part as soon as it is measured
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
