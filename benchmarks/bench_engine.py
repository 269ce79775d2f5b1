"""Engine benchmark: what the Dask engine adds to a step, how two workers scale, the bytes a step moves,
and the coordinator's memory as N grows — all in one run.

Usage::

    .venv/bin/python -m benchmarks.bench_engine [--store airline-classes.zarr] [--steps 20] [--sizes 50000 200000 800000]

On the bundled airline flights with 3 classes (``pep ingest airline``; ingested into a temporary directory
when ``--store`` is not given), ``multiclass-sep`` at the default config (``TrainConfig()``: M = 200,
10,000-row steps in 1,000-row blocks: the airline default config), median seconds per step after two
warm-up steps:

* the data term alone (one pass over a step's blocks): ``direct`` — its block function called in this
  process on blocks already in memory, the floor — and ``Engine.map_sum`` on each backend: in-process,
  ``local:1``, ``local:2`` and the same with each worker pinned to its own core (``local:N:pinned``, which
  separates the engine's scaling from XLA's own threads); overhead = backend / direct − 1;
* the whole training step (``Trainer.step``: step-shared quantities, site statistics, tied-factor update,
  data term, Adam) on each backend, with the bytes it moves per step: the array payloads the engine sends
  and receives, and the bytes on the wire (this process's TCP counters, ``ss``), next to the payload of
  the model: ``W × (params + step-shared + site statistics + new cavity + value and live gradient)``;
* coordinator memory: peak RSS growth of this process while training 3 steps on synthetic 3-class stores
  of growing N on ``local:2`` (the data stays on the workers).

Writes ``benchmarks/results/bench_engine.json`` and prints the tables of docs/results/benchmarks.md (with the
scaling model calibrated on this run).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np
import psutil

import pep_gp.core
from benchmarks._common import RESULTS, socket_bytes, write_results
from benchmarks._multiclass_run import airline_classes
from pep_gp.pipeline.data.ingest import ingest
from pep_gp.pipeline.data.sources import SourceRequest, open_source
from pep_gp.pipeline.data.stores import open_store
from pep_gp.pipeline.engine import Engine, InProcess, connect
from pep_gp.pipeline.engine.cache import BLOCKS, _compiled
from pep_gp.pipeline.engine.summation import tree_sum
from pep_gp.pipeline.engine.threads import compute_threads
from pep_gp.pipeline.training.config import TrainConfig
from pep_gp.pipeline.training.step import DataTerm
from pep_gp.pipeline.training.trainer import Trainer, TrainJob

MODEL = "multiclass-sep"
BACKENDS = ("in-process", "local:1", "local:2", "local:1:pinned", "local:2:pinned")


def median_seconds(run: Callable[[int], Any], steps: int) -> float:
    """Median seconds of ``run(step)``, its result waited for, over ``steps`` steps after two warm-up steps."""
    jax.block_until_ready((run(0), run(1)))
    times = []
    for step in range(2, steps + 2):
        started = time.perf_counter()
        jax.block_until_ready(run(step))
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def nbytes(tree: Any) -> int:
    return int(sum(np.asarray(leaf).nbytes for leaf in jax.tree_util.tree_leaves(tree)))


def model_bytes(trainer: Trainer, params: Any, workers: int) -> int:
    """The payload a multi-class SEP step moves with ``workers`` workers: the params and step-shared
    quantities to each worker, one partial sum of the site statistics from each, the new cavity to each
    and one partial sum of the value and the live gradient (not the factor's, chol(K)'s or the held
    cavity's: zero by construction) from each."""
    with pep_gp.core.float64():  # the engine's precision (outside it, JAX would compute the sizes in float32)
        shared = jax.jit(trainer.model.step_shared)(params, trainer.n_total)
        held = trainer.model.held(shared)
    classes, inducing = params.inducing.shape[:2]
    stats = 8 * (classes * inducing + classes * inducing**2 + classes + 1)
    gradient = 8 + nbytes((params.kernel, params.raw_noise, params.inducing,
                           shared.prior.inverse))
    return workers * (nbytes((params, shared)) + stats + nbytes(held) + gradient)


def data_term_times(store: Any, config: TrainConfig, steps: int) -> dict[str, float]:
    """Seconds per step of the data term's pass: direct, then through each backend."""
    trainer = Trainer(TrainJob(MODEL, store, config, None), InProcess())
    params = trainer.fresh_state().params
    with pep_gp.core.float64():
        inputs = jax.device_get((params, trainer.model.step_shared(params, trainer.n_total)))
    source, fn, schedule = trainer.train.source, DataTerm(trainer.model), trainer.schedule

    def direct(step: int) -> Any:
        with pep_gp.core.float64(), compute_threads():
            blocks = list(BLOCKS.get_all(source, schedule.blocks(step)))
            return tree_sum(jax.device_get([_compiled(fn)(inputs, *block) for block in blocks]))

    times = {"direct": median_seconds(direct, steps)}
    for cluster in BACKENDS:
        backend = connect("none" if cluster == "in-process" else cluster)
        try:
            engine = Engine(backend, source)
            times[cluster] = median_seconds(lambda s: engine.map_sum(fn, inputs, schedule.blocks(s)), steps)
        finally:
            backend.close()
        print({"data term": cluster, "seconds": round(times[cluster], 4)}, flush=True)
    return times


def step_times(store: Any, config: TrainConfig, steps: int) -> dict[str, dict[str, Any]]:
    """Seconds per training step on each backend, and the bytes a step moves."""
    rows: dict[str, dict[str, Any]] = {}
    for cluster in BACKENDS:
        backend = connect("none" if cluster == "in-process" else cluster)
        try:
            trainer = Trainer(TrainJob(MODEL, store, config, None), backend)
            with compute_threads():
                state = trainer.fresh_state()
                seconds = median_seconds(lambda _: trainer.step(state), steps)
                row: dict[str, Any] = {"seconds_per_step": round(seconds, 4)}
                traffic = getattr(backend, "traffic", None)
                if traffic is not None:
                    workers = len(backend.client.nthreads())
                    sent, received, wire = traffic.sent, traffic.received, socket_bytes(os.getpid())
                    for _ in range(5):
                        trainer.step(state)
                    row.update({"workers": workers, "payload_sent_per_step": (traffic.sent - sent) // 5,
                                "payload_received_per_step": (traffic.received - received) // 5,
                                "bytes_on_the_wire_per_step": (socket_bytes(os.getpid()) - wire) // 5,
                                "model_payload_per_step": model_bytes(trainer, state.params, workers)})
        finally:
            backend.close()
        rows[cluster] = row
        print({"training step": cluster, **row}, flush=True)
    return rows


def synthetic_store(directory: Path, n_rows: int) -> Any:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n_rows, 8)).astype(np.float32)
    y = np.argmax(x[:, :3] + 0.3 * rng.normal(size=(n_rows, 3)), axis=1)
    np.savez(directory / f"s{n_rows}.npz", X=x, y=y.astype(np.int64))
    ingest(open_source("npz", SourceRequest((directory / f"s{n_rows}.npz",), None, "classification")),
           directory / f"s{n_rows}.zarr", chunk_rows=10_000, test_size="1000")
    return open_store(directory / f"s{n_rows}.zarr")


