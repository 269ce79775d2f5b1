"""Engine benchmark: where a distributed step's time goes, for this tree's engine and, in the same run,
the engine of another pep source tree (the previous one), side by side.

Usage::

    .venv/bin/python -m benchmarks.bench_engine [--store airline-classes.zarr] [--steps 20] \
        [--old-src /path/to/previous/checkout/src]

One backend of this tree's engine, one JSON row on stdout (nothing written; the bytes per worker and
step do not depend on the machine's load, so this is how to check them quickly — here after 1 timed step)::

    .venv/bin/python -m benchmarks.bench_engine --one airline-classes.zarr 200 local:2:pinned 1

On the bundled airline flights with 3 classes (``pep ingest airline``; ingested into a temporary directory
when ``--store`` is not given), ``multiclass-sep`` with 10,000-row steps in 1,000-row blocks at M = 50
(``TrainConfig()``'s default) and M = 200 inducing points per class, each backend — in-process,
``local:1``, ``local:1:pinned`` and ``local:2:pinned`` — trains from the same initial parameters, two
warm-up steps and then ``--steps`` timed steps, each engine in a fresh process (the engines alternate, so
both see the same load). Per step it reports the median and minimum seconds, and

* ``coordinator_seconds``: the step less its passes over the blocks (the coordinator's programs and
  the work around them);
* ``pass_overhead_seconds``: per pass, its wall time less the slowest worker's time in it (in-process:
  nothing, the pass is the work) — what the engine adds;
* ``worker_seconds``: the slowest worker's block computations per step (in-process: the passes);
* ``coordinator_cpu_seconds``: CPU time of the coordinator process per step (all its threads), and
  ``coordinator_cpu_by_thread``: the same per kind of thread (Linux's per-thread ``schedstat``): ``main``
  (the trainer's Python), ``event loop`` (Dask's comms: serialising, TLS, framing; before the cluster had a
  process of its own, also the scheduler and the nannies), ``XLA`` (the coordinator's compiled programs)
  and ``other``;
* ``bytes_per_worker``: the array payloads sent and received per step and worker, and the bytes on the
  wire per worker (this process's TCP counters, ``ss``);
* ``params_sha256``: a digest of the parameters after the last step (the same bits give the same digest).

Writes ``benchmarks/results/bench_engine.json`` (with ``uptime``'s load before and after: the machine is
shared) and prints the tables of docs/results/benchmarks.md.
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
from typing import Any

import jax
import numpy as np

from benchmarks._common import RESULTS, arguments, socket_bytes, temporary_directory, uptime, write_results

MODEL = "multiclass-sep"
INDUCING = (50, 200)
BACKENDS = ("in-process", "local:1", "local:1:pinned", "local:2:pinned")
ENGINES = ("old", "new")
TRAFFIC_STEPS = 5
BANDWIDTH = 1.25e9  # bytes per second into and out of the coordinator: one 10 Gbit/s link
PREDICTED_WORKERS = (1, 2, 8, 32, 128)
ROOT = Path(__file__).resolve().parents[1]


def digest(tree: Any) -> str:
    """SHA-256 of the bytes of a pytree's leaves."""
    hasher = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        hasher.update(np.asarray(leaf).tobytes())
    return hasher.hexdigest()


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of this process's threads, summed by kind: ``main``, ``event loop`` (Dask's,
    named ``IO loop``), ``XLA`` (its thread pools, named ``tf_…``) and ``other`` (Linux's per-thread
    ``schedstat``; threads that ended are not counted)."""
    import threading

    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    main = threading.main_thread().native_id
    kinds = dict.fromkeys(("main", "event loop", "XLA", "other"), 0.0)
    for tid in map(int, os.listdir("/proc/self/task")):
        try:
            seconds = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9
            name = names.get(tid) or Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except (OSError, IndexError):  # the thread ended meanwhile
            continue
        kind = ("main" if tid == main else "event loop" if name == "IO loop"
                else "XLA" if name.startswith(("tf_", "XLA")) else "other")
        kinds[kind] += seconds
    return kinds


def timed_passes(backend: Any) -> list[float]:
    """Wraps ``backend.sum`` (and an older engine's ``backend.sum_kept``, on the instance) so each call's wall
    seconds are appended to the returned list."""
    seconds: list[float] = []
    for name in ("sum", "sum_kept"):
        if not hasattr(backend, name):
            continue
        method = getattr(backend, name)

        def timed(*args: Any, method: Any = method, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = jax.block_until_ready(method(*args, **kwargs))
            seconds.append(time.perf_counter() - started)
            return result

        setattr(backend, name, timed)
    return seconds


def task_seconds(backend: Any, run: Any) -> tuple[Any, float, int]:
    """``run()``, with the slowest worker's seconds summed over the passes it made and the passes: from
    the backend's own counters (the resident engine), else from Dask's task stream (the task engine:
    a pass's tasks all start after the previous pass's ended)."""
    traffic = backend.traffic
    if hasattr(traffic, "task_seconds"):
        before = traffic.task_seconds, traffic.passes
        result = run()
        return result, traffic.task_seconds - before[0], traffic.passes - before[1]
    from distributed import get_task_stream

    with get_task_stream(backend.client) as stream:
        result = run()
    spans = sorted((s["start"], s["stop"]) for task in stream.data for s in task["startstops"]
                   if s["action"] == "compute" and task["key"].startswith(("sum_blocks", "sum_kept_blocks")))
    workers = len(backend.client.nthreads())
    passes = [spans[i:i + workers] for i in range(0, len(spans), workers)]
    return result, sum(max(stop - start for start, stop in group) for group in passes), len(passes)


def measure(store_path: Path, inducing: int, cluster: str, steps: int, block_rows: int | None = None) -> dict[str, Any]:
    """One backend, one engine (whichever ``pep_gp`` this process imports): the row of the results.
    ``block_rows``: rows per block of the 10,000-row step (unset: ``TrainConfig``'s 1,000)."""
    from pep_gp.core import float64
    from pep_gp.pipeline.data.stores import open_store
    from pep_gp.pipeline.engine import connect
    from pep_gp.pipeline.engine.threads import compute_threads
    from pep_gp.pipeline.runs.config import TrainConfig
    from pep_gp.pipeline.training.trainer import Trainer, TrainJob

    config = TrainConfig(model={"num_inducing": inducing}, block_rows=block_rows)
    backend = connect("none" if cluster == "in-process" else cluster)
    try:
        trainer = Trainer(TrainJob(MODEL, open_store(store_path), config, None), backend)
        with compute_threads():
            state = trainer.fresh_state()
            passes = timed_passes(backend)
            for _ in range(2):
                trainer.step(state)
            walls, cpus, pass_walls, tasks, counted = [], [], [], [], 0
            threads = thread_cpu()
            for _ in range(steps):
                del passes[:]
                started, cpu = time.perf_counter(), time.process_time()
                if cluster == "in-process":
                    trainer.step(state)
                    task, made = sum(passes), len(passes)
                else:
                    _, task, made = task_seconds(backend, lambda: trainer.step(state))
                walls.append(time.perf_counter() - started)
                cpus.append(time.process_time() - cpu)
                pass_walls.append(sum(passes))
                tasks.append(task)
                counted += made
            threads = {kind: (seconds - threads[kind]) / steps for kind, seconds in thread_cpu().items()}
            row: dict[str, Any] = {
                "seconds_per_step": round(float(np.median(walls)), 4), "min_seconds_per_step": round(min(walls), 4),
                "coordinator_seconds": round(float(np.median(np.subtract(walls, pass_walls))), 4),
                "pass_overhead_seconds": round((sum(pass_walls) - sum(tasks)) / counted, 4),
                "worker_seconds": round(float(np.median(tasks)), 4),
                "coordinator_cpu_seconds": round(float(np.median(cpus)), 4),
                "coordinator_cpu_by_thread": {kind: round(seconds, 4) for kind, seconds in threads.items()}}
            if cluster != "in-process":
                workers, traffic = len(backend.client.nthreads()), backend.traffic
                sent, received, wire = traffic.sent, traffic.received, socket_bytes(os.getpid())
                for _ in range(TRAFFIC_STEPS):
                    trainer.step(state)
                row.update({"workers": workers,
                            "payload_bytes_per_worker": (traffic.sent - sent + traffic.received - received)
                            // (TRAFFIC_STEPS * workers),
                            "wire_bytes_per_worker": None if wire is None else
                            (socket_bytes(os.getpid()) - wire) // (TRAFFIC_STEPS * workers)})
            else:
                for _ in range(TRAFFIC_STEPS):
                    trainer.step(state)
            with float64():
                row["params_sha256"] = digest(jax.device_get(state.params))
    finally:
        backend.close()
    return row


def run_one(store: Path, inducing: int, cluster: str, steps: int, src: Path,
            block_rows: int | None = None) -> dict[str, Any]:
    """:func:`measure` in a fresh process importing ``pep_gp`` from ``src`` (before the caller's
    ``PYTHONPATH``, which it keeps)."""
    path = [str(src), str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", "benchmarks.bench_engine", "--one", str(store), str(inducing), cluster, str(steps)]
    if block_rows is not None:
        command += ["--block-rows", str(block_rows)]
    output = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if output.returncode:
        raise RuntimeError(f"{cluster}, M = {inducing}, {src}: {output.stderr[-2000:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The issue's same-run ratios of one engine at one M, of the medians and of the minima (on a shared
    machine interference only adds time)."""
    out = {}
    for statistic, key in (("median", "seconds_per_step"), ("min", "min_seconds_per_step")):
        out[f"local_1_over_in_process_{statistic}"] = round(rows["local:1"][key] / rows["in-process"][key], 3)
        out[f"pinned_2_speedup_over_1_{statistic}"] = round(rows["local:1:pinned"][key] / rows["local:2:pinned"][key], 3)
    return out


def scaling_model(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Seconds per step on ``W`` pinned workers, ``T(W) = c + 2L + p / W + W · b / β``, every term measured
    on one pinned worker (not fitted): ``c`` the coordinator's part of a step, ``L`` the overhead of one
    pass (a step makes two), ``p`` the worker's block computations, ``b`` the bytes per worker and step,
    ``β`` the coordinator's bandwidth (:data:`BANDWIDTH`, assumed). Predictions, checked at W = 2 against
    the measured two-worker step."""
    one = rows["local:1:pinned"]
    c, overhead, p = one["coordinator_seconds"], one["pass_overhead_seconds"], one["worker_seconds"]
    b = one["payload_bytes_per_worker"]

    def seconds(w: int) -> float:
        return c + 2 * overhead + p / w + w * b / BANDWIDTH

    return {"coordinator_seconds": c, "pass_overhead_seconds": overhead, "worker_seconds": p,
            "bytes_per_worker": b, "bandwidth": BANDWIDTH,
            "predicted": {str(w): {"seconds_per_step": round(seconds(w), 4),
                              "speedup_over_one": round(seconds(1) / seconds(w), 2)} for w in PREDICTED_WORKERS},
            "measured_two_workers": rows["local:2:pinned"]["seconds_per_step"]}


def table(result: dict[str, Any]) -> str:
    """The results page's tables of one run: each engine's step on each backend, where its time goes,
    the same-run ratios and the scaling model's predictions."""
    lines = ["| M | backend | engine | s / step (median, min) | coordinator, s | pass overhead, ms | worker, s "
             "| coordinator CPU, s | payload / worker | on the wire / worker | same bits as in-process |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for inducing, runs in result["runs"].items():
        for cluster in BACKENDS:
            for engine in ENGINES:
                row = runs[engine][cluster]
                same = row["params_sha256"] == runs[engine]["in-process"]["params_sha256"]
                payload = (f"{row['payload_bytes_per_worker'] / 1e6:.3f} MB", f"{row['wire_bytes_per_worker'] / 1e6:.3f} MB") \
                    if "workers" in row else ("–", "–")
                lines.append(f"| {inducing} | {cluster} | {engine} | {row['seconds_per_step']:.4f}, "
                             f"{row['min_seconds_per_step']:.4f} | {row['coordinator_seconds']:.4f} | "
                             f"{1e3 * row['pass_overhead_seconds']:.1f} | {row['worker_seconds']:.4f} | "
                             f"{row['coordinator_cpu_seconds']:.4f} | {payload[0]} | {payload[1]} | "
                             f"{'yes' if same else 'no'} |")
    lines += ["", "| M | engine | `local:1` / in-process (medians, minima) | 2 pinned workers' speed-up over 1 "
              "(medians, minima) |", "|---|---|---|---|"]
    for inducing, runs in result["runs"].items():
        for engine in ENGINES:
            r = ratios(runs[engine])
            lines.append(f"| {inducing} | {engine} | {r['local_1_over_in_process_median']:.2f}×, "
                         f"{r['local_1_over_in_process_min']:.2f}× | {r['pinned_2_speedup_over_1_median']:.2f}×, "
                         f"{r['pinned_2_speedup_over_1_min']:.2f}× |")
    model = result["scaling_model"]
    lines += ["", f"Load: {result['uptime_before']} before, {result['uptime_after']} after.", "",
              f"Scaling model (new engine, M = {max(INDUCING)}, terms measured on one pinned worker): "
              f"c = {model['coordinator_seconds']:.4f} s, L = {1e3 * model['pass_overhead_seconds']:.1f} ms, "
              f"p = {model['worker_seconds']:.4f} s, b = {model['bytes_per_worker'] / 1e6:.3f} MB, "
              f"β = {model['bandwidth'] / 1e9:g} GB/s (assumed); at W = 2 it predicts "
              f"{model['predicted']['2']['seconds_per_step']:.4f} s, measured {model['measured_two_workers']:.4f} s.", "",
              "| workers | predicted s / step | predicted speed-up over 1 |", "|---|---|---|"]
    for w in PREDICTED_WORKERS:
        lines.append(f"| {w} | {model['predicted'][str(w)]['seconds_per_step']:.3f} | {model['predicted'][str(w)]['speedup_over_one']:.2f} |")
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_engine``."""
    parser = arguments(__doc__, steps=20)
    parser.add_argument("--store", type=Path, help="airline store with 3 classes; ingested if absent")
    parser.add_argument("--old-src", type=Path, help="the src/ directory of the engine to compare with")
    parser.add_argument("--one", nargs=4, metavar=("STORE", "M", "BACKEND", "STEPS"),
                        help="one backend (in-process, local:1, local:1:pinned, local:2:pinned, ...) of this tree's "
                             "engine at M inducing points per class: its row as JSON on stdout")
    parser.add_argument("--block-rows", type=int, help="with --one: rows per block (default 1,000)")
    return parser


def main() -> None:
    parser = cli()
    args = parser.parse_args()
    if args.one:
        store, inducing, cluster, steps = args.one
        print(json.dumps(measure(Path(store), int(inducing), cluster, int(steps), args.block_rows)))
        return
    if args.old_src is None:
        parser.error("--old-src: the src/ directory of the engine to compare with is required")
    from benchmarks._multiclass_run import airline_classes

    sources = {"old": args.old_src.resolve(), "new": ROOT / "src"}
    before = uptime()
    with temporary_directory() as scratch:
        store = args.store or airline_classes(scratch)
        runs: dict[str, dict[str, dict[str, Any]]] = {str(m): {e: {} for e in ENGINES} for m in INDUCING}
        for inducing in INDUCING:
            for cluster in BACKENDS:
                for engine in ENGINES:
                    row = run_one(store, inducing, cluster, args.steps, sources[engine])
                    runs[str(inducing)][engine][cluster] = row
                    print({"M": inducing, "backend": cluster, "engine": engine, **row}, flush=True)
    write_results("bench_engine", {
        "store": str(args.store or "bundled airline flights, 3 classes"), "model": MODEL,
        "config": {"num_inducing": list(INDUCING), "batch_size": 10_000, "block_rows": 1_000, "steps": args.steps},
        "engines": {"old": str(sources["old"]), "new": "this tree"},
        "uptime_before": before, "uptime_after": uptime(), "runs": runs,
        "ratios": {m: {e: ratios(rows) for e, rows in engines.items()} for m, engines in runs.items()},
        "scaling_model": scaling_model(runs[str(max(INDUCING))]["new"]),
    })

    print(table(json.loads((RESULTS / "bench_engine.json").read_text())))


if __name__ == "__main__":
    main()
