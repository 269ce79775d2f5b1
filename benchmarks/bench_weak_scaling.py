"""Weak scaling's statistical side: how many steps and epochs a larger global batch needs to reach a fixed
held-out NLL, with the learning rate kept, scaled by √k or by k (issue 36, item 4).

A cluster of W workers that each keep their rows per step (weak scaling) makes the global batch W times
larger; a step then costs about what it did on one worker (``benchmarks/bench_scaling.py`` measures the
step), so what W buys depends on how many fewer steps the larger batch needs. This benchmark measures
that on the bundled airline flights with 3 classes (``pep ingest airline``), ``multiclass-sep`` at
``TrainConfig()``'s defaults (M = 50, Adam 0.05, constant) except the batch and the learning rate:
global batches of 10,000 (the default), 40,000 and 160,000 rows, the learning rate 0.05 · s for
s = 1, √k and k (k = batch / 10,000). Every run starts from the same initial parameters and is evaluated on
the test split each time another 40,000 training rows have been seen (or after every step, for larger
batches); it stops at ``--target`` NLL or after ``--epochs`` epochs. The steps, epochs and training
seconds to the target are reported (the first step's compilation included); seconds are this machine's,
one process, with ``uptime``'s load.

Usage::

    .venv/bin/python -m benchmarks.bench_weak_scaling [--store airline-classes.zarr] [--target 0.90] [--epochs 6]

Writes ``benchmarks/results/bench_weak_scaling.json`` and prints the table of docs/results/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from benchmarks._common import arguments, temporary_directory, uptime, write_results

BASE_BATCH = 10_000
BASE_LEARNING_RATE = 0.05
EVALUATE_EVERY_ROWS = 40_000
SETTINGS = ((10_000, "constant"), (40_000, "constant"), (40_000, "sqrt"), (40_000, "linear"),
            (160_000, "constant"), (160_000, "sqrt"), (160_000, "linear"))


def learning_rate(batch: int, rule: str) -> float:
    """Adam's step for ``batch`` rows under ``rule``: the default's, times 1, √k or k (k = batch / 10,000)."""
    k = batch / BASE_BATCH
    return BASE_LEARNING_RATE * {"constant": 1.0, "sqrt": math.sqrt(k), "linear": k}[rule]


def run(store_path: Path, batch: int, rule: str, target: float, epochs: int) -> dict[str, Any]:
    """One setting: the held-out NLL trace and the first point at or below ``target``."""
    from pep_gp.pipeline.data.stores import open_store
    from pep_gp.pipeline.engine import connect
    from pep_gp.pipeline.engine.threads import compute_threads
    from pep_gp.pipeline.runs.config import TrainConfig
    from pep_gp.pipeline.training.trainer import Trainer, TrainJob

    config = TrainConfig(batch_size=batch, learning_rate=learning_rate(batch, rule))
    backend = connect("none")
    trace: list[dict[str, Any]] = []
    reached = None
    with temporary_directory() as run_dir, compute_threads():
        trainer = Trainer(TrainJob("multiclass-sep", open_store(store_path), config, run_dir), backend)
        state = trainer.fresh_state()
        rows, seconds, last_evaluated = 0, 0.0, 0
        steps_per_epoch = trainer.schedule.steps_per_epoch
        while state.step < epochs * steps_per_epoch:
            started = time.perf_counter()
            trainer.step(state)
            seconds += time.perf_counter() - started
            rows += batch
            if rows - last_evaluated < EVALUATE_EVERY_ROWS and state.step < epochs * steps_per_epoch:
                continue
            last_evaluated = rows
            nll = float(trainer.evaluate(state.params)["test_nll"])
            point = {"step": state.step, "epochs": round(state.step / steps_per_epoch, 3),
                     "training_seconds": round(seconds, 2), "test_nll": round(nll, 5)}
            trace.append(point)
            print({"batch": batch, "rule": rule, **point}, flush=True)
            if not math.isfinite(nll):
                break
            if nll <= target:
                reached = point
                break
    return {"batch_size": batch, "rule": rule, "learning_rate": config.learning_rate,
            "steps_per_epoch": steps_per_epoch, "reached": reached, "trace": trace}


def table(result: dict[str, Any]) -> str:
    """The docs table: steps, epochs and seconds to the target per setting, and the step count relative to
    the 10,000-row batch's."""
    runs = result["runs"]
    base = next(r for r in runs if r["batch_size"] == BASE_BATCH and r["rule"] == "constant")
    lines = [f"| global batch | learning rate | steps to NLL ≤ {result['target']} | fewer steps than 10,000-row "
             "batches | epochs | training seconds (one process) | last NLL |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        hit = r["reached"]
        last = r["trace"][-1]["test_nll"] if r["trace"] else float("nan")
        if hit and base["reached"]:
            fewer = f"{base['reached']['step'] / hit['step']:.1f}×"
        else:
            fewer = "–"
        lines.append(f"| {r['batch_size']:,} | {r['learning_rate']:g} ({r['rule']}) | "
                     f"{hit['step'] if hit else 'not reached'} | {fewer} | {hit['epochs'] if hit else '–'} | "
                     f"{hit['training_seconds'] if hit else '–'} | {last:.4f} |")
    lines += ["", f"Load: {result['uptime_before']} before, {result['uptime_after']} after."]
    return "\n".join(lines)


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_weak_scaling``."""
    parser = arguments(__doc__)
    parser.add_argument("--store", type=Path, help="airline store with 3 classes; ingested if absent")
    parser.add_argument("--target", type=float, default=0.90)
    parser.add_argument("--epochs", type=int, default=6)
    return parser


def main() -> None:
    args = cli().parse_args()
    from benchmarks._multiclass_run import airline_classes

    before = uptime()
    with temporary_directory() as scratch:
        store = args.store or airline_classes(scratch)
        runs = [run(store, batch, rule, args.target, args.epochs) for batch, rule in SETTINGS]
    path = write_results("bench_weak_scaling", {
        "store": str(args.store or "bundled airline flights, 3 classes"), "model": "multiclass-sep",
        "target": args.target, "max_epochs": args.epochs, "uptime_before": before, "uptime_after": uptime(),
        "runs": runs})
    print(table(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
