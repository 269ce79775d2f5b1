"""A second training process with JAX's persistent compilation cache (issue 25, compile once).

Three fresh processes, one after the other, train the same steps of ``multiclass-sep`` at the paper's
Fashion-MNIST settings (:data:`benchmarks.bench_fashion_mnist.PAPER_MNIST`, M = 200, minibatch 200)
through the trainer ``pep train`` runs: without the cache (``PEP_COMPILATION_CACHE=off``), with an empty
cache directory (the first process: it compiles and writes), and with the same directory again (the
second process: it loads). Each reports the seconds from its own start (interpreter, imports and all)
to the end of its first step, the first step's own seconds, the programs it loaded from the cache, and
its parameters after ``--steps`` steps, which must be bit-identical across the three.

Usage::

    .venv/bin/python -m benchmarks.bench_compile_cache [--store fmnist.zarr] [--steps 3]
        [--mnist-dir /usr/share/datasets/fashion-mnist] [--name bench_compile_cache]

Writes ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import Stopwatch, arguments, bytecode_compiled, temporary_directory, write_results

ROOT = Path(__file__).resolve().parents[1]


def child(store: str, steps: int, config: str) -> None:
    """Train ``steps`` steps of the training config ``config`` (JSON) in this (fresh) process and print what
    the parent records, as JSON. It imports what ``pep train`` imports and nothing else (the parent reads
    the config, so the benchmarks' own imports, scikit-learn among them, stay out of the timing)."""
    import jax.monitoring
    import numpy as np
    import psutil

    from pep_gp.pipeline.data.stores import open_store
    from pep_gp.pipeline.engine import InProcess
    from pep_gp.pipeline.engine.threads import compute_threads
    from pep_gp.pipeline.runs.config import TrainConfig
    from pep_gp.pipeline.training.trainer import Trainer, TrainJob

    hits: list[str] = []
    jax.monitoring.register_event_listener(lambda event, **_: hits.append(event) if event.endswith("cache_hits") else None)
    started = psutil.Process().create_time()
    trainer = Trainer(TrainJob("multiclass-sep", open_store(store), TrainConfig.model_validate_json(config), None),
                      InProcess())
    with compute_threads():  # as Trainer.run: one BLAS thread, or LAPACK's results vary with its threads
        state = trainer.fresh_state()
        with Stopwatch() as timer:
            trainer.step(state)
        first_step = timer.seconds
        to_first_step = time.time() - started
        hits_at_first_step = len(hits)
        for _ in range(steps - 1):
            trainer.step(state)
    digest = hashlib.sha256(b"".join(np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(state.params)))
    print(json.dumps({"seconds_from_process_start_to_first_step": round(to_first_step, 2),
                      "first_step_seconds": round(first_step, 2), "programs_loaded_from_cache": hits_at_first_step,
                      "params_sha256_after_steps": digest.hexdigest()}))


def run_child(store: str, steps: int, config: str, cache: str) -> dict:
    env = {**os.environ, "PEP_COMPILATION_CACHE": cache}
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_compile_cache", "--child", "--store", store,
                           "--steps", str(steps), "--config", config], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print({cache: result}, flush=True)
    return result


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_compile_cache``."""
    parser = arguments(__doc__, steps=3, name="bench_compile_cache")
    parser.add_argument("--store", type=Path, default=None)
    parser.add_argument("--mnist-dir", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = cli().parse_args()
    if args.child:
        child(str(args.store), args.steps, args.config)
        return
    from benchmarks.bench_fashion_mnist import PAPER_MNIST
    from pep_gp.pipeline.data.ingest import ingest
    from pep_gp.pipeline.data.sources import SourceRequest, open_source
    from pep_gp.pipeline.data.sources.mnist import DEBIAN_DIR

    bytecode_compiled(sys.executable)  # the processes time their imports as a user's install leaves them
    with temporary_directory(prefix="pep-bench-cache-") as work:
        store = args.store
        if store is None:
            store = work / "fashion-mnist.zarr"
            ingest(open_source("mnist", SourceRequest((args.mnist_dir or DEBIAN_DIR,))), store)
        cache = work / "jax-cache"
        config = PAPER_MNIST.model_copy(update={"epochs": 1}).model_dump_json()
        runs = {"no cache (PEP_COMPILATION_CACHE=off)": run_child(str(store), args.steps, config, "off"),
                "first process (empty cache)": run_child(str(store), args.steps, config, str(cache)),
                "second process (cache filled)": run_child(str(store), args.steps, config, str(cache))}
        cache_mb = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 2**20
    first, second = runs["first process (empty cache)"], runs["second process (cache filled)"]
    write_results(args.name, {
        "model": "multiclass-sep", "settings": "benchmarks.bench_fashion_mnist.PAPER_MNIST", "steps": args.steps,
        "runs": runs, "cache_mb": round(cache_mb, 1),
        "first_over_second_process": {
            "first_step_seconds": round(first["first_step_seconds"] / second["first_step_seconds"], 2),
            "seconds_from_process_start_to_first_step": round(
                first["seconds_from_process_start_to_first_step"] / second["seconds_from_process_start_to_first_step"], 2)},
        "params_bit_identical": len({run["params_sha256_after_steps"] for run in runs.values()}) == 1})


if __name__ == "__main__":
    main()
