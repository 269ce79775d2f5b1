"""Coordinator CPU per step, by thread: this tree's engine against another pep source tree's, in one run.

Usage::

    .venv/bin/python -m benchmarks.bench_coordinator [--old-src /path/to/previous/checkout/src] \
        [--store airline-classes.zarr] [--cluster local:2] [--steps 5] [--rounds 1]

The airline step of :mod:`benchmarks.bench_engine` (``multiclass-sep``, 10,000-row steps in 1,000-row
blocks, M = 200 per class) on ``--cluster`` (``local:2``: TLS with temporary credentials), each engine in a
fresh process with a fresh cluster, the engines alternating ``--rounds`` times so both see the same load
(``bench_engine --one``). CPU time is what counts on a shared machine: per step, the coordinator process's
CPU in all (``coordinator_cpu_seconds``) and by kind of thread (``coordinator_cpu_by_thread``: the
trainer's Python on the main thread, Dask's event loop, XLA's named threads, and other threads, unnamed
ones that JAX's runtime starts and runs programs on), and *serving*, main + event loop: the coordinator's
CPU less its compiled programs, what the engine and the trainer's Python cost it. The parameters' digest after the run says whether both engines gave the
same bits. Without ``--old-src`` only this tree's engine runs (the same-bits column then says ``–``).

Writes ``benchmarks/results/bench_coordinator.json`` (with ``uptime``'s load before and after) and prints
the table of docs/results/benchmarks.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS, arguments, temporary_directory, uptime, write_results
from benchmarks.bench_engine import ROOT, run_one

INDUCING = 200
ENGINES = ("old", "new")
SERVING = ("main", "event loop")  # the threads that do not run the coordinator's compiled programs


def serving(row: dict[str, Any]) -> float:
    """The coordinator's CPU seconds per step less its compiled programs' (XLA's threads)."""
    return sum(row["coordinator_cpu_by_thread"][kind] for kind in SERVING)


def table(result: dict[str, Any]) -> str:
    """The results page's table: each engine's rows, their CPU per step by thread, and whether they end
    with the same bits."""
    digests = {row["params_sha256"] for rounds in result["runs"].values() for row in rounds}
    same = "–" if len(result["runs"]) == 1 else "yes" if len(digests) == 1 else "no"
    lines = ["| engine | round | s / step (median) | coordinator CPU, ms / step | main | event loop | XLA "
             "| other (JAX's) | serving (main + event loop) | payload / worker | same bits |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for engine in (engine for engine in ENGINES if engine in result["runs"]):
        for number, row in enumerate(result["runs"][engine], 1):
            threads = row["coordinator_cpu_by_thread"]
            lines.append(f"| {engine} | {number} | {row['seconds_per_step']:.3f} | "
                         f"{1e3 * row['coordinator_cpu_seconds']:.1f} | "
                         + " | ".join(f"{1e3 * threads[kind]:.1f}" for kind in ("main", "event loop", "XLA", "other"))
                         + f" | **{1e3 * serving(row):.1f}** | {row['payload_bytes_per_worker'] / 1e6:.3f} MB | "
                         f"{same} |")
    lines += ["", f"`--cluster {result['cluster']}`, M = {INDUCING}, {result['steps']} timed steps per row. "
              f"Load: {result['uptime_before']} before, {result['uptime_after']} after."]
    return "\n".join(lines)


def cli():
    """The command line of ``python -m benchmarks.bench_coordinator``."""
    parser = arguments(__doc__, steps=5, cluster="local:2")
    parser.add_argument("--old-src", type=Path, help="the src/ directory of the engine to compare with (default: none, "
                        "this tree's engine only)")
    parser.add_argument("--store", type=Path, help="airline store with 3 classes; ingested if absent")
    parser.add_argument("--rounds", type=int, default=1, help="rows per engine, alternating (default: %(default)s)")
    return parser


def main() -> None:
    args = cli().parse_args()
    from benchmarks._multiclass_run import airline_classes

    sources = {"new": ROOT / "src"} if args.old_src is None else {"old": args.old_src.resolve(), "new": ROOT / "src"}
    before = uptime()
    runs: dict[str, list[dict[str, Any]]] = {engine: [] for engine in sources}
    with temporary_directory() as scratch:
        store = args.store or airline_classes(scratch)
        for _ in range(args.rounds):
            for engine in sources:
                runs[engine].append(run_one(store, INDUCING, args.cluster, args.steps, sources[engine]))
                print({"engine": engine, **runs[engine][-1]}, flush=True)
    write_results("bench_coordinator", {
        "store": str(args.store or "bundled airline flights, 3 classes"), "model": "multiclass-sep",
        "num_inducing": INDUCING, "cluster": args.cluster, "steps": args.steps,
        "engines": {engine: "this tree" if engine == "new" else str(source) for engine, source in sources.items()},
        "uptime_before": before, "uptime_after": uptime(), "runs": runs})
    print(table(json.loads((RESULTS / "bench_coordinator.json").read_text())))


if __name__ == "__main__":
    main()
