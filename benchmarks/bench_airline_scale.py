"""Airline scale (issue 25): Villacampa-Calvo & Hernández-Lobato's (2017) 2,127,068 flights ingested and trained for one epoch on ``local:2``.

The 2008 Data Expo flights cannot be downloaded here, so the rows are synthetic: ``pep ingest airline
--synthetic-rows 2127068`` draws Data Expo records with replacement from the bundled 2013 flights
(:mod:`pep_gp.pipeline.data.sources.synthetic_airline`); they measure throughput and memory, not
accuracy. In one run:

1. ingest: the synthetic rows into a store (the pipeline ``pep ingest`` runs), rows per second;
2. one epoch of ``multiclass-sep`` at bench_airline_multiclass's settings (M = 200 per class, 10,000-row
   minibatches in 2,500-row blocks, cosine Adam 0.05) on ``local:2``, in a fresh process: training rows
   per second (training steps only, the per-epoch evaluation apart), the coordinator's peak resident
   memory, each worker's, and the size of the final checkpoint;
3. the same on the bundled flights (263,853 training rows), with the same task (the airline default,
   three classes of arrival delay, which the synthetic rows take too), in another fresh process: the
   coordinator's memory must not grow with N (the data stays on the workers).

Usage::

    .venv/bin/python -m benchmarks.bench_airline_scale [--rows 2127068] [--cluster local:2]

Writes ``benchmarks/results/bench_airline_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

from benchmarks._common import RESULTS, Stopwatch, arguments, temporary_directory, write_results

ROOT = Path(__file__).resolve().parents[1]
SEED001_AIRLINE_ROWS = 2_127_068


def child(store: str, run_dir: str, cluster: str) -> None:
    """Train one epoch in this (fresh) process and print its figures as JSON."""
    from benchmarks._multiclass_run import EpochClock
    from benchmarks.bench_airline_multiclass import AIRLINE_SEP
    from pep_gp.pipeline.data.stores import open_store
    from pep_gp.pipeline.engine import connect
    from pep_gp.pipeline.training.trainer import Trainer, TrainJob

    backend = connect(cluster)
    clock = EpochClock(echo=False)
    try:
        data = open_store(store)
        trainer = Trainer(TrainJob("multiclass-sep", data, AIRLINE_SEP.model_copy(update={"epochs": 1}),
                                   Path(run_dir)), backend)
        with Stopwatch() as timer:
            result = trainer.run(progress=clock)
        wall = timer.seconds
        workers = backend.client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    finally:
        backend.close()
    checkpoint = result.checkpoint
    n_train = data.n_rows("train")
    print(json.dumps({
        "n_train": n_train, "steps": result.steps, "training_seconds": round(clock.training_seconds, 1),
        "training_rows_per_second": round(n_train / clock.training_seconds),
        "wall_seconds_with_evaluation": round(wall, 1), "rejected_steps": result.rejected_steps,
        "test_error": result.history[-1]["test_error"], "test_nll": result.history[-1]["test_nll"],
        "coordinator_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "worker_peak_rss_mb": sorted(round(kib / 1024, 1) for kib in workers.values()),
        "checkpoint_bytes": sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file()),
    }))


def train_in_a_new_process(store: Path, run_dir: Path, cluster: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_airline_scale", "--child", str(store),
                           str(run_dir), "--cluster", cluster], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(result, flush=True)
    return result


def table(result: dict) -> str:
    """The results page's table of one run: the synthetic and the bundled store side by side."""
    runs = (result["synthetic_run"], result["bundled_run"])
    ingest = result["ingest"]
    rows = [("training rows", *(f"{r['n_train']:,}" for r in runs)),
            ("steps (one epoch)", *(f"{r['steps']:,}" for r in runs)),
            ("training rows / s", *(f"{r['training_rows_per_second']:,}" for r in runs)),
            ("wall seconds, with the per-epoch evaluation", *(f"{r['wall_seconds_with_evaluation']:,}" for r in runs)),
            ("coordinator peak RSS", *(f"{r['coordinator_peak_rss_mb']:,} MB" for r in runs)),
            ("workers' peak RSS", *(" / ".join(f"{m:,}" for m in r["worker_peak_rss_mb"]) + " MB" for r in runs)),
            ("final checkpoint", *(f"{r['checkpoint_bytes'] / 2**20:.2f} MB" for r in runs)),
            # The synthetic rows are draws with replacement from the bundled flights: nearly every test row is
            # also a training row, so its held-out scores measure nothing and are not shown.
            ("test error / NLL after the epoch", "not shown (test rows repeat training rows)",
             f"{runs[1]['test_error']:.4f} / {runs[1]['test_nll']:.4f}")]
    lines = ["| | synthetic, the paper's size | bundled flights |", "|---|---|---|",
             *(f"| {a} | {b} | {c} |" for a, b, c in rows)]
    return "\n".join(lines + ["", f"Ingest: {ingest['rows']:,} synthetic rows in {ingest['seconds']} s "
                               f"({ingest['rows_per_second']:,} rows/s, store {ingest['store_mb']} MB); coordinator "
                               f"peak RSS synthetic / bundled: {result['coordinator_peak_rss_synthetic_over_bundled']} "
                               f"(`{result['cluster']}`)."])


def cli() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.bench_airline_scale``."""
    parser = arguments(__doc__, cluster="local:2")
    parser.add_argument("--rows", type=int, default=SEED001_AIRLINE_ROWS)
    parser.add_argument("--child", nargs=2, metavar=("STORE", "RUN_DIR"), help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = cli().parse_args()
    if args.child:
        child(*args.child, args.cluster)
        return
    from benchmarks._multiclass_run import airline_classes
    from pep_gp.pipeline.data.ingest import ingest
    from pep_gp.pipeline.data.sources import SourceRequest, open_source

    with temporary_directory(prefix="pep-bench-airline-scale-") as work:
        synthetic = work / "airline-synthetic.zarr"
        with Stopwatch() as timer:
            summary = ingest(open_source("airline", SourceRequest(synthetic_rows=args.rows)), synthetic)
        ingest_seconds = timer.seconds
        print({"ingested": args.rows, "seconds": round(ingest_seconds, 1)}, flush=True)
        store_bytes = sum(f.stat().st_size for f in synthetic.rglob("*") if f.is_file())
        large = train_in_a_new_process(synthetic, work / "run-synthetic", args.cluster)
        bundled = train_in_a_new_process(airline_classes(work), work / "run-bundled", args.cluster)
    write_results("bench_airline_scale", {
        "cluster": args.cluster, "model": "multiclass-sep", "settings": "benchmarks.bench_airline_multiclass.AIRLINE_SEP, 1 epoch",
        "ingest": {"rows": args.rows, "source": summary.source, "seconds": round(ingest_seconds, 1),
                   "rows_per_second": round(args.rows / ingest_seconds), "store_mb": round(store_bytes / 2**20, 1)},
        "synthetic_run": large, "bundled_run": bundled,
        "coordinator_peak_rss_synthetic_over_bundled": round(large["coordinator_peak_rss_mb"]
                                                             / bundled["coordinator_peak_rss_mb"], 3),
    })
    print(table(json.loads((RESULTS / "bench_airline_scale.json").read_text())))


if __name__ == "__main__":
    main()