def fashion_mnist_payload(directory: Path) -> dict[str, int]:
    """The model's payload per worker and step at the Fashion-MNIST settings (``PAPER_MNIST``: 10 classes,
    784 inputs, M = 200), from a store of that shape (the sizes do not depend on the values)."""
    from benchmarks.bench_fashion_mnist import PAPER_MNIST

    rng = np.random.default_rng(0)
    np.savez(directory / "fmnist-shape.npz", X=rng.random((2_000, 784), dtype=np.float32),
             y=np.arange(2_000) % 10)
    ingest(open_source("npz", SourceRequest((directory / "fmnist-shape.npz",), None, "classification")),
           directory / "fmnist-shape.zarr", test_size="200")
    trainer = Trainer(TrainJob(MODEL, open_store(directory / "fmnist-shape.zarr"), PAPER_MNIST, None), InProcess())
    return {"model_payload_per_worker": model_bytes(trainer, trainer.fresh_state().params, 1)}


def coordinator_memory(sizes: list[int], config: TrainConfig) -> list[dict[str, Any]]:
    process, rows = psutil.Process(), []
    backend = connect("local:2")
    try:
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
    finally:
        backend.close()
    return rows


BANDWIDTH = 1.25e9  # bytes per second into and out of the coordinator: one 10 Gbit/s link
PREDICTED_WORKERS = (1, 2, 8, 32, 128)


def scaling_model(result: dict[str, Any]) -> dict[str, Any]:
    """Seconds per training step on ``W`` workers, ``T(W) = s + p / W + W · b / β`` (docs/results/benchmarks.md):
    ``p`` the work that divides among the workers, ``s`` the rest (the coordinator's programs and the two
    round trips of a step), ``b`` the model's payload per worker and step and ``β`` the coordinator's
    bandwidth (:data:`BANDWIDTH`). ``s`` and ``p`` are calibrated on the pinned steps at 1 and 2 workers
    (the model passes through both); Fashion-MNIST's row gives the transfer term alone."""
    one, two = (result["training_step"][f"local:{w}:pinned"]["seconds_per_step"] for w in (1, 2))
    per_worker = result["training_step"]["local:1:pinned"]["model_payload_per_step"]
    # s + p / W = T(W) − W · b / β at W = 1 and 2, so the model passes through both measurements
    at_one, at_two = one - per_worker / BANDWIDTH, two - 2 * per_worker / BANDWIDTH
    serial, parallel = 2 * at_two - at_one, 2 * (at_one - at_two)
    fashion = result["fashion_mnist_settings"]["model_payload_per_worker"]

    def seconds(w: int) -> float:
        return serial + parallel / w + w * per_worker / BANDWIDTH

    return {
        "serial_seconds": round(serial, 4), "parallel_seconds": round(parallel, 4), "bandwidth": BANDWIDTH,
        "airline": {w: {"seconds_per_step": round(seconds(w), 4), "speedup_over_one": round(one / seconds(w), 2),
                        "payload_mb": round(w * per_worker / 1e6, 1)} for w in PREDICTED_WORKERS},
        "fashion_mnist_transfer": {w: {"payload_mb": round(w * fashion / 1e6, 1),
                                       "transfer_seconds": round(w * fashion / BANDWIDTH, 3)}
                                   for w in PREDICTED_WORKERS},
    }


