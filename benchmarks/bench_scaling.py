"""Strong scaling of the resident engine over pinned workers, with the same bits on every W, and the
scaling model's predictions checked against each measured point.

Usage (on a machine with at least as many cores as the largest W; JAX on its CPU)::

    JAX_PLATFORMS=cpu python -m benchmarks.bench_scaling [--store airline-classes.zarr] \
        [--workers 1,2,4,8,16] [--block-rows 625] [--steps 13] [--label "16-core device machine"]

The bundled airline flights with 3 classes (``pep ingest airline``; ingested into a temporary directory
when ``--store`` is not given), ``multiclass-sep`` at M = 200 inducing points per class with 10,000-row
steps, cut into blocks of ``--block-rows`` rows (625: 16 blocks, so every W of 1, 2, 4, 8 and 16 gets
the same number of blocks per worker). Each backend — in-process, ``local:1`` and ``local:W:pinned`` for
each W — runs in a fresh process (:func:`benchmarks.bench_engine.measure`): two warm-up steps,
``--steps`` timed steps, then 5 more, so parameters are compared after ``--steps`` + 7 steps (20 by
default) by their SHA-256.

The scaling model ``T(W) = c + 2L + p · ⌈n / W⌉ / n + W · b / β`` takes every term from the one-pinned-
worker row, measured, not fitted: ``c`` the coordinator's part of a step, ``L`` one pass's overhead (a
step makes two), ``p`` the worker's block computations over the step's ``n`` blocks (the busiest worker
holds ``⌈n / W⌉`` of them), ``b`` the bytes per worker and step and ``β`` the coordinator's bandwidth
(:data:`benchmarks.bench_engine.BANDWIDTH`, assumed). Its prediction stands beside each measured W.

Writes ``benchmarks/results/bench_scaling.json`` and prints the table of docs/results/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from benchmarks._common import arguments, temporary_directory, uptime, write_results
from benchmarks.bench_engine import BANDWIDTH, ROOT, run_one

INDUCING = 200
BATCH = 10_000


def model_seconds(one: dict[str, Any], workers: int, blocks: int) -> float:
    """The scaling model's seconds per step on ``workers`` pinned workers, from the one-worker row."""
    return (one["coordinator_seconds"] + 2 * one["pass_overhead_seconds"]
            + one["worker_seconds"] * math.ceil(blocks / workers) / blocks
            + workers * one["payload_bytes_per_worker"] / BANDWIDTH)


def summarise(rows: dict[str, dict[str, Any]], workers: list[int], blocks: int) -> dict[str, Any]:
    """Speed-ups over one pinned worker (medians and minima), the model's predictions and whether each
    backend's parameters have the in-process bits."""
    one = rows["local:1:pinned"]
    reference = rows["in-process"]["params_sha256"]
    out: dict[str, Any] = {"same_bits": {name: row["params_sha256"] == reference for name, row in rows.items()}}
    for w in workers:
        row = rows[f"local:{w}:pinned"]
        predicted = model_seconds(one, w, blocks)
        out[str(w)] = {"speedup_median": round(one["seconds_per_step"] / row["seconds_per_step"], 2),
                       "speedup_min": round(one["min_seconds_per_step"] / row["min_seconds_per_step"], 2),
                       "predicted_seconds_per_step": round(predicted, 4),
                       "predicted_speedup": round(model_seconds(one, 1, blocks) / predicted, 2)}
    return out


def table(result: dict[str, Any]) -> str:
    """The results page's table of one run."""
    rows, summary = result["runs"], result["summary"]
    lines = ["| backend | s / step (median, min) | speed-up over 1 pinned (median, min) | model: s / step, speed-up "
             "| coordinator, s | pass overhead, ms | busiest worker, s | coordinator CPU, s | payload / worker "
             "| same bits as in-process |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        w = name.split(":")[1] if name.endswith(":pinned") else None
        speed = f"{summary[w]['speedup_median']:.2f}×, {summary[w]['speedup_min']:.2f}×" if w else "–"
        model = (f"{summary[w]['predicted_seconds_per_step']:.4f}, {summary[w]['predicted_speedup']:.2f}×"
                 if w else "–")
        payload = f"{row['payload_bytes_per_worker'] / 1e6:.3f} MB" if "workers" in row else "–"
        lines.append(f"| {name} | {row['seconds_per_step']:.4f}, {row['min_seconds_per_step']:.4f} | {speed} | {model} "
                     f"| {row['coordinator_seconds']:.4f} | {1e3 * row['pass_overhead_seconds']:.1f} "
                     f"| {row['worker_seconds']:.4f} | {row['coordinator_cpu_seconds']:.4f} | {payload} "
                     f"| {'yes' if summary['same_bits'][name] else 'no'} |")
    config = result["config"]
    lines += ["", f"{result['label']} ({result['machine']['cpus']} cores, JAX {result['machine']['jax']} on the CPU); "
              f"M = {config['num_inducing']}, {config['batch_size']:,}-row steps in {config['blocks']} blocks of "
              f"{config['block_rows']} rows, {config['steps']} timed steps, parameters compared after "
              f"{config['steps_in_all']} steps. Load: {result['uptime_before']} before, {result['uptime_after']} after."]
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_scaling``."""
    parser = arguments(__doc__, steps=13, name="bench_scaling")
    parser.add_argument("--store", type=Path, help="airline store with 3 classes; ingested if absent")
    parser.add_argument("--workers", default="1,2,4,8,16", help="comma-separated pinned worker counts")
    parser.add_argument("--block-rows", type=int, default=625)
    parser.add_argument("--label", default="this machine", help="where it ran, for the table")
    return parser


def main() -> None:
    parser = cli()
    args = parser.parse_args()
    workers = sorted({int(w) for w in args.workers.split(",")} | {1})
    if BATCH % args.block_rows:
        parser.error(f"--block-rows {args.block_rows} does not divide the {BATCH:,}-row step")
    blocks = BATCH // args.block_rows
    from benchmarks._multiclass_run import airline_classes

    before = uptime()
    with temporary_directory() as scratch:
        store = args.store or airline_classes(scratch)
        rows: dict[str, dict[str, Any]] = {}
        for name in ["in-process", "local:1"] + [f"local:{w}:pinned" for w in workers]:
            rows[name] = run_one(store, INDUCING, name, args.steps, ROOT / "src", args.block_rows)
            print({"backend": name, **rows[name]}, flush=True)
    path = write_results(args.name, {
        "label": args.label, "store": str(args.store or "bundled airline flights, 3 classes"), "model": "multiclass-sep",
        "config": {"num_inducing": INDUCING, "batch_size": BATCH, "block_rows": args.block_rows, "blocks": blocks,
                   "steps": args.steps, "steps_in_all": args.steps + 7},
        "uptime_before": before, "uptime_after": uptime(), "cores_visible": len(os.sched_getaffinity(0)),
        "runs": rows, "summary": summarise(rows, workers, blocks)})
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