def table(result: dict[str, Any]) -> str:
    """The results page's tables of one run: seconds per step on each backend with the bytes moved, the
    coordinator's memory and the scaling model's predictions."""
    data, steps = result["data_term_seconds_per_step"], result["training_step"]
    lines = ["| backend | data term, s / step | over the direct call | training step, s / step | "
             "payload sent + received / step | the model's payload | on the wire |",
             "|---|---|---|---|---|---|---|"]
    for name in ("direct", *BACKENDS):
        step = steps.get(name)
        overhead = "–" if name == "direct" else format(result["data_term_overhead_vs_direct"][name], "+.0%")
        cells = [name, f"{data[name]:.4f}", overhead, f"{step['seconds_per_step']:.4f}" if step else "–"]
        if step and "workers" in step:
            cells += [f"{(step['payload_sent_per_step'] + step['payload_received_per_step']) / 1e6:.3f} MB",
                      f"{step['model_payload_per_step'] / 1e6:.3f} MB", f"{step['bytes_on_the_wire_per_step'] / 1e6:.3f} MB"]
        else:
            cells += ["–", "–", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    memory = " / ".join(f"{row['coordinator_rss_growth_mb']:.0f}" for row in result["coordinator_memory"])
    sizes = " / ".join(f"{row['n_rows']:,}" for row in result["coordinator_memory"])
    model = scaling_model(result)
    lines += ["", f"Two pinned workers against one: data term {result['data_term_2_vs_1_workers_pinned']}×, "
              f"training step {result['training_step_2_vs_1_workers_pinned']}×; `local:1` training step "
              f"{result['training_step_local_1_over_in_process']}× the in-process one; coordinator memory growth "
              f"{memory} MB training N = {sizes} rows on `local:2` (load average "
              f"{result['machine']['load_avg'][0]:.1f} at the start).", "",
              f"Scaling model: s = {model['serial_seconds']:.4f} s, p = {model['parallel_seconds']:.4f} s, "
              f"β = {model['bandwidth'] / 1e9:g} GB/s.", "",
              "| workers | airline: s / step | speed-up over 1 | airline payload / step | "
              "Fashion-MNIST payload / step | its transfer alone |", "|---|---|---|---|---|---|"]
    for w in PREDICTED_WORKERS:
        a, f = model["airline"][w], model["fashion_mnist_transfer"][w]
        lines.append(f"| {w} | {a['seconds_per_step']:.3f} | {a['speedup_over_one']:.2f} | {a['payload_mb']:.1f} MB "
                     f"| {f['payload_mb']:,.1f} MB | {f['transfer_seconds']:.3f} s |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, help="airline store with 3 classes; ingested if absent")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 200_000, 800_000])
    args = parser.parse_args()
    config = TrainConfig()
    with tempfile.TemporaryDirectory() as scratch:
        store = open_store(args.store or airline_classes(Path(scratch)))
        data_term = data_term_times(store, config, args.steps)
        steps = step_times(store, config, args.steps)
        memory = coordinator_memory(args.sizes, config)
        fashion_mnist = fashion_mnist_payload(Path(scratch))
        n_train = store.n_rows("train")
    direct, one, two = data_term["direct"], steps["local:1:pinned"], steps["local:2:pinned"]
    write_results("bench_engine", {
        "store": str(args.store or "bundled airline flights, 3 classes"), "n_train": n_train, "model": MODEL,
        "config": {"num_inducing": 200, "batch_size": config.batch_size, "block_rows": config.rows_per_block},
        "data_term_seconds_per_step": {name: round(value, 4) for name, value in data_term.items()},
        "data_term_overhead_vs_direct": {name: round(value / direct - 1, 3) for name, value in data_term.items()
                                         if name != "direct"},
        "data_term_2_vs_1_workers_pinned": round(data_term["local:1:pinned"] / data_term["local:2:pinned"], 2),
        "training_step": steps,
        "training_step_2_vs_1_workers_pinned": round(one["seconds_per_step"] / two["seconds_per_step"], 2),
        "training_step_local_1_over_in_process": round(steps["local:1"]["seconds_per_step"]
                                                       / steps["in-process"]["seconds_per_step"], 3),
        "coordinator_memory": memory,
        "fashion_mnist_settings": fashion_mnist,
    })
    print(table(json.loads((RESULTS / "bench_engine.json").read_text())))


if __name__ == "__main__":
    main()
